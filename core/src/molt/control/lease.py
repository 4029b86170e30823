"""One writer per agent: a lease in the store, per ``(tenant, agent)``, held by whoever changes that
agent's versions (a control-plane cycle of ``molt serve`` or of ``molt evolve run``).

Two planes evolving one agent at once both make canaries from the same live version, and the later
promotion silently discards the earlier one's change. The lease makes them take turns: a cycle runs
under it (:meth:`Leases.hold`), a second actor is refused with a message naming the holder (or waits
a bounded time for it), and a holder that dies frees the agent when its lease expires (``ttl_s``; a
live holder renews it in the background).

The lease is an append-only log in the ``agent_leases`` table: ``claim``, ``renew`` and ``release``
rows with the holder, a random token and an expiry. Every reader replays the rows in the order they
were committed — LanceDB numbers an append's fragment when it commits, so row ids follow commit
order — and so every process agrees on the holder without a lock server: a claim wins when the lease
is free (never taken, released, or expired) at the point it was committed; a claim committed while
another holds the lease is void. Renewal and release count only from the current holder. Expiry is
compared in wall-clock seconds of the processes involved (the usual lease assumption: clocks agree
to well under ``ttl_s``).

Example::

    leases = Leases(store)
    with leases.hold("acme", "support", holder="control-plane"):
        ...                                   # change acme/support's versions
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa

from molt.atdp.ids import new_id
from molt.errors import InterventionError
from molt.store import Filter, Store
from molt.store.tables import append, ensure_table

__all__ = ["LEASE_SCHEMA", "LEASE_TABLE", "Lease", "LeaseHeld", "Leases", "holder_name"]

log = logging.getLogger("molt.control")

LEASE_TABLE = "agent_leases"
_TS = pa.timestamp("us", tz="UTC")
LEASE_SCHEMA = pa.schema([
    pa.field("tenant_id", pa.string(), nullable=False),
    pa.field("agent_id", pa.string(), nullable=False),
    pa.field("token", pa.string(), nullable=False),
    pa.field("holder", pa.string(), nullable=False),
    pa.field("action", pa.string(), nullable=False),     # claim | renew | release
    pa.field("at", _TS, nullable=False),
    pa.field("expires_at", _TS, nullable=False),
])


def holder_name(actor: str) -> str:
    """Who holds a lease, as another actor's refusal names it: ``actor (pid N on host)``."""
    return f"{actor} (pid {os.getpid()} on {socket.gethostname()})"


class LeaseHeld(InterventionError):
    """Another actor holds the agent's lease (``holder``, until ``expires_at``)."""

    def __init__(self, tenant_id: str, agent_id: str, holder: str, expires_at: datetime, waited_s: float):
        self.holder, self.expires_at = holder, expires_at
        waited = f" after waiting {waited_s:.0f} s" if waited_s >= 1 else ""
        super().__init__(
            f"{tenant_id}/{agent_id} is being evolved by {holder} (its lease runs until "
            f"{expires_at:%Y-%m-%d %H:%M:%S} UTC unless renewed){waited}; one writer per agent. Let that run "
            f"finish (or stop it) and try again; a holder that died frees the agent when its lease expires.")


@dataclass
class Lease:
    """A lease this process holds. ``lost`` is set when a renewal finds another holder (the holder's
    changes are then refused by the registry's compare-and-set, not silently applied)."""

    tenant_id: str
    agent_id: str
    token: str
    holder: str
    expires_at: datetime
    lost: bool = False
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)


@dataclass
class _State:
    token: str
    holder: str
    expires_at: datetime


