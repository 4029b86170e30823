"""Cassettes: recorded tool calls, retrievals and memory reads answered again during a replay.

Every ``TOOL_CALL``, ``RETRIEVAL`` and ``MEMORY_READ`` event keeps its request (tool name and
arguments, query and index, key or query) and its outcome. A :class:`Cassette` indexes them so a
replay can ask the same question and get the recorded answer instead of re-querying the world:

1. **exact match** — the request's canonical JSON (keys sorted, so key order never matters) equals a
   recorded one;
2. **normalised match** — the declared :class:`Normalization` (by default: ignore id and timestamp
   fields, trim and collapse whitespace in strings) makes them equal;
3. otherwise the replay has **left the recording** (a cache miss). The miss is always reported
   (:attr:`Cassette.misses`); then a live, sandboxed tool the user registered answers
   (:class:`LiveTools`), or the branch stops as *unknown* (:class:`CassetteMiss` is raised). An outcome
   is never invented.

A request recorded several times answers with its recordings in order (then repeats the last), so
polling a tool replays faithfully.

Example::

    cassette = Cassette.from_events(trajectory.events)
    hit = cassette.tool("lookup_order", {"order_id": "A-17"})   # Hit(outcome=Outcome(...), match="exact")
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from molt.atdp.models import Event, EventKind, Outcome, OutcomeStatus, Passage
from molt.errors import ReplayError

__all__ = ["Cassette", "CassetteMiss", "Hit", "LiveTools", "Miss", "Normalization", "request_key"]

Channel = Literal["tool", "retrieval", "memory"]


class Normalization(BaseModel):
    """The declared normalisation applied when an exact match fails.

    Fields:

    - ``ignore_keys``: object keys dropped at any depth (default: common id and time fields).
    - ``ignore_key_pattern``: a regex; keys matching it are dropped too (default: ``*_id``, ``*_at``,
      ``*timestamp*``). ``None`` disables it.
    - ``collapse_whitespace``: strings are trimmed and inner runs of whitespace become one space
      (default True).
    - ``casefold``: strings compare case-insensitively (default False: case often matters).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ignore_keys: frozenset[str] = Field(default=frozenset(
        {"id", "call_id", "request_id", "trace_id", "span_id", "timestamp", "ts", "time", "now", "nonce"}))
    ignore_key_pattern: str | None = r"(_id|_at|_ts)$|timestamp"
    collapse_whitespace: bool = True
    casefold: bool = False

    def apply(self, value: Any) -> Any:
        """``value`` with the normalisation applied (a new object)."""
        pat = re.compile(self.ignore_key_pattern) if self.ignore_key_pattern else None
        return self._norm(value, pat)

    def _norm(self, value: Any, pat: re.Pattern[str] | None) -> Any:
        if isinstance(value, dict):
            return {k: self._norm(v, pat) for k, v in value.items()
                    if k not in self.ignore_keys and not (pat is not None and pat.search(k))}
        if isinstance(value, list | tuple):
            return [self._norm(v, pat) for v in value]
        if isinstance(value, str):
            s = " ".join(value.split()) if self.collapse_whitespace else value
            return s.casefold() if self.casefold else s
        return value


def request_key(channel: Channel, name: str, request: Any) -> bytes:
    """The exact-match key of a request: channel, name and the canonical JSON of its arguments."""
    return orjson.dumps([channel, name, request], option=orjson.OPT_SORT_KEYS)


@dataclass(frozen=True, slots=True)
class Hit:
    """A request answered from the recording (``match`` says how), or live (``match="live"``)."""

    outcome: Outcome
    match: Literal["exact", "normalized", "live"]
    event_id: str | None = None
    passages: list[Passage] | None = None


