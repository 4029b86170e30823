"""Extra tables that other packages keep in the store (governance decisions, the audit log).

The store owns its core tables (:data:`molt.store.schemas.TABLES`); a package that needs another
table registers it here, once per store, so that compaction, version cleanup, erasure and the
tenant-scoped read path (:class:`molt.store.scoped.TenantView`) cover it like any other::

    from molt.store.tables import ensure_table
    tbl = ensure_table(store, "governance", GOVERNANCE_SCHEMA)

These functions are the spelling other packages use; the registry and the write lock they work
through are the :class:`Store`'s (:meth:`Store.ensure_table`, :meth:`Store.open_tables`,
:attr:`Store.write_lock`).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from molt.errors import StoreError
from molt.store.lance import Store

__all__ = ["append", "ensure_table", "open_all"]


def ensure_table(store: Store, name: str, schema: pa.Schema) -> Any:
    """Open (or create) table ``name`` with ``schema`` in ``store`` and register it there
    (:meth:`Store.ensure_table`). Every extra table must have a ``tenant_id`` column: the
    tenant-scoped read path filters on it."""
    return store.ensure_table(name, schema)


def open_all(store: Store) -> dict[str, Any]:
    """Every table in the store's database, registered in the store (tables another process or
    package created included): ``{name: table}`` (:meth:`Store.open_tables`)."""
    return store.open_tables()


def append(store: Store, name: str, data: pa.Table) -> None:
    """Append ``data`` to table ``name`` under the store's write lock (one LanceDB append)."""
    if data.num_rows == 0:
        return
    try:
        tbl = store.table(name)
    except StoreError:
        tbl = store.open_tables().get(name)
    if tbl is None:
        raise StoreError(f"No table {name!r} in {store.uri}; create it with ensure_table first.")
    with store.write_lock:
        try:
            tbl.add(data)
        except Exception as exc:
            raise StoreError(f"Appending {data.num_rows} rows to {name!r} failed: {exc}.") from exc
