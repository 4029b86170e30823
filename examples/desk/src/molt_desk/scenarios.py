"""The built-in, labelled failure-scenario suite of the control plane.

Each :class:`Scenario` is a window of real agent runs — the support-desk agent of
:mod:`molt_desk.world` served by its scripted, context-reading policy, with live tools and the
world's verifier, recorded as ATDP trajectories — with one failure pattern in it and the best
intervention as ground truth:

==========================  ==================  ===================================================
kind                        ground truth        what fails
==========================  ==================  ===================================================
``missing_fact``            ``memory_insert``   a policy question the knowledge base cannot answer;
                                                users correct some answers
``tool_schema``             ``tool_schema_edit`` a legacy deployment's ``lookup_order`` schema does
                                                not say to keep the ``A-`` prefix
``format``                  ``harness_edit``    a task whose consumer needs JSON answers
``procedural``              ``skill_patch``     refunds issued without looking the order up first
``capability``              ``weight_update``   arithmetic the model cannot do, in several tenants
``regression``              ``rollback``        a promoted version (bad prompt, broken adapter or bad
                                                schema rewrite) does worse than the one before
``noise``                   ``noop``            sporadic transient errors, too few failures
==========================  ==================  ===================================================

:func:`run_scenario` builds a scenario in a fresh store, runs one control-plane cycle and measures,
for a chosen context intervention, the cluster's success rate before and after in replay (from the
decision's evidence) and live (fresh runs under the old and the new version), and the held-back
regression tasks live under both. ``python -m molt_desk.scenarios`` runs the whole suite.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from molt.atdp.models import RewardAnnotation, RewardSource
from molt.control.plane import ControlPlane, CycleResult, PlaneSettings, overrides_for
from molt.control.versions import AgentConfig, ModelPart, VersionRegistry
from molt.harness import ToolRewrite
from molt.replay import ReplayAgent, record_episode, save_trajectories
from molt.store import Store
from molt_desk.gateway import GatewayDesk, gateway_agent, register_checkers
from molt_desk.world import AGENT, FACTS, LEGACY_AGENT, ORDERS, DeskModel, World, seed

__all__ = ["SCENARIOS", "TRUTH", "Scenario", "ScenarioResult", "Traffic", "base_parts", "degrade", "record_traffic",
           "run_scenario", "run_suite"]

TRUTH = {"missing_fact": "memory_insert", "tool_schema": "tool_schema_edit", "format": "harness_edit",
         "procedural": "skill_patch", "capability": "weight_update", "regression": "rollback", "noise": "noop"}

_ORDER_IDS = sorted(ORDERS)


def base_parts() -> AgentConfig:
    """The parts of every scenario agent's first version."""
    return AgentConfig(model=ModelPart(base="desk-model"))


@dataclass(frozen=True)
class Traffic:
    """One request of a scenario: who sends what, under which task, and whether the user corrects a
    failed answer (``correction``)."""

    tenant: str
    agent: str
    input: str
    task: str
    correction: str | None = None
    phase: int = 0  # regression scenarios: 0 before the promotion, 1 after


@dataclass(frozen=True)
class Scenario:
    """A labelled scenario (see the module docstring)."""

    name: str
    kind: str
    tenant: str
    agent: str
    traffic: tuple[Traffic, ...]
    failing_task: str | None = None
    bad_parts: AgentConfig | None = None   # regression: the version promoted between the phases
    flaky: float = 0.0
    note: str = ""

    @property
    def truth(self) -> str:
        return TRUTH[self.kind]


# --------------------------------------------------------------------------- traffic generators


def _status(rng: random.Random, tenant: str, agent: str, n: int, task: str = "status") -> list[Traffic]:
    return [Traffic(tenant, agent, f"Where is order {rng.choice(_ORDER_IDS)}? (ticket {rng.randrange(10**5)})", task)
            for _ in range(n)]


