"""The Recorder: the one call adapters and the gateway make to capture an event.

``record()`` costs the caller a deque append: validation of size, sealing into the hash chain,
serialization and disk writes happen on the Recorder's writer thread, and delivery to the store on
its delivery thread. The agent never waits on Molt and never sees an exception from it (unless the
Recorder is built with ``strict=True``, for tests).

Life of an event::

    record(ev) ──deque──▶ writer thread: seq + hash chain, frame ──▶ spool (fsync) ──▶ acknowledged
                                                                       │
                          delivery thread: batch ◀─────────────────────┘ ──▶ sink (LanceDB store)

An event is *acknowledged* once its frame is durable in the spool (see ``Spool`` for the fsync
policy): :meth:`Recorder.flush` waits for that, and an acknowledged event survives ``kill -9`` and
is delivered when a Recorder next opens the same spool. Backpressure is bounded: when the in-memory
queue (``max_queue``) or the spool (``max_spool_bytes``) is full, records are dropped and counted in
:attr:`Recorder.stats`, never blocking the caller.

Governance is on by default: every event goes through the built-in governance policy (redaction,
classification, eligibility, retention; ``molt.governance``) on the writer thread before it is
sealed, so neither the spool nor the store ever holds what it redacts, and each event's decision is
stored with it. ``hook=`` takes a policy of your own (``GovernancePipeline.from_file(...)``);
``hook=None`` records events as they are, PII included — such events have no decision, so the
training queue never hands them to a trainer.

Example::

    from molt.capture import Recorder
    from molt.store import Store

    store = Store.open("~/.molt/store")
    with Recorder(store, spool_dir="~/.molt/spool") as rec:   # governed by the default policy
        tid = rec.new_trajectory()
        rec.record(Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE,
                         action=UserMessage(content="hi")))

One module at ~780 lines because it is one idea: the durable write path (queue, writer thread, spool)
whose guarantees (acknowledged means durable, chain order, dedupe) span all of it; the delivery thread
that drains the spool into the sink is :mod:`molt.capture.delivery`.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import importlib
import itertools
import logging
import os
import shutil
import sys
import threading
import time
import warnings
import weakref
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from molt.atdp.chain import GENESIS, seal_parts
from molt.atdp.ids import new_id
from molt.atdp.models import Event, RewardAnnotation
from molt.atdp.validate import MAX_RECORD_BYTES, check_size
from molt.capture.delivery import Delivery
from molt.capture.hooks import CaptureHook, govern_reward
from molt.capture.sinks import SealedRow, Sink
from molt.capture.spool import (
    FRAME_EVENT,
    FRAME_QUARANTINE,
    FRAME_REWARD,
    FsyncPolicy,
    Spool,
    SpoolPosition,
    encode_frame,
)
from molt.errors import CaptureError, MoltError, ProtocolError, SpoolInUse

__all__ = ["DEFAULT_PIPELINE", "Recorder", "RecorderStats", "index_fields", "resolve_pipeline"]

log = logging.getLogger("molt.capture")

#: ``Recorder(hook=...)``'s default: the governance pipeline of the built-in policy. Capture knows
#: only the hook protocol, so the pipeline is imported by name when a Recorder is built.
DEFAULT_PIPELINE = "default"
_warned_ungoverned = False
_UNSET: Any = object()


@dataclass(frozen=True)
class RecorderStats:
    """Counters since the Recorder opened. ``dropped_*`` and ``quarantined`` never reach training;
    ``duplicates`` counts re-recorded event ids that were dropped (idempotent delivery)."""

    enqueued: int
    acknowledged: int
    delivered: int
    dropped_queue_full: int
    dropped_spool_full: int
    quarantined: int
    duplicates: int
    sink_errors: int
    writer_errors: int
    pending_in_queue: int
    spool_pending_bytes: int
    last_error: str | None
    #: records lost because writing them to the spool failed (a full disk, a file-size limit)
    dropped_write_failed: int = 0

    @property
    def dropped(self) -> int:
        """Every record lost before it was durable: queue full, spool full, spool write failed."""
        return self.dropped_queue_full + self.dropped_spool_full + self.dropped_write_failed

    def as_dict(self) -> dict[str, Any]:
        """The counters as a plain dict (for metrics and ``molt doctor``)."""
        return asdict(self)


def index_fields(event: Event, seq: int) -> dict[str, Any]:
    """The denormalized columns the store indexes an event by (tenant, time, kind, outcome, …)."""
    md = event.metadata
    out = event.outcome
    consent = md.consent
    # The enums are StrEnums: str() is their value, through a C slot; ``.value`` is a Python-level
    # descriptor that cost more than the rest of this function's fields together.
    return {
        "event_id": event.event_id,
        "trajectory_id": event.trajectory_id,
        "session_id": event.session_id,
        "parent_id": event.parent_id,
        "seq": seq,
        "kind": str(event.kind),
        "name": event.name,
        "ts_us": int(event.timestamp.timestamp() * 1_000_000),
        "tenant_id": md.tenant_id,
        "agent_id": md.agent_id,
        "task": md.task,
        "status": str(out.status) if out is not None else None,
        "reward": event.reward,
        "policy_version": event.provenance.policy_version,
        "classification": str(md.classification),
        "subject_id": consent.subject_id if consent is not None else None,
    }


class Recorder(Delivery):
    """Capture events durably, off the caller's thread.

    Args:
        sink: where spooled records are delivered (a :class:`molt.store.Store`, or any ``Sink``);
            ``None`` keeps them in the spool until a Recorder with a sink opens it.
        spool_dir: the spool directory (default ``$MOLT_HOME/spool``). One Recorder per directory.
        fsync: spool durability policy, ``"always"`` (default), ``"interval"`` or ``"never"``.
        max_queue: in-memory queue bound (default 100,000 records; 1 – 10^7).
        max_spool_bytes: on-disk bound for undelivered records (default 1 GiB).
        batch_size: most records per spool write and per sink write (default 4,096; 1 – 100,000).
        flush_interval_s: how long the writer waits to gather a batch (default 2 ms).
        deliver_interval_s: least time between two sink writes (default 0: deliver as soon as spooled).
            What is spooled meanwhile goes out in one larger write — into LanceDB, each write is a table
            version, and versions cost memory, compaction and disk. ``flush(deliver=True)`` and
            :meth:`close` do not wait for it.
        max_record_bytes: the size cap of one serialized event (default 1 MiB); larger ones are
            quarantined with the reason, not delivered to the store.
        dedupe_ids: event ids remembered (the newest) so that a retried ``record()`` of an event is
            dropped before sealing (default 200,000; at least 1,000). Memory grows with them, about
            150 bytes an id, until the bound is reached.
        chain_heads: trajectories whose chain head (last seq and hash) is remembered, the most
            recently written first (default 200,000; at least 100). A trajectory that was forgotten
            and gets another event has its head looked up in the sink. About 350 bytes a trajectory
            until the bound is reached: a gateway passes its ``max_sessions``, the trajectories it can
            still append to.
        strict: raise :class:`~molt.errors.MoltError` from ``record()`` instead of counting (tests).
        hook: the :class:`~molt.capture.CaptureHook` run on the writer thread before sealing:
            ``"default"`` (default) is the governance pipeline of the built-in policy, or pass a
            ``GovernancePipeline`` of your own; ``None`` turns governance off (events are stored as
            recorded, PII included, and never trained on). A hook that raises or rejects an event
            quarantines it; the caller never sees either. When the hook has ``sink_for`` the Recorder
            delivers to ``hook.sink_for(sink)``: a store gets the governance decisions too.
        pipeline: the former name of ``hook`` (deprecated: a DeprecationWarning, then the same).
    """

    def __init__(
        self,
        sink: Sink | None = None,
        *,
        spool_dir: str | os.PathLike[str] | None = None,
        fsync: FsyncPolicy = "always",
        max_queue: int = 100_000,
        max_spool_bytes: int = 1 << 30,
        batch_size: int = 4096,
        flush_interval_s: float = 0.002,
        max_record_bytes: int = MAX_RECORD_BYTES,
        retry_max_s: float = 5.0,
        deliver_interval_s: float = 0.0,
        dedupe_ids: int = 200_000,
        chain_heads: int = 200_000,
        strict: bool = False,
        name: str = "molt",
        hook: CaptureHook | str | None = DEFAULT_PIPELINE,
        pipeline: CaptureHook | str | None = _UNSET,
    ):
        if pipeline is not _UNSET:
            if hook is not DEFAULT_PIPELINE:
                raise TypeError("Recorder() takes hook= or its deprecated name pipeline=, not both.")
            warnings.warn("Recorder(pipeline=...) is deprecated; pass hook=... (the CaptureHook run before "
                          "sealing).", DeprecationWarning, stacklevel=2)
            hook = pipeline
        if not 1 <= max_queue <= 10_000_000:
            raise ValueError(f"max_queue must be between 1 and 10,000,000, got {max_queue}.")
        if not 1 <= batch_size <= 100_000:
            raise ValueError(f"batch_size must be between 1 and 100,000, got {batch_size}.")
        if dedupe_ids < 1000:
            raise ValueError(f"dedupe_ids must be at least 1,000, got {dedupe_ids}.")
        if chain_heads < 100:
            raise ValueError(f"chain_heads must be at least 100, got {chain_heads}.")
        default_spool = spool_dir is None
        if spool_dir is None:
            spool_dir = Path(os.environ.get("MOLT_HOME", "~/.molt")).expanduser() / "spool"
        resolved = resolve_pipeline(hook)
        sink_for = getattr(resolved, "sink_for", None)
        # one argument attaches the hook and where its decisions go: a store left bare would silently
        # drop them
        self.sink = sink_for(sink) if sink_for is not None else sink
        self.hook: CaptureHook | None = resolved
        self.strict = strict
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.max_record_bytes = max_record_bytes
        self.retry_max_s = retry_max_s
        if not 0.0 <= deliver_interval_s <= 60.0:
            raise ValueError(f"deliver_interval_s must be between 0 and 60 seconds, got {deliver_interval_s}.")
        self.deliver_interval_s = deliver_interval_s
        self._deliver_urgent = threading.Event()  # flush(deliver=True) / close(): skip the delivery interval
        self._last_delivery = 0.0
        # Segments no larger than the bound, so a small max_spool_bytes (an edge device, a test) is accepted.
        spool_kw: dict[str, Any] = {"fsync": fsync, "max_bytes": max_spool_bytes,
                                    "segment_bytes": max(4096, min(64 << 20, max_spool_bytes))}
        #: a spool of this process's own, beside the default one (removed by close() once delivered)
        self._own_spool = False
        try:
            self._spool = Spool(Path(spool_dir).expanduser(), **spool_kw)
        except SpoolInUse:
            if not default_spool:
                raise
            # The default spool is held by another process on this MOLT_HOME (`molt serve`, another
            # agent): an agent started beside it records through a spool of its own rather than fail.
            # `molt spool deliver` and `molt doctor` look at these too.
            own = Path(spool_dir).expanduser().with_name(f"spool.{os.getpid()}")
            self._spool = Spool(own, **spool_kw)
            self._own_spool = True
            log.info("The spool %s is in use; this process spools in %s.", spool_dir, own)

        self._queue: collections.deque[Any] = collections.deque()
        self._wake = threading.Event()
        self._cond = threading.Condition()
        # itertools.count is atomic under the GIL: cheap counters shared with the caller's threads.
        self._enq = itertools.count()
        self._drop_queue = itertools.count()
        self._acked = 0
        self._delivered = 0
        self._dropped_spool = 0
        self._quarantined = 0
        self._sink_errors = 0
        self._writer_errors = 0
        self._dropped_write = 0
        self._last_error: str | None = None
        self._handled = 0  # records the writer has taken off the queue (acked, dropped or failed)
        # [start, end) ranges, in the order records were taken off the queue, of batches that never became
        # durable (spool full, disk full): flush() must not report those as acknowledged.
        self._losses: collections.deque[tuple[int, int]] = collections.deque(maxlen=4096)
        self._losses_forgotten_end = 0  # end of the newest range that fell off _losses
        self._batch_ids: list[str] = []  # event ids the writer's current batch added to _recent
        self._flush_floor = threading.local()  # per caller thread: the target of its previous flush()
        self._redeliver_end: Any = None  # a commit failed after a delivery: redeliver up to here with dedupe

        # Event ids seen recently: a retried record() of the same event is dropped before sealing, so
        # the chain never gets a duplicate (at-least-once in, exactly-once in the store).
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._max_recent = dedupe_ids
        self._duplicates = 0
        self._heads: OrderedDict[str, tuple[int, str]] = OrderedDict()
        self._max_heads = chain_heads
        # Trajectories this Recorder (or its caller) started, not yet written: no lookup for their head.
        # Bounded like the heads: one announced and never used is forgotten (a lookup then finds nothing).
        self._fresh = _BoundedIds(chain_heads)
        self._seed_heads_from_spool()
        self._recovery_end = self._spool.end()  # frames up to here may have been delivered already
        # Batches the writer made durable, kept for the delivery thread as built: (spool end before,
        # spool end after, one item per frame: the SealedRow of an event, the frame itself otherwise,
        # bytes). When the spool's cursor is where one starts, the deliverer takes its rows instead of
        # reading the frames back and decoding them (about a fifth of an event's CPU). The spool stays
        # the record: what is not taken here — recovery, a retry after a failed sink write, more than
        # delivery._HANDOFF_BYTES waiting (a slow or absent sink) — is read from it.
        self._handoff: collections.deque[tuple[SpoolPosition, SpoolPosition, list[SealedRow | bytes], int]] = (
            collections.deque())
        self._handoff_bytes = 0
        self._handoff_lock = threading.Lock()

        self._closed = False
        self._abandoned = False
        # close() decides to abandon a deliverer stuck in the sink, and the deliverer records a finished
        # delivery (cursor commit + count), under this lock: never both, so that once close() returns
        # nothing touches the spool the next Recorder may own, and the counters are final.
        self._commit_lock = threading.Lock()
        # sink health, for close(): when a sink call started (None: none in flight) and whether the
        # last one failed. Waiting at exit for a sink that hangs or refuses only delays the process:
        # what it would deliver is durable in the spool and goes out on the next start.
        self._sink_call_since: float | None = None
        self._sink_failing = False
        self._sink_attempts = 0  # sink writes finished (delivered or failed)
        self._retry_now = False  # close(): cut the current retry backoff short, once
        self._writer_done = threading.Event()
        self._writer = threading.Thread(target=self._write_loop, name=f"{name}-spool-writer", daemon=True)
        self._writer.start()
        self._deliver_wake = threading.Event()
        self._deliverer = threading.Thread(target=self._deliver_loop, name=f"{name}-deliver", daemon=True)
        self._deliverer.start()
        _live.add(self)

    # ------------------------------------------------------------------ caller side (hot path)

    def record(self, event: Event) -> bool:
        """Enqueue ``event``; returns False if it was dropped (queue full or Recorder closed)."""
        if self.strict:
            self._check_strict(event)
        if self._closed or len(self._queue) >= self.max_queue:
            next(self._drop_queue)
            if self.strict:
                raise CaptureError("The Recorder queue is full or closed; the event was dropped.",
                                   trajectory_id=event.trajectory_id, event_id=event.event_id)
            return False
        self._queue.append(event)
        next(self._enq)
        if not self._wake.is_set():
            self._wake.set()
        return True

    def reward(self, annotation: RewardAnnotation) -> bool:
        """Enqueue a late reward annotation (same guarantees as :meth:`record`)."""
        if self._closed or len(self._queue) >= self.max_queue:
            next(self._drop_queue)
            return False
        self._queue.append(annotation)
        next(self._enq)
        if not self._wake.is_set():
            self._wake.set()
        return True

    def new_trajectory(self) -> str:
        """A new trajectory id, known to start a fresh chain (no store lookup needed)."""
        tid = new_id()
        self._fresh.add(tid)
        return tid

    def announce_trajectory(self, trajectory_id: str) -> None:
        """Mark ``trajectory_id``, made elsewhere (by a process that records through this one), as new:
        its first event starts a fresh chain without a store lookup, as one from :meth:`new_trajectory`.
        Only for ids that are new; announcing an id with stored events would fork its chain."""
        self._fresh.add(trajectory_id)

    def _check_strict(self, event: Event) -> None:
        if not isinstance(event, Event):
            raise ProtocolError(f"record() takes a molt.atdp.Event, got {type(event).__name__}.")
        check_size(event.model_dump_json(), limit=self.max_record_bytes, what="event",
                   trajectory_id=event.trajectory_id, event_id=event.event_id)

    # ------------------------------------------------------------------ acknowledgement

    def flush(self, timeout: float | None = 10.0, *, deliver: bool = False) -> bool:
        """Wait until every record enqueued before this call is durable in the spool (and, with
        ``deliver=True``, delivered to the sink). Returns False on timeout, and when a record this
        thread enqueued since its previous flush could not be made durable (spool or disk full: see
        :attr:`stats`) — a True is an acknowledgement."""
        target = self._enq_count()
        floor = getattr(self._flush_floor, "target", 0)
        deadline = None if timeout is None else time.monotonic() + timeout
        self._wake.set()
        with self._cond:
            while self._handled < target or (deliver and not self._all_delivered()):
                if deliver:
                    self._deliver_urgent.set()
                    self._deliver_wake.set()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.05) if remaining is not None else 0.05)
        if deliver:
            # The deliverer moves the spool's cursor and then its count under this lock: taken once here,
            # a flush that saw the cursor at the end also sees what it delivered in ``stats``.
            with self._commit_lock:
                pass
        self._flush_floor.target = target
        if floor < self._losses_forgotten_end:  # a loss this thread may have had is no longer itemized
            return False
        return not any(start < target and end > floor for start, end in list(self._losses))

    def _all_delivered(self) -> bool:
        return self._spool.cursor >= self._spool.end()

    def _enq_count(self) -> int:
        return _count_value(self._enq)

    @property
    def stats(self) -> RecorderStats:
        """Current counters."""
        return RecorderStats(
            enqueued=self._enq_count(),
            acknowledged=self._acked,
            delivered=self._delivered,
            dropped_queue_full=_count_value(self._drop_queue),
            dropped_spool_full=self._dropped_spool,
            quarantined=self._quarantined,
            duplicates=self._duplicates,
            sink_errors=self._sink_errors,
            writer_errors=self._writer_errors,
            dropped_write_failed=self._dropped_write,
            pending_in_queue=len(self._queue),
            spool_pending_bytes=self._spool.pending_bytes(),
            last_error=self._last_error,
        )

    # ------------------------------------------------------------------ writer thread

    def _write_loop(self) -> None:
        q = self._queue
        warm = getattr(self.hook, "warm", None)
        if warm is not None:  # the hook's lazy loads (redaction lexicons: seconds) start now, not at the first
            try:              # event: records made just before the process exits reach the spool in its budget
                warm()
            except Exception as exc:  # the events themselves will fail closed if it is really broken
                log.warning("Molt capture hook warm-up failed: %r", exc)
        while True:
            if not q:
                self._wake.wait(0.05)
                self._wake.clear()
                if not q:
                    if self._closed:
                        break
                    continue
                if self.flush_interval_s and len(q) < self.batch_size:
                    time.sleep(self.flush_interval_s)
            items: list[Any] = []
            while q and len(items) < self.batch_size:
                items.append(q.popleft())
            try:
                durable = self._write_batch(items)
            except Exception as exc:  # never let the writer die: count, log, keep going
                durable = False
                self._writer_errors += 1
                self._dropped_write += len(items)
                self._last_error = f"spool write failed: {exc!r}"
                log.exception("Molt spool write failed; %d records were dropped.", len(items))
            if not durable:  # a retried record() of these events must not be dropped as a duplicate
                for eid in self._batch_ids:
                    self._recent.pop(eid, None)
            with self._cond:
                if not durable:
                    if len(self._losses) == self._losses.maxlen:
                        self._losses_forgotten_end = self._losses[0][1]
                    self._losses.append((self._handled, self._handled + len(items)))
                self._handled += len(items)
                self._cond.notify_all()
            if items:
                self._deliver_wake.set()

    def _write_batch(self, items: list[Any]) -> bool:
        """Seal and spool a batch; False when it was dropped (the spool is full)."""
        frames: list[bytes] = []
        rows: list[SealedRow | bytes] = []  # per frame, for the deliverer: an event's row, or the frame
        staged: dict[str, tuple[int, str]] = {}
        self._batch_ids = []
        govern_ids = getattr(self.hook, "govern_ids", None)
        if govern_ids is not None:  # the ids a client chose, as they will be stored (molt.governance.envelope)
            items = [govern_ids(i) if isinstance(i, Event) else i for i in items]
        self._prefetch_heads(items)
        # Every event's salt drawn in one call: os.urandom releases the GIL, and a release per event let
        # the delivery thread in between each two events on the writer's path.
        salts = os.urandom(16 * len(items))
        for i, item in enumerate(items):
            if isinstance(item, Event):
                if item.event_id in self._recent:
                    self._duplicates += 1
                    continue
                self._recent[item.event_id] = None
                self._batch_ids.append(item.event_id)
                if len(self._recent) > self._max_recent:
                    self._recent.popitem(last=False)
                frame, head, row = self._seal_frame(item, staged, salts[16 * i:16 * i + 16])
                frames.append(frame)
                rows.append(frame if row is None else row)
                if head is not None:
                    staged[item.trajectory_id] = head
            elif isinstance(item, RewardAnnotation):
                item = govern_reward(self.hook, item)
                frames.append(encode_frame(FRAME_REWARD, orjson.dumps(item.model_dump(mode="json"))))
                rows.append(frames[-1])
            else:
                frames.append(self._quarantine_frame(None, "capture", f"not an ATDP record: {type(item).__name__}"))
                rows.append(frames[-1])
        if not frames:
            return True
        before = self._spool.end()
        after = self._spool.append(frames)
        if after is None:
            self._dropped_spool += len(frames)
            self._last_error = "spool full: records dropped"
            return False
        self._hand_over(before, after, rows, sum(map(len, frames)))
        self._acked += len(frames)
        for tid, head in staged.items():  # heads advance only once the frames are durable
            self._set_head(tid, head)
        return True

    def _seal_frame(self, event: Event, staged: dict[str, tuple[int, str]],
                    salt: bytes) -> tuple[bytes, tuple[int, str] | None, SealedRow | None]:
        tid = event.trajectory_id
        annotations = None
        if self.hook is not None:
            verdict = self._run_pipeline(event)
            if isinstance(verdict, bytes):
                return verdict, None, None
            event, annotations = verdict
        try:
            head = staged.get(tid) or self._head(tid)
            seq = head[0] + 1
            envelope, payload, digest, link = seal_parts(event, seq, head[1], salt)
            x = index_fields(event, seq)
            if annotations is not None:
                # as the deliverer would read it back from the spool (a hook's tuple comes back a list)
                x["annotations"] = orjson.loads(orjson.dumps(annotations))
            row = SealedRow(x, envelope, payload, salt, digest, head[1], link)
            body = row.encode()
            if len(body) > self.max_record_bytes + 4096:
                check_size(body, limit=self.max_record_bytes + 4096, what="event",
                           trajectory_id=tid, event_id=event.event_id)
        except _HeadUnknown as exc:
            return self._quarantine_frame(event, "capture", str(exc), record=_raw_record(event)), None, None
        except MoltError as exc:
            return self._quarantine_frame(event, "capture", str(exc)), None, None
        except Exception as exc:  # a bug or an unserializable value: quarantine, never raise
            return self._quarantine_frame(event, "capture", f"sealing failed: {exc!r}"), None, None
        return encode_frame(FRAME_EVENT, body), (seq, link), row

    def _run_pipeline(self, event: Event) -> bytes | tuple[Event, dict[str, Any] | None]:
        """The hook's verdict: ``(event to seal, annotations)``, or a quarantine frame. Fails closed."""
        assert self.hook is not None
        try:
            res = self.hook.process(event)
            if res.event is None:
                return self._quarantine_frame(event, res.stage or "pipeline",
                                              res.reason or "rejected by the pipeline", record=res.record)
            if (res.event.event_id, res.event.trajectory_id) != (event.event_id, event.trajectory_id):
                raise CaptureError("the capture hook changed the event's event_id or trajectory_id")
            return res.event, res.annotations
        except Exception as exc:  # never reaches the agent; never reaches training either
            self._last_error = f"capture pipeline failed: {exc!r}"
            return self._quarantine_frame(event, "pipeline", f"the capture pipeline failed: {exc!r}",
                                          record=_raw_record(event))

    def _quarantine_frame(self, event: Event | None, stage: str, reason: str,
                          record: bytes | None = None) -> bytes:
        self._quarantined += 1
        rec: dict[str, Any] = {"stage": stage, "reason": reason[:2000],
                               "ts_us": int(time.time() * 1_000_000)}
        if event is not None:
            rec.update(event_id=event.event_id, trajectory_id=event.trajectory_id,
                       tenant_id=event.metadata.tenant_id, kind=event.kind.value)
        if record is not None:
            if len(record) > _MAX_QUARANTINE_RECORD:  # a spool frame must stay readable in one chunk
                rec["reason"] = f"{rec['reason']} (record of {len(record):,} bytes not kept: over the cap)"
            else:
                rec["record"] = record.decode("utf-8", "replace")
        return encode_frame(FRAME_QUARANTINE, orjson.dumps(rec))

    def _head(self, tid: str) -> tuple[int, str]:
        """(last seq, last hash) of a trajectory; (-1, GENESIS) when it has no events yet."""
        head = self._heads.get(tid)
        if head is not None:
            self._heads.move_to_end(tid)
            return head
        if tid in self._fresh:
            self._fresh.discard(tid)
            return (-1, GENESIS)
        found = None
        if self.sink is not None:
            try:
                found = self.sink.chain_head(tid)
            except Exception as exc:
                self._sink_errors += 1
                self._last_error = f"chain head lookup failed: {exc!r}"
                log.warning("Molt could not look up the chain head of %s: %r", tid, exc)
                # Sealing at GENESIS would start a second chain (seq 0 again) for a trajectory the
                # sink may hold: the event is quarantined, whole, instead; the next one asks again.
                raise _HeadUnknown(f"the chain head of trajectory {tid} could not be looked up ({exc!r}); "
                                   f"the event was not sealed, so that its chain does not fork") from exc
        return found if found is not None else (-1, GENESIS)

    def _prefetch_heads(self, items: list[Any]) -> None:
        """Look up the chain heads of every unknown trajectory in the batch with one sink query
        (a trajectory id the Recorder did not create may already have events in the store)."""
        unknown = {i.trajectory_id for i in items if isinstance(i, Event)}
        unknown = {t for t in unknown if t not in self._heads and t not in self._fresh}
        if not unknown or self.sink is None:
            return
        lookup = getattr(self.sink, "chain_heads", None)
        try:
            found = lookup(sorted(unknown)) if lookup is not None else {
                t: h for t in unknown if (h := self.sink.chain_head(t)) is not None}
        except Exception as exc:
            self._sink_errors += 1
            self._last_error = f"chain head lookup failed: {exc!r}"
            log.warning("Molt could not look up chain heads: %r", exc)
            return
        for tid in unknown:
            if tid in found:
                self._set_head(tid, found[tid])
            else:
                self._fresh.add(tid)  # no stored events: the chain starts here

    def _set_head(self, tid: str, head: tuple[int, str]) -> None:
        self._heads[tid] = head
        self._heads.move_to_end(tid)
        if len(self._heads) > self._max_heads:
            self._heads.popitem(last=False)

    def _seed_heads_from_spool(self) -> None:
        for kind, body in self._spool.iter_undelivered():
            if kind == FRAME_EVENT:
                row = SealedRow.decode(body)
                x = row.x
                self._recent[x["event_id"]] = None
                prev = self._heads.get(x["trajectory_id"])
                if prev is None or x["seq"] > prev[0]:
                    self._set_head(x["trajectory_id"], (x["seq"], row.hash))

    @property
    def spool_dir(self) -> Path:
        """The spool directory this Recorder writes (``spool.<pid>`` when the default one was held)."""
        return self._spool.dir

    # ------------------------------------------------------------------ shutdown

    def close(self, timeout: float = 5.0) -> bool:
        """Stop accepting records, make queued ones durable, deliver what the sink takes within
        ``timeout`` seconds, and stop. A sink that fails, or hangs in a call for more than 50 ms, is
        not waited for. Undelivered records stay in the spool for the next start.
        Returns True when everything was delivered."""
        if self._closed:
            return self._all_delivered()
        deadline = time.monotonic() + timeout
        dispatch = sys.modules.get("molt.capture.dispatch")
        if dispatch is not None:  # adapters queue events on their dispatcher before record(): hand them over
            dispatch.drain_all(timeout=max(0.0, min(2.0, timeout / 2)))
        self.flush(timeout=max(0.0, deadline - time.monotonic()))
        if self.sink is not None:
            self._deliver_while_healthy(deadline)
        self._closed = True
        self._wake.set()
        self._writer.join(max(0.0, deadline - time.monotonic()) + 0.1)
        self._writer_done.set()
        self._deliver_urgent.set()
        self._deliver_wake.set()
        # a deliverer stuck in a sink call is not waited for: it is abandoned below
        self._deliverer.join(0.02 if self._sink_unhealthy() else max(0.0, deadline - time.monotonic()) + 0.1)
        with self._commit_lock:
            done = self._all_delivered()
            if self._deliverer.is_alive():
                # stuck in a sink call: let it finish in the background, but it must not touch the
                # spool again; what it was delivering stays undelivered there for the next Recorder.
                self._abandoned = True
        if not self._writer.is_alive():
            self._spool.close()
            if done and self._own_spool:  # nothing left in this process's own spool: leave no trace
                shutil.rmtree(self._spool.dir, ignore_errors=True)
        _live.discard(self)
        return done

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pipeline(self) -> CaptureHook | None:
        """The former name of :attr:`hook` (deprecated)."""
        warnings.warn("Recorder.pipeline is deprecated; read Recorder.hook.", DeprecationWarning, stacklevel=2)
        return self.hook


