"""Weight updates trained by a service in another process: the plane's decision is queued in the store, a
trainer service (``molt-trainer serve --plane-requests``) trains it through the same
:class:`~molt.control.weights.WeightLoop` as ``molt serve --train`` does in process, and the adapter becomes
a canary version of *that* agent, which the plane promotes or aborts like any other change.

The path of one request:

1. the plane decides a weight update for a cluster of ``tenant/agent`` and calls its ``trainer`` hook,
   here a :class:`WeightQueue`: the candidate (its cluster, task and source trajectories) is appended to the
   ``weight_requests`` table as *queued*, and the hook returns the request id, which the decision log
   records ("weight update requested from the trainer (request wq-…)"). The plane does not ask again for
   that cluster while :meth:`WeightQueue.outstanding` says the request is open (queued, training, or its
   canary not judged yet); should it ask anyway, the hook returns the open request rather than queueing
   a second run;
2. :func:`serve_requests` (the service's loop) claims each queued request of its tenant (and agent, when it
   serves one), rebuilds the candidate, and calls the weight loop: the trajectories are read through the
   governance training queue (eligible and redacted only), the run trains, the adapter is checked and
   loaded into the serving backends through the gateway's admin API;
3. the adapter becomes a canary composite version (the live parts, these weights) of ``tenant/agent``,
   named by the request; the request is *done* with that version, or *failed* with the reason (no
   eligible data, a run that raised, an adapter the engine refused: no version names the adapter, so
   nothing half-published is routed to);
4. the plane of ``molt serve`` sees the canary in the registry and judges it on the canary's traffic.

Rows are append-only: each state is a new row, and a request's state is its newest row, so the history of
a request (queued, running, done/failed) stays readable and no row is ever rewritten. One service claims a
tenant's requests: two services claiming the same request would each see it queued (a claim is a row, not
a lock) and train it twice; run one service per store (it serves every tenant, taking turns:
:func:`next_request`), or one per tenant or per agent. A request left *running* longer than
``stale_after_s`` (its service died mid-run) is queued again: a later service claims it, and the plane's
wait for it ends.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

from molt.atdp.ids import new_id
from molt.control.approval import needs_approval
from molt.control.diagnose import Candidate
from molt.control.provenance import record_change
from molt.control.versions import ModelPart, VersionRegistry
from molt.errors import InterventionError, MoltError
from molt.store import Filter, Store
from molt.store.tables import append, ensure_table

__all__ = ["REQUESTS_SCHEMA", "REQUESTS_TABLE", "QueuedRequest", "WeightQueue", "next_request", "serve_requests"]

log = logging.getLogger("molt.control.weight_queue")

REQUESTS_TABLE = "weight_requests"
REQUESTS_SCHEMA = pa.schema([
    pa.field("row_id", pa.string(), nullable=False),
    pa.field("request_id", pa.string(), nullable=False),
    pa.field("tenant_id", pa.string(), nullable=False),
    pa.field("agent_id", pa.string(), nullable=False),
    pa.field("cluster", pa.string(), nullable=False),
    pa.field("status", pa.string(), nullable=False),   # queued | running | done | failed
    pa.field("detail", pa.string()),                   # done: the canary version; failed: the reason
    pa.field("candidate", pa.binary(), nullable=False),  # the plane's weight_update candidate (JSON)
    pa.field("created_at", pa.timestamp("us", tz="UTC"), nullable=False),
])

Status = Literal["queued", "running", "done", "failed"]


@dataclass(frozen=True)
class QueuedRequest:
    """A request's newest state."""

    request_id: str
    tenant_id: str
    agent_id: str
    cluster: str
    status: str
    detail: str | None
    candidate: dict[str, Any]
    updated_at: datetime