def _kb(rng: random.Random, tenant: str, agent: str, n: int) -> list[Traffic]:
    f = FACTS["returns"]
    return [Traffic(tenant, agent, f"{rng.choice(f.questions)} (ticket {rng.randrange(10**5)})", "kb_question")
            for _ in range(n)]


def _facts(rng: random.Random, tenant: str, agent: str, topic: str, n: int, corrected: float) -> list[Traffic]:
    f = FACTS[topic]
    out = []
    for k in range(n):
        q = f"{rng.choice(f.questions)} (ticket {rng.randrange(10**5)})"
        # at least three users correct it: a memory needs corrections from three sessions (molt.control.hands)
        said = rng.random() < corrected or (corrected > 0 and k < 3)
        out.append(Traffic(tenant, agent, q, "kb_question", f.text if said else None))
    return out


def _refunds(rng: random.Random, tenant: str, agent: str, n: int, wins: int, explore: float) -> list[Traffic]:
    """``n`` refund requests of which exactly ``wins`` are ones the policy happens to handle right."""
    good, bad = [], []
    while len(good) < wins or len(bad) < n - wins:
        q = f"Please refund order {rng.choice(_ORDER_IDS)}. (ticket {rng.randrange(10**5)})"
        (good if seed("explore", q) < explore else bad).append(q)
    return [Traffic(tenant, agent, q, "refund") for q in good[:wins] + bad[:n - wins]]


def _cents(rng: random.Random, tenant: str, agent: str, n: int, corrected: float) -> list[Traffic]:
    out = []
    for _ in range(n):
        oid = rng.choice(_ORDER_IDS)
        q = f"What is the total of order {oid} in cents including 7% tax? (ticket {rng.randrange(10**5)})"
        corr = f"The total is {round(ORDERS[oid]['total'] * 107)} cents." if rng.random() < corrected else None
        out.append(Traffic(tenant, agent, q, "capability", corr))
    return out


def _healthy(rng: random.Random, tenant: str, agent: str, n: int) -> list[Traffic]:
    half = n // 2
    return _status(rng, tenant, agent, half) + _kb(rng, tenant, agent, n - half)


def _shuffled(rng: random.Random, *groups: list[Traffic]) -> tuple[Traffic, ...]:
    items = [t for g in groups for t in g]
    rng.shuffle(items)
    return tuple(items)


