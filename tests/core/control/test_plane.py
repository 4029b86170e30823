"""The control plane on the built-in scenarios: the right intervention per failure type, fixes measured
in replay and live without regressions, canary promotion and abort, and bad candidates rejected with
a reason while the live version stays untouched."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from molt.atdp.models import RewardAnnotation, RewardSource
from molt.control.diagnose import Candidate
from molt.control.memory import MemoryStore
from molt.control.plane import ControlPlane, PlaneSettings
from molt.errors import InterventionError
from molt.replay import save_trajectories
from molt.store import Store
from molt_desk.scenarios import SCENARIOS, TRUTH, Traffic, base_parts, record_traffic, run_scenario, run_suite
from molt_desk.world import AGENT, FACTS, DeskModel, World

ONE_PER_KIND = [next(s for s in SCENARIOS if s.kind == k) for k in TRUTH]


def test_suite_is_labelled_and_large_enough() -> None:
    kinds = {s.kind for s in SCENARIOS}
    assert len(SCENARIOS) >= 40 and kinds == set(TRUTH)
    assert all(sum(s.kind == k for s in SCENARIOS) >= 5 for k in kinds)
    assert len({s.name for s in SCENARIOS}) == len(SCENARIOS)


@pytest.mark.parametrize("scenario", ONE_PER_KIND, ids=[s.kind for s in ONE_PER_KIND])
def test_one_scenario_per_kind(scenario: Any, tmp_path: Path) -> None:
    r = run_scenario(scenario, tmp_path)
    assert r.choice == r.truth, r.reason
    rec = r.cycle.record
    assert rec.signals["window"] == sum(t.tenant == scenario.tenant for t in scenario.traffic)
    if r.truth in ("noop", "weight_update"):
        assert r.cycle.version is None or r.truth == "noop"
        return
    # The fix is measured: replay on the failing cluster, then fresh live runs, and the held-back tasks.
    assert r.replay_before is not None and r.replay_after is not None and r.replay_after > r.replay_before
    assert r.live_before is not None and r.live_after is not None and r.live_after > r.live_before
    if r.regression_before is not None:
        assert r.regression_after is not None and r.regression_after >= r.regression_before


@pytest.mark.slow
def test_whole_suite_matches_ground_truth(tmp_path: Path) -> None:
    results = run_suite(root=tmp_path)
    match = sum(r.match for r in results) / len(results)
    wrong = [(r.name, r.choice, r.truth) for r in results if not r.match]
    assert match >= 0.9, wrong
    for r in results:
        if r.match and r.truth not in ("noop", "weight_update"):
            assert r.live_after is not None and r.live_before is not None and r.live_after > r.live_before, r.name
            assert (r.regression_after or 0) >= (r.regression_before or 0), r.name


# --------------------------------------------------------------------------- canary and bad input


async def _window(store: Store, plane: ControlPlane, items: list[Traffic], healthy: int = 12) -> None:
    """``items`` plus ``healthy`` order-status requests of each tenant (which the desk answers right): a
    cluster is judged against the rest of the window, and a window of only the cluster has no base."""
    tenants = sorted({t.tenant for t in items}) if healthy else []
    fine = [Traffic(t, AGENT, f"Where is order A-{1000 + i}? (ticket {i})", "status") for t in tenants
            for i in range(healthy)]
    save_trajectories(store, await record_traffic(items + fine, plane.registry, plane, World(), plane.backend))


def _facts(tenant: str, n: int, correction: str | None) -> list[Traffic]:
    f = FACTS["refund window"]
    return [Traffic(tenant, AGENT, f"{f.questions[i % 3]} (ticket {i})", "kb_question", correction) for i in range(n)]


def test_canary_is_promoted_after_good_traffic(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=base_parts(),
                             settings=PlaneSettings(canary_min=4))
        plane.registry.ensure_base("acme", AGENT, base_parts())
        asyncio.run(_window(store, plane, _facts("acme", 8, FACTS["refund window"].text)))
        first = plane.run_cycle("acme", AGENT)
        assert first.choice == "memory_insert" and first.version is not None and first.version.status == "canary"
        live_before = plane.registry.live("acme", AGENT)
        # Canary traffic: the gateway routes a share of sessions to the canary; these runs are the canary's.
        canary = first.version
        items = _facts("acme", 6, None)
        saved = []
        for tr in items:
            from molt.control.plane import overrides_for
            from molt.replay import ReplayAgent, record_episode
            pol = ReplayAgent(plane.backend, overrides_for(canary.parts, plane.memories, tenant_id="acme"),
                               version=canary.version_id)
            ev, rw, _ = asyncio.run(record_episode(AGENT, tr.input, pol, World().live_tools(), task=tr.task,
                                                   tenant_id="acme"))
            saved.append((ev, rw))
        save_trajectories(store, saved)
        second = plane.run_cycle("acme", AGENT)
        assert second.choice == "promote", second.record.reason
        assert plane.registry.live("acme", AGENT).version_id == canary.version_id != live_before.version_id


def test_bad_canary_is_aborted(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=base_parts())
        base = plane.registry.ensure_base("acme", AGENT, base_parts())
        asyncio.run(_window(store, plane, _facts("acme", 0, None) + [
            Traffic("acme", AGENT, f"Where is order A-10{10 + i}? (ticket {i})", "status") for i in range(8)]))
        bad = plane.registry.create("acme", AGENT, base.parts.with_system_prompt("Do not use tools."),
                                    parent=base.version_id)
        plane.registry.canary(bad.version_id, 0.2, actor="test")
        from molt.control.plane import overrides_for
        from molt.replay import ReplayAgent, record_episode
        pol = ReplayAgent(plane.backend, overrides_for(bad.parts), version=bad.version_id)
        runs = [asyncio.run(record_episode(AGENT, f"Where is order A-1020? (ticket {i})", pol, World().live_tools(),
                                           task="status", tenant_id="acme")) for i in range(4)]
        save_trajectories(store, [(e, r) for e, r, _ in runs])
        res = plane.run_cycle("acme", AGENT)
        assert res.choice == "rollback" and "aborted" in res.record.reason
        assert plane.registry.canaries("acme", AGENT) == []
        assert plane.registry.live("acme", AGENT).version_id == base.version_id


def test_memory_from_a_correction_with_pii_keeps_the_fact_not_the_pii(tmp_path: Path) -> None:
    """A correction that carries an email and a phone number: the memory is the fact, abstracted
    through the redactor (the verbatim text used to be refused by the safety gate, the fact lost)."""
    leaky = "The refund window is 45 days; write to jane.doe@example.com or call +1 415 555 0100."
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=base_parts())
        plane.registry.ensure_base("acme", AGENT, base_parts())
        asyncio.run(_window(store, plane, _facts("acme", 8, leaky)))
        res = plane.run_cycle("acme", AGENT)
        assert res.choice == "memory_insert", res.record.reason
        [stored] = MemoryStore(store).memories("acme")
        assert "45 days" in stored.text and "jane" not in stored.text and "415" not in stored.text
        assert plane.redactor.redact(stored.text)[1] == []


class Exploding(DeskModel):
    """A backend that fails every replay call (a candidate whose replay errors)."""

    async def chat(self, req: Any) -> Any:
        raise RuntimeError("replay backend crashed")


def test_candidate_whose_replay_errors_is_rejected(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        good = ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=base_parts())
        base = good.registry.ensure_base("acme", AGENT, base_parts())
        asyncio.run(_window(store, good, _facts("acme", 8, FACTS["refund window"].text)))
        plane = ControlPlane(store, Exploding(), live_tools=World().live_tools(), base_parts=base_parts())
        res = plane.run_cycle("acme", AGENT)
        assert res.choice in ("noop", "weight_update")
        assert res.record.rejected and all("replay" in c["rejected"] or "gate error" in c["rejected"]
                                           for c in res.record.rejected)
        assert plane.registry.live("acme", AGENT).version_id == base.version_id


def test_malformed_skill_patch_is_rejected(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = ControlPlane(store, DeskModel(), base_parts=base_parts())
        base = plane.registry.ensure_base("acme", AGENT, base_parts())
        bad = Candidate(kind="skill_patch", cluster="refund|x", description="empty", cost=3.0,
                        payload={"name": "refund procedure", "trigger": "refunds", "instructions": "   "})
        from molt.control.log import DecisionRecord
        rec = DecisionRecord(tenant_id="acme", agent_id=AGENT, choice="skill_patch", reason="test")
        with pytest.raises(InterventionError):
            plane._apply(bad, base, rec)
        assert plane.registry.live("acme", AGENT).version_id == base.version_id
        assert [v.version_id for v in plane.registry.list("acme")] == [base.version_id]


def test_user_correction_rewards_drive_the_memory_text(tmp_path: Path) -> None:
    """The memory inserted is the users' correction, read from late rewards."""
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=base_parts(),
                             settings=PlaneSettings(promote_directly=True))
        plane.registry.ensure_base("acme", AGENT, base_parts())
        asyncio.run(_window(store, plane, _facts("acme", 6, None)))
        ids = store.trajectory_ids("task = 'kb_question'")
        store.append_rewards([RewardAnnotation(trajectory_id=t, value=0.0, source=RewardSource.USER_CORRECTION,
                                               reason="Refunds: the refund window is 45 days.", tenant_id="acme")
                              for t in ids])
        res = plane.run_cycle("acme", AGENT)
        assert res.choice == "memory_insert" and res.version is not None and res.version.status == "live"
        [m] = MemoryStore(store).memories("acme", list(res.version.parts.memory_ids))
        assert m.text == "Refunds: the refund window is 45 days."


