"""Property-based fuzzing of the CrewAI listener's event mapping (issue 10, item 5; the other adapters'
are in ``tests/reliability/test_adapter_fuzz.py``).

Two properties, both with CrewAI's own event classes:

- *hostile*: every event class the listener subscribes to, its fields set to anything at all (arbitrary
  JSON, NaN, integers past 64 bits, bytes, lone surrogates, deep nesting, cycles, objects that cannot be
  printed, wrong types) and its ids out of order (an end before its start, an end twice, a parent that
  never started), handed to the listener's bus handler: the handler never raises, every stored chain
  verifies and every record unseals to a valid ATDP event;
- *typed*: validly built events with hostile content (long strings, NaN, huge integers, surrogate keys),
  emitted through the real bus as a crew or flow would: additionally, not one event is lost.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "crewai", reason="CrewAI lives in .venv-crewai: .venv-crewai/bin/python -m pytest tests/adapters/crewai"
)

from crewai.events import crewai_event_bus
from crewai.events.types import (
    crew_events,
    flow_events,
    knowledge_events,
    llm_events,
    mcp_events,
    memory_events,
    task_events,
    tool_usage_events,
)
from crewai.events.types.agent_events import (
    LiteAgentExecutionCompletedEvent,
    LiteAgentExecutionErrorEvent,
    LiteAgentExecutionStartedEvent,
)
from crewai.tasks.task_output import TaskOutput
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from molt.atdp.chain import unseal, verify_chain
from molt.capture import MemorySink, Recorder
from molt_crewai import MoltEventListener

pytestmark = pytest.mark.crewai
EXAMPLES = settings(max_examples=int(os.environ.get("FUZZ_N", 100)), deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


class Unprintable:
    """An object whose repr and str raise."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")

    def __str__(self) -> str:
        raise RuntimeError("no str for you")


def _deep(n: int) -> Any:
    v: Any = "bottom"
    for i in range(n):
        v = [v] if i % 2 else {"k": v}
    return v


def _cycle() -> list[Any]:
    c: list[Any] = [1]
    c.append(c)
    return c


_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)  # lone surrogates too
_scalars = (st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.floats(allow_nan=True) | _text
            | st.binary(max_size=30))
_json = st.recursive(_scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(_text, c, max_size=4),
                     max_leaves=20)
_any = (_json | st.builds(object) | st.builds(Unprintable) | st.integers(40, 200).map(_deep) | st.builds(_cycle)
        | st.sets(st.integers(), max_size=3) | st.builds(lambda m: RuntimeError(m), _text)
        | st.builds(lambda: datetime.max.replace(tzinfo=UTC)))
hostile = st.deferred(lambda: _any)

_long = st.integers(250, 1200).map(lambda n: "x" * n)
_str = st.text(st.characters(codec="utf-8"), max_size=40) | _long  # valid text where CrewAI declares str
_jsonv = st.recursive(st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.floats(allow_nan=True) | _str,
                      lambda c: st.lists(c, max_size=4) | st.dictionaries(_text, c, max_size=4), max_leaves=20)
_obj = st.dictionaries(_text, _jsonv, max_size=4)


def _check_store(sink: MemorySink) -> None:
    assert sink.events, "nothing was recorded"
    for tid in {r.x["trajectory_id"] for r in sink.events.values()}:
        sealed = sink.sealed_events(tid)
        assert verify_chain(tid, sealed).ok, tid
        for s in sealed:
            unseal(s.envelope, s.payload)


def _listener(tmp_path: Path) -> tuple[MemorySink, Recorder, MoltEventListener]:
    sink = MemorySink()
    # raw capture: what the adapter maps, value by value (governance would redact some of it)
    rec = Recorder(sink, spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0, pipeline=None)
    return sink, rec, MoltEventListener(rec, tenant_id="acme")


# ------------------------------------------------------------------------------------------ hostile

