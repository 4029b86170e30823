"""A toy agent framework and a reference adapter for it, used to test the conformance suite itself.

The toy framework reports runs through callbacks keyed by run ids, the way LangChain does; the
reference adapter shows the shape every real adapter has (agent-thread entry points that only
``submit``, a mapper on the dispatcher thread using :class:`~molt.capture.adapt.SpanTable`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

from molt.atdp import (
    AgentStep,
    ApprovalRequest,
    EventKind,
    Generation,
    Observation,
    Outcome,
    Passage,
    RetrievalQuery,
    ToolCall,
    ToolCallRequest,
)
from molt.capture.adapt import SpanTable, error_outcome
from molt.capture.instrumentor import Instrumentor
from molt.testing import FAIL_TOOL, HUGE_TEXT_CHARS, OK_TOOL, Script, huge_blob


class ToyAgent:
    """A scripted agent that reports each step to ``callbacks`` (``on_start``/``on_end``/``on_error``)."""

    def __init__(self, callbacks: Any = None):
        self.cb = callbacks

    def _call(self, name: str, *args: Any) -> None:
        if self.cb is not None:
            # the toy framework, like LangChain, swallows handler errors
            with contextlib.suppress(Exception):
                getattr(self.cb, name)(*args)

    def _step(self, kind: str, parent: uuid.UUID | None, name: str, inputs: Any, fn: Any) -> Any:
        rid = uuid.uuid4()
        self._call("on_start", kind, rid, parent, name, inputs)
        try:
            out = fn(rid)
        except BaseException as exc:
            self._call("on_error", rid, exc)
            raise
        self._call("on_end", rid, out)
        return out

    def run(self, script: Script) -> str:
        """Run the conformance story; returns the final answer."""
        m = script.marker
        return self._step("agent", None, "toy-agent", {"request": f"help {m}"}, lambda rid: self._body(rid, m, script))

    def _body(self, rid: uuid.UUID, m: str, script: Script) -> str:
        calls = [
            {"id": f"call-{m}-1", "name": OK_TOOL, "arguments": {"query": m}},
            {"id": f"call-{m}-2", "name": FAIL_TOOL, "arguments": {"reason": m}},
        ]
        self._step("model", rid, "toy-model", [f"help {m}"], lambda _r: {"text": None, "tool_calls": calls})
        results = []
        for c in calls:
            try:
                results.append(self._step("tool", rid, c["name"], c, lambda _r, c=c: self._tool(c, script)))
            except ValueError as exc:
                results.append(f"error: {exc}")
        self._step("retriever", rid, "toy-index", m, lambda _r: [f"passage one about {m}", f"passage two about {m}"])
        self._step("approval", rid, "approve-answer", f"may I answer about {m}?", lambda _r: "approve")
        out = self._step("model", rid, "toy-model", results, lambda _r: {"text": f"done: {m}", "tool_calls": []})
        return str(out["text"])

    @staticmethod
    def _tool(call: dict[str, Any], script: Script) -> Any:
        if call["name"] == FAIL_TOOL:
            raise ValueError(f"explode failed for {call['arguments']['reason']}")
        if script.huge_output:
            return {
                "text": f"result for {call['arguments']['query']} " + "lorem ipsum " * (HUGE_TEXT_CHARS // 12),
                "image": huge_blob(),
            }
        return f"result for {call['arguments']['query']}"

    async def arun(self, script: Script) -> str:
        """The async variant: yields to the loop between steps, so two runs interleave."""
        await asyncio.sleep(0)
        rid = uuid.uuid4()
        m = script.marker
        self._call("on_start", "agent", rid, None, "toy-agent", {"request": f"help {m}"})
        await asyncio.sleep(0.001)
        out = self._body(rid, m, script)
        await asyncio.sleep(0.001)
        self._call("on_end", rid, out)
        return out

    def stream(self, script: Script) -> Iterator[str]:
        """Stream the final answer word by word (a generator the consumer may close early)."""
        root, model = uuid.uuid4(), uuid.uuid4()
        self._call("on_start", "agent", root, None, "toy-agent", {"request": f"help {script.marker}"})
        self._call("on_start", "model", model, root, "toy-model", [f"help {script.marker}"])
        try:
            yield from ("done:", script.marker, "and", "more")
        except BaseException as exc:
            self._call("on_error", model, exc)
            self._call("on_error", root, exc)
            raise
        self._call("on_end", model, {"text": f"done: {script.marker} and more", "tool_calls": []})
        self._call("on_end", root, "done")


class ToyHandler(Instrumentor):
    """The reference adapter for :class:`ToyAgent` — and the shape of one whose framework offers no hook
    to apply a policy version (the toy agent's callbacks only observe)."""

    integration = "molt-core"
    framework = "toy"
    framework_dist = "pytest"
    framework_min = "7.0"
    install = 'pip install "pytest>=7"'
    no_version_hook = "the toy agent's callbacks only observe; nothing in it lets a callback edit a model call"

    def __init__(self, recorder: Any, *, strict: bool = False):
        super().__init__(recorder, strict=strict)
        self.spans = SpanTable(self.capture)

    # agent thread: take the time, queue, return
    def on_start(self, kind: str, run_id: Any, parent: Any, name: str, inputs: Any) -> None:
        try:
            self.capture.submit(self._start, kind, run_id, parent, name, inputs, time.time_ns())
        except Exception as exc:
            self.capture.fail(exc)

    def on_end(self, run_id: Any, output: Any) -> None:
        try:
            self.capture.submit(self._end, run_id, Outcome(output=None), output, time.time_ns())
        except Exception as exc:
            self.capture.fail(exc)

    def on_error(self, run_id: Any, exc: BaseException) -> None:
        try:
            self.capture.submit(self._end, run_id, error_outcome(exc), None, time.time_ns())
        except Exception as err:
            self.capture.fail(err)

    # dispatcher thread
    def _parent_key(self, parent: Any) -> Any:
        return parent

    def _start(self, kind: str, run_id: Any, parent: Any, name: str, inputs: Any, t: int) -> None:
        self.spans.open(run_id, self._parent_key(parent), t, kind=kind, name=name, inputs=inputs)

    def _end(self, run_id: Any, outcome: Outcome, output: Any, t: int) -> None:
        sp = self.spans.close(run_id)
        if sp is None:
            return
        c, d = self.capture, sp.data
        if outcome.status == "ok":
            outcome = Outcome(output=c.payload(output))
        common = dict(
            trajectory_id=sp.trajectory_id,
            event_id=sp.event_id,
            parent_id=sp.parent_event_id,
            start_ns=sp.start_ns,
            end_ns=t,
            name=d["name"],
            outcome=outcome,
        )
        kind = d["kind"]
        if kind == "model":
            out = output or {}
            ev = c.event(
                EventKind.MODEL_CALL,
                model="toy-model",
                usage={"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
                action=Generation(
                    model="toy-model",
                    text=out.get("text"),
                    tool_calls=[ToolCallRequest(**tc) for tc in out.get("tool_calls", [])],
                ),
                **common,
            )
        elif kind == "tool":
            ev = c.event(
                EventKind.TOOL_CALL,
                action=ToolCall(
                    tool_name=d["name"],
                    call_id=d["inputs"]["id"],
                    arguments=c.payload(d["inputs"]["arguments"]),
                ),
                **common,
            )
        elif kind == "retriever":
            ev = c.event(
                EventKind.RETRIEVAL,
                action=RetrievalQuery(query=d["inputs"]),
                observation=Observation(passages=[Passage(text=p) for p in output or []]),
                **common,
            )
        elif kind == "approval":
            ev = c.event(EventKind.HUMAN_APPROVAL, action=ApprovalRequest(request=d["inputs"]), **common)
        else:
            ev = c.event(
                EventKind.AGENT_STEP,
                action=AgentStep(name=d["name"], inputs=c.payload(d["inputs"])),
                **common,
            )
        c.record(ev)
        if sp.key == sp.root_key:  # a root that ends closes what is still open below it
            for child in self.spans.open_under(sp.key):
                self._end(child.key, error_outcome(GeneratorExit("parent ended")), None, t)

    def flush(self, timeout: float = 10.0, *, deliver: bool = False) -> bool:
        """Wait until captured events are durable (and delivered, with ``deliver``)."""
        return self.capture.flush(timeout, deliver=deliver)
