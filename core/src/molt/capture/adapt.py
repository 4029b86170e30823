"""What every framework adapter needs: cheap hand-off from the agent thread, span bookkeeping, bounded
payloads, provenance, and error accounting that never reaches the agent.

An adapter translates framework callbacks into ATDP events. Building an :class:`~molt.atdp.Event`
(pydantic validation, payload conversion, truncation) costs tens of microseconds, more than an agent
should pay per callback, so adapters split the work in two:

- on the **agent thread** a callback only takes the time and appends a tuple to a queue
  (:meth:`Capture.submit`, well under a microsecond);
- on a **dispatcher thread** the adapter's mapper pairs starts with ends (:class:`SpanTable`), builds
  the event (:meth:`Capture.event`, payloads bounded by :func:`bound_payload`) and hands it to the
  :class:`~molt.capture.Recorder`.

Because one dispatcher thread runs every mapper call of a process in submission order, mapper state
needs no locks, and an end is always processed after its start. Capture fails open: an exception in a
mapper or in the Recorder is counted in :attr:`Capture.stats` and logged (rate-limited), never raised
into agent code, except in ``strict`` mode, where :meth:`Capture.flush` raises the first one as an
:class:`~molt.errors.AdapterError` (for tests).

Oversized payloads are cut structurally — the result is still valid JSON, with markers saying what
was cut — and binary or base64 blobs are replaced by a note (or offloaded to a :class:`BlobStore`)::

    >>> bound_payload({"text": "x" * 10, "items": list(range(5))}, max_str=4, max_items=2)
    {'text': 'xxxx…[molt: truncated 6 of 10 chars]',
     'items': [0, 1, {'$molt': 'truncated', 'omitted_items': 3}]}

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

import atexit
import base64
import binascii
import collections
import dataclasses
import datetime as _dt
import enum
import hashlib
import itertools
import logging
import math
import os
import re
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata as _metadata
from pathlib import Path
from typing import Any, Protocol

from molt.atdp.ids import new_id
from molt.atdp.models import ErrorInfo, Event, EventKind, Metadata, Outcome, OutcomeStatus, Provenance, Usage
from molt.errors import AdapterError

__all__ = [
    "BlobStore",
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
]

log = logging.getLogger("molt.capture.adapt")

#: The key that marks a structural truncation or a dropped blob inside a bounded payload.
MARKER_KEY = "$molt"

# Defaults sized so that a whole event stays well under the Recorder's 1 MiB record cap even when
# observation, action and outcome are all large: each payload field is bounded on its own.
_MAX_FIELD_BYTES = 192 * 1024
_MAX_STR = 32 * 1024
_MAX_ITEMS = 256
_MAX_DEPTH = 24
_BLOB_MIN_CHARS = 512  # shorter base64-looking strings are kept (ids, hashes, short tokens)

_B64_RE = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")
_DATA_URI_RE = re.compile(r"data:([\w.+-]+/[\w.+-]+)?(;[\w-]+=[\w.-]+)*;base64,", re.ASCII)


# --------------------------------------------------------------------------- payload bounding


class BlobStore(Protocol):
    """Where binary payloads go instead of the event: returns a reference (a URI) to put in its place."""

    def put(self, data: bytes, media_type: str | None) -> str:
        """Store ``data`` and return a reference to it."""
        ...


class DirectoryBlobStore:
    """A content-addressed :class:`BlobStore` in a local directory (``<dir>/<sha256>``).

    Args:
        root: the directory (created on first use).
    """

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root).expanduser()

    def put(self, data: bytes, media_type: str | None) -> str:
        """Write ``data`` once under its SHA-256 and return a ``file://`` URI."""
        digest = hashlib.sha256(data).hexdigest()
        path = self.root / digest
        if not path.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(data)
            tmp.replace(path)
        return path.resolve().as_uri()


