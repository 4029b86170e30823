"""Which trajectory a caller's id names, within the caller's tenant: the one rule every ingest path uses.

Clients choose trajectory ids (``X-Molt-Trajectory``, ``metadata.trajectory_id``, an OTLP trace id, the
trajectory of an event Molt exported, the id a reward or an end names). The store keeps one id space
for all tenants, so when a deployment serves more than one tenant an id is resolved *within* the
caller's tenant, by :meth:`TrajectoryNamespace.resolve`:

1. an id the tenant already owns (a trajectory made for it here, or one whose stored events are all
   its own) names that trajectory;
2. any other id — new, or held by another tenant — names the tenant's own namespaced trajectory
   ``<id>~<tag>``, the tag a hash of (tenant, id).

A caller gets the same answer whether or not another tenant holds the id: nothing is written into
a foreign chain and no reply tells whether an id exists elsewhere. Event ids derived from
client-chosen ids (an OTLP span's, see :meth:`TrajectoryNamespace.event_id`) are derived from the
resolved trajectory, so two tenants' events never share an id and duplicate suppression (by event
id) is per tenant. A deployment with one tenant (an open gateway, or keys of a single tenant) uses
ids as given: there is no other tenant to collide with.

The gateway's chat and completions, its feedback endpoints and OTLP ingest all call one
:class:`TrajectoryNamespace`; it is thread-safe (OTLP maps spans on worker threads).

>>> ns = TrajectoryNamespace(multi_tenant=lambda: True)
>>> ns.resolve("acme", "order-4711") == ns.resolve("acme", "order-4711") != ns.resolve("globex", "order-4711")
True
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["NAMESPACE_SEP", "SERVED_PROVENANCE", "TrajectoryNamespace", "store_tenant", "unclaimed"]

#: Provenance only the process that served a call may stamp: which policy version, harness, retrieval
#: snapshot and weights answered it. The control plane judges versions by these (a canary by the runs
#: stamped with it), so a writer that could set them could vote for a version with forged runs.
SERVED_PROVENANCE = ("policy_version", "harness_fingerprint", "retrieval_snapshot", "model_checkpoint",
                     "lora_adapter")


def unclaimed(event: Any, integration: str) -> Any:
    """``event`` (an ATDP :class:`~molt.atdp.models.Event` a writer sent whole: OTLP ``molt.event``, an
    import) with the served provenance a writer cannot claim dropped and, where it claimed some,
    ``integration`` the ingest path it came through."""
    prov = event.provenance
    if prov is None or all(getattr(prov, k, None) is None for k in SERVED_PROVENANCE):
        return event  # nothing claimed: the event comes back exactly as it was exported
    keep = {k: v for k, v in prov.model_dump().items() if k not in SERVED_PROVENANCE}
    keep["integration"] = integration
    return event.model_copy(update={"provenance": type(prov).model_validate(keep)})

log = logging.getLogger("molt.capture")

#: Separates a client's id from its tenant tag in a namespaced trajectory id.
NAMESPACE_SEP = "~"
#: Trajectory ids are at most this long (ATDP); a namespaced id keeps the client's id's head.
_MAX_ID = 128
_TAG_HEX = 16

#: ``tenant_of(trajectory_id)``: the one tenant of a trajectory's stored events (``None``: nothing
#: stored, or events of several tenants).
TenantOf = Callable[[str], "str | None"]


def store_tenant(store: Any) -> TenantOf:
    """The :data:`TenantOf` lookup of a :class:`~molt.store.Store` (its ``trajectory_tenant``: one
    indexed query per id)."""
    return store.trajectory_tenant  # type: ignore[no-any-return]


class _LRU:
    """A thread-safe map bounded by size and idle time."""

    def __init__(self, limit: int, idle_s: float | None) -> None:
        self.limit, self.idle_s = limit, idle_s
        self.data: OrderedDict[Any, tuple[Any, float]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self.lock:
            hit = self.data.get(key)
            if hit is None:
                return None
            now = time.monotonic()
            if self.idle_s is not None and now - hit[1] > self.idle_s:
                del self.data[key]
                return None
            self.data[key] = (hit[0], now)
            self.data.move_to_end(key)
            return hit[0]

    def put(self, key: Any, value: Any) -> None:
        with self.lock:
            self.data[key] = (value, time.monotonic())
            self.data.move_to_end(key)
            while len(self.data) > self.limit:
                self.data.popitem(last=False)


class TrajectoryNamespace:
    """Trajectory ids resolved within a tenant (see the module docstring).

    Args:
        tenant_of: the tenant of a trajectory's stored events (:func:`store_tenant`; ``None``: only
            what this process made is known).
        multi_tenant: whether ids are namespaced now (``True`` when the deployment's keys name more
            than one tenant); a callable, because keys can be added while serving.
        max_entries: owners and resolutions remembered (each; default 200,000), forgotten after
            ``idle_s`` seconds unused (default 1,800).
    """

    def __init__(self, tenant_of: TenantOf | None = None, *, multi_tenant: Callable[[], bool] = lambda: False,
                 max_entries: int = 200_000, idle_s: float | None = 1800.0) -> None:
        self._tenant_of = tenant_of
        self._multi = multi_tenant
        self._owner = _LRU(max_entries, idle_s)  # trajectory id -> tenant that owns it
        self._resolved = _LRU(max_entries, idle_s)  # (tenant, client id) -> trajectory id

    @property
    def enabled(self) -> bool:
        """Whether ids are namespaced (more than one tenant)."""
        return bool(self._multi())

    def claim(self, tenant: str, trajectory_id: str) -> None:
        """Note that ``trajectory_id`` was made for ``tenant`` here (a fresh id, or a resolved one)."""
        self._owner.put(trajectory_id, tenant)

    def namespaced(self, tenant: str, client_id: str) -> str:
        """``tenant``'s own trajectory for ``client_id``: ``<client_id>~<tag>`` (at most 128 characters)."""
        tag = hashlib.blake2b(f"{tenant}\x00{client_id}".encode(), digest_size=_TAG_HEX // 2).hexdigest()
        return client_id[: _MAX_ID - _TAG_HEX - len(NAMESPACE_SEP)] + NAMESPACE_SEP + tag

    def owns(self, tenant: str, trajectory_id: str) -> bool:
        """Whether ``tenant`` owns ``trajectory_id``: made for it here, or every stored event is its own.
        A store that cannot be asked counts as "not known to be its own" (the caller then writes to
        its namespaced trajectory: fail open for the agent, closed for the data)."""
        owner = self._owner.get(trajectory_id)
        if owner is not None:
            return bool(owner == tenant)
        if self._tenant_of is None:
            return False
        try:
            found = self._tenant_of(trajectory_id)
        except Exception:
            log.warning("Cannot look up the tenant of trajectory %r; treating it as not the caller's.",
                        trajectory_id, exc_info=True)
            return False
        if found is not None:
            self.claim(found, trajectory_id)
        return found == tenant

    def resolve(self, tenant: str, client_id: str) -> str:
        """The trajectory ``client_id`` names for ``tenant`` (the rule in the module docstring)."""
        if not self.enabled:
            return client_id
        hit = self._resolved.get((tenant, client_id))
        if hit is not None:
            return str(hit)
        tid = client_id if self.owns(tenant, client_id) else self.namespaced(tenant, client_id)
        self._resolved.put((tenant, client_id), tid)
        self.claim(tenant, tid)
        return tid

    def event_id(self, trajectory_id: str, client_event_id: str) -> str:
        """The event id of a client-chosen id (a span id, or a re-ingested event's id) in a resolved
        trajectory: a UUID (version 8) derived from both, so it is stable across re-sent exports and
        never equal to another trajectory's (nor to a generated UUIDv7)."""
        raw = bytearray(hashlib.sha256(f"{trajectory_id}:{client_event_id}".encode()).digest()[:16])
        raw[6] = (raw[6] & 0x0F) | 0x80  # UUID version 8 (custom), RFC 9562
        raw[8] = (raw[8] & 0x3F) | 0x80
        return str(uuid.UUID(bytes=bytes(raw)))
