"""The adapter API: what every framework adapter builds on to turn callbacks into ATDP events.

The path of an event from a framework callback to a sealed row:

1. on the **agent thread**, the adapter's callback takes the time and calls :meth:`Capture.submit`
   (a queue append, well under a microsecond; :mod:`molt.capture.dispatch`);
2. on the **dispatcher thread**, the adapter's mapper pairs starts with ends (:class:`SpanTable`) and
   builds the event (:meth:`Capture.event`: provenance, ids, payloads bounded by
   :func:`~molt.capture.payload.bound_payload`, errors as data by
   :func:`~molt.capture.payload.error_outcome`);
3. the :class:`~molt.capture.Recorder` governs it (redaction, eligibility), seals it into its
   trajectory's hash chain, spools it (fsync) and delivers it to the store (:mod:`molt.capture.recorder`).

Building an event costs tens of microseconds, more than an agent should pay per callback, hence the
split. Capture fails open: an exception in a mapper or in the Recorder is counted in
:attr:`Capture.stats` and logged (rate-limited), never raised into agent code, except in ``strict``
mode, where :meth:`Capture.flush` raises the first one as an :class:`~molt.errors.AdapterError` (for
tests). An adapter imports everything it needs from this module, the payload and dispatch names included.

Example (the shape of an adapter)::

    from molt.capture.adapt import Capture, SpanTable

    class MyHandler:
        def __init__(self, recorder):
            self.capture = Capture(recorder, integration="molt-myfw", framework="myfw")
            self._spans = SpanTable(self.capture)

        def on_tool_start(self, run_id, parent_id, name, args):   # agent thread
            try:
                self.capture.submit(self._tool_start, run_id, parent_id, name, args, time.time_ns())
            except Exception as exc:
                self.capture.fail(exc)

        def _tool_start(self, run_id, parent_id, name, args, t_ns):  # dispatcher thread
            self._spans.open(run_id, parent_id, t_ns, name=name, args=args)
"""

from __future__ import annotations

import datetime as _dt
import itertools
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata as _metadata
from typing import Any

from molt.atdp.ids import new_id
from molt.atdp.models import Event, EventKind, Provenance, Usage
from molt.capture.dispatch import (
    Dispatcher,
    default_dispatcher,
    default_recorder,
    drain_all,
    set_default_recorder,
)
from molt.capture.payload import (
    MARKER_KEY,
    MAX_FIELD_BYTES,
    BlobStore,
    DirectoryBlobStore,
    bound_payload,
    clip,
    error_outcome,
    text_of,
)
from molt.errors import AdapterError

# The Event fields Capture.event() fills in from its own arguments and state.
#: The tag of an adapter's model-call event naming the call it saw answered (the response id:
#: ``chatcmpl-…``, ``resp_…``, ``msg_…``). A gateway that served that call and is handed the event
#: (:class:`molt.capture.handover.GatewayRecorder`) joins the adapter's run to its own trajectory.
CALL_ID_TAG = "molt.call_id"
_SET_HERE = frozenset({"event_id", "trajectory_id", "parent_id", "kind", "timestamp", "metadata", "provenance"})

# The adapter API: what an adapter imports from here, including the payload and dispatch names it
# needs, so an adapter has one module to import from.
__all__ = [
    "BlobStore",
    "CALL_ID_TAG",
    "Capture",
    "CaptureStats",
    "DirectoryBlobStore",
    "Dispatcher",
    "MARKER_KEY",
    "OpenSpan",
    "SpanTable",
    "bound_payload",
    "default_dispatcher",
    "default_recorder",
    "distribution_version",
    "drain_all",
    "error_outcome",
    "require_framework",
    "set_default_recorder",
    "text_of",
]

log = logging.getLogger("molt.capture.adapt")

# --------------------------------------------------------------------------- capture


@dataclass(frozen=True)
class CaptureStats:
    """Counters of one :class:`Capture` (all since it was created)."""

    submitted: int
    events: int
    dropped: int
    errors: int
    open_spans: int
    last_error: str | None
    evicted_spans: int = 0  # runs whose end never came, forgotten to bound memory (see SpanTable)