class Leases:
    """The agents' writer leases in ``store`` (see the module docstring).

    Args:
        store: the store.
        ttl_s: how long a lease lasts without renewal (default 120 s; :meth:`hold` renews every third).
        clock: wall-clock seconds (tests pass a fake one).
    """

    def __init__(self, store: Store, *, ttl_s: float = 120.0, clock: Callable[[], float] = time.time):
        if ttl_s <= 0:
            raise ValueError("ttl_s must be > 0.")
        self.store = store
        self.ttl_s = ttl_s
        self.clock = clock
        self._table = ensure_table(store, LEASE_TABLE, LEASE_SCHEMA)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def _replay(self, tenant_id: str, agent_id: str) -> _State | None:
        rows = (self._table.search().where(str(Filter(tenant_id=tenant_id, agent_id=agent_id)))
                .with_row_id(True).limit(None).to_arrow().to_pylist())
        rows.sort(key=lambda r: r["_rowid"])  # commit order
        cur: _State | None = None
        for r in rows:
            act = r["action"]
            if act == "claim":
                if cur is None or cur.expires_at <= r["at"]:
                    cur = _State(r["token"], r["holder"], r["expires_at"])
            elif cur is not None and r["token"] == cur.token:
                if act == "release":
                    cur = None
                elif act == "renew" and cur.expires_at > r["at"]:
                    cur.expires_at = max(cur.expires_at, r["expires_at"])
        return cur

    def holder(self, tenant_id: str, agent_id: str) -> tuple[str, datetime] | None:
        """``(holder, expires_at)`` of the agent's current lease, or ``None`` when it is free."""
        cur = self._replay(tenant_id, agent_id)
        if cur is None or cur.expires_at <= self._now():
            return None
        return cur.holder, cur.expires_at

    def _write(self, tenant_id: str, agent_id: str, token: str, holder: str, action: str) -> datetime:
        now = self._now()
        expires = datetime.fromtimestamp(now.timestamp() + (self.ttl_s if action != "release" else 0.0), UTC)
        row = {"tenant_id": tenant_id, "agent_id": agent_id, "token": token, "holder": holder, "action": action,
               "at": now, "expires_at": expires}
        append(self.store, LEASE_TABLE, pa.Table.from_pylist([row], schema=LEASE_SCHEMA))
        return expires

    def try_acquire(self, tenant_id: str, agent_id: str, holder: str) -> Lease | LeaseHeld:
        """Claim the agent's lease once: the :class:`Lease`, or the :class:`LeaseHeld` naming the holder."""
        if (cur := self.holder(tenant_id, agent_id)) is not None:
            return LeaseHeld(tenant_id, agent_id, cur[0], cur[1], 0.0)
        token = new_id()
        expires = self._write(tenant_id, agent_id, token, holder, "claim")
        won = self._replay(tenant_id, agent_id)
        if won is not None and won.token == token:
            return Lease(tenant_id, agent_id, token, holder, expires)
        # another claim was committed first: ours is void
        assert won is not None
        return LeaseHeld(tenant_id, agent_id, won.holder, won.expires_at, 0.0)

    def acquire(self, tenant_id: str, agent_id: str, holder: str, *, wait_s: float = 0.0,
                poll_s: float = 0.5) -> Lease:
        """The agent's lease, waiting up to ``wait_s`` for its holder; raises :class:`LeaseHeld`."""
        t0 = time.monotonic()
        while True:
            got = self.try_acquire(tenant_id, agent_id, holder)
            if isinstance(got, Lease):
                return got
            waited = time.monotonic() - t0
            if waited >= wait_s:
                raise LeaseHeld(tenant_id, agent_id, got.holder, got.expires_at, waited)
            time.sleep(min(poll_s, max(0.0, wait_s - waited)))

    def renew(self, lease: Lease) -> bool:
        """Extend ``lease`` by ``ttl_s``; ``False`` (and ``lease.lost``) when it is no longer held."""
        cur = self._replay(lease.tenant_id, lease.agent_id)
        if cur is None or cur.token != lease.token or cur.expires_at <= self._now():
            lease.lost = True
            return False
        lease.expires_at = self._write(lease.tenant_id, lease.agent_id, lease.token, lease.holder, "renew")
        return True

    def release(self, lease: Lease) -> None:
        """Give the lease up (a no-op when it was lost)."""
        lease._stop.set()
        cur = self._replay(lease.tenant_id, lease.agent_id)
        if cur is not None and cur.token == lease.token:
            self._write(lease.tenant_id, lease.agent_id, lease.token, lease.holder, "release")

    @contextlib.contextmanager
    def hold(self, tenant_id: str, agent_id: str, holder: str, *, wait_s: float = 0.0) -> Iterator[Lease]:
        """Hold the agent's lease for the ``with`` block, renewed every ``ttl_s / 3`` on a thread,
        released at the end (an exception included)."""
        lease = self.acquire(tenant_id, agent_id, holder, wait_s=wait_s)

        def renewer() -> None:
            while not lease._stop.wait(self.ttl_s / 3):
                try:
                    if not self.renew(lease):
                        log.error("The lease of %s/%s held by %s was lost (expired and taken); its version "
                                  "changes will be refused.", tenant_id, agent_id, holder)
                        return
                except Exception:  # a store hiccup: the next tick retries before the lease expires
                    log.warning("Renewing the lease of %s/%s failed.", tenant_id, agent_id, exc_info=True)

        t = threading.Thread(target=renewer, name=f"molt-lease-{tenant_id}/{agent_id}", daemon=True)
        t.start()
        try:
            yield lease
        finally:
            lease._stop.set()
            t.join(timeout=5)
            try:
                self.release(lease)
            except Exception:  # it expires on its own
                log.warning("Releasing the lease of %s/%s failed; it expires in %.0f s.", tenant_id, agent_id,
                            self.ttl_s, exc_info=True)
