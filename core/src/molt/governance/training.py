"""The training queue: the only read path a trainer uses, returning eligible, redacted trajectories.

A trajectory is handed to a trainer only when, under the policy *now* and as recorded at capture:

- its tenant opted in, and the trainer's tenant is that tenant or one it shares with (both tenants'
  ``training.share_with`` must name each other);
- every event passed the governance pipeline and was judged eligible (an event with no recorded
  decision is not: fail closed), and still is under the current rules (consent, classification,
  kinds, tools);
- no payload was erased, the hash chain verifies, and the minimum-quality rules hold (late rewards
  included).

Events come back as stored — redacted at capture by the fast pass — minus the tenant's
``exclude_fields``, and after the thorough redaction pass (:mod:`molt.governance.thorough`): nothing is
handed to a trainer that the thorough pass has not seen. When that pass cannot run, the trajectory is
ineligible (fail closed for training). What another
process wrote (the gateway's capture process, under ``molt serve --train``) is seen within the store's
``read_consistency_s``.

Example::

    from molt.governance import TrainingQueue, load_policy_file

    queue = TrainingQueue(store, load_policy_file("governance.yaml"), trainer_principal)
    for traj in queue.eligible_trajectories(limit=256):
        ...
    for verdict in queue.evaluate():           # every trajectory, with the reasons
        print(verdict.trajectory_id, verdict.eligible, verdict.reasons)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from molt.atdp.chain import unseal, verify_chain
from molt.errors import GovernanceError, PermissionDenied
from molt.governance.access import Permission, Principal
from molt.governance.eligibility import event_reasons, quality_reasons, strip_fields
from molt.governance.policy import GovernancePolicy
from molt.governance.records import audit_row, ensure_governance_tables, write_audit
from molt.store.filters import Filter
from molt.store.lance import Store
from molt.store.query import Trajectory
from molt.store.scoped import TenantView

__all__ = ["TrainingQueue", "TrajectoryVerdict", "eligible_trajectories"]

_MAX_REASONS = 20



@dataclass(frozen=True)
class TrajectoryVerdict:
    """Whether one trajectory may be trained on, and why not."""

    trajectory_id: str
    tenant_id: str
    eligible: bool
    reasons: list[str] = field(default_factory=list)
    events: int = 0


class TrainingQueue:
    """Eligible trajectories for one trainer principal (role ``trainer`` or ``admin``)."""

    def __init__(self, store: Store, policy: GovernancePolicy, principal: Principal, *, thorough: Any = None):
        principal.require(Permission.TRAIN)
        self.store = store
        # the thorough redaction pass every handed-out event goes through (molt.governance.thorough)
        self.thorough = thorough
        self.policy = policy
        self.principal = principal
        ensure_governance_tables(store)

    def tenants(self, tenants: Sequence[str] | None = None) -> list[str]:
        """The tenants this trainer may read: its own, plus those sharing with it both ways."""
        own = self.principal.tenant_id
        wanted = list(dict.fromkeys(tenants or [own]))
        for t in wanted:
            if not self.policy.shares(t, own):
                raise PermissionDenied(
                    f"Tenant {own!r} may not train on tenant {t!r}'s data: cross-tenant training needs "
                    f"tenants.{t}.training.share_with to list {own!r} (with opt_in) and "
                    f"tenants.{own}.training.share_with to list {t!r}.")
        return wanted

    def evaluate(self, *, tenants: Sequence[str] | None = None, since: datetime | None = None,
                 until: datetime | None = None, audit: bool = False
                 ) -> list[tuple[TrajectoryVerdict, Trajectory | None]]:
        """A verdict for every trajectory of ``tenants`` active in ``[since, until)``, with the
        trainable trajectory when eligible. ``audit=True`` records each verdict in the audit log."""
        out: list[tuple[TrajectoryVerdict, Trajectory | None]] = []
        for tenant in self.tenants(tenants):
            out.extend(self._evaluate_tenant(tenant, since, until))
        if audit:
            who = self.principal.key_name or f"{self.principal.tenant_id}/{self.principal.role.value}"
            write_audit(self.store, [audit_row(
                tenant_id=v.tenant_id, kind="eligibility", actor=who, target=v.trajectory_id,
                summary="eligible" if v.eligible else "ineligible: " + "; ".join(v.reasons[:3]),
                detail={"eligible": v.eligible, "reasons": v.reasons, "events": v.events})
                for v, _ in out])
        return out

    def eligible_trajectories(self, *, tenants: Sequence[str] | None = None, since: datetime | None = None,
                              until: datetime | None = None, limit: int | None = None) -> list[Trajectory]:
        """Only the eligible, redacted trajectories (oldest first), at most ``limit``."""
        got = [t for v, t in self.evaluate(tenants=tenants, since=since, until=until) if v.eligible and t]
        return got[:limit] if limit is not None else got

    # ------------------------------------------------------------------ one tenant

    def _evaluate_tenant(self, tenant: str, since: datetime | None, until: datetime | None
                         ) -> list[tuple[TrajectoryVerdict, Trajectory | None]]:
        view = TenantView.for_tenant(self.store, tenant)
        tp = self.policy.for_tenant(tenant)
        spans = view.aggregate("events", [("ts", "min"), ("ts", "max")], by=["trajectory_id"])
        rows = sorted(spans.to_pylist(), key=lambda r: (r["ts_min"], r["trajectory_id"]))
        if since is not None:
            rows = [r for r in rows if r["ts_max"] >= since.astimezone(UTC)]
        if until is not None:
            rows = [r for r in rows if r["ts_min"] < until.astimezone(UTC)]
        tids = [r["trajectory_id"] for r in rows]
        if not tids:
            return []
        decisions = self._decisions(view, tids)
        sealed = view.sealed_many(tids)
        rewards = view.rewards_many(tids)
        out = []
        for tid in tids:
            records = sealed.get(tid, [])
            reasons: list[str] = [] if tp.training.opt_in else ["tenant: the tenant has not opted in to training"]
            events = []
            excluded = set(tp.training.exclude_fields)
            for r in records:
                where = f"event seq {r.seq}"
                if r.payload is None:
                    reasons.append(f"{where}: erasure: the payload was erased")
                    continue
                ev = unseal(r.envelope, r.payload)
                events.append(ev)
                d = decisions.get(r.event_id)
                if d is None:
                    reasons.append(f"{where}: governance: no decision was recorded (not captured through "
                                   f"the governance pipeline)")
                    continue
                excluded.update(d["excluded_fields"] or ())
                types = orjson.loads(d["redacted_types"]) if d["redacted_types"] else {}
                now = event_reasons(ev, tp.training, redacted_types=types)
                then = (d["reasons"] or ["eligibility was not decided"]) if d["eligible"] is not True else []
                # capture-time reasons stand (data captured before an opt-in stays out); the current
                # tenant-level opt-in is judged once per trajectory above
                now = [x for x in now if not x.startswith("tenant:")]
                reasons.extend(f"{where}: {x}" for x in dict.fromkeys(then + now))
            late = rewards.get(tid, [])
            inline = [e.reward for e in events if e.reward is not None]
            total = sum(inline) + sum(a.value for a in late) if inline or late else None
            chain_ok = verify_chain(tid, records).ok
            reasons.extend(quality_reasons(events, total, tp.training.quality, chain_ok=chain_ok))
            reasons = list(dict.fromkeys(reasons))
            ok = not reasons
            traj = None
            if ok:
                try:
                    passed = self._thorough().clean_many(strip_fields(e, sorted(excluded)) for e in events)
                except GovernanceError as exc:
                    ok = False
                    reasons.append(f"redaction: the thorough pass did not run: {exc}")
                else:
                    traj = Trajectory(trajectory_id=tid, events=passed, rewards=late)
            out.append((TrajectoryVerdict(trajectory_id=tid, tenant_id=tenant, eligible=ok,
                                          reasons=reasons[:_MAX_REASONS], events=len(records)), traj))
        return out

    def _thorough(self) -> Any:
        if self.thorough is None:
            from molt.governance.thorough import default_pass

            self.thorough = default_pass()
        return self.thorough

    @staticmethod
    def _decisions(view: TenantView, tids: list[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        cols = ["event_id", "eligible", "reasons", "excluded_fields", "redacted_types"]
        for where in Filter().chunks("trajectory_id", tids):
            got = view.scan("governance", where=where, columns=cols)
            for r in got.to_pylist():
                out[r["event_id"]] = r
        return out


def eligible_trajectories(store: Store, policy: GovernancePolicy, principal: Principal, *,
                          tenants: Sequence[str] | None = None, since: datetime | None = None,
                          until: datetime | None = None, limit: int | None = None) -> list[Trajectory]:
    """The trainer's read path: eligible, redacted trajectories (see :class:`TrainingQueue`)."""
    return TrainingQueue(store, policy, principal).eligible_trajectories(
        tenants=tenants, since=since, until=until, limit=limit)
