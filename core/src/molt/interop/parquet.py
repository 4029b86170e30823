"""Molt's own Parquet export, late rewards included.

``molt trajectories export FILE`` writes the events (sealed records, so chains verify after an
import) to ``FILE`` and the late rewards of the same trajectories to ``FILE``'s sibling
``<stem>.rewards.parquet`` (the rewards table's rows: the annotation as its canonical JSON in
``record``, with its ids, value, source, tenant and time). The two files are one export: the import
(:func:`import_parquet_export`) reads the rewards file when it is there.

Rewards are checked like events (:func:`molt.capture.importer.import_parquet`): every annotation must
parse, belong to the importing key's tenant, and point at a trajectory (and event) that the store holds
once the events are in; a problem refuses the whole import before anything is written. An annotation
already stored (same id) is a duplicate, so an import can be rerun.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from molt.atdp.validate import parse_reward
from molt.capture.importer import ParquetImportReport as ParquetReport
from molt.capture.importer import import_parquet
from molt.capture.recorder import DEFAULT_PIPELINE
from molt.capture.sinks import SinkBatch
from molt.errors import MoltError
from molt.store.filters import Filter, lance_where

__all__ = ["ParquetImport", "export_parquet", "import_parquet_export", "rewards_path"]

_SHOWN = 10


def rewards_path(path: str | Path) -> Path:
    """The rewards file that goes with the events file ``path``: ``<stem>.rewards.parquet`` beside it."""
    p = Path(path)
    return p.with_name(f"{p.stem}.rewards.parquet")


def export_parquet(reader: Any, path: str | Path, *, where: Filter | str | None = None,
                   progress: Any = None) -> tuple[int, int]:
    """Write the events (``reader.export_parquet``) and their trajectories' late rewards; returns
    ``(events, rewards)`` written. ``reader`` is a store or a tenant view."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from molt.store.schemas import REWARDS

    n = reader.export_parquet(path, where=where, progress=progress)
    tids = sorted(reader.trajectory_ids(where)) if where else None
    tables = []
    if tids is None:
        tables.append(_scan(reader, None))
    else:
        tables.extend(_scan(reader, chunk) for chunk in Filter().chunks("trajectory_id", tids))
    got = pa.concat_tables([t.select(REWARDS.names).cast(REWARDS) for t in tables]) if tables else REWARDS.empty_table()
    pq.write_table(got, str(rewards_path(path)))
    return n, got.num_rows


def _scan(reader: Any, where: Filter | str | None) -> Any:
    if hasattr(reader, "scan"):  # a tenant view: its own rewards only
        from molt.store.schemas import REWARDS

        return reader.scan("rewards", where=where, columns=REWARDS.names)
    q = reader.table("rewards").search()
    if sql := lance_where(where):
        q = q.where(sql)
    return q.limit(None).to_arrow()


@dataclass
class ParquetImport:
    """The events' report and the rewards imported or already stored."""

    events: ParquetReport
    rewards: int = 0
    reward_duplicates: int = 0


def import_parquet_export(store: Any, path: str | Path, *, tenant_id: str | None = None,
                          pipeline: Any = DEFAULT_PIPELINE) -> ParquetImport:
    """Import an export's events (:func:`~molt.capture.importer.import_parquet`) and its rewards file."""
    import pyarrow.parquet as pq

    rp = rewards_path(path)
    annotations = []
    problems: list[str] = []
    if rp.is_file():
        try:
            rows = pq.read_table(str(rp), columns=["record"]).column("record").to_pylist()
        except Exception as exc:
            raise MoltError(f"Nothing imported: {rp} is not a rewards export ({exc}).") from None
        for i, rec in enumerate(rows, 1):
            try:
                ann = parse_reward(rec if isinstance(rec, bytes | str) else orjson.dumps(rec))
            except Exception as exc:
                problems.append(f"{rp.name} row {i}: {exc}"[:500])
                continue
            if tenant_id is not None and ann.tenant_id not in (None, tenant_id):
                problems.append(f"{rp.name} row {i}: the reward belongs to tenant {ann.tenant_id!r}, not {tenant_id!r}")
                continue
            annotations.append(ann)
    if annotations:  # every reward must point at a trajectory of this export or one already stored
        try:
            in_file = set(pq.read_table(str(path), columns=["trajectory_id"]).column("trajectory_id").to_pylist())
        except Exception:
            in_file = set()  # import_parquet reports what is wrong with the events file
        for a in annotations:
            if a.trajectory_id in in_file:
                continue
            if store.chain_head(a.trajectory_id) is None:
                problems.append(f"reward {a.annotation_id}: trajectory {a.trajectory_id[:80]!r} is neither in the "
                                f"export nor in the store")
            elif tenant_id is not None and store.trajectory_tenant(a.trajectory_id) not in (None, tenant_id):
                problems.append(f"reward {a.annotation_id}: trajectory {a.trajectory_id[:80]!r} is another tenant's")
    if problems:
        raise MoltError(f"Nothing imported from {path}: {len(problems)} problem(s) in its rewards:\n  "
                        + "\n  ".join(problems[:_SHOWN]))
    events = import_parquet(store, path, tenant_id=tenant_id, pipeline=pipeline)
    out = ParquetImport(events=events)
    if not annotations:
        return out
    ids = [a.annotation_id for a in annotations]
    have = set()
    tbl = store.table("rewards")
    for where in Filter().chunks("annotation_id", ids):
        got = tbl.search().where(str(where)).select(["annotation_id"]).limit(None).to_arrow()
        have.update(got.column("annotation_id").to_pylist())
    new = [a for a in annotations if a.annotation_id not in have]
    store.write_batch(SinkBatch(rewards=[a.model_dump(mode="json") for a in new], redelivery=True))
    out.rewards, out.reward_duplicates = len(new), len(have)
    return out