@dataclass(frozen=True, slots=True)
class Miss:
    """A request the recording cannot answer: the replay left the recording here."""

    channel: Channel
    name: str
    request: Any
    resolution: Literal["live", "unknown"]
    nearest: str | None = None  # the recorded request of the same name, for the report

    def describe(self) -> str:
        """One sentence for reports and the CLI."""
        req = orjson.dumps(self.request, option=orjson.OPT_SORT_KEYS).decode()
        s = f"left the recording: {self.channel} {self.name!r} with {req} was never recorded"
        if self.nearest is not None:
            s += f" (recorded: {self.nearest})"
        return s + ("; answered by the registered live tool." if self.resolution == "live"
                    else "; no live tool is registered, so this branch stops as unknown.")


class CassetteMiss(ReplayError):
    """A replay asked for something the recording does not hold and no live tool can answer.

    The branch's outcome is *unknown*; the episode runner catches this and reports it. ``miss`` is the
    :class:`Miss`.
    """

    def __init__(self, message: str, *, miss: Miss | None = None, trajectory_id: str | None = None,
                 event_id: str | None = None):
        super().__init__(message, trajectory_id=trajectory_id, event_id=event_id)
        self.miss = miss


class LiveTools:
    """Live, sandboxed tools the user registers to answer requests that leave the recording.

    A tool is a callable taking the request's arguments as keywords and returning JSON-able output;
    an exception becomes an error outcome (never a crash of the replay). Registering is an explicit
    act: by default nothing live is ever called.

    Example::

        live = LiveTools()
        live.register("add", lambda a, b: a + b)
    """

    def __init__(self) -> None:
        self._tools: dict[tuple[Channel, str], Callable[..., Any]] = {}

    def register(self, name: str, fn: Callable[..., Any], *, channel: Channel = "tool") -> None:
        """Answer ``channel`` requests for ``name`` with ``fn`` when the recording cannot."""
        self._tools[(channel, name)] = fn

    def get(self, channel: Channel, name: str) -> Callable[..., Any] | None:
        """The registered callable, or ``None``."""
        return self._tools.get((channel, name))

    def names(self, channel: Channel = "tool") -> set[str]:
        """Registered names on ``channel``."""
        return {n for c, n in self._tools if c == channel}

    def call(self, channel: Channel, name: str, request: Any) -> Outcome:
        """Run the live tool and turn its result (or exception) into an :class:`Outcome`."""
        fn = self._tools[(channel, name)]
        try:
            out = fn(**request) if isinstance(request, dict) else fn(request)
        except Exception as exc:  # a sandboxed tool failing is an outcome, as in the recording
            from molt.atdp.models import ErrorInfo

            return Outcome(status=OutcomeStatus.ERROR, error=ErrorInfo(type=type(exc).__name__, message=str(exc)))
        # The store keeps outputs as canonical JSON (sorted keys): hand the agent exactly that, so a
        # recording made live and its replay from the cassette see byte-identical outputs.
        return Outcome(status=OutcomeStatus.OK, output=orjson.loads(orjson.dumps(out, option=orjson.OPT_SORT_KEYS)))


@dataclass
class _Slot:
    entries: list[tuple[Outcome, str, list[Passage] | None]] = field(default_factory=list)
    served: int = 0

    def next(self) -> tuple[Outcome, str, list[Passage] | None]:
        e = self.entries[min(self.served, len(self.entries) - 1)]
        self.served += 1
        return e


