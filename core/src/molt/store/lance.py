"""The LanceDB store: events, late rewards, quarantine (and placeholders for memories, skills and
policy versions), with batched appends, scheduled compaction and the read API.

The store URI is a local directory by default; object-storage URIs (``s3://bucket/prefix``) work the
same, with credentials and endpoint in ``storage_options`` (LanceDB's object-store options, e.g.
``{"aws_endpoint": "http://127.0.0.1:9000", "allow_http": "true"}``).

Example::

    from molt.store import Store

    store = Store.open("~/.molt/store")
    traj = store.trajectory("01936f1e-…")       # events in causal order, rewards joined
    for s in store.trajectories(tenant="acme", limit=20):
        print(s.trajectory_id, s.events, s.outcome)
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

import lancedb
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from molt.atdp.chain import ChainReport, SealedEvent, canonical, unseal, verify_chain
from molt.atdp.ids import new_id
from molt.atdp.models import RewardAnnotation
from molt.atdp.validate import MAX_RECORD_BYTES, check_size
from molt.errors import NotFound, StoreError
from molt.store.filters import Filter, lance_where
from molt.store.query import SUMMARY_COLUMNS, Trajectory, TrajectorySummary, check_outcome, select_summaries
from molt.store.schemas import EVENTS, INDEX_COLUMNS, QUARANTINE, REWARDS, TABLES

__all__ = ["FOLLOWER_CACHES", "FOLLOWER_INDEX_CACHE_BYTES", "FOLLOWER_METADATA_CACHE_BYTES", "Store"]

log = logging.getLogger("molt.store")

_SEALED_COLUMNS = ["event_id", "seq", "envelope", "payload", "payload_salt", "chain"]

#: Metadata cache bound for a long-lived process whose tables another process keeps appending to
#: (``molt serve``'s read side, the capture process). LanceDB keeps the metadata of every version a
#: handle has opened until the bound, and a reader that follows a busy writer opens a new version on
#: almost every read (tens of KB each), so its memory climbs, slowly, until it reaches the bound.
#: Superseded versions are never read again; the current one's manifest and file metadata fit in a
#: few MiB at millions of rows.
FOLLOWER_METADATA_CACHE_BYTES = 4 << 20

#: Index cache bound for the same processes. Every compaction by the writer folds new rows into the
#: indices, which gives each index a new version; the pages a follower cached of the old one are
#: never read again but stay until the bound (256 MiB by default). Reads by id need a few pages per
#: index at a time. The soak that sized both bounds: bench/reliability/README.md.
FOLLOWER_INDEX_CACHE_BYTES = 16 << 20

#: ``Store.open(uri, **FOLLOWER_CACHES)``: both bounds, for a long-lived process that reads tables
#: another process keeps appending to.
FOLLOWER_CACHES: Mapping[str, int] = MappingProxyType({"index_cache_bytes": FOLLOWER_INDEX_CACHE_BYTES,
                                                       "metadata_cache_bytes": FOLLOWER_METADATA_CACHE_BYTES})


class Store:
    """Molt's LanceDB-backed store. Thread-safe for one writer thread plus any number of readers.

    Args:
        uri: a local directory or an object-store URI.
        storage_options: object-store options passed to LanceDB.
        compact_every: run compaction after this many appends (default 64; 1 – 10,000).
        compact_interval_s: …or after this many seconds with appends pending (default 60).
        keep_versions_s: LanceDB versions older than this are cleaned up at compaction (default
            3,600 s; 0 keeps only the latest, which the erasure job uses).
        fragment_rows: compaction merges small fragments into fragments of about this many rows
            (default 32,768; at least 1,024) and leaves fragments of that size alone, so each run
            rewrites at most about this many rows however large the table is. LanceDB's
            ``optimize()`` merges towards 1M rows, so until a table has that many every run would
            rewrite all of it (quadratic ingest cost, and a writer's memory growing with the table).
        auto_compact: compact on a background thread (default True); otherwise call :meth:`compact`.
        index_cache_bytes / metadata_cache_bytes: bounds of LanceDB's in-process caches (default
            256 MiB / 128 MiB). LanceDB's own defaults are 6 GiB and 1 GiB, and the metadata cache fills
            with the metadata of every appended version (tens of KB each), superseded ones included,
            so a long-running writer grows until it reaches the bound. A long-lived process that
            follows another's appends needs far less (:data:`FOLLOWER_CACHES`, 16 MiB / 4 MiB); the
            gateway's capture process uses 4 MiB / 4 MiB.
        read_consistency_s: how stale a read may be with respect to what *other* handles wrote (other
            processes: ``molt serve``'s capture process, a trainer, the CLI); default 1 s. LanceDB's own
            default never checks, so a long-lived handle — the control plane's, the console's — would
            keep reading the version it opened. 0 checks on every read, which lists the table's
            versions: with an hour of versions kept that costs more than the query itself.
    """

    def __init__(
        self,
        uri: str | os.PathLike[str],
        *,
        storage_options: dict[str, str] | None = None,
        compact_every: int = 64,
        compact_interval_s: float = 60.0,
        keep_versions_s: float = 3600.0,
        fragment_rows: int = 32_768,
        auto_compact: bool = True,
        index_cache_bytes: int = 256 << 20,
        metadata_cache_bytes: int = 128 << 20,
        read_consistency_s: float | None = None,
    ):
        if not 1 <= compact_every <= 10_000:
            raise ValueError(f"compact_every must be between 1 and 10,000, got {compact_every}.")
        if fragment_rows < 1024:
            raise ValueError(f"fragment_rows must be at least 1,024, got {fragment_rows}.")
        self.uri = str(uri)
        is_remote = "://" in self.uri and not self.uri.startswith("file://")
        if read_consistency_s is None:
            read_consistency_s = 1.0
        if read_consistency_s < 0:
            raise ValueError(f"read_consistency_s must be ≥ 0, got {read_consistency_s}.")
        if not is_remote:
            self.uri = str(Path(self.uri).expanduser())
            Path(self.uri).mkdir(parents=True, exist_ok=True)
        try:
            session = lancedb.Session(index_cache_size_bytes=index_cache_bytes,
                                      metadata_cache_size_bytes=metadata_cache_bytes)
            self._session = session
            self._db = lancedb.connect(self.uri, storage_options=storage_options or None, session=session,
                                       read_consistency_interval=timedelta(seconds=read_consistency_s))
            existing = set(self._db.list_tables().tables)
            self._tables = {}
            for name, schema in TABLES.items():
                if name in existing:
                    self._tables[name] = self._db.open_table(name)
                else:
                    self._tables[name] = self._db.create_table(name, schema=schema, exist_ok=True)
        except Exception as exc:
            raise StoreError(f"Cannot open the store at {self.uri!r}: {exc}. Check the path or the "
                             f"object-store endpoint and credentials.") from exc
        self.compact_every = compact_every
        self.compact_interval_s = compact_interval_s
        self.keep_versions_s = keep_versions_s
        self.fragment_rows = fragment_rows
        self._index_cache_bytes = index_cache_bytes
        self._metadata_cache_bytes = metadata_cache_bytes
        self._write_lock = threading.Lock()
        self._appends_since_compact = 0
        self._last_compact = time.monotonic()
        self._indexed: set[tuple[str, str]] = set()
        self._stop = threading.Event()
        self._compact_wake = threading.Event()
        self._compactor: threading.Thread | None = None
        if auto_compact:
            self._compactor = threading.Thread(target=self._compact_loop, name="molt-compact", daemon=True)
            self._compactor.start()

    @classmethod
    def open(cls, uri: str | os.PathLike[str] | None = None, **kwargs: Any) -> Store:
        """Open (or create) the store at ``uri`` (default ``$MOLT_HOME/store``)."""
        if uri is None:
            uri = Path(os.environ.get("MOLT_HOME", "~/.molt")).expanduser() / "store"
        return cls(uri, **kwargs)

    def table(self, name: str) -> Any:
        """The LanceDB table ``name`` (events, rewards, quarantine, memories, skills, policy_versions)."""
        try:
            tbl = self._tables[name]
        except KeyError:
            raise StoreError(f"No table {name!r}; tables: {', '.join(sorted(self._tables))}.") from None
        return tbl

    # ------------------------------------------------------------------ seams for the store package and its users

    @property
    def write_lock(self) -> threading.Lock:
        """The lock this store holds around every append, table registration and compaction. Code that
        writes one of the store's tables through LanceDB directly (memories, erasure) holds it too, so
        its write never interleaves with the store's own in this process."""
        return self._write_lock

    def ensure_table(self, name: str, schema: pa.Schema) -> Any:
        """Open (or create) table ``name`` with ``schema`` and register it, so that compaction, version
        cleanup, erasure and the tenant-scoped read path cover it like a core table. It must have a
        ``tenant_id`` column: every table is read per tenant."""
        if "tenant_id" not in schema.names:
            raise StoreError(f"Table {name!r} needs a tenant_id column; every table is read per tenant.")
        existing = self._tables.get(name)
        if existing is not None:
            return existing
        with self._write_lock:  # compaction iterates the registry under this lock
            if name in self._tables:
                return self._tables[name]
            try:
                if name in set(self._db.list_tables().tables):
                    tbl = self._db.open_table(name)
                else:
                    tbl = self._db.create_table(name, schema=schema, exist_ok=True)
            except Exception as exc:
                raise StoreError(f"Cannot open or create table {name!r} in {self.uri}: {exc}.") from exc
            self._tables[name] = tbl
            return tbl

    def open_tables(self) -> dict[str, Any]:
        """Every table in the store's database, registered (tables another process or package created
        included): ``{name: table}``."""
        with self._write_lock:
            for name in self._db.list_tables().tables:
                if name not in self._tables:
                    self._tables[name] = self._db.open_table(name)
            return dict(self._tables)

    def table_at(self, name: str, version: int) -> Any:
        """A new handle on table ``name`` checked out at an old ``version`` (time travel; the store's
        own handle stays on the latest). Raises :class:`StoreError` if that version is gone."""
        try:
            handle = self._db.open_table(name)
            handle.checkout(int(version))
        except Exception as exc:
            raise StoreError(f"Version {version} of table {name!r} cannot be read ({exc}); it may have been "
                             f"cleaned up.") from exc
        return handle

    def index_dropped(self, name: str, column: str) -> None:
        """Tell the store that the index of table ``name`` on ``column`` is gone (erasure drops indices
        that may hold erased values), so the next compaction creates it again."""
        self._indexed.discard((name, column))

    # ------------------------------------------------------------------ writes (the Sink protocol)

    def write_batch(self, batch: Any) -> None:
        """Append a :class:`~molt.capture.SinkBatch` (deduplicating by id when it is a redelivery)."""
        with self._write_lock:
            if batch.events:
                # Clustered by trajectory: a read by id then takes a few contiguous runs of rows instead
                # of rows scattered over the batch.
                events = _events_table(batch.events).sort_by([("trajectory_id", "ascending"), ("seq", "ascending")])
                self._append("events", events, "event_id", batch.redelivery)
            if batch.rewards:
                self._append("rewards", _rewards_table(batch.rewards), "annotation_id", batch.redelivery)
            if batch.quarantine:
                self._append("quarantine", _quarantine_table(batch.quarantine), None, False)

    def _append(self, name: str, data: pa.Table, id_col: str | None, dedupe: bool) -> None:
        if id_col is not None:
            # Within-batch duplicates (a retried record) keep their first copy.
            if pc.count_distinct(data.column(id_col)).as_py() != data.num_rows:  # rare: no Python list per batch
                ids = data.column(id_col).to_pylist()
                seen: set[str] = set()
                keep = [not (i in seen or seen.add(i)) for i in ids]  # type: ignore[func-returns-value]
                data = data.filter(pa.array(keep))
            if dedupe:
                present = self._existing_ids(name, id_col, data.column(id_col).to_pylist())
                if present:
                    data = data.filter(pc.invert(pc.is_in(data.column(id_col), pa.array(list(present)))))
        if data.num_rows == 0:
            return
        try:
            self.table(name).add(data)
        except Exception as exc:
            raise StoreError(f"Appending {data.num_rows} rows to {name!r} failed: {exc}.") from exc
        self._appends_since_compact += 1
        if self._appends_since_compact >= self.compact_every:
            self._compact_wake.set()

    def _where_in(self, name: str, column: str, values: Sequence[str], columns: list[str]) -> Iterator[pa.Table]:
        """Rows whose ``column`` is one of ``values``, in ``IN (…)`` queries of bounded size."""
        for where in Filter().chunks(column, values):
            yield self._where(name, where, columns)

    def _existing_ids(self, name: str, id_col: str, ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for got in self._where_in(name, id_col, ids, [id_col]):
            found.update(got.column(id_col).to_pylist())
        return found

    def append_rewards(self, annotations: Iterable[RewardAnnotation]) -> int:
        """Append late reward annotations directly (the CLI path; agents go through the Recorder).

        Every annotation must point at a trajectory (and event, if given) that is in the store."""
        rows = [a.model_dump(mode="json") for a in annotations]
        for r in rows:
            if not self._has_trajectory(r["trajectory_id"]):
                raise NotFound(f"No trajectory {r['trajectory_id']} in the store; a reward must point "
                               f"at a stored trajectory.", trajectory_id=r["trajectory_id"])
            if r.get("event_id") and not self._existing_ids("events", "event_id", [r["event_id"]]):
                raise NotFound(f"No event {r['event_id']} in trajectory {r['trajectory_id']}.",
                               trajectory_id=r["trajectory_id"], event_id=r["event_id"])
        with self._write_lock:
            self._append("rewards", _rewards_table(rows), "annotation_id", True)
        return len(rows)

    def quarantine(self, reason: str, *, stage: str, record: bytes | None = None,
                   event_id: str | None = None, trajectory_id: str | None = None,
                   tenant_id: str | None = None, kind: str | None = None) -> str:
        """Put a record in quarantine with the reason; returns the quarantine id."""
        qid = new_id()
        row = {"quarantine_id": qid, "event_id": event_id, "trajectory_id": trajectory_id,
               "tenant_id": tenant_id, "kind": kind, "stage": stage, "reason": reason,
               "ts_us": int(time.time() * 1e6), "record": record}
        with self._write_lock:
            self._append("quarantine", _quarantine_table([row]), None, False)
        return qid

    # ------------------------------------------------------------------ reads

    def chain_head(self, trajectory_id: str) -> tuple[int, str] | None:
        """``(seq, hash)`` of the last stored event of a trajectory, or ``None``."""
        return self.chain_heads([trajectory_id]).get(trajectory_id)

    def chain_heads(self, trajectory_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        """``{trajectory_id: (seq, hash)}`` of the last stored event, for those that have events."""
        heads: dict[str, tuple[int, str]] = {}
        for got in self._where_in("events", "trajectory_id", trajectory_ids, ["trajectory_id", "seq", "chain"]):
            for tid, seq, chain in zip(got.column("trajectory_id").to_pylist(), got.column("seq").to_pylist(),
                                       got.column("chain").to_pylist(), strict=True):
                if tid not in heads or seq > heads[tid][0]:
                    heads[tid] = (seq, chain[130:])
        return heads

    def trajectory_tenant(self, trajectory_id: str) -> str | None:
        """The tenant a trajectory belongs to (``None`` if unknown or untenanted)."""
        got = self._where("events", Filter(trajectory_id=trajectory_id), ["tenant_id"])
        tenants = {t for t in got.column("tenant_id").to_pylist() if t is not None}
        return next(iter(tenants)) if len(tenants) == 1 else None

    def _has_trajectory(self, trajectory_id: str) -> bool:
        return self.table("events").count_rows(str(Filter(trajectory_id=trajectory_id))) > 0

    def rows(self, name: str, where: Filter | None = None, columns: list[str] | None = None) -> pa.Table:
        """The rows of table ``name`` under ``where`` (all of them without one), ``columns`` only when given:
        how code outside the store reads a table by a typed :class:`Filter`. A failed read is a
        :class:`~molt.errors.StoreError` naming the table."""
        return self._where(name, where, columns)

    def _where(self, name: str, where: Filter | str | None, columns: list[str] | None = None) -> pa.Table:
        q = self.table(name).search()
        if sql := lance_where(where):
            q = q.where(sql)
        if columns:
            q = q.select(columns)
        try:
            return q.limit(None).to_arrow()
        except Exception as exc:
            raise StoreError(f"Reading {name!r} failed: {exc}.") from exc

    def sealed_events(self, trajectory_id: str) -> list[SealedEvent]:
        """A trajectory's stored records, in ``seq`` order, exactly as sealed."""
        got = self._where("events", Filter(trajectory_id=trajectory_id), _SEALED_COLUMNS)
        rows = sorted(got.to_pylist(), key=lambda r: r["seq"])
        return [
            SealedEvent(event_id=r["event_id"], trajectory_id=trajectory_id, seq=r["seq"],
                        envelope=r["envelope"], payload=r["payload"], salt=r["payload_salt"],
                        digest=r["chain"][:64], prev_hash=r["chain"][65:129], hash=r["chain"][130:])
            for r in rows
        ]

    def rewards(self, trajectory_id: str) -> list[RewardAnnotation]:
        """Late rewards of a trajectory, oldest first."""
        got = self._where("rewards", Filter(trajectory_id=trajectory_id), ["record", "created_at"])
        rows = sorted(got.to_pylist(), key=lambda r: r["created_at"])
        return [RewardAnnotation.model_validate(orjson.loads(r["record"])) for r in rows]

    def trajectory(self, trajectory_id: str) -> Trajectory:
        """A trajectory's events in causal order (by ``seq``) with late rewards joined."""
        sealed = self.sealed_events(trajectory_id)
        if not sealed:
            raise NotFound(f"No trajectory {trajectory_id} in the store.", trajectory_id=trajectory_id)
        events = [unseal(s.envelope, s.payload) for s in sealed]
        return Trajectory(trajectory_id=trajectory_id, events=events, rewards=self.rewards(trajectory_id))

    def verify(self, trajectory_id: str) -> ChainReport:
        """Verify a trajectory's hash chain."""
        return verify_chain(trajectory_id, self.sealed_events(trajectory_id))

    def trajectory_ids(self, where: Filter | str | None = None) -> list[str]:
        """Distinct trajectory ids (optionally under a filter on the events table)."""
        got = self._where("events", where, ["trajectory_id"])
        return pc.unique(got.column("trajectory_id")).to_pylist()

    def trajectories(
        self,
        *,
        tenant: str | None = None,
        agent: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        outcome: str | None = None,
        limit: int | None = 100,
    ) -> list[TrajectorySummary]:
        """Trajectory summaries, newest first, filtered by tenant, agent, time and outcome.

        ``outcome`` is one of :data:`molt.store.query.OUTCOMES`; the filter and order are
        :func:`molt.store.query.select_summaries`.
        """
        check_outcome(outcome)
        events = self._where("events", Filter.given(tenant_id=tenant, agent_id=agent), list(SUMMARY_COLUMNS))
        if events.num_rows == 0:
            return []
        rewards = self._where("rewards", None, ["trajectory_id", "value"])
        if rewards.num_rows:
            rewards = rewards.filter(pc.is_in(rewards.column("trajectory_id"),
                                              pc.unique(events.column("trajectory_id"))))
        return select_summaries(events, rewards, since=since, until=until, outcome=outcome, limit=limit)

    def count(self, name: str = "events", where: Filter | str | None = None) -> int:
        """Rows in a table (optionally under a filter)."""
        return int(self.table(name).count_rows(lance_where(where)))

    def iter_events(self, where: Filter | str | None = None, batch_rows: int = 8192) -> Iterator[pa.RecordBatch]:
        """Stream event rows in Arrow record batches (for exports and scans)."""
        q = self.table("events").search()
        if sql := lance_where(where):
            q = q.where(sql)
        yield from q.limit(None).to_batches(batch_rows)

    def export_parquet(self, path: str | os.PathLike[str], *, where: Filter | str | None = None,
                       progress: Any = None) -> int:
        """Write the events (all columns, sealed bytes included) to a Parquet file; returns rows."""
        import pyarrow.parquet as pq

        total = 0
        writer = None
        try:
            for rb in self.iter_events(where):
                if writer is None:
                    writer = pq.ParquetWriter(str(path), rb.schema)
                writer.write_batch(rb)
                total += rb.num_rows
                if progress is not None:
                    progress(rb.num_rows)
            if writer is None:
                pq.write_table(EVENTS.empty_table(), str(path))
        finally:
            if writer is not None:
                writer.close()
        return total

    # ------------------------------------------------------------------ maintenance

    def compact(self, *, keep_versions_s: float | None = None) -> dict[str, Any]:
        """Compact fragments, update indices and clean up old versions of every table."""
        keep = self.keep_versions_s if keep_versions_s is None else keep_versions_s
        stats: dict[str, Any] = {}
        with self._write_lock:
            self._appends_since_compact = 0
            self._last_compact = time.monotonic()
            for name, tbl in self._tables.items():
                if tbl.count_rows() == 0:
                    continue
                self._ensure_indices(name, tbl)
                stats[name] = self._optimize(tbl, keep)
        return stats

    def _optimize(self, tbl: Any, keep_s: float) -> dict[str, Any]:
        """What LanceDB's ``optimize()`` does — compact fragments, fold new rows into the indices, clean
        up versions older than ``keep_s`` — with compaction bounded by :attr:`fragment_rows`, through
        the Lance dataset API (pylance, the Lance release this LanceDB embeds), as LanceDB's own
        ``compact_files`` does; ``optimize()`` has no fragment-size option."""
        ds = tbl.to_lance(index_cache_size_bytes=self._index_cache_bytes,
                          metadata_cache_size_bytes=self._metadata_cache_bytes)
        done = ds.optimize.compact_files(target_rows_per_fragment=self.fragment_rows, materialize_deletions=True)
        ds.optimize.optimize_indices()
        # keep_s == 0 is deliberate (erasure, tests): every older version goes; delete_unverified also
        # removes files of failed writes younger than Lance's 7-day safety window.
        ds.cleanup_old_versions(older_than=timedelta(seconds=keep_s), delete_unverified=keep_s == 0,
                                error_if_tagged_old_versions=False)
        tbl.checkout_latest()
        return {"version": tbl.version, "fragments": _fragment_count(tbl),
                "fragments_compacted": done.fragments_removed}

    def _ensure_indices(self, name: str, tbl: Any) -> None:
        wanted = {"events": ["trajectory_id", "event_id", "tenant_id"],
                  "rewards": ["trajectory_id", "annotation_id"],
                  "quarantine": ["tenant_id"]}.get(name, [])
        for col in wanted:
            if (name, col) in self._indexed:
                continue
            have = {tuple(ix.columns) for ix in tbl.list_indices()}
            if (col,) not in have:
                tbl.create_scalar_index(col, index_type="BTREE")
            self._indexed.add((name, col))

    def _compact_loop(self) -> None:
        while not self._stop.is_set():
            self._compact_wake.wait(5.0)
            self._compact_wake.clear()
            if self._stop.is_set():
                return
            due = self._appends_since_compact >= self.compact_every or (
                self._appends_since_compact > 0
                and time.monotonic() - self._last_compact >= self.compact_interval_s)
            if due:
                try:
                    self.compact()
                except Exception as exc:  # compaction is best effort; the next run retries
                    log.warning("Molt store compaction failed: %r", exc)

    def fragment_count(self, name: str = "events") -> int:
        """How many data fragments a table has (compaction keeps this bounded)."""
        return _fragment_count(self.table(name))

    def cache_bytes(self) -> int:
        """Bytes held by this store's LanceDB caches (index + metadata), at most the sum of their bounds."""
        return int(self._session.size_bytes)

    def close(self) -> None:
        """Stop the compaction thread."""
        self._stop.set()
        self._compact_wake.set()
        if self._compactor is not None:
            self._compactor.join(timeout=30)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fragment_count(tbl: Any) -> int:
    stats = tbl.stats()
    frag = stats["fragment_stats"] if isinstance(stats, dict) else stats.fragment_stats
    return int(frag["num_fragments"] if isinstance(frag, dict) else frag.num_fragments)


def _ts_col(values_us: list[int]) -> pa.Array:
    return pa.array(values_us, pa.int64()).cast(pa.timestamp("us", tz="UTC"))


#: The index columns as one struct, so that Arrow converts the rows' ``x`` dicts in one C++ pass
#: (keys it does not name, such as ``annotations``, are ignored; a missing key is null).
_INDEX_STRUCT = pa.struct([EVENTS.field(c).with_nullable(True) for c in INDEX_COLUMNS]
                          + [pa.field("ts_us", pa.int64())])
_TS_TYPE = pa.timestamp("us", tz="UTC")


def _events_table(rows: list[Any]) -> pa.Table:
    """Arrow table from :class:`~molt.capture.SealedRow` records: tuples in its field order (``x``,
    envelope, payload, salt, digest, prev_hash, hash), unpacked by position (store never imports capture)."""
    now = int(time.time() * 1e6)
    # Built column by column in Arrow: one list comprehension per column over the rows' dicts cost
    # the delivery thread about a third more, all of it holding the GIL the Recorder's writer needs.
    xs, envelopes, payloads, salts, digests, prevs, hashes = zip(*rows, strict=True)
    index = pa.array(xs, _INDEX_STRUCT)
    cols: dict[str, pa.Array] = {c: index.field(i) for i, c in enumerate(INDEX_COLUMNS)}
    cols["ts"] = index.field(len(INDEX_COLUMNS)).cast(_TS_TYPE)
    cols["envelope"] = pa.array(envelopes, pa.binary())
    cols["payload"] = pa.array(payloads, pa.binary())
    cols["payload_salt"] = pa.array(salts, pa.binary())
    cols["chain"] = pc.binary_join_element_wise(pa.array(digests, pa.string()), pa.array(prevs, pa.string()),
                                                pa.array(hashes, pa.string()), ":")
    cols["ingested_at"] = _ts_col([now] * len(rows))
    return pa.Table.from_arrays([cols[f.name] for f in EVENTS], schema=EVENTS)


def _rewards_table(rows: list[dict[str, Any]]) -> pa.Table:
    now = int(time.time() * 1e6)
    records = []
    for r in rows:
        rec = canonical(r)
        check_size(rec, limit=MAX_RECORD_BYTES, what="reward annotation", trajectory_id=r.get("trajectory_id"))
        records.append(rec)
    created = [int(datetime.fromisoformat(r["created_at"].replace("Z", "+00:00")).timestamp() * 1e6)
               for r in rows]
    return pa.Table.from_pydict({
        "annotation_id": [r["annotation_id"] for r in rows],
        "trajectory_id": [r["trajectory_id"] for r in rows],
        "event_id": [r.get("event_id") for r in rows],
        "value": [float(r["value"]) for r in rows],
        "source": [r["source"] for r in rows],
        "tenant_id": [r.get("tenant_id") for r in rows],
        "created_at": _ts_col(created),
        "record": records,
        "ingested_at": _ts_col([now] * len(rows)),
    }, schema=REWARDS)


def _quarantine_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pydict({
        "quarantine_id": [r.get("quarantine_id") or new_id() for r in rows],
        "event_id": [r.get("event_id") for r in rows],
        "trajectory_id": [r.get("trajectory_id") for r in rows],
        "tenant_id": [r.get("tenant_id") for r in rows],
        "kind": [r.get("kind") for r in rows],
        "stage": [r.get("stage", "capture") for r in rows],
        "reason": [r.get("reason", "") for r in rows],
        "ts": _ts_col([int(r.get("ts_us") or time.time() * 1e6) for r in rows]),
        "record": [r.get("record") for r in rows],
    }, schema=QUARANTINE)