class WeightQueue:
    """The ``weight_requests`` table: the plane's ``trainer`` hook (``queue(tenant, agent, candidate)`` →
    the request id) and the service's view of it (:meth:`pending`, :meth:`claim`, :meth:`finish`)."""

    def __init__(self, store: Store, *, stale_after_s: float = 7200.0):
        self.store = store
        self.stale_after_s = stale_after_s
        self._table = ensure_table(store, REQUESTS_TABLE, REQUESTS_SCHEMA)

    def _stale(self, r: QueuedRequest) -> bool:
        """A claim older than ``stale_after_s``: the service that made it is gone (a run has a timeout)."""
        return r.status == "running" and (datetime.now(UTC) - r.updated_at).total_seconds() > self.stale_after_s

    def __call__(self, tenant_id: str, agent_id: str, cand: Candidate) -> str:
        """Queue ``cand`` (a ``weight_update`` of ``tenant_id/agent_id``); the open request of the same
        cluster when there is one (see the module docstring)."""
        for r in self.requests(tenant_id, agent_id):
            if r.cluster == cand.cluster and r.status in ("queued", "running"):
                return f"{r.request_id}, {r.status} since {r.updated_at:%H:%M:%S}"
        rid = "wq-" + new_id()[-12:]
        self._append(rid, tenant_id, agent_id, cand.cluster, "queued", None,
                     cand.model_dump(mode="json", exclude={"parts"}))
        return rid

    def requests(self, tenant_id: str | None = None, agent_id: str | None = None) -> list[QueuedRequest]:
        """Every request's newest state (of ``tenant_id`` / ``agent_id`` when given), oldest request first."""
        where = Filter.given(tenant_id=tenant_id, agent_id=agent_id)
        q = self._table.search()
        if where:
            q = q.where(str(where))
        rows = sorted(q.limit(None).to_arrow().to_pylist(), key=lambda r: r["created_at"])
        first: dict[str, datetime] = {}
        newest: dict[str, dict[str, Any]] = {}
        for r in rows:
            first.setdefault(r["request_id"], r["created_at"])
            newest[r["request_id"]] = r
        return [QueuedRequest(request_id=r["request_id"], tenant_id=r["tenant_id"], agent_id=r["agent_id"],
                              cluster=r["cluster"], status=r["status"], detail=r["detail"],
                              candidate=orjson.loads(r["candidate"]), updated_at=r["created_at"])
                for r in sorted(newest.values(), key=lambda r: first[r["request_id"]])]

    def outstanding(self, tenant_id: str, agent_id: str, model: dict[str, Any]) -> set[str]:
        """Clusters of ``tenant_id/agent_id`` whose weight update from ``model`` (the live model part, as
        JSON) is still open: queued, training, or done with its canary not yet judged. The plane asks
        again for a cluster whose request failed or whose canary was aborted."""
        registry: VersionRegistry | None = None
        out = set()
        for r in self.requests(tenant_id, agent_id):
            if (r.candidate.get("payload") or {}).get("model") != model or r.status == "failed" or self._stale(r):
                continue
            if r.status == "done":
                registry = registry or VersionRegistry(self.store)
                try:
                    if registry.get(r.detail or "", tenant_id=tenant_id).status != "canary":
                        continue
                except MoltError:
                    continue
            out.add(r.cluster)
        return out

    def pending(self, tenant_id: str | None = None, agent_id: str | None = None) -> list[QueuedRequest]:
        """The queued requests (and stale claims, see the module docstring), oldest first."""
        return [r for r in self.requests(tenant_id, agent_id) if r.status == "queued" or self._stale(r)]

    def claim(self, req: QueuedRequest) -> None:
        """Mark ``req`` as training."""
        self._append(req.request_id, req.tenant_id, req.agent_id, req.cluster, "running", None, req.candidate)

    def finish(self, req: QueuedRequest, status: Literal["done", "failed"], detail: str) -> None:
        """Mark ``req`` done (``detail``: the canary version) or failed (``detail``: why)."""
        self._append(req.request_id, req.tenant_id, req.agent_id, req.cluster, status, detail, req.candidate)

    def _append(self, rid: str, tenant_id: str, agent_id: str, cluster: str, status: Status, detail: str | None,
                candidate: dict[str, Any]) -> None:
        row = {"row_id": new_id(), "request_id": rid, "tenant_id": tenant_id, "agent_id": agent_id,
               "cluster": cluster, "status": status, "detail": detail,
               "candidate": orjson.dumps(candidate, default=str), "created_at": datetime.now(UTC)}
        append(self.store, REQUESTS_TABLE, pa.Table.from_pylist([row], schema=REQUESTS_SCHEMA))