#: what the mapper reads besides each class's own fields (some classes lack them: getattr's default)
_READ = ("agent_role", "agent", "tool_name", "tool_args", "tool_arguments", "query", "value", "metadata",
         "task_prompt", "model", "messages", "temperature", "top_p", "max_tokens", "seed", "stop_sequences", "n",
         "crew_name", "inputs", "task_name", "context", "agent_info", "flow_name", "method_name", "params",
         "error", "error_type", "output", "result", "response", "usage", "finish_reason", "results",
         "memory_content", "retrieved_knowledge", "message", "emit", "request_id", "outcome", "feedback")
_IDS = st.sampled_from(["e0", "e1", "e2", "e3", "e4"])


@st.composite
def _hostile_event(draw: Any, classes: list[type]) -> Any:
    cls = draw(st.sampled_from(classes))
    names = [n for n in cls.model_fields if n in _READ or n not in ("type",)]
    fields = draw(st.fixed_dictionaries({}, optional={n: hostile for n in names if n in _READ}))
    fields.update(event_id=draw(_IDS | hostile), parent_event_id=draw(st.none() | _IDS | hostile),
                  timestamp=draw(st.builds(datetime.now, st.just(UTC)) | hostile))
    if not cls.model_fields["type"].default.endswith("_started"):
        fields["started_event_id"] = draw(st.none() | _IDS | hostile)
    return cls.model_construct(**{k: v for k, v in fields.items() if k in cls.model_fields})


@pytest.mark.slow
def test_crewai_mapping_of_hostile_events_never_raises_and_records_valid_events(tmp_path: Path) -> None:
    sink, rec, listener = _listener(tmp_path)
    try:
        assert listener._registered, "the listener subscribed to nothing"
        handlers = {h for _, h in listener._registered}
        assert len(handlers) == 1
        [on_bus_event] = handlers  # what the bus calls for every event type the listener subscribed to
        classes = [cls for cls, _ in listener._registered]

        @EXAMPLES
        @given(events=st.lists(_hostile_event(classes), min_size=1, max_size=10), source=hostile,
               name=_str)
        def run(events: list[Any], source: Any, name: str) -> None:
            async def go() -> None:
                for ev in events:
                    assert await on_bus_event(source, ev) is None
                # and one well-formed kickoff, so every example records something
                start = crew_events.CrewKickoffStartedEvent(crew_name=name, inputs=None)
                await on_bus_event(None, start)
                await on_bus_event(None, crew_events.CrewKickoffCompletedEvent(
                    crew_name=name, output="ok", started_event_id=start.event_id))

            asyncio.run(go())

        run()
        assert listener.flush(timeout=60, deliver=True)
        assert rec.flush(timeout=60, deliver=True)
        _check_store(sink)
    finally:
        listener.close()
        rec.close()


# ------------------------------------------------------------------------------------------ typed


def _now() -> datetime:
    return datetime.now(UTC)


_n = st.integers(0, 2**31)
_call = st.builds(lambda i, nm, a: {"id": i, "type": "function", "function": {"name": nm, "arguments": a}},
                  _str, _str, _str)
_message = st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "tool"]),
                                  "content": _str}, optional={"tool_calls": st.lists(_call, max_size=2)})
_error = _str | st.builds(lambda m: RuntimeError(m), _str)
_usage = st.none() | st.fixed_dictionaries({}, optional={"prompt_tokens": _n, "completion_tokens": _n,
                                                         "total_tokens": _n})

