"""The Recorder's delivery thread: what the writer made durable in the spool goes to the sink in batches
(the writer's hand-over first, else read back from the spool), retried with backoff while the sink fails,
the spool's cursor committed after each delivered batch; and, at close, delivery while the sink is healthy."""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any

import orjson

from molt.capture.sinks import SealedRow, Sink, SinkBatch
from molt.capture.spool import FRAME_EVENT, FRAME_REWARD, HEADER_SIZE, Spool, SpoolPosition

__all__ = ["Delivery"]

log = logging.getLogger("molt.capture")

#: Most frame bytes the writer keeps for the deliverer (``Recorder._handoff``) beside the spool: two
#: batches of a few thousand typical events; past it the deliverer reads the spool.
_HANDOFF_BYTES = 16 << 20


def _to_batch(frames: list[tuple[bytes, bytes]], *, redelivery: bool) -> SinkBatch:
    batch = SinkBatch(redelivery=redelivery)
    for kind, body in frames:
        _add_frame(batch, kind, body)
    return batch


def _add_frame(batch: SinkBatch, kind: bytes, body: bytes) -> None:
    if kind == FRAME_EVENT:
        batch.events.append(SealedRow.decode(body))
    elif kind == FRAME_REWARD:
        batch.rewards.append(orjson.loads(body))
    else:
        batch.quarantine.append(orjson.loads(body))


