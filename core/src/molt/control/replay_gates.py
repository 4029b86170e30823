"""The gates a candidate passes before it may be chosen, cheapest first: the safety gate's screen and
many hands, safety of generated text, replay on its cluster (with the screened cluster's confirmation)
and regression on held-back successes."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from molt.backends.base import BaseBackend
from molt.control.bars import clears, promising
from molt.control.collaborators import TextRedactor
from molt.control.diagnose import Candidate, Cluster
from molt.control.gate import SafetyGate, Verdict
from molt.control.hands import many_hands
from molt.control.log import DecisionRecord
from molt.control.overrides import overrides_for
from molt.control.settings import GUARDED_KINDS, PlaneSettings
from molt.control.signals import Episode
from molt.control.significance import Confirmation, FlipEstimate, confirmation
from molt.control.versions import AgentConfig, AgentVersion
from molt.harness import Skill
from molt.replay import AGENTS, LiveTools, Normalization, ReplayAgent, evaluate_candidate
from molt.replay.evaluate import Evaluation, ReplayMemo
from molt.stats import newcombe_diff
from molt.store import Store

if TYPE_CHECKING:
    from molt.control.memory import MemoryStore

__all__ = ["CandidateGates", "GateResult", "brief", "replayed"]

log = logging.getLogger("molt.control")


@dataclass
class GateResult:
    """What a candidate's gates found (:meth:`CandidateGates._gates`). The decision log and
    :attr:`~molt.control.log.CycleResult.evaluations` keep it as :meth:`as_json` (its set fields only).

    Attributes:
        replay: the replay on the candidate's cluster (:func:`brief` of its evaluation, with the replay's
            mode, model and backend, and the live version's replay as the baseline when the failures
            were recorded under an earlier version); ``None`` when a safety gate refused it first.
        confirmation: a screened cluster's paired test on its region (or why it was skipped).
        bar: ``"guarded"`` when the evidence is enough only for a guarded canary.
        guarded_why: why the guarded bar applies.
        regression: the replay on held-back successes (or why it was skipped).
        rejected: why the candidate may not go live (``None``: it passed).
    """

    replay: dict[str, Any] | None = None
    confirmation: dict[str, Any] | None = None
    bar: Literal["guarded"] | None = None
    guarded_why: str | None = None
    regression: dict[str, Any] | None = None
    rejected: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The set fields under their names, in this order (the decision log's stored form)."""
        return {k: v for k, v in (("replay", self.replay), ("confirmation", self.confirmation), ("bar", self.bar),
                                  ("guarded_why", self.guarded_why), ("regression", self.regression),
                                  ("rejected", self.rejected)) if v is not None}


