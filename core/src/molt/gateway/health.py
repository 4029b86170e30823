"""Whether capture keeps up: the part of ``/health`` that says ``degraded`` while records are lost or
back up, so a load balancer, a probe or an operator sees it while the gateway keeps answering.

The gateway fails open for the agent — a capture fault never fails a model call — so the answers alone
never show that recording stopped. :class:`CaptureHealth` reads the recorder's counters on each look:
capture is ``degraded`` while records are being dropped (any record lost, before it was durable, in the
last ``window_s`` seconds: queue full, spool full, spool write failed, or a call whose events could not
be built), while spool writes fail, or while the backlog waiting for the spool is over
``backlog_limit`` records. ``/health`` (HTTP 200 with ``status: degraded``, or 503 under
``molt serve --strict-health``), ``/metrics``, the status file ``molt doctor`` reads, and the serve
banner's description all come from here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["BACKLOG_LIMIT", "DROP_WINDOW_S", "CaptureHealth"]

#: Seconds ``/health`` stays degraded after the last dropped record.
DROP_WINDOW_S = 60.0
#: Records waiting for the spool (gateway queue and capture pipe) above which capture is backing up.
BACKLOG_LIMIT = 10_000


class CaptureHealth:
    """Capture's health from the recorder's counters (see the module docstring)."""

    def __init__(self, *, window_s: float = DROP_WINDOW_S, backlog_limit: int = BACKLOG_LIMIT,
                 clock: Callable[[], float] = time.monotonic):
        self.window_s = window_s
        self.backlog_limit = backlog_limit
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: tuple[int, int] = (0, 0)   # (lost records, writer errors) at the last look
        self._last_loss: float | None = None
        self._last_writer_error: float | None = None

    def assess(self, stats: Any, capture_failed: int = 0) -> dict[str, Any]:
        """``{"status": "ok" | "degraded", "reasons": [...], "dropped": n, "dropped_recent": bool,
        "backlog": n, "writer_errors": n}`` from a :class:`~molt.capture.RecorderStats` (``None``: not
        recording, always ok) and the calls whose events could not be built."""
        if stats is None:
            return {"status": "ok", "reasons": [], "dropped": 0, "backlog": 0, "writer_errors": 0}
        dropped = int(stats.dropped) + int(capture_failed)
        writer_errors = int(stats.writer_errors)
        backlog = int(stats.pending_in_queue)
        now = self.clock()
        with self._lock:
            seen_dropped, seen_errors = self._seen
            if dropped > seen_dropped:
                self._last_loss = now
            if writer_errors > seen_errors:
                self._last_writer_error = now
            self._seen = (max(dropped, seen_dropped), max(writer_errors, seen_errors))
            recent_loss = self._last_loss is not None and now - self._last_loss < self.window_s
            recent_error = self._last_writer_error is not None and now - self._last_writer_error < self.window_s
        reasons = []
        if recent_loss:
            reasons.append(f"capture dropped records in the last {self.window_s:g} s ({dropped:,} since start)")
        if recent_error:
            reasons.append(f"spool writes are failing ({writer_errors:,} failed batches since start"
                           + (f"; last: {stats.last_error}" if stats.last_error else "") + ")")
        if backlog > self.backlog_limit:
            reasons.append(f"capture is backing up: {backlog:,} records wait for the spool "
                           f"(limit {self.backlog_limit:,})")
        return {"status": "degraded" if reasons else "ok", "reasons": reasons, "dropped": dropped,
                "backlog": backlog, "writer_errors": writer_errors}

    def describe(self, strict: bool) -> str:
        """What ``/health`` does, for the serve banner (the same words ``molt doctor`` shows)."""
        code = "HTTP 503 (--strict-health)" if strict else "HTTP 200 (503 with --strict-health)"
        return (f"/health says degraded, {code}, while capture drops records (and {self.window_s:g} s after), "
                f"spool writes fail, or over {self.backlog_limit:,} records wait for the spool")
