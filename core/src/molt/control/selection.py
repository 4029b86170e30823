"""Selection and weight rules: which gated candidate a cycle chooses (the cheapest sufficient, the best
clearing the bar, a guarded canary, a weight update as the last resort) and the evidence a weight
update waits for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from molt.control.bars import clears, promising
from molt.control.canary import as_utc
from molt.control.clusters import intent_text
from molt.control.diagnose import Candidate, Cluster, cluster_failures, same_pattern
from molt.control.log import DecisionLog
from molt.control.replay_gates import GateResult
from molt.control.settings import GUARDED_KINDS, PlaneSettings
from molt.control.signals import episodes
from molt.control.versions import AgentVersion, VersionRegistry
from molt.errors import MoltError
from molt.store import Store

__all__ = ["Selection", "no_candidate", "second_form"]


class Selection:
    """The control plane's choice among gated candidates (a mixin of
    :class:`~molt.control.plane.ControlPlane`, whose state it reads)."""

    settings: PlaneSettings
    store: Store
    registry: VersionRegistry
    log: DecisionLog
    trainer: Any
    embedder: Any
    _current: AgentVersion | None
    _running_guard: AgentVersion | None
    _guard: dict[str, Any] | None
    _probe_note: tuple[bool, str] | None

    def _select(self, passed: list[tuple[Candidate, GateResult]], all_candidates: list[Candidate],
                clusters: dict[str, Cluster], evaluations: Mapping[str, GateResult] | None = None,
                ) -> tuple[Candidate | None, str]:
        """The cycle's choice among the candidates that passed their gates, and why: the cheapest sufficient
        one, else the best clearing the evidence bar, else a guarded canary for a promising cheap change
        (recording its guard), else :meth:`_weight_choice`. One function over 60 lines because the bars are
        tried in this order over the same scored list, and each reason names the figures it chose on."""
        s = self.settings
        scored: list[tuple[Candidate, float, Any, float]] = []
        guarded = []
        for cand, ev in passed:
            r = ev.replay or {}
            size = clusters[cand.cluster].size if cand.cluster in clusters else len(cand.source_trajectories)
            if s.guarded and cand.kind in GUARDED_KINDS and promising(s, r) and size >= s.guarded_min_failures \
                    and (ev.bar == "guarded" or not clears(s, r)):
                guarded.append((cand, ev, r["success_delta"] * size - s.cost_lambda * cand.cost * size))
            if ev.bar == "guarded":
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
            r = ev.replay or {}
            conf = ev.confirmation or {}
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
            short = ev.guarded_why or "its interval is too wide for the strict bar"
            return cand, (f"guarded canary: replay {r['success_delta']:+.0%} on {cand.cluster} (95% CI low {lo}; "
                          f"{short}); a cheap, reversible {cand.kind} is tried on "
                          f"{s.guarded_weight:.0%} of the sessions, and its mSPRT on live outcomes (false-promotion "
                          f"rate {s.guarded_alpha:g}, at most {s.guarded_max_requests} canary runs) promotes or "
                          f"aborts it")
        return self._weight_choice(all_candidates, clusters, evaluations or {}, scored)

    def _weight_choice(self, all_candidates: list[Candidate], clusters: dict[str, Cluster],
                       evaluations: Mapping[str, GateResult], scored: list[tuple[Candidate, float, Any, float]],
                       ) -> tuple[Candidate | None, str]:
        """The last resort when no context change clears a bar: a weight update for a cluster whose evidence
        is in (:meth:`_weight_evidence`) and that recurs across tenants or is large — once per model —,
        else a no-op naming what the clusters wait for and the best candidate replayed (``scored``)."""
        s = self.settings
        # A weight update is the last resort, and only for a cluster whose evidence is in and on which
        # context changes were generated, replayed and failed (see _weight_evidence); the others wait.
        weights = sorted((c for c in all_candidates if c.kind == "weight_update" and c.cluster in clusters),
                         key=lambda c: (-clusters[c.cluster].size, c.cluster))
        eligible: list[tuple[Candidate, str]] = []
        waiting: list[str] = []
        for cand in weights:
            cl = clusters[cand.cluster]
            tried, wait = self._weight_evidence(cl, all_candidates, evaluations)
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
                         evaluations: Mapping[str, GateResult]) -> tuple[list[str], str | None]:
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
            if last is None or all(as_utc(e.started_at) >= last for e in cluster.failures):
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
            ev = evaluations.get(c.candidate_id)
            replay, rejected = (ev.replay if ev else None) or {}, (ev.rejected if ev else None) or ""
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
        return as_utc(last[0].created_at) if last else None

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


def second_form(c: Candidate) -> bool:
    """Whether ``c`` is a memory in its question-and-answer form (molt.control.diagnose.qa_form): the
    same fact as its prose form, so the same hypothesis, not one more."""
    return c.kind in ("memory_insert", "memory_update") and c.payload.get("form") == "qa"


def no_candidate(c: Cluster) -> str:
    """Why no candidate exists for a significant cluster, as the decision log says it."""
    what = (f"{c.key} ({c.size} failure(s), said by "
            f"{', '.join(sorted({sig for e in c.failures for sig in e.failure_signals})) or 'rewards'})")
    if c.notes:
        return f"{what}: " + "; ".join(c.notes)
    return (f"{what}: no correction to remember, no tool error naming a parameter or another tool, no "
            f"format requirement and no procedure its successes share")