def _build_suite() -> list[Scenario]:
    out: list[Scenario] = []
    tenants = ["acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne"]
    # Missing facts: one per topic the knowledge base lacks.
    topics = [t for t in FACTS if t != "returns"]
    for i, topic in enumerate(topics):
        rng = random.Random(f"fact-{i}")
        t = tenants[i % len(tenants)]
        n_fail = 6 + (i * 3) % 9
        out.append(Scenario(f"missing-fact-{topic.replace(' ', '-')}", "missing_fact", t, AGENT,
                            _shuffled(rng, _facts(rng, t, AGENT, topic, n_fail, 0.4 + 0.1 * (i % 5)),
                                      _healthy(rng, t, AGENT, 12 + i)), failing_task="kb_question",
                            note=f"{n_fail} questions about the {topic}"))
    # Tool-schema confusion: the legacy deployment.
    for i in range(6):
        rng = random.Random(f"schema-{i}")
        t = tenants[(i + 2) % len(tenants)]
        out.append(Scenario(f"tool-schema-legacy-{i}", "tool_schema", t, LEGACY_AGENT,
                            _shuffled(rng, _status(rng, t, LEGACY_AGENT, 6 + 2 * i), _kb(rng, t, LEGACY_AGENT, 10 + i)),
                            failing_task="status", note="lookup_order schema without the A- prefix rule"))
    # Format: a JSON consumer.
    for i in range(6):
        rng = random.Random(f"format-{i}")
        t = tenants[(i + 4) % len(tenants)]
        out.append(Scenario(f"format-json-{i}", "format", t, AGENT,
                            _shuffled(rng, _status(rng, t, AGENT, 5 + 2 * i, task="status_json"),
                                      _healthy(rng, t, AGENT, 12)), failing_task="status_json",
                            note="status answers must be JSON objects"))
    # Procedural: refunds without the lookup step.
    for i in range(6):
        rng = random.Random(f"proc-{i}")
        t = tenants[(i + 1) % len(tenants)]
        n = 8 + 2 * i
        out.append(Scenario(f"procedural-refund-{i}", "procedural", t, AGENT,
                            _shuffled(rng, _refunds(rng, t, AGENT, n, 2 + i % 2, 0.15), _healthy(rng, t, AGENT, 10)),
                            failing_task="refund", note=f"{n} refund requests, a few handled right by chance"))
    # Capability gap across tenants (and one large single-tenant gap).
    for i in range(6):
        rng = random.Random(f"cap-{i}")
        t = tenants[(i + 3) % len(tenants)]
        others = [tenants[(i + 4) % len(tenants)], tenants[(i + 5) % len(tenants)]][: 1 + i % 2]
        groups = [_cents(rng, t, AGENT, 6 + i, 0.5), _healthy(rng, t, AGENT, 10)]
        if i == 5:
            groups = [_cents(rng, t, AGENT, 14, 0.5), _healthy(rng, t, AGENT, 10)]
            others = []
        for o in others:
            groups += [_cents(rng, o, AGENT, 6, 0.5), _healthy(rng, o, AGENT, 6)]
        out.append(Scenario(f"capability-tax-{i}", "capability", t, AGENT, _shuffled(rng, *groups),
                            failing_task="capability",
                            note=f"tax arithmetic fails in {1 + len(others)} tenant(s)"))
    # Regressions after a promotion.
    bad_versions = [
        ("prompt", base_parts().with_system_prompt("Do not use tools; answer from what you know.")),
        ("adapter", base_parts().with_model(ModelPart(base="desk-model", adapter="desk-lora-7-broken"))),
        ("schema", base_parts().with_tools({"lookup_order": ToolRewrite(parameters={
            "type": "object", "properties": {"order_id": {"type": "string", "description": "The order number."}},
            "required": ["order_id"]})})),
    ]
    for i in range(6):
        rng = random.Random(f"regr-{i}")
        t = tenants[(i + 5) % len(tenants)]
        label, bad = bad_versions[i % 3]
        before = [Traffic(x.tenant, x.agent, x.input, x.task)
                  for x in _status(rng, t, AGENT, 8 + i) + _kb(rng, t, AGENT, 4)]
        after = [Traffic(x.tenant, x.agent, x.input, x.task, phase=1) for x in _status(rng, t, AGENT, 8 + i)]
        out.append(Scenario(f"regression-{label}-{i}", "regression", t, AGENT, tuple(before + after),
                            failing_task="status", bad_parts=bad, note=f"promoted a version with a bad {label}"))
    # Noise: sporadic transient errors, a fact asked too rarely, a couple of hard questions.
    for i in range(6):
        rng = random.Random(f"noise-{i}")
        t = tenants[i % len(tenants)]
        groups = [_healthy(rng, t, AGENT, 18 + 2 * i)]
        if i % 3 == 1:
            groups.append(_facts(rng, t, AGENT, topics[i % len(topics)], 2, 1.0))
        if i % 3 == 2:
            groups.append(_cents(rng, t, AGENT, 2, 0.0))
        out.append(Scenario(f"noise-{i}", "noise", t, AGENT, _shuffled(rng, *groups), flaky=0.12 if i % 2 == 0 else 0.0,
                            note="sporadic failures with no cluster large enough"))
    # Mixed windows: the same failures with transient errors and a couple of unrelated hard questions
    # around them (the plane must still pick the intervention for the real cluster).
    for i, kind in enumerate(["missing_fact", "tool_schema", "format", "procedural"]):
        rng = random.Random(f"mixed-{i}")
        t = tenants[(i + 6) % len(tenants)]
        agent = LEGACY_AGENT if kind == "tool_schema" else AGENT
        main, task = {
            "missing_fact": (_facts(rng, t, agent, topics[i], 9, 0.6), "kb_question"),
            "tool_schema": (_status(rng, t, agent, 9), "status"),
            "format": (_status(rng, t, agent, 8, task="status_json"), "status_json"),
            "procedural": (_refunds(rng, t, agent, 11, 3, 0.15), "refund"),
        }[kind]
        noise = _cents(rng, t, agent, 2, 0.0) + _kb(rng, t, agent, 8)
        if kind != "tool_schema":
            noise += _status(rng, t, agent, 6)
        out.append(Scenario(f"mixed-{kind.replace('_', '-')}", kind, t, agent, _shuffled(rng, main, noise),
                            failing_task=task, flaky=0.1, note="the failure plus transient errors and 2 hard asks"))
    return out