class CandidateGates:
    """The control plane's gates (a mixin of :class:`~molt.control.plane.ControlPlane`, whose replay
    backends and per-cycle state they use)."""

    settings: PlaneSettings
    store: Store
    gate: SafetyGate
    live_tools: LiveTools | None
    normalization: Normalization
    replays: ReplayMemo
    _gate_ctx: dict[str, Any]
    _cluster_failures: dict[str, list[str]]
    _live_evals: dict[tuple[str, str], Evaluation | None]
    _confirm_levels: dict[str, float]
    _region_live: dict[tuple[str, str], dict[str, float | None]]
    _confirmed_facts: set[tuple[str, str]]
    _flips: FlipEstimate
    _family: set[str]
    _probes: dict[int, tuple[bool, str]]
    _adapters: set[tuple[int, str]]

    @property
    def memories(self) -> MemoryStore:
        raise NotImplementedError

    @property
    def redactor(self) -> TextRedactor:
        raise NotImplementedError

    def backend_for(self, agent_id: str) -> BaseBackend:
        raise NotImplementedError

    def judge_for(self, agent_id: str) -> BaseBackend:
        raise NotImplementedError

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

    async def _gates(self, cand: Candidate, live: AgentVersion, window: list[Episode],
                     cluster: Cluster | None) -> GateResult:
        """Safety, replay on the cluster, regression on held-back successes: the :class:`GateResult`, whose
        ``rejected`` says why a candidate may not go live. Long because the gates run cheapest first and
        each later one reads what the earlier ones found (the replay's bar decides the confirmation and
        whether the held-back successes are replayed at all)."""
        s = self.settings
        tenant = live.tenant_id
        own = {e.trajectory_id for e in window if e.tenant_id == tenant}
        foreign = [t for t in cand.source_trajectories if t not in own]
        if foreign:
            return GateResult(rejected=f"safety: {len(foreign)} source trajectories are not {tenant}'s")
        extra_mem: list[str] = []
        extra_skill: list[Skill] = []
        is_memory = cand.kind in ("memory_insert", "memory_update")
        if is_memory or cand.kind == "skill_patch":
            keys = ("text",) if is_memory else ("name", "trigger", "instructions")
            bad = [k for k in keys if not isinstance(cand.payload.get(k), str) or not cand.payload[k].strip()]
            if bad:
                return GateResult(rejected=f"malformed {cand.kind.replace('_', ' ')}: empty or missing "
                                           f"{', '.join(bad)}")
            texts = ([cand.payload["text"]] if is_memory
                     else [cand.payload["name"], cand.payload["trigger"], cand.payload["instructions"]])
            found = sorted({sp.entity_type for t in texts for sp in self.redactor.redact(t)[1]})
            if found:
                return GateResult(rejected=f"safety: generated {cand.kind.replace('_', ' ')} contains "
                                           f"{', '.join(found)}; it is never stored or served")
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
        replay = brief(ev)
        out = GateResult(replay=replay)
        replay["mode"] = ("the agent's @molt.replayable entry point" if agent is not None
                                 else "generic replay from the recording")
        replayer = self.backend_for(live.agent_id)
        replay["model"], replay["backend"] = replayer.model, type(replayer).__name__
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
                replay.update(baseline_success_rate=base.candidate_success_rate,
                                     success_delta=ev.candidate_success_rate - base.candidate_success_rate,
                                     success_delta_ci=[lo, hi], baseline="replay of the live version",
                                     recorded_baseline=ev.baseline_success_rate)
        if ev.errors and ev.errors >= max(1, ev.sampled // 2):
            out.rejected = f"replay: {ev.errors} of {ev.sampled} replays raised"
            return out
        if ev.scored == 0 or ev.unknown > s.max_unknown_share * max(ev.sampled, 1):
            out.rejected = f"replay: too little coverage ({ev.scored} scored, {ev.unknown} unknown)"
            return out
        guardable = s.guarded and cand.kind in GUARDED_KINDS and promising(self.settings, replay)
        if cluster is not None and cluster.key in self._family and cand.kind != "rollback":
            # Only the agent-level test is significant: the candidate can go live only on a guarded canary.
            out.bar = "guarded"
            out.guarded_why = "only the agent's failure rate is significant, not this cluster's by itself"
        elif cluster is not None and cluster.key in self._confirm_levels and cand.kind != "rollback":
            # A screened cluster: the candidate goes live only if the replay confirms it (evidence.py), or —
            # positive but unconfirmed — on a guarded canary, whose live outcomes are the experiment.
            fact = (cluster.key, str(cand.payload.get("fact") or "")) if cand.payload.get("fact") else None
            if not clears(self.settings, replay):
                out.confirmation = {"skipped": "the replay did not clear the evidence bar"}
                if guardable:
                    out.bar = "guarded"
                    out.guarded_why = "the cluster is screened, and the replay's interval is wide"
            elif fact is not None and fact in self._confirmed_facts:
                # One test per memory, whatever its form: the other form's confirmation spent its share.
                out.confirmation = {"skipped": "the same memory in its other form was confirmation-tested: "
                                                  "one test per memory"}
                if guardable:
                    out.bar = "guarded"
                    out.guarded_why = "the cluster is screened, and the memory's test was spent on its other form"
                else:
                    out.rejected = ("confirmation: the same memory in its other form was tested on the "
                                       "cluster's region (one test per memory)")
                    return out
            else:
                if fact is not None:
                    self._confirmed_facts.add(fact)
                conf = await self._confirm(cand, cluster, live, ev, policy, agent, tenant)
                out.confirmation = conf.summary()
                if not conf.confirmed:
                    if guardable and conf.fixed > conf.broken:
                        out.bar = "guarded"
                        out.guarded_why = (f"the cluster is screened and the replay does not confirm it at its "
                                              f"share of alpha ({conf.fixed} fixed, {conf.broken} broken; sign "
                                              f"test p={conf.p_value:.3g} > {conf.level:.3g})")
                    else:
                        out.rejected = (f"confirmation: {cluster.key} is screened, not significant, and replay "
                                           f"on its {conf.pairs} requests does not confirm the candidate "
                                           f"({conf.fixed} fixed, {conf.broken} broken; sign test "
                                           f"p={conf.p_value:.3g} > {conf.level:.3g})")
                        return out
        held = [e.trajectory_id for e in window if e.success and e.tenant_id == tenant and e.trajectory_id
                not in set(failing) and e.policy_version in (live.version_id, None)][-s.regression_sample:]
        if held and not (clears(self.settings, replay) or guardable):
            # Gates cheapest first: a candidate whose replay does not clear the evidence bar can be neither
            # chosen nor more "tried" than it is (the weight rule counts it as replayed and failed), so the
            # held-back successes are not replayed for it.
            out.regression = {"skipped": "the replay did not clear the evidence bar"}
        elif held:
            reg = await self._replay(held, agent, policy, live, cand.candidate_id + ":regr", parts=parts)
            regression = brief(reg)
            out.regression = regression
            # Some recorded successes are flipped failures, and those fail again on replay whatever the
            # candidate: the drop they explain (the flip rate's upper bound, estimated from the signals'
            # disagreements) is allowed beside the tolerance — one flipped held-back success does not
            # fail a candidate.
            flips = self._flips.upper if self._flips.rate > 0 else 0.0
            regression["flip_allowance"] = round(flips, 4)
            if reg.candidate_success_rate is not None and reg.baseline_success_rate is not None and \
                    reg.candidate_success_rate < reg.baseline_success_rate - s.regression_tolerance - flips:
                out.rejected = (f"regression: held-back successes fall from {reg.baseline_success_rate:.2f} to "
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
            self._region_live[key] = replayed(await self._replay(region, agent, base, live,
                                                                  f"{live.version_id}:baseline", parts=live.parts))
        got = replayed(ev)
        rest = [t for t in region if t not in got]
        if rest:
            got |= replayed(await self._replay(rest, agent, policy, live, cand.candidate_id + ":region",
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


def replayed(ev: Evaluation) -> dict[str, float | None]:
    """Each replayed trajectory's reward under the evaluated policy (``None``: not scored)."""
    return {d["trajectory_id"]: d.get("replayed_reward") for d in ev.evidence if d.get("status") == "ok"}


def brief(ev: Evaluation) -> dict[str, Any]:
    """An evaluation as the decision log keeps it."""
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
