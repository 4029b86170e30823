"""Redaction keeps the bounds the ATDP models declare.

A placeholder is often longer than what it replaces ("<EMAIL_ADDRESS_1>" for "u1@x.io"). Where
governance rewrites a field that has a ``max_length`` in place (the session id of an envelope, the
reason of a late reward), the result must still fit, or the record is sealed and stored but cannot be
read back: ``unseal`` validates it. Each test fills such a field to its bound with short e-mail
addresses and reads the governed record back the way the store does.
"""

from __future__ import annotations

from molt.atdp import Event, EventKind, FeedbackAction, RewardAnnotation, RewardSource
from molt.atdp.chain import GENESIS, seal
from molt.capture.hooks import govern_reward
from molt.governance import GovernancePipeline, GovernancePolicy


def _addresses(limit: int) -> str:
    text, i = "", 0
    while len(text) + len(f" u{i}@x.io") <= limit:
        text += f" u{i}@x.io"
        i += 1
    return text.strip()


def test_a_redacted_session_id_stays_within_its_bound_and_reads_back() -> None:
    session = _addresses(256)
    assert len(session) > 240  # the raw id is at its bound; every placeholder lengthens it
    event = Event(trajectory_id="t-bounds", session_id=session, kind=EventKind.FEEDBACK,
                  action=FeedbackAction(comment="thanks"), metadata={"tenant_id": "acme"})
    res = GovernancePipeline(GovernancePolicy()).process(event)
    assert res.event is not None, res
    governed = res.event.session_id
    assert governed is not None and len(governed) <= 256
    assert "@x.io" not in governed  # redacted, not merely cut
    assert seal(res.event, 0, GENESIS).to_event().session_id == governed  # unseal validates


def test_a_redacted_reward_reason_stays_within_its_bound_and_reads_back() -> None:
    reason = _addresses(16_384)
    annotation = RewardAnnotation(trajectory_id="t-bounds", value=0.0, source=RewardSource.USER_FEEDBACK,
                                  reason=reason, tenant_id="acme")
    governed = govern_reward(GovernancePipeline(GovernancePolicy()), annotation)
    assert governed.reason is not None and len(governed.reason) <= 16_384
    assert "@x.io" not in governed.reason
    again = RewardAnnotation.model_validate_json(governed.model_dump_json())  # as the store reads it
    assert again.reason == governed.reason
