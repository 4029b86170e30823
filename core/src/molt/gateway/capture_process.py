"""Capture in a separate process, so recording never competes with serving for the GIL.

The Recorder's work — building events, the governance pipeline (redaction, classification, …),
sealing into the hash chain, the spool's fsyncs and the store's writes — is CPU-bound Python. In the
gateway's process it would take the interpreter lock from the event loop for milliseconds at a
time. :class:`CaptureProcess` runs that work in a child process instead: the gateway serializes
each call once (a compact dict, orjson) and a sender thread writes batches into a pipe; the child
rebuilds the call, turns it into ATDP events (:class:`~molt.gateway.call_record.CallRecorder`) and records
them through a real :class:`~molt.capture.Recorder` into the store.

It offers what the gateway needs of a Recorder (``record``, ``reward``, ``new_trajectory``,
``flush``, ``stats``, ``close``) plus ``submit`` for whole calls. Capture stays fail-open: if the
child dies, records are counted as dropped and the gateway keeps serving. Durability is the child
Recorder's: a record is acknowledged once its spool has it.

The pipe's frames are :mod:`molt.gateway.capture_wire`; the child's side is
:mod:`molt.gateway.capture_child`. The child appends small batches for as long as the gateway runs and
keeps its memory bounded (writer-sized LanceDB caches; :mod:`molt.gateway.native_heap`), so it runs
flat and is not replaced by default; ``recycle_after`` keeps a safety net for a workload that grows it
anyway: after that many records a fresh child takes the spool over (see :data:`RECYCLE_AFTER`).

Example::

    rec = CaptureProcess(store_uri="~/.molt/store", spool_dir="~/.molt/spool", governance="default")
    gateway = Gateway([backend], recorder=rec)
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any

import orjson

from molt.atdp.ids import new_id
from molt.atdp.models import Event, RewardAnnotation
from molt.capture.recorder import RecorderStats
from molt.gateway import capture_wire as wire
from molt.gateway.call_record import CallRecord
from molt.gateway.capture_child import SPOOL_WAIT_S
from molt.gateway.native_heap import TRIM_INTERVAL_S

__all__ = ["MIN_RECYCLE_AFTER", "RECYCLE_AFTER", "CaptureProcess"]

log = logging.getLogger("molt.gateway")

#: RecorderStats fields that count since the Recorder opened (the rest are gauges of the live child):
#: a recycled child's last values are added to its successors', so the gateway's counters never go back.
_COUNTERS = ("enqueued", "acknowledged", "delivered", "dropped_queue_full", "dropped_spool_full", "quarantined",
             "duplicates", "sink_errors", "writer_errors", "capture_failed", "dropped_write_failed")
#: Records after which :class:`CaptureProcess` replaces its child with a fresh one; 0, the default:
#: never. With its caches bounded, its heap trimmed and Arrow on that heap, the child's memory levels
#: off (a 40-minute soak at ~420 requests a second: +1 MiB over its second half; bench/reliability/
#: README.md). Recycling is a safety net for a workload that still grows it: a fresh child costs a
#: second or two of start-up at low priority, and nothing is lost in the handover.
RECYCLE_AFTER = 0
#: The smallest ``recycle_after`` other than 0: a child's start-up costs a second or two.
MIN_RECYCLE_AFTER = 1_000


class CaptureProcess:
    """A Recorder in a child process (see the module docstring).

    Args:
        store_uri: the store (default ``$MOLT_HOME/store``).
        spool_dir: the child Recorder's spool (default ``$MOLT_HOME/spool``).
        governance: ``"default"`` (the built-in policy, the default), a policy file path, or ``None``
            (off: calls are stored as made, PII included, and never trained on).
        fsync: the spool's fsync policy (default ``"always"``).
        max_pending: records held while the pipe is busy before new ones are dropped (default 100,000).
        nice: how much lower the child's CPU priority is (default 10: serving goes first).
        batch_s: how long records may wait to be sent together (default 5 ms; fewer wake-ups).
        dedupe_ids / chain_heads: the child Recorder's (default 200,000 each).
        recycle_after: replace the child with a fresh one after it was sent this many records
            (calls, events, rewards; default ``0``: never). See :data:`RECYCLE_AFTER`.
        spool_wait_s: how long the first child waits for a spool another process holds (default
            :data:`~molt.gateway.capture_child.SPOOL_WAIT_S`: time for the child of a gateway that just died to finish); then it exits
            naming the holder, and calls are served unrecorded (counted in :attr:`failed`).
        trim_interval_s: how often the child gives the free memory in its native heap back to the
            system (default :data:`~molt.gateway.native_heap.TRIM_INTERVAL_S`; 0 never; see
            :func:`~molt.gateway.native_heap.trim_native_heap`).
    """

    def __init__(self, store_uri: str | os.PathLike[str] | None = None, spool_dir: str | os.PathLike[str] | None = None,
                 *, governance: str | None = "default", fsync: str = "always", max_pending: int = 100_000,
                 nice: int = 10, batch_s: float = 0.005, storage_options: dict[str, str] | None = None,
                 start_timeout_s: float = 60.0, dedupe_ids: int = 200_000, chain_heads: int = 200_000,
                 recycle_after: int = RECYCLE_AFTER, spool_wait_s: float = SPOOL_WAIT_S,
                 trim_interval_s: float = TRIM_INTERVAL_S):
        if dedupe_ids < 1000:
            raise ValueError(f"dedupe_ids must be at least 1,000, got {dedupe_ids}.")
        if chain_heads < 100:
            raise ValueError(f"chain_heads must be at least 100, got {chain_heads}.")
        if recycle_after and recycle_after < MIN_RECYCLE_AFTER:
            raise ValueError(f"recycle_after must be 0 (never) or at least {MIN_RECYCLE_AFTER:,}, got {recycle_after}.")
        if not spool_wait_s >= 0:
            raise ValueError(f"spool_wait_s must be a number of seconds, 0 or more, got {spool_wait_s}.")
        if not trim_interval_s >= 0:
            raise ValueError(f"trim_interval_s must be a number of seconds, 0 or more, got {trim_interval_s}.")
        home = os.path.expanduser(os.environ.get("MOLT_HOME", "~/.molt"))
        # how long a replaced child may take to make what it was sent durable before it is killed
        self._handover_s = start_timeout_s + 30.0
        self._config: dict[str, Any] = {
            "store_uri": str(store_uri or os.path.join(home, "store")),
            "spool_dir": str(spool_dir or os.path.join(home, "spool")), "governance": governance,
            "fsync": fsync, "storage_options": storage_options, "nice": nice, "dedupe_ids": dedupe_ids,
            "chain_heads": chain_heads, "spool_wait_s": spool_wait_s, "handover_s": self._handover_s,
            "trim_interval_s": trim_interval_s}
        self.start_timeout_s = start_timeout_s
        self.recycle_after = recycle_after
        self._proc = self._spawn(self._config)
        self._holds_spool = False  # whether the current child said it took the spool (wire.HOLDS_SPOOL)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._stdin = self._proc.stdin
        self._stdout_fd = self._proc.stdout.fileno()
        self._reply_buf = b""
        self.max_pending = max_pending
        self.batch_s = batch_s
        self._pending: collections.deque[bytes] = collections.deque()
        self._wake = threading.Event()
        self._closed = False
        self._sent = 0
        self._dropped = 0
        self._request_lock = threading.Lock()
        self._last_stats: dict[str, Any] = {}
        # recycling: records sent to the current child; counters of the children replaced; their reapers
        self._to_child = 0
        self.recycled = 0
        self._carried: dict[str, int] = dict.fromkeys(_COUNTERS, 0)
        # a replaced child's counters as last seen, until its final ones arrive (by its pid)
        self._provisional: dict[int, dict[str, int]] = {}
        self._carried_lock = threading.Lock()
        self._reapers: list[threading.Thread] = []
        self._sender = threading.Thread(target=self._send_loop, name="molt-capture-sender", daemon=True)
        self._sender.start()
        if not self.flush(timeout=start_timeout_s):
            if self._proc.poll() is not None:
                log.error("The capture process exited at start (exit code %s; its error is above): calls are "
                          "served but not recorded.", self._proc.returncode)
            else:
                log.warning("The capture process did not answer within %.0f s; records wait in its pipe.",
                            start_timeout_s)

    @staticmethod
    def _spawn(config: dict[str, Any]) -> subprocess.Popen[bytes]:
        # A plain subprocess with pipes (not multiprocessing): nothing of the parent is re-imported
        # or pickled, and the child ends by itself when the gateway's end of stdin closes.
        return subprocess.Popen(
            [sys.executable, "-c", "from molt.gateway.capture_child import main; main()",
             orjson.dumps(config).decode()], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)

    # ------------------------------------------------------------------ the Recorder surface

    def _put(self, kind: bytes, payload: bytes) -> bool:
        if self._closed or len(self._pending) >= self.max_pending or self._proc.poll() is not None:
            if kind in wire.RECORDS:  # a request (stats after close) or a hint is not a lost record
                self._dropped += 1
            return False
        self._pending.append(wire.frame(kind, payload))
        # The sender wakes by itself every batch_s; only requests and bursts wake it at once.
        if kind in (wire.FLUSH, wire.STATS, wire.QUIT) or len(self._pending) >= 512:
            self._wake.set()
        return True

    def submit(self, rec: CallRecord) -> None:
        """Record a whole model call (its events are built in the child)."""
        try:
            self._put(wire.CALL, wire.call_to_wire(rec))
        except Exception:
            self._dropped += 1
            log.exception("Molt could not serialize a model call of trajectory %s.", rec.trajectory_id)

    def record(self, event: Event) -> bool:
        """Record one event."""
        return self._put(wire.EVENT, event.model_dump_json().encode())

    def reward(self, annotation: RewardAnnotation) -> bool:
        """Record a late reward."""
        return self._put(wire.REWARD, annotation.model_dump_json().encode())

    def new_trajectory(self) -> str:
        """A new trajectory id, announced to the child so its Recorder starts a fresh chain without
        a store lookup (the same shortcut as ``Recorder.new_trajectory``)."""
        tid = new_id()
        self._put(wire.FRESH, tid.encode())
        return tid

    def _recycle_due(self) -> bool:
        return bool(self.recycle_after) and self._to_child >= self.recycle_after and not self._closed

    def _handover_ready(self) -> bool:
        """A handover is due and the current child holds the spool, so its successor cannot take the
        spool before it (one owner at a time, in the order the records were sent)."""
        return self._recycle_due() and self._holds_spool

    def _request(self, kind: bytes, timeout: float, **fields: Any) -> dict[str, Any] | None:
        # A handover that is due needs this lock between two requests: let the sender take it first,
        # or frequent requests (a status poll) keep one child for far longer than recycle_after.
        wait_until = time.monotonic() + 2.0
        while self._handover_ready() and time.monotonic() < wait_until:
            time.sleep(0.005)
        with self._request_lock:
            rid = new_id()
            if not self._put(kind, orjson.dumps({"id": rid, "timeout": timeout, **fields})):
                return None
            deadline = time.monotonic() + timeout + 5.0
            while time.monotonic() < deadline and self._proc.poll() is None:
                for _, payload in self._read_replies(0.05):
                    reply: dict[str, Any] = orjson.loads(payload)
                    if reply["id"] == rid:
                        self._last_stats = reply["stats"]
                        return reply
            return None

    def _read_replies(self, wait_s: float) -> list[tuple[bytes, bytes]]:
        ready, _, _ = select.select([self._stdout_fd], [], [], wait_s)
        if ready:
            data = os.read(self._stdout_fd, 65536)
            if data:
                self._reply_buf += data
        frames, self._reply_buf = wire.split_frames(self._reply_buf)
        out = []
        for kind, payload in frames:
            if kind == wire.STATS and payload == wire.HOLDS_SPOOL:
                self._holds_spool = True
            else:
                out.append((kind, payload))
        return out

    def flush(self, timeout: float | None = 10.0, *, deliver: bool = False) -> bool:
        """Wait until everything submitted so far is durable in the child's spool (and delivered to
        the store with ``deliver=True``). Blocking: for tests and shutdown, not the event loop."""
        reply = self._request(wire.FLUSH, 10.0 if timeout is None else timeout, deliver=deliver)
        return bool(reply and reply["ok"])

    @property
    def stats(self) -> RecorderStats:
        """The child Recorder's counters (asked for, at most 1 s), with this side's drops added."""
        reply = self._request(wire.STATS, 1.0)
        s = dict(reply["stats"] if reply else self._last_stats)
        s.pop("capture_failed", None)
        base: dict[str, Any] = dict.fromkeys(RecorderStats.__dataclass_fields__, 0)
        base.update({k: v for k, v in s.items() if k in base})
        carried = self._carried_counters()  # what the children replaced before this one counted
        for k in _COUNTERS:
            if k in base:
                base[k] = int(base[k] or 0) + carried[k]
        base["dropped_queue_full"] = int(base.get("dropped_queue_full") or 0) + self._dropped
        base["pending_in_queue"] = int(base.get("pending_in_queue") or 0) + len(self._pending)
        if base.get("last_error") == 0:
            base["last_error"] = None
        return RecorderStats(**base)

    @property
    def build_failures(self) -> int:
        """Calls whose events the child could not build (drops on this side are in :attr:`stats`)."""
        return self._carried_counters()["capture_failed"] + int(self._last_stats.get("capture_failed") or 0)

    @property
    def failed(self) -> int:
        """Calls that could not be recorded (dropped here, or failed to build in the child)."""
        return (self._dropped + self._carried_counters()["capture_failed"]
                + int(self._last_stats.get("capture_failed") or 0))

    def _carried_counters(self) -> dict[str, int]:
        with self._carried_lock:
            out = dict(self._carried)
            for seen in self._provisional.values():
                for k in _COUNTERS:
                    out[k] += seen[k]
            return out

    @property
    def alive(self) -> bool:
        """Whether the capture process is running."""
        return self._proc.poll() is None

    def close(self, timeout: float = 10.0) -> bool:
        """Send what is pending, stop the child (it closes its Recorder and store) and wait for it."""
        if self._closed:
            return True
        ok = self.flush(timeout=timeout, deliver=True) if self._proc.poll() is None else False
        self._put(wire.QUIT, b"")
        self._closed = True
        self._wake.set()
        self._sender.join(timeout)
        with contextlib.suppress(OSError):
            self._stdin.close()
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.terminate()
            self._proc.wait(5)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        for reaper in self._reapers:  # a recycled child handed its spool over before this one started
            reaper.join(timeout)
        return ok

    # ------------------------------------------------------------------ sender thread

    def _send_loop(self) -> None:
        q = self._pending
        while True:
            if not q:
                if self._closed:
                    return
                self._wake.wait(self.batch_s)
                self._wake.clear()
                if self._recycle_due():
                    self._recycle()  # postponed by a request in flight, and no traffic since
                continue
            batch = []
            size = 0
            while q and size < (1 << 20):
                f = q.popleft()
                batch.append(f)
                size += len(f)
                if self.recycle_after and f[4:5] in wire.RECORDS:
                    self._to_child += 1
                    if self._to_child >= self.recycle_after:
                        break  # the next records go to the next child
            try:
                self._stdin.write(b"".join(batch))  # releases the GIL while the pipe drains
                self._sent += len(batch)
            except (OSError, ValueError):
                self._dropped += len(batch)
                if self._proc.poll() is not None:
                    log.error("The capture process is gone; %d records were dropped.", len(batch))
                continue
            if self._recycle_due():
                self._recycle()

    # ------------------------------------------------------------------ recycling

    def _recycle(self) -> None:
        """Hand the spool to a fresh child: the old one gets end-of-input, makes what it was sent
        durable, delivers what the store takes in its close timeout, releases the spool and exits;
        the new one takes the spool over (delivering what is left there) and gets every record from
        now on, which wait in its pipe and in ``_pending`` meanwhile. Nothing acknowledged is lost and
        nothing is written twice: one spool, one owner at a time. Runs on the sender thread, so the
        order of records is kept; a request waiting for the old child's reply postpones it."""
        if not self._request_lock.acquire(blocking=False):
            return
        try:
            old = self._proc
            if old.poll() is not None:
                return  # a dead child is not replaced here (its records are counted as dropped)
            if not self._holds_spool:
                self._read_replies(0)  # its wire.HOLDS_SPOOL frame may be waiting (other replies are stale)
                if not self._holds_spool:
                    return  # still starting: replaced once it holds the spool
            try:
                # It waits for the spool as long as its predecessor may take to hand it over (see _reap).
                new = self._spawn({**self._config, "spool_wait_s": self._handover_s + 30.0, "replacing": True})
            except OSError as exc:
                log.warning("Could not start a new capture process (the current one goes on): %r", exc)
                self._to_child = 0
                return
            assert new.stdin is not None and new.stdout is not None
            self._proc, self._stdin, self._stdout_fd, self._reply_buf = new, new.stdin, new.stdout.fileno(), b""
            self._holds_spool = False
            with self._carried_lock:  # the old child's counters count until its final ones replace them
                self._provisional[old.pid] = {k: int(self._last_stats.get(k) or 0) for k in _COUNTERS}
                self._last_stats = {}
            self._to_child = 0
            self.recycled += 1
        finally:
            self._request_lock.release()
        with contextlib.suppress(OSError):
            assert old.stdin is not None
            old.stdin.close()
        reaper = threading.Thread(target=self._reap, args=(old,), name="molt-capture-reaper", daemon=True)
        reaper.start()
        self._reapers = [t for t in self._reapers if t.is_alive()] + [reaper]

    def _reap(self, old: subprocess.Popen[bytes]) -> None:
        """Carry a recycled child's counters over (from its last words, as soon as they come) and wait
        for it to exit."""
        assert old.stdout is not None
        fd, buf, final = old.stdout.fileno(), b"", None
        deadline = time.monotonic() + self._handover_s + 30.0
        try:
            while time.monotonic() < deadline:
                ready, _, _ = select.select([fd], [], [], 1.0)
                if not ready:
                    continue
                data = os.read(fd, 65536)
                if not data:
                    break
                if final is not None:
                    continue  # its last words came; wait for it to exit
                frames, buf = wire.split_frames(buf + data)
                for kind, payload in frames:
                    if kind == wire.STATS and (reply := orjson.loads(payload)).get("id") == wire.FINAL:
                        final = reply["stats"]
                        self._settle(old.pid, {k: int(final.get(k) or 0) for k in _COUNTERS})
            else:
                log.error("A recycled capture process did not exit in time; killing it (its spool is intact).")
                old.kill()
            old.wait(10)
        finally:
            old.stdout.close()
        if final is None:
            log.error("A recycled capture process (exit code %s) sent no final counters; its last known "
                      "ones are kept.", old.returncode)
            self._settle(old.pid, None)

    def _settle(self, pid: int, final: dict[str, int] | None) -> None:
        """A replaced child's counters become carried: its final ones, or (none came) its last seen."""
        with self._carried_lock:
            seen = self._provisional.pop(pid, None)
            for k, v in (final or seen or {}).items():
                self._carried[k] += v

    def __enter__(self) -> CaptureProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