def resolve_pipeline(pipeline: CaptureHook | str | None) -> CaptureHook | None:
    """The hook a recording path runs: ``"default"`` builds the built-in governance pipeline, ``None``
    (governance off) is logged once as a warning, a hook is returned as it is."""
    global _warned_ungoverned
    if pipeline is None:
        if not _warned_ungoverned:
            _warned_ungoverned = True
            log.warning("Molt is recording WITHOUT governance (no capture hook): events are stored as recorded, "
                        "PII included, and never trained on. Leave the hook at its default to redact them.")
        return None
    if isinstance(pipeline, str):
        if pipeline != DEFAULT_PIPELINE:
            raise ValueError(f"pipeline must be a CaptureHook, {DEFAULT_PIPELINE!r} or None, got {pipeline!r}.")
        # Governance sits above capture: loaded by name (tests/core/test_layering.py sees this call).
        default: CaptureHook = importlib.import_module("molt.governance.pipeline").GovernancePipeline()
        return default
    return pipeline


class _BoundedIds:
    """A set of ids that forgets the oldest past ``limit``. Each operation is one call on an
    ``OrderedDict`` (atomic under the GIL), so agent threads may add while the writer thread reads."""

    __slots__ = ("_ids", "limit")

    def __init__(self, limit: int) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self.limit = limit

    def add(self, item: str) -> None:
        self._ids[item] = None
        if len(self._ids) > self.limit:
            with contextlib.suppress(KeyError):  # another thread emptied it in between
                self._ids.popitem(last=False)

    def discard(self, item: str) -> None:
        self._ids.pop(item, None)

    def __contains__(self, item: object) -> bool:
        return item in self._ids

    def __len__(self) -> int:
        return len(self._ids)