def next_request(pending: Sequence[QueuedRequest], last_turn: Mapping[str, int]) -> QueuedRequest | None:
    """The request a service trains next, fairly across tenants: the oldest request of the tenant whose
    last turn is oldest (a tenant never served goes first; between those, the one whose oldest request
    came first). ``last_turn`` maps a tenant to the number of the run it last had. Round-robin over the
    tenants with work, so one tenant's backlog — however long, however fast it grows — delays another
    tenant's request by at most one run per other tenant waiting."""
    if not pending:
        return None
    oldest: dict[str, QueuedRequest] = {}
    for r in pending:  # oldest first
        oldest.setdefault(r.tenant_id, r)
    order = list(oldest)
    tenant = min(order, key=lambda t: (last_turn.get(t, -1), order.index(t)))
    return oldest[tenant]


def serve_requests(queue: WeightQueue, train: Callable[[str, str, Candidate], ModelPart], stop: threading.Event, *,
                   tenant_id: str | None = None, agent_id: str | None = None, canary_weight: float = 0.2,
                   poll_s: float = 5.0, actor: str = "molt-trainer", max_requests: int | None = None) -> int:
    """The service's loop: train each queued request of ``tenant_id`` (every tenant when ``None``) and
    ``agent_id`` (every agent when ``None``) with ``train`` (a :class:`~molt.control.weights.WeightLoop`),
    and canary its adapter at ``canary_weight`` as a version of that agent; until ``stop`` is set (or
    ``max_requests`` were answered). Requests of several tenants take turns (:func:`next_request`); the
    queue is read again after every run, so a request queued meanwhile takes its turn at once. Returns
    the number of requests answered."""
    registry = VersionRegistry(queue.store)
    answered = 0
    last_turn: dict[str, int] = {}
    while not stop.is_set() and (max_requests is None or answered < max_requests):
        req = next_request(queue.pending(tenant_id, agent_id), last_turn)
        if req is None:
            stop.wait(poll_s)
            continue
        queue.claim(req)
        last_turn[req.tenant_id] = answered
        try:
            version = _train_one(req, train, registry, canary_weight, actor)
        except Exception as exc:  # a failed run is the request's outcome; the service goes on
            why = str(exc) if isinstance(exc, InterventionError) else f"{type(exc).__name__}: {exc}"
            log.warning("Weight request %s of %s/%s failed: %s", req.request_id, req.tenant_id, req.agent_id, why)
            queue.finish(req, "failed", why)
        else:
            log.info("Weight request %s of %s/%s: canary %s", req.request_id, req.tenant_id, req.agent_id, version)
            queue.finish(req, "done", version)
        answered += 1
    return answered


def _train_one(req: QueuedRequest, train: Callable[[str, str, Candidate], ModelPart], registry: VersionRegistry,
               canary_weight: float, actor: str) -> str:
    cand = Candidate.model_validate(req.candidate)
    part = train(req.tenant_id, req.agent_id, cand)
    live = registry.live(req.tenant_id, req.agent_id)
    if live is None:
        raise InterventionError(f"{req.tenant_id}/{req.agent_id} has no live version to canary adapter "
                                f"{part.adapter} against; nothing routed to it")
    v = registry.create(req.tenant_id, req.agent_id, live.parts.with_model(part), parent=live.version_id,
                        created_by=actor, note=f"weight_update: request {req.request_id}, adapter {part.adapter}")
    record_change(registry.store, v, live, [], kind="weight_update")  # the adapter's lineage, from its manifest
    why = f"weight update request {req.request_id} ({req.cluster}): adapter {part.adapter}"
    mode = cand.payload.get("approval")
    if isinstance(mode, str) and needs_approval(mode, cand.kind):
        # The plane ran under approval mode: the trained adapter waits for an operator like any other change.
        from molt.control.approval import Proposals

        Proposals(registry.store, registry).record(
            v, kind=cand.kind, cluster=cand.cluster, payload=cand.payload, description=cand.description,
            evidence={"candidate": cand.model_dump(mode="json", exclude={"parts"}),
                      "request": {"request_id": req.request_id, "adapter": part.adapter}},
            actor=actor, reason=why)
        return v.version_id
    v = registry.canary(v.version_id, canary_weight, actor=actor, reason=why)
    return v.version_id
