"""The canary is the experiment (issue 43): an agent failing most of its traffic over several small
clusters — none significant by itself — is evidence at the agent's level; a memory with positive replay
evidence goes to a guarded canary (10 %, never promoted directly) whose sequential test on live outcomes
promotes it, or aborts it at its exposure bound. The strict bar of before (``guarded=False``) does
nothing on the same window. The sequential test's false-promotion rate is measured on canaries without
effect, looked at after every run."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from molt.console.change import render_change
from molt.control.change import decision_change
from molt.control.plane import ControlPlane, PlaneSettings, overrides_for
from molt.control.signals import Episode
from molt.control.significance import canary_state, flip_rate, holm
from molt.replay import ReplayAgent, record_episode, save_trajectories
from molt.store import Store
from molt_desk.scenarios import Traffic, base_parts, record_traffic
from molt_desk.world import AGENT, FACTS, DeskModel, World

TOPICS = ["refund window", "warranty period", "support hours", "loyalty points", "invoice address",
          "exchange policy"]


def _window() -> list[Traffic]:
    """Six facts the agent lacks, three asks each (two of them corrected), beside three order lookups it
    answers: 18 of 21 requests fail — far beyond the tolerated half (p = 0.0007) — but each fact's three
    failures are too few for its own test (3 of 3 against 0.5 is 0.125)."""
    out = []
    for j, topic in enumerate(TOPICS):
        f = FACTS[topic]
        out += [Traffic("acme", AGENT, f"{f.questions[i % 3]} (ticket {j}-{i})", "kb_question",
                        f.text if i < 2 else None) for i in range(3)]
    out += [Traffic("acme", AGENT, f"Where is order A-{1000 + i}? (ticket s{i})", "status") for i in range(3)]
    return out


def _serve(plane: ControlPlane, store: Store, version: object, questions: list[str]) -> None:
    pol = ReplayAgent(plane.backend, overrides_for(version.parts, plane.memories, tenant_id="acme"),  # type: ignore[attr-defined]
                       version=version.version_id)  # type: ignore[attr-defined]
    runs = [asyncio.run(record_episode(AGENT, q, pol, World().live_tools(), task="kb_question", tenant_id="acme"))
            for q in questions]
    save_trajectories(store, [(e, r) for e, r, _ in runs])


@pytest.mark.parametrize("guarded", [False, True])
def test_agent_level_evidence_canaries_a_memory_that_live_outcomes_promote(tmp_path: Path, guarded: bool) -> None:
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=base_parts(),
                             # two users correct each fact here (min_hands: molt.control.hands, test_gate.py)
                             settings=PlaneSettings(promote_directly=True, guarded=guarded, replay_sample=8,
                                                    min_hands=2))
        base = plane.registry.ensure_base("acme", AGENT, base_parts())
        save_trajectories(store, asyncio.run(record_traffic(_window(), plane.registry, plane, World(), plane.backend)))
        first = plane.run_cycle("acme", AGENT)
        rec = first.record
        agent = rec.signals["evidence"]["agent"]
        assert agent["significant"] and (agent["k"], agent["n"]) == (18, 21), agent
        assert not any(c["evidence"]["significant"] for c in rec.signals["clusters"]), rec.signals["clusters"]
        if not guarded:  # the strict bar: nothing clears it, nothing changes
            assert first.choice == "noop" and first.version is None, rec.reason
            return
        assert first.choice == "memory_insert", (rec.reason, rec.rejected)
        canary = first.version
        assert canary is not None and (canary.status, canary.canary_weight) == ("canary", 0.1)  # not promoted
        assert rec.reason.startswith("guarded canary") and rec.signals["guard"]["alpha"] == 0.05
        text = next(c["payload"]["text"] for c in rec.candidates if c["candidate_id"] == first.chosen.candidate_id)
        fact = next(f for f in FACTS.values() if f.text == text)

        # Live outcomes: the fact asked under the canary (it answers) and under the live version (it does
        # not), interleaved in time. Three pairs are not enough; the sequential test waits, and says so.
        for i in range(3):
            _serve(plane, store, canary, [f"{fact.questions[i % 3]} (canary {i})"])
            _serve(plane, store, base, [f"{fact.questions[i % 3]} (live {i})"])
        waiting = plane.run_cycle("acme", AGENT)
        state = waiting.record.signals["canary"]
        assert waiting.choice == "noop" and state["decision"] == "continue" and state["wins"] == 3, state
        for i in range(3, 7):
            _serve(plane, store, canary, [f"{fact.questions[i % 3]} (canary {i})"])
            _serve(plane, store, base, [f"{fact.questions[i % 3]} (live {i})"])
        done = plane.run_cycle("acme", AGENT)
        state = done.record.signals["canary"]
        assert done.choice == "promote", (done.record.reason, state)
        assert state["decision"] == "promote" and state["ratio"] >= 20 and state["losses"] == 0
        assert plane.registry.live("acme", AGENT).version_id == canary.version_id
        # The decision log and the shared change view state the experiment and its sequential state: the
        # pairs won and lost, the mixture ratio against its threshold, the exposure against its bound.
        assert state["exposure"]["runs"] == 7 and state["exposure"]["max_runs"] == 60, state
        assert state["exposure"]["max_s"] == 7 * 86400.0 and state["exposure"]["elapsed_s"] >= 0, state
        assert any("7 pairs won, 0 lost" in a and "against the threshold 20" in a and "exposure 7/60 canary runs" in a
                   for a in done.record.actions), done.record.actions
        view = decision_change(plane.log.get(rec.cycle_id, tenant_id="acme"), registry=plane.registry,
                               memories=plane.memories, log=plane.log)
        assert view is not None and view["canary"] is not None, view
        assert view["canary"]["threshold"] == 20 and view["canary"]["max_runs"] == 60
        assert view["canary"]["text"].startswith("7 pairs won, 0 lost; mixture ratio") and \
            "exposure 7/60 canary runs" in view["canary"]["text"] and view["canary"]["text"].endswith("promote")
        html = render_change(view)
        assert 'class="canary"' in html and "mSPRT on canary/live pairs at level 0.05" in html
        assert "7 pairs won, 0 lost" in html, html
        # An ordinary change has no canary section.
        plain = decision_change(done.record, registry=plane.registry, memories=plane.memories, log=plane.log)
        assert plain is None or plain["canary"] is None


def test_guarded_canary_without_effect_is_aborted_at_its_exposure_bound(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=base_parts(),
                             settings=PlaneSettings(guarded_max_requests=4, replay_sample=8, min_hands=2))
        base = plane.registry.ensure_base("acme", AGENT, base_parts())
        save_trajectories(store, asyncio.run(record_traffic(_window(), plane.registry, plane, World(), plane.backend)))
        first = plane.run_cycle("acme", AGENT)
        canary = first.version
        assert canary is not None and canary.status == "canary", first.record.reason
        # The canary's traffic happens to be order lookups, which both versions answer: no discordant pair.
        for i in range(4):
            for v in (canary, base):
                _serve(plane, store, v, [f"Where is order A-{1000 + i}? ({v.version_id} {i})"])
        res = plane.run_cycle("acme", AGENT)
        assert res.choice == "rollback" and "exposure bound" in res.record.reason, res.record.reason
        assert plane.registry.canaries("acme", AGENT) == []
        assert plane.registry.live("acme", AGENT).version_id == base.version_id


@pytest.mark.parametrize("rate", [0.2, 0.5])
def test_sequential_test_false_promotion_rate_is_at_most_alpha(rate: float) -> None:
    """Canaries without effect (both versions succeed at ``rate``), a replay prior that promised a big
    fix (7 fixed, 0 broken), looked at after every canary run up to 60: promoted in at most alpha (+3 SE)
    of 400 runs. A canary with a real effect (0.6 against 0.2) is promoted in most."""
    alpha, runs = 0.05, 400
    promoted = 0
    for seed in range(runs):
        rng = random.Random(f"null-{rate}-{seed}")
        can, pairs = [], []
        while True:
            c = rng.random() < rate
            can.append(c)
            pairs.append((c, rng.random() < rate))
            st = canary_state(can, [p[1] for p in pairs], pairs, prior=(8.0, 1.0), alpha=alpha, max_runs=60,
                              expired=False)
            if st.decision != "continue":
                promoted += st.decision == "promote"
                break
    assert promoted / runs <= alpha + 3 * (alpha * (1 - alpha) / runs) ** 0.5, promoted
    good = 0
    for seed in range(100):
        rng = random.Random(f"effect-{seed}")
        can, pairs = [], []
        while True:
            c = rng.random() < 0.6
            can.append(c)
            pairs.append((c, rng.random() < 0.2))
            st = canary_state(can, [p[1] for p in pairs], pairs, prior=(8.0, 1.0), alpha=alpha, max_runs=60,
                              expired=False)
            if st.decision != "continue":
                good += st.decision == "promote"
                break
    assert good >= 80, good


def test_holm_finds_more_than_bonferroni_and_flip_rate_reads_disagreements() -> None:
    ps = {"a": 0.001, "b": 0.004, "c": 0.03}
    got = holm(ps, 0.01)
    assert [got[k][1] for k in "abc"] == [True, True, False]
    assert sum(p <= 0.01 / 3 for p in ps.values()) == 1  # Bonferroni finds one
    from datetime import UTC, datetime

    def ep(i: int, votes: dict[str, bool], corrections: list[str] | None = None) -> Episode:
        return Episode(trajectory_id=f"t{i}", tenant_id="acme", agent_id="a", task=None, policy_version="v1",
                       started_at=datetime(2026, 1, 1, tzinfo=UTC), success=False, reward=None, question="q",
                       answer="x", corrections=corrections or [], votes=votes)
    # 10 corrected calls, 2 of whose verifier rewards say success: a flip rate of 0.2 against the truth.
    window = [ep(i, {"verifier": i < 2, "correction": False}, ["fix"]) for i in range(10)]
    est = flip_rate(window)
    assert est.rate == pytest.approx(0.2) and est.against_truth == (2, 10) and est.upper > 0.2
    assert flip_rate([]).rate == 0.0 and flip_rate([]).upper == 1.0
