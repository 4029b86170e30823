"""Bad input through the default governance pipeline: binary, huge, deeply nested and ReDoS-shaped
payloads are redacted or quarantined, and no planted PII survives in what would be stored (the
accepted event, or the quarantine record). How long each takes is measured by
``bench/bench_redaction.py`` (the "bad input" table), not asserted here.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from molt.atdp import Event, EventKind, Outcome, ToolCall, new_id
from molt.governance import GovernancePipeline, GovernancePolicy
from molt.governance.redaction import Redactor, redactors

EMAIL, CARD = "jane.doe@example.com", "4111 1111 1111 1111"
PLANTED = f" contact {EMAIL}, card {CARD} "


def _event(output: Any) -> Event:
    return Event(
        trajectory_id=new_id(), kind=EventKind.TOOL_CALL, metadata={"tenant_id": "acme"},
        action=ToolCall(tool_name="fetch", arguments={}), outcome=Outcome(output=output),
    )  # fmt: skip


def _bad_inputs() -> dict[str, Event]:
    rng = random.Random(3)
    binary = bytes(rng.randrange(256) for _ in range(20_000)).decode("latin-1")
    return {
        "binary": _event({"blob": binary[:10_000] + PLANTED + binary[10_000:]}),
        "nested structure": _event(_nest(150, {"note": PLANTED})),
        "json string nested past orjson's depth": _event({"s": "[" * 600 + f'"{PLANTED}"' + "]" * 600}),
        "redos: digits and spaces": _event({"t": "1 " * 20_000 + PLANTED}),
        "redos: at signs": _event({"t": "a@" * 20_000 + PLANTED}),
        "redos: local part dots": _event({"t": "a." * 20_000 + PLANTED}),
        "redos: capitalised words": _event({"t": "Anna " * 10_000 + PLANTED}),
        "redos: street shapes": _event({"t": "12 Main Street " * 3_000 + PLANTED}),
        "huge (over max_event_bytes)": _event({"t": ("lorem ipsum " * 200_000) + PLANTED}),
    }


def _nest(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


@pytest.mark.parametrize("name", list(_bad_inputs()))
def test_bad_input_is_redacted_or_quarantined_without_the_planted_pii(name: str) -> None:
    event = _bad_inputs()[name]
    result = GovernancePipeline(GovernancePolicy()).process(event)
    # accepted: what is stored is the redacted event; quarantined: the quarantine record (or none)
    stored = result.event.model_dump_json().encode() if result.event is not None else result.record or b""
    assert EMAIL.encode() not in stored and CARD.encode() not in stored, (name, result.stage, result.reason)
    if name.startswith("huge"):
        assert result.event is None and result.stage == "validate"


class _Exploding(Redactor):
    """A redactor whose detectors raise on some texts (a detector bug)."""

    def detect(self, text: str) -> list[Any]:
        if "explode" in text:
            raise RuntimeError("detector bug")
        return super().detect(text)


@pytest.fixture
def exploding() -> Any:
    redactors.register("test-exploding", _Exploding)
    yield "test-exploding"
    redactors.unregister("test-exploding")


def test_nothing_raw_is_kept_when_redaction_fails(exploding: str) -> None:
    policy = GovernancePolicy.model_validate({"defaults": {"redaction": {"redactor": exploding}}})
    result = GovernancePipeline(policy).process(_event({"t": "explode" + PLANTED}))
    assert result.event is None and result.stage == "redact"
    assert result.record is None and "never stored" in (result.reason or "")


def test_a_record_quarantined_before_redaction_is_kept_redacted() -> None:
    policy = GovernancePolicy.model_validate({"defaults": {"limits": {"max_event_bytes": 2048}}})
    result = GovernancePipeline(policy).process(_event({"t": "x" * 3000 + PLANTED}))
    assert result.event is None and result.stage == "validate" and result.record is not None
    assert EMAIL.encode() not in result.record and CARD.encode() not in result.record
    assert b"x" * 3000 in result.record and "kept redacted" in (result.reason or "")


def test_a_policy_that_does_not_redact_keeps_the_record_as_it_is() -> None:
    policy = GovernancePolicy.model_validate(
        {"defaults": {"redaction": {"enabled": False}, "limits": {"max_event_bytes": 2048}}}
    )
    result = GovernancePipeline(policy).process(_event({"t": "x" * 3000 + PLANTED}))
    assert result.event is None and result.record is not None and EMAIL.encode() in result.record
