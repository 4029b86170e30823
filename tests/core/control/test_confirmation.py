"""Screen, then confirm by replay (molt.control.significance): the sign test is exact, the route's false-alarm
rate holds against an agent whose failures are noise (where a baseline read from the recording would
not), and a pattern the observational bar cannot reach on its window is confirmed by replay."""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import string
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from itertools import product
from pathlib import Path

import numpy as np
import pytest

from molt.control.diagnose import cluster_failures
from molt.control.plane import ControlPlane, PlaneSettings
from molt.control.signals import Episode
from molt.control.significance import confirmation, screen_levels
from molt.replay import save_trajectories
from molt.stats import sign_greater
from molt.store import Store
from molt_desk.scenarios import Traffic, base_parts, record_traffic
from molt_desk.world import AGENT, FACTS, ORDERS, DeskModel, World


class IntentEmbedder:
    """Requests of one named intent (the first word) near one random unit vector, as in test_diagnose:
    the test measures the statistics, not the embedding model."""

    dim = 64

    def _unit(self, key: str) -> np.ndarray:
        v = np.random.default_rng(int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big"))
        u = v.standard_normal(self.dim)
        return u / np.linalg.norm(u)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = [self._unit(t.split()[0]) + 0.15 * self._unit(t) for t in texts]
        return np.asarray([v / np.linalg.norm(v) for v in out], np.float32)


def _null_window(rng: random.Random, p: float, n: int = 60, intents: int = 6) -> list[Episode]:
    """Failures independent of the request, over intents of random sizes."""
    out: list[Episode] = []
    for k in range(intents):
        for _ in range(1 + rng.randrange(2 * n // intents)):
            ok = rng.random() >= p
            out.append(Episode(trajectory_id=f"t{len(out)}", tenant_id="acme", agent_id="agent", task=None,
                               policy_version="v1", started_at=datetime(2026, 11, 30, tzinfo=UTC)
                               + timedelta(seconds=len(out)), success=ok, reward=float(ok),
                               question=f"intent{string.ascii_lowercase[k]} ask {rng.randrange(10**8)}", answer="x"))
    return out


def test_sign_test_is_exact() -> None:
    for n in range(1, 9):
        for k in range(n + 1):
            want = sum(1 for bits in product((0, 1), repeat=n) if sum(bits) >= k) / 2 ** n
            assert sign_greater(k, n - k) == pytest.approx(want, rel=1e-12), (k, n)
    assert sign_greater(0, 3) == 1.0 and sign_greater(7, 0) == pytest.approx(0.5 ** 7)


def test_screen_levels_are_a_weighted_split_of_alpha() -> None:
    lv = screen_levels({"a": 0.01, "b": 0.04, "c": 0.5}, {"a": 2, "b": 1}, 0.01)
    assert set(lv) == {"a", "b"}  # c has no candidate: no share
    assert 2 * lv["a"] + lv["b"] == pytest.approx(0.01)
    assert lv["a"] * 2 == pytest.approx(4 * lv["b"])  # weight 1/p, then evenly over the cluster's candidates


def _route(window: list[Episode], rng: random.Random, ok_rate: float, alpha: float, screen: float,
           *, recorded_baseline: bool = False) -> bool:
    """Whether the confirmation route would make a change in ``window`` for a candidate that does
    nothing: every replay, under the live version or the candidate, is a fresh run of an agent that
    succeeds with ``ok_rate`` whatever the request (what the plane's paired replays are). With
    ``recorded_baseline``, the candidate replayed on the failures alone against what was recorded (every
one a failure) — the mistake the design avoids: a selected failure of noise recovers on a fresh run."""
    found = cluster_failures(window, embedder=IntentEmbedder(), alpha=alpha, screen=screen)
    screened = {c.key: c for c in found if c.screened}
    levels = screen_levels({k: c.evidence.p_min for k, c in screened.items() if c.evidence}, dict.fromkeys(screened, 1),
                           alpha)
    for key, c in screened.items():
        region = [e.trajectory_id for e in c.failures]
        if recorded_baseline:
            live = dict.fromkeys(region, 0.0)
        else:
            region += [e.trajectory_id for e in c.requests if e.trajectory_id not in set(region)]
            live = {t: float(rng.random() < ok_rate) for t in region}
        cand = {t: float(rng.random() < ok_rate) for t in region}
        if confirmation(live, cand, levels[key]).confirmed:
            return True
    return False


@pytest.mark.parametrize("p", [0.15, 0.3])
def test_confirmation_route_false_alarm_rate_is_at_most_alpha(p: float) -> None:
    """Windows whose failures do not depend on the request (a stochastic agent failing at rate ``p``),
    a loose screen (0.5) so many noise clusters get replayed, and a candidate with no effect: the route
    changes the agent in at most alpha of the windows. Reading the live side from the recording (its
    selected failures "recover" on a fresh run: regression to the mean) is far above it."""
    alpha, screen, windows = 0.1, 0.5, 300
    rng = random.Random(f"confirm-null-{p}")
    paired = naive = 0
    for _ in range(windows):
        w = _null_window(rng, p=p)
        paired += _route(w, rng, 1 - p, alpha, screen)
        naive += _route(w, rng, 1 - p, alpha, screen, recorded_baseline=True)
    bound = alpha + 3 * math.sqrt(alpha * (1 - alpha) / windows)
    assert paired / windows <= bound, paired
    assert naive / windows > bound, naive


def test_replay_confirms_what_the_bar_cannot_reach(tmp_path: Path) -> None:
    """Eight refund-window asks the agent cannot answer (users correct them) beside twelve order lookups of
    which a flaky order service fails about half: the rest of the window fails too often for the bar
    (Fisher and the confirmed-failure test ~0.02, 8 of 8 against the tolerated 0.5 is 0.004, the level
    0.01 / 3 / clusters), so before the screen the cycle was a no-op. Screened, the memory is replayed on
    the cluster's asks beside the live version: 8 fixed, 0 broken (sign test 0.0039) within the cluster's
    share of alpha — it goes live. With five asks (0.031) the replay cannot confirm it: under the strict
    bar no change; by default a guarded canary (10 % of the sessions, never promoted directly) whose live
    outcomes decide."""
    world = World(flaky=0.5)
    refund, ids = FACTS["refund window"], sorted(ORDERS)
    for asks, choice, guarded in ((8, "memory_insert", True), (5, "noop", False), (5, "memory_insert", True)):
        items = [Traffic("acme", AGENT, f"{refund.questions[i % 3]} (ticket r{i})", "kb_question", refund.text)
                 for i in range(asks)]
        items += [Traffic("acme", AGENT, f"Where is order {ids[i % len(ids)]}? (ticket s{i})", "status")
                  for i in range(12)]
        with Store.open(tmp_path / f"s{asks}{guarded}", auto_compact=False) as store:
            plane = ControlPlane(store, DeskModel(), live_tools=world.live_tools(), base_parts=base_parts(),
                                 settings=PlaneSettings(promote_directly=True, guarded=guarded))
            plane.registry.ensure_base("acme", AGENT, base_parts())
            save_trajectories(store, asyncio.run(record_traffic(items, plane.registry, plane, world, DeskModel())))
            res = plane.run_cycle("acme", AGENT)
            clusters = res.record.signals["clusters"]
            fact = [c for c in clusters if c["signature"] == "answer"]
            assert fact and not fact[0]["evidence"]["significant"] and fact[0]["evidence"]["screened"], clusters
            assert res.choice == choice, res.record.reason
            confirmations = [c["evidence"]["confirmation"] for c in res.record.candidates + res.record.rejected
                             if c.get("kind") == "memory_insert" and "confirmation" in (c.get("evidence") or {})
                             and c["payload"]["form"] == "prose"]  # the form that fixes it on the desk model
            assert confirmations and confirmations[0]["fixed"] == asks and confirmations[0]["broken"] == 0
            assert confirmations[0]["confirmed"] == (asks == 8)
            if res.version is not None:
                # confirmed: promoted at once as asked; unconfirmed: a guarded canary at 10 %
                assert (res.version.status, res.version.canary_weight) == (
                    ("live", None) if asks == 8 else ("canary", 0.1)), res.version
                assert ("guard" in res.record.signals) == (asks != 8)
