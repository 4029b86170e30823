"""Agent discovery: the agents the plane evolves without registration, read from the traffic through
the store's :class:`~molt.store.Filter` seam."""

from __future__ import annotations

import re

from molt.store import Filter, Store

__all__ = ["agents_in_traffic"]

_NAME_OK = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def agents_in_traffic(store: Store, tenant_id: str | None = None) -> set[tuple[str, str]]:
    """Every ``(tenant, agent)`` pair seen in the traffic (of one tenant, or all), however it was captured
    (gateway, adapter, import): each trajectory's first event names them. Names that are not plain
    identifiers are left out."""
    first = Filter(seq=0).present("agent_id").present("tenant_id")
    rows = store.rows("events", first.where(tenant_id=tenant_id) if tenant_id else first,
                      ["tenant_id", "agent_id"]).to_pylist()
    return {(r["tenant_id"], r["agent_id"]) for r in rows if _NAME_OK.match(r["tenant_id"])
            and _NAME_OK.match(r["agent_id"])}