def _blob_note(
    data: bytes | None, n_chars: int, media_type: str | None, store: BlobStore | None, encoding: str
) -> dict[str, Any]:
    note: dict[str, Any] = {MARKER_KEY: "blob", "encoding": encoding, "chars": n_chars}
    if media_type:
        note["media_type"] = media_type
    if data is not None:
        note["bytes"] = len(data)
        note["sha256"] = hashlib.sha256(data).hexdigest()
        if store is not None:
            try:
                note["ref"] = store.put(data, media_type)
                note[MARKER_KEY] = "offloaded"
                return note
            except Exception as exc:  # an unwritable blob store drops the blob, never the event
                note["offload_error"] = repr(exc)[:200]
    note[MARKER_KEY] = "dropped"
    return note


def _as_blob(s: str, store: BlobStore | None) -> dict[str, Any] | None:
    """A note replacing ``s`` if it is a data URI or a long base64 run, else None."""
    if len(s) < _BLOB_MIN_CHARS:
        return None
    m = _DATA_URI_RE.match(s)
    body = s[m.end() :] if m else s
    if not m:
        head = s[:4096]
        if " " in head[:200] or not _B64_RE.fullmatch(head) or not _looks_random(head):
            return None  # cheap rejection of ordinary text (and of "xxxx…") before the full scan
    if not _B64_RE.fullmatch(body):
        return None
    try:
        data = base64.b64decode(
            body + "=" * (-len(body) % 4),
            altchars=b"-_" if ("-" in body or "_" in body) else None,
            validate=False,
        )
    except (binascii.Error, ValueError):
        data = None
    return _blob_note(data, len(s), m.group(1) if m else None, store, "data-uri" if m else "base64")


def _looks_random(head: str) -> bool:
    """Encoded binary mixes cases and digits; long words, hex dumps and repeated letters do not."""
    chars = set(head)
    return (
        len(chars) >= 20
        and any(c.isdigit() for c in chars)
        and any(c.isupper() for c in chars)
        and any(c.islower() for c in chars)
    )


def _truncate_str(s: str, max_str: int) -> str:
    return f"{s[:max_str]}…[molt: truncated {len(s) - max_str:,} of {len(s):,} chars]"


class _Bounder:
    def __init__(self, max_str: int, max_items: int, max_depth: int, store: BlobStore | None, sanitize: bool = False):
        self.sanitize = sanitize
        self.max_str = max_str
        self.max_items = max_items
        self.max_depth = max_depth
        self.store = store
        self.seen: set[int] = set()

    def __call__(self, v: Any, depth: int = 0) -> Any:
        if v is None or isinstance(v, bool):
            return v
        if isinstance(v, int):
            if isinstance(v, enum.Enum):
                return self(v.value, depth)
            return v if -(1 << 63) <= v < (1 << 64) else str(v)  # JSON encoders stop at 64 bits
        if isinstance(v, float):
            return v if math.isfinite(v) else str(v)
        if isinstance(v, str):
            if self.sanitize:
                v = v.encode("utf-8", "replace").decode("utf-8")  # lone surrogates are not UTF-8
            note = _as_blob(v, self.store)
            if note is not None:
                return note
            return v if len(v) <= self.max_str else _truncate_str(v, self.max_str)
        if isinstance(v, bytes | bytearray | memoryview):
            b = bytes(v)
            try:
                text = b.decode("utf-8")
            except UnicodeDecodeError:
                return _blob_note(b, len(b), None, self.store, "bytes")
            return self(text, depth)
        if depth >= self.max_depth:
            return {MARKER_KEY: "truncated", "reason": "depth", "type": type(v).__name__}
        if isinstance(v, enum.Enum):
            return self(v.value, depth)
        if isinstance(v, uuid.UUID | _dt.datetime | _dt.date | _dt.time | Path):
            return str(v) if not isinstance(v, _dt.datetime | _dt.date | _dt.time) else v.isoformat()
        oid = id(v)
        if oid in self.seen:
            return {MARKER_KEY: "truncated", "reason": "cycle"}
        self.seen.add(oid)
        try:
            return self._container(v, depth)
        finally:
            self.seen.discard(oid)

    def _container(self, v: Any, depth: int) -> Any:
        if isinstance(v, Mapping):
            out: dict[str, Any] = {}
            for i, (k, item) in enumerate(v.items()):
                if i >= self.max_items:
                    out[MARKER_KEY] = "truncated"
                    out["$molt_omitted_keys"] = len(v) - self.max_items
                    break
                key = k if isinstance(k, str) else _unfailing(str, k)
                if self.sanitize:
                    key = key.encode("utf-8", "replace").decode("utf-8")
                out[key] = self(item, depth + 1)
            return out
        if isinstance(v, list | tuple | set | frozenset | collections.deque):
            seq = list(v) if not isinstance(v, list | tuple) else v
            items = [self(x, depth + 1) for x in itertools.islice(seq, self.max_items)]
            if len(seq) > self.max_items:
                items.append({MARKER_KEY: "truncated", "omitted_items": len(seq) - self.max_items})
            return items
        dumped = _to_plain(v)
        if dumped is not v:
            return self(dumped, depth)
        text = _unfailing(repr, v)
        return text if len(text) <= self.max_str else _truncate_str(text, self.max_str)


