"""Sealing serializes events without pydantic's model_dump: the bytes must be exactly pydantic's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from molt.atdp import Event, EventKind, Generation, Outcome, ToolCall, UserMessage
from molt.atdp.chain import canonical, canonical_parts
from molt.atdp.models import (
    PAYLOAD_FIELDS,
    AgentStep,
    Consent,
    ErrorInfo,
    FileAction,
    HiddenState,
    Message,
    Metadata,
    Observation,
    Passage,
    Provenance,
    RetrievalQuery,
    TokenTrace,
    ToolCallRequest,
    Usage,
)


def _pydantic_parts(event: Event, seq: int) -> tuple[bytes, bytes]:
    """What sealing did before: model_dump in JSON mode, then canonical JSON of each part."""
    record = event.model_dump(mode="json", exclude_none=True)
    record["seq"] = seq
    payload = {k: record.pop(k) for k in PAYLOAD_FIELDS if k in record}
    return canonical(record), canonical(payload)


def _outcome(fn: Any) -> Any:
    try:
        return fn()
    except Exception as exc:  # both paths must fail alike (the Recorder quarantines the event)
        return type(exc).__name__ if isinstance(exc, TypeError) else repr(exc)


_scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True)
            | st.text(max_size=12))
_json = st.recursive(_scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
                     max_leaves=12)
_text = st.text(max_size=16)
_opt_text = st.none() | _text
_times = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1),
                      timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]))


@st.composite
def events(draw: Any) -> Event:
    kind = draw(st.sampled_from([EventKind.MODEL_CALL, EventKind.TOOL_CALL, EventKind.USER_MESSAGE,
                                 EventKind.RETRIEVAL, EventKind.FILE_ACTION, EventKind.AGENT_STEP]))
    value = draw(_json)
    action = {
        EventKind.MODEL_CALL: lambda: Generation(
            model=draw(_opt_text), text=draw(_opt_text), sampling=draw(st.none() | st.dictionaries(_text, _json,
                                                                                                max_size=2)),
            tool_calls=[ToolCallRequest(name=draw(_text), arguments=value)],
            tokens=draw(st.none() | st.just(TokenTrace(prompt_ids=[1, 2], completion_ids=[3],
                                                       completion_logprobs=[-0.25])))),
        EventKind.TOOL_CALL: lambda: ToolCall(tool_name="t" + draw(_text), arguments=value),
        EventKind.USER_MESSAGE: lambda: UserMessage(content=draw(_text | st.lists(_json, max_size=2))),
        EventKind.RETRIEVAL: lambda: RetrievalQuery(query=draw(_text), top_k=draw(st.none() | st.integers(1, 9))),
        EventKind.FILE_ACTION: lambda: FileAction(operation="edit", path=draw(_text), diff=draw(_opt_text)),
        EventKind.AGENT_STEP: lambda: AgentStep(name=draw(_text), inputs=value),
    }[kind]()
    status = draw(st.sampled_from(["ok", "error", None]))
    outcome = None if status is None else Outcome(
        status=status, output=draw(_json),
        error=ErrorInfo(type="E", message=draw(_text)) if status == "error" else None)
    return Event(
        trajectory_id="t-" + draw(_text).replace("\x00", ""), kind=kind, name=draw(_opt_text),
        session_id=draw(_opt_text),
        timestamp=draw(_times), action=action, outcome=outcome,
        reward=draw(st.none() | st.floats(allow_nan=False, allow_infinity=False)),
        observation=draw(st.none() | st.just(Observation(
            messages=[Message(role="user", content=draw(_opt_text)),
                      Message(role="assistant", tool_calls=[ToolCallRequest(id="c", name="n", arguments=value)])],
            passages=[Passage(text=draw(_text), score=draw(st.none() | st.floats(-1, 1)))], data=draw(_json)))),
        hidden=draw(st.none() | st.just(HiddenState(plan=draw(_text), confidence=0.5))),
        metadata=Metadata(tenant_id=draw(st.none() | st.text(st.characters(blacklist_characters="\x00"), max_size=8)),
                          latency_ms=draw(st.none() | st.floats(min_value=0, allow_infinity=True)),
                          usage=draw(st.none() | st.just(Usage(input_tokens=3))),
                          consent=draw(st.none() | st.just(Consent(training=False, subject_id="s"))),
                          tags=draw(st.none() | st.dictionaries(_text, _text, max_size=2)),
                          classification=draw(st.sampled_from(["public", "internal", "restricted"]))),
        provenance=Provenance(framework=draw(_opt_text), tool_versions=draw(st.none() | st.dictionaries(
            _text, _text, max_size=2))),
    )


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(ev=events(), seq=st.integers(0, 2**40))
def test_sealing_bytes_are_pydantic_model_dump_bytes(ev: Event, seq: int) -> None:
    assert _outcome(lambda: canonical_parts(ev, seq)) == _outcome(lambda: _pydantic_parts(ev, seq))


def test_whole_second_and_other_offset_timestamps_serialize_as_pydantic_does() -> None:
    for ts in (datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, 5, tzinfo=timezone(timedelta(hours=2))),
               datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=UTC)):
        ev = Event(trajectory_id="t", kind=EventKind.USER_MESSAGE, action=UserMessage(content="hi"), timestamp=ts)
        assert canonical_parts(ev, 3) == _pydantic_parts(ev, 3)


class _Tagged(Event):
    """A subclass may serialize its own way: sealing must take pydantic's path for it."""

    def model_dump(self, **kw: Any) -> dict[str, Any]:
        out = super().model_dump(**kw)
        out["name"] = "from the subclass"
        return out


@pytest.mark.parametrize("ev", [
    _Tagged(trajectory_id="t", kind=EventKind.USER_MESSAGE, action=UserMessage(content="hi")),
    # built without validation, holding a value orjson cannot write: pydantic's path decides
    Event.model_construct(trajectory_id="t", kind=EventKind.TOOL_CALL, action=ToolCall(tool_name="x"),
                          timestamp=datetime(2026, 1, 1, tzinfo=UTC), metadata=Metadata(), provenance=Provenance(),
                          outcome=Outcome.model_construct(status="ok", output={"when": {1, 2}})),
])
def test_subclasses_and_foreign_values_take_pydantics_path(ev: Event) -> None:
    assert _outcome(lambda: canonical_parts(ev, 0)) == _outcome(lambda: _pydantic_parts(ev, 0))
