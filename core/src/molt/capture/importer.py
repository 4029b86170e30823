"""Import trajectories from a Parquet export (``molt trajectories export``) into a store.

The file is not trusted. Every row is checked before anything is written, and the import is all or
nothing:

- each trajectory's hash chain is verified again (payload digests, links, the envelope's own ids);
  a trajectory that the store already holds must be continued, not contradicted: rows already there
  must be byte-identical (they are skipped, so an import can be rerun), and new rows must link after
  the stored head;
- the index columns (tenant, agent, task, subject, …) are recomputed from the hashed envelope, never
  read from the file, so a file cannot put an event under another tenant by editing a column;
- a row over the record size limit, a malformed column or an envelope that does not parse is refused
  with its row number; ids are data, never used to build a path;
- with a tenant (a tenant key), every row must belong to that tenant.

Governance runs on the import as on capture (the default policy unless ``pipeline=`` names another,
or ``None`` turns it off): each new event goes through the pipeline, and its decision is stored with
it. Events are stored sealed as exported, so chains keep verifying; an event the pipeline would change
(it found PII to redact) or quarantine is stored with its payload erased (envelope and chain kept,
as :mod:`molt.governance.erasure` leaves them), and the redacted record goes to the quarantine with
the reason — nothing unredacted is stored, nothing is lost silently. An export of a governed store
imports unchanged. Late rewards are not part of the Parquet export and so not imported.

Example::

    report = import_parquet(store, "acme.parquet", tenant_id="acme")
    report.imported, report.duplicates
"""

from __future__ import annotations

import os
import stat
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from molt.atdp.chain import SealedEvent, unseal, verify_chain
from molt.atdp.models import PAYLOAD_FIELDS, Event
from molt.atdp.validate import MAX_RECORD_BYTES
from molt.capture.recorder import DEFAULT_PIPELINE, index_fields, resolve_pipeline
from molt.capture.sinks import SealedRow, SinkBatch
from molt.capture.tenancy import store_tenant
from molt.errors import MoltError

__all__ = ["ParquetImportReport", "import_parquet"]

_NEEDED = ("event_id", "trajectory_id", "seq", "envelope", "payload", "payload_salt", "chain")
_HEX = frozenset("0123456789abcdef")
#: Most problems listed in the error (the count says how many there were).
_SHOWN = 10


@dataclass
class ParquetImportReport:
    """What an import did: rows read, rows written, rows already in the store, trajectories."""

    rows: int = 0
    imported: int = 0
    duplicates: int = 0
    trajectories: int = 0
    #: imported with the payload erased: the pipeline redacted (or quarantined) it; the record is in quarantine
    erased: int = 0
    problems: list[str] = field(default_factory=list)


def _chain_parts(chain: Any) -> tuple[str, str, str] | None:
    """``(digest, prev_hash, hash)`` from the ``chain`` column, or None when it is malformed."""
    if not isinstance(chain, str) or len(chain) != 194 or chain[64] != ":" or chain[129] != ":":
        return None
    parts = chain[:64], chain[65:129], chain[130:]
    return parts if all(set(p) <= _HEX for p in parts) else None


def _open_rows(path: Path, batch_rows: int) -> Any:
    import pyarrow.parquet as pq

    try:
        st = path.stat()
    except OSError as exc:
        raise MoltError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    if not stat.S_ISREG(st.st_mode):
        raise MoltError(f"{path} is not a regular file; give the Parquet file `molt trajectories export` wrote.")
    try:
        pf = pq.ParquetFile(str(path))
    except Exception as exc:
        raise MoltError(f"{path} is not a Parquet file ({exc}).") from None
    missing = [c for c in _NEEDED if c not in pf.schema_arrow.names]
    if missing:
        raise MoltError(f"{path} lacks the columns {', '.join(missing)}; it is not a Molt trajectory export.")
    return pf.iter_batches(batch_size=batch_rows, columns=list(_NEEDED))


