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

One module at ~700 lines because it is one idea: the cycle above, whose steps share the cycle's state
(window, live version, decision record) and are read and changed in their order. What each step decides
lives in a module of its own: the thresholds (:mod:`molt.control.settings`), the canary looks
(:mod:`molt.control.canary`), a candidate's gates (:mod:`molt.control.replay_gates`), the choice and the
weight rules (:mod:`molt.control.selection`), the replay overrides (:mod:`molt.control.overrides`), the
agents found in the traffic (:mod:`molt.control.discovery`) and the period (:mod:`molt.control.scheduler`);
what each computes, in signals, diagnose, significance, reflector, replay and versions.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from molt.backends.base import BaseBackend
from molt.control.approval import Proposals, needs_approval, proposal_evidence
from molt.control.bars import sufficient
from molt.control.canary import CanaryLooks
from molt.control.clusters import embed_texts, resolve_embedder
from molt.control.collaborators import CandidateReflector, TextRedactor
from molt.control.diagnose import (
    COSTS,
    QA_EXTRA,
    Candidate,
    Cluster,
    cluster_failures,
    environment_fault,
    propose,
    rollback_candidate,
)
from molt.control.discovery import agents_in_traffic
from molt.control.embed import Embedder
from molt.control.gate import SafetyGate, gate_context
from molt.control.hands import held_out_keys, without_held_out
from molt.control.lease import LeaseHeld, Leases, holder_name
from molt.control.log import CycleResult, DecisionLog, DecisionRecord
from molt.control.overrides import overrides_for
from molt.control.provenance import record_change
from molt.control.replay_gates import CandidateGates, GateResult
from molt.control.selection import Selection, no_candidate, second_form
from molt.control.settings import PlaneSettings, reflector_from_settings, settings_from_pairs
from molt.control.signals import Episode, compute_signals, episodes
from molt.control.significance import AgentLevel, FlipEstimate, agent_level, flip_rate, screen_levels
from molt.control.versions import AgentConfig, AgentVersion, ModelPart, VersionRegistry
from molt.errors import InterventionError, MoltError
from molt.replay import LiveTools, Normalization
from molt.replay.evaluate import Evaluation, ReplayMemo
from molt.replay.generic import checkable_facts
from molt.stats import newcombe_diff
from molt.store import Store

if TYPE_CHECKING:
    from molt.control.memory import MemoryStore

__all__ = ["ControlPlane", "CycleResult", "PlaneSettings", "overrides_for", "settings_from_pairs"]

log = logging.getLogger("molt.control")


@dataclass
class Findings:
    """What a cycle's diagnosis found (:meth:`ControlPlane._diagnose`): every failure cluster of the window,
    the ones worth acting on (those only screened among them), environment faults by cluster, the
    candidates, and — once gated — each candidate's :class:`~molt.control.replay_gates.GateResult`."""

    found: list[Cluster] = field(default_factory=list)
    clusters: dict[str, Cluster] = field(default_factory=dict)
    screened: dict[str, Cluster] = field(default_factory=dict)
    faults: dict[str, str] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    gated: dict[str, GateResult] = field(default_factory=dict)


