"""ATDP ↔ OpenTelemetry GenAI span mapping."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from molt.atdp import (
    AgentStep,
    Event,
    EventKind,
    Generation,
    Metadata,
    Outcome,
    RetrievalQuery,
    ToolCall,
    Usage,
    event_to_span,
    span_to_event,
)
from molt.atdp.otel import OtelSpan

_text = st.text(min_size=1, max_size=20)
_json = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | _text,
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(_text, c, max_size=3), max_leaves=8)

_actions = st.one_of(
    st.builds(lambda m, t: (EventKind.MODEL_CALL, Generation(model=m, text=t, finish_reason="stop")), _text, _text),
    st.builds(lambda n, a: (EventKind.TOOL_CALL, ToolCall(tool_name=n, arguments=a)), _text, _json),
    st.builds(lambda q: (EventKind.RETRIEVAL, RetrievalQuery(query=q, index="kb")), _text),
    st.builds(lambda n: (EventKind.AGENT_STEP, AgentStep(name=n)), _text),
)


@settings(max_examples=200, deadline=None)
@given(action=_actions, session=st.none() | _text, tokens=st.none() | st.integers(0, 10**6),
       status=st.sampled_from(["ok", "error"]), output=_json)
def test_event_to_span_and_back_is_lossless(action, session, tokens, status, output) -> None:  # type: ignore[no-untyped-def]
    kind, act = action
    outcome = Outcome(status=status, output=output,
                      error={"type": "ValueError", "message": "bad"} if status == "error" else None)
    ev = Event(trajectory_id="t-1", session_id=session, kind=kind, action=act, outcome=outcome,
               metadata=Metadata(tenant_id="acme", usage=Usage(input_tokens=tokens, output_tokens=tokens),
                                 latency_ms=12.5))
    span = event_to_span(ev)
    assert span_to_event(span) == ev


def test_span_carries_the_genai_attributes() -> None:
    ev = Event(trajectory_id="t", session_id="conv-9", kind=EventKind.MODEL_CALL,
               action=Generation(model="smollm2", text="hi", tool_calls=[{"id": "1", "name": "f", "arguments": {}}]),
               metadata=Metadata(usage=Usage(input_tokens=10, output_tokens=3)))
    a = event_to_span(ev).attributes
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == "smollm2"
    assert a["gen_ai.usage.input_tokens"] == 10 and a["gen_ai.usage.output_tokens"] == 3
    assert a["gen_ai.conversation.id"] == "conv-9"
    tool = event_to_span(Event(trajectory_id="t", kind=EventKind.TOOL_CALL,
                               action=ToolCall(tool_name="lookup", call_id="c1", arguments={"id": 1})))
    assert tool.attributes["gen_ai.tool.name"] == "lookup"
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"


def test_a_foreign_genai_span_maps_to_an_event() -> None:
    span = OtelSpan(
        name="chat gpt-x", start_time_unix_nano=1_700_000_000_000_000_000,
        end_time_unix_nano=1_700_000_000_250_000_000, trace_id="ab" * 16, span_id="cd" * 8,
        attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-x",
                    "gen_ai.usage.input_tokens": 5, "gen_ai.usage.output_tokens": 7,
                    "gen_ai.conversation.id": "c-1",
                    "gen_ai.output.messages": '[{"role":"assistant","parts":[{"type":"text","content":"yo"}]}]'},
        status_code="OK")
    ev = span_to_event(span)
    assert ev.kind == EventKind.MODEL_CALL and ev.trajectory_id == "ab" * 16
    assert ev.action.text == "yo" and ev.action.model == "gpt-x"  # type: ignore[union-attr]
    assert ev.metadata.usage.output_tokens == 7 and ev.metadata.latency_ms == 250.0  # type: ignore[union-attr]
    tool = span_to_event(OtelSpan(name="execute_tool f", start_time_unix_nano=0, status_code="ERROR",
                                  attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "f",
                                              "error.type": "Timeout"}), trajectory_id="t")
    assert tool.kind == EventKind.TOOL_CALL and tool.outcome.status == "error"  # type: ignore[union-attr]
    assert tool.outcome.error.type == "Timeout"  # type: ignore[union-attr]
