"""Physical erasure: make rows (or their payloads) gone from disk, not just invisible.

LanceDB deletes and updates are logical: a deletion file hides the row, an update writes a new copy
and hides the old one, and the old bytes stay in the data file — and in every older version — until
compaction rewrites that fragment, which it skips when few rows are deleted. So erasure here:

1. finds the fragments that hold matching rows (``_rowaddr >> 32``);
2. rewrites each of those fragments whole in one ``merge_insert`` transaction: every live row is
   written again (matching rows with their columns nulled, or left out), so each old fragment ends
   up fully deleted and is dropped from the manifest;
3. :func:`purge` rebuilds the table's indices (an index page can hold a deleted value) and cleans up
   every older version with ``cleanup_older_than=0`` — old manifests, data files, deletion files and
   index files go.

Erasure takes the store's write lock, so a Recorder delivering to the same store in this process
waits; another process writing the same store concurrently is not supported (LanceDB's warning
about ``cleanup_older_than=0`` applies).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from molt.errors import StoreError
from molt.store.filters import Filter
from molt.store.lance import Store
from molt.store.tables import open_all

__all__ = ["id_column", "purge", "rewrite"]

log = logging.getLogger("molt.store")

_MAX_ROUNDS = 5


def id_column(tbl: Any) -> str:
    """The table's id column: its first column, by the store's convention."""
    return str(tbl.schema.names[0])


def rewrite(store: Store, table: str, where: Filter | str, *, null_columns: Sequence[str] | None = None) -> int:
    """Physically delete the rows of ``table`` matching ``where`` or, with ``null_columns``, null
    those columns in them; returns how many rows were affected. Call :func:`purge` afterwards to
    drop the old versions that still hold the bytes."""
    if not where or not str(where).strip():
        raise ValueError(f"rewrite of {table!r} needs a filter: an empty one would match every row")
    where = str(where)
    tbl = open_all(store)[table]
    done = 0
    with store.write_lock:  # serialized with this process's appends and compaction
        for _ in range(_MAX_ROUNDS):
            pending = where if not null_columns else (
                f"({where}) AND ({' OR '.join(f'{c} IS NOT NULL' for c in null_columns)})")
            n = _rewrite_round(tbl, pending, null_columns)
            done += n
            if n == 0:
                return done
        left = tbl.count_rows(where if not null_columns else pending)
        if left:
            raise StoreError(f"Erasing from {table!r} did not converge: {left} rows still match {where!r}; "
                             f"stop other writers to this store and run the erasure again.")
    return done


def _rewrite_round(tbl: Any, where: str, null_columns: Sequence[str] | None) -> int:
    hit = tbl.search().where(where).select(["_rowaddr"]).limit(None).to_arrow()
    if hit.num_rows == 0:
        return 0
    frags = sorted({int(a) >> 32 for a in hit.column("_rowaddr").to_pylist()})
    in_frags = " OR ".join(f"(_rowaddr >= {f << 32} AND _rowaddr < {(f + 1) << 32})" for f in frags)
    rows = tbl.search().where(in_frags).limit(None).to_arrow()  # every live row of those fragments
    rows = rows.select(tbl.schema.names)
    match = _matches(tbl, rows, where, in_frags)
    key = id_column(tbl)
    if null_columns:
        cols = {}
        for name in rows.column_names:
            col = rows.column(name)
            if name in null_columns:
                col = pc.if_else(match, pa.nulls(rows.num_rows, col.type), col)
            cols[name] = col
        source = pa.table(cols, schema=rows.schema)
        (tbl.merge_insert(key).when_matched_update_all().execute(_unique(source, key)))
    else:
        source = rows.filter(pc.invert(match))
        if source.num_rows == 0:
            tbl.delete(where)  # every live row of those fragments goes: the fragments are dropped
        else:
            (tbl.merge_insert(key).when_matched_update_all()
             .when_not_matched_by_source_delete(where).execute(_unique(source, key)))
    return int(hit.num_rows)


def _matches(tbl: Any, rows: pa.Table, where: str, in_frags: str) -> pa.ChunkedArray:
    """Which of ``rows`` match ``where`` (asked of LanceDB, so SQL semantics are LanceDB's)."""
    key = id_column(tbl)
    got = tbl.search().where(f"({where}) AND ({in_frags})").select([key]).limit(None).to_arrow()
    return pc.is_in(rows.column(key), value_set=got.column(key).combine_chunks())


def _unique(t: pa.Table, key: str) -> pa.Table:
    ids = t.column(key).to_pylist()
    if len(set(ids)) == len(ids):
        return t
    seen: set[Any] = set()
    keep = [not (i in seen or seen.add(i)) for i in ids]  # type: ignore[func-returns-value]
    return t.filter(pa.array(keep))


def purge(store: Store, tables: Iterable[str] | None = None) -> dict[str, Any]:
    """Rebuild indices and drop every old version of ``tables`` (default: all), so erased bytes are
    gone from disk. Returns ``{table: {"version": v, "rows": n}}``."""
    all_tables = open_all(store)
    names = list(all_tables) if tables is None else list(dict.fromkeys(tables))
    out: dict[str, Any] = {}
    with store.write_lock:
        for name in names:
            tbl = all_tables[name]
            _rebuild_indices(store, name, tbl)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r"optimize\(cleanup_older_than=0\)")
                tbl.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)
            out[name] = {"version": tbl.version, "rows": tbl.count_rows()}
    return out


