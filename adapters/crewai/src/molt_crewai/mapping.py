"""CrewAI bus events → ATDP events. Runs on Molt's dispatcher thread, in the bus's emission order.

CrewAI pairs its own events: a ``*_started`` event opens a scope, and the matching ``*_completed`` /
``*_failed`` / ``*_error`` event names it in ``started_event_id``; ``parent_event_id`` names the
enclosing scope. The mapper keeps those links (never a "current" scope of its own) and turns each
closed scope into one event:

================================  =======================================================
crew kickoff                      ``agent_step`` (``crew``), the trajectory's root
task, agent execution             ``agent_step`` (``task``, ``agent``)
LLM call                          ``model_call``: messages, text or tool calls, usage
tool usage, MCP tool execution    ``tool_call``: name, arguments, output or error
memory query / retrieval / save   ``memory_read`` / ``memory_write``
knowledge query / search          ``retrieval``
human feedback requested/received ``human_approval`` (pending, then the decision)
================================  =======================================================

Other scopes (the agent's internal executor flow, reasoning, …) record nothing; what happens inside
them hangs under the nearest recorded scope.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from datetime import datetime
from typing import Any

try:  # which bus events open a scope (CrewAI pairs them with their ends)
    from crewai.events.event_context import SCOPE_STARTING_EVENTS as _SCOPES
except ImportError:  # pragma: no cover - older CrewAI: every *_started event
    _SCOPES = frozenset()

from molt.atdp import (
    AgentStep,
    ApprovalRequest,
    EventKind,
    Generation,
    MemoryRead,
    MemoryWrite,
    Message,
    Observation,
    Outcome,
    OutcomeStatus,
    Passage,
    RetrievalQuery,
    ToolCall,
    ToolCallRequest,
    Usage,
)
from molt.capture.adapt import CALL_ID_TAG, Capture, OpenSpan, SpanTable, bound_payload, error_outcome

#: started type -> how its scope is recorded (None: a hidden scope)
_RECORDED = {
    "crew_kickoff_started": "crew",
    "task_started": "task",
    "agent_execution_started": "agent",
    "lite_agent_execution_started": "agent",
    "llm_call_started": "llm",
    "tool_usage_started": "tool",
    "mcp_tool_execution_started": "tool",
    "memory_query_started": "memory_read",
    "memory_retrieval_started": "memory_read",
    "memory_save_started": "memory_write",
    "knowledge_query_started": "knowledge",
    "knowledge_search_query_started": "knowledge",
    "flow_started": "flow",
    "method_execution_started": "method",
}
_ROLES = {"system", "developer", "user", "assistant", "tool"}
_SAMPLING = ("temperature", "top_p", "max_tokens", "seed", "stop_sequences", "n")
_ROOTS = {"crew_kickoff_started", "flow_started", "lite_agent_execution_started"}


def _ns(ts: Any) -> int:
    return int(ts.timestamp() * 1e9) if isinstance(ts, datetime) else 0


class CrewAIMapper:
    """Bus events (in emission order) → ATDP events."""

    def __init__(self, capture: Capture, *, flush_on_kickoff_end: bool = True):
        self.capture = capture
        self.spans = SpanTable(capture)
        self.flush_on_kickoff_end = flush_on_kickoff_end
        # parent scope id -> tool calls its LLM call asked for: [(call id, name, arguments)]
        self._asked: dict[Any, list[tuple[str | None, str, Any]]] = {}
        self._feedback: OrderedDict[str, tuple[str, str, str | None, int, str]] = OrderedDict()

    def on_event(self, ev: Any) -> None:
        """Handle one bus event."""
        etype = getattr(ev, "type", "")
        started = getattr(ev, "started_event_id", None)
        if etype in _SCOPES or (not _SCOPES and etype.endswith("_started")):
            self._start(ev, etype)
        elif started is not None:
            self._end(ev, started)
        elif etype == "human_feedback_requested":
            self._feedback_requested(ev)
        elif etype == "human_feedback_received":
            self._feedback_received(ev)

    # ------------------------------------------------------------------ scopes

    def _start(self, ev: Any, etype: str) -> None:
        kind = _RECORDED.get(etype)
        parent = ev.parent_event_id
        hidden = kind is None
        if kind == "flow" and parent is not None and self._kind_of(parent) == "agent":
            hidden = True  # the agent's own executor flow is plumbing, not a step of the user's
        self.spans.open(ev.event_id, parent, _ns(ev.timestamp), hidden=hidden, kind=kind, start=ev)

    def _kind_of(self, key: Any) -> str | None:
        sp = self.spans.get(key)
        while sp is not None and sp.hidden and sp.data.get("start") is not None:
            sp = self.spans.get(sp.data["start"].parent_event_id)
        return sp.data.get("kind") if sp is not None else None

    def _end(self, ev: Any, started: str) -> None:
        sp = self.spans.close(started)
        if sp is None:
            return
        t_end = _ns(ev.timestamp)
        if not sp.hidden:
            self._emit(sp, ev, t_end)
        if sp.key == sp.root_key:
            for child in self.spans.open_under(sp.key):
                if self.spans.close(child.key) is not None and not child.hidden:
                    self._emit(child, None, t_end)
            self._asked = {k: v for k, v in self._asked.items() if self.spans.resolve(k) is not None}
            if self.flush_on_kickoff_end and sp.data["kind"] == "crew":
                self.capture.recorder.flush(5.0)  # the kickoff is over: make its events durable now

    # ------------------------------------------------------------------ events

    def _emit(self, sp: OpenSpan, end: Any, t_end: int) -> None:
        c, start, kind = self.capture, sp.data["start"], sp.data["kind"]
        common: dict[str, Any] = dict(
            trajectory_id=sp.trajectory_id,
            event_id=sp.event_id,
            parent_id=sp.parent_event_id,
            start_ns=sp.start_ns,
            end_ns=t_end,
        )
        role = getattr(start, "agent_role", None) or getattr(getattr(start, "agent", None), "role", None)
        if role:
            common["tags"] = {"agent_role": str(role)}
        if end is None:
            outcome: Outcome | None = Outcome(
                status=OutcomeStatus.CANCELLED, output={"reason": "the kickoff ended first"}
            )
        elif getattr(end, "error", None) is not None:
            outcome = error_outcome({"type": _error_type(end), "message": str(end.error)})
        else:
            outcome = None
        if kind == "llm":
            ev = self._model_event(start, end if outcome is None else None, outcome, common)
        elif kind == "tool":
            name = str(getattr(start, "tool_name", None) or "tool")
            args = _args(getattr(start, "tool_args", None) or getattr(start, "tool_arguments", None))
            call_id = self._match(start.parent_event_id, name, args)
            out = outcome or Outcome(output=c.payload(getattr(end, "output", getattr(end, "result", None))))
            ev = c.event(
                EventKind.TOOL_CALL,
                name=name,
                action=ToolCall(tool_name=name, call_id=call_id, arguments=c.payload(args)),
                outcome=out,
                **common,
            )
        elif kind == "memory_read":
            query = getattr(start, "query", None) or getattr(end, "query", None)
            result = getattr(end, "results", None) or getattr(end, "memory_content", None)
            ev = c.event(
                EventKind.MEMORY_READ,
                name=start.type.removesuffix("_started"),
                action=MemoryRead(query=str(query) if query else None),
                outcome=outcome or Outcome(output=c.payload(result)),
                **common,
            )
        elif kind == "memory_write":
            value = getattr(start, "value", None) or getattr(end, "value", None)
            ev = c.event(
                EventKind.MEMORY_WRITE,
                name="memory_save",
                action=MemoryWrite(content=c.payload({"value": value, "metadata": getattr(start, "metadata", None)})),
                outcome=outcome or Outcome(),
                **common,
            )
        elif kind == "knowledge":
            query = getattr(end, "query", None) or getattr(start, "task_prompt", None) or ""
            found = getattr(end, "retrieved_knowledge", None)
            ev = c.event(
                EventKind.RETRIEVAL,
                name=start.type.removesuffix("_started"),
                action=RetrievalQuery(query=str(query)[:8000], index="crewai:knowledge"),
                observation=Observation(passages=[Passage(text=str(bound_payload(str(found))))]) if found else None,
                outcome=outcome or Outcome(),
                **common,
            )
        else:
            name, inputs, output = _step(kind, start, end)
            ev = c.event(
                EventKind.AGENT_STEP,
                name=name,
                action=AgentStep(name=name, step_type=kind, inputs=c.payload(inputs)),
                outcome=outcome or Outcome(output=c.payload(output)),
                **common,
            )
        c.record(ev)

    def _model_event(self, start: Any, end: Any, outcome: Outcome | None, common: dict[str, Any]) -> Any:
        c = self.capture
        model = getattr(start, "model", None) or getattr(end, "model", None)
        text, calls = None, []
        if end is not None:
            resp = end.response
            if isinstance(resp, list):
                calls = [_call(tc) for tc in resp]
            elif resp is not None:
                text = str(getattr(resp, "content", resp))
        self._asked.setdefault(start.parent_event_id, []).extend((i, n, a) for i, n, a in calls)
        usage = _usage(getattr(end, "usage", None))
        sampling = {k: c.payload(getattr(start, k)) for k in _SAMPLING if getattr(start, k, None) is not None} or None
        action = Generation(
            model=str(model) if model else None,
            text=c.payload(text) if text else None,
            tool_calls=[ToolCallRequest(id=i, name=n, arguments=c.payload(a)) for i, n, a in calls] or None,
            finish_reason=getattr(end, "finish_reason", None) or ("tool_calls" if calls else None),
            sampling=sampling,
        )
        call = getattr(end, "response_id", None)
        if isinstance(call, str) and call:  # a gateway handed this event joins its run to the call's trajectory
            common = {**common, "tags": {**(common.get("tags") or {}), CALL_ID_TAG: call[:200]}}
        return c.event(
            EventKind.MODEL_CALL,
            name=str(model) if model else "llm",
            model=str(model) if model else None,
            usage=usage,
            action=action,
            observation=_observation(c, start.messages),
            outcome=outcome or Outcome(),
            **common,
        )

    def _match(self, parent: Any, name: str, args: Any) -> str | None:
        asked = self._asked.get(parent)
        if not asked:
            return None
        for exact in (True, False):
            for i, (cid, n, a) in enumerate(asked):
                if n == name and (not exact or a == args):
                    del asked[i]
                    return cid
        return None

    # ------------------------------------------------------------------ human feedback

    def _feedback_requested(self, ev: Any) -> None:
        c = self.capture
        parent = self.spans.resolve(ev.parent_event_id) if ev.parent_event_id else None
        if parent is None:
            return
        parent_id, tid, _ = parent
        t = _ns(ev.timestamp)
        rec = c.event(
            EventKind.HUMAN_APPROVAL,
            trajectory_id=tid,
            parent_id=parent_id,
            start_ns=t,
            end_ns=t,
            name=str(ev.method_name),
            action=ApprovalRequest(request=str(ev.message)[:4000], options=[str(o) for o in ev.emit or []] or None),
            outcome=Outcome(status=OutcomeStatus.PENDING, output=c.payload(ev.output)),
        )
        c.record(rec)
        key = str(ev.request_id or ev.method_name)
        self._feedback[key] = (rec.event_id, tid, parent_id, t, str(ev.message))
        if len(self._feedback) > 10_000:
            self._feedback.popitem(last=False)

    def _feedback_received(self, ev: Any) -> None:
        c = self.capture
        found = self._feedback.pop(str(ev.request_id or ev.method_name), None)
        if found is None:
            return
        request_id, tid, _parent, t_req, message = found
        outcome = str(ev.outcome or "")
        status = (
            OutcomeStatus.DENIED if outcome.lower() in {"reject", "rejected", "deny", "denied"} else OutcomeStatus.OK
        )
        c.record(
            c.event(
                EventKind.HUMAN_APPROVAL,
                trajectory_id=tid,
                parent_id=request_id,
                start_ns=t_req,
                end_ns=_ns(ev.timestamp),
                name=str(ev.method_name),
                action=ApprovalRequest(request=message[:4000]),
                outcome=Outcome(status=status, output=c.payload({"feedback": ev.feedback, "outcome": ev.outcome})),
            )
        )


# ---------------------------------------------------------------------- conversions


def _error_type(end: Any) -> str:
    et = getattr(end, "error_type", None)
    if et is not None:
        return str(getattr(et, "__name__", et))
    return "ToolError" if "tool" in end.type else end.type


def _args(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def _call(tc: Any) -> tuple[str | None, str, Any]:
    if isinstance(tc, dict):
        fn = tc.get("function") or {}
        return tc.get("id"), str(fn.get("name") or tc.get("name") or "?"), _args(fn.get("arguments", tc.get("args")))
    fn = getattr(tc, "function", None)
    return getattr(tc, "id", None), str(getattr(fn, "name", None) or "?"), _args(getattr(fn, "arguments", None))


def _usage(u: Any) -> Usage | None:
    if not isinstance(u, dict) or not u:
        return None
    inp = u.get("prompt_tokens", u.get("input_tokens"))
    out = u.get("completion_tokens", u.get("output_tokens"))
    total = u.get("total_tokens")
    if total is None and inp is not None and out is not None:
        total = inp + out
    return Usage(input_tokens=inp, output_tokens=out, total_tokens=total)


def _observation(c: Capture, messages: Any) -> Observation | None:
    if not messages:
        return None
    if isinstance(messages, str):
        return Observation(text=c.payload(messages))
    msgs = list(messages)[-100:]
    budget = max(2048, c.max_field_bytes // max(1, len(msgs)))
    out = []
    for m in msgs:
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            continue
        content = bound_payload(m.get("content"), max_bytes=budget, blob_store=c.blob_store)
        calls = [
            ToolCallRequest(id=i, name=n, arguments=bound_payload(a, max_bytes=budget))
            for i, n, a in (_call(tc) for tc in m.get("tool_calls") or [])
        ] or None
        out.append(
            Message(
                role=m["role"],
                content=content if isinstance(content, str | list) or content is None else str(content),
                tool_call_id=m.get("tool_call_id"),
                tool_calls=calls,
            )
        )
    return Observation(messages=out)


def _step(kind: str, start: Any, end: Any) -> tuple[str, Any, Any]:
    """(name, inputs, output) of a crew, task, agent, flow or method scope."""
    output = getattr(end, "output", None)
    output = getattr(output, "raw", output)
    if kind == "crew":
        return str(getattr(start, "crew_name", None) or "crew"), getattr(start, "inputs", None), output
    if kind == "task":
        return str(start.task_name or "task"), {"context": getattr(start, "context", None)}, output
    if kind == "agent":
        role = (
            getattr(start, "agent_role", None)
            or getattr(getattr(start, "agent", None), "role", None)
            or (getattr(start, "agent_info", None) or {}).get("role")
        )
        return str(role or "agent"), getattr(start, "task_prompt", None), output
    if kind == "flow":
        return (
            str(getattr(start, "flow_name", None) or "flow"),
            getattr(start, "inputs", None),
            getattr(end, "result", output),
        )
    return (
        str(getattr(start, "method_name", None) or kind),
        getattr(start, "params", None),
        getattr(end, "result", output),
    )
