"""The control plane's cycle: signals → diagnosis → candidates → replay evaluation → gates → choice →
canary → promotion or automatic rollback, every step in the decision log.

One :meth:`ControlPlane.run_cycle` for one tenant's agent:

1. **Canaries first.** A version in canary is compared with the live one on the window, task for
   task (each task's canary success rate against the live version's on that task, so a canary is not
   judged by which tasks its few runs happened to draw): a delta below ``-canary_tolerance``, or a
   pooled rate significantly below the live one, aborts it (automatic rollback); ``canary_min``
   rewarded trajectories otherwise promote it. Either way the cycle ends there (one change at a time).
   A *guarded* canary (below) is decided by its sequential test instead
   (:func:`~molt.control.significance.canary_state`: promote, abort on harm or at its exposure bound, or go
   on — while it goes on the cycle continues, and a change with strict evidence takes its place).
2. **Signals** (:mod:`molt.control.signals`) over the newest ``window`` trajectories.
3. **Candidates**: a rollback when the live version — promoted inside the window — does worse than
   the one before it (:func:`~molt.control.diagnose.rollback_candidate`); and for every failure
   cluster that passes its test against the agent's base failure rate (a one-sided Fisher exact test,
   family-wise false-alarm rate ``alpha``; :func:`~molt.control.diagnose.cluster_failures`, no task
   labels needed) — or that is only *screened* (below the bar, within ``screen``: its context
   candidates must then pass the replay's confirmation, :mod:`molt.control.significance`) —, the typed
   candidates of :func:`~molt.control.diagnose.propose` — and, with a
   ``reflector``, the ones a model writes for it (:mod:`molt.control.reflector`). A cluster whose tool
   failed outside the agent (timeouts, 5xx: :func:`~molt.control.diagnose.environment_fault`) gets no
   candidate: it is flagged to the operator, and the cycle's choice is ``environment_fault`` when
   nothing else is to be done.
4. **Gates** for each context candidate, cheapest first: the safety gate on every text it would put in a
   prompt (:mod:`molt.control.gate`; again before canary), safety (memory and skill text pass
   redaction unchanged — generated text holding PII is rejected; every source trajectory belongs to
   the tenant), **replay** on the failing cluster (:func:`molt.replay.evaluate_candidate`: success
   delta with its 95 % interval; through the agent's ``@molt.replayable`` entry point when it has one,
   else re-driven from the recording alone, :mod:`molt.replay.generic`), and an offline
   **regression** suite (held-back successes of the window must not get worse). A candidate whose
   replay errors is rejected with the error.
5. **Selection**: u = argmax J(u) with J = gain − λ·cost, gain = the replay success delta × cluster
   size; the cheapest *sufficient* candidate (delta ≥ ``sufficient_gain`` and interval above zero)
   wins; with none, the best one clearing the evidence bar (``min_gain``, interval above zero);
   a weight update only for an answer-failure cluster whose evidence is in (a user correction, or a
   cycle has passed since its oldest failure: corrections are late; failures under the live version
   itself) and on which context candidates were generated, replayed and failed, and that recurs
   across tenants (≥ 2, ``min_cluster`` each) or is large (``min_weight_cluster``) — a candidate that
   could not be replayed is no evidence that context cannot fix it; a cluster still waiting is a no-op
   "waiting for evidence" naming what it waits for; else **no-op**, naming every significant cluster
   and what became of its candidates (the record's ``signals["clusters"]`` describes each). Before
   the weight update, the **guarded** route (``guarded``): a cheap, reversible context change whose
   replay is positive but whose interval is too wide for the bars above — on a significant or screened
   cluster, or any cluster of an agent whose own failure rate is significant
   (:func:`~molt.control.significance.agent_level`) — goes to a guarded canary at ``guarded_weight``.
   A weight update is never asked for a cluster whose users agree on a fact.
6. **Apply**: a new version (live parts + the change) goes to canary at ``canary_weight`` — or live
   at once with ``promote_directly``; a rollback is applied at once; a weight update is handed to the
   ``trainer`` hook (``None``: recorded as requested).

Defaults work on the labelled scenarios of the desk example (``examples/desk``, :mod:`molt_desk.scenarios`).

One module at ~1,000 lines because it is one idea: the cycle above, whose steps share the cycle's state
(window, live version, decision record) and are read and changed in their order; what each step computes
lives in its own module (signals, diagnose, evidence, reflector, replay, versions, weights).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from molt.backends.base import BaseBackend
from molt.control.approval import Approval, Proposals, needs_approval, proposal_evidence
from molt.control.clusters import embed_texts, intent_text, resolve_embedder
from molt.control.diagnose import (
    ALPHA,
    COSTS,
    QA_EXTRA,
    SCREEN,
    SIMILARITY,
    TOLERABLE,
    Candidate,
    Cluster,
    cluster_failures,
    environment_fault,
    propose,
    rollback_candidate,
    same_pattern,
)
from molt.control.gate import SafetyGate, Verdict, gate_context
from molt.control.hands import held_out_keys, many_hands, without_held_out
from molt.control.lease import LeaseHeld, Leases, holder_name
from molt.control.log import DecisionLog, DecisionRecord
from molt.control.provenance import record_change
from molt.control.signals import Episode, Signals, compute_signals, episodes
from molt.control.significance import (
    AgentLevel,
    Confirmation,
    FlipEstimate,
    agent_level,
    canary_state,
    confirmation,
    flip_rate,
    pair_in_time,
    screen_levels,
)
from molt.control.versions import AgentConfig, AgentVersion, ModelPart, StalePromotion, VersionRegistry
from molt.errors import InterventionError, MoltError
from molt.harness import Skill
from molt.replay import AGENTS, LiveTools, Normalization, Overrides, ReplayAgent, evaluate_candidate
from molt.replay.evaluate import Evaluation, ReplayMemo
from molt.replay.generic import checkable_facts
from molt.stats import newcombe_diff, stratified_delta
from molt.store import Filter, Store

__all__ = ["ControlPlane", "CycleResult", "PlaneSettings", "overrides_for", "run_scheduled", "settings_from_pairs"]

log = logging.getLogger("molt.control")
#: The cheap, reversible changes a guarded canary may try (weight updates keep the strict bar).
GUARDED_KINDS = frozenset({"memory_insert", "memory_update", "memory_retire", "skill_patch", "harness_edit",
                           "tool_schema_edit"})
_NAME_OK = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


class PlaneSettings(BaseModel):
    """Thresholds of the cycle (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    window: int = 400
    min_cluster: int = 4
    min_weight_cluster: int = 12
    min_gain: float = 0.2
    sufficient_gain: float = 0.5
    regression_sample: int = 12
    regression_tolerance: float = 0.1
    replay_sample: int = 24
    max_unknown_share: float = 0.5
    cost_lambda: float = 0.05
    regression_min_drop: float = 0.2
    canary_weight: float = 0.2
    canary_min: int = 8
    canary_tolerance: float = 0.1
    promote_directly: bool = False
    #: What may go live without an operator (molt.control.approval): ``auto`` everything, ``context`` no
    #: context change (memory, skill, harness, tool schema) — it becomes a proposed version —, ``all`` no
    #: new version at all. Rollbacks and canary aborts never wait.
    approval: Approval = "auto"
    #: The family-wise false-alarm rate of a window's failure-cluster tests (molt.control.diagnose).
    alpha: float = ALPHA
    #: The feature similarity down to which failures share a cluster (molt.control.diagnose).
    similarity: float = SIMILARITY
    #: The failure rate of one intent tolerated before acting on it, whatever the rest of the window does
    #: (the second test of molt.control.diagnose; in (0, 1)).
    tolerable: float = TOLERABLE
    #: A cluster below the bar whose smallest p-value is at most this is *screened*: its context candidates
    #: are replayed and go live only when the replay confirms them at ``alpha`` (molt.control.significance).
    screen: float = SCREEN
    #: The guarded canary (molt.control.significance, "the canary is the experiment"): a cheap, reversible
    #: context change (memory, skill, harness, tool schema) whose replay is positive (``min_gain``) but
    #: whose interval is wide — on a significant cluster, a screened one, or any cluster of an agent that
    #: fails beyond ``tolerable`` — goes to a small canary whose sequential test on live outcomes promotes
    #: or aborts it. ``False``: the strict bar alone (a context change needs its interval above zero).
    guarded: bool = True
    #: The guarded canary's share of the agent's sessions.
    guarded_weight: float = 0.1
    #: Its sequential test's false-promotion rate (and harm test's level).
    guarded_alpha: float = 0.05
    #: The fewest failures a cluster needs for a guarded canary: one or two asks of anything are noise,
    #: whatever their replay says.
    guarded_min_failures: int = 3
    #: Its exposure bound: canary runs, and seconds since it started; past either without a decision it
    #: is aborted.
    guarded_max_requests: int = 60
    guarded_max_s: float = 7 * 86400.0
    #: A reflector (molt.control.reflector) writing candidates beside the templates': an OpenAI-compatible
    #: base URL (``.../v1``; in production a strong model), or ``"served"`` for the plane's replay backend
    #: (the served model). ``None``: templates only. Its bearer token is read from the environment variable
    #: ``reflector_api_key_env`` names (never a setting: settings are printed in ``molt serve``'s banner).
    reflector_url: str | None = None
    #: The model the reflector asks (default: the replay backend's model).
    reflector_model: str | None = None
    reflector_api_key_env: str = "MOLT_REFLECTOR_API_KEY"
    reflector_max_tokens: int = 512
    reflector_timeout_s: float = 120.0
    #: Replay every candidate, even those dearer than a sufficient one already found (which cannot win):
    #: for measuring candidates (bench/bench_evolve.py), not for production cycles.
    replay_all: bool = False
    #: A memory or skill needs corrections (or successes) from this many distinct sessions, and — when they
    #: came through API keys — from this many keys (molt.control.hands).
    min_hands: int = 3
    min_keys: int = 2
    #: How long corrections from a key whose feedback the safety gate refused stay out of the evidence.
    held_out_hours: float = 72.0
    #: Entity types that make generated memory / skill text unservable (personal data and secrets;
    #: organisations and places are what policy facts are about, so they do not count).
    pii_types: frozenset[str] = frozenset({
        "PERSON", "EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "US_SSN", "IBAN_CODE", "IP_ADDRESS", "ADDRESS",
        "US_DRIVER_LICENSE", "API_KEY", "PASSWORD", "PRIVATE_KEY"})


def settings_from_pairs(items: Sequence[str], **given: Any) -> PlaneSettings:
    """:class:`PlaneSettings` from ``KEY=VALUE`` pairs (values read as JSON, else as text), over ``given``
    — what ``--plane-setting`` means in ``molt serve`` and ``molt evolve run``. A pair without ``=``, or
    an unknown key or bad value, raises :class:`ValueError` naming it."""
    import orjson

    out: dict[str, Any] = dict(given)
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{item!r}: expected KEY=VALUE (e.g. canary_min=6).")
        try:
            out[key.strip()] = orjson.loads(raw)
        except orjson.JSONDecodeError:
            out[key.strip()] = raw
    return PlaneSettings(**out)


@dataclass
class CycleResult:
    """What one cycle did for one agent."""

    record: DecisionRecord
    chosen: Candidate | None = None
    version: AgentVersion | None = None
    signals: Signals | None = None
    evaluations: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def choice(self) -> str:
        return self.record.choice


def overrides_for(parts: AgentConfig, memories: Any = None, *, tenant_id: str | None = None,
                  extra_memories: Sequence[str] = (), extra_skills: Sequence[Skill] = ()) -> Overrides:
    """The replay :class:`Overrides` that serve ``parts`` (all snapshot memories and skills injected)."""
    mems = list(parts.harness.memories)
    skills = list(parts.harness.skills)
    if memories is not None and tenant_id is not None:
        if parts.memory_ids:
            mems += [m.text for m in memories.memories(tenant_id, list(parts.memory_ids))]
        if parts.skill_ids:
            skills += [Skill(name=s.name, instructions=s.instructions)
                       for s in memories.skills(tenant_id, list(parts.skill_ids))]
    mems += list(extra_memories)
    skills += list(extra_skills)
    h = parts.effective_harness()
    return Overrides(system_prompt=h.system_prompt, system_prompt_mode=h.system_prompt_mode,
                     memories=tuple(dict.fromkeys(mems)), skills=tuple(skills), tool_rewrites=dict(h.tool_rewrites),
                     model=parts.model.adapter)


class ControlPlane:
    """The evolution control plane over one store.

    Args:
        store: the Molt store (trajectories, versions, memories, decision log).
        backend: the model backend replay evaluates candidates with (the one serving the agent), or a
            mapping agent id → backend when agents are served by different models.
        live_tools: sandboxed tools for replay branches that leave the recording.
        memories: a :class:`molt.control.memory.MemoryStore` (default: one over ``store``).
        redactor: checks generated memory / skill text, and redacts what the memory store keeps
            (default: a policy over ``settings.pii_types``, the personal-data and secret types).
        trainer: ``fn(tenant_id, agent_id, candidate)`` asked for weight updates. It returns the
            :class:`~molt.control.versions.ModelPart` of an adapter it trained and published (``molt serve
            --train``'s :class:`~molt.control.weights.WeightLoop`) — then the plane canaries a new version
            with that model part like any other change — or a request id (``str``: training happens
            elsewhere, e.g. a trainer service through :mod:`molt.control.weight_queue`, which canaries the
            adapter itself; a hook with ``outstanding(tenant_id, agent_id, model) → clusters`` says which
            requests are still open, so the plane asks again after a failed run). ``None`` (no hook)
            records the request only.
        base_parts: the parts of an agent's first version when it has none.
        embedder: embeds requests and corrections for failure clustering (default: the packaged MiniLM).
        judge: the judge model's backend for generic replay, asked when neither a verifier nor the
            user's correction can judge a replayed answer (default: the agent's replay backend, the
            served model).
        reflector: a :class:`molt.control.reflector.Reflector` — a model that reads each significant
            cluster and writes candidates beside the templates' (default: the one ``settings.reflector_url``
            names — how ``molt serve --plane-setting reflector_url=...`` configures it — else templates only).
    """

    #: How long a cycle waits for another writer's lease on its agent before :class:`LeaseHeld` (seconds).
    lease_wait_s: float = 0.0

    def __init__(self, store: Store, backend: BaseBackend | Mapping[str, BaseBackend], *,
                 live_tools: LiveTools | None = None,
                 memories: Any = None, redactor: Any = None, settings: PlaneSettings | None = None,
                 trainer: Callable[[str, str, Candidate], str | ModelPart] | None = None,
                 base_parts: AgentConfig | None = None, actor: str = "control-plane", embedder: Any = None,
                 judge: BaseBackend | None = None, reflector: Any = None, gate: SafetyGate | None = None):
        self.store = store
        self.backend = backend
        self.live_tools = live_tools
        self.settings = settings or PlaneSettings()
        self.registry = VersionRegistry(store)
        self.leases = Leases(store)
        self.log = DecisionLog(store)
        self.proposals = Proposals(store, self.registry)
        self._memories = memories
        self._redactor = redactor
        self.trainer = trainer
        self.base_parts = base_parts
        self.actor = actor
        self.embedder = embedder
        self.judge = judge
        self.reflector = reflector if reflector is not None else self._settings_reflector()
        # Every text a candidate would put in a prompt is screened before replay and again before canary.
        self.gate = gate if gate is not None else SafetyGate()
        self._gate_ctx: dict[str, Any] = {}
        self._cluster_failures: dict[str, list[str]] = {}
        self._current: AgentVersion | None = None
        self._live_evals: dict[tuple[str, str], Evaluation | None] = {}
        # Per cycle: the confirmation level of each screened cluster's candidates (screen_levels), and the
        # live version's replayed rewards on each screened cluster's region.
        self._confirm_levels: dict[str, float] = {}
        self._region_live: dict[tuple[str, str], dict[str, float | None]] = {}
        # Per cycle: the reward channel's flip rate, the agent-level test, the clusters only the agent-level
        # test makes worth a guarded canary, and the guarded candidate chosen (if any).
        self._flips = FlipEstimate(0.0, 1.0, (0, 0), (0, 0))
        self._agent: AgentLevel | None = None
        self._family: set[str] = set()
        self._guard: dict[str, Any] | None = None
        self._running_guard: AgentVersion | None = None
        # Per backend: whether the replay model uses what its context states (_context_probe).
        self._probes: dict[int, tuple[bool, str]] = {}
        self._probe_note: tuple[bool, str] | None = None
        # Across cycles: each trajectory's replay under each policy (by content), reused while the
        # trajectory and its rewards are unchanged — a sliding window meets the same runs cycle after cycle.
        self.replays = ReplayMemo()
        self._adapters: set[tuple[int, str]] = set()  # (backend, adapter) pairs the replay backends serve
        # Replay's default normalisation drops every ``*_id`` key when matching a tool request to the
        # recording; business ids (order_id, user_id) are what a candidate changes, so the plane
        # matches them: only transport ids and timestamps are ignored.
        self.normalization = Normalization(ignore_key_pattern=r"(_at|_ts)$|timestamp")

    def _settings_reflector(self) -> Any:
        """The reflector ``settings.reflector_url`` names (``None`` without one)."""
        s = self.settings
        if not s.reflector_url:
            return None
        from molt.control.reflector import Reflector

        kw: dict[str, Any] = {"max_tokens": s.reflector_max_tokens, "timeout_s": s.reflector_timeout_s}
        if s.reflector_url == "served":
            if isinstance(self.backend, Mapping):
                raise InterventionError("reflector_url='served' needs one replay backend; this plane has one per "
                                        "agent — give the reflector's URL instead.")
            return Reflector(backend=self.backend, model=s.reflector_model, **kw)
        model = s.reflector_model or (None if isinstance(self.backend, Mapping) else self.backend.model)
        if not model:
            raise InterventionError("reflector_url needs reflector_model (the model to ask at that endpoint).")
        return Reflector(s.reflector_url, model=model, api_key=os.environ.get(s.reflector_api_key_env) or None, **kw)

    def backend_for(self, agent_id: str) -> BaseBackend:
        """The backend that replays ``agent_id``'s candidates."""
        if isinstance(self.backend, Mapping):
            try:
                return self.backend[agent_id]
            except KeyError:
                raise InterventionError(f"No replay backend for agent {agent_id!r}; the plane has "
                                        f"{sorted(self.backend)}.") from None
        return self.backend

    def judge_for(self, agent_id: str) -> BaseBackend:
        """The judge model's backend for ``agent_id``'s generic replays (see ``judge``)."""
        return self.judge if self.judge is not None else self.backend_for(agent_id)

    @property
    def memories(self) -> Any:
        if self._memories is None:
            from molt.control.memory import MemoryStore
            self._memories = MemoryStore(self.store, redactor=self.redactor)
        return self._memories

    @property
    def redactor(self) -> Any:
        if self._redactor is None:
            from molt.governance.redaction import RedactionPolicy
            from molt.governance.redaction.profiles import redactor_for_profile

            # learned text (memories, skills, harness text) passes the thorough profile first
            self._redactor = redactor_for_profile("thorough", RedactionPolicy(
                name="control-plane-personal-data", entities=self.settings.pii_types))
        return self._redactor

    # ------------------------------------------------------------------ the cycle

    def run_cycle(self, tenant_id: str, agent_id: str) -> CycleResult:
        """One cycle for one agent (sync wrapper of :meth:`arun_cycle`)."""
        return asyncio.run(self.arun_cycle(tenant_id, agent_id))

    async def arun_cycle(self, tenant_id: str, agent_id: str) -> CycleResult:
        """One cycle for one agent under its writer lease (:mod:`molt.control.lease`: one writer per
        agent; another's lease raises :class:`~molt.control.lease.LeaseHeld` after ``lease_wait_s``)."""
        with self.leases.hold(tenant_id, agent_id, holder_name(self.actor), wait_s=self.lease_wait_s):
            return await self._arun_cycle(tenant_id, agent_id)

    async def _arun_cycle(self, tenant_id: str, agent_id: str) -> CycleResult:
        """One cycle for one agent: decide, apply, log. Never raises for a bad candidate."""
        s = self.settings
        live = self.registry.live(tenant_id, agent_id)
        if live is None:
            if self.base_parts is None:
                raise InterventionError(f"{tenant_id}/{agent_id} has no live policy version; create one "
                                        f"(molt versions) or give the plane base_parts.")
            live = self.registry.ensure_base(tenant_id, agent_id, self.base_parts, actor=self.actor)
        self._current = live
        self._live_evals = {}
        self._confirm_levels = {}
        self._region_live = {}
        self._confirmed_facts: set[tuple[str, str]] = set()
        self._guard = None
        self._running_guard = None
        window = self._served_under(episodes(self.store, tenant_id, agent_id, limit=s.window), tenant_id, agent_id)
        self._gate_ctx = gate_context(live, window)
        # corrections from keys whose feedback the gate refused lately are no evidence (molt.control.hands)
        window = without_held_out(window, self.store, held_out_keys(self.store, self.log, tenant_id, agent_id,
                                                                    hours=s.held_out_hours))
        signals = compute_signals(window, live_version=live.version_id)
        rec = DecisionRecord(tenant_id=tenant_id, agent_id=agent_id, choice="noop", reason="",
                             signals=signals.model_dump(mode="json"))
        result = CycleResult(record=rec, signals=signals)
        self._flips = flip_rate(window)
        self._agent = agent_level(window, s.tolerable, s.alpha, self._flips)
        rec.signals["evidence"] = {"agent": self._agent.summary(), "flip_rate": self._flips.summary(),
                                   "clusters": "Holm's step-down at alpha over the window's clusters "
                                               "(molt.control.clusters)",
                                   "bar": ("guarded: a context change with positive replay but a wide interval "
                                           "goes to a guarded canary; weight updates keep the strict bar"
                                           if s.guarded else "strict: every change needs its replay interval "
                                                             "above zero")}

        if await self._canaries(live, window, result):
            self.log.append(rec)
            return result
        waiting = self.registry.proposals(tenant_id, agent_id)
        if waiting:  # one change at a time: an open proposal is the next change, once an operator decides
            rec.reason = (f"waiting for an operator to approve or reject {', '.join(v.version_id for v in waiting)} "
                          f"(approval mode: molt versions proposals, or the console's Proposals page)")
            self.log.append(rec)
            return result

        candidates: list[Candidate] = []
        clusters: dict[str, Cluster] = {}
        faults: dict[str, str] = {}
        previous = self._previous(live)
        if previous is not None:
            rb = self._regression(live, previous, window)
            if rb is not None:
                candidates.append(rb)
        # Clusters span the window (failures under earlier versions count as evidence), but one that
        # the live version no longer shows — it ran the task and never failed this way — is fixed.
        # The evidence bar is each cluster's exact test against the rest of the window (diagnose).
        found = cluster_failures(window, embedder=self.embedder, alpha=s.alpha, similarity=s.similarity,
                                 tolerable=s.tolerable, screen=s.screen)
        # An agent failing beyond what it tolerates is itself the evidence: its clusters are where the
        # failures are, and each may get a context change tried on a guarded canary.
        family = s.guarded and self._agent is not None and self._agent.significant
        self._family = set()
        for c in found:
            if not (c.significant or c.screened or (family and c.size >= 2)):
                continue
            if not (c.significant or c.screened):
                self._family.add(c.key)
            live_runs = [e for e in c.requests if e.policy_version == live.version_id]
            if live_runs and not any(e.policy_version == live.version_id for e in c.failures):
                rec.actions.append(f"cluster {c.key} ({c.size}) not seen under {live.version_id}: already fixed")
                continue
            fault = environment_fault(c)
            if fault is not None:
                # The agent's call was right and the tool failed: the operator is told; changing the
                # agent would paper over an outage (and training on it would teach the model to avoid
                # a tool that works again tomorrow).
                faults[c.key] = fault
                rec.actions.append(f"flagged {c.key} ({c.size} failure(s)): {fault}")
                continue
            clusters[c.key] = c
            made = propose(c, window, live, redactor=self.redactor, embedder=self.embedder, similarity=s.similarity)
            made += self._lifecycle(c, made, live)
            # A screened cluster is not evidence enough for weights: replay cannot confirm a weight update.
            candidates.extend(x for x in made if c.significant or x.kind != "weight_update")
        self._cluster_failures = {k: [e.trajectory_id for e in c.failures] for k, c in clusters.items()}
        if self.reflector is not None and clusters:
            candidates.extend(await self._reflect(list(clusters.values()), window, live, rec))
        # The screened clusters' share of alpha, fixed before anything is replayed (molt.control.significance).
        screened = {k: c for k, c in clusters.items() if not c.significant}
        self._family &= set(screened)
        self._confirm_levels = screen_levels(
            {k: c.evidence.p_min for k, c in screened.items() if c.evidence is not None and k not in self._family},
            # a memory's two forms (prose, question and answer) are one test: whichever is confirmed first
            # spends the share (_gates)
            Counter(x.cluster for x in candidates if x.cluster in screened and x.kind != "weight_update"
                    and not _second_form(x)), s.alpha)
        n_sig = sum(1 for c in clusters.values() if c.significant)
        ag = self._agent
        assert ag is not None
        verdict = "significant" if ag.significant else "not significant"
        rec.actions.append(f"agent: {ag.failures} of {ag.requests} failed, p={ag.p_value:.3g} against the tolerated "
                           f"{ag.tolerable:g} at {ag.level:.3g} ({verdict}); reward flip rate {self._flips.rate:.2f} "
                           f"(95% upper {self._flips.upper:.2f})")
        rec.actions.append(f"{n_sig + len(faults)} failure cluster(s) significant at alpha {s.alpha} "
                           f"(of {len(found)}, Holm), {len(faults)} of them environment faults, "
                           f"{len(screened) - len(self._family)} more screened at {s.screen} (their candidates need "
                           f"the replay's confirmation, or a guarded canary), {len(self._family)} in the agent's "
                           f"significant failures (guarded canary only), {len(candidates)} candidate(s)")
        rec.signals["clusters"] = [c.summary() | ({"environment_fault": faults[c.key]} if c.key in faults else {})
                                   | ({"bar": "guarded: the agent's failures are significant, this cluster's are "
                                              "not by themselves"} if c.key in self._family else {})
                                   for c in found if c.significant or c.key in screened or c.key in faults]

        significant = any(c.significant for c in clusters.values())
        if not candidates:
            if faults and not significant:
                rec.choice = "environment_fault"
                rec.reason = "; ".join(f"{k}: {v}" for k, v in faults.items())
            elif significant:
                rec.reason = "no candidate could be built: " + "; ".join(
                    _no_candidate(c) for c in clusters.values())
            else:
                weak = [c for c in found if not c.significant and c.evidence is not None]
                if screened:
                    rec.actions.append("no candidate for the screened cluster(s): " + "; ".join(
                        _no_candidate(c) for c in screened.values()))
                best = min(weak, key=lambda c: c.evidence.p_value if c.evidence else 1.0, default=None)
                rec.reason = ("no failure cluster reaches the evidence bar"
                              + (f" ({len(weak)} cluster(s) below it; best {best.key}: {best.size} failure(s) of "
                                 f"{best.evidence.requests} requests, p={best.evidence.p_value:.3g} > "
                                 f"{best.evidence.level:.3g})" if best is not None and best.evidence is not None
                                 else f" ({sum(c.size for c in found)} failure(s) in {len(found)} cluster(s))"
                                 if found else " (no failures in the window)"))
            self._while_guarded(rec)
            self.log.append(rec)
            return result

        passed: list[tuple[Candidate, dict[str, Any]]] = []
        # Cheapest first (stable: templates before the reflector's at equal cost): the cheapest sufficient
        # candidate wins, so once one is found a dearer one cannot — it is not replayed (each replay is
        # model calls; this is most of a cycle's compute).
        found_sufficient: tuple[float, str] | None = None
        for cand in sorted(candidates, key=lambda c: c.cost):
            if cand.kind == "weight_update":
                continue
            entry = cand.model_dump(mode="json", exclude={"parts"})
            refused = self.proposals.was_rejected(tenant_id, agent_id, kind=cand.kind, cluster=cand.cluster,
                                                  payload=cand.payload, description=cand.description)
            if refused is not None:
                entry["rejected"] = f"operator: the same change was rejected for this cluster before ({refused})"
                rec.rejected.append(entry)
                continue
            if not self._screened(cand, entry, rec):
                continue
            if found_sufficient is not None and cand.cost > found_sufficient[0] and not s.replay_all:
                entry["rejected"] = (f"not replayed: {found_sufficient[1]} (cost {found_sufficient[0]:g}) already "
                                     f"fixes its cluster sufficiently, and the cheapest sufficient candidate wins")
                rec.rejected.append(entry)
                continue
            try:
                evidence = await self._gates(cand, live, window, clusters.get(cand.cluster))
            except Exception as exc:  # a candidate whose replay or gate errors is rejected, never applied
                log.warning("Candidate %s failed its gates: %s", cand.candidate_id, exc)
                entry["rejected"] = f"gate error: {type(exc).__name__}: {exc}"
                rec.rejected.append(entry)
                continue
            entry["evidence"] = evidence
            result.evaluations[cand.candidate_id] = evidence
            if evidence.get("rejected"):
                entry["rejected"] = evidence["rejected"]
                rec.rejected.append(entry)
            else:
                rec.candidates.append(entry)
                passed.append((cand, evidence))
                if self._sufficient(evidence["replay"]) and found_sufficient is None:
                    found_sufficient = (cand.cost, cand.kind)

        facts = {c.cluster for c in candidates if c.kind in ("memory_insert", "memory_update")}
        self._probe_note = None
        if any(c.kind == "weight_update" and c.cluster in facts for c in candidates):
            self._probe_note = await self._context_probe(agent_id)
        chosen, why = self._select(passed, candidates, clusters, result.evaluations)
        if chosen is None:
            notes = [f"{c.key}: {n}" for c in clusters.values() for n in c.notes]
            for c in clusters.values():  # every cluster the log mentions, with what became of its candidates
                refused = [f"{r.get('kind')}: {r.get('rejected')}" for r in rec.rejected if r.get("cluster") == c.key]
                if refused and not any(x.get("cluster") == c.key for x in rec.candidates):
                    notes.append(f"{c.key} ({c.size} failure(s)): every candidate refused — " + "; ".join(refused[:4]))
            rec.reason = "; ".join([why, *notes])
            if faults:
                rec.reason += "; flagged " + "; ".join(f"{k}: {v}" for k, v in faults.items())
                # Nothing else to do: no significant cluster (a screened one's unconfirmed candidates are
                # evidence for a later window), or none of the significant ones' candidates passed.
                if not significant or (not passed and not any(c.kind == "weight_update" for c in candidates)):
                    rec.choice = "environment_fault"
            self._while_guarded(rec)
            self.log.append(rec)
            return result
        wu_entry = chosen.model_dump(mode="json", exclude={"parts"})
        if chosen.kind == "weight_update":
            rec.candidates.append(wu_entry)
        result.chosen = chosen
        rec.choice = chosen.kind
        rec.chosen_candidate = chosen.candidate_id
        rec.reason = why
        if self._running_guard is not None:
            # One change at a time: a change with strict evidence takes the guarded canary's place (the
            # guarded change is proposed again, on its own evidence, once this one is decided).
            g = self._running_guard
            self.registry.abort(g.version_id, actor=self.actor, reason=f"withdrawn for {chosen.kind}: strict evidence")
            rec.actions.append(f"guarded canary {g.version_id} withdrawn: {chosen.kind} clears the strict bar")
        try:
            result.version = self._apply(chosen, live, rec)
        except MoltError as exc:
            rec.choice, rec.reason = "noop", f"applying {chosen.kind} failed: {exc}"
            result.chosen = None
        rec.applied_version = result.version.version_id if result.version is not None else None
        self.log.append(rec)
        return result

    async def _reflect(self, clusters: list[Cluster], window: list[Episode], live: AgentVersion,
                       rec: DecisionRecord) -> list[Candidate]:
        """The reflector's candidates for each cluster; what it returned and the gates refused goes to
        the decision log with the reason. A reflector that fails fails open: the templates remain."""
        out: list[Candidate] = []
        for c in clusters:
            try:
                got = await self.reflector.areflect(c, window, live, redactor=self.redactor)
            except Exception as exc:  # never let the reflector break the cycle
                log.warning("Reflector failed on %s: %s", c.key, exc)
                rec.rejected.append({"kind": "reflection", "cluster": c.key,
                                     "rejected": f"reflector: {type(exc).__name__}: {exc}"})
                continue
            rec.rejected.extend(got.rejected)
            rec.actions.append(f"reflector on {c.key}: {len(got.candidates)} candidate(s), "
                               f"{len(got.rejected)} rejected, {got.cost.get('prompt_tokens', 0)}+"
                               f"{got.cost.get('completion_tokens', 0)} tokens in {got.cost.get('seconds', 0):.1f} s")
            out.extend(got.candidates)
        return out

    def _served_under(self, window: list[Episode], tenant_id: str, agent_id: str) -> list[Episode]:
        """``window`` with each run's version as the registry knows it: a run stamped with a version the
        registry does not hold for this agent — traffic served before the agent had a policy version
        (the gateway stamps its own model version), or by a server not bound to the registry — was
        served the model alone, which is the agent's base version (its first: what the plane creates
        from ``base_parts``, the served model with no change). Without this, failures recorded before
        the plane existed were "under an earlier version" forever: never evidence against the live one,
        and every candidate paid a replay of the live version as its baseline. Unstamped runs (imports,
        adapters without provenance) stay unstamped."""
        versions = self.registry.list(tenant_id, agent_id)
        if not versions:
            return window
        known = {v.version_id for v in versions}
        base = versions[-1].version_id  # newest first: the last is the agent's first version
        return [e if e.policy_version is None or e.policy_version in known
                else replace(e, policy_version=base) for e in window]

    def agents(self, tenant_id: str | None = None) -> set[tuple[str, str]]:
        """The ``(tenant, agent)`` pairs this plane evolves: every agent with policy versions (of one
        tenant, or all) and — when the plane has ``base_parts`` — every agent seen in the traffic,
        however it was captured (gateway, adapter, import): no registration needed."""
        pairs = set(self.registry.agents(tenant_id))
        if self.base_parts is not None:
            pairs |= self._agents_in_traffic(tenant_id)
        return pairs

    def run_all(self, tenant_id: str | None = None, *, stop: threading.Event | None = None) -> list[CycleResult]:
        """One cycle for every agent of :meth:`agents`. An agent whose cycle raises is logged and
        skipped: one agent's bad data never stops the others' evolution. Once ``stop`` is set, the
        running cycle is cancelled at its next await and no other starts: a cycle replays with the served
        model for minutes, and a server shutting down must not wait for it. A cancelled cycle has applied
        and logged nothing (applying a version and logging its decision have no await between them)."""
        out = []
        for t, a in sorted(self.agents(tenant_id)):
            if stop is not None and stop.is_set():
                break
            try:
                r = self.run_cycle(t, a) if stop is None else asyncio.run(_unless_stopped(self.arun_cycle(t, a), stop))
            except LeaseHeld as exc:  # another writer evolves this agent now; the next round retries
                log.warning("%s", exc)
                continue
            except Exception:
                log.exception("Control-plane cycle for %s/%s failed; the other agents go on.", t, a)
                continue
            if r is not None:
                out.append(r)
        return out

    def _agents_in_traffic(self, tenant_id: str | None) -> set[tuple[str, str]]:
        first = Filter(seq=0).present("agent_id").present("tenant_id")
        q = self.store.table("events").search().where(str(first.where(tenant_id=tenant_id) if tenant_id else first))
        rows = q.select(["tenant_id", "agent_id"]).limit(None).to_arrow().to_pylist()
        return {(r["tenant_id"], r["agent_id"]) for r in rows if _NAME_OK.match(r["tenant_id"])
                and _NAME_OK.match(r["agent_id"])}

    # ------------------------------------------------------------------ steps

    async def _canaries(self, live: AgentVersion, window: list[Episode], result: CycleResult) -> bool:
        s = self.settings
        rec = result.record
        for c in self.registry.canaries(live.tenant_id, live.agent_id):
            mine = [e for e in window if e.policy_version == c.version_id and e.success is not None]
            live_runs = [e for e in window if e.policy_version == live.version_id and e.success is not None]
            guard = self._guard_of(c)
            if guard is not None:
                return self._guarded_canary(c, live, guard, mine, live_runs, result)
            start = min((m.started_at for m in mine), default=None)
            # Compare with the live version's concurrent traffic; with too little of it, its whole window.
            concurrent = [e for e in live_runs if start is not None and e.started_at >= start]
            theirs = concurrent if len(concurrent) >= max(1, s.canary_min // 2) else live_runs
            if not mine:
                rec.actions.append(f"canary {c.version_id}: no rewarded traffic yet")
                rec.choice, rec.reason = "noop", f"waiting for canary {c.version_id} traffic"
                return True
            k1 = sum(e.success for e in mine)
            k0 = sum(e.success for e in theirs)
            rate = k1 / len(mine)
            base = k0 / len(theirs) if theirs else rate
            delta = stratified_delta(_task_outcomes(mine), _task_outcomes(theirs)) if theirs else 0.0
            _, hi = newcombe_diff(k1, len(mine), k0, len(theirs)) if theirs else (0.0, 1.0)
            rec.actions.append(f"canary {c.version_id}: {rate:.2f} vs live {base:.2f} on {len(mine)}/{len(theirs)}"
                               f", {delta:+.2f} task for task")
            # Abort when the canary is significantly worse, or worse beyond the tolerance on a full sample;
            # a couple of unlucky runs are not evidence.
            if hi < 0 or (len(mine) >= s.canary_min and delta < -s.canary_tolerance):
                self.registry.abort(c.version_id, actor=self.actor, reason=f"canary delta {delta:+.2f}")
                rec.choice, rec.reason = "rollback", f"canary {c.version_id} aborted: delta {delta:+.2f} vs live"
                rec.applied_version = live.version_id
                return True
            if len(mine) >= s.canary_min:
                try:  # compare-and-set: the canary's change was made on its parent
                    result.version = self.registry.promote(c.version_id, actor=self.actor,
                                                           reason=f"canary delta {delta:+.2f} on {len(mine)}",
                                                           expected_live=c.parent_id or live.version_id)
                except StalePromotion as exc:
                    self.registry.abort(c.version_id, actor=self.actor, reason=str(exc))
                    rec.choice, rec.reason = "rollback", f"canary {c.version_id} aborted: {exc}"
                    return True
                rec.choice, rec.reason = "promote", f"canary {c.version_id} promoted: delta {delta:+.2f}"
                rec.applied_version = c.version_id
                return True
            rec.choice, rec.reason = "noop", f"canary {c.version_id} has {len(mine)}/{s.canary_min} rewarded runs"
            return True
        return False

    def _lifecycle(self, cluster: Cluster, made: list[Candidate], live: AgentVersion) -> list[Candidate]:
        """Candidates that age the live version's memories for ``cluster``: *update* — a newer fact (the
        users' agreed correction) on the same topic as a live memory that states other facts supersedes
        it (the memory replaced, replayed on the window) — and *retire* — the live version without one of
        its memories (a drop after an upstream change, or a memory gone stale: replay with and without
        each part says which explains the failures). Replay decides; a weight update is never chosen while
        one of them fixes the cluster."""
        if not live.parts.memory_ids:
            return []
        mems = self.memories.memories(live.tenant_id, list(live.parts.memory_ids))
        if not mems:
            return []
        out: list[Candidate] = []
        ids = [e.trajectory_id for e in cluster.failures]
        emb = resolve_embedder(self.embedder)
        texts = [m.text for m in mems]
        mem_vecs = embed_texts(emb, texts)
        for new in [c for c in made if c.kind == "memory_insert"]:
            vec = embed_texts(emb, [new.payload["text"]])[0]
            # the fact itself (a memory's question-and-answer form also holds the question's figures)
            mine = {f.lower() for f in checkable_facts(new.payload.get("fact") or new.payload["text"])}
            for m, v in zip(mems, mem_vecs, strict=True):
                theirs = {f.lower() for f in checkable_facts(m.text)}
                if float(v @ vec) >= self.settings.similarity and mine != theirs:
                    out.append(Candidate(
                        kind="memory_update", cluster=cluster.key,
                        cost=COSTS["memory_update"] + (QA_EXTRA if new.payload.get("form") == "qa" else 0.0),
                        description=f"update memory {m.memory_id} ('{m.text[:60]}') with the newer fact: "
                                    f"{new.payload['text'][:100]}",
                        parts=live.parts.model_copy(update={"memory_ids": tuple(
                            i for i in live.parts.memory_ids if i != m.memory_id)}),
                        payload={"text": new.payload["text"], "replaces": m.memory_id, "old_text": m.text,
                                 "form": new.payload.get("form", "prose")},
                        source_trajectories=new.source_trajectories))
        centroid = cluster.centroid
        ranked = sorted(zip(mems, mem_vecs, strict=True), key=lambda mv: -float(mv[1] @ centroid)
                        if centroid is not None and len(centroid) == len(mv[1]) else 0.0)
        for m, _ in ranked[:3]:
            out.append(Candidate(
                kind="memory_retire", cluster=cluster.key, cost=COSTS["memory_retire"],
                description=f"retire memory {m.memory_id} ('{m.text[:80]}'): replay the cluster without it",
                parts=live.parts.model_copy(update={"memory_ids": tuple(
                    i for i in live.parts.memory_ids if i != m.memory_id)}),
                payload={"memory_id": m.memory_id, "text": m.text}, source_trajectories=ids))
        return out

    async def _context_probe(self, agent_id: str) -> tuple[bool, str]:
        """Whether the replay model uses a fact its system prompt states (a made-up one it cannot know):
        when it does not, replay cannot judge a context change on this model, and a replayed memory that
        "did not help" says nothing about the memory."""
        be = self.backend_for(agent_id)
        key = id(be)
        if key not in self._probes:
            from molt.backends.base import ChatRequest

            code = "7291"
            try:
                await be.start()
                res = await be.chat(ChatRequest(model=be.model, max_tokens=24, temperature=0.0, messages=[
                    {"role": "system", "content": f"Fact: the archive's door code is {code}."},
                    {"role": "user", "content": "What is the archive's door code?"}]))
                answer = res.choices[0].text or ""
                self._probes[key] = (code in answer, f"asked a door code its system prompt states ({code}), it "
                                                     f"answered {answer[:80]!r}")
            except Exception as exc:  # a probe that fails says nothing either way
                self._probes[key] = (True, f"the probe failed ({type(exc).__name__}: {exc})")
        return self._probes[key]

    def _guard_of(self, canary: AgentVersion) -> dict[str, Any] | None:
        """The guard the decision that started ``canary`` recorded (``None``: an ordinary canary)."""
        for d in self.log.list(canary.tenant_id, canary.agent_id, limit=200):
            if d.applied_version == canary.version_id and isinstance(d.signals.get("guard"), dict):
                return d.signals["guard"] | {"started": _utc(d.created_at).isoformat()}
        return None

    def _guarded_canary(self, c: AgentVersion, live: AgentVersion, guard: Mapping[str, Any],
                        mine: list[Episode], live_runs: list[Episode], result: CycleResult) -> bool:
        """One look of a guarded canary's sequential test (:func:`molt.control.significance.canary_state`): each
        canary run paired with the live run nearest in time that was served since the canary started,
        then promote, abort (harm, or the exposure bound) or go on — its state in the decision log."""
        rec = result.record
        started = datetime.fromisoformat(guard["started"])
        beside = [e for e in live_runs if _utc(e.started_at) >= started] or live_runs
        # Harm anywhere: the canary's pooled success rate significantly below the live one's aborts it.
        if mine and beside:
            k1, k0 = sum(bool(e.success) for e in mine), sum(bool(e.success) for e in beside)
            if newcombe_diff(k1, len(mine), k0, len(beside))[1] < 0:
                why = (f"harm: {k1}/{len(mine)} canary runs succeeded against {k0}/{len(beside)} live, the 95% "
                       f"interval of the difference below zero")
                self.registry.abort(c.version_id, actor=self.actor, reason=f"guarded canary: {why}")
                rec.choice, rec.reason = "rollback", f"guarded canary {c.version_id} aborted: {why}"
                rec.applied_version = live.version_id
                return True
        # The sequential test reads the requests the change is about (its cluster's task, or requests like
        # its failures): elsewhere the two versions are the same agent, and their pairs only add noise.
        served = len(mine)
        mine, beside = self._targeted(guard, mine), self._targeted(guard, beside)
        pairs = pair_in_time([(_utc(e.started_at), bool(e.success)) for e in mine],
                             [(_utc(e.started_at), bool(e.success)) for e in beside])
        elapsed = (datetime.now(UTC) - started).total_seconds()
        max_s = float(guard.get("max_s", 0) or 0)
        prior = guard.get("prior") or [1.0, 1.0]
        st = canary_state([bool(e.success) for e in mine], [bool(e.success) for e in beside], pairs,
                          prior=(float(prior[0]), float(prior[1])), alpha=float(guard["alpha"]),
                          max_runs=int(guard["max_requests"]), expired=elapsed >= max_s, served=served,
                          elapsed_s=elapsed, max_s=max_s)
        rec.signals["canary"] = st.summary() | {"version": c.version_id}
        rec.actions.append(f"guarded canary {c.version_id}: {st.why} — {st.brief()}")
        if st.decision == "promote":
            try:  # compare-and-set: the canary's change was made on its parent
                result.version = self.registry.promote(c.version_id, actor=self.actor,
                                                       reason=f"guarded canary: {st.why}",
                                                       expected_live=c.parent_id or live.version_id)
            except StalePromotion as exc:
                self.registry.abort(c.version_id, actor=self.actor, reason=str(exc))
                rec.choice, rec.reason = "rollback", f"guarded canary {c.version_id} aborted: {exc}"
                return True
            rec.choice, rec.reason = "promote", f"guarded canary {c.version_id} promoted: {st.why}"
            rec.applied_version = c.version_id
        elif st.decision == "abort":
            self.registry.abort(c.version_id, actor=self.actor, reason=f"guarded canary: {st.why}")
            rec.choice, rec.reason = "rollback", f"guarded canary {c.version_id} aborted: {st.why}"
            rec.applied_version = live.version_id
        else:
            # The canary goes on; the cycle looks on for a change with strict evidence, which would take
            # its place (a guarded canary must not hold up what the strict bar already allows).
            rec.choice, rec.reason = "noop", f"guarded canary {c.version_id} running: {st.why}"
            self._running_guard = c
            return False
        return True

    def _while_guarded(self, rec: DecisionRecord) -> None:
        """A cycle that made no change while a guarded canary runs: the canary's state is the decision."""
        g = self._running_guard
        if g is None:
            return
        state = rec.signals.get("canary") or {}
        rec.reason = (f"guarded canary {g.version_id} running: {state.get('why', '')}; meanwhile no change "
                      f"clears the strict bar ({rec.reason})")
        rec.choice = "noop"

    def _targeted(self, guard: Mapping[str, Any], runs: list[Episode]) -> list[Episode]:
        """The runs of the guarded change's target: requests whose intent is like one of its cluster's
        failures' (the clustering's similarity), of its task when it has one."""
        if guard.get("task"):
            runs = [e for e in runs if e.task == guard["task"]]
        qs = [q for q in guard.get("questions") or [] if q]
        if not qs or not runs:
            return runs
        emb = resolve_embedder(self.embedder)
        ref = embed_texts(emb, qs)
        got = embed_texts(emb, [intent_text(e.question) for e in runs])
        sims = (got @ ref.T).max(axis=1)
        return [e for e, sim in zip(runs, sims, strict=True) if float(sim) >= self.settings.similarity]

    def _previous(self, live: AgentVersion) -> AgentVersion | None:
        return self.registry.rollback_target(live.tenant_id, live.agent_id)

    def _regression(self, live: AgentVersion, previous: AgentVersion, window: list[Episode]) -> Candidate | None:
        now = [e for e in window if e.policy_version == live.version_id and e.success is not None]
        before = [e for e in window if e.policy_version == previous.version_id and e.success is not None]
        if len(now) < self.settings.min_cluster or len(before) < self.settings.min_cluster:
            return None
        k1, k0 = sum(e.success for e in now), sum(e.success for e in before)
        d = k1 / len(now) - k0 / len(before)
        _, hi = newcombe_diff(k1, len(now), k0, len(before))
        if d <= -self.settings.regression_min_drop and hi < 0:
            return rollback_candidate(live, previous, window)
        return None

    async def _gates(self, cand: Candidate, live: AgentVersion, window: list[Episode],
                     cluster: Cluster | None) -> dict[str, Any]:
        """Safety, replay on the cluster, regression on held-back successes. Returns the evidence;
        ``evidence["rejected"]`` says why a candidate may not go live."""
        s = self.settings
        tenant = live.tenant_id
        own = {e.trajectory_id for e in window if e.tenant_id == tenant}
        foreign = [t for t in cand.source_trajectories if t not in own]
        if foreign:
            return {"rejected": f"safety: {len(foreign)} source trajectories are not {tenant}'s"}
        extra_mem: list[str] = []
        extra_skill: list[Skill] = []
        is_memory = cand.kind in ("memory_insert", "memory_update")
        if is_memory or cand.kind == "skill_patch":
            keys = ("text",) if is_memory else ("name", "trigger", "instructions")
            bad = [k for k in keys if not isinstance(cand.payload.get(k), str) or not cand.payload[k].strip()]
            if bad:
                return {"rejected": f"malformed {cand.kind.replace('_', ' ')}: empty or missing {', '.join(bad)}"}
            texts = ([cand.payload["text"]] if is_memory
                     else [cand.payload["name"], cand.payload["trigger"], cand.payload["instructions"]])
            found = sorted({sp.entity_type for t in texts for sp in self.redactor.redact(t)[1]})
            if found:
                return {"rejected": f"safety: generated {cand.kind.replace('_', ' ')} contains "
                                    f"{', '.join(found)}; it is never stored or served"}
            if is_memory:
                extra_mem.append(cand.payload["text"])
            else:
                extra_skill.append(Skill(name=cand.payload["name"], instructions=cand.payload["instructions"]))
        parts = cand.parts or live.parts
        # A registered entry point is the most faithful replay; without one (every gateway- or
        # adapter-captured agent) the trajectory's recording is re-driven (molt.replay.generic).
        agent = AGENTS.get(live.agent_id) if live.agent_id in AGENTS else None
        ov = overrides_for(parts, self.memories if (parts.memory_ids or parts.skill_ids) else None,
                           tenant_id=tenant, extra_memories=extra_mem, extra_skills=extra_skill)
        policy = ReplayAgent(self.backend_for(live.agent_id), ov, version=cand.candidate_id)
        failing = cand.source_trajectories if cand.kind == "rollback" else (
            [e.trajectory_id for e in cluster.failures] if cluster is not None else cand.source_trajectories)
        ev = await self._replay(failing, agent, policy, live, cand.candidate_id, parts=parts, sample=s.replay_sample)
        out: dict[str, Any] = {"replay": _brief(ev)}
        out["replay"]["mode"] = ("the agent's @molt.replayable entry point" if agent is not None
                                 else "generic replay from the recording")
        replayer = self.backend_for(live.agent_id)
        out["replay"]["model"], out["replay"]["backend"] = replayer.model, type(replayer).__name__
        stale = cluster is not None and cand.kind != "rollback" and any(
            e.policy_version != live.version_id for e in cluster.failures)
        if stale and ev.candidate_success_rate is not None and ev.scored:
            # Some failures were recorded under an earlier version: what they recorded is not what the
            # live version does now. The baseline is a replay of the live version on the same runs, so a
            # candidate gets no credit for what an earlier change (an adapter, a memory) already fixed.
            base = await self._live_replay(cluster, live, failing, agent, tenant)
            if base is not None and base.candidate_success_rate is not None and base.scored:
                k1 = round(ev.candidate_success_rate * ev.scored)
                k0 = round(base.candidate_success_rate * base.scored)
                lo, hi = newcombe_diff(k1, ev.scored, k0, base.scored)
                out["replay"].update(baseline_success_rate=base.candidate_success_rate,
                                     success_delta=ev.candidate_success_rate - base.candidate_success_rate,
                                     success_delta_ci=[lo, hi], baseline="replay of the live version",
                                     recorded_baseline=ev.baseline_success_rate)
        if ev.errors and ev.errors >= max(1, ev.sampled // 2):
            out["rejected"] = f"replay: {ev.errors} of {ev.sampled} replays raised"
            return out
        if ev.scored == 0 or ev.unknown > s.max_unknown_share * max(ev.sampled, 1):
            out["rejected"] = f"replay: too little coverage ({ev.scored} scored, {ev.unknown} unknown)"
            return out
        guardable = s.guarded and cand.kind in GUARDED_KINDS and self._promising(out["replay"])
        if cluster is not None and cluster.key in self._family and cand.kind != "rollback":
            # Only the agent-level test is significant: the candidate can go live only on a guarded canary.
            out["bar"] = "guarded"
            out["guarded_why"] = "only the agent's failure rate is significant, not this cluster's by itself"
        elif cluster is not None and cluster.key in self._confirm_levels and cand.kind != "rollback":
            # A screened cluster: the candidate goes live only if the replay confirms it (evidence.py), or —
            # positive but unconfirmed — on a guarded canary, whose live outcomes are the experiment.
            fact = (cluster.key, str(cand.payload.get("fact") or "")) if cand.payload.get("fact") else None
            if not self._clears(out["replay"]):
                out["confirmation"] = {"skipped": "the replay did not clear the evidence bar"}
                if guardable:
                    out["bar"] = "guarded"
                    out["guarded_why"] = "the cluster is screened, and the replay's interval is wide"
            elif fact is not None and fact in self._confirmed_facts:
                # One test per memory, whatever its form: the other form's confirmation spent its share.
                out["confirmation"] = {"skipped": "the same memory in its other form was confirmation-tested: "
                                                  "one test per memory"}
                if guardable:
                    out["bar"] = "guarded"
                    out["guarded_why"] = "the cluster is screened, and the memory's test was spent on its other form"
                else:
                    out["rejected"] = ("confirmation: the same memory in its other form was tested on the "
                                       "cluster's region (one test per memory)")
                    return out
            else:
                if fact is not None:
                    self._confirmed_facts.add(fact)
                conf = await self._confirm(cand, cluster, live, ev, policy, agent, tenant)
                out["confirmation"] = conf.summary()
                if not conf.confirmed:
                    if guardable and conf.fixed > conf.broken:
                        out["bar"] = "guarded"
                        out["guarded_why"] = (f"the cluster is screened and the replay does not confirm it at its "
                                              f"share of alpha ({conf.fixed} fixed, {conf.broken} broken; sign "
                                              f"test p={conf.p_value:.3g} > {conf.level:.3g})")
                    else:
                        out["rejected"] = (f"confirmation: {cluster.key} is screened, not significant, and replay "
                                           f"on its {conf.pairs} requests does not confirm the candidate "
                                           f"({conf.fixed} fixed, {conf.broken} broken; sign test "
                                           f"p={conf.p_value:.3g} > {conf.level:.3g})")
                        return out
        held = [e.trajectory_id for e in window if e.success and e.tenant_id == tenant and e.trajectory_id
                not in set(failing) and e.policy_version in (live.version_id, None)][-s.regression_sample:]
        if held and not (self._clears(out["replay"]) or guardable):
            # Gates cheapest first: a candidate whose replay does not clear the evidence bar can be neither
            # chosen nor more "tried" than it is (the weight rule counts it as replayed and failed), so the
            # held-back successes are not replayed for it.
            out["regression"] = {"skipped": "the replay did not clear the evidence bar"}
        elif held:
            reg = await self._replay(held, agent, policy, live, cand.candidate_id + ":regr", parts=parts)
            out["regression"] = _brief(reg)
            # Some recorded successes are flipped failures, and those fail again on replay whatever the
            # candidate: the drop they explain (the flip rate's upper bound, estimated from the signals'
            # disagreements) is allowed beside the tolerance — one flipped held-back success does not
            # fail a candidate.
            flips = self._flips.upper if self._flips.rate > 0 else 0.0
            out["regression"]["flip_allowance"] = round(flips, 4)
            if reg.candidate_success_rate is not None and reg.baseline_success_rate is not None and \
                    reg.candidate_success_rate < reg.baseline_success_rate - s.regression_tolerance - flips:
                out["rejected"] = (f"regression: held-back successes fall from {reg.baseline_success_rate:.2f} to "
                                   f"{reg.candidate_success_rate:.2f} (beyond the tolerance {s.regression_tolerance:g}"
                                   f" and the reward flip allowance {flips:.2f})")
        return out

    async def _confirm(self, cand: Candidate, cluster: Cluster, live: AgentVersion, ev: Evaluation,
                       policy: ReplayAgent, agent: Any, tenant: str) -> Confirmation:
        """The replay's paired test of ``cand`` on a screened cluster's region (its requests, failures
        included, up to ``replay_sample`` of them): the live version replayed once per cluster, the
        candidate on what its replay on the failures (``ev``) did not cover."""
        s = self.settings
        region = list(dict.fromkeys([e.trajectory_id for e in cluster.failures]
                                    + [e.trajectory_id for e in cluster.requests]))[:s.replay_sample]
        key = (live.version_id, cluster.key)
        if key not in self._region_live:
            ov = overrides_for(live.parts, self.memories if (live.parts.memory_ids or live.parts.skill_ids) else None,
                               tenant_id=tenant)
            base = ReplayAgent(self.backend_for(live.agent_id), ov, version=f"{live.version_id}:baseline")
            self._region_live[key] = _replayed(await self._replay(region, agent, base, live,
                                                                  f"{live.version_id}:baseline", parts=live.parts))
        got = _replayed(ev)
        rest = [t for t in region if t not in got]
        if rest:
            got |= _replayed(await self._replay(rest, agent, policy, live, cand.candidate_id + ":region",
                                                parts=cand.parts or live.parts))
        return confirmation(self._region_live[key], {t: got.get(t) for t in region},
                            self._confirm_levels[cluster.key])

    async def _live_replay(self, cluster: Cluster, live: AgentVersion, failing: list[str], agent: Any,
                           tenant: str) -> Evaluation | None:
        """The live version replayed on a cluster's failures (once per cluster per cycle)."""
        key = (live.version_id, cluster.key)
        if key not in self._live_evals:
            ov = overrides_for(live.parts, self.memories if (live.parts.memory_ids or live.parts.skill_ids) else None,
                               tenant_id=tenant)
            policy = ReplayAgent(self.backend_for(live.agent_id), ov, version=f"{live.version_id}:baseline")
            try:
                self._live_evals[key] = await self._replay(failing, agent, policy, live, f"{live.version_id}:baseline",
                                                           parts=live.parts, sample=self.settings.replay_sample)
            except Exception:
                log.warning("Replaying the live version on %s failed.", cluster.key, exc_info=True)
                self._live_evals[key] = None
        return self._live_evals[key]

    async def _replay(self, ids: list[str], agent: Any, policy: ReplayAgent, live: AgentVersion,
                      candidate_id: str, *, parts: AgentConfig, sample: int | None = None) -> Evaluation:
        """Replay ``ids`` under ``policy`` (serving ``parts``) for ``live``'s agent, through the plane's memo
        of replays."""
        await self._serve_adapter(live.agent_id, parts)
        ev: Evaluation = await evaluate_candidate(
            self.store, ids, agent, policy, candidate_id=candidate_id, sample=sample, live=self.live_tools,
            tenant_id=live.tenant_id, normalization=self.normalization, judge=self.judge_for(live.agent_id),
            memo=self.replays)
        return ev

    async def _serve_adapter(self, agent_id: str, parts: AgentConfig) -> None:
        """Load ``parts``' adapter into the replay backend when it does not list it yet: a version with new
        weights is replayed on those weights, whichever process trained them (``molt serve --train`` or a
        trainer service that loaded them into the gateway's backends only)."""
        m = parts.model
        if not m.adapter or not m.adapter_path:
            return
        be = self.backend_for(agent_id)
        key = (id(be), m.adapter)
        if key in self._adapters or not getattr(getattr(be, "capabilities", None), "lora", False):
            return
        if m.adapter not in await be.models():
            await be.load_adapter(m.adapter, m.adapter_path)
        self._adapters.add(key)

    def _clears(self, replay: Mapping[str, Any]) -> bool:
        """Whether a replay clears the evidence bar (``min_gain``, interval above zero)."""
        d, ci = replay.get("success_delta"), replay.get("success_delta_ci")
        return d is not None and ci is not None and d >= self.settings.min_gain and ci[0] > 0

    def _promising(self, replay: Mapping[str, Any]) -> bool:
        """Whether a replay is positive evidence (``min_gain``), whatever its interval: enough for a guarded
        canary."""
        d = replay.get("success_delta")
        return d is not None and d >= self.settings.min_gain

    def _sufficient(self, replay: Mapping[str, Any]) -> bool:
        """Whether a replay shows a sufficient fix (``sufficient_gain``, interval above zero)."""
        d, ci = replay.get("success_delta"), replay.get("success_delta_ci")
        return d is not None and ci is not None and d >= self.settings.sufficient_gain and ci[0] > 0

    def _select(self, passed: list[tuple[Candidate, dict[str, Any]]], all_candidates: list[Candidate],
                clusters: dict[str, Cluster], evaluations: Mapping[str, dict[str, Any]] | None = None,
                ) -> tuple[Candidate | None, str]:
        s = self.settings
        scored = []
        guarded = []
        for cand, ev in passed:
            r = ev["replay"]
            size = clusters[cand.cluster].size if cand.cluster in clusters else len(cand.source_trajectories)
            if s.guarded and cand.kind in GUARDED_KINDS and self._promising(r) and size >= s.guarded_min_failures \
                    and (ev.get("bar") == "guarded" or not self._clears(r)):
                guarded.append((cand, ev, r["success_delta"] * size - s.cost_lambda * cand.cost * size))
            if ev.get("bar") == "guarded":
                continue  # not evidence enough for the strict bar, only for a guarded canary
            delta, ci = r["success_delta"], r["success_delta_ci"]
            if delta is None or ci is None:
                continue
            size = clusters[cand.cluster].size if cand.cluster in clusters else len(cand.source_trajectories)
            j = delta * size - s.cost_lambda * cand.cost * size
            scored.append((cand, delta, ci, j))
        sufficient = [x for x in scored if x[1] >= s.sufficient_gain and x[2][0] > 0]
        if sufficient:
            cand, delta, ci, j = min(sufficient, key=lambda x: (x[0].cost, -x[3]))
            return cand, (f"cheapest sufficient: replay fixes {delta:+.0%} of cluster {cand.cluster} "
                          f"(95% CI {ci[0]:+.2f}..{ci[1]:+.2f}), cost {cand.cost}, J={j:.1f}")
        clearing = [x for x in scored if x[1] >= s.min_gain and x[2][0] > 0]
        if clearing:
            cand, delta, ci, j = max(clearing, key=lambda x: x[3])
            return cand, (f"best partial fix: replay {delta:+.0%} on {cand.cluster} "
                          f"(95% CI {ci[0]:+.2f}..{ci[1]:+.2f}), J={j:.1f}")
        if self._running_guard is not None:
            return None, "a guarded canary is running (only a change with strict evidence may take its place)"
        if guarded:
            # The canary is the experiment: a cheap, reversible change with positive replay evidence but a
            # wide interval goes to a guarded canary (its sequential test on live outcomes decides).
            cand, ev, j = max(guarded, key=lambda x: (x[2], -x[0].cost))
            r = ev["replay"]
            conf = ev.get("confirmation") or {}
            fixed = conf.get("fixed")
            broken = conf.get("broken")
            if fixed is None:  # the replay on the cluster's failures: its fixes, and no pairs broken
                fixed = round((r.get("candidate_success_rate") or 0.0) * (r.get("scored") or 0)
                              - (r.get("baseline_success_rate") or 0.0) * (r.get("scored") or 0))
                broken = 0
            cl = clusters.get(cand.cluster)
            self._guard = {"candidate": cand.candidate_id, "cluster": cand.cluster,
                           "task": cl.task if cl is not None else None,
                           "questions": list(dict.fromkeys(intent_text(e.question) for e in cl.failures))[:12]
                           if cl is not None else [],
                           "prior": [1.0 + max(0, int(fixed)), 1.0 + int(broken or 0)],
                           "alpha": s.guarded_alpha, "max_requests": s.guarded_max_requests,
                           "max_s": s.guarded_max_s, "share": s.guarded_weight}
            ci = r.get("success_delta_ci") or [None, None]
            lo = f"{ci[0]:+.2f}" if ci[0] is not None else "n/a"
            short = ev.get("guarded_why") or "its interval is too wide for the strict bar"
            return cand, (f"guarded canary: replay {r['success_delta']:+.0%} on {cand.cluster} (95% CI low {lo}; "
                          f"{short}); a cheap, reversible {cand.kind} is tried on "
                          f"{s.guarded_weight:.0%} of the sessions, and its mSPRT on live outcomes (false-promotion "
                          f"rate {s.guarded_alpha:g}, at most {s.guarded_max_requests} canary runs) promotes or "
                          f"aborts it")
        # A weight update is the last resort, and only for a cluster whose evidence is in and on which
        # context changes were generated, replayed and failed (see _weight_evidence); the others wait.
        weights = sorted((c for c in all_candidates if c.kind == "weight_update" and c.cluster in clusters),
                         key=lambda c: (-clusters[c.cluster].size, c.cluster))
        eligible: list[tuple[Candidate, str]] = []
        waiting: list[str] = []
        for cand in weights:
            cl = clusters[cand.cluster]
            tried, wait = self._weight_evidence(cl, all_candidates, evaluations or {})
            if wait is not None:
                waiting.append(wait)
                continue
            cross = self._cross_tenant(cl)
            cand.payload["tenants_with_pattern"] = cross
            if self._current is not None:  # the weights this request is about (asked once per model)
                cand.payload["model"] = self._current.parts.model.model_dump(mode="json")
            # The weights are shared: a gap worth training recurs across tenants or is large.
            if len(cross) >= 2 or cl.size >= s.min_weight_cluster:
                eligible.append((cand, f"capability gap: {cl.size} '{cl.signature}' failures on task {cl.task} "
                                       f"({len(cross)} tenant(s) show it); context changes were replayed on it "
                                       f"and none fixed it (tried: {', '.join(tried)})"))
        pending = set(self._pending_weight_updates([c for c, _ in eligible]))
        fresh = [(c, why) for c, why in eligible if c.cluster not in pending]
        if fresh:
            return fresh[0]
        if pending:
            return None, (f"weight update for {', '.join(sorted(pending))} already requested; waiting for the "
                          f"trainer's adapter (a new model part) before asking again")
        if waiting:
            best = ""
            if scored:
                top = max(scored, key=lambda x: x[1])
                best = f"; best candidate {top[0].kind} {top[1]:+.0%}, CI low {top[2][0]:+.2f}"
            return None, "waiting for evidence: " + "; ".join(waiting) + best
        if scored:
            best = max(scored, key=lambda x: x[1])
            return None, (f"no candidate clears the evidence bar (best: {best[0].kind} {best[1]:+.0%}, "
                          f"CI low {best[2][0]:+.2f})")
        return None, "no candidate passed its gates"

    def _weight_evidence(self, cluster: Cluster, all_candidates: list[Candidate],
                         evaluations: Mapping[str, dict[str, Any]]) -> tuple[list[str], str | None]:
        """What a weight update for ``cluster`` would rest on: the context candidates replayed on it
        (kind and replay delta), or — while the evidence is not in — what the cluster waits for.

        An answer failure says only that the answer was wrong; what the agent lacked is said by a user
        correction (it becomes a memory candidate), and corrections are late: they come after the
        answer, often after the cycle that first sees the failure. A missing fact whose correction has
        not arrived looks exactly like a capability gap, so a cluster none of whose failures carries a
        correction waits until one cycle of this agent has run since its oldest failure: then its users
        had that cycle's time to correct it. The live version must itself have failed this way (failures
        recorded only under earlier versions may be fixed already). And weights are asked for only when
        context changes were generated for the cluster, replayed on it and failed (did not clear the
        bar, or regressed the held-back successes) — a candidate that could not be replayed (safety,
        replay errors, too little coverage, an agent replay cannot run) is no evidence that context
        cannot fix it.
        """
        if not any(e.corrections for e in cluster.failures):
            last = self._last_cycle_at()
            if last is None or all(_utc(e.started_at) >= last for e in cluster.failures):
                return [], (f"{cluster.key}: a user correction or one more cycle — none of its {cluster.size} "
                            f"failure(s) carries a correction yet and no earlier cycle has seen them (corrections "
                            f"arrive late; until then a missing fact looks like a capability gap)")
        live = self._current.version_id if self._current is not None else None
        stamped = {e.policy_version for e in cluster.failures if e.policy_version is not None}
        if live is not None and stamped and live not in stamped:
            # Recorded under earlier versions only: a change made since (a memory) may have fixed them, and
            # a candidate replayed against the live version then "fails" because nothing is left to fix.
            return [], (f"{cluster.key}: a failure under the live version {live} — its {cluster.size} failure(s) "
                        f"were recorded under {', '.join(sorted(stamped))}")
        facts = [c for c in all_candidates if c.cluster == cluster.key and c.kind in ("memory_insert", "memory_update")]
        tried: list[str] = []
        untried: list[str] = []
        for c in all_candidates:
            if c.cluster != cluster.key or c.kind in ("weight_update", "rollback"):
                continue
            ev = evaluations.get(c.candidate_id) or {}
            replay, rejected = ev.get("replay") or {}, str(ev.get("rejected") or "")
            if replay.get("scored") and not rejected.startswith("replay"):
                d = replay.get("success_delta")
                tried.append(f"{c.kind} {'n/a' if d is None else f'{d:+.0%}'}"
                             + (" (regressed held-back successes)" if rejected.startswith("regression") else ""))
            else:
                untried.append(f"{c.kind}: {rejected or 'not replayed'}")
        if facts:
            # The users agree on a fact: a missing (or changed) fact is context's to fix, never training's.
            used, probe = self._probe_note if self._probe_note is not None else (True, "")
            why = (f"the replay model does not use its context ({probe}): replay cannot judge the memory here"
                   if not used else "the memory did not clear the bar on replay" if tried else
                   f"none of its context changes could be replayed ({'; '.join(untried)})")
            fact = str(facts[0].payload.get("text", ""))[:80]
            return [], (f"{cluster.key}: its users' corrections agree on a fact ({fact!r}), and a fact is never "
                        f"sent to training; {why} — the cluster waits for a replay that can judge it or for a "
                        f"guarded canary")
        if not tried:
            return [], (f"{cluster.key}: a context change replayed on it — "
                        + (f"none could be replayed ({'; '.join(untried)})" if untried else
                           "none was generated (no correction, tool error or format requirement to build one "
                           "from)") + "; weights are asked for only when context changes were tried and failed")
        return tried, None

    def _last_cycle_at(self) -> Any:
        """When this agent's previous cycle ran (UTC), or ``None`` before its first."""
        if self._current is None:
            return None
        last = self.log.list(self._current.tenant_id, self._current.agent_id, limit=1)
        return _utc(last[0].created_at) if last else None

    def _pending_weight_updates(self, weights: list[Candidate]) -> list[str]:
        """Clusters of ``weights`` whose weight update this agent already requested under the live model
        (asked once per model: the trainer's adapter, a new model part, is the answer)."""
        if not weights or self._current is None:
            return []
        live = self._current
        model = live.parts.model.model_dump(mode="json")
        asked = set()
        # A trainer that answers outside the cycle (a trainer service, molt.control.weight_queue) knows
        # which of its requests are still open: queued, training, or canaried and not yet judged.
        outstanding = getattr(self.trainer, "outstanding", None)
        if callable(outstanding):
            asked.update(outstanding(live.tenant_id, live.agent_id, model))
        for d in self.log.list(live.tenant_id, live.agent_id, choice="weight_update", limit=50):
            if d.applied_version is None and callable(outstanding):
                continue  # asked of the service: open only while the service says so (above)
            if d.applied_version is not None:  # the trainer delivered: pending only while its canary runs
                try:
                    if self.registry.get(d.applied_version).status != "canary":
                        continue
                except MoltError:
                    continue
            asked.update(c["cluster"] for c in d.candidates
                         if c.get("kind") == "weight_update" and (c.get("payload") or {}).get("model") == model)
        clusters = {c.cluster for c in weights}
        return sorted(clusters & asked)

    def _cross_tenant(self, cluster: Cluster) -> list[str]:
        """Tenants whose recent traffic (any agent) of the same task fails with the same signature."""
        s = self.settings
        out = set(cluster.tenants)
        for tenant, agent in self.registry.agents():  # any agent: the weights are shared across them
            if tenant in out:
                continue
            eps = episodes(self.store, tenant, agent, limit=s.window)
            found = cluster_failures(eps, embedder=self.embedder, alpha=s.alpha, similarity=s.similarity,
                                 tolerable=s.tolerable)
            if any(c.significant and same_pattern(c, cluster, s.similarity) for c in found):
                out.add(tenant)
        return sorted(out)

    def _screened(self, cand: Candidate, entry: dict[str, Any], rec: DecisionRecord) -> bool:
        """The safety gate's verdict on ``cand`` (:mod:`molt.control.gate`), kept in its log ``entry``; a
        refused candidate goes to the log's rejected list with the reasons (its source trajectories are
        the feedback the gate flags: :func:`molt.control.gate.flagged_feedback`)."""
        verdict: Verdict = self.gate.screen_candidate(cand, **self._gate_ctx)
        entry["gate"] = verdict.model_dump()
        if not verdict.accepted:
            entry["rejected"] = f"gate: {verdict.summary()}"
            rec.rejected.append(entry)
            return False
        s = self.settings
        # a skill's evidence is also the cluster's failing runs (the procedure is what they lacked)
        extra = self._cluster_failures.get(cand.cluster, []) if cand.kind == "skill_patch" else []
        few = many_hands(cand, self.store, rec.tenant_id, min_hands=s.min_hands, min_keys=s.min_keys,
                         extra=extra)
        if few:  # not a refusal of the text: its feedback is not flagged
            entry["rejected"] = "; ".join(few)
            rec.rejected.append(entry)
        return not few

    def _apply(self, cand: Candidate, live: AgentVersion, rec: DecisionRecord) -> AgentVersion | None:
        s = self.settings
        t, a = live.tenant_id, live.agent_id
        if not self._screened(cand, cand.model_dump(mode="json", exclude={"parts"}), rec):  # again, before canary
            raise InterventionError(f"the safety gate refused {cand.kind} before canary: {rec.rejected[-1]['rejected']}")
        if cand.kind == "rollback":
            v = self.registry.rollback(t, a, actor=self.actor, reason=rec.reason)
            rec.actions.append(f"rolled back to {v.version_id}")
            return v
        if cand.kind == "weight_update":
            if needs_approval(s.approval, cand.kind):  # a trainer service proposes the adapter it trains
                cand.payload["approval"] = s.approval
            got = self.trainer(t, a, cand) if self.trainer is not None else None
            if not isinstance(got, ModelPart):
                rec.actions.append(f"weight update requested from the trainer (request {got})" if got
                                   else "weight update recorded; no trainer attached to this plane")
                return None
            rec.actions.append(f"the trainer published adapter {got.adapter}")
            cand.parts = live.parts.with_model(got)
        parts = cand.parts or live.parts
        if cand.kind == "memory_insert":
            m = self.memories.add_memory(t, cand.payload["text"], agent_id=a,
                                         source_trajectory_id=(cand.source_trajectories or [None])[0])
            parts = live.parts.with_memories([m.memory_id])
        elif cand.kind == "memory_update":
            m = self.memories.add_memory(t, cand.payload["text"], agent_id=a,
                                         source_trajectory_id=(cand.source_trajectories or [None])[0])
            parts = (cand.parts or live.parts).with_memories([m.memory_id])
            rec.actions.append(f"memory {cand.payload.get('replaces')} superseded by {m.memory_id}")
        elif cand.kind == "memory_retire":
            rec.actions.append(f"memory {cand.payload.get('memory_id')} retired from the version")
        elif cand.kind == "skill_patch":
            sk = self.memories.add_skill(t, cand.payload["name"], cand.payload["trigger"], cand.payload["instructions"],
                                         agent_id=a, source_trajectory_id=(cand.source_trajectories or [None])[0])
            parts = live.parts.with_skills([sk.skill_id])
        v = self.registry.create(t, a, parts, parent=live.version_id, note=f"{cand.kind}: {cand.description[:200]}",
                                 created_by=self.actor)
        record_change(self.store, v, live, cand.source_trajectories, kind=cand.kind)  # what made each new part
        guard = self._guard if self._guard is not None and self._guard["candidate"] == cand.candidate_id else None
        if guard is not None:
            # Its sequential test runs once the version is canaried (here, or when an operator approves it).
            rec.signals["guard"] = guard | {"version": v.version_id}
        if needs_approval(s.approval, cand.kind):
            v = self.proposals.record(v, kind=cand.kind, cluster=cand.cluster, payload=cand.payload,
                                      description=cand.description, evidence=proposal_evidence(cand.candidate_id, rec),
                                      actor=self.actor, cycle_id=rec.cycle_id, reason=rec.reason)
            rec.actions.append(f"proposed {v.version_id} for an operator's approval (approval={s.approval}); "
                               f"not routed until approved")
            return v
        if guard is not None:
            # The canary is the experiment: never promoted directly, whatever promote_directly says.
            v = self.registry.canary(v.version_id, s.guarded_weight, actor=self.actor, reason=rec.reason)
            rec.actions.append(f"guarded canary {v.version_id} at {s.guarded_weight:.0%}")
        elif s.promote_directly:
            v = self.registry.promote(v.version_id, actor=self.actor, reason=rec.reason, expected_live=live.version_id)
            rec.actions.append(f"promoted {v.version_id}")
        else:
            v = self.registry.canary(v.version_id, s.canary_weight, actor=self.actor, reason=rec.reason)
            rec.actions.append(f"canary {v.version_id} at {s.canary_weight:.0%}")
        return v


def _task_outcomes(eps: Sequence[Episode]) -> list[tuple[str | None, bool]]:
    """Each run as ``(task, succeeded)``, the strata :func:`molt.stats.stratified_delta` compares by."""
    return [(e.task, bool(e.success)) for e in eps]


def _second_form(c: Candidate) -> bool:
    """Whether ``c`` is a memory in its question-and-answer form (molt.control.diagnose.qa_form): the
    same fact as its prose form, so the same hypothesis, not one more."""
    return c.kind in ("memory_insert", "memory_update") and c.payload.get("form") == "qa"


def _no_candidate(c: Cluster) -> str:
    """Why no candidate exists for a significant cluster, as the decision log says it."""
    what = (f"{c.key} ({c.size} failure(s), said by "
            f"{', '.join(sorted({sig for e in c.failures for sig in e.failure_signals})) or 'rewards'})")
    if c.notes:
        return f"{what}: " + "; ".join(c.notes)
    return (f"{what}: no correction to remember, no tool error naming a parameter or another tool, no "
            f"format requirement and no procedure its successes share")


def _utc(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def _replayed(ev: Evaluation) -> dict[str, float | None]:
    """Each replayed trajectory's reward under the evaluated policy (``None``: not scored)."""
    return {d["trajectory_id"]: d.get("replayed_reward") for d in ev.evidence if d.get("status") == "ok"}


def _brief(ev: Evaluation) -> dict[str, Any]:
    return {"evaluation_id": ev.evaluation_id, "sampled": ev.sampled, "scored": ev.scored, "unknown": ev.unknown,
            "errors": ev.errors, "baseline_success_rate": ev.baseline_success_rate,
            "candidate_success_rate": ev.candidate_success_rate, "success_delta": ev.success_delta,
            "success_delta_ci": list(ev.success_delta_ci) if ev.success_delta_ci else None,
            "model_calls": ev.cost.get("model_calls"),
            # Each replayed case (the trajectory, what it recorded and what the replay scored), so a person
            # can open the runs the figures stand on.
            "cases": [{"trajectory_id": d.get("trajectory_id"), "status": d.get("status"),
                       "recorded_reward": d.get("recorded_reward"), "replayed_reward": d.get("replayed_reward")}
                      for d in ev.evidence if d.get("trajectory_id")]}


def run_scheduled(store: Store, stop: threading.Event, every_s: float, *, plane: ControlPlane | None = None,
                  backend: BaseBackend | None = None) -> None:
    """Run a cycle for every agent every ``every_s`` seconds until ``stop`` is set (``molt serve``).

    A failing cycle is logged and the loop goes on: the plane never takes the serving stack down.
    """
    if plane is None:
        if backend is None:
            raise InterventionError("run_scheduled needs a plane or a backend to replay candidates with.")
        plane = ControlPlane(store, backend, base_parts=AgentConfig(model=ModelPart(base=backend.model)))
    while not stop.wait(every_s):
        try:
            for r in plane.run_all(stop=stop):
                log.info("evolve %s/%s: %s (%s)", r.record.tenant_id, r.record.agent_id, r.choice, r.record.reason)
        except Exception:
            log.exception("Control-plane cycle failed; retrying in %.0f s.", every_s)


#: How often a cancellable cycle looks at its stop event (the bound on how long a shutdown waits for it,
#: beside the model call in flight, which is not interrupted).
STOP_POLL_S = 0.25


async def _unless_stopped(cycle: Any, stop: threading.Event) -> CycleResult | None:
    """``await cycle``, cancelled once ``stop`` is set (then ``None``)."""
    task = asyncio.ensure_future(cycle)
    while not task.done():
        await asyncio.wait({task}, timeout=STOP_POLL_S)
        if stop.is_set() and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                return None
    return task.result()
