"""Cross-tenant probes of the web console, shared by ``test_console_isolation.py`` (hypothesis worlds)
and ``bench/reliability/run.py`` section 5 (seeded random worlds).

A *world* is two or more tenants, each with agents (names may be shared across tenants), trajectories
(late rewards, errors), quarantined records, policy versions and control-plane decisions. Every text
a tenant owns carries its *marker*; with a tenant's key, :func:`probe` asks every console page and
JSON endpoint — list pages with each agent filter (the tenant's own, the other tenant's, a hostile
one), every outcome filter, detail pages by the other tenant's trajectory and version ids, version
diffs, decisions, signals, quarantine, a rollback of the other tenant's agent — and reports a leak
whenever a response body holds another tenant's marker, tenant id, trajectory, event or version id,
a detail request for the other tenant's id answers anything but 404, or the other tenant's live
version moved.
"""

from __future__ import annotations

import html
import random
import re
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import orjson

OUTCOMES = ("success", "failure", "error", "unrewarded")


@dataclass
class TrajectorySpec:
    agent: str
    text: str
    answer: str
    reward: float | None = None
    error: bool = False
    late: float | None = None


@dataclass
class TenantSpec:
    """What one tenant owns; every text gets ``marker`` appended when the world is built."""

    tenant: str
    marker: str
    agents: list[str]
    trajectories: list[TrajectorySpec]
    quarantine: list[str] = field(default_factory=list)
    decisions: list[tuple[str, str]] = field(default_factory=list)  # (agent, reason)
    prompt: str = "answer briefly"


@dataclass
class Built:
    """Ids the world got when it was written, per tenant."""

    trajectories: dict[str, list[str]] = field(default_factory=dict)
    events: dict[str, list[str]] = field(default_factory=dict)
    versions: dict[str, list[str]] = field(default_factory=dict)
    live: dict[str, dict[str, str]] = field(default_factory=dict)  # tenant → agent → live version id


def keys(specs: list[TenantSpec]) -> dict[str, tuple[str, str]]:
    """An admin and a reader key per tenant."""
    out: dict[str, tuple[str, str]] = {}
    for s in specs:
        out[f"sk-{s.tenant}-admin"] = (s.tenant, "admin")
        out[f"sk-{s.tenant}-reader"] = (s.tenant, "reader")
    return out


def build(store: Any, specs: list[TenantSpec], spool: Path) -> Built:
    """Write the world into ``store`` through the Recorder, the quarantine, the version registry and
    the decision log."""
    from molt.atdp import Event, EventKind, Generation, Outcome, RewardAnnotation, RewardSource, UserMessage
    from molt.capture import Recorder
    from molt.control.log import DecisionLog, DecisionRecord
    from molt.control.versions import AgentConfig, ModelPart, VersionRegistry

    built = Built()
    rec = Recorder(store, spool_dir=spool, fsync="never")
    for s in specs:
        tids, eids = built.trajectories.setdefault(s.tenant, []), built.events.setdefault(s.tenant, [])
        for t in s.trajectories:
            tid = rec.new_trajectory()
            md = {"tenant_id": s.tenant, "agent_id": t.agent, "task": f"task {s.marker}"}
            user = Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata=md,
                         action=UserMessage(content=f"{t.text} {s.marker}"))
            call = Event(trajectory_id=tid, parent_id=user.event_id, kind=EventKind.MODEL_CALL, metadata=md,
                         action=Generation(model="m", text=f"{t.answer} {s.marker}"), reward=t.reward,
                         outcome=Outcome(status="error", error={"type": "ToolError", "message": f"failed {s.marker}"})
                         if t.error else None)
            for ev in (user, call):
                rec.record(ev)
            if t.late is not None:
                rec.reward(RewardAnnotation(trajectory_id=tid, event_id=call.event_id, value=t.late,
                                            source=RewardSource.USER_CORRECTION, reason=f"late {s.marker}",
                                            tenant_id=s.tenant))
            tids.append(tid)
            eids += [user.event_id, call.event_id]
    assert rec.flush(timeout=60, deliver=True), "the world was not written"
    rec.close()
    reg, decisions = VersionRegistry(store), DecisionLog(store)
    for s in specs:
        for reason in s.quarantine:
            store.quarantine(f"{reason} {s.marker}", stage="validate", tenant_id=s.tenant, kind="model_call",
                             trajectory_id=built.trajectories[s.tenant][0] if built.trajectories[s.tenant] else None)
        vids = built.versions.setdefault(s.tenant, [])
        for agent in s.agents:
            base = reg.ensure_base(s.tenant, agent, AgentConfig(model=ModelPart(base="m")))
            v2 = reg.create(s.tenant, agent, base.parts.with_system_prompt(f"{s.prompt} {s.marker}"),
                            parent=base.version_id, note=f"edit {s.marker}", created_by="control-plane")
            reg.promote(v2.version_id, actor="control-plane")
            vids += [base.version_id, v2.version_id]
            built.live.setdefault(s.tenant, {})[agent] = v2.version_id
        for agent, reason in s.decisions:
            applied = built.live[s.tenant].get(agent)
            decisions.append(DecisionRecord(tenant_id=s.tenant, agent_id=agent, choice="harness_edit",
                                            reason=f"{reason} {s.marker}", applied_version=applied))
    return built


