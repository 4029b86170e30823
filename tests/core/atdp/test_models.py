"""ATDP models: validation, typed errors, ids."""

from __future__ import annotations

import math
import uuid
from datetime import datetime

import orjson
import pytest

from molt.atdp import (
    Event,
    EventKind,
    Generation,
    RewardAnnotation,
    TokenTrace,
    ToolCall,
    new_id,
    parse_event,
    parse_reward,
)
from molt.atdp.validate import MAX_RECORD_BYTES
from molt.errors import EventValidationError, PayloadTooLarge, ProtocolError, SchemaVersionError


def test_ids_are_uuid7_and_time_ordered() -> None:
    ids = [new_id() for _ in range(1000)]
    assert all(uuid.UUID(i).version == 7 for i in ids)
    assert len(set(ids)) == 1000
    assert ids == sorted(ids)


def test_every_event_kind_round_trips_through_json(event_factory) -> None:  # type: ignore[no-untyped-def]
    for i in range(3):
        ev = event_factory("t1", i)
        assert parse_event(ev.model_dump_json()) == ev


def test_unknown_kind_is_a_typed_error_listing_the_valid_kinds() -> None:
    with pytest.raises(EventValidationError) as info:
        parse_event({"trajectory_id": "t", "kind": "teleport"})
    assert "kind" in str(info.value) and "model_call" in str(info.value)
    assert isinstance(info.value, ProtocolError) and isinstance(info.value, ValueError)


def test_missing_trajectory_id_is_rejected() -> None:
    with pytest.raises(EventValidationError, match="trajectory_id"):
        parse_event({"kind": "tool_call", "event_id": "e1"})


def test_empty_ids_are_rejected() -> None:
    with pytest.raises(EventValidationError, match="event_id"):
        parse_event({"trajectory_id": "t", "kind": "tool_call", "event_id": ""})


def test_wrong_schema_version_is_its_own_error() -> None:
    with pytest.raises(SchemaVersionError, match=r"2\.0"):
        parse_event({"schema_version": "2.0", "trajectory_id": "t", "kind": "tool_call"})
    # a newer minor version of the same major is readable
    assert parse_event({"schema_version": "1.7", "trajectory_id": "t", "kind": "tool_call"}).kind == "tool_call"


def test_oversized_payload_is_rejected_before_parsing() -> None:
    big = orjson.dumps({"trajectory_id": "t", "kind": "user_message",
                        "action": {"type": "user_message", "content": "x" * MAX_RECORD_BYTES}})
    with pytest.raises(PayloadTooLarge) as info:
        parse_event(big)
    assert info.value.size > info.value.limit == MAX_RECORD_BYTES


def test_not_json_and_not_an_object() -> None:
    with pytest.raises(EventValidationError, match="not valid JSON"):
        parse_event(b"{nope")
    with pytest.raises(EventValidationError, match="JSON object"):
        parse_event(b"[1, 2]")


def test_action_must_match_kind() -> None:
    with pytest.raises(EventValidationError, match="tool_call"):
        parse_event({"trajectory_id": "t", "kind": "model_call",
                     "action": {"type": "tool_call", "tool_name": "x"}})


def test_unknown_fields_are_rejected() -> None:
    with pytest.raises(EventValidationError, match="surprise: Extra inputs"):
        parse_event({"trajectory_id": "t", "kind": "tool_call", "surprise": 1})


def test_timestamps_must_be_aware_and_are_normalised_to_utc() -> None:
    with pytest.raises(EventValidationError, match="timezone"):
        parse_event({"trajectory_id": "t", "kind": "tool_call", "timestamp": "2026-01-01T00:00:00"})
    ev = parse_event({"trajectory_id": "t", "kind": "tool_call", "timestamp": "2026-01-01T02:00:00+02:00"})
    assert ev.timestamp == datetime.fromisoformat("2026-01-01T00:00:00+00:00")
    assert ev.timestamp.utcoffset().total_seconds() == 0  # type: ignore[union-attr]


def test_rewards_must_be_finite() -> None:
    with pytest.raises(ValueError, match="finite"):
        Event(trajectory_id="t", kind=EventKind.FEEDBACK, reward=math.nan)
    with pytest.raises(EventValidationError, match="finite"):
        parse_reward({"trajectory_id": "t", "value": float("inf"), "source": "judge"})
    with pytest.raises(EventValidationError, match="source"):
        parse_reward({"trajectory_id": "t", "value": 1.0, "source": "vibes"})


def test_token_trace_needs_one_logprob_per_token() -> None:
    with pytest.raises(ValueError, match=r"one log-probability per completion token"):
        TokenTrace(prompt_ids=[1, 2], completion_ids=[3, 4], completion_logprobs=[-0.1])
    g = Generation(tokens=TokenTrace(prompt_ids=[1], completion_ids=[2, 3], completion_logprobs=[-0.5, -0.1],
                                     policy_version="v3"))
    ev = Event(trajectory_id="t", kind=EventKind.MODEL_CALL, action=g)
    assert parse_event(ev.model_dump_json()).action.tokens.completion_ids == [2, 3]  # type: ignore[union-attr]


def test_events_are_immutable() -> None:
    ev = Event(trajectory_id="t", kind=EventKind.TOOL_CALL, action=ToolCall(tool_name="x"))
    with pytest.raises(ValueError):
        ev.trajectory_id = "other"  # type: ignore[misc]


def test_reward_annotation_points_at_event_or_trajectory() -> None:
    a = RewardAnnotation(trajectory_id="t", event_id="e", value=-1, source="user_correction", reason="wrong")
    assert parse_reward(a.model_dump_json()) == a
    assert RewardAnnotation(trajectory_id="t", value=0.5, source="judge").event_id is None
