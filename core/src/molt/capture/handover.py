"""Recording through a running gateway: the trajectory's one writer is ``molt serve``.

A trajectory's events form one hash chain, and a chain has one writer: the Recorder that holds its head.
When a second process adds to a trajectory the gateway writes — an MCP server joining the trajectory the
gateway named in ``_meta``, an adapter whose model calls go through the gateway — a Recorder of its own
would continue the chain from a head it read earlier and fork it (``molt verify`` then fails, and replay
refuses the trajectory). :class:`GatewayRecorder` is the Recorder to give that process instead: it hands
each event to the gateway (``POST /v1/traces``, each event whole in a ``molt.event`` span), and the
gateway's own Recorder appends them in the order they come, governed like the gateway's own and stamped
with the caller's tenant (a key's tenant; ``X-Molt-Tenant`` only where the key allows it).

An adapter's run joins the gateway's trajectory by its model calls (each names the call it saw answered:
:data:`molt.capture.adapt.CALL_ID_TAG`, see :mod:`molt.gateway.joins`), so the events of a trajectory
that has had no model call yet wait, up to ``hold_s``, for its first one and go right after it (a graph's
start step ends before the model answers); :meth:`flush` sends them at once.

Fail open for the agent: ``record()`` is a deque append; a sender thread posts batches, retries a gateway
that is down for ``retry_s``, then drops and counts (``stats``). Nothing is spooled on this side: what the
gateway has not accepted is not durable.

Example::

    from molt.capture.handover import GatewayRecorder
    from molt_mcp import MoltMiddleware

    recorder = GatewayRecorder("http://127.0.0.1:8000", api_key="sk-local")
    server = MCPServer("kb", middleware=[MoltMiddleware(recorder, tenant_id="acme", agent_id="kb")])
"""

from __future__ import annotations

import collections
import hashlib
import logging
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from molt.atdp.ids import new_id
from molt.atdp.models import Event, EventKind, RewardAnnotation
from molt.atdp.otel import event_to_span

__all__ = ["HandoverStats", "GatewayRecorder"]

log = logging.getLogger("molt.capture")

#: Events per POST (the gateway's body limit is far above this many typical events).
_BATCH = 256


@dataclass(frozen=True)
class HandoverStats:
    """Counters since the GatewayRecorder opened."""

    enqueued: int
    #: events the gateway accepted (its Recorder holds them from then on)
    accepted: int
    #: events the gateway answered as rejected (a malformed event), with the first reason
    rejected: int
    #: events dropped: queue full, closed, or the gateway unreachable past ``retry_s``
    dropped: int
    pending: int
    last_error: str | None

    def as_dict(self) -> dict[str, Any]:
        """The counters as a plain dict."""
        return asdict(self)


