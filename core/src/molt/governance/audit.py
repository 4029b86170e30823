"""Audit: every governance decision about a tenant's data, for that tenant's admins.

One query over three sources, all read through the tenant-scoped path
(:class:`molt.store.scoped.TenantView`):

- the ``governance`` table — per event: ``redaction`` (entity types and counts, never values) and
  ``eligibility`` (verdict and reasons, with classification and retention class);
- the ``quarantine`` table — ``quarantine`` (stage and reason);
- the ``audit`` table — ``erasure`` and ``retention`` runs, trajectory-level ``eligibility``, and
  ``approval``: an operator's approval or rejection of a proposed policy version (molt.control.approval).

Example::

    audit = Audit(store, admin_principal)
    for e in audit.entries(kinds=["quarantine", "erasure"], limit=20):
        print(e.ts, e.kind, e.summary)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import orjson

from molt.errors import GovernanceError
from molt.governance.access import Principal, Role
from molt.governance.decision import Decision
from molt.governance.records import ensure_governance_tables
from molt.store.filters import Filter
from molt.store.lance import Store
from molt.store.scoped import TenantView

__all__ = ["KINDS", "Audit", "AuditEntry"]

#: Entry kinds :meth:`Audit.entries` can return.
KINDS = ("redaction", "eligibility", "quarantine", "erasure", "retention", "approval")


@dataclass(frozen=True)
class AuditEntry:
    """One governance decision or run."""

    ts: datetime
    tenant_id: str
    kind: str
    summary: str
    event_id: str | None = None
    trajectory_id: str | None = None
    actor: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        d = asdict(self)
        d["ts"] = self.ts.isoformat()
        return d


class Audit:
    """The audit trail of one tenant, for an admin of that tenant."""

    def __init__(self, store: Store, principal: Principal):
        principal.require(Role.ADMIN)
        ensure_governance_tables(store)
        self.view = TenantView(store, principal)
        self.tenant_id = principal.tenant_id

    def entries(self, *, kinds: Iterable[str] | None = None, since: datetime | None = None,
                until: datetime | None = None, trajectory_id: str | None = None, event_id: str | None = None,
                limit: int | None = 100) -> list[AuditEntry]:
        """Entries newest first, filtered by kind, time, trajectory or event."""
        wanted = set(kinds or KINDS)
        unknown = sorted(wanted - set(KINDS))
        if unknown:
            raise GovernanceError(f"Unknown audit kinds {unknown}; kinds are {', '.join(KINDS)}.")
        out: list[AuditEntry] = []
        if wanted & {"redaction", "eligibility"}:
            out.extend(self._decisions(wanted, self._where("decided_at", since, until, trajectory_id, event_id),
                                       limit))
        if "quarantine" in wanted:
            out.extend(self._quarantine(self._where("ts", since, until, trajectory_id, event_id), limit))
        runs = wanted & {"erasure", "retention", "eligibility", "approval"}
        if runs and event_id is None:
            clause = Filter().among("kind", sorted(runs))
            if trajectory_id is not None:
                clause = clause.where(target=trajectory_id)
            out.extend(self._runs(self._where("ts", since, until, None, None, clause), limit))
        out.sort(key=lambda e: e.ts, reverse=True)
        return out[:limit] if limit is not None else out

    def decision(self, event_id: str) -> Decision | None:
        """The full recorded decision of one of the tenant's events."""
        got = self.view.scan("governance", where=Filter(event_id=event_id), columns=["decision"], limit=1)
        rows = got.column("decision").to_pylist()
        return Decision.from_annotations(orjson.loads(rows[0])) if rows else None

    # ------------------------------------------------------------------ sources

    @staticmethod
    def _where(col: str, since: datetime | None, until: datetime | None, trajectory_id: str | None,
               event_id: str | None, extra: Filter | None = None) -> Filter:
        where = extra or Filter()
        if since is not None:
            where = where.since(col, since)
        if until is not None:
            where = where.before(col, until)
        if trajectory_id is not None:
            where = where.where(trajectory_id=trajectory_id)
        if event_id is not None:
            where = where.where(event_id=event_id)
        return where

    def _decisions(self, wanted: set[str], where: Filter, limit: int | None) -> list[AuditEntry]:
        cols = ["event_id", "trajectory_id", "decided_at", "policy", "classification", "escalated_by", "eligible",
                "reasons", "redaction_policy", "redacted_types", "redacted_fields", "retention_class",
                "retention_days", "expires_at"]
        rows = self.view.scan("governance", where=where, columns=cols).to_pylist()
        rows.sort(key=lambda r: r["decided_at"], reverse=True)
        out: list[AuditEntry] = []
        for r in rows[:limit] if limit is not None else rows:
            base = {"ts": r["decided_at"], "tenant_id": self.tenant_id, "event_id": r["event_id"],
                    "trajectory_id": r["trajectory_id"], "actor": r["policy"]}
            counts = orjson.loads(r["redacted_types"]) if r["redacted_types"] else {}
            if "redaction" in wanted and counts:
                types = ", ".join(f"{k}×{v}" for k, v in sorted(counts.items()))
                out.append(AuditEntry(kind="redaction", summary=f"redacted {types}", detail={
                    "policy": r["redaction_policy"], "counts": counts, "fields": r["redacted_fields"]}, **base))
            if "eligibility" in wanted:
                verdict = {True: "eligible", False: "ineligible", None: "not decided"}[r["eligible"]]
                why = f": {'; '.join(r['reasons'])}" if r["reasons"] else ""
                cls = r["classification"] + (f" (raised by {', '.join(r['escalated_by'])})" if r["escalated_by"]
                                             else "")
                out.append(AuditEntry(
                    kind="eligibility",
                    summary=f"{verdict}{why}; classification {cls}; retention {r['retention_class']} "
                            f"{r['retention_days']}d",
                    detail={"eligible": r["eligible"], "reasons": r["reasons"], "classification": r["classification"],
                            "escalated_by": r["escalated_by"], "retention_class": r["retention_class"],
                            "retention_days": r["retention_days"],
                            "expires_at": r["expires_at"].isoformat() if r["expires_at"] else None}, **base))
        return out

    def _quarantine(self, where: Filter, limit: int | None) -> list[AuditEntry]:
        cols = ["quarantine_id", "event_id", "trajectory_id", "kind", "stage", "reason", "ts"]
        rows = self.view.scan("quarantine", where=where, columns=cols).to_pylist()
        rows.sort(key=lambda r: r["ts"], reverse=True)
        return [AuditEntry(ts=r["ts"], tenant_id=self.tenant_id, kind="quarantine",
                           summary=f"quarantined at {r['stage']}: {r['reason']}", event_id=r["event_id"],
                           trajectory_id=r["trajectory_id"], actor=r["stage"],
                           detail={"quarantine_id": r["quarantine_id"], "stage": r["stage"], "reason": r["reason"],
                                   "event_kind": r["kind"]})
                for r in (rows[:limit] if limit is not None else rows)]

    def _runs(self, where: Filter, limit: int | None) -> list[AuditEntry]:
        cols = ["audit_id", "ts", "kind", "actor", "target", "summary", "detail"]
        rows = self.view.scan("audit", where=where, columns=cols).to_pylist()
        rows.sort(key=lambda r: r["ts"], reverse=True)
        out = []
        for r in rows[:limit] if limit is not None else rows:
            detail = orjson.loads(r["detail"]) if r["detail"] else {}
            tid = r["target"] if r["kind"] == "eligibility" else None
            out.append(AuditEntry(ts=r["ts"], tenant_id=self.tenant_id, kind=r["kind"], summary=r["summary"],
                                  trajectory_id=tid, actor=r["actor"],
                                  detail={"audit_id": r["audit_id"], "target": r["target"], **detail}))
        return out
