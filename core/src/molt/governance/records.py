"""The governance tables in the store: one decision row per event, and an audit log of runs.

``governance`` (one row per governed event, written with the event by :class:`GovernedSink`)::

    event_id, trajectory_id, tenant_id, subject_id, ts, decided_at, policy, stages,
    classification, classification_in, escalated_by, eligible, reasons, excluded_fields,
    redaction_policy, redacted_types (JSON counts), redacted_fields, token_trace_dropped,
    retention_class, retention_days, expires_at, decision (the full Decision as JSON)

``audit`` (one row per governance run or verdict that is not a per-event decision: erasure,
retention, trajectory-level eligibility, policy loads)::

    audit_id, tenant_id, ts, kind, actor, target, summary, detail (JSON)

Neither ever holds a redacted value or payload content: counts, types, field paths, ids and reasons.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import orjson
import pyarrow as pa

from molt.atdp.ids import new_id
from molt.governance.decision import Decision
from molt.store.lance import Store
from molt.store.tables import append, ensure_table

__all__ = ["AUDIT", "GOVERNANCE", "audit_row", "decision_rows", "ensure_governance_tables", "write_audit"]

_TS = pa.timestamp("us", tz="UTC")
_STRS = pa.list_(pa.string())

GOVERNANCE = pa.schema([
    pa.field("event_id", pa.string(), nullable=False),
    pa.field("trajectory_id", pa.string(), nullable=False),
    pa.field("tenant_id", pa.string()),
    pa.field("subject_id", pa.string()),
    pa.field("ts", _TS, nullable=False),
    pa.field("decided_at", _TS, nullable=False),
    pa.field("policy", pa.string(), nullable=False),
    pa.field("stages", _STRS),
    pa.field("classification", pa.string()),
    pa.field("classification_in", pa.string()),
    pa.field("escalated_by", _STRS),
    pa.field("eligible", pa.bool_()),
    pa.field("reasons", _STRS),
    pa.field("excluded_fields", _STRS),
    pa.field("redaction_policy", pa.string()),
    pa.field("redacted_types", pa.string()),
    pa.field("redacted_fields", _STRS),
    pa.field("token_trace_dropped", pa.bool_()),
    pa.field("retention_class", pa.string()),
    pa.field("retention_days", pa.int32()),
    pa.field("expires_at", _TS),
    pa.field("decision", pa.binary(), nullable=False),
])

AUDIT = pa.schema([
    pa.field("audit_id", pa.string(), nullable=False),
    pa.field("tenant_id", pa.string()),
    pa.field("ts", _TS, nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("actor", pa.string()),
    pa.field("target", pa.string()),
    pa.field("summary", pa.string(), nullable=False),
    pa.field("detail", pa.binary()),
])


def ensure_governance_tables(store: Store) -> None:
    """Create (or open) the ``governance`` and ``audit`` tables in ``store``."""
    ensure_table(store, "governance", GOVERNANCE)
    ensure_table(store, "audit", AUDIT)


def _us(dt: datetime | str | None) -> int | None:
    if dt is None:
        return None
    if isinstance(dt, str):
        dt = datetime.fromisoformat(dt.replace("Z", "+00:00"))
    return int(dt.timestamp() * 1_000_000)


def decision_rows(rows: list[tuple[dict[str, Any], dict[str, Any]]]) -> pa.Table:
    """The ``governance`` table rows for ``(index columns, decision annotations)`` pairs."""
    cols: dict[str, list[Any]] = {f.name: [] for f in GOVERNANCE}
    for x, ann in rows:
        d = Decision.from_annotations(ann)
        red = d.redaction
        values = {
            "event_id": x["event_id"], "trajectory_id": x["trajectory_id"], "tenant_id": x.get("tenant_id"),
            "subject_id": x.get("subject_id"), "ts": x["ts_us"], "decided_at": _us(d.decided_at),
            "policy": d.policy, "stages": d.stages, "classification": d.classification.value,
            "classification_in": d.classification_in.value, "escalated_by": d.escalated_by,
            "eligible": d.eligible, "reasons": d.reasons, "excluded_fields": d.excluded_fields,
            "redaction_policy": None if red is None else (red.policy if red.enabled else "disabled"),
            "redacted_types": None if red is None else orjson.dumps(red.counts, option=orjson.OPT_SORT_KEYS).decode(),
            "redacted_fields": None if red is None else red.fields,
            "token_trace_dropped": None if red is None else red.token_trace_dropped,
            "retention_class": d.retention_class, "retention_days": d.retention_days,
            "expires_at": _us(d.expires_at), "decision": orjson.dumps(ann, option=orjson.OPT_SORT_KEYS),
        }
        for k, v in values.items():
            cols[k].append(v)
    arrays = {}
    for f in GOVERNANCE:
        if pa.types.is_timestamp(f.type):
            arrays[f.name] = pa.array(cols[f.name], pa.int64()).cast(_TS)
        else:
            arrays[f.name] = pa.array(cols[f.name], f.type)
    return pa.Table.from_pydict(arrays, schema=GOVERNANCE)


def audit_row(*, tenant_id: str | None, kind: str, summary: str, actor: str | None = None,
              target: str | None = None, detail: dict[str, Any] | None = None) -> dict[str, Any]:
    """One ``audit`` row as a dict (see :func:`write_audit`)."""
    return {"audit_id": new_id(), "tenant_id": tenant_id, "ts": int(time.time() * 1_000_000), "kind": kind,
            "actor": actor, "target": target, "summary": summary,
            "detail": None if detail is None else orjson.dumps(detail, option=orjson.OPT_SORT_KEYS, default=str)}


def write_audit(store: Store, rows: list[dict[str, Any]]) -> None:
    """Append audit rows (one LanceDB append)."""
    if not rows:
        return
    ensure_governance_tables(store)
    data = pa.Table.from_pydict({
        "audit_id": [r["audit_id"] for r in rows],
        "tenant_id": [r["tenant_id"] for r in rows],
        "ts": pa.array([r["ts"] for r in rows], pa.int64()).cast(_TS),
        "kind": [r["kind"] for r in rows],
        "actor": [r["actor"] for r in rows],
        "target": [r["target"] for r in rows],
        "summary": [r["summary"] for r in rows],
        "detail": pa.array([r["detail"] for r in rows], pa.binary()),
    }, schema=AUDIT)
    append(store, "audit", data)