class GatewayRecorder:
    """A Recorder for a process whose trajectories the gateway also writes: every event is handed to the
    gateway at ``url``, which appends it (see the module docstring).

    Args:
        url: the gateway's base URL (``http://127.0.0.1:8000``; a trailing ``/v1`` is accepted).
        api_key: the key to send (``Authorization: Bearer``); any value on an open gateway.
        max_queue: events held while the gateway is slow (default 100,000); past it they are dropped.
        retry_s: how long a batch is retried while the gateway is unreachable or failing (default 30 s).
        timeout_s: one POST's timeout (default 10 s).
        hold_s: how long the events of a trajectory with no model call yet wait for its first one
            (default 5 s; 0 sends each at once: an MCP server, whose events name the gateway's
            trajectory themselves).
    """

    #: Tells adapters that this recorder's events reach the gateway's own trajectories: an adapter may
    #: join the trajectory the gateway answered a model call in (one record per run, one writer).
    hands_to_gateway = True

    def __init__(self, url: str, *, api_key: str | None = None, max_queue: int = 100_000,
                 retry_s: float = 30.0, timeout_s: float = 10.0, hold_s: float = 5.0):
        import httpx

        base = url.rstrip("/")
        if base.endswith("/v1"):
            base = base[:-3]
        if not base.startswith(("http://", "https://")):
            raise ValueError(f"GatewayRecorder needs the gateway's http(s) URL, got {url!r}.")
        self.url = base + "/v1/traces"
        self.api_key = api_key
        self.max_queue = max_queue
        self.retry_s = retry_s
        self.hold_s = hold_s
        # trajectory -> (first held at, events) while it has had no model call; then the trajectories
        # that had one (the newest), whose events go at once
        self._held: dict[str, tuple[float, list[Event]]] = {}
        self._n_held = 0
        self._called: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._client = httpx.Client(timeout=timeout_s)
        self._queue: collections.deque[Event] = collections.deque()
        self._cond = threading.Condition()
        self._enqueued = self._accepted = self._rejected = self._dropped = 0
        self._handled = 0  # events taken off the queue and settled (accepted, rejected or dropped)
        self._last_error: str | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="molt-handover", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ caller side

    def record(self, event: Event) -> bool:
        """Queue ``event`` for the gateway; False when it was dropped (queue full or closed)."""
        with self._cond:
            if self._closed or len(self._queue) + self._n_held >= self.max_queue:
                self._dropped += 1
                self._handled += 1
                self._enqueued += 1
                return False
            self._enqueued += 1
            tid = event.trajectory_id
            if event.kind == EventKind.MODEL_CALL:
                self._called[tid] = None
                self._called.move_to_end(tid)
                if len(self._called) > 100_000:
                    self._called.popitem(last=False)
                self._queue.append(event)
                self._release(tid)
            elif self.hold_s > 0 and tid not in self._called:
                self._held.setdefault(tid, (time.monotonic(), []))[1].append(event)
                self._n_held += 1
            else:
                self._queue.append(event)
            self._cond.notify_all()
        return True

    def _release(self, tid: str | None = None, older_than: float | None = None) -> None:
        """Queue held events (under the lock): of ``tid``, of trajectories held since before
        ``older_than``, or all."""
        if tid is not None:
            keys = [tid] if tid in self._held else []
        else:
            keys = [t for t, (at, _) in self._held.items() if older_than is None or at < older_than]
        for t in keys:
            _, events = self._held.pop(t)
            self._n_held -= len(events)
            self._queue.extend(events)

    def reward(self, annotation: RewardAnnotation) -> bool:
        """Late rewards go to the gateway's feedback API (``/v1/molt/rewards/…``), not through here."""
        return False

    def new_trajectory(self) -> str:
        """A new trajectory id (the gateway finds no head for it and starts its chain)."""
        return new_id()

    def announce_trajectory(self, trajectory_id: str) -> None:
        """Nothing to do: the gateway's Recorder keeps the chain heads."""

    def flush(self, timeout: float | None = 10.0, *, deliver: bool = False) -> bool:
        """Wait until every event queued before this call was accepted by the gateway (True), or
        settled otherwise, or ``timeout`` passed (False). ``deliver`` is accepted for the Recorder's
        signature: an accepted event is the gateway's to make durable."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._release()  # a run that ended without a model call: its events wait no longer
            self._cond.notify_all()
            target = self._enqueued
            dropped_before = self._dropped + self._rejected
            while self._handled < target:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(min(0.05, remaining) if remaining is not None else 0.05)
            return self._dropped + self._rejected == dropped_before

    def close(self, timeout: float | None = 10.0) -> None:
        """Send what is queued (up to ``timeout``), then stop."""
        self.flush(timeout)
        with self._cond:
            self._release()
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)
        self._client.close()

    def __enter__(self) -> GatewayRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def stats(self) -> HandoverStats:
        """Current counters."""
        with self._cond:
            return HandoverStats(self._enqueued, self._accepted, self._rejected, self._dropped,
                                 len(self._queue) + self._n_held, self._last_error)

    # ------------------------------------------------------------------ sender thread

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait(0.5)
                    if self._held:
                        self._release(older_than=time.monotonic() - self.hold_s)
                if not self._queue and self._closed:
                    return
                batch = [self._queue.popleft() for _ in range(min(_BATCH, len(self._queue)))]
            accepted, rejected = self._send(batch)
            with self._cond:
                self._accepted += accepted
                self._rejected += rejected
                self._dropped += len(batch) - accepted - rejected
                self._handled += len(batch)
                self._cond.notify_all()

    def _send(self, batch: list[Event]) -> tuple[int, int]:
        """Post ``batch`` in order, one request per tenant run (the tenant travels in ``X-Molt-Tenant``);
        ``(accepted, rejected)``."""
        accepted = rejected = 0
        runs: list[tuple[str | None, list[Event]]] = []
        for ev in batch:
            tenant = ev.metadata.tenant_id
            if runs and runs[-1][0] == tenant:
                runs[-1][1].append(ev)
            else:
                runs.append((tenant, [ev]))
        for tenant, events in runs:
            a, r = self._post(tenant, events)
            accepted += a
            rejected += r
        return accepted, rejected

    def _post(self, tenant: str | None, events: list[Event]) -> tuple[int, int]:
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        if tenant:
            headers["x-molt-tenant"] = tenant
        body = orjson.dumps(_request(events))
        deadline = time.monotonic() + self.retry_s
        delay = 0.1
        while True:
            try:
                r = self._client.post(self.url, content=body, headers=headers)
                if r.status_code == 200:
                    rejected = _rejected(r.content)
                    if rejected:
                        self._error(f"the gateway rejected {rejected} event(s): {r.text[:300]}")
                    return len(events) - rejected, rejected
                if r.status_code < 500 and r.status_code != 429:
                    # refused (bad key, another tenant, too large): retrying cannot help
                    self._error(f"the gateway answered {r.status_code}: {r.text[:300]}")
                    return 0, 0
                self._error(f"the gateway answered {r.status_code}: {r.text[:300]}")
            except Exception as exc:  # unreachable, timed out: retried below
                self._error(f"{type(exc).__name__}: {exc}")
            if time.monotonic() + delay > deadline or self._closed:
                return 0, 0
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _error(self, message: str) -> None:
        self._last_error = message[:500]
        log.warning("Molt could not hand events to the gateway at %s: %s", self.url, self._last_error)


def _hex(value: str, digits: int) -> str:
    h = value.replace("-", "").lower()
    if len(h) >= digits and all(c in "0123456789abcdef" for c in h[-digits:]):
        return h[-digits:] if digits == 16 else h[:digits]
    return hashlib.blake2b(value.encode(), digest_size=digits // 2).hexdigest()


def _request(events: list[Event]) -> dict[str, Any]:
    """An OTLP/JSON ExportTraceServiceRequest carrying each event whole (``molt.event``): the gateway's
    OTLP ingest records exactly that event, in the caller's tenant."""
    spans = []
    for ev in events:
        s = event_to_span(ev)
        spans.append({
            "traceId": _hex(ev.trajectory_id, 32),
            "spanId": _hex(ev.event_id, 16),
            "name": s.name,
            "startTimeUnixNano": str(s.start_time_unix_nano),
            "endTimeUnixNano": str(s.end_time_unix_nano or s.start_time_unix_nano),
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in s.attributes.items()
                           if k.startswith("molt.") and isinstance(v, str)],
        })
    return {"resourceSpans": [{"resource": {"attributes": []},
                               "scopeSpans": [{"scope": {"name": "molt.handover"}, "spans": spans}]}]}


def _rejected(content: bytes) -> int:
    try:
        doc = orjson.loads(content) if content else {}
    except orjson.JSONDecodeError:
        return 0
    part = (doc or {}).get("partialSuccess") or (doc or {}).get("partial_success") or {}
    try:
        return int(part.get("rejectedSpans") or part.get("rejected_spans") or 0)
    except (TypeError, ValueError):
        return 0
