"""A late reward's free text (reason, annotator) is governed like the events it rewards: a user's
correction that names a person or carries a card number is redacted before the reward is spooled or
stored; a text the governance cannot process is dropped (the score stays); ungoverned only by choice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from molt.atdp import Event, EventKind, RewardAnnotation, UserMessage
from molt.capture import HookResult, Recorder
from molt.store import Store

EMAIL, CARD = "jane.doe@example.com", "4111 1111 1111 1111"
REASON = f"wrong: the refund goes to {EMAIL}, card {CARD}, within 30 days"


def _record_and_reward(tmp_path: Path, **recorder_kw: Any) -> tuple[RewardAnnotation, Path]:
    home = tmp_path / "home"
    store = Store.open(home / "store", auto_compact=False)
    rec = Recorder(store, spool_dir=home / "spool", **recorder_kw)
    tid = rec.new_trajectory()
    ev = Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, action=UserMessage(content="refund?"),
               metadata={"tenant_id": "acme"})
    assert rec.record(ev)
    assert rec.reward(RewardAnnotation(trajectory_id=tid, event_id=ev.event_id, value=0.0, source="user_correction",
                                       reason=REASON, annotator=EMAIL, tenant_id="acme"))
    assert rec.flush(timeout=60, deliver=True)
    rec.close()
    (got,) = store.rewards(tid)
    return got, home


def _bytes_under(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_a_rewards_reason_and_annotator_are_redacted_before_they_are_kept(tmp_path: Path) -> None:
    got, home = _record_and_reward(tmp_path)  # the default: governed
    assert got.value == 0.0 and got.reason is not None
    assert EMAIL not in got.reason and CARD not in got.reason and EMAIL not in (got.annotator or "")
    assert "within 30 days" in got.reason  # the correction itself is kept
    raw = _bytes_under(home)  # nothing raw in the store's files or the spool
    assert EMAIL.encode() not in raw and CARD.encode() not in raw


class _Failing:
    def process(self, event: Event) -> HookResult:
        if event.kind is EventKind.FEEDBACK:
            raise RuntimeError("detector down")
        return HookResult.accept(event)


def test_a_reason_governance_cannot_process_is_dropped_and_the_score_kept(tmp_path: Path) -> None:
    got, _ = _record_and_reward(tmp_path, hook=_Failing())
    assert got.value == 0.0 and got.reason is None and got.annotator is None


def test_recording_ungoverned_by_choice_keeps_the_text_as_given(tmp_path: Path) -> None:
    got, _ = _record_and_reward(tmp_path, hook=None)
    assert got.reason == REASON and got.annotator == EMAIL