def _unfailing(fn: Callable[[Any], str], v: Any) -> str:
    """``fn(v)``, or a placeholder when the object's ``__str__``/``__repr__`` raises."""
    try:
        return fn(v)
    except Exception:
        return f"<unprintable {type(v).__name__}>"


def _clip(s: Any, limit: int) -> Any:
    """A string cut to ``limit`` characters, ending in a digest of the whole so that distinct long
    values stay distinct; anything else unchanged."""
    if not isinstance(s, str) or len(s) <= limit:
        return s
    digest = hashlib.sha256(s.encode("utf-8", "replace")).hexdigest()[:16]
    return f"{s[: limit - 18]}…~{digest}"


def _to_plain(v: Any) -> Any:
    """Turn a model object into plain data; returns ``v`` itself when it knows no better way."""
    dump = getattr(v, "model_dump", None)  # pydantic v2
    if callable(dump):
        try:
            return dump(mode="json", exclude_none=True)
        except Exception:
            try:
                return dump()
            except Exception:
                return v
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: getattr(v, f.name, None) for f in dataclasses.fields(v)}
    to_dict = getattr(v, "to_dict", None) or getattr(v, "dict", None)
    if callable(to_dict):
        try:
            out = to_dict()
        except Exception:
            return v
        return out if isinstance(out, Mapping) else v
    return v


def _json_size(v: Any) -> int:
    import orjson

    return len(orjson.dumps(v))