#: The built-in suite (deterministic).
SCENARIOS: list[Scenario] = _build_suite()


# --------------------------------------------------------------------------- running


@dataclass
class ScenarioResult:
    """One scenario's outcome."""

    name: str
    kind: str
    truth: str
    choice: str
    reason: str
    seconds: float
    replay_before: float | None = None
    replay_after: float | None = None
    live_before: float | None = None
    live_after: float | None = None
    regression_before: float | None = None
    regression_after: float | None = None
    cycle: CycleResult | None = field(default=None, repr=False)
    first_choice: str | None = None

    @property
    def match(self) -> bool:
        return self.choice == self.truth


async def record_traffic(items: Sequence[Traffic], registry: VersionRegistry, plane: ControlPlane, world: World,
                  backend: DeskModel) -> list[tuple[list[Any], list[RewardAnnotation]]]:
    out = []
    for tr in items:
        live = registry.live(tr.tenant, tr.agent)
        assert live is not None
        policy = ReplayAgent(backend, overrides_for(live.parts, plane.memories if live.parts.memory_ids or
                                                     live.parts.skill_ids else None, tenant_id=tr.tenant),
                              version=live.version_id)
        events, rewards, _ = await record_episode(tr.agent, tr.input, policy, world.live_tools(), task=tr.task,
                                                  tenant_id=tr.tenant)
        rewards = list(rewards)
        if tr.correction and rewards and rewards[0].value <= 0.5:
            rewards.append(RewardAnnotation(trajectory_id=events[0].trajectory_id, value=0.0,
                                            source=RewardSource.USER_CORRECTION, reason=tr.correction,
                                            tenant_id=tr.tenant))
        out.append((events, rewards))
    return out


async def _live_rate(parts: AgentConfig, plane: ControlPlane, tenant: str, agent: str, inputs: Sequence[Traffic],
                     backend: DeskModel) -> float | None:
    if not inputs:
        return None
    world = World()
    policy = ReplayAgent(backend, overrides_for(parts, plane.memories if parts.memory_ids or parts.skill_ids
                                                 else None, tenant_id=tenant), version="live-check")
    wins = 0
    for tr in inputs:
        _, rewards, _ = await record_episode(agent, tr.input, policy, world.live_tools(), task=tr.task,
                                             tenant_id=tenant)
        wins += bool(rewards and rewards[0].value > 0.5)
    return wins / len(inputs)


def _fresh(s: Scenario, task: str | None, n: int, seed: str, *, exclude: bool = False) -> list[Traffic]:
    """Fresh requests like the scenario's (new tickets): of ``task``, or of every other task."""
    rng = random.Random(seed)
    pool = [t for t in s.traffic if t.tenant == s.tenant and ((t.task != task) if exclude else (t.task == task))]
    out = []
    for t in pool[:n]:
        out.append(Traffic(t.tenant, t.agent, t.input.rsplit("(ticket", 1)[0] + f"(ticket {rng.randrange(10**6)})",
                           t.task))
    return out


