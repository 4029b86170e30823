"""Memories age, and a fact is never sent to training (issue 43 item 3).

- A missing fact twenty users correct alike, replayed on a model that ignores its context: the memory
  replays at +0 %, and the plane used to ask for a weight update; now the decision says the replay model
  does not use its context (a probe: a door code in its system prompt it does not repeat) and waits.
- A promoted memory that went stale (the policy changed; the users now correct it with a newer value):
  the plane updates it — the old memory replaced by the newer fact — never a weight update.
- Contradicting corrections ordered in time, the latest agreeing, are a change; without that order noise.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from molt.backends.base import ChatRequest
from molt.control.clusters import Cluster
from molt.control.diagnose import agreed_correction
from molt.control.plane import ControlPlane, PlaneSettings
from molt.control.signals import Episode
from molt.replay import save_trajectories
from molt.store import Store
from molt_desk.scenarios import Traffic, base_parts, record_traffic
from molt_desk.world import AGENT, FACTS, DeskModel, World


class ContextBlind(DeskModel):
    """The desk's policy with its system prompt taken away: no memory, rule or skill can move it."""

    def _answer(self, req: ChatRequest) -> Any:
        msgs = [m for m in req.messages if m.get("role") != "system"]
        return super()._answer(ChatRequest(model=req.model, messages=msgs, tools=req.tools))


def _window(tenant: str, n: int, correction: str | None) -> list[Traffic]:
    f = FACTS["refund window"]
    out = [Traffic(tenant, AGENT, f"{f.questions[i % 3]} (ticket {i})", "kb_question", correction) for i in range(n)]
    return out + [Traffic(tenant, AGENT, f"Where is order A-{1000 + i}? (ticket s{i})", "status") for i in range(12)]


def test_a_fact_replayed_on_a_model_that_ignores_context_waits_instead_of_training(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = ControlPlane(store, ContextBlind(), live_tools=World().live_tools(), base_parts=base_parts(),
                             settings=PlaneSettings(replay_sample=6, regression_sample=4))
        plane.registry.ensure_base("acme", AGENT, base_parts())
        items = _window("acme", 20, FACTS["refund window"].text)
        save_trajectories(store, asyncio.run(record_traffic(items, plane.registry, plane, World(), DeskModel())))
        res = plane.run_cycle("acme", AGENT)
        rec = res.record
        assert res.choice == "noop" and res.version is None, rec.reason
        assert "never sent to training" in rec.reason and "does not use its context" in rec.reason, rec.reason
        assert not plane.log.list("acme", AGENT, choice="weight_update")


def test_a_stale_memory_is_updated_never_trained(tmp_path: Path) -> None:
    """The live version remembers the refund window as 30 days; the policy is now 45 (what the desk's
    checker and users say). Eight users correct it with the new value: the plane replaces the memory."""
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=base_parts(),
                             settings=PlaneSettings(promote_directly=True))
        base = plane.registry.ensure_base("acme", AGENT, base_parts())
        old = plane.memories.add_memory("acme", "Acme's refund window is 30 days from delivery.", agent_id=AGENT)
        stale = plane.registry.create("acme", AGENT, base.parts.with_memories([old.memory_id]), parent=base.version_id)
        plane.registry.promote(stale.version_id, actor="test")
        items = _window("acme", 8, FACTS["refund window"].text)
        save_trajectories(store, asyncio.run(record_traffic(items, plane.registry, plane, World(), DeskModel())))
        res = plane.run_cycle("acme", AGENT)
        rec = res.record
        assert res.choice in ("memory_update", "memory_retire"), (rec.reason, rec.rejected)
        assert res.version is not None and old.memory_id not in res.version.parts.memory_ids
        kinds = {c["kind"] for c in rec.candidates + rec.rejected}
        assert {"memory_update", "memory_retire"} <= kinds, kinds
        assert not plane.log.list("acme", AGENT, choice="weight_update")


def _ep(i: int, correction: str) -> Episode:
    return Episode(trajectory_id=f"t{i}", tenant_id="acme", agent_id="a", task=None, policy_version="v1",
                   started_at=datetime(2026, 11, 30, tzinfo=UTC) + timedelta(minutes=i), success=False, reward=0.0,
                   question="How long is the refund window?", answer="30 days", corrections=[correction],
                   failure_signals=["correction"])


def test_time_ordered_contradictions_whose_latest_agree_are_a_change() -> None:
    old, new = "The refund window is 30 days.", "The refund window is 45 days."
    changed = Cluster(key="k", task=None, signature="answer", kind="answer",
                      failures=[_ep(i, old) for i in range(3)] + [_ep(3 + i, new) for i in range(3)])
    got = agreed_correction(changed)
    assert got is not None and got[0] == new and got[2] == 3, changed.notes
    assert "changed over time" in changed.notes[0]
    mixed = Cluster(key="k", task=None, signature="answer", kind="answer",
                    failures=[_ep(i, [old, new][i % 2]) for i in range(6)])
    assert agreed_correction(mixed) is None and "disagree" in mixed.notes[0]
