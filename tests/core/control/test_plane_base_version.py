"""Traffic recorded before the agent had a policy version counts as served under its base version.

A gateway serving an agent the plane has never seen stamps each event with its own model version; the
plane's first cycle creates the agent's base version (the served model, no change). The failures the
gateway recorded were served exactly that — so they are failures under the base version, and while the
base is live, under the live version. The plane used to read them as "recorded under an earlier
version" forever: a capability gap of pre-plane traffic then waited for evidence cycle after cycle and
never reached a weight update (bench/bench_evolve.py's multiplication family came out a no-op).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from molt.control.plane import ControlPlane, PlaneSettings, overrides_for
from molt.replay import ReplayAgent, record_episode, save_trajectories
from molt.store import Store
from molt_desk.scenarios import Traffic, base_parts
from molt_desk.world import AGENT, ORDERS, DeskModel, World

GATEWAY_STAMP = "desk-model"  # what a gateway with no bound version stamps: its model's name


def _record_before_any_version(store: Store, items: list[Traffic]) -> None:
    async def run() -> list[tuple[list, list]]:
        out = []
        for tr in items:  # served the model alone, stamped with the gateway's own version
            pol = ReplayAgent(DeskModel(), overrides_for(base_parts()), version=GATEWAY_STAMP)
            events, rewards, _ = await record_episode(tr.agent, tr.input, pol, World().live_tools(), task=tr.task,
                                                      tenant_id=tr.tenant)
            out.append((events, list(rewards)))
        return out

    save_trajectories(store, asyncio.run(run()))


def test_capability_gap_recorded_before_the_plane_reaches_weights(tmp_path: Path) -> None:
    """Tax arithmetic the desk model cannot do, 12 failures beside 12 order-status successes, all recorded
    before any policy version existed. Cycle 1 creates the base version and waits (no correction yet,
    no earlier cycle); cycle 2 replays the self-check rule on the cluster, it fails, and the plane asks
    for a weight update. Before the fix cycle 2 said "waiting for evidence: a failure under the live
    version" and so did every later cycle."""
    ids = sorted(ORDERS)
    items = [Traffic("acme", AGENT, f"What is the total of order {ids[i % len(ids)]} in cents including 7% tax? "
                                    f"(ticket {i})", "capability") for i in range(12)]
    items += [Traffic("acme", AGENT, f"Where is order A-{1000 + i}? (ticket s{i})", "status") for i in range(12)]
    asked: list[str] = []
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        _record_before_any_version(store, items)
        plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=base_parts(),
                             settings=PlaneSettings(promote_directly=True),
                             trainer=lambda t, a, c: asked.append(t) or "train-1")
        assert plane.registry.live("acme", AGENT) is None
        first = plane.run_cycle("acme", AGENT)
        base = plane.registry.live("acme", AGENT)
        assert base is not None and base.version_id != GATEWAY_STAMP
        assert first.choice == "noop" and first.record.reason.startswith("waiting for evidence"), first.record.reason
        assert "under the live version" not in first.record.reason
        second = plane.run_cycle("acme", AGENT)
        assert second.choice == "weight_update", second.record.reason
        assert second.chosen is not None and second.chosen.cluster.startswith("capability|answer")
        assert "tried: harness_edit" in second.record.reason and asked == ["acme"]
        # The failures were served under the live (base) version: the replay's baseline is the recording,
        # not a second replay of the live version.
        [rule] = [c for c in second.record.candidates if c["kind"] == "harness_edit"]
        assert rule["evidence"]["replay"].get("baseline") is None
