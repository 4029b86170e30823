"""The capture child: frames from the gateway on stdin, a Recorder into the store, replies on stdout.

:class:`~molt.gateway.capture_process.CaptureProcess` starts it (``python -c "from
molt.gateway.capture_child import main; main()" <config>``). It rebuilds each call
(:mod:`molt.gateway.capture_wire`), turns it into ATDP events (:class:`~molt.gateway.call_record.CallRecorder`)
and records them through a real :class:`~molt.capture.Recorder` (with governance when configured) into
the store; its memory is kept bounded by :mod:`molt.gateway.native_heap`. It ends when its stdin
closes (the gateway exited), after making everything it was sent durable in the spool.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import asdict
from typing import Any

import orjson

from molt.atdp.models import Event, RewardAnnotation
from molt.gateway import capture_wire as wire
from molt.gateway import native_heap
from molt.gateway.call_record import CallRecorder

__all__ = ["SPOOL_WAIT_S", "STORE_RETRY_S", "WRITER_INDEX_CACHE_BYTES", "main"]

log = logging.getLogger("molt.gateway")

# The child's reads are few (chain heads of trajectories it has not seen, ids of a redelivery): it
# needs the current version's metadata and a few index pages, not a reader's caches. Both caches
# fill with entries of superseded versions: the metadata cache reaches its bound (molt.store's
# FOLLOWER_METADATA_CACHE_BYTES) within the first few hundred appends, the index cache gains about
# 2.4 KB (LanceDB's count; the heap holds about twice that) with every append to the events table,
# whose scalar indices every new version carries. The child settles at these bounds, after
# bound / (appends a second × 2.4 KB): at the child's three to four appends a second a 4 MiB bound
# took it some ten minutes to fill, which a soak reads as growth. One MiB fills within the first
# two minutes and is enough for the child's reads and compaction (appends and compactions are as
# fast with it: bench/reliability/probe_store_growth.py).
WRITER_INDEX_CACHE_BYTES = 1 << 20

#: How long a replacement child keeps trying to open a store that is unreachable (records wait in
#: its pipe and the parent's queue meanwhile, up to ``max_pending``).
STORE_RETRY_S = 600.0
#: How long a first child waits for its spool's lock. A supervisor restarts a crashed ``molt serve``
#: at once, while the old child still holds the spool: it ends when its gateway's end of the pipe
#: closes, after making what it was sent durable and delivering for up to its close timeout (10 s).
#: A child that gave up at once would leave the new gateway serving its whole life unrecorded.
SPOOL_WAIT_S = 30.0


def _open_store(config: dict[str, Any]) -> Any:
    """The child's store. A first child fails at once (a wrong path is the user's to fix); one that
    replaces a recycled child keeps trying, with backoff, for :data:`STORE_RETRY_S` — the store may
    be down for a while (an object store's outage) and the spool it takes over must not be orphaned."""
    from molt.errors import StoreError
    from molt.store import FOLLOWER_METADATA_CACHE_BYTES, Store

    parent = os.getppid()
    deadline = time.monotonic() + (STORE_RETRY_S if config.get("replacing") else 0.0)
    delay = 0.25
    while True:
        try:
            return Store.open(config["store_uri"], storage_options=config.get("storage_options"),
                              index_cache_bytes=WRITER_INDEX_CACHE_BYTES,
                              metadata_cache_bytes=FOLLOWER_METADATA_CACHE_BYTES)
        except (StoreError, OSError) as exc:
            if time.monotonic() >= deadline or os.getppid() != parent:  # out of time, or the gateway is gone
                raise
            log.warning("The capture process cannot open the store yet (retrying in %.1f s): %s", delay, exc)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


def main() -> None:
    """The capture process: frames on stdin, a Recorder (with governance when configured) into the
    store, replies to flush/stats requests on stdout. Ends when stdin closes (the gateway exited)."""
    config = orjson.loads(sys.argv[1])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    stop = _settle_in(config)
    stdout = sys.stdout.buffer
    store = _open_store(config)
    rec = _open_recorder(config, store)
    capture = CallRecorder(rec)
    stdout.write(wire.frame(wire.STATS, wire.HOLDS_SPOOL))
    stdout.flush()
    records = [0]  # read by the memory sampler
    samples = os.environ.get(native_heap.MEMSTATS_ENV)
    if samples:
        every_s = float(os.environ.get(native_heap.MEMSTATS_ENV + "_S", "30"))
        threading.Thread(target=native_heap.sample_memory_every, name="molt-memstats", daemon=True,
                         args=(samples, every_s, store, records, stop)).start()
    try:
        _serve(sys.stdin.buffer, stdout, rec, capture, records)
    finally:
        _hand_over(config, rec, capture, stdout)
        store.close()
        stop.set()


def _settle_in(config: dict[str, Any]) -> threading.Event:
    """Signals, priority and the native heap's bounds, before LanceDB starts its threads; the heap's
    trimmer runs until the returned event is set."""
    # A signal to the process group (Ctrl-C, SIGTERM) is for the gateway: this process outlives it
    # just long enough to make everything it was sent durable, and ends when its stdin closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Recording is background work: when cores are short, serving goes first and capture catches up.
    with contextlib.suppress(OSError):
        os.nice(int(config.get("nice", 10)))
    native_heap.bound_native_heap()  # before LanceDB starts its threads
    native_heap.arrow_pool_on_native_heap()  # before the first table is built
    trim_interval_s = float(config.get("trim_interval_s", native_heap.TRIM_INTERVAL_S))
    stop = threading.Event()
    if trim_interval_s > 0:
        threading.Thread(target=native_heap.trim_native_heap_every, args=(trim_interval_s, stop),
                         name="molt-heap-trim", daemon=True).start()
    return stop


def _open_recorder(config: dict[str, Any], store: Any) -> Any:
    """The child's Recorder, once it holds the spool."""
    from molt.capture import Recorder
    from molt.errors import SpoolInUse

    pipeline: Any = None
    governance = config.get("governance")
    if governance:  # the Recorder stores each decision with its event (GovernancePipeline.sink_for)
        from molt.governance import GovernancePipeline

        pipeline = GovernancePipeline.from_file(governance, strict=False)
    # Appends gathered for a quarter of a second: at gateway rates a write per spooled batch made ~30
    # LanceDB versions a second, and memory, compaction and disk all grow with versions.
    # A child that replaces a recycled one waits for it to hand over the spool (its lock is released
    # once everything it was sent is durable there); a first child waits for the child of a gateway
    # that died to finish (SPOOL_WAIT_S), then fails naming the holder (two gateways on one spool).
    spool_wait_s = float(config.get("spool_wait_s", SPOOL_WAIT_S))
    spool_deadline = time.monotonic() + spool_wait_s
    warned = False
    while True:
        try:
            return Recorder(store, spool_dir=config["spool_dir"], fsync=config.get("fsync", "always"),
                            deliver_interval_s=float(config.get("deliver_interval_s", 0.25)),
                            dedupe_ids=int(config.get("dedupe_ids", 200_000)),
                            chain_heads=int(config.get("chain_heads", 200_000)),
                            name="molt-gateway-capture", hook=pipeline)
        except SpoolInUse as exc:
            if time.monotonic() >= spool_deadline:
                raise
            if not warned and not config.get("replacing"):
                log.warning("%s Waiting up to %.0f s for it to exit (a gateway that was just stopped?).", exc,
                            spool_wait_s)
                warned = True
            time.sleep(0.02)


def _serve(stdin: Any, stdout: Any, rec: Any, capture: CallRecorder, records: list[int]) -> None:
    """Handle frames until stdin closes or a quit frame comes."""
    while True:
        head = wire.read_exact(stdin, 4)
        if head is None:
            return
        (n,) = wire.LEN.unpack(head)
        body = wire.read_exact(stdin, n)
        if body is None:
            return
        kind, payload = body[:1], body[1:]
        if kind == wire.QUIT:
            return
        if kind in wire.RECORDS:
            records[0] += 1
        try:
            _handle(kind, payload, stdout, rec, capture)
        except Exception:  # one bad record never stops capture
            log.exception("The capture process could not handle a %r record.", kind)


def _handle(kind: bytes, payload: bytes, stdout: Any, rec: Any, capture: CallRecorder) -> None:
    if kind == wire.CALL:
        capture.submit(wire.call_from_wire(payload))
    elif kind == wire.EVENT:
        rec.record(Event.model_validate_json(payload))
    elif kind == wire.REWARD:
        rec.reward(RewardAnnotation.model_validate_json(payload))
    elif kind == wire.FRESH:
        # a trajectory the gateway started: its chain starts fresh, no store lookup
        rec.announce_trajectory(payload.decode())
    elif kind in (wire.FLUSH, wire.STATS):
        req = orjson.loads(payload)
        ok = True
        if kind == wire.FLUSH:
            ok = rec.flush(timeout=req["timeout"], deliver=req["deliver"])
        stats = asdict(rec.stats)
        stats["capture_failed"] = capture.failed
        stdout.write(wire.frame(kind, orjson.dumps({"id": req["id"], "ok": ok, "stats": stats})))
        stdout.flush()


def _hand_over(config: dict[str, Any], rec: Any, capture: CallRecorder, stdout: Any) -> None:
    """What this process was sent is made durable in the spool first, however long that takes under
    load (up to handover_s: the parent kills a replaced child that is still here well after it), and
    only delivery to the store is bounded by close_timeout: a record still queued in memory when the
    process ends is lost, one left in the spool goes to the next child."""
    rec.flush(timeout=float(config.get("handover_s", 90.0)))
    done = rec.close(timeout=float(config.get("close_timeout", 10.0)))
    # Last words for a parent that recycles this process: its counters, to carry over. Sent as soon as
    # the spool is handed over (before the store's compactor is joined), so the parent adds them before
    # the next child can answer for its own.
    final = asdict(rec.stats)
    final["capture_failed"] = capture.failed
    with contextlib.suppress(OSError, ValueError):
        stdout.write(wire.frame(wire.STATS, orjson.dumps({"id": wire.FINAL, "ok": done, "stats": final})))
        stdout.flush()