def degrade(items: list[tuple[list[Any], list[RewardAnnotation]]], seed: str, *, flip: float = 0.0,
            late: bool = False) -> tuple[list[tuple[list[Any], list[RewardAnnotation]]], list[RewardAnnotation]]:
    """Production's noise on recorded traffic: ``flip`` of the outcome (verifier) rewards flipped — a
    flipped one keeps no reason — and, with ``late``, the user corrections held back (returned
    separately, to arrive a window later)."""
    rng = random.Random(f"degrade-{seed}")
    out, held = [], []
    for events, rewards in items:
        kept = []
        for r in rewards:
            if r.source == RewardSource.USER_CORRECTION and late:
                held.append(r)
                continue
            if r.source == RewardSource.VERIFIER and rng.random() < flip:
                r = r.model_copy(update={"value": 1.0 - r.value, "reason": None})
            kept.append(r)
        out.append((events, kept))
    return out, held


async def arun_scenario(s: Scenario, root: Path, *, settings: PlaneSettings | None = None,
                        memories: Any = None, trainer: Any = None, flip: float = 0.0,
                        late_corrections: bool = False, capture: str = "registered") -> ScenarioResult:
    """Build ``s`` in a fresh store under ``root``, run one cycle for its tenant and agent, measure.

    ``capture="registered"`` records the ``@molt.replayable`` desk agents in process;
    ``capture="gateway"`` drives their twins through a real gateway as plain HTTP loops, with no entry
    point registered (:mod:`molt_desk.gateway`): the plane replays them from the recording alone.
    ``flip`` and ``late_corrections`` degrade the recorded signals (:func:`degrade`; registered capture).
    With late corrections a cycle that chose nothing is followed, once the corrections have arrived, by
    a second one: the result is what the second made (``first_choice`` is the first cycle's).
    """
    if capture not in ("registered", "gateway"):
        raise ValueError(f"capture must be 'registered' or 'gateway', not {capture!r}.")
    t0 = time.perf_counter()
    backend = DeskModel()
    world = World(flaky=s.flaky)
    via = capture == "gateway"
    name = gateway_agent if via else (lambda a: a)
    held: list[RewardAnnotation] = []
    with Store.open(root / s.name, auto_compact=False) as store:
        plane = ControlPlane(store, backend, live_tools=World().live_tools(), settings=settings,
                             memories=memories(store) if memories else None, base_parts=base_parts(),
                             trainer=trainer)
        registry = plane.registry
        for tenant, agent in {(t.tenant, t.agent) for t in s.traffic}:
            registry.ensure_base(tenant, name(agent), base_parts(), actor="scenario")
        desk = GatewayDesk(store, registry, backend, {t.tenant for t in s.traffic},
                           root / f"{s.name}-spool") if via else None
        try:
            if desk is not None:
                register_checkers({t.agent for t in s.traffic})
                _through(desk, [t for t in s.traffic if t.phase == 0], world)
            else:
                items = await record_traffic([t for t in s.traffic if t.phase == 0], registry, plane, world, backend)
                items, held = degrade(items, s.name, flip=flip, late=late_corrections)
                save_trajectories(store, items)
            if s.bad_parts is not None:
                if s.bad_parts.model.adapter:  # the promoted adapter is loaded, as a publish would
                    await backend.load_adapter(s.bad_parts.model.adapter, s.bad_parts.model.adapter_path or "scenario")
                live = registry.live(s.tenant, name(s.agent))
                assert live is not None
                bad = registry.create(s.tenant, name(s.agent), s.bad_parts, parent=live.version_id,
                                      note="a bad change")
                registry.promote(bad.version_id, actor="scenario")
                phase1 = [t for t in s.traffic if t.phase == 1]
                if desk is not None:
                    desk.sync()
                    _through(desk, phase1, world)
                else:
                    after, more = degrade(await record_traffic(phase1, registry, plane, world, backend),
                                          s.name + "-after", flip=flip, late=late_corrections)
                    held += more
                    save_trajectories(store, after)
        finally:
            if desk is not None:
                desk.close()
        old = registry.live(s.tenant, name(s.agent))
        assert old is not None
        cycle = await plane.arun_cycle(s.tenant, name(s.agent))
        first = cycle.choice
        if held:  # the corrections arrive a window late (stamped now, after the first cycle)
            now = datetime.now(UTC)
            store.append_rewards([r.model_copy(update={"created_at": now}) for r in held])
            if cycle.choice == "noop":
                cycle = await plane.arun_cycle(s.tenant, name(s.agent))
        res = ScenarioResult(s.name, s.kind, s.truth, cycle.choice, cycle.record.reason, 0.0, cycle=cycle,
                             first_choice=first)
        chosen = cycle.chosen
        if chosen is not None and chosen.kind not in ("weight_update",):
            ev = cycle.evaluations.get(chosen.candidate_id, {}).get("replay", {})
            res.replay_before, res.replay_after = ev.get("baseline_success_rate"), ev.get("candidate_success_rate")
            new = cycle.version
            if new is not None:  # live: fresh requests to the desk agent under the old and the new parts
                failing = _fresh(s, s.failing_task, 8, f"{s.name}-live")
                others = _fresh(s, s.failing_task, 8, f"{s.name}-regr", exclude=True)
                res.live_before = await _live_rate(old.parts, plane, s.tenant, s.agent, failing, backend)
                res.live_after = await _live_rate(new.parts, plane, s.tenant, s.agent, failing, backend)
                res.regression_before = await _live_rate(old.parts, plane, s.tenant, s.agent, others, backend)
                res.regression_after = await _live_rate(new.parts, plane, s.tenant, s.agent, others, backend)
    res.seconds = time.perf_counter() - t0
    return res