class ControlPlane(CanaryLooks, CandidateGates, Selection):
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
                 memories: MemoryStore | None = None, redactor: TextRedactor | None = None,
                 settings: PlaneSettings | None = None,
                 trainer: Callable[[str, str, Candidate], str | ModelPart] | None = None,
                 base_parts: AgentConfig | None = None, actor: str = "control-plane",
                 embedder: Embedder | None = None, judge: BaseBackend | None = None,
                 reflector: CandidateReflector | None = None, gate: SafetyGate | None = None):
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
        self.reflector = reflector if reflector is not None else reflector_from_settings(self.settings, self.backend)
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
    def memories(self) -> MemoryStore:
        if self._memories is None:
            from molt.control.memory import MemoryStore
            self._memories = MemoryStore(self.store, redactor=self.redactor)
        return self._memories

    @property
    def redactor(self) -> TextRedactor:
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
        live, window, result = self._begin(tenant_id, agent_id)
        rec = result.record
        if await self._canaries(live, window, result):
            self.log.append(rec)
            return result
        waiting = self.registry.proposals(tenant_id, agent_id)
        if waiting:  # one change at a time: an open proposal is the next change, once an operator decides
            rec.reason = (f"waiting for an operator to approve or reject {', '.join(v.version_id for v in waiting)} "
                          f"(approval mode: molt versions proposals, or the console's Proposals page)")
            self.log.append(rec)
            return result
        found = await self._diagnose(live, window, rec)
        if not found.candidates:
            self._nothing_to_try(found, rec)
        else:
            passed = await self._try_candidates(found, live, window, result)
            await self._choose(found, passed, live, result)
        self.log.append(rec)
        return result

    def _begin(self, tenant_id: str, agent_id: str) -> tuple[AgentVersion, list[Episode], CycleResult]:
        """The cycle's state: the live version (the base one on a first cycle), the window as the registry
        knows its versions, its signals and the agent-level test, and the decision record they open."""
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
        self._confirmed_facts = set()
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
        self._flips = flip_rate(window)
        self._agent = agent_level(window, s.tolerable, s.alpha, self._flips)
        rec.signals["evidence"] = {"agent": self._agent.summary(), "flip_rate": self._flips.summary(),
                                   "clusters": "Holm's step-down at alpha over the window's clusters "
                                               "(molt.control.clusters)",
                                   "bar": ("guarded: a context change with positive replay but a wide interval "
                                           "goes to a guarded canary; weight updates keep the strict bar"
                                           if s.guarded else "strict: every change needs its replay interval "
                                                             "above zero")}
        return live, window, CycleResult(record=rec, signals=signals)

    async def _diagnose(self, live: AgentVersion, window: list[Episode], rec: DecisionRecord) -> Findings:
        """The candidates of the window: a rollback when the live version regressed, and for each cluster
        worth acting on — significant, screened, or one of a significantly failing agent's — the typed
        candidates, the lifecycle's and the reflector's; environment faults flagged instead. Long because
        the clusters' bookkeeping (which bar each is held to) and the log lines that explain it are read
        together."""
        s = self.settings
        out = Findings()
        previous = self._previous(live)
        if previous is not None:
            rb = self._regression(live, previous, window)
            if rb is not None:
                out.candidates.append(rb)
        # Clusters span the window (failures under earlier versions count as evidence), but one that
        # the live version no longer shows — it ran the task and never failed this way — is fixed.
        # The evidence bar is each cluster's exact test against the rest of the window (diagnose).
        out.found = cluster_failures(window, embedder=self.embedder, alpha=s.alpha, similarity=s.similarity,
                                     tolerable=s.tolerable, screen=s.screen)
        # An agent failing beyond what it tolerates is itself the evidence: its clusters are where the
        # failures are, and each may get a context change tried on a guarded canary.
        family = s.guarded and self._agent is not None and self._agent.significant
        self._family = set()
        for c in out.found:
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
                out.faults[c.key] = fault
                rec.actions.append(f"flagged {c.key} ({c.size} failure(s)): {fault}")
                continue
            out.clusters[c.key] = c
            made = propose(c, window, live, redactor=self.redactor, embedder=self.embedder, similarity=s.similarity)
            made += self._lifecycle(c, made, live)
            # A screened cluster is not evidence enough for weights: replay cannot confirm a weight update.
            out.candidates.extend(x for x in made if c.significant or x.kind != "weight_update")
        self._cluster_failures = {k: [e.trajectory_id for e in c.failures] for k, c in out.clusters.items()}
        if self.reflector is not None and out.clusters:
            out.candidates.extend(await self._reflect(list(out.clusters.values()), window, live, rec))
        # The screened clusters' share of alpha, fixed before anything is replayed (molt.control.significance).
        out.screened = {k: c for k, c in out.clusters.items() if not c.significant}
        self._family &= set(out.screened)
        self._confirm_levels = screen_levels(
            {k: c.evidence.p_min for k, c in out.screened.items()
             if c.evidence is not None and k not in self._family},
            # a memory's two forms (prose, question and answer) are one test: whichever is confirmed first
            # spends the share (molt.control.replay_gates)
            Counter(x.cluster for x in out.candidates if x.cluster in out.screened and x.kind != "weight_update"
                    and not second_form(x)), s.alpha)
        self._explain_clusters(out, rec)
        return out

    def _explain_clusters(self, found: Findings, rec: DecisionRecord) -> None:
        """The decision log's account of the diagnosis: the agent-level test, how many clusters cleared
        which bar, and each cluster's summary."""
        s = self.settings
        n_sig = sum(1 for c in found.clusters.values() if c.significant)
        ag = self._agent
        assert ag is not None
        verdict = "significant" if ag.significant else "not significant"
        rec.actions.append(f"agent: {ag.failures} of {ag.requests} failed, p={ag.p_value:.3g} against the tolerated "
                           f"{ag.tolerable:g} at {ag.level:.3g} ({verdict}); reward flip rate {self._flips.rate:.2f} "
                           f"(95% upper {self._flips.upper:.2f})")
        rec.actions.append(f"{n_sig + len(found.faults)} failure cluster(s) significant at alpha {s.alpha} "
                           f"(of {len(found.found)}, Holm), {len(found.faults)} of them environment faults, "
                           f"{len(found.screened) - len(self._family)} more screened at {s.screen} (their candidates "
                           f"need the replay's confirmation, or a guarded canary), {len(self._family)} in the agent's "
                           f"significant failures (guarded canary only), {len(found.candidates)} candidate(s)")
        rec.signals["clusters"] = [c.summary()
                                   | ({"environment_fault": found.faults[c.key]} if c.key in found.faults else {})
                                   | ({"bar": "guarded: the agent's failures are significant, this cluster's are "
                                              "not by themselves"} if c.key in self._family else {})
                                   for c in found.found
                                   if c.significant or c.key in found.screened or c.key in found.faults]

    def _nothing_to_try(self, found: Findings, rec: DecisionRecord) -> None:
        """The decision when the diagnosis made no candidate: an environment fault, or a no-op saying why."""
        significant = any(c.significant for c in found.clusters.values())
        if found.faults and not significant:
            rec.choice = "environment_fault"
            rec.reason = "; ".join(f"{k}: {v}" for k, v in found.faults.items())
        elif significant:
            rec.reason = "no candidate could be built: " + "; ".join(
                no_candidate(c) for c in found.clusters.values())
        else:
            weak = [c for c in found.found if not c.significant and c.evidence is not None]
            if found.screened:
                rec.actions.append("no candidate for the screened cluster(s): " + "; ".join(
                    no_candidate(c) for c in found.screened.values()))
            best = min(weak, key=lambda c: c.evidence.p_value if c.evidence else 1.0, default=None)
            rec.reason = ("no failure cluster reaches the evidence bar"
                          + (f" ({len(weak)} cluster(s) below it; best {best.key}: {best.size} failure(s) of "
                             f"{best.evidence.requests} requests, p={best.evidence.p_value:.3g} > "
                             f"{best.evidence.level:.3g})" if best is not None and best.evidence is not None
                             else f" ({sum(c.size for c in found.found)} failure(s) in {len(found.found)} cluster(s))"
                             if found.found else " (no failures in the window)"))
        self._while_guarded(rec)

    async def _try_candidates(self, found: Findings, live: AgentVersion, window: list[Episode],
                              result: CycleResult) -> list[tuple[Candidate, GateResult]]:
        """Each context candidate through its gates, cheapest first (stable: templates before the
        reflector's at equal cost); what passed, in that order. The cheapest sufficient candidate wins, so
        once one is found a dearer one cannot — it is not replayed (each replay is model calls; this is
        most of a cycle's compute)."""
        s = self.settings
        rec = result.record
        passed: list[tuple[Candidate, GateResult]] = []
        found_sufficient: tuple[float, str] | None = None
        for cand in sorted(found.candidates, key=lambda c: c.cost):
            if cand.kind == "weight_update":
                continue
            entry = cand.model_dump(mode="json", exclude={"parts"})
            refused = self.proposals.was_rejected(rec.tenant_id, rec.agent_id, kind=cand.kind, cluster=cand.cluster,
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
                gated = await self._gates(cand, live, window, found.clusters.get(cand.cluster))
            except Exception as exc:  # a candidate whose replay or gate errors is rejected, never applied
                log.warning("Candidate %s failed its gates: %s", cand.candidate_id, exc)
                entry["rejected"] = f"gate error: {type(exc).__name__}: {exc}"
                rec.rejected.append(entry)
                continue
            found.gated[cand.candidate_id] = gated
            entry["evidence"] = result.evaluations[cand.candidate_id] = gated.as_json()
            if gated.rejected:
                entry["rejected"] = gated.rejected
                rec.rejected.append(entry)
            else:
                rec.candidates.append(entry)
                passed.append((cand, gated))
                if gated.replay is not None and sufficient(s, gated.replay) and found_sufficient is None:
                    found_sufficient = (cand.cost, cand.kind)
        return passed

    async def _choose(self, found: Findings, passed: list[tuple[Candidate, GateResult]], live: AgentVersion,
                      result: CycleResult) -> None:
        """The choice among what passed (:meth:`_select`) and its application; with none, a no-op (or an
        environment fault) naming what became of every cluster's candidates."""
        rec = result.record
        candidates, clusters = found.candidates, found.clusters
        facts = {c.cluster for c in candidates if c.kind in ("memory_insert", "memory_update")}
        self._probe_note = None
        if any(c.kind == "weight_update" and c.cluster in facts for c in candidates):
            self._probe_note = await self._context_probe(rec.agent_id)
        chosen, why = self._select(passed, candidates, clusters, found.gated)
        if chosen is None:
            notes = [f"{c.key}: {n}" for c in clusters.values() for n in c.notes]
            for c in clusters.values():  # every cluster the log mentions, with what became of its candidates
                refused = [f"{r.get('kind')}: {r.get('rejected')}" for r in rec.rejected if r.get("cluster") == c.key]
                if refused and not any(x.get("cluster") == c.key for x in rec.candidates):
                    notes.append(f"{c.key} ({c.size} failure(s)): every candidate refused — " + "; ".join(refused[:4]))
            rec.reason = "; ".join([why, *notes])
            if found.faults:
                rec.reason += "; flagged " + "; ".join(f"{k}: {v}" for k, v in found.faults.items())
                # Nothing else to do: no significant cluster (a screened one's unconfirmed candidates are
                # evidence for a later window), or none of the significant ones' candidates passed.
                significant = any(c.significant for c in clusters.values())
                if not significant or (not passed and not any(c.kind == "weight_update" for c in candidates)):
                    rec.choice = "environment_fault"
            self._while_guarded(rec)
            return
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
            pairs |= agents_in_traffic(self.store, tenant_id)
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

    # ------------------------------------------------------------------ steps

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

    def _apply(self, cand: Candidate, live: AgentVersion, rec: DecisionRecord) -> AgentVersion | None:
        """Apply the chosen candidate: screened again, then a rollback at once, a weight update handed to the
        trainer, or a new version of the live parts plus the change — proposed, canaried (guarded or not) or
        promoted. Just over 60 lines: each kind's parts and the routing that follows read as one."""
        s = self.settings
        t, a = live.tenant_id, live.agent_id
        if not self._screened(cand, cand.model_dump(mode="json", exclude={"parts"}), rec):  # again, before canary
            raise InterventionError(f"the safety gate refused {cand.kind} before canary: "
                                    f"{rec.rejected[-1]['rejected']}")
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