# kind -> (start, ok end, failed end) strategies of keyword arguments, and the classes
_LEAVES: dict[str, tuple[Any, ...]] = {
    "llm": (llm_events.LLMCallStartedEvent, llm_events.LLMCallCompletedEvent, llm_events.LLMCallFailedEvent,
            st.fixed_dictionaries({"call_id": _str}, optional={
                "model": _str, "messages": st.lists(_message, max_size=3) | _str, "temperature": st.floats(0, 2),
                "seed": _n, "stop_sequences": st.lists(_str, max_size=2)}),
            st.fixed_dictionaries({"call_id": _str, "call_type": st.sampled_from(list(llm_events.LLMCallType)),
                                   "response": _jsonv | st.lists(_call, min_size=1, max_size=2)},
                                  optional={"usage": _usage, "model": _str, "finish_reason": _str}),
            st.fixed_dictionaries({"call_id": _str, "error": _str})),
    "tool": (tool_usage_events.ToolUsageStartedEvent, tool_usage_events.ToolUsageFinishedEvent,
             tool_usage_events.ToolUsageErrorEvent,
             st.fixed_dictionaries({"tool_name": _str, "tool_args": _obj | _str}),
             st.fixed_dictionaries({"tool_name": _str, "tool_args": _obj | _str, "output": _jsonv,
                                    "started_at": st.builds(_now), "finished_at": st.builds(_now)}),
             st.fixed_dictionaries({"tool_name": _str, "tool_args": _obj | _str, "error": _error})),
    "mcp": (mcp_events.MCPToolExecutionStartedEvent, mcp_events.MCPToolExecutionCompletedEvent,
            mcp_events.MCPToolExecutionFailedEvent,
            st.fixed_dictionaries({"server_name": _str, "tool_name": _str}, optional={"tool_args": _obj}),
            st.fixed_dictionaries({"server_name": _str, "tool_name": _str}, optional={"result": _jsonv}),
            st.fixed_dictionaries({"server_name": _str, "tool_name": _str, "error": _str},
                                  optional={"error_type": _str})),
    "memory_query": (memory_events.MemoryQueryStartedEvent, memory_events.MemoryQueryCompletedEvent,
                     memory_events.MemoryQueryFailedEvent,
                     st.fixed_dictionaries({"query": _str, "limit": _n}),
                     st.fixed_dictionaries({"query": _str, "limit": _n, "results": _jsonv,
                                            "query_time_ms": st.floats(0, 1e6)}),
                     st.fixed_dictionaries({"query": _str, "limit": _n, "error": _str})),
    "memory_save": (memory_events.MemorySaveStartedEvent, memory_events.MemorySaveCompletedEvent,
                    memory_events.MemorySaveFailedEvent,
                    st.fixed_dictionaries({}, optional={"value": _str, "metadata": _obj}),
                    st.fixed_dictionaries({"value": _str, "save_time_ms": st.floats(0, 1e6)},
                                          optional={"metadata": _obj}),
                    st.fixed_dictionaries({"error": _str})),
    "memory_retrieval": (memory_events.MemoryRetrievalStartedEvent, memory_events.MemoryRetrievalCompletedEvent,
                         memory_events.MemoryRetrievalFailedEvent, st.just({}),
                         st.fixed_dictionaries({"memory_content": _str, "retrieval_time_ms": st.floats(0, 1e6)}),
                         st.fixed_dictionaries({"error": _str})),
    "knowledge_query": (knowledge_events.KnowledgeQueryStartedEvent, knowledge_events.KnowledgeQueryCompletedEvent,
                        knowledge_events.KnowledgeQueryFailedEvent,
                        st.fixed_dictionaries({"task_prompt": _str}), st.fixed_dictionaries({"query": _str}),
                        st.fixed_dictionaries({"error": _str})),
    "knowledge_search": (knowledge_events.KnowledgeRetrievalStartedEvent,
                         knowledge_events.KnowledgeRetrievalCompletedEvent,
                         knowledge_events.KnowledgeSearchQueryFailedEvent, st.just({}),
                         st.fixed_dictionaries({"query": _str, "retrieved_knowledge": _str}),
                         st.fixed_dictionaries({"query": _str, "error": _str})),
    "method": (flow_events.MethodExecutionStartedEvent, flow_events.MethodExecutionFinishedEvent,
               flow_events.MethodExecutionFailedEvent,
               st.fixed_dictionaries({"flow_name": _str, "method_name": _str, "state": _obj},
                                     optional={"params": _obj}),
               st.fixed_dictionaries({"flow_name": _str, "method_name": _str, "state": _obj},
                                     optional={"result": _jsonv}),
               st.fixed_dictionaries({"flow_name": _str, "method_name": _str,
                                      "error": st.builds(lambda m: RuntimeError(m), _str)})),
    "lite_agent": (LiteAgentExecutionStartedEvent, LiteAgentExecutionCompletedEvent, LiteAgentExecutionErrorEvent,
                   st.fixed_dictionaries({"agent_info": _obj, "tools": st.just([]),
                                          "messages": _str | st.lists(_message, max_size=2)}),
                   st.fixed_dictionaries({"agent_info": _obj, "output": _str}),
                   st.fixed_dictionaries({"agent_info": _obj, "error": _str})),
    "task": (task_events.TaskStartedEvent, task_events.TaskCompletedEvent, task_events.TaskFailedEvent,
             st.fixed_dictionaries({"context": st.none() | _str}),
             st.builds(lambda d, r, a: {"output": TaskOutput(description=d, raw=r, agent=a)}, _str, _str, _str),
             st.fixed_dictionaries({"error": _str})),
}
_ROOTS = {
    "crew": (crew_events.CrewKickoffStartedEvent, crew_events.CrewKickoffCompletedEvent,
             crew_events.CrewKickoffFailedEvent,
             st.fixed_dictionaries({"crew_name": st.none() | _str, "inputs": st.none() | _obj}),
             st.fixed_dictionaries({"crew_name": st.none() | _str, "output": _jsonv}),
             st.fixed_dictionaries({"crew_name": st.none() | _str, "error": _str})),
    "flow": (flow_events.FlowStartedEvent, flow_events.FlowFinishedEvent, flow_events.FlowFailedEvent,
             st.fixed_dictionaries({"flow_name": _str}, optional={"inputs": _obj}),
             st.fixed_dictionaries({"flow_name": _str, "state": _obj}, optional={"result": _jsonv}),
             st.fixed_dictionaries({"flow_name": _str, "error": st.builds(lambda m: RuntimeError(m), _str)})),
}