@dataclass
class ProbeResult:
    probes: int = 0
    leaks: list[str] = field(default_factory=list)


def probe(client: Any, specs: list[TenantSpec], built: Built, live_of: Callable[[str, str], str | None],
          base: str = "") -> ProbeResult:
    """Every console page and endpoint, with each tenant's admin and reader keys, against the others'
    data (see the module docstring). ``live_of(tenant, agent)`` reads a live version id back."""
    out = ProbeResult()
    for me in specs:
        others = [s for s in specs if s.tenant != me.tenant]
        foreign: set[str] = set()  # what must never show: every other tenant's markers and ids
        for o in others:
            foreign |= {o.marker, o.tenant, *built.trajectories[o.tenant], *built.events[o.tenant],
                        *built.versions[o.tenant]}
        for role in ("admin", "reader"):
            h = {"authorization": f"Bearer sk-{me.tenant}-{role}"}

            def get(path: str, expect: set[int] | None = None, *, h: dict[str, str] = h,
                    who: str = f"{role} of {me.tenant}", foreign: set[str] = foreign) -> Any:
                r = client.get(base + path, headers=h)
                _check(out, f"{who}: GET {path}", r, foreign, expect, path)
                return r

            agents = sorted({*me.agents, *(a for o in others for a in o.agents)})
            get("/trajectories", {200})
            for a in agents:
                get(f"/trajectories?agent={quote(a)}", {200})
                get(f"/versions?agent={quote(a)}", {200})
                get(f"/decisions?agent={quote(a)}", {200})
                get(f"/api/signals?agent={quote(a)}&bucket_s=60", {200})
            hostile = quote("x' OR tenant_id != '" + me.tenant)
            for path in (f"/trajectories?agent={hostile}", f"/versions?agent={hostile}",
                         f"/decisions?agent={hostile}", f"/api/signals?agent={hostile}"):
                get(path, {200})
            for o in OUTCOMES:
                get(f"/trajectories?outcome={o}", {200})
                for a in agents:
                    get(f"/trajectories?agent={quote(a)}&outcome={o}", {200})
            for tid in built.trajectories[me.tenant][:2]:
                get(f"/trajectories/{tid}", {200})
            for o in others:
                for tid in built.trajectories[o.tenant]:
                    get(f"/trajectories/{tid}", {404})
                ov = built.versions[o.tenant]
                mine = built.versions[me.tenant]
                for a, b in [(ov[i], ov[i + 1]) for i in range(0, len(ov) - 1, 2)]:
                    get(f"/versions/diff?a={quote(a)}&b={quote(b)}", {404})
                    if mine:
                        get(f"/versions/diff?a={quote(mine[0])}&b={quote(b)}", {404})
                        get(f"/versions/diff?a={quote(a)}&b={quote(mine[0])}", {404})
            if len(built.versions[me.tenant]) >= 2:
                mv = built.versions[me.tenant]
                get(f"/versions/diff?a={quote(mv[0])}&b={quote(mv[1])}", {200})
            for path in ("/versions", "/decisions", "/signals", "/api/signals", "/api/signals?bucket_s=1"):
                get(path, {200})
            get("/quarantine", {200} if role == "admin" else {403})
            if role == "admin":  # a rollback of another tenant's agent (same name or not) never moves theirs
                for o in others:
                    for a in o.agents:
                        before = live_of(o.tenant, a)
                        r = client.post(base + "/versions/rollback", headers=h, data={"agent_id": a})
                        _check(out, f"admin of {me.tenant}: rollback {o.tenant}/{a}", r, foreign, None,
                               f"/versions/rollback?agent_id={quote(a)}")
                        if live_of(o.tenant, a) != before:
                            out.leaks.append(f"admin of {me.tenant} rolled back {o.tenant}/{a}")
    return out