def test_run_all_adopts_agents_seen_in_traffic(tmp_path: Path) -> None:
    """`molt serve`'s scheduled plane: an agent with traffic but no version gets its base version."""
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        seed = ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=base_parts())
        seed.registry.ensure_base("globex", AGENT, base_parts())
        asyncio.run(_window(store, seed, _facts("globex", 2, None)))
        # Traffic of acme recorded while acme had no version (e.g. before the plane was turned on).
        from molt.replay import ReplayAgent, record_episode
        pol = ReplayAgent(seed.backend, version="unversioned")
        ev, rw, _ = asyncio.run(record_episode(AGENT, "Where is order A-1003?", pol, World().live_tools(),
                                               task="status", tenant_id="acme"))
        save_trajectories(store, [(ev, rw)])
        plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=base_parts())
        results = plane.run_all()
        assert {(r.record.tenant_id, r.record.agent_id) for r in results} == {("acme", AGENT), ("globex", AGENT)}
        assert plane.registry.live("acme", AGENT).parts == base_parts()
        assert len(ControlPlane(store, DeskModel()).run_all()) == 2   # both have versions now


def test_a_trainer_that_publishes_an_adapter_gets_a_canary_version(tmp_path: Path) -> None:
    """The weight-update hook may train and publish: its model part becomes a canary version."""
    from molt.control.versions import ModelPart

    asked: list[tuple[str, str, str]] = []

    def trainer(tenant: str, agent: str, cand: Candidate) -> ModelPart:
        asked.append((tenant, agent, cand.payload["task"]))
        return ModelPart(base="desk-model", adapter="desk-lora-1", adapter_path="/adapters/desk-lora-1")

    scenario = next(s for s in SCENARIOS if s.kind == "capability")
    r = run_scenario(scenario, tmp_path, trainer=trainer)
    assert r.choice == "weight_update" and asked == [(scenario.tenant, scenario.agent, "capability")]
    v = r.cycle.version
    assert v is not None and v.status == "canary" and v.parts.model.adapter == "desk-lora-1"
    assert v.parts.model_copy(update={"model": base_parts().model}) == base_parts()   # only the weights changed