def bound_payload(
    value: Any,
    *,
    max_bytes: int = _MAX_FIELD_BYTES,
    max_str: int = _MAX_STR,
    max_items: int = _MAX_ITEMS,
    max_depth: int = _MAX_DEPTH,
    blob_store: BlobStore | None = None,
) -> Any:
    """``value`` as JSON-ready data no larger than about ``max_bytes`` serialized.

    Strings longer than ``max_str`` characters keep their head and end in a ``…[molt: truncated …]``
    marker; lists and mappings longer than ``max_items`` keep their head and gain a ``{"$molt":
    "truncated", …}`` entry; nesting deeper than ``max_depth`` becomes such an entry; base64 runs,
    ``data:`` URIs and non-UTF-8 bytes become ``{"$molt": "dropped"|"offloaded", "sha256": …}`` notes
    (offloaded to ``blob_store`` when one is given). Pydantic models and dataclasses are dumped,
    anything else becomes its ``repr``. When the result is still over ``max_bytes``, the string and
    item limits are halved until it fits; the result is always valid JSON.
    """
    if (
        value is None
        or isinstance(value, bool)
        or (
            isinstance(value, str)
            and len(value) < _BLOB_MIN_CHARS
            and len(value) <= max_str
            and value.isascii()
            and len(value) * 3 < max_bytes
        )
    ):
        return value  # the common case (short text, flags) needs no walk and no size check
    sanitize = False
    out = _Bounder(max_str, max_items, max_depth, blob_store)(value)
    try:
        size = _json_size(out)
    except TypeError:  # a string that is not valid UTF-8 (lone surrogates): clean strings, retry
        sanitize = True
        out = _Bounder(max_str, max_items, max_depth, blob_store, sanitize)(value)
        size = _json_size(out)
    if max_bytes <= 0:
        return out
    while size > max_bytes and (max_str > 16 or max_items > 1):
        # Shrink towards the budget in proportion, so a 100x overshoot takes a few passes, not seven.
        ratio = max(max_bytes / size, 0.05) * 0.9
        max_str = max(16, min(max_str // 2, int(max_str * ratio)))
        max_items = max(1, min(max_items // 2, int(max_items * ratio) or 1))
        out = _Bounder(max_str, max_items, max_depth, blob_store, sanitize)(value)
        size = _json_size(out)
    if size > max_bytes:
        return {MARKER_KEY: "truncated", "reason": "size", "bytes": size}
    return out


def error_outcome(
    exc: BaseException | Mapping[str, Any] | str, *, status: OutcomeStatus | None = None, output: Any = None
) -> Outcome:
    """An :class:`Outcome` describing an error as data (never raised).

    ``GeneratorExit`` and ``asyncio.CancelledError`` become ``cancelled``, ``TimeoutError``
    ``timeout``, ``KeyboardInterrupt`` ``interrupted``; anything else ``error``, unless ``status`` says.
    """
    if isinstance(exc, BaseException):
        etype, message = type(exc).__name__, str(exc) or type(exc).__name__
        if status is None:
            if isinstance(exc, GeneratorExit) or etype == "CancelledError":
                status = OutcomeStatus.CANCELLED
            elif isinstance(exc, TimeoutError):
                status = OutcomeStatus.TIMEOUT
            elif isinstance(exc, KeyboardInterrupt):
                status = OutcomeStatus.INTERRUPTED
    elif isinstance(exc, Mapping):
        etype = str(exc.get("type") or exc.get("code") or "Error")
        message = str(exc.get("message") or exc)
    else:
        etype, message = "Error", str(exc)
    return Outcome(
        status=status or OutcomeStatus.ERROR,
        output=output,
        error=ErrorInfo(type=etype[:200], message=message[:4000]),
    )


# --------------------------------------------------------------------------- dispatcher thread


class Dispatcher:
    """One background thread that runs submitted calls in submission order.

    :meth:`submit` is the only thing the agent thread pays for: a ``deque.append`` (atomic under the
    GIL, so any thread may call it) and, when the worker sleeps, one wake-up. The worker drains the
    queue in batches. Calls that raise are reported to ``on_error`` of their owner, never propagated.
    """

    def __init__(self, name: str = "molt-adapt"):
        self.name = name
        self._q: collections.deque[tuple[Any, Callable[..., Any], tuple[Any, ...]]] = collections.deque()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        _dispatchers.add(self)

    def submit(self, owner: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """Queue ``fn(*args)``; ``owner.fail(exc)`` hears about an exception it raises."""
        self._q.append((owner, fn, args))
        if self._thread is None:
            self._start()
        if not self._wake.is_set():
            self._wake.set()

    def _after_fork(self) -> None:
        # The child has no dispatcher thread; the next submit starts one. Queued drain markers
        # (owner None) belong to parent threads that do not exist here.
        self._q = collections.deque(x for x in self._q if x[0] is not None)
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread = None

    def drain(self, timeout: float | None = 10.0) -> bool:
        """Wait until everything submitted before this call has run; False on timeout."""
        if threading.current_thread() is self._thread:
            return True  # a mapper that flushes would wait on itself
        done = threading.Event()
        self.submit(None, done.set, ())
        return done.wait(timeout)

    @property
    def pending(self) -> int:
        """Calls queued and not yet run."""
        return len(self._q)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                t = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread = t
                t.start()

    def _run(self) -> None:
        q = self._q
        while True:
            if not q:
                self._wake.wait(0.5)
                self._wake.clear()
                if not q:
                    continue
                if len(q) < 64:
                    time.sleep(0.0005)  # gather a batch: fewer wake-ups, fewer GIL hand-offs
            while q:
                owner, fn, args = q.popleft()
                try:
                    fn(*args)
                except BaseException as exc:  # a mapper bug must not kill the thread
                    if owner is not None:
                        try:
                            owner.fail(exc)
                        except Exception:  # pragma: no cover - fail() itself is defensive
                            log.exception("Molt capture error handler failed.")


_default_dispatcher: Dispatcher | None = None
_dispatchers: weakref.WeakSet[Dispatcher] = weakref.WeakSet()


def _reset_after_fork() -> None:
    for d in list(_dispatchers):
        d._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def drain_all(timeout: float = 2.0) -> bool:
    """Run everything queued on every dispatcher (bounded by ``timeout`` seconds in all).

    Call it before closing a Recorder that adapters feed: events still queued on a dispatcher have
    not reached the Recorder yet. At interpreter exit it runs before the Recorders close (atexit
    runs handlers in reverse order of registration, and this module registers after the Recorder's).
    """
    deadline = time.monotonic() + timeout
    ok = True
    for d in list(_dispatchers):
        if d._thread is not None:
            ok = d.drain(max(0.0, deadline - time.monotonic())) and ok
    return ok


atexit.register(drain_all)
_default_lock = threading.Lock()


def default_dispatcher() -> Dispatcher:
    """The process-wide dispatcher shared by every :class:`Capture` that is not given its own."""
    global _default_dispatcher
    if _default_dispatcher is None:
        with _default_lock:
            if _default_dispatcher is None:
                _default_dispatcher = Dispatcher()
    return _default_dispatcher


# --------------------------------------------------------------------------- default recorder

_default_recorder: Any = None


def set_default_recorder(recorder: Any) -> None:
    """Make ``recorder`` the one adapters use when they are created without one (``None`` resets)."""
    global _default_recorder
    with _default_lock:
        _default_recorder = recorder


def default_recorder() -> Any:
    """The process-wide Recorder for adapters built without one.

    It is the one given to :func:`set_default_recorder`, else a Recorder created on first use that
    spools under ``$MOLT_HOME/spool`` (``~/.molt/spool``) for a later ``molt`` process to deliver.
    """
    global _default_recorder
    if _default_recorder is None:
        with _default_lock:
            if _default_recorder is None:
                from molt.capture.recorder import Recorder

                _default_recorder = Recorder()
                # Said once, where the user looks: these events are not in any store until delivered.
                log.warning("Molt: this process records without a store (no recorder was given to the adapter, "
                            "e.g. MOLT_LANGCHAIN=1): events wait in %s until delivered. Give the adapter "
                            "Recorder(Store.open()) to store them as they come, or run `molt spool deliver` "
                            "after this process ends.", _default_recorder.spool_dir)
    return _default_recorder


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
        self.max_field_bytes = _MAX_FIELD_BYTES if max_field_bytes is None else max_field_bytes
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
        md = dict(self._metadata)
        if tags:
            md["tags"] = {**(md["tags"] or {}), **{str(k): str(v) for k, v in tags.items()}}
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
        return Event(
            event_id=event_id or new_id(),
            trajectory_id=trajectory_id,
            parent_id=parent_id,
            session_id=_clip(fields.pop("session_id", self.session_id), 256),
            name=_clip(fields.pop("name", None), 512),
            kind=kind,
            timestamp=ts,
            metadata=Metadata(**{k: v for k, v in md.items() if v is not None}),
            provenance=self.provenance,
            **fields,
        )

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