def _through(desk: GatewayDesk, items: Sequence[Traffic], world: World) -> None:
    """Each request through the gateway; the checker's verdict and any correction posted late."""
    for tr in items:
        tid, answer = desk.ask(tr.tenant, tr.agent, tr.input, world)
        ok = desk.check(tr.tenant, tid, tr.input, tr.task, answer)
        if tr.correction and not ok:
            desk.reward(tr.tenant, tid, 0.0, "user_correction", tr.correction)
    desk.flush()


def run_scenario(s: Scenario, root: Path | None = None, **kw: Any) -> ScenarioResult:
    """Sync wrapper of :func:`arun_scenario` (a temporary directory when ``root`` is ``None``)."""
    if root is not None:
        return asyncio.run(arun_scenario(s, root, **kw))
    with tempfile.TemporaryDirectory(prefix="molt-scenario-") as d:
        return asyncio.run(arun_scenario(s, Path(d), **kw))


def run_suite(scenarios: Sequence[Scenario] | None = None, root: Path | None = None,
              progress: Any = None, **kw: Any) -> list[ScenarioResult]:
    """Run every scenario (default: :data:`SCENARIOS`)."""
    out = []
    with tempfile.TemporaryDirectory(prefix="molt-scenarios-") as d:
        base = root or Path(d)
        for s in scenarios or SCENARIOS:
            r = run_scenario(s, base, **kw)
            if progress is not None:
                progress(r)
            out.append(r)
    return out


if __name__ == "__main__":  # pragma: no cover - a manual entry point; bench/bench_control.py is the report
    run_suite(progress=lambda r: print(f"{'ok ' if r.match else 'BAD'} {r.name:34} {r.choice:17} "
                                       f"truth={r.truth:17} {r.seconds:5.1f}s  {r.reason[:90]}"))
