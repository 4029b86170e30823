"""One record per run when an adapter and the gateway both see it: the adapter's events join the gateway's
trajectory.

An agent whose model is pointed at the gateway *and* that has its framework's adapter attached is seen
twice: the gateway records each model call (with the token trace and the version that served it), the
adapter records the run around it (its steps, tool calls, and the model calls again). The adapter records
through :class:`molt.capture.handover.GatewayRecorder`, so its events reach this gateway; each of its
model-call events names the call it saw answered — the response id (``chatcmpl-…``, ``resp_…``,
``msg_…``) in the :data:`~molt.capture.adapt.CALL_ID_TAG` tag. :class:`CallJoins` then, per handed-over
event:

- a model call this gateway served *to the same tenant* is already recorded (by the gateway, with what
  only it knows): the adapter's copy is not recorded again, and the adapter's trajectory is from then on
  an alias of the gateway's;
- any other event of an aliased trajectory is re-homed into the gateway's trajectory (and a parent naming
  a model call the gateway recorded names the gateway's event);
- everything else passes as it came (a model the gateway did not serve, another tenant's call: the wall
  holds, and that run stays two records rather than cross it).

The gateway is then the trajectory's one writer. The tenant is the caller's (its key's, or its
``X-Molt-Tenant`` where the key allows it), so an adapter's run joins only calls it made as that tenant:
the model client sends the adapter's tenant and agent (``handler.gateway_headers()``).

Aliases are remembered for ``max_aliases`` trajectories (the most recent); a run whose first model call
fell out of the gateway's memory (``Sessions``: ``max_sessions``) is not joined.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from molt.atdp.models import Event, EventKind
from molt.capture.adapt import CALL_ID_TAG

__all__ = ["CallJoins"]

_PREFIXES = ("chatcmpl-", "cmpl-", "resp_", "msg_")


def _event_id(call_id: str) -> str:
    for prefix in _PREFIXES:
        if call_id.startswith(prefix):
            return call_id[len(prefix):]
    return call_id


class CallJoins:
    """The join of handed-over events with the gateway's own trajectories (see the module docstring);
    ``join(event, tenant)`` is the hook :class:`molt.capture.otlp.OtlpIngest` calls. Thread-safe."""

    def __init__(self, sessions: Any, *, max_aliases: int = 100_000):
        self.sessions = sessions
        self.max_aliases = max_aliases
        # (tenant, adapter's trajectory id) -> the gateway's trajectory id
        self._alias: OrderedDict[tuple[str, str], str] = OrderedDict()
        # (tenant, adapter's model-call event id) -> the gateway's event id of that call
        self._events: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._lock = threading.Lock()
        self.joined = 0  # adapter model calls the gateway had recorded already

    def join(self, event: Event, tenant: str | None) -> Event | None:
        """``event`` as the gateway records it: re-homed into the gateway's trajectory, or ``None`` when
        it is a model call the gateway recorded itself."""
        owner = tenant or event.metadata.tenant_id or ""
        tags = event.metadata.tags or {}
        call = tags.get(CALL_ID_TAG)
        if event.kind == EventKind.MODEL_CALL and isinstance(call, str) and call:
            eid = _event_id(call)
            st = self.sessions.by_event(owner, eid)
            if st is not None:
                with self._lock:
                    self._remember(self._alias, (owner, event.trajectory_id), st.trajectory_id)
                    self._remember(self._events, (owner, event.event_id), eid)
                    self.joined += 1
                return None
        with self._lock:
            tid = self._alias.get((owner, event.trajectory_id))
            parent = self._events.get((owner, event.parent_id)) if event.parent_id else None
        if tid is None and parent is None:
            return event
        update: dict[str, Any] = {}
        if tid is not None:
            update.update(trajectory_id=tid, seq=None)
        if parent is not None:
            update["parent_id"] = parent
        return event.model_copy(update=update)

    def _remember(self, table: OrderedDict[Any, str], key: Any, value: str) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > self.max_aliases:
            table.popitem(last=False)