class Delivery:
    """The delivery side of :class:`~molt.capture.recorder.Recorder` (a mixin: the Recorder owns the state
    it reads, set up in its ``__init__``)."""

    sink: Sink | None
    batch_size: int
    retry_max_s: float
    deliver_interval_s: float
    _spool: Spool
    _cond: threading.Condition
    _commit_lock: threading.Lock
    _handoff: collections.deque[tuple[SpoolPosition, SpoolPosition, list[SealedRow | bytes], int]]
    _handoff_bytes: int
    _handoff_lock: threading.Lock
    _deliver_wake: threading.Event
    _deliver_urgent: threading.Event
    _writer_done: threading.Event
    _last_delivery: float
    _recovery_end: SpoolPosition
    _redeliver_end: Any
    _closed: bool
    _abandoned: bool
    _delivered: int
    _sink_call_since: float | None
    _sink_failing: bool
    _sink_attempts: int
    _sink_errors: int
    _retry_now: bool
    _last_error: str | None

    def _all_delivered(self) -> bool:
        raise NotImplementedError

    def _hand_over(self, before: SpoolPosition, after: SpoolPosition, rows: list[SealedRow | bytes],
                   size: int) -> None:
        """Keep a durable batch for the delivery thread (see ``_handoff``); the oldest go past the bound."""
        with self._handoff_lock:
            self._handoff.append((before, after, rows, size))
            self._handoff_bytes += size
            while self._handoff_bytes > _HANDOFF_BYTES and len(self._handoff) > 1:
                self._handoff_bytes -= self._handoff.popleft()[3]

    def _take_handed_over(self, start: SpoolPosition, end: SpoolPosition) -> tuple[SinkBatch, SpoolPosition] | None:
        """The batches the writer handed over that follow ``start`` without a gap (up to ``end`` and
        ``batch_size`` frames) as one SinkBatch, and the spool position after them; None when the frames
        at ``start`` were not handed over (they are read from the spool)."""
        taken: list[list[SealedRow | bytes]] = []
        n = 0
        pos = start
        with self._handoff_lock:
            q = self._handoff
            while q and q[0][0] < pos:  # delivered from the spool already, or by an earlier take
                self._handoff_bytes -= q.popleft()[3]
            while q and q[0][0] == pos and q[0][1] <= end and (not taken or n + len(q[0][2]) <= self.batch_size):
                _, after, rows, size = q.popleft()
                self._handoff_bytes -= size
                taken.append(rows)
                n += len(rows)
                pos = after
        if not taken:
            return None
        batch = SinkBatch()
        for rows in taken:
            for row in rows:
                if isinstance(row, SealedRow):
                    batch.events.append(row)
                else:  # a reward or quarantine record: as the spool holds it
                    _add_frame(batch, row[2:3], row[HEADER_SIZE:])
        return batch, pos

    def _deliver_loop(self) -> None:
        backoff = 0.05
        while True:
            due = self._spool.cursor_due_in()
            self._deliver_wake.wait(0.2 if due is None else min(0.2, due))
            self._deliver_wake.clear()
            if due is not None:
                self._sync_cursor_if_due()
            if self.sink is None:
                if self._closed:
                    return
                continue
            while True:
                start, end = self._spool.cursor, self._spool.end()
                if start >= end:
                    self._deliver_urgent.clear()
                    break
                if self.deliver_interval_s and not self._closed and not self._deliver_urgent.is_set():
                    left = self._last_delivery + self.deliver_interval_s - time.monotonic()
                    if left > 0:  # gather: what arrives meanwhile goes in this write
                        self._deliver_urgent.wait(left)
                        continue
                redo = self._redeliver_end
                redelivery = start < self._recovery_end or (redo is not None and start < redo)
                handed = None if redelivery else self._take_handed_over(start, end)
                if handed is not None:
                    batch, pos = handed
                else:
                    frames, pos = self._spool.read(start, end, max_frames=self.batch_size)
                    if not frames:
                        break
                    batch = _to_batch(frames, redelivery=redelivery)
                self._sink_call_since = time.monotonic()
                try:
                    self.sink.write_batch(batch)
                    self._sink_call_since = None
                    self._sink_failing = False
                    self._sink_attempts += 1
                    self._last_delivery = time.monotonic()
                except Exception as exc:
                    self._sink_call_since = None
                    self._sink_failing = True
                    self._sink_attempts += 1
                    self._sink_errors += 1
                    self._last_error = f"sink write failed: {exc!r}"
                    log.warning("Molt sink write failed (will retry in %.2fs): %r", backoff, exc)
                    if self._closed:
                        return
                    # Sleep the whole backoff: the writer wakes this thread after every batch it spools, and
                    # each retry re-reads and decodes the pending batch, so with the sink down an unguarded
                    # wait turned every recorded call into a retry on the agent's GIL. close() still wakes it.
                    retry_at = time.monotonic() + backoff
                    while not (self._closed or self._retry_now) and (left := retry_at - time.monotonic()) > 0:
                        self._deliver_wake.wait(left)
                        self._deliver_wake.clear()
                    self._retry_now = False
                    if self._closed:
                        return
                    backoff = min(backoff * 2, self.retry_max_s)
                    continue
                backoff = 0.05
                commit_error: Exception | None = None
                with self._commit_lock:
                    if self._abandoned:  # close() gave up on us; the next Recorder owns the spool
                        return
                    try:
                        self._spool.commit(pos)
                    except Exception as exc:
                        commit_error = exc
                    else:
                        self._delivered += len(batch)
                if commit_error is not None:  # disk full: the batch stays undelivered; the retry deduplicates
                    self._sink_errors += 1
                    self._last_error = f"spool cursor commit failed: {commit_error!r}"
                    log.warning("Molt could not record a delivery in the spool (will retry): %r", commit_error)
                    self._redeliver_end = pos if redo is None else max(redo, pos)
                    if self._closed:
                        return
                    self._deliver_wake.wait(self.retry_max_s)
                    continue
                with self._cond:
                    self._cond.notify_all()
            if self._closed and self._writer_done.is_set():
                return

    def _sync_cursor_if_due(self) -> None:
        """Write the spool's cursor file once its interval is up (``Spool.commit`` defers it), so an
        idle Recorder's file says what was delivered within ``Spool.cursor_interval_s``."""
        due = self._spool.cursor_due_in()
        if due is None or due > 0:
            return
        with self._commit_lock:
            if self._abandoned:
                return
            try:
                self._spool.sync_cursor()
            except Exception as exc:  # disk full: a restart re-delivers (deduplicated); retried next time
                self._last_error = f"spool cursor write failed: {exc!r}"

    #: A sink call in flight for longer than this counts as hung when closing.
    _HUNG_SINK_S = 0.05

    def _sink_unhealthy(self) -> bool:
        since = self._sink_call_since
        return self._sink_failing or (since is not None and time.monotonic() - since > self._HUNG_SINK_S)

    def _deliver_while_healthy(self, deadline: float) -> None:
        """Wait until the spool is delivered, the deadline passes, or the sink hangs, or fails again.

        A sink that failed earlier gets one more try now (its retry backoff is cut short): it may have
        recovered since, and then everything is delivered before the process goes.
        """
        attempts = self._sink_attempts
        if self._sink_failing:
            self._retry_now = True
        self._deliver_urgent.set()
        self._deliver_wake.set()
        with self._cond:
            while not self._all_delivered():
                since = self._sink_call_since
                if since is not None and time.monotonic() - since > self._HUNG_SINK_S:
                    return  # hung in a call
                if self._sink_failing and self._sink_attempts > attempts:
                    return  # tried again since close() began, and failed again
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._deliver_wake.set()
                self._cond.wait(min(remaining, 0.01))