class Cassette:
    """Recorded requests → outcomes, with exact then normalised matching (see the module docstring).

    Args:
        normalization: the declared normalisation for the second matching pass.
        live: live tools for requests that leave the recording (``None``: misses stop as unknown).
        trajectory_id: named in miss errors.
    """

    def __init__(self, *, normalization: Normalization | None = None, live: LiveTools | None = None,
                 trajectory_id: str | None = None):
        self.normalization = normalization or Normalization()
        self.live = live
        self.trajectory_id = trajectory_id
        self._exact: dict[bytes, _Slot] = {}
        self._norm: dict[bytes, _Slot] = {}
        self._by_name: dict[tuple[str, str], Any] = {}
        self.misses: list[Miss] = []
        self.hits: dict[str, int] = {"exact": 0, "normalized": 0, "live": 0}
        self._lock = threading.Lock()

    @classmethod
    def from_events(cls, events: Iterable[Event], **kwargs: Any) -> Cassette:
        """A cassette holding every tool call, retrieval and memory read of ``events``."""
        cas = cls(**kwargs)
        for ev in events:
            cas.add_event(ev)
        return cas

    def add(self, channel: Channel, name: str, request: Any, outcome: Outcome, *, event_id: str | None = None,
            passages: list[Passage] | None = None) -> None:
        """Record one request and its outcome."""
        entry = (outcome, event_id or "", passages)
        self._exact.setdefault(request_key(channel, name, request), _Slot()).entries.append(entry)
        nk = request_key(channel, name, self.normalization.apply(request))
        self._norm.setdefault(nk, _Slot()).entries.append(entry)
        self._by_name.setdefault((channel, name), request)

    def add_event(self, ev: Event) -> None:
        """Index ``ev`` when it is a tool call, retrieval or memory read (others are ignored)."""
        a = ev.action
        if ev.kind == EventKind.TOOL_CALL and a is not None and a.type == "tool_call":
            self.add("tool", a.tool_name, a.arguments, ev.outcome or Outcome(), event_id=ev.event_id)
        elif ev.kind == EventKind.RETRIEVAL and a is not None and a.type == "retrieval":
            passages = list(ev.observation.passages or []) if ev.observation is not None else []
            out = ev.outcome or Outcome(output=[p.model_dump(mode="json", exclude_none=True) for p in passages])
            self.add("retrieval", a.index or "", {"query": a.query, "top_k": a.top_k}, out,
                     event_id=ev.event_id, passages=passages)
        elif ev.kind == EventKind.MEMORY_READ and a is not None and a.type == "memory_read":
            self.add("memory", a.key or "", {"query": a.query}, ev.outcome or Outcome(), event_id=ev.event_id)

    def __len__(self) -> int:
        return sum(len(s.entries) for s in self._exact.values())

    def knows(self, channel: Channel, name: str) -> bool:
        """Whether anything named ``name`` was recorded on ``channel``."""
        return (channel, name) in self._by_name

    def lookup(self, channel: Channel, name: str, request: Any) -> Hit:
        """The recorded answer to a request, a live answer, or :class:`CassetteMiss` (reported)."""
        with self._lock:
            slot = self._exact.get(request_key(channel, name, request))
            match: Literal["exact", "normalized"] = "exact"
            if slot is None:
                slot = self._norm.get(request_key(channel, name, self.normalization.apply(request)))
                match = "normalized"
            if slot is not None:
                outcome, eid, passages = slot.next()
                self.hits[match] += 1
                return Hit(outcome=outcome, match=match, event_id=eid or None, passages=passages)
            nearest = self._by_name.get((channel, name))
            nearest_s = None if nearest is None else orjson.dumps(nearest, option=orjson.OPT_SORT_KEYS).decode()
            if self.live is not None and self.live.get(channel, name) is not None:
                miss = Miss(channel, name, request, "live", nearest_s)
                self.misses.append(miss)
                self.hits["live"] += 1
            else:
                miss = Miss(channel, name, request, "unknown", nearest_s)
                self.misses.append(miss)
                raise CassetteMiss("The replay " + miss.describe(), miss=miss, trajectory_id=self.trajectory_id)
        return Hit(outcome=self.live.call(channel, name, request), match="live")

    def tool(self, name: str, arguments: Any) -> Hit:
        """Answer a tool call."""
        return self.lookup("tool", name, arguments)

    def retrieve(self, query: str, index: str | None = None, top_k: int | None = None) -> Hit:
        """Answer a retrieval."""
        return self.lookup("retrieval", index or "", {"query": query, "top_k": top_k})

    def memory(self, key: str | None = None, query: str | None = None) -> Hit:
        """Answer a memory read."""
        return self.lookup("memory", key or "", {"query": query})

    def rewind(self) -> None:
        """Serve every request's recordings from the first again, and forget misses (a new replay)."""
        for table in (self._exact, self._norm):
            for s in table.values():
                s.served = 0
        self.misses = []
        self.hits = {"exact": 0, "normalized": 0, "live": 0}
