"""Issue 41, finding 3: one writer per (tenant, agent).

Two `molt evolve run` processes on one agent used to both make canaries from the same live version,
and the later promotion silently discarded the earlier one's change. Now a cycle holds the agent's
lease (:mod:`molt.control.lease`): the second process exits naming the holder (or, started after the
first finished, finds its canary and waits for traffic) — one canary either way; and a promotion is a
compare-and-set on the live version it was compared against.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from molt.control.lease import LeaseHeld, Leases
from molt.control.plane import ControlPlane
from molt.control.versions import StalePromotion, VersionRegistry
from molt.replay import save_trajectories
from molt.store import Store
from molt_desk.scenarios import Traffic, base_parts, record_traffic
from molt_desk.world import AGENT, FACTS, DeskModel, World

_HERE = Path(__file__).resolve().parent


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    """acme's desk agent with traffic a cycle turns into a memory-insert candidate."""
    with Store.open(tmp_path / "store", auto_compact=False) as store:
        plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools())
        plane.registry.ensure_base("acme", AGENT, base_parts())
        f = FACTS["warranty period"]
        items = [Traffic("acme", AGENT, f"{f.questions[i % 3]} (ticket {i})", "kb_question", f.text)
                 for i in range(8)]
        save_trajectories(store, asyncio.run(record_traffic(items, plane.registry, plane, World(), plane.backend)))
    return tmp_path


def _evolve(home: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "MOLT_HOME": str(home), "PYTHONPATH": f"{_HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("MOLT_KEYS", None)
    env.pop("MOLT_API_KEY", None)
    molt = str(Path(sys.executable).with_name("molt"))
    return subprocess.Popen([molt, "evolve", "run", "--tenant", "acme", "--agent", AGENT, "--backend",
                             "slow_desk:SlowDesk", "--live-tools", "molt_desk.world:live_tools"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_two_concurrent_evolve_runs_make_one_canary(home: Path) -> None:
    procs = [_evolve(home), _evolve(home)]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = [p.returncode for p in procs]
    with Store.open(home / "store", auto_compact=False) as store:
        reg = VersionRegistry(store)
        canaries = reg.canaries("acme", AGENT)
        versions = reg.list("acme", AGENT)
    assert len(canaries) == 1, (codes, outs, [v.version_id for v in versions])
    assert len(versions) == 2  # the base and one candidate: the second writer made none
    assert 0 in codes, outs
    if codes != [0, 0]:  # they overlapped: the second exits naming the holder
        refused = outs[codes.index(2)][1]
        assert "is being evolved by" in refused and "(pid" in refused, refused
    else:  # one ran after the other: it found the canary and waits for its traffic
        assert any("waiting for canary" in o[0] for o in outs), outs


def test_the_lease_names_its_holder_expires_and_is_renewed(tmp_path: Path) -> None:
    now = [1000.0]
    with Store.open(tmp_path / "store", auto_compact=False) as store:
        leases = Leases(store, ttl_s=30.0, clock=lambda: now[0])
        a = leases.acquire("acme", "support", "plane-a")
        with pytest.raises(LeaseHeld, match="is being evolved by plane-a"):
            leases.acquire("acme", "support", "plane-b")
        assert isinstance(leases.try_acquire("globex", "support", "plane-b"), type(a))  # per (tenant, agent)
        now[0] += 20
        assert leases.renew(a)                        # renewed before expiry: held 30 s more
        now[0] += 20
        assert leases.holder("acme", "support")[0] == "plane-a"
        now[0] += 31                                  # a holder that died: its lease expires
        b = leases.acquire("acme", "support", "plane-b")
        assert not leases.renew(a) and a.lost         # the old holder learns it lost the lease
        leases.release(a)                             # a lost lease's release changes nothing
        assert leases.holder("acme", "support")[0] == "plane-b"
        leases.release(b)
        assert leases.holder("acme", "support") is None
        t0 = time.monotonic()
        c = leases.acquire("acme", "support", "plane-c", wait_s=1.0)
        assert time.monotonic() - t0 < 1.0 and c.holder == "plane-c"
        # a second Leases over the same store (another process's view) agrees
        assert Leases(store, clock=lambda: now[0]).holder("acme", "support")[0] == "plane-c"


def test_no_promotion_over_an_uncompared_live_version(tmp_path: Path) -> None:
    with Store.open(tmp_path / "store", auto_compact=False) as store:
        reg = VersionRegistry(store)
        v1 = reg.ensure_base("acme", "support", base_parts())
        v2 = reg.create("acme", "support", v1.parts.with_system_prompt("change two"), parent=v1.version_id)
        v3 = reg.create("acme", "support", v1.parts.with_system_prompt("change three"), parent=v1.version_id)
        reg.canary(v2.version_id, 0.1, actor="plane-a")
        reg.canary(v3.version_id, 0.1, actor="plane-b")
        reg.promote(v2.version_id, actor="plane-a", expected_live=v1.version_id)
        with pytest.raises(StalePromotion, match=f"{v3.version_id} was compared against {v1.version_id}"):
            reg.promote(v3.version_id, actor="plane-b", expected_live=v3.parent_id)
        assert reg.live("acme", "support").version_id == v2.version_id  # v2's change is not discarded
