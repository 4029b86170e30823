"""The thorough redaction pass: what every event goes through before it becomes learning material.

Capture runs the ``fast`` profile (:mod:`molt.governance.redaction.profiles`) so the request path
stays cheap; what it stores is redacted, but names no lexicon or cue reveals can remain. Before an
event is trained on, exported as a dataset or turned into memory, skill or harness text, it passes
the ``thorough`` profile — the same detectors plus a model-backed recognizer — over the text the
fast pass left. Placeholders the fast pass wrote keep their numbers (new values are numbered after
them), so one value keeps one placeholder across both passes.

:class:`ThoroughPass` does it synchronously and remembers what passed (by event id and payload
digest, so a rerun costs a lookup). :class:`ThoroughWorker` runs it off the request path on a
thread: ``submit`` events as they are stored, read ``backlog`` (events waiting) and ``rate``
(events per CPU-second of the worker) as metrics; readers then find them passed already.

When the pass cannot run (no spaCy pipeline installed), :meth:`ThoroughPass.clean` raises
:class:`~molt.errors.GovernanceError`: learning fails closed, the agent is not touched.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from molt.atdp.models import Event
from molt.errors import GovernanceError

__all__ = ["ThoroughPass", "ThoroughWorker", "default_pass"]

_MEMO = 65536


def _digest(event: Event) -> tuple[str, str]:
    body = event.model_dump_json(include={"observation", "action", "outcome", "hidden"})
    return event.event_id, hashlib.blake2b(body.encode(), digest_size=16).hexdigest()


class ThoroughPass:
    """The thorough profile over events and texts, with a memo of what passed.

    ``redactor``: the thorough :class:`~molt.governance.redaction.Redactor` (default: the
    ``thorough`` profile under the ``default`` policy, built on first use)."""

    def __init__(self, redactor: Any = None, *, memo_size: int = _MEMO):
        self._redactor = redactor
        self._memo: OrderedDict[tuple[str, str], Event] = OrderedDict()
        self._memo_size = memo_size
        self._lock = threading.Lock()
        self.passed = 0
        self.cpu_s = 0.0

    @property
    def redactor(self) -> Any:
        """The thorough redactor; :class:`GovernanceError` when its recognizer is not installed."""
        if self._redactor is None:
            from molt.governance.redaction.profiles import redactor_for_profile

            try:
                self._redactor = redactor_for_profile("thorough")
            except ImportError as exc:
                raise GovernanceError(f"the thorough redaction pass cannot run: {exc}") from exc
        return self._redactor

    def clean(self, event: Event) -> Event:
        """``event`` after the thorough pass (from the memo when it passed before)."""
        key = _digest(event)
        with self._lock:
            got = self._memo.get(key)
        if got is not None:
            return got
        from molt.governance.redaction import redact_event

        t0 = time.process_time()
        out, _report = redact_event(event, redactor=self.redactor)
        with self._lock:
            self.cpu_s += time.process_time() - t0
            self.passed += 1
            self._memo[key] = out
            self._memo[_digest(out)] = out  # what passed passes as it is
            while len(self._memo) > self._memo_size:
                self._memo.popitem(last=False)
        return out

    def clean_many(self, events: Iterable[Event]) -> list[Event]:
        """:meth:`clean` for each event, in order."""
        return [self.clean(e) for e in events]

    def clean_text(self, text: str) -> str:
        """A text (memory, skill or harness text) after the thorough pass."""
        return str(self.redactor.redact(text)[0])


class ThoroughWorker:
    """Runs a :class:`ThoroughPass` on a background thread over submitted events."""

    def __init__(self, thorough: ThoroughPass | None = None):
        self.thorough = thorough or default_pass()
        self._queue: queue.Queue[Event | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="molt-thorough-pass", daemon=True)
        self._pending = 0
        self._count = threading.Lock()
        self.errors = 0
        self._thread.start()

    def submit(self, events: Iterable[Event]) -> None:
        """Queue events for the pass (returns at once)."""
        for e in events:
            with self._count:
                self._pending += 1
            self._queue.put(e)

    @property
    def backlog(self) -> int:
        """Events submitted and not yet passed."""
        return self._pending

    @property
    def rate(self) -> float:
        """Events passed per CPU-second of the pass so far (0 before the first)."""
        t = self.thorough
        return t.passed / t.cpu_s if t.cpu_s else 0.0

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until the backlog is empty; False when ``timeout`` ran out first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.backlog:
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def close(self) -> None:
        """Stop the thread once the queued events have passed."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while True:
            e = self._queue.get()
            if e is None:
                return
            try:
                self.thorough.clean(e)
            except Exception:  # counted; a reader that needs the event runs the pass itself and fails closed
                self.errors += 1
            finally:
                with self._count:
                    self._pending -= 1


_default: ThoroughPass | None = None


def default_pass() -> ThoroughPass:
    """The process's shared :class:`ThoroughPass` (one model loaded, one memo)."""
    global _default
    if _default is None:
        _default = ThoroughPass()
    return _default