def _check(out: ProbeResult, what: str, r: Any, foreign: set[str], expect: set[int] | None,
           asked: str = "") -> None:
    out.probes += 1
    body = r.text
    # An id the caller sent may come back in the answer ("No trajectory 'x'."): that echoes the
    # request, it is not a row of the other tenant. Cut those echoes out before looking for leaks.
    for part in re.split(r"[/?&=]", asked):
        v = unquote(part)
        if len(v) >= 8:
            for form in {v, html.escape(v), html.escape(v, quote=False), orjson.dumps(v).decode()[1:-1]}:
                body = body.replace(form, "")
    shown = sorted(s for s in foreign if s and s in body)
    if shown:
        out.leaks.append(f"{what}: {r.status_code} shows {shown[:3]}")
    if expect is not None and r.status_code not in expect:
        out.leaks.append(f"{what}: status {r.status_code}, expected {sorted(expect)}: {body[:200]!r}")


# ---------------------------------------------------------------------------- random worlds (bench)

_TEXT = string.ascii_letters + string.digits + " <>&\"'/%_-.,;:!?é中🙂\n"


def random_world(rng: random.Random, n_tenants: int = 2) -> list[TenantSpec]:
    """A world like the hypothesis strategy's, from ``rng``: shared agent names half the time."""
    def text() -> str:
        return "".join(rng.choice(_TEXT) for _ in range(rng.randint(0, 30)))

    def name() -> str:
        return rng.choice(string.ascii_lowercase) + "".join(
            rng.choice(string.ascii_lowercase + string.digits + "-_.") for _ in range(rng.randint(0, 10)))

    shared = name()
    specs = []
    for _ in range(n_tenants):
        agents = list(dict.fromkeys([shared if rng.random() < 0.5 else name(), name()][: rng.randint(1, 2)]))
        trajs = [TrajectorySpec(agent=rng.choice(agents), text=text(), answer=text(),
                                reward=rng.choice([None, 0.0, 1.0]), error=rng.random() < 0.2,
                                late=rng.choice([None, None, -0.5, 1.0])) for _ in range(rng.randint(1, 3))]
        specs.append(TenantSpec(tenant=f"t{rng.getrandbits(32):08x}", marker=f"mk{rng.getrandbits(40):010x}",
                                agents=agents, trajectories=trajs,
                                quarantine=[text() for _ in range(rng.randint(0, 2))],
                                decisions=[(rng.choice(agents), text()) for _ in range(rng.randint(0, 2))],
                                prompt=text()))
    return specs


def run_world(home: Path, specs: list[TenantSpec]) -> ProbeResult:
    """Build ``specs`` in a fresh store under ``home`` and probe the console over it."""
    from starlette.testclient import TestClient

    from molt.console import create_console_app
    from molt.control.versions import VersionRegistry
    from molt.governance.access import KeyRing
    from molt.store import Store

    store = Store.open(home / "store", auto_compact=False)
    try:
        built = build(store, specs, home / "spool")
        reg = VersionRegistry(store)
        app = create_console_app(store, KeyRing.from_mapping(keys(specs)), versions=reg)

        def live_of(tenant: str, agent: str) -> str | None:
            v = reg.live(tenant, agent) if hasattr(reg, "live") else None
            return v.version_id if v is not None else None

        with TestClient(app) as client:
            return probe(client, specs, built, live_of, base="")
    finally:
        store.close()
