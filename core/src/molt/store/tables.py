"""Extra tables that other packages keep in the store (governance decisions, the audit log).

The store owns its core tables (:data:`molt.store.schemas.TABLES`); a package that needs another
table registers it here, once per store, so that compaction, version cleanup, erasure and the
tenant-scoped read path (:class:`molt.store.scoped.TenantView`) cover it like any other::

    from molt.store.tables import ensure_table
    tbl = ensure_table(store, "governance", GOVERNANCE_SCHEMA)

This module is part of the store package: it uses the :class:`Store`'s table registry and write lock
(compaction iterates the registry under that lock, so registration takes it too).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from molt.errors import StoreError
from molt.store.lance import Store

__all__ = ["append", "ensure_table", "open_all"]


def ensure_table(store: Store, name: str, schema: pa.Schema) -> Any:
    """Open (or create) table ``name`` with ``schema`` in ``store`` and register it there.

    Every extra table must have a ``tenant_id`` column: the tenant-scoped read path filters on it.
    """
    if "tenant_id" not in schema.names:
        raise StoreError(f"Table {name!r} needs a tenant_id column; every table is read per tenant.")
    existing = store._tables.get(name)
    if existing is not None:
        return existing
    with store._write_lock:
        if name in store._tables:
            return store._tables[name]
        db = store._db
        try:
            if name in set(db.list_tables().tables):
                tbl = db.open_table(name)
            else:
                tbl = db.create_table(name, schema=schema, exist_ok=True)
        except Exception as exc:
            raise StoreError(f"Cannot open or create table {name!r} in {store.uri}: {exc}.") from exc
        store._tables[name] = tbl
        return tbl


def open_all(store: Store) -> dict[str, Any]:
    """Every table in the store's database, registered in the store (tables another process or
    package created included): ``{name: table}``."""
    db = store._db
    with store._write_lock:
        for name in db.list_tables().tables:
            if name not in store._tables:
                store._tables[name] = db.open_table(name)
        return dict(store._tables)


def append(store: Store, name: str, data: pa.Table) -> None:
    """Append ``data`` to table ``name`` under the store's write lock (one LanceDB append)."""
    if data.num_rows == 0:
        return
    tbl = store._tables.get(name) or open_all(store).get(name)
    if tbl is None:
        raise StoreError(f"No table {name!r} in {store.uri}; create it with ensure_table first.")
    with store._write_lock:
        try:
            tbl.add(data)
        except Exception as exc:
            raise StoreError(f"Appending {data.num_rows} rows to {name!r} failed: {exc}.") from exc
