"""The retention job (``molt retention run``): enforce each tenant's retention windows.

For every tenant in the store (and rows with no tenant, under the policy defaults):

- an event whose age exceeds its classification's window (``retention.days``), or whose recorded
  expiry (a shorter consent window, tagged at capture) has passed, loses its payload and salt
  (``action: null_payload`` — the envelope stays, so the chain still verifies) or its row
  (``action: delete``), together with its governance decision in the latter case;
- quarantined records older than ``retention.quarantine_days`` are deleted;
- expired event frames still sitting in the given Recorder spools are scrubbed.

The affected fragments are rewritten and old LanceDB versions dropped, so expired content is gone
from disk (see :mod:`molt.store.erase`). Each tenant's run is written to the audit log. Run it from
cron or a systemd timer, e.g. daily: ``molt retention run --operator``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow.compute as pc

from molt.atdp.models import Classification
from molt.capture.sinks import SealedRow
from molt.governance.policy import GovernancePolicy
from molt.governance.records import audit_row, ensure_governance_tables, write_audit
from molt.governance.spool import Verdict, scrub_spool
from molt.store.erase import purge, rewrite
from molt.store.filters import Filter
from molt.store.lance import Store
from molt.store.tables import open_all

__all__ = ["RetentionReport", "run_retention"]

_IN_CHUNK = 256


@dataclass
class RetentionReport:
    """One tenant's retention run (``tenant_id`` None: rows with no tenant)."""

    tenant_id: str | None
    expired: dict[str, int] = field(default_factory=dict)
    consent_expired: int = 0
    quarantine_deleted: int = 0
    spool_frames: int = 0
    action: str = "null_payload"
    dry_run: bool = False

    @property
    def events(self) -> int:
        """Events whose payload (or row) was removed."""
        return sum(self.expired.values()) + self.consent_expired

    @property
    def summary(self) -> str:
        """One line for the audit log and the CLI."""
        verb = "would expire" if self.dry_run else "expired"
        by = ", ".join(f"{k} {v}" for k, v in sorted(self.expired.items()) if v) or "none by class"
        return (f"retention {verb} {self.events} events ({by}; {self.consent_expired} by consent window; "
                f"{self.action}); {self.quarantine_deleted} quarantine records deleted; {self.spool_frames} spool "
                f"frames scrubbed")


def run_retention(store: Store, policy: GovernancePolicy, *, tenants: Sequence[str] | None = None,
                  now: datetime | None = None, spool_dirs: Sequence[str | os.PathLike[str]] = (),
                  actor: str = "retention job", dry_run: bool = False) -> list[RetentionReport]:
    """Enforce retention for ``tenants`` (default: every tenant in the store, plus untagged rows)."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    ensure_governance_tables(store)
    tables = open_all(store)
    targets: list[str | None] = _tenants_in(tables) if tenants is None else list(tenants)
    reports: list[RetentionReport] = []
    touched: set[str] = set()
    cutoffs: dict[str | None, dict[Classification, datetime]] = {}
    for tenant in targets:
        settings = policy.for_tenant(tenant if tenant is not None and policy.knows(tenant) else None).retention
        cutoffs[tenant] = {c: now - timedelta(days=d) for c, d in settings.days.items()}
        rep = _expire_tenant(store, tables, tenant, settings, cutoffs[tenant], now, dry_run)
        if rep.events or rep.quarantine_deleted:
            touched.update({"events", "quarantine"} | ({"governance"} if settings.action == "delete" else set()))
        reports.append(rep)
    if dry_run:
        return reports
    def decide(kind: bytes, f: dict[str, Any], row: SealedRow | None) -> Verdict:
        if row is None:
            return "keep"
        tenant = f.get("tenant_id")
        cut = cutoffs.get(tenant)
        if cut is None:
            return "keep"
        ann = f.get("annotations") or {}
        expires = ann.get("expires_at")
        ts = datetime.fromtimestamp(f["ts_us"] / 1e6, UTC)
        old = ts < cut[Classification(f.get("classification") or "internal")]
        if old or (expires and datetime.fromisoformat(expires.replace("Z", "+00:00")) < now):
            by_tenant[tenant] = by_tenant.get(tenant, 0) + 1
            return "null_payload"
        return "keep"

    by_tenant: dict[str | None, int] = {}
    for d in spool_dirs:
        scrub_spool(d, decide)
    for r in reports:
        r.spool_frames = by_tenant.get(r.tenant_id, 0)
    if touched:
        purge(store, sorted(touched))
    write_audit(store, [audit_row(tenant_id=r.tenant_id, kind="retention", actor=actor, target=None,
                                  summary=r.summary, detail={**asdict(r), "events": r.events,
                                                             "now": now.isoformat()})
                        for r in reports])
    return reports


def _tenants_in(tables: dict[str, Any]) -> list[str | None]:
    """Every tenant with events or quarantined records, then ``None`` for the untagged rows if any."""
    seen: set[str | None] = set()
    for name in ("events", "quarantine"):
        col = tables[name].search().select(["tenant_id"]).limit(None).to_arrow().column("tenant_id")
        seen.update(pc.unique(col).to_pylist())
    return sorted(t for t in seen if t is not None) + ([None] if None in seen else [])


def _expire_tenant(store: Store, tables: dict[str, Any], tenant: str | None, settings: Any,
                   cutoffs: dict[Classification, datetime], now: datetime, dry_run: bool) -> RetentionReport:
    """One tenant's events past their class's window or their consent's, and its old quarantine."""
    rep = RetentionReport(tenant_id=tenant, action=settings.action, dry_run=dry_run)
    scope = Filter(tenant_id=tenant) if tenant is not None else Filter().absent("tenant_id")

    def live(where: Filter) -> Filter:
        return where.present("payload") if settings.action == "null_payload" else where

    by_class = {c: Filter(classification=c.value).before("ts", cut) for c, cut in cutoffs.items()}
    for cls, pred in by_class.items():
        rep.expired[cls.value] = _apply(store, tables, live(scope & pred), settings.action, dry_run)
    # Shorter consent windows were tagged at capture as the decision's expires_at.
    gov = tables["governance"].search().where(str(scope.before("expires_at", now))).select(
        ["event_id"]).limit(None).to_arrow()
    ids = sorted(set(gov.column("event_id").to_pylist()))
    for chunk in scope.chunks("event_id", ids, _IN_CHUNK):
        rep.consent_expired += _apply(store, tables, live(chunk.none_of(*by_class.values())),
                                      settings.action, dry_run)
    q_where = scope.before("ts", now - timedelta(days=settings.quarantine_days))
    rep.quarantine_deleted = (tables["quarantine"].count_rows(str(q_where)) if dry_run
                              else rewrite(store, "quarantine", q_where))
    return rep


def _apply(store: Store, tables: dict[str, Any], where: Filter, action: str, dry_run: bool) -> int:
    if dry_run:
        return int(tables["events"].count_rows(str(where)))
    if action == "null_payload":
        return rewrite(store, "events", where, null_columns=["payload", "payload_salt"])
    got = tables["events"].search().where(str(where)).select(["event_id"]).limit(None).to_arrow()
    ids = got.column("event_id").to_pylist()
    n = rewrite(store, "events", where)
    for chunk in Filter().chunks("event_id", ids, _IN_CHUNK):
        rewrite(store, "governance", chunk)
    return n
