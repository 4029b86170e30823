"""Which trajectory a model call belongs to, and what is new in it since the last call.

An agent that only changed its base URL sends no session id. It does send its whole conversation on
every call, and each call's messages start with the previous call's messages plus the answer the
gateway gave. So the gateway hashes conversations as chains (``h_i = H(h_{i-1}, message_i)``, seeded
with the tenant) and indexes the chain hash of every answer it served: a request whose prefix ends in
a served answer continues that answer's trajectory, and the messages after the prefix (tool results,
the user's next turn) are what happened in between. Explicit ids take precedence:

1. ``X-Molt-Trajectory`` (or ``metadata.trajectory_id``): that trajectory;
2. ``X-Molt-Session`` (or the ``user`` field, or ``metadata.session_id``): the session's current
   trajectory, until it is ended;
3. otherwise the prefix match above, or a new trajectory.

All state is in LRU maps on the event loop's thread (no locks), bounded in size and in idle time (runs
that never end are forgotten); a trajectory the gateway no longer remembers simply starts a new chain of
calls, and its events still carry their ids.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import orjson

from molt.backends.chat_format import text_content

__all__ = ["CallRef", "IdleLRU", "Resolution", "Sessions", "TrajectoryState", "normalize_arguments"]

K = TypeVar("K")
V = TypeVar("V")


class IdleLRU(Generic[K, V]):
    """A map bounded by size and by idle time: ``put`` evicts the least recently used entries past
    ``limit`` and those not used for ``idle_s`` seconds (both from the front of the access order, so
    eviction is O(1) per entry)."""

    def __init__(self, limit: int, idle_s: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.limit = limit
        self.idle_s = idle_s
        self.clock = clock
        self.data: OrderedDict[K, tuple[V, float]] = OrderedDict()

    def get(self, key: K) -> V | None:
        hit = self.data.get(key)
        if hit is None:
            return None
        now = self.clock()
        if self.idle_s is not None and now - hit[1] > self.idle_s:
            del self.data[key]  # idle past the window: as if already evicted
            return None
        self.data[key] = (hit[0], now)
        self.data.move_to_end(key)
        return hit[0]

    def put(self, key: K, value: V) -> None:
        now = self.clock()
        self.data[key] = (value, now)
        self.data.move_to_end(key)
        if len(self.data) > self.limit:
            self.data.popitem(last=False)
        if self.idle_s is not None:
            cutoff = now - self.idle_s
            while self.data:
                oldest = next(iter(self.data.values()))
                if oldest[1] >= cutoff:
                    break
                self.data.popitem(last=False)

    def pop(self, key: K) -> V | None:
        hit = self.data.pop(key, None)
        return None if hit is None else hit[0]

    def __len__(self) -> int:
        return len(self.data)


#: Model-call event ids a trajectory keeps in memory (the newest): rewarding a longer trajectory's
#: earlier calls reads them from the store.
MAX_CALLS_KEPT = 256


@dataclass(slots=True)
class TrajectoryState:
    """What the gateway remembers of a trajectory it serves."""

    trajectory_id: str
    tenant_id: str
    session_id: str | None
    route_key: str
    fresh: bool = True
    last_event_id: str | None = None
    #: The newest model-call event ids, oldest first (at most :data:`MAX_CALLS_KEPT`).
    calls: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_CALLS_KEPT))
    #: Model calls the trajectory had through this gateway (``len(calls)`` until the deque is full).
    n_calls: int = 0
    ended: bool = False

    @property
    def calls_truncated(self) -> bool:
        """Whether earlier calls fell out of :attr:`calls` (the store has them all)."""
        return self.n_calls > len(self.calls)


@dataclass(slots=True)
class CallRef:
    """A served answer: its trajectory, event, and how many messages the conversation had with it."""

    state: TrajectoryState
    event_id: str
    length: int


@dataclass(slots=True)
class Resolution:
    """Where a request goes in the trajectory record.

    ``parent_id`` is the event the new call follows (the answer whose conversation it continues);
    ``new_from`` is the index of the first request message the gateway has not seen before.
    """

    state: TrajectoryState
    parent_id: str | None
    new_from: int
    tip: bytes
    continued: bool
    length: int = 0


def normalize_arguments(arguments: Any) -> Any:
    """Tool-call arguments as a JSON value (frameworks re-serialize them with other spacing)."""
    if isinstance(arguments, str):
        try:
            return orjson.loads(arguments) if arguments.strip() else {}
        except orjson.JSONDecodeError:
            return arguments
    return arguments


def _norm(m: dict[str, Any]) -> bytes:
    role = m.get("role")
    if role == "developer":
        role = "system"
    calls = [[(c.get("function") or {}).get("name"), normalize_arguments((c.get("function") or {}).get("arguments"))]
             for c in m.get("tool_calls") or ()]
    return orjson.dumps([role, text_content(m.get("content")), calls], option=orjson.OPT_SORT_KEYS)


def _step(h: bytes, m: dict[str, Any]) -> bytes:
    return hashlib.blake2b(h + _norm(m), digest_size=16).digest()


class Sessions:
    """Trajectory resolution for the gateway (see the module docstring).

    Args:
        new_id: makes trajectory ids (the Recorder's ``new_trajectory``, so fresh chains skip a
            store lookup).
        max_entries: bound of each LRU map (default 200,000).
        idle_s: entries not used for this many seconds are forgotten (default 1,800; ``None``: only
            the size bound). An agent run that never ends its trajectory (a crashed client, a
            framework that never says it is done) is orphaned: without an idle bound its state stays
            until the maps are full, so the gateway's memory grows for as long as that takes.
        clock: monotonic seconds (tests).
    """

    def __init__(self, new_id: Callable[[], str], *, max_entries: int = 200_000, idle_s: float | None = 1800.0,
                 clock: Callable[[], float] = time.monotonic):
        self._new_id = new_id
        self._answers: IdleLRU[bytes, CallRef] = IdleLRU(max_entries, idle_s, clock)
        self._by_tid: IdleLRU[tuple[str, str], TrajectoryState] = IdleLRU(max_entries, idle_s, clock)
        self._by_session: IdleLRU[tuple[str, str], TrajectoryState] = IdleLRU(max_entries, idle_s, clock)
        self._by_event: IdleLRU[str, TrajectoryState] = IdleLRU(max_entries, idle_s, clock)

    def _new_state(self, tenant: str, session: str | None, tid: str | None = None) -> TrajectoryState:
        fresh = tid is None
        tid = tid or self._new_id()
        st = TrajectoryState(trajectory_id=tid, tenant_id=tenant, session_id=session,
                             route_key=session or tid, fresh=fresh)
        self._by_tid.put((tenant, tid), st)
        if session is not None:
            self._by_session.put((tenant, session), st)
        return st

    def resolve(self, tenant: str, messages: list[dict[str, Any]], *, session_id: str | None = None,
                trajectory_id: str | None = None) -> Resolution:
        """The trajectory, parent event and first new message of a request."""
        n = len(messages)
        h = hashlib.blake2b(tenant.encode(), digest_size=16).digest()
        chain = []
        for m in messages:
            h = _step(h, m)
            chain.append(h)
        match: CallRef | None = None
        for j in range(len(messages) - 1, -1, -1):
            if messages[j].get("role") == "assistant":
                ref = self._answers.get(chain[j])
                if ref is not None and not ref.state.ended and ref.state.tenant_id == tenant:
                    match = ref
                    break
        after_last_assistant = next((j + 1 for j in range(len(messages) - 1, -1, -1)
                                     if messages[j].get("role") == "assistant"), 0)

        if trajectory_id is not None:
            st = self._by_tid.get((tenant, trajectory_id))
            if st is None:
                st = self._new_state(tenant, session_id, trajectory_id)
            if match is not None and match.state is st:
                return Resolution(st, match.event_id, match.length, h, True, n)
            return Resolution(st, st.last_event_id, after_last_assistant if st.calls else 0, h, bool(st.calls), n)

        if session_id is not None:
            st = self._by_session.get((tenant, session_id))
            if st is not None and not st.ended:
                if match is not None and match.state is st:
                    return Resolution(st, match.event_id, match.length, h, True, n)
                return Resolution(st, st.last_event_id, after_last_assistant, h, True, n)
            if match is not None and match.state.session_id == session_id:
                return Resolution(match.state, match.event_id, match.length, h, True, n)
            return Resolution(self._new_state(tenant, session_id), None, 0, h, False, n)

        if match is not None:
            return Resolution(match.state, match.event_id, match.length, h, True, n)
        return Resolution(self._new_state(tenant, None), None, 0, h, False, n)

    def register(self, res: Resolution, replies: list[dict[str, Any]], event_ids: list[str]) -> None:
        """Remember served answers (one per choice), so the next turn finds its trajectory."""
        for reply, eid in zip(replies, event_ids, strict=True):
            self._answers.put(_step(res.tip, reply), CallRef(res.state, eid, res.length + 1))
        self.note_call(res.state, event_ids)

    def note_call(self, state: TrajectoryState, event_ids: list[str]) -> None:
        """Record that ``state`` got a model call with these event ids (one per choice)."""
        for eid in event_ids:
            self._by_event.put(eid, state)
        if event_ids:
            state.calls.append(event_ids[0])
            state.n_calls += 1
            state.last_event_id = event_ids[0]
        state.fresh = False

    def by_event(self, tenant: str, event_id: str) -> TrajectoryState | None:
        """The trajectory of a model-call event of ``tenant`` (if remembered)."""
        st = self._by_event.get(event_id)
        return st if st is not None and st.tenant_id == tenant else None

    def trajectory(self, tenant: str, trajectory_id: str) -> TrajectoryState | None:
        """A remembered trajectory of ``tenant``."""
        return self._by_tid.get((tenant, trajectory_id))

    def session(self, tenant: str, session_id: str) -> TrajectoryState | None:
        """The current trajectory of a session of ``tenant``."""
        return self._by_session.get((tenant, session_id))

    def end(self, state: TrajectoryState) -> None:
        """Mark a trajectory ended: its session's next call starts a new one."""
        state.ended = True
        if state.session_id is not None:
            cur = self._by_session.get((state.tenant_id, state.session_id))
            if cur is state:
                self._by_session.pop((state.tenant_id, state.session_id))