class _HeadUnknown(CaptureError):
    """A trajectory's chain head could not be looked up in the sink (it is unreachable)."""


#: Largest record a quarantine frame keeps (the spool reads frames in 16 MiB chunks).
_MAX_QUARANTINE_RECORD = 8 << 20


def _raw_record(event: Event) -> bytes | None:
    try:
        return event.model_dump_json().encode()
    except Exception:  # an unserializable value: the reason still says what happened
        return None


def _count_value(counter: itertools.count[int]) -> int:
    """The next value of an ``itertools.count`` (i.e. how many times ``next`` was called on it).

    ``next(count)`` is atomic under the GIL, unlike ``x += 1``, so callers on many threads can bump
    it without a lock; ``count`` exposes its state only through ``repr`` ("count(N)").
    """
    return int(repr(counter)[6:-1])


_live: weakref.WeakSet[Recorder] = weakref.WeakSet()


#: Seconds the interpreter's exit spends closing every live Recorder, all of them together (each
#: close adds at most ~0.2 s of thread joins). One shared deadline: with a per-Recorder timeout, N
#: Recorders on an unreachable sink held the exit for N seconds and more.
_EXIT_BUDGET_S = 0.3
#: Seconds the exit may spend getting queued records into the local spool, before the delivery budget.
#: Writing the spool never waits on the sink, but the first batch of a Recorder made just before exit
#: (an adapter's default Recorder, a short script) waits for the governance pipeline to load (~2 s
#: on a loaded 2-core machine): with the delivery budget alone those records were lost.
_EXIT_SPOOL_S = 10.0


@atexit.register
def _close_all() -> None:  # bounded: an unreachable sink never holds the process for long
    spool_deadline = time.monotonic() + _EXIT_SPOOL_S
    live = list(_live)
    for rec in live:  # durability first: what every Recorder has queued reaches its spool
        with contextlib.suppress(Exception):  # interpreter shutdown: never raise from atexit
            rec.flush(timeout=max(0.0, spool_deadline - time.monotonic()))
    deadline = time.monotonic() + _EXIT_BUDGET_S
    for rec in live:  # then delivery, with whatever the budget has left
        with contextlib.suppress(Exception):
            rec.close(timeout=max(0.0, deadline - time.monotonic()))
