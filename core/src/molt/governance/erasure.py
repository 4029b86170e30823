"""Erasure: a tenant's data, or a data subject's (the right to be forgotten), physically gone.

``erase_subject`` nulls the payload *and its salt* of every event in every trajectory that holds an
event of the subject (``metadata.consent.subject_id``) — a trajectory carries the subject's words in
other events too (the assistant repeats the address) — and deletes the rewards, quarantined records
and memories and skills tied to those trajectories. The sealed envelopes stay, so each hash chain still
verifies: the chain covers a salted digest of the payload, not the payload (see ``molt.atdp.chain``).
Envelopes are hashed in clear, so they must never hold personal data beyond the subject id.

``erase_tenant`` deletes every row of the tenant from every table (audit records of erasure and
retention runs excepted: they are the proof) .

Both then rewrite the affected fragments, rebuild indices and drop all old LanceDB versions
(:mod:`molt.store.erase`), scrub the Recorder spools they are given (:mod:`molt.governance.spool`),
verify the remaining chains, and write an audit record (the subject as a SHA-256, never in clear).

Example::

    report = erase_subject(store, "customer-4711", tenant_id="acme", spool_dirs=["~/.molt/spool"])
    assert report.chains_failed == 0
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow.compute as pc

from molt.capture.sinks import SealedRow
from molt.errors import GovernanceError
from molt.governance.records import audit_row, ensure_governance_tables, write_audit
from molt.governance.spool import SpoolScrubReport, Verdict, scrub_spool, spool_trajectories
from molt.store.erase import purge, rewrite
from molt.store.filters import Filter
from molt.store.lance import Store
from molt.store.tables import open_all

__all__ = ["ErasureReport", "erase_subject", "erase_tenant", "subject_digest"]

_IN_CHUNK = 256
_PAYLOAD = ["payload", "payload_salt"]
#: The audit log's own record of erasures and retention runs outlives the tenant's other rows.
_AUDIT_RUNS = ("erasure", "retention")


def subject_digest(subject_id: str) -> str:
    """How the audit log names a subject: SHA-256 of the id, hex."""
    return hashlib.sha256(subject_id.encode()).hexdigest()


@dataclass
class ErasureReport:
    """What an erasure did (or, with ``dry_run``, would do)."""

    scope: str
    tenant_id: str | None
    subject_sha256: str | None = None
    trajectories: int = 0
    events: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    spool: list[SpoolScrubReport] = field(default_factory=list)
    chains_verified: int = 0
    chains_failed: int = 0
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    @property
    def summary(self) -> str:
        """One line for the audit log and the CLI."""
        what = "would erase" if self.dry_run else "erased"
        rows = ", ".join(f"{k} {v}" for k, v in sorted(self.rows.items()) if v) or "no rows"
        spool = sum(s.scrubbed for s in self.spool)
        return (f"{self.scope} erasure {what}: {self.trajectories} trajectories, {self.events} events; "
                f"{rows}; {spool} spool frames; chains {self.chains_verified} ok, {self.chains_failed} failed")


def _has(tbl: Any, column: str) -> bool:
    return column in tbl.schema.names


def erase_subject(store: Store, subject_id: str, *, tenant_id: str | None = None,
                  spool_dirs: Sequence[str | os.PathLike[str]] = (), actor: str = "operator",
                  scope: str = "trajectory", dry_run: bool = False) -> ErasureReport:
    """Erase a data subject's content (see the module docstring). ``tenant_id`` limits it to one
    tenant (required when a tenant admin asks); ``scope="events"`` erases only the events that name
    the subject rather than their whole trajectories."""
    # One function (~70 lines) because its order is the guarantee: find the subject's trajectories
    # (store and spool), scrub the spool, rewrite the tables, scrub again for a frame delivered
    # meanwhile, purge old versions, verify the chains, audit; split, a step could run out of turn.
    if not subject_id:
        raise GovernanceError("Give the subject id to erase (metadata.consent.subject_id).")
    if scope not in ("trajectory", "events"):
        raise GovernanceError(f"scope must be 'trajectory' or 'events', not {scope!r}.")
    ensure_governance_tables(store)
    tables = open_all(store)
    mine = Filter(tenant_id=tenant_id) if tenant_id else Filter()
    subj = Filter(subject_id=subject_id).where(**({"tenant_id": tenant_id} if tenant_id else {}))
    hits = tables["events"].search().where(str(subj)).select(["trajectory_id", "tenant_id"]).limit(None).to_arrow()
    found = set(hits.column("trajectory_id").to_pylist())
    tenant_set = {t for t in hits.column("tenant_id").to_pylist() if t} | ({tenant_id} if tenant_id else set())
    for d in spool_dirs:  # events of the subject not delivered yet: their trajectories count too
        for tid, t in spool_trajectories(d, subject_id, tenant_id):
            found.add(tid)
            tenant_set |= {t} if t else set()
    tids = sorted(found)
    tenants = sorted(tenant_set)
    report = ErasureReport(scope="subject", tenant_id=tenant_id, subject_sha256=subject_digest(subject_id),
                           trajectories=len(tids), dry_run=dry_run)
    tid_set = set(tids)
    ev_where = list(mine.chunks("trajectory_id", tids, _IN_CHUNK)) if scope == "trajectory" else [subj]
    quarantine_ids = _quarantined_of(tables["quarantine"], subject_id, tid_set, tenant_id)

    def decide(kind: bytes, f: dict[str, Any], row: SealedRow | None) -> Verdict:
        if tenant_id and f.get("tenant_id") not in (tenant_id, None):
            return "keep"
        if row is not None:
            hit = f.get("subject_id") == subject_id or (scope == "trajectory" and f.get("trajectory_id") in tid_set)
            return "null_payload" if hit else "keep"
        rec = f.get("record")
        named = isinstance(rec, str) and subject_id in rec
        return "tombstone" if f.get("trajectory_id") in tid_set or named else "keep"

    if dry_run:
        report.events = sum(tables["events"].count_rows(str(w.present("payload"))) for w in ev_where)
        report.rows = {"quarantine": len(quarantine_ids),
                       "rewards": sum(tables["rewards"].count_rows(str(w))
                                      for w in Filter().chunks("trajectory_id", tids, _IN_CHUNK))}
        return report

    report.spool = [scrub_spool(d, decide) for d in spool_dirs]
    report.events = sum(rewrite(store, "events", w, null_columns=_PAYLOAD) for w in ev_where)
    touched = {"events"}
    rows: dict[str, int] = {}
    for name, col in (("rewards", "trajectory_id"), ("memories", "source_trajectory_id"),
                      ("skills", "source_trajectory_id")):
        if name in tables and _has(tables[name], col) and tids:
            rows[name] = sum(rewrite(store, name, w) for w in mine.chunks(col, tids, _IN_CHUNK))
            touched.add(name)
    if quarantine_ids:
        rows["quarantine"] = sum(rewrite(store, "quarantine", w)
                                 for w in Filter().chunks("quarantine_id", quarantine_ids, _IN_CHUNK))
        touched.add("quarantine")
    report.rows = rows
    again = [scrub_spool(d, decide) for d in spool_dirs]  # a frame delivered while we erased
    for first, second in zip(report.spool, again, strict=True):
        first.nulled += second.nulled
        first.tombstoned += second.tombstoned
    purge(store, sorted(touched))
    for tid in tids:
        ok = store.verify(tid).ok
        report.chains_verified += ok
        report.chains_failed += not ok
    write_audit(store, [audit_row(tenant_id=t, kind="erasure", actor=actor, target=f"subject:{report.subject_sha256}",
                                  summary=report.summary, detail=report.as_dict()) for t in tenants or [None]])
    return report


def _quarantined_of(tbl: Any, subject_id: str, tids: set[str], tenant_id: str | None) -> list[str]:
    """Quarantine ids of records tied to the subject: on its trajectories, or naming it."""
    q = tbl.search()
    if tenant_id:
        q = q.where(str(Filter().either(Filter(tenant_id=tenant_id), Filter().absent("tenant_id"))))
    got = q.select(["quarantine_id", "trajectory_id", "record"]).limit(None).to_arrow()
    needle = subject_id.encode()
    out = []
    for qid, tid, rec in zip(got.column("quarantine_id").to_pylist(), got.column("trajectory_id").to_pylist(),
                             got.column("record").to_pylist(), strict=True):
        if tid in tids or (rec is not None and needle in rec):  # a record naming the subject goes too
            out.append(qid)
    return out


def erase_tenant(store: Store, tenant_id: str, *, spool_dirs: Sequence[str | os.PathLike[str]] = (),
                 actor: str = "operator", dry_run: bool = False) -> ErasureReport:
    """Delete every row of ``tenant_id`` from every table, physically (see the module docstring)."""
    if not tenant_id:
        raise GovernanceError("Give the tenant id to erase.")
    ensure_governance_tables(store)
    tables = open_all(store)
    theirs = Filter(tenant_id=tenant_id)
    tids = sorted(set(pc.unique(tables["events"].search().where(str(theirs)).select(["trajectory_id"])
                                .limit(None).to_arrow().column("trajectory_id")).to_pylist()))
    tid_set = set(tids)
    report = ErasureReport(scope="tenant", tenant_id=tenant_id, trajectories=len(tids), dry_run=dry_run)
    plan: list[tuple[str, Filter]] = []
    for name, tbl in sorted(tables.items()):
        if not _has(tbl, "tenant_id"):
            continue
        plan.append((name, theirs.other_than("kind", _AUDIT_RUNS) if name == "audit" else theirs))
    # Untagged rewards on the tenant's trajectories (a Recorder reward without tenant) go too.
    plan.extend(("rewards", w) for w in Filter().chunks("trajectory_id", tids, _IN_CHUNK))

    def decide(kind: bytes, f: dict[str, Any], row: SealedRow | None) -> Verdict:
        mine = f.get("tenant_id") == tenant_id or f.get("trajectory_id") in tid_set
        return "tombstone" if mine else "keep"

    if dry_run:
        for name, where in plan:
            report.rows[name] = report.rows.get(name, 0) + tables[name].count_rows(str(where))
        report.events = report.rows.get("events", 0)
        return report
    report.spool = [scrub_spool(d, decide) for d in spool_dirs]
    for name, where in plan:
        report.rows[name] = report.rows.get(name, 0) + rewrite(store, name, where)
    report.events = report.rows.get("events", 0)
    again = [scrub_spool(d, decide) for d in spool_dirs]
    for first, second in zip(report.spool, again, strict=True):
        first.tombstoned += second.tombstoned
    purge(store, sorted({name for name, _ in plan}))
    write_audit(store, [audit_row(tenant_id=tenant_id, kind="erasure", actor=actor, target=f"tenant:{tenant_id}",
                                  summary=report.summary, detail=report.as_dict())])
    return report