_SCALAR = {"BTree": "BTREE", "Bitmap": "BITMAP", "LabelList": "LABEL_LIST"}
_VECTOR = {"IvfPq": "IVF_PQ", "IvfFlat": "IVF_FLAT", "IvfSq": "IVF_SQ", "IvfHnswPq": "IVF_HNSW_PQ",
           "IvfHnswSq": "IVF_HNSW_SQ", "IvfHnswFlat": "IVF_HNSW_FLAT"}
_FTS_KEYS = ("base_tokenizer", "language", "with_position", "max_token_length", "lower_case", "stem",
             "remove_stop_words", "ascii_folding")


def _rebuild_indices(store: Store, name: str, tbl: Any) -> None:
    """Recreate every index of ``tbl`` from its live rows (an old index page may hold erased values)."""
    empty = tbl.count_rows() == 0
    for ix in tbl.list_indices():
        col = ix.columns[0]
        try:
            if empty:
                tbl.drop_index(ix.name)
                store.index_dropped(name, col)
            elif ix.index_type in _SCALAR:
                tbl.create_scalar_index(col, index_type=_SCALAR[ix.index_type], replace=True)
            elif ix.index_type in ("FTS", "Inverted"):
                details = getattr(ix, "index_details", None) or {}
                opts = {k: details[k] for k in _FTS_KEYS if details.get(k) is not None}
                tbl.create_fts_index(col, replace=True, **opts)
            else:  # vector indices: same type, default parameters
                kind = _VECTOR.get(ix.index_type, ix.index_type)
                tbl.create_index(vector_column_name=col, index_type=kind, replace=True)
        except Exception as exc:
            # An index that cannot be rebuilt is dropped: its pages may hold erased values, and
            # queries still work without it (a flat scan); the next compaction recreates scalar ones.
            log.warning("Rebuilding index %r of %r after erasure failed (%r); dropping it.", ix.name, name, exc)
            try:
                tbl.drop_index(ix.name)
                store.index_dropped(name, col)
            except Exception as drop_exc:
                raise StoreError(f"Index {ix.name!r} of {name!r} could neither be rebuilt ({exc}) nor dropped "
                                 f"({drop_exc}) after erasure; it may still hold erased values. Drop it by "
                                 f"hand with table.drop_index({ix.name!r}).") from drop_exc
