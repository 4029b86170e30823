"""The dispatcher thread: how a framework callback leaves the agent's thread at once.

On the **agent thread** an adapter's callback only takes the time and appends a tuple to a queue
(:meth:`Dispatcher.submit`, well under a microsecond). One background thread per process runs every
queued call in submission order — the adapter's mapper, which pairs starts with ends, builds the event
(:mod:`molt.capture.adapt`) and hands it to the :class:`~molt.capture.Recorder`. Because one thread runs
every mapper call, mapper state needs no locks and an end is always processed after its start.

Also here: the process-wide Recorder adapters use when none was given (:func:`default_recorder`).
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["Dispatcher", "default_dispatcher", "default_recorder", "drain_all", "set_default_recorder"]

log = logging.getLogger("molt.capture.dispatch")

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


