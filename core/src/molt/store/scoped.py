"""The one tenant-scoped read path: every read of a multi-tenant store goes through a TenantView.

A :class:`TenantView` is bound to one tenant (from an authenticated principal) and offers every kind
of read the store supports — scans, streaming, vector search, full-text search, time travel to old
LanceDB versions, counts and aggregates, trajectories, chain verification and Parquet export — each
of which:

1. ANDs ``tenant_id = '<tenant>'`` into the query (as a LanceDB prefilter for vector and full-text
   search, so the top-k is drawn from the tenant's rows only), after checking that a caller's extra
   filter cannot escape its parentheses (balanced, no ``;``, no comments);
2. checks every returned row's ``tenant_id`` again in Arrow and drops any other row (counted in
   :attr:`TenantView.violations` and logged — defence in depth; it has never fired in the tests).

Rows with no tenant are visible to no tenant. Quarantine and audit tables need the admin role.

Example::

    from molt.governance import KeyRing
    from molt.store import Store
    from molt.store.scoped import TenantView

    view = TenantView(Store.open(), KeyRing.from_file("keys.toml").authenticate(api_key))
    view.scan("events", where="kind = 'tool_call'", columns=["event_id", "name"])
    view.search_text("memories", "refund policy", k=5)
    view.scan("events", version=12)               # time travel, still only this tenant's rows
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from molt.atdp.chain import ChainReport, SealedEvent, unseal, verify_chain
from molt.atdp.models import RewardAnnotation
from molt.errors import NotFound, StoreError
from molt.store.filters import IN_CHUNK, Filter, lance_where
from molt.store.lance import Store
from molt.store.query import SUMMARY_COLUMNS, Trajectory, TrajectorySummary, check_outcome, select_summaries
from molt.store.tables import open_all

__all__ = ["TenantView", "check_filter"]

log = logging.getLogger("molt.store")

#: Tables whose rows only the tenant's admins may read (quarantine keeps records as they arrived).
ADMIN_TABLES = frozenset({"quarantine", "audit"})
_SEALED = ["event_id", "trajectory_id", "seq", "envelope", "payload", "payload_salt", "chain", "tenant_id"]


def check_filter(where: str) -> str:
    """Return ``where`` if it is safe to AND into a tenant filter, else raise ``ValueError``.

    Safe means: parentheses balance outside string literals and never close below zero, and there is
    no ``;`` or comment outside them — so ``tenant_id = 'a' AND (<where>)`` stays one conjunction.
    """
    if "\x00" in where:
        raise ValueError("A filter may not contain NUL characters.")
    depth = 0
    i, n = 0, len(where)
    while i < n:
        ch = where[i]
        if ch in "'\"`":
            j = i + 1
            while True:
                j = where.find(ch, j)
                if j < 0:
                    raise ValueError(f"The filter {where!r} has an unterminated {ch} quote.")
                if j + 1 < n and where[j + 1] == ch:  # doubled quote = escaped
                    j += 2
                    continue
                break
            i = j + 1
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"The filter {where!r} closes a parenthesis it did not open.")
        elif ch == ";" or where.startswith(("--", "/*"), i):
            raise ValueError(f"The filter {where!r} may not contain ';' or comments.")
        i += 1
    if depth:
        raise ValueError(f"The filter {where!r} has unbalanced parentheses.")
    return where


class TenantView:
    """Reads of one tenant's rows only (see the module docstring).

    Args:
        store: the :class:`~molt.store.Store`.
        principal: an authenticated caller with ``tenant_id`` and ``require(action)`` (a
            :class:`molt.governance.Principal`); it must be allowed to ``read``.
    """

    def __init__(self, store: Store, principal: Any):
        if isinstance(principal, str):
            raise TypeError("TenantView takes an authenticated principal; jobs that authorised already "
                            "use TenantView.for_tenant(store, tenant_id).")
        tenant = getattr(principal, "tenant_id", None)
        if not isinstance(tenant, str) or not tenant:
            raise StoreError("A tenant view needs a principal with a non-empty tenant_id.")
        require = getattr(principal, "require", None)
        if require is None:
            raise TypeError("The principal has no require(action) method; authenticate it with a KeyRing.")
        require("read")
        self._init(store, tenant, principal)

    @classmethod
    def for_tenant(cls, store: Store, tenant_id: str) -> TenantView:
        """A view for ``tenant_id`` with no principal: for jobs that already authorised the caller
        (retention, erasure, the training queue after its cross-tenant check)."""
        if not isinstance(tenant_id, str) or not tenant_id:
            raise StoreError("A tenant view needs a non-empty tenant id.")
        view = cls.__new__(cls)
        view._init(store, tenant_id, None)
        return view

    def _init(self, store: Store, tenant: str, principal: Any) -> None:
        self.store = store
        self.tenant_id = tenant
        self.principal = principal
        self.violations = 0
        self._tenant = Filter(tenant_id=tenant)
        self._handles: OrderedDict[tuple[str, int], Any] = OrderedDict()

    # ------------------------------------------------------------------ plumbing

    def _table(self, name: str, version: int | None) -> Any:
        if name in ADMIN_TABLES and self.principal is not None:
            self.principal.require("admin")
        if version is None:
            try:
                return self.store.table(name)
            except StoreError:
                tables = open_all(self.store)
                if name not in tables:
                    raise
                return tables[name]
        key = (name, int(version))
        h = self._handles.get(key)
        if h is None:
            self._table(name, None)  # the table exists (and the caller may read it)
            try:
                h = self.store.table_at(name, int(version))
            except StoreError as exc:
                raise StoreError(f"{exc} Versions kept: {self.versions(name)}.") from exc.__cause__
            self._handles[key] = h
            if len(self._handles) > 64:
                self._handles.popitem(last=False)
        return h

    def _where(self, where: Filter | str | None) -> str:
        sql = lance_where(where)
        if sql is None or not sql.strip():
            return str(self._tenant)
        return f"{self._tenant} AND ({check_filter(sql)})"

    @staticmethod
    def _select(columns: Sequence[str] | None, *extra: str) -> tuple[list[str] | None, bool]:
        if columns is None:
            return None, False
        cols = list(dict.fromkeys([*columns, *extra]))
        drop = "tenant_id" not in cols
        if drop:
            cols.append("tenant_id")
        return cols, drop

    def _guard(self, table: pa.Table, drop_tenant: bool, what: str) -> pa.Table:
        mask = pc.fill_null(pc.equal(table.column("tenant_id"), self.tenant_id), False)
        if not pc.all(mask).as_py() and table.num_rows:
            leaked = table.num_rows - pc.sum(mask).as_py()
            self.violations += leaked
            log.error("Tenant view %r dropped %d rows of another tenant from %s; report this as a bug.",
                      self.tenant_id, leaked, what)
            table = table.filter(mask)
        return table.drop_columns(["tenant_id"]) if drop_tenant else table

    def _run(self, q: Any, what: str) -> pa.Table:
        try:
            return q.to_arrow()
        except Exception as exc:
            raise StoreError(f"Reading {what} failed: {exc}.") from exc

    # ------------------------------------------------------------------ reads

    def scan(self, table: str = "events", *, where: Filter | str | None = None, columns: Sequence[str] | None = None,
             limit: int | None = None, version: int | None = None) -> pa.Table:
        """Rows of ``table`` (optionally filtered, projected, limited, at an old ``version``)."""
        cols, drop = self._select(columns)
        q = self._table(table, version).search().where(self._where(where))
        if cols is not None:
            q = q.select(cols)
        return self._guard(self._run(q.limit(limit), table), drop, table)

    def iter_batches(self, table: str = "events", *, where: Filter | str | None = None,
                     columns: Sequence[str] | None = None, batch_rows: int = 8192,
                     version: int | None = None) -> Iterator[pa.Table]:
        """Stream rows of ``table`` in Arrow tables of at most ``batch_rows`` rows."""
        cols, drop = self._select(columns)
        q = self._table(table, version).search().where(self._where(where))
        if cols is not None:
            q = q.select(cols)
        for rb in q.limit(None).to_batches(batch_rows):
            yield self._guard(pa.Table.from_batches([rb]), drop, table)

    def search_vector(self, table: str, vector: Sequence[float], *, column: str = "vector", k: int = 10,
                      where: Filter | str | None = None, columns: Sequence[str] | None = None,
                      metric: str = "l2", version: int | None = None) -> pa.Table:
        """The ``k`` nearest of the tenant's rows to ``vector`` (prefiltered), with ``_distance``."""
        cols, drop = self._select(columns, "_distance")
        q = (self._table(table, version).search(list(vector), vector_column_name=column)
             .distance_type(metric).where(self._where(where), prefilter=True))
        if cols is not None:
            q = q.select(cols)
        return self._guard(self._run(q.limit(k), f"a vector search of {table}"), drop, table)

    def search_text(self, table: str, query: str, *, column: str | None = None, k: int = 10,
                    where: Filter | str | None = None, columns: Sequence[str] | None = None,
                    version: int | None = None) -> pa.Table:
        """Full-text search (a LanceDB FTS index on ``column``) over the tenant's rows, with ``_score``."""
        cols, drop = self._select(columns, "_score")
        q = (self._table(table, version).search(query, query_type="fts", fts_columns=column)
             .where(self._where(where), prefilter=True))
        if cols is not None:
            q = q.select(cols)
        return self._guard(self._run(q.limit(k), f"a full-text search of {table}"), drop, table)

    def count(self, table: str = "events", *, where: Filter | str | None = None, version: int | None = None) -> int:
        """How many of the tenant's rows ``table`` holds (optionally filtered, at a version)."""
        return int(self.scan(table, where=where, columns=["tenant_id"], version=version).num_rows)

    def aggregate(self, table: str, aggregations: Sequence[tuple[str, str]], *, by: Sequence[str] = (),
                  where: Filter | str | None = None, version: int | None = None) -> pa.Table:
        """Aggregates over the tenant's rows: ``aggregations`` are ``(column, function)`` pairs of
        pyarrow's group-by functions (``count``, ``sum``, ``mean``, ``min``, ``max``, …)."""
        cols = list(dict.fromkeys([*by, *(c for c, _ in aggregations)]))
        rows = self.scan(table, where=where, columns=cols, version=version)
        return rows.group_by(list(by)).aggregate(list(aggregations))

    def versions(self, table: str = "events") -> list[int]:
        """The table versions that can still be read (older ones were cleaned up)."""
        return [int(v["version"]) for v in self._table(table, None).list_versions()]

    # ------------------------------------------------------------------ trajectories

    def trajectory_ids(self, where: Filter | str | None = None) -> list[str]:
        """The tenant's distinct trajectory ids."""
        got = self.scan("events", where=where, columns=["trajectory_id"])
        return [str(t) for t in pc.unique(got.column("trajectory_id")).to_pylist()]

    def trajectories(self, *, agent: str | None = None, since: datetime | None = None,
                     until: datetime | None = None, outcome: str | None = None,
                     limit: int | None = 100) -> list[TrajectorySummary]:
        """The tenant's trajectory summaries, newest first: the store's filter and order
        (:func:`molt.store.query.select_summaries`) over the tenant's rows only."""
        check_outcome(outcome)
        events = self.scan("events", where=Filter(agent_id=agent) if agent is not None else None,
                           columns=SUMMARY_COLUMNS)
        if events.num_rows == 0:
            return []
        rewards = self._rewards_table(pc.unique(events.column("trajectory_id")).to_pylist(), ["trajectory_id", "value"])
        return select_summaries(events, rewards, since=since, until=until, outcome=outcome, limit=limit)

    def sealed_events(self, trajectory_id: str, *, version: int | None = None) -> list[SealedEvent]:
        """A trajectory's stored records in ``seq`` order (none if it is another tenant's)."""
        got = self.scan("events", where=Filter(trajectory_id=trajectory_id), columns=_SEALED, version=version)
        return [_sealed(r) for r in sorted(got.to_pylist(), key=lambda r: r["seq"])]

    def sealed_many(self, trajectory_ids: Sequence[str]) -> dict[str, list[SealedEvent]]:
        """``{trajectory_id: records in seq order}`` for many trajectories at once."""
        out: dict[str, list[SealedEvent]] = {}
        for where in Filter().chunks("trajectory_id", trajectory_ids):
            got = self.scan("events", where=where, columns=_SEALED)
            for r in got.to_pylist():
                out.setdefault(r["trajectory_id"], []).append(_sealed(r))
        for rows in out.values():
            rows.sort(key=lambda s: s.seq)
        return out

    def rewards(self, trajectory_id: str) -> list[RewardAnnotation]:
        """Late rewards on one of the tenant's trajectories, oldest first."""
        got = self._rewards_table([trajectory_id], ["record", "created_at"])
        rows = sorted(got.to_pylist(), key=lambda r: r["created_at"])
        return [RewardAnnotation.model_validate(orjson.loads(r["record"])) for r in rows]

    def rewards_many(self, trajectory_ids: Sequence[str]) -> dict[str, list[RewardAnnotation]]:
        """``{trajectory_id: late rewards, oldest first}``."""
        got = self._rewards_table(list(trajectory_ids), ["trajectory_id", "record", "created_at"])
        out: dict[str, list[RewardAnnotation]] = {}
        for r in sorted(got.to_pylist(), key=lambda r: r["created_at"]):
            out.setdefault(r["trajectory_id"], []).append(RewardAnnotation.model_validate(orjson.loads(r["record"])))
        return out

    def _rewards_table(self, trajectory_ids: list[str], columns: list[str]) -> pa.Table:
        """Rewards on the tenant's own trajectories: tagged with this tenant, or untagged (a Recorder
        reward without a tenant) — never one tagged with another tenant."""
        own = set(self._own_trajectories(trajectory_ids))
        parts = []
        cols = list(dict.fromkeys([*columns, "trajectory_id", "tenant_id"]))
        ids = sorted(own)
        for i in range(0, len(ids), IN_CHUNK):
            chunk = ids[i:i + IN_CHUNK]
            where = Filter().among("trajectory_id", chunk).either(self._tenant, Filter().absent("tenant_id"))
            got = self._run(self._table("rewards", None).search().where(str(where)).select(cols).limit(None),
                            "rewards")
            ok = pc.and_(pc.is_in(got.column("trajectory_id"), pa.array(chunk)),
                         pc.or_kleene(pc.is_null(got.column("tenant_id")),
                                      pc.equal(got.column("tenant_id"), self.tenant_id)))
            parts.append(got.filter(pc.fill_null(ok, False)))
        if not parts:
            return pa.table({c: pa.array([], pa.string()) for c in columns}).select(columns)
        return pa.concat_tables(parts).select(columns)

    def _own_trajectories(self, trajectory_ids: list[str]) -> list[str]:
        own: list[str] = []
        for where in Filter().chunks("trajectory_id", trajectory_ids):
            got = self.scan("events", where=where, columns=["trajectory_id"])
            own.extend(pc.unique(got.column("trajectory_id")).to_pylist())
        return own

    def trajectory(self, trajectory_id: str) -> Trajectory:
        """One of the tenant's trajectories; :class:`NotFound` if it has none of that id."""
        sealed = self.sealed_events(trajectory_id)
        if not sealed:
            raise NotFound(f"No trajectory {trajectory_id} for tenant {self.tenant_id!r}.",
                           trajectory_id=trajectory_id)
        return Trajectory(trajectory_id=trajectory_id, events=[unseal(s.envelope, s.payload) for s in sealed],
                          rewards=self.rewards(trajectory_id))

    def verify(self, trajectory_id: str) -> ChainReport:
        """Verify one of the tenant's trajectories' hash chain."""
        return verify_chain(trajectory_id, self.sealed_events(trajectory_id))

    # ------------------------------------------------------------------ export

    def export_parquet(self, path: str | os.PathLike[str], *, table: str = "events", where: Filter | str | None = None,
                       version: int | None = None, progress: Callable[[int], Any] | None = None) -> int:
        """Write the tenant's rows of ``table`` to a Parquet file; returns the row count."""
        import pyarrow.parquet as pq

        total = 0
        writer = None
        try:
            for t in self.iter_batches(table, where=where, version=version):
                if writer is None:
                    writer = pq.ParquetWriter(str(path), t.schema)
                writer.write_table(t)
                total += t.num_rows
                if progress is not None:
                    progress(t.num_rows)
            if writer is None:
                pq.write_table(self._table(table, version).schema.empty_table(), str(path))
        finally:
            if writer is not None:
                writer.close()
        return total


def _sealed(r: dict[str, Any]) -> SealedEvent:
    chain = r["chain"]
    return SealedEvent(event_id=r["event_id"], trajectory_id=r["trajectory_id"], seq=r["seq"],
                       envelope=r["envelope"], payload=r["payload"], salt=r["payload_salt"],
                       digest=chain[:64], prev_hash=chain[65:129], hash=chain[130:])
