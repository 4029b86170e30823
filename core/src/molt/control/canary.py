"""Canary looks: a version in canary compared with the live one on the window (promote, abort, wait),
and a guarded canary's sequential test, one look a cycle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from molt.control.clusters import embed_texts, intent_text, resolve_embedder
from molt.control.log import CycleResult, DecisionLog, DecisionRecord
from molt.control.settings import PlaneSettings
from molt.control.signals import Episode
from molt.control.significance import canary_state, pair_in_time
from molt.control.versions import AgentVersion, StalePromotion, VersionRegistry
from molt.stats import newcombe_diff, stratified_delta

__all__ = ["CanaryLooks", "as_utc", "task_outcomes"]


class CanaryLooks:
    """The control plane's canary step (a mixin of :class:`~molt.control.plane.ControlPlane`, whose state
    it reads)."""

    settings: PlaneSettings
    registry: VersionRegistry
    log: DecisionLog
    actor: str
    embedder: Any
    _running_guard: AgentVersion | None

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
            delta = stratified_delta(task_outcomes(mine), task_outcomes(theirs)) if theirs else 0.0
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
                self._promote(c, live, result, "canary", reason=f"canary delta {delta:+.2f} on {len(mine)}",
                              why=f"delta {delta:+.2f}")
                return True
            rec.choice, rec.reason = "noop", f"canary {c.version_id} has {len(mine)}/{s.canary_min} rewarded runs"
            return True
        return False

    def _guard_of(self, canary: AgentVersion) -> dict[str, Any] | None:
        """The guard the decision that started ``canary`` recorded (``None``: an ordinary canary)."""
        for d in self.log.list(canary.tenant_id, canary.agent_id, limit=200):
            if d.applied_version == canary.version_id and isinstance(d.signals.get("guard"), dict):
                return d.signals["guard"] | {"started": as_utc(d.created_at).isoformat()}
        return None

    def _guarded_canary(self, c: AgentVersion, live: AgentVersion, guard: Mapping[str, Any],
                        mine: list[Episode], live_runs: list[Episode], result: CycleResult) -> bool:
        """One look of a guarded canary's sequential test (:func:`molt.control.significance.canary_state`): each
        canary run paired with the live run nearest in time that was served since the canary started,
        then promote, abort (harm, or the exposure bound) or go on — its state in the decision log."""
        rec = result.record
        started = datetime.fromisoformat(guard["started"])
        beside = [e for e in live_runs if as_utc(e.started_at) >= started] or live_runs
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
        pairs = pair_in_time([(as_utc(e.started_at), bool(e.success)) for e in mine],
                             [(as_utc(e.started_at), bool(e.success)) for e in beside])
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
            self._promote(c, live, result, "guarded canary", reason=f"guarded canary: {st.why}", why=st.why)
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

    def _promote(self, c: AgentVersion, live: AgentVersion, result: CycleResult, label: str, *, reason: str,
                 why: str) -> None:
        """Promote canary ``c``, compare-and-set on its parent (the canary's change was made on it): when the
        live version moved meanwhile, the stale canary is aborted instead."""
        rec = result.record
        try:
            result.version = self.registry.promote(c.version_id, actor=self.actor, reason=reason,
                                                   expected_live=c.parent_id or live.version_id)
        except StalePromotion as exc:
            self.registry.abort(c.version_id, actor=self.actor, reason=str(exc))
            rec.choice, rec.reason = "rollback", f"{label} {c.version_id} aborted: {exc}"
            return
        rec.choice, rec.reason = "promote", f"{label} {c.version_id} promoted: {why}"
        rec.applied_version = c.version_id

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


def task_outcomes(eps: Sequence[Episode]) -> list[tuple[str | None, bool]]:
    """Each run as ``(task, succeeded)``, the strata :func:`molt.stats.stratified_delta` compares by."""
    return [(e.task, bool(e.success)) for e in eps]


def as_utc(t: datetime) -> datetime:
    """``t`` as an aware UTC time (the store's naive times are UTC)."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)