@st.composite
def _scope(draw: Any, kinds: dict[str, tuple[Any, ...]], depth: int) -> list[Any]:
    """The events of one scope (start, children, ok or failed end) in emission order."""
    kind = draw(st.sampled_from(sorted(kinds)))
    start_cls, ok_cls, fail_cls, start_kw, ok_kw, fail_kw = kinds[kind]
    failed = draw(st.booleans())
    children: list[Any] = []
    if depth < 2 and kind in ("crew", "flow", "task", "lite_agent", "method"):
        for child in draw(st.lists(_scope(_LEAVES, depth + 1), max_size=3)):
            children += child
        if draw(st.booleans()):  # a human feedback request and its answer
            rid = draw(st.none() | _str)
            fn, mn = draw(_str), draw(_str)
            children.append(flow_events.HumanFeedbackRequestedEvent(
                flow_name=fn, method_name=mn, output=draw(_jsonv), message=draw(_str),
                emit=draw(st.none() | st.lists(_str, max_size=2)), request_id=rid))
            children.append(flow_events.HumanFeedbackReceivedEvent(
                flow_name=fn, method_name=mn, feedback=draw(_str),
                outcome=draw(st.none() | st.sampled_from(["approve", "reject"]) | _str), request_id=rid))
    end = (fail_cls, draw(fail_kw)) if failed else (ok_cls, draw(ok_kw))
    return [(start_cls, draw(start_kw)), *children, end]


@pytest.mark.slow
def test_crewai_typed_events_with_hostile_content_through_the_bus_lose_no_event(tmp_path: Path) -> None:
    sink, rec, listener = _listener(tmp_path)
    try:
        @EXAMPLES
        @given(scope=_scope(_ROOTS, 0))
        def run(scope: list[Any]) -> None:
            def emit_all() -> None:  # the bus keeps its scope stack in context variables: a fresh one
                for item in scope:
                    ev = item[0](**item[1]) if isinstance(item, tuple) else item
                    crewai_event_bus.emit(None, ev)

            contextvars.copy_context().run(emit_all)

        run()
        assert listener.flush(timeout=60, deliver=True)
        stats = listener.stats
        assert stats.errors == 0, stats.last_error
        assert stats.dropped == 0 and stats.open_spans == 0, stats
        _check_store(sink)
    finally:
        listener.close()
        rec.close()