def import_parquet(store: Any, path: str | os.PathLike[str], *, tenant_id: str | None = None,
                   max_record_bytes: int = MAX_RECORD_BYTES, batch_rows: int = 4096,
                   pipeline: Any = DEFAULT_PIPELINE) -> ParquetImportReport:
    """Import the events of a Parquet trajectory export into ``store`` (see the module docstring).

    Args:
        store: the target :class:`~molt.store.Store` (the whole store; tenant scoping is ``tenant_id``).
        path: the Parquet file.
        tenant_id: when given, every row must belong to this tenant (a tenant key's import).
        max_record_bytes: the largest envelope + payload a row may have (the capture limit by default).
        batch_rows: rows read and written at a time.
        pipeline: the governance pipeline (``"default"``: the built-in policy; ``None``: off, events are
            stored exactly as exported).

    Returns the :class:`ParquetImportReport`. Raises :class:`~molt.errors.MoltError` listing the problems when
    any row is refused; nothing is written then.
    """
    if max_record_bytes <= 0 or batch_rows <= 0:
        raise ValueError("max_record_bytes and batch_rows must be positive.")
    report = ParquetImportReport()
    by_traj: dict[str, list[SealedEvent]] = defaultdict(list)
    problems = report.problems
    n = 0
    for rb in _open_rows(Path(path), batch_rows):
        for row in rb.to_pylist():
            n += 1
            where = f"row {n}"
            eid, tid, seq = row["event_id"], row["trajectory_id"], row["seq"]
            env, pay, salt = row["envelope"], row["payload"], row["payload_salt"]
            if not (isinstance(eid, str) and eid and isinstance(tid, str) and tid and isinstance(seq, int)
                    and isinstance(env, bytes)):
                problems.append(f"{where}: event_id, trajectory_id, seq or envelope is missing or malformed")
                continue
            where = f"row {n} (event {eid[:80]!r})"
            size = len(env) + len(pay or b"")
            if size > max_record_bytes:
                problems.append(f"{where}: {size:,} bytes, over the {max_record_bytes:,}-byte record limit")
                continue
            parts = _chain_parts(row["chain"])
            if parts is None:
                problems.append(f"{where}: the chain column is malformed")
                continue
            if (pay is None) != (salt is None):
                problems.append(f"{where}: payload and payload_salt must both be present or both erased")
                continue
            by_traj[tid].append(SealedEvent(event_id=eid, trajectory_id=tid, seq=seq, envelope=env, payload=pay,
                                            salt=salt, digest=parts[0], prev_hash=parts[1], hash=parts[2]))
    report.rows = n
    new_rows: list[SealedRow] = []
    new_events: list[Event] = []
    # the ownership rule every ingest path uses (molt.capture.tenancy): a tenant's import never
    # extends a trajectory that holds another tenant's events (sealed chains cannot be renamed, so the
    # trajectory is refused rather than namespaced)
    tenant_of = store_tenant(store) if tenant_id is not None else None
    for tid, rows in by_traj.items():
        if tenant_of is not None and (owner := tenant_of(tid)) is not None and owner != tenant_id:
            problems.append(f"trajectory {tid[:80]!r} holds another tenant's events in this store; "
                            f"a key of tenant {tenant_id!r} cannot import into it")
            continue
        stored = {s.event_id: s for s in store.sealed_events(tid)}
        fresh = []
        for r in rows:
            have = stored.get(r.event_id)
            if have is None:
                fresh.append(r)
            elif have.hash != r.hash or have.seq != r.seq:
                problems.append(f"event {r.event_id[:80]!r} of trajectory {tid[:80]!r} is already stored "
                                "with other content")
            else:
                report.duplicates += 1
        check = verify_chain(tid, [*stored.values(), *fresh])
        if not check.ok:
            problems.extend(f"trajectory {tid[:80]!r}: {p}" for p in check.problems[:3])
            continue
        for r in fresh:
            try:
                event = unseal(r.envelope, r.payload)
            except Exception as exc:
                problems.append(f"event {r.event_id[:80]!r}: does not parse as an ATDP event ({exc})"[:500])
                continue
            if tenant_id is not None and event.metadata.tenant_id != tenant_id:
                problems.append(f"event {r.event_id[:80]!r} belongs to tenant {event.metadata.tenant_id!r}, "
                                f"not {tenant_id!r}")
                continue
            new_rows.append(SealedRow(x=index_fields(event, r.seq), envelope=r.envelope, payload=r.payload,
                                      salt=r.salt, digest=r.digest, prev_hash=r.prev_hash, hash=r.hash))
            new_events.append(event)
        report.trajectories += 1
    if problems:
        more = f" (and {len(problems) - _SHOWN} more)" if len(problems) > _SHOWN else ""
        raise MoltError(f"Nothing imported from {path}: {len(problems)} problem(s){more}:\n  "
                        + "\n  ".join(problems[:_SHOWN]))
    hook = resolve_pipeline(pipeline)
    quarantine: list[dict[str, Any]] = []
    if hook is not None:
        new_rows = [_govern(hook, row, ev, quarantine, report) for row, ev in zip(new_rows, new_events, strict=True)]
    sink_for = getattr(hook, "sink_for", None)
    sink = sink_for(store) if sink_for is not None else store  # decisions are stored with their events
    for i in range(0, max(len(new_rows), len(quarantine)), batch_rows):
        sink.write_batch(SinkBatch(events=new_rows[i:i + batch_rows], quarantine=quarantine[i:i + batch_rows],
                                   redelivery=True))
    report.imported = len(new_rows)
    return report


def _govern(hook: Any, row: SealedRow, event: Event, quarantine: list[dict[str, Any]],
            report: ParquetImportReport) -> SealedRow:
    """``row`` with the pipeline's decision; its payload erased when the pipeline would change or reject it."""
    res = hook.process(event)
    if res.event is not None and all(getattr(res.event, f) == getattr(event, f) for f in PAYLOAD_FIELDS):
        return row._replace(x={**row.x, "annotations": res.annotations})
    report.erased += 1
    if res.event is not None:
        reason, stage = "redacted on import: the sealed payload held what the policy redacts", "import"
        record = res.event.model_dump_json().encode()
    else:
        reason, stage, record = res.reason or "rejected by the pipeline", res.stage or "import", res.record
    quarantine.append({"stage": stage, "reason": f"{reason}; stored with its payload erased"[:2000],
                       "ts_us": int(time.time() * 1_000_000), "event_id": event.event_id,
                       "trajectory_id": event.trajectory_id, "tenant_id": event.metadata.tenant_id,
                       "kind": event.kind.value, **({"record": record.decode("utf-8", "replace")} if record else {})})
    x = {**row.x, "annotations": res.annotations} if res.event is not None else row.x  # what was redacted
    return row._replace(x=x, payload=None, salt=None)
