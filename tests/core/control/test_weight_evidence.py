"""The weight-update rule: a weight update only for a cluster whose evidence is in and on which context
candidates were generated, replayed and failed. Late corrections are the normal case, so a missing fact
seen before its users corrected it waits ("waiting for evidence") instead of going to training.

Two tenants run the support-desk agent (the scripted, context-reading world model), so every cluster
here recurs across tenants — the case in which the plane used to escalate at once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from molt.atdp.models import RewardAnnotation, RewardSource
from molt.control.plane import ControlPlane, CycleResult, PlaneSettings
from molt.replay import save_trajectories
from molt.store import Store
from molt_desk.scenarios import Traffic, base_parts, record_traffic
from molt_desk.world import AGENT, FACTS, ORDERS, DeskModel, World

TENANTS = ("acme", "globex")
SELF_CHECK = "Before answering, re-check every figure and computation step by step."


def _plane(store: Store, **parts_kw: str) -> ControlPlane:
    parts = base_parts().with_system_prompt(parts_kw["system_prompt"]) if parts_kw else base_parts()
    plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=parts,
                         settings=PlaneSettings(promote_directly=True))
    for t in TENANTS:
        plane.registry.ensure_base(t, AGENT, parts)
    return plane


def _save(store: Store, plane: ControlPlane, items: list[Traffic]) -> None:
    # Order-status requests the desk answers right, per tenant: a failure cluster is tested against the
    # rest of the window (molt.control.diagnose), and a window of failures alone has no base rate.
    fine = [Traffic(t, AGENT, f"Where is order A-{1000 + i}? (ticket {t}-s{i})", "status")
            for t in sorted({x.tenant for x in items}) for i in range(12)]
    save_trajectories(store, asyncio.run(record_traffic(items + fine, plane.registry, plane, World(),
                                                        plane.backend)))


def _missing_fact(n: int) -> list[Traffic]:
    f = FACTS["refund window"]
    return [Traffic(t, AGENT, f"{f.questions[i % 3]} (ticket {t}-{i})", "kb_question") for t in TENANTS
            for i in range(n)]


def _tax(n: int) -> list[Traffic]:
    ids = sorted(ORDERS)
    return [Traffic(t, AGENT, f"What is the total of order {ids[i % len(ids)]} in cents including 7% tax? "
                              f"(ticket {t}-{i})", "capability") for t in TENANTS for i in range(n)]


def _correct_all(store: Store, text: str) -> None:
    """The users' late corrections, as the gateway's reward endpoint stores them."""
    store.append_rewards([RewardAnnotation(trajectory_id=t, value=0.0, source=RewardSource.USER_CORRECTION,
                                           reason=text, tenant_id=tid)
                          for tid in TENANTS
                          for t in store.trajectory_ids(f"tenant_id = '{tid}' AND task != 'status'")])


def _asked_weights(plane: ControlPlane) -> list[str]:
    return [d.reason for t in TENANTS for d in plane.log.list(t, AGENT, choice="weight_update")]


def test_uncorrected_missing_fact_waits_then_gets_a_memory(tmp_path: Path) -> None:
    """First cycle: 2 × 10 wrong answers about a fact, no correction yet → a no-op that says it waits for
    evidence (the plane used to request training: the generic self-check rule failed in replay and the
    cluster recurs in two tenants). The corrections arrive → the same cluster gets a memory insert, and the
    failures recorded before it went live are not sent to training afterwards."""
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = _plane(store)
        _save(store, plane, _missing_fact(10))
        first = plane.run_cycle("acme", AGENT)
        assert first.choice == "noop", first.record.reason
        assert first.record.reason.startswith("waiting for evidence") and "kb_question|answer" in first.record.reason
        assert "correction" in first.record.reason
        _correct_all(store, FACTS["refund window"].text)
        second = plane.run_cycle("acme", AGENT)
        assert second.choice == "memory_insert", second.record.reason
        assert second.chosen is not None and second.chosen.cluster.startswith("kb_question|answer")
        # The memory is live; the window still holds the failures recorded before it. Replayed against the
        # live version, every context candidate "fails" (nothing is left to fix): no weight update either.
        third = plane.run_cycle("acme", AGENT)
        assert third.choice == "noop" and "under the live version" in third.record.reason, third.record.reason
        assert _asked_weights(plane) == []


def test_no_context_candidate_means_no_weight_update(tmp_path: Path) -> None:
    """The live prompt already holds the self-check rule, so the uncorrected fact cluster has no context
    candidate at all: not evidence that context cannot fix it — no weight update, in the first cycle or a
    cycle later (the plane used to request one with "tried: none")."""
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = _plane(store, system_prompt=SELF_CHECK)
        _save(store, plane, _missing_fact(10))
        for _ in range(2):
            res = plane.run_cycle("acme", AGENT)
            assert res.choice == "noop" and res.record.reason.startswith("waiting for evidence"), res.record.reason
        assert "none was generated" in res.record.reason
        assert _asked_weights(plane) == []


def test_capability_gap_goes_to_weights_once_context_changes_failed(tmp_path: Path) -> None:
    """Tax arithmetic the model cannot do, in two tenants, never corrected: the first cycle waits for late
    evidence; one cycle later the self-check rule is replayed on the cluster, fails, and the plane asks
    for a weight update, naming what it tried."""
    asked: list[str] = []

    def trainer(tenant: str, agent: str, cand: object) -> str:
        asked.append(tenant)
        return "train-1"

    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = _plane(store)
        plane.trainer = trainer
        _save(store, plane, _tax(10))
        first = plane.run_cycle("acme", AGENT)
        assert first.choice == "noop" and first.record.reason.startswith("waiting for evidence")
        second: CycleResult = plane.run_cycle("acme", AGENT)
        assert second.choice == "weight_update", second.record.reason
        assert second.chosen is not None and second.chosen.cluster.startswith("capability|answer")
        assert "tried: harness_edit" in second.record.reason and asked == ["acme"]
        replayed = [c for c in second.record.candidates if c["kind"] == "harness_edit"]
        assert replayed and replayed[0]["evidence"]["replay"]["scored"] > 0
        # Asked once per model: the next cycle waits for the trainer's adapter.
        third = plane.run_cycle("acme", AGENT)
        assert third.choice == "noop" and "already requested" in third.record.reason and asked == ["acme"]