def distribution_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None."""
    try:
        return _metadata.version(dist)
    except _metadata.PackageNotFoundError:
        return None


def require_framework(adapter: str, dist: str, minimum: str, install: str, below: str | None = None) -> str:
    """Check that framework ``dist`` is installed at ``minimum`` or later (and before ``below``, when
    given); return its version.

    Raises :class:`~molt.errors.AdapterError` (an ``ImportError`` would hide the hint) whose note
    tells how to install it, e.g. ``molt-langchain needs langchain-core>=1.0; install it with …``.
    """
    version = distribution_version(dist)
    spec = f"{dist}>={minimum}" + (f",<{below}" if below else "")
    if (version is None or _vtuple(version) < _vtuple(minimum)
            or (below is not None and _vtuple(version) >= _vtuple(below))):
        found = "it is not installed" if version is None else f"found {version}"
        err = AdapterError(f"{adapter} needs {spec}, but {found}.")
        err.add_note(f"{adapter} needs {spec}; install it with: {install}")
        raise err
    return version


def _vtuple(v: str) -> tuple[int, ...]:
    parts = []
    for p in re.split(r"[.+-]", v):
        m = re.match(r"\d+", p)
        if not m:
            break
        parts.append(int(m.group()))
    return tuple(parts)


class Capture:
    """The state an adapter shares between the agent thread and its mapper.

    Args:
        recorder: the :class:`~molt.capture.Recorder` events go to (default :func:`default_recorder`).
        integration: the adapter's distribution name (``molt-langchain``); its installed version is
            recorded as ``provenance.integration_version``.
        framework: the framework name written to ``provenance.framework`` (``langchain``).
        framework_version: its version (the adapter passes what it checked at import).
        tenant_id, agent_id, task: defaults for every event's metadata.
        session_id: default ``Event.session_id``.
        tags: extra ``metadata.tags`` on every event.
        provenance: extra provenance fields (``policy_version``, ``harness_fingerprint``, …).
        max_field_bytes: the bound of each payload field (observation, action, outcome), default
            192 KiB, so a whole event stays under the Recorder's 1 MiB cap.
        blob_store: where binary payloads are offloaded (default: dropped with a note).
        strict: remember mapper and Recorder errors and raise the first from :meth:`flush` (tests).
        dispatcher: the thread mapper calls run on (default: one per process).
    """

    def __init__(
        self,
        recorder: Any = None,
        *,
        integration: str,
        framework: str,
        framework_version: str | None = None,
        tenant_id: str | None = None,
        agent_id: str | None = None,
        task: str | None = None,
        session_id: str | None = None,
        tags: Mapping[str, str] | None = None,
        provenance: Mapping[str, Any] | None = None,
        max_field_bytes: int | None = None,
        blob_store: BlobStore | None = None,
        strict: bool = False,
        dispatcher: Dispatcher | None = None,
    ):
        self.recorder = recorder if recorder is not None else default_recorder()
        self.provenance = Provenance(
            framework=framework,
            framework_version=framework_version,
            integration=integration,
            integration_version=distribution_version(integration),
            **dict(provenance or {}),
        )
        self._metadata = {
            "tenant_id": tenant_id,
            "agent_id": agent_id,
            "task": task,
            "tags": dict(tags) if tags else None,
        }
        self.session_id = session_id
        self.max_field_bytes = MAX_FIELD_BYTES if max_field_bytes is None else max_field_bytes
        self.blob_store = blob_store
        self.strict = strict
        self.dispatcher = dispatcher or default_dispatcher()
        self._submitted = itertools.count()
        self._events = 0
        self._dropped = 0
        self._errors = 0
        self._evicted = 0
        self._last_error: str | None = None
        self._first_error: BaseException | None = None
        self._last_log = 0.0
        self.spans: SpanTable | None = None

    # ---------------------------------------------------------------- agent thread

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the dispatcher thread (the agent thread pays a queue append)."""
        next(self._submitted)
        self.dispatcher.submit(self, fn, args)

    def fail(self, exc: BaseException) -> None:
        """Count an error of this capture and log it (at most once a minute); never raises."""
        self._errors += 1
        self._last_error = f"{type(exc).__name__}: {exc}"[:500]
        if self._first_error is None:
            self._first_error = exc
        now = time.monotonic()
        if now - self._last_log > 60.0:
            self._last_log = now
            log.warning(
                "Molt %s capture error (the agent is unaffected; %d so far): %s",
                self.provenance.integration,
                self._errors,
                self._last_error,
                exc_info=exc,
            )

    # ---------------------------------------------------------------- dispatcher thread

    def payload(self, value: Any) -> Any:
        """``value`` bounded to this capture's field size (see :func:`bound_payload`)."""
        return bound_payload(value, max_bytes=self.max_field_bytes, blob_store=self.blob_store)

    def event(
        self,
        kind: EventKind,
        *,
        trajectory_id: str,
        event_id: str | None = None,
        parent_id: str | None = None,
        start_ns: int | None = None,
        end_ns: int | None = None,
        model: str | None = None,
        usage: Usage | Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
        **fields: Any,
    ) -> Event:
        """An event with this capture's provenance and metadata defaults.

        ``start_ns``/``end_ns`` are ``time.time_ns()`` readings: the start becomes the timestamp, the
        difference ``metadata.latency_ms``. Other keyword arguments are :class:`Event` fields.
        """
        md = {k: v for k, v in self._metadata.items() if v is not None}
        if tags:
            md["tags"] = {**(md.get("tags") or {}), **{str(k): str(v) for k, v in tags.items()}}
        if model is not None:
            md["model"] = model
        if usage is not None:
            md["usage"] = usage
        if start_ns is not None and end_ns is not None:
            md["latency_ms"] = max(0, end_ns - start_ns) / 1e6
        ts = (
            _dt.datetime.fromtimestamp(start_ns / 1e9, tz=_dt.UTC)
            if start_ns is not None
            else _dt.datetime.now(_dt.UTC)
        )
        # A framework's long label or session id is clipped to ATDP's bounds rather than cost the event.
        fields["session_id"] = clip(fields.pop("session_id", self.session_id), 256)
        fields["name"] = clip(fields.pop("name", None), 512)
        if not _SET_HERE.isdisjoint(fields):
            raise TypeError(f"Capture.event() sets {sorted(_SET_HERE & fields.keys())} itself")
        # One validation of the whole event: nested fields may be given as models or as plain dicts
        # (validated here, in the same pass), and metadata is built as a dict for the same reason:
        # each model built apart is another trip through pydantic per event on the dispatcher thread.
        return Event.model_validate({
            **fields,
            "event_id": event_id or new_id(),
            "trajectory_id": trajectory_id,
            "parent_id": parent_id,
            "kind": kind,
            "timestamp": ts,
            "metadata": md,
            "provenance": self.provenance,
        })

    def record(self, event: Event) -> None:
        """Hand ``event`` to the Recorder, counting drops and errors."""
        try:
            ok = self.recorder.record(event)
        except Exception as exc:
            self.fail(exc)
            return
        if ok is False:
            self._dropped += 1
        else:
            self._events += 1

    def stamp(self, **fields: Any) -> None:
        """Put ``fields`` (``policy_version``, ``harness_fingerprint``, …) into the provenance of every
        event built from now on. Submit it (``capture.submit(capture.stamp, …)``) so that it takes
        effect in callback order: the events of callbacks queued before it keep the old values."""
        self.provenance = self.provenance.model_copy(update=fields)

    @property
    def identity(self) -> tuple[str | None, str | None]:
        """``(tenant_id, agent_id)`` put on every event."""
        return self._metadata["tenant_id"], self._metadata["agent_id"]

    def new_trajectory(self) -> str:
        """A fresh trajectory id from the Recorder."""
        return str(self.recorder.new_trajectory())

    # ---------------------------------------------------------------- both

    def flush(self, timeout: float | None = 10.0, *, deliver: bool = False) -> bool:
        """Wait until every callback so far is mapped and its events are durable in the Recorder's
        spool (and delivered to its sink with ``deliver=True``). False on timeout.

        In ``strict`` mode, raises the first capture error as :class:`~molt.errors.AdapterError`.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        ok = self.dispatcher.drain(timeout)
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        ok = bool(self.recorder.flush(remaining, deliver=deliver)) and ok
        if self.strict and self._first_error is not None:
            exc, self._first_error = self._first_error, None
            raise AdapterError(
                f"The {self.provenance.integration} capture failed: {exc!r}. "
                "Fix the mapper; outside strict mode this is only counted."
            ) from exc
        return ok

    @property
    def stats(self) -> CaptureStats:
        """Current counters."""
        return CaptureStats(
            submitted=int(repr(self._submitted)[6:-1]),
            events=self._events,
            dropped=self._dropped,
            errors=self._errors,
            open_spans=len(self.spans) if self.spans is not None else 0,
            last_error=self._last_error,
            evicted_spans=self._evicted,
        )


# --------------------------------------------------------------------------- span bookkeeping


@dataclass
class OpenSpan:
    """A framework operation that has started and not ended yet.

    ``event_id`` is assigned at the start, so children can name it as their parent before it ends;
    the event itself is recorded at the end, carrying both the action and its outcome.
    """

    key: Any
    event_id: str
    trajectory_id: str
    parent_event_id: str | None
    root_key: Any
    start_ns: int
    hidden: bool = False
    data: dict[str, Any] = field(default_factory=dict)


class SpanTable:
    """Pairs starts with ends by the framework's own ids (run ids, span ids) — never by "current
    span" state — and assigns trajectories: a span without a known parent starts a new trajectory,
    a child joins its parent's.

    Only the dispatcher thread touches a table, so it needs no lock. Recently closed spans are
    remembered (bounded), so a child that starts after its parent ended still links to it.

    Open spans are bounded too: a run whose end never comes (a callback the framework dropped, a
    thread that died) would otherwise be held for the life of the process. Past ``max_open`` the oldest
    open span is forgotten — counted in ``CaptureStats.evicted_spans``, its children still link to it.

    Args:
        capture: the owning capture (its Recorder issues trajectory ids).
        remember: how many closed spans to remember for late children (default 10,000).
        max_open: how many spans may be open at once before the oldest is evicted (default 50,000).
    """

    def __init__(self, capture: Capture, *, remember: int = 10_000, max_open: int = 50_000):
        self.capture = capture
        capture.spans = self
        self._open: dict[Any, OpenSpan] = {}
        self._closed: OrderedDict[Any, tuple[str | None, str]] = OrderedDict()
        self._remember = remember
        self._max_open = max_open

    def __len__(self) -> int:
        return len(self._open)

    def __contains__(self, key: object) -> bool:
        return key in self._open

    def get(self, key: Any) -> OpenSpan | None:
        """The open span ``key``, if any."""
        return self._open.get(key)

    def resolve(self, key: Any) -> tuple[str | None, str, Any] | None:
        """``(event id to use as parent, trajectory id, root key)`` of span ``key``, open or recently
        closed; None if unknown. A hidden span resolves to its own nearest visible ancestor."""
        sp = self._open.get(key)
        if sp is not None:
            return (sp.parent_event_id if sp.hidden else sp.event_id), sp.trajectory_id, sp.root_key
        closed = self._closed.get(key)
        if closed is not None:
            return closed[0], closed[1], None
        return None

    def open(
        self,
        key: Any,
        parent_key: Any,
        start_ns: int,
        *,
        trajectory_id: str | None = None,
        parent_event_id: str | None = None,
        hidden: bool = False,
        **data: Any,
    ) -> OpenSpan:
        """Start span ``key`` under ``parent_key``.

        Without a known parent the span roots a subtree: in trajectory ``trajectory_id`` under event
        ``parent_event_id`` when given (a resumed run), else in a new trajectory. ``hidden`` spans
        record no event; their children attach to the nearest visible ancestor.
        """
        parent = self.resolve(parent_key) if parent_key is not None else None
        if parent is not None:
            parent_event_id, tid, root_key = parent
            if root_key is None:
                root_key = key  # the parent already ended: this span roots its own subtree
        else:
            tid, root_key = trajectory_id or self.capture.new_trajectory(), key
        sp = OpenSpan(
            key=key,
            event_id=new_id(),
            trajectory_id=tid,
            parent_event_id=parent_event_id,
            root_key=root_key,
            start_ns=start_ns,
            hidden=hidden,
            data=data,
        )
        self._open[key] = sp
        if len(self._open) > self._max_open:
            self._evict()
        return sp

    def _evict(self) -> None:
        old = next(iter(self._open))  # dicts keep insertion order: the longest-open span
        self.close(old)  # remembered as closed, so its late children still find their parent
        self.capture._evicted += 1

    def close(self, key: Any) -> OpenSpan | None:
        """End span ``key`` and return it (None if it is not open: a duplicate or unknown end)."""
        sp = self._open.pop(key, None)
        if sp is not None:
            self._closed[key] = ((sp.parent_event_id if sp.hidden else sp.event_id), sp.trajectory_id)
            if len(self._closed) > self._remember:
                self._closed.popitem(last=False)
        return sp

    def open_under(self, root_key: Any) -> list[OpenSpan]:
        """Spans still open in the subtree rooted at ``root_key``, innermost (latest) first."""
        found = [sp for sp in self._open.values() if sp.root_key == root_key and sp.key != root_key]
        return sorted(found, key=lambda sp: sp.start_ns, reverse=True)

    def __iter__(self) -> Iterator[OpenSpan]:
        return iter(list(self._open.values()))
