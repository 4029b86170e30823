"""The training queue: only eligible, redacted trajectories reach a trainer, with the reasons recorded.

Troubleshooting: a trajectory wrongly excluded shows its reasons in ``TrainingQueue.evaluate()``;
one wrongly included means a rule is checked neither at capture (the decision) nor at read time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from molt.atdp import Event, EventKind, Outcome, RewardAnnotation, ToolCall, UserMessage
from molt.capture import Recorder
from molt.errors import PermissionDenied
from molt.governance import (
    GovernancePipeline,
    GovernancePolicy,
    GovernedSink,
    Principal,
    Role,
    TrainingQueue,
    eligible_trajectories,
    erase_subject,
)
from molt.store import Store

TRAINING = {"opt_in": True, "require_consent": False, "exclude_tools": ["payments.*"],
            "exclude_fields": ["hidden.reasoning"], "quality": {"min_events": 2, "max_error_fraction": 0.5}}
POLICY: dict[str, Any] = {
    "defaults": {"training": TRAINING},
    "tenants": {
        "acme": {"training": {"share_with": ["globex", "initech"]}},
        "globex": {"training": {"share_with": ["acme"]}},
        "initech": {},  # opted in, shares with nobody
        "hooli": {"training": {"opt_in": False, "share_with": ["acme"]}},
    },
}
TRAINER = Principal(tenant_id="acme", role=Role.TRAINER)


def _msg(tid: str, text: str, tenant: str = "acme", **kw: Any) -> Event:
    md = {"tenant_id": tenant, **kw.pop("md", {})}
    return Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata=md, action=UserMessage(content=text), **kw)


def _tool(tid: str, name: str, tenant: str = "acme", status: str = "ok") -> Event:
    return Event(trajectory_id=tid, kind=EventKind.TOOL_CALL, metadata={"tenant_id": tenant},
                 action=ToolCall(tool_name=name, arguments={"q": 1}),
                 outcome=Outcome(status=status, error={"type": "E", "message": "m"} if status == "error" else None))


@pytest.fixture
def world(store: Store, molt_home: Path) -> dict[str, Any]:
    policy = GovernancePolicy.model_validate(POLICY)
    rec = Recorder(GovernedSink(store), spool_dir=molt_home / "spool", pipeline=GovernancePipeline(policy))
    trajectories = {
        "good": [_msg("good", "I am Ana Lima, ana@example.org", hidden={"reasoning": "private thoughts"}),
                 _tool("good", "crm.lookup")],
        "refused": [_msg("refused", "hello", md={"consent": {"training": False}}), _tool("refused", "crm.lookup")],
        "short": [_msg("short", "just one event")],
        "payments": [_msg("payments", "pay it"), _tool("payments", "payments.refund")],
        "errors": [_msg("errors", "try"), _tool("errors", "crm.a", status="error"),
                   _tool("errors", "crm.b", status="error")],
        "erased": [_msg("erased", "forget me", md={"consent": {"subject_id": "s-9"}}), _tool("erased", "crm.lookup")],
        "tampered": [_msg("tampered", "one"), _msg("tampered", "two"), _msg("tampered", "three")],
        "glob": [_msg("glob", "globex hello", tenant="globex"), _tool("glob", "crm.lookup", tenant="globex")],
        "init": [_msg("init", "initech hello", tenant="initech"), _tool("init", "crm.lookup", tenant="initech")],
        "hool": [_msg("hool", "hooli hello", tenant="hooli"), _tool("hool", "crm.lookup", tenant="hooli")],
    }
    for evs in trajectories.values():
        for ev in evs:
            rec.record(ev)
    rec.reward(RewardAnnotation(trajectory_id="good", value=1.0, source="human_label"))
    assert rec.flush(deliver=True)
    rec.close()
    with Recorder(store, spool_dir=molt_home / "plain", pipeline=None) as plain:  # captured around the pipeline
        plain.record(_msg("ungoverned", "a"))
        plain.record(_msg("ungoverned", "b"))
        assert plain.flush(deliver=True)
    erase_subject(store, "s-9", tenant_id="acme")
    store.table("events").delete("trajectory_id = 'tampered' AND seq = 1")
    return {"policy": policy}


def test_only_eligible_redacted_trajectories_reach_the_trainer(store: Store, world: dict[str, Any]) -> None:
    queue = TrainingQueue(store, world["policy"], TRAINER)
    verdicts = {v.trajectory_id: v for v, _ in queue.evaluate()}
    assert {t for t, v in verdicts.items() if v.eligible} == {"good"}
    why = {t: " | ".join(v.reasons) for t, v in verdicts.items()}
    assert "consent: training consent was refused" in why["refused"]
    assert "fewer than min_events=2" in why["short"]
    assert "tool: calls to 'payments.refund' are excluded" in why["payments"]
    assert "2/3 events ended in error" in why["errors"]
    assert "the payload was erased" in why["erased"]
    assert "hash chain does not verify" in why["tampered"]
    assert "no decision was recorded" in why["ungoverned"]

    (traj,) = eligible_trajectories(store, world["policy"], TRAINER)
    assert traj.trajectory_id == "good" and traj.total_reward == 1.0
    first = traj.events[0]
    content = first.action.content  # type: ignore[union-attr]
    assert "<EMAIL_ADDRESS_1>" in content and "ana@example.org" not in content  # stored redacted
    assert first.hidden is not None and first.hidden.reasoning is None  # excluded field stripped


def test_cross_tenant_training_needs_both_policies(store: Store, world: dict[str, Any]) -> None:
    queue = TrainingQueue(store, world["policy"], TRAINER)
    got = queue.eligible_trajectories(tenants=["acme", "globex"])
    assert [t.trajectory_id for t in got] == ["good", "glob"]
    with pytest.raises(PermissionDenied, match=r"tenants.initech.training.share_with"):
        queue.eligible_trajectories(tenants=["initech"])  # acme shares with initech, not the reverse
    with pytest.raises(PermissionDenied, match="hooli"):
        queue.eligible_trajectories(tenants=["hooli"])  # hooli lists acme but did not opt in
    globex_trainer = Principal(tenant_id="globex", role=Role.TRAINER)
    assert [t.trajectory_id for t in eligible_trajectories(store, world["policy"], globex_trainer,
                                                           tenants=["globex", "acme"])] == ["glob", "good"]


def test_the_queue_needs_the_train_permission_and_follows_policy_changes(
        store: Store, world: dict[str, Any]) -> None:
    with pytest.raises(PermissionDenied):
        TrainingQueue(store, world["policy"], Principal(tenant_id="acme", role=Role.READER))
    off = GovernancePolicy.model_validate({**POLICY, "tenants": {**POLICY["tenants"], "acme": {
        "training": {"opt_in": False}}}})
    verdicts = TrainingQueue(store, off, TRAINER).evaluate()
    assert not any(v.eligible for v, _ in verdicts)
    assert all(any("tenant: the tenant has not opted in" in r for r in v.reasons) for v, _ in verdicts)


def test_verdicts_can_be_written_to_the_audit_log(store: Store, world: dict[str, Any]) -> None:
    TrainingQueue(store, world["policy"], TRAINER).evaluate(audit=True)
    rows = store.table("audit").search().where("kind = 'eligibility'").limit(None).to_arrow().to_pylist()
    by = {r["target"]: r for r in rows}
    assert by["good"]["summary"] == "eligible" and by["short"]["summary"].startswith("ineligible: quality")
    assert by["good"]["actor"] == "acme/trainer"
