"""Capture in a separate process, so recording never competes with serving for the GIL.

The Recorder's work — building events, the governance pipeline (redaction, classification, …),
sealing into the hash chain, the spool's fsyncs and the store's writes — is CPU-bound Python. In the
gateway's process it would take the interpreter lock from the event loop for milliseconds at a
time. :class:`CaptureProcess` runs that work in a child process instead: the gateway serializes
each call once (a compact dict, orjson) and a sender thread writes batches into a pipe; the child
rebuilds the call, turns it into ATDP events (:class:`~molt.gateway.capture.CallRecorder`) and records
them through a real :class:`~molt.capture.Recorder` into the store.

It offers what the gateway needs of a Recorder (``record``, ``reward``, ``new_trajectory``,
``flush``, ``stats``, ``close``) plus ``submit`` for whole calls. Capture stays fail-open: if the
child dies, records are counted as dropped and the gateway keeps serving. Durability is the child
Recorder's: a record is acknowledged once its spool has it.

One module for both ends of the pipe (the child's loop and the parent's :class:`CaptureProcess`), so
the frame kinds and their handling change together.

The child appends small batches for as long as the gateway runs, so it keeps its memory bounded:
LanceDB's caches get a writer's bounds (each append is a new table version, and the metadata cache
otherwise fills with the manifests of superseded versions), glibc's allocator is told to return the
large buffers compaction allocates (see :func:`bound_native_heap`) and, every few seconds, the free
memory left inside its heaps (see :func:`trim_native_heap`), Arrow allocates from that heap rather
than from a pool that keeps its high-water mark (see :func:`arrow_pool_on_native_heap`). With those
bounds it runs flat, so it is not replaced by default; ``recycle_after`` keeps a safety net for a
workload that grows it anyway: after that many records a fresh child takes the spool over (see
:data:`RECYCLE_AFTER`).

Example::

    rec = CaptureProcess(store_uri="~/.molt/store", spool_dir="~/.molt/spool", governance="default")
    gateway = Gateway([backend], recorder=rec)

One module at ~700 lines because it is one idea: the parent's and the child's halves of one protocol
(batches over the pipe, recycling, the spool's handover, close), which are read and changed together.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import logging
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from typing import Any

import orjson

from molt.atdp.ids import new_id
from molt.atdp.models import Event, OutcomeStatus, RewardAnnotation
from molt.backends.base import Choice, Result, TokenCounts, TokenLogprob, ToolCallOut
from molt.capture.recorder import RecorderStats
from molt.gateway.capture import CallRecord, CallRecorder
from molt.gateway.router import Route, VersionSpec

__all__ = ["MEMSTATS_ENV", "CaptureProcess", "arrow_pool_on_native_heap", "bound_native_heap", "call_from_wire",
           "call_to_wire", "main", "native_heap_counters", "trim_native_heap"]

log = logging.getLogger("molt.gateway")

_CALL, _EVENT, _REWARD, _FRESH, _FLUSH, _STATS, _QUIT = b"C", b"E", b"R", b"N", b"F", b"S", b"Q"
_LEN = struct.Struct("<I")
_RECORDS = frozenset((_CALL, _EVENT, _REWARD))  # what counts towards recycling the child
_FINAL = "final"  # id of the stats a child sends as it exits
#: The frame a child sends once it holds the spool. A child is replaced only after it sent it:
#: otherwise, under load, several replacements start before their predecessors took the spool and
#: race for it, and a loser that never gets it dies with the records in its pipe.
_HOLDS_SPOOL = orjson.dumps({"id": "holds-spool", "ok": True, "stats": {}})
#: RecorderStats fields that count since the Recorder opened (the rest are gauges of the live child):
#: a recycled child's last values are added to its successors', so the gateway's counters never go back.
_COUNTERS = ("enqueued", "acknowledged", "delivered", "dropped_queue_full", "dropped_spool_full", "quarantined",
             "duplicates", "sink_errors", "writer_errors", "capture_failed", "dropped_write_failed")
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
#: Records after which :class:`CaptureProcess` replaces its child with a fresh one; 0, the default:
#: never. With its caches bounded, its heap trimmed and Arrow on that heap, the child's memory levels
#: off (a 40-minute soak at ~420 requests a second: +1 MiB over its second half; bench/reliability/
#: README.md). Recycling is a safety net for a workload that still grows it: a fresh child costs a
#: second or two of start-up at low priority, and nothing is lost in the handover.
RECYCLE_AFTER = 0
#: The smallest ``recycle_after`` other than 0: a child's start-up costs a second or two.
MIN_RECYCLE_AFTER = 1_000


# ------------------------------------------------------------------------------------------ wire


def call_to_wire(rec: CallRecord) -> bytes:
    """A call record as compact JSON (what crosses the pipe)."""
    res = rec.result
    result = None
    if res is not None:
        result = {
            "model": res.model, "prompt_ids": res.prompt_ids, "tokenizer": res.tokenizer,
            "usage": [res.usage.prompt_tokens, res.usage.completion_tokens] if res.usage else None,
            "choices": [{"i": c.index, "text": c.text, "finish": c.finish_reason, "ids": c.token_ids,
                         "calls": [[t.id, t.name, t.arguments] for t in c.tool_calls] if c.tool_calls else None,
                         "lps": [lp.logprob for lp in c.logprobs] if c.logprobs else None}
                        for c in res.choices],
        }
    d = rec.decision
    return orjson.dumps({
        "endpoint": rec.endpoint, "event_ids": rec.event_ids, "tid": rec.trajectory_id, "sid": rec.session_id,
        "parent": rec.parent_id, "tenant": rec.tenant_id, "agent": rec.agent_id, "model": rec.public_model,
        "version": d.version.model_dump(mode="json", exclude={"harness"}) if d else None,
        "backend": d.backend if d else None, "started": rec.started, "messages": rec.messages, "tools": rec.tools,
        "prompt": rec.prompt, "sampling": rec.sampling, "harness": rec.harness_fingerprint,
        "new_tools": rec.new_tools, "result": result, "status": rec.status.value,
        "error": [type(rec.error).__name__, str(rec.error)] if rec.error is not None else None,
        "latency_ms": rec.latency_ms, "key": rec.key_name, "task": rec.task,
    })


class _WireError(Exception):
    """An error as it was, rebuilt on the other side of the pipe (its type name is kept)."""

    def __init__(self, type_name: str, message: str):
        super().__init__(message)
        self.type_name = type_name


def call_from_wire(data: bytes) -> CallRecord:
    """The call record back from :func:`call_to_wire`."""
    d = orjson.loads(data)
    result = None
    if d["result"] is not None:
        r = d["result"]
        choices = [Choice(index=c["i"], text=c["text"], finish_reason=c["finish"], token_ids=c["ids"],
                          tool_calls=[ToolCallOut(*t) for t in c["calls"]] if c["calls"] else None,
                          logprobs=[TokenLogprob(token="", logprob=x) for x in c["lps"]] if c["lps"] else None)
                   for c in r["choices"]]
        result = Result(choices=choices, model=r["model"], prompt_ids=r["prompt_ids"], tokenizer=r["tokenizer"],
                        usage=TokenCounts(*r["usage"]) if r["usage"] else None)
    decision = None
    if d["version"] is not None:
        decision = Route(VersionSpec.model_validate(d["version"]), d["backend"])
    error: BaseException | None = None
    if d["error"] is not None:
        error = _WireError(*d["error"])
    return CallRecord(endpoint=d["endpoint"], event_ids=d["event_ids"], trajectory_id=d["tid"], session_id=d["sid"],
                      parent_id=d["parent"], tenant_id=d["tenant"], agent_id=d["agent"], public_model=d["model"],
                      decision=decision, started=d["started"], messages=d["messages"], tools=d["tools"],
                      prompt=d["prompt"], sampling=d["sampling"], harness_fingerprint=d["harness"],
                      new_tools=[tuple(t) for t in d["new_tools"]], result=result, status=OutcomeStatus(d["status"]),
                      error=error, latency_ms=d["latency_ms"], key_name=d["key"], task=d.get("task"))


def _frame(kind: bytes, payload: bytes) -> bytes:
    return _LEN.pack(len(payload) + 1) + kind + payload


def _split_frames(buf: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The whole frames at the start of ``buf`` as ``(kind, payload)``, and the incomplete rest."""
    out = []
    while len(buf) >= 4:
        (n,) = _LEN.unpack_from(buf)
        if len(buf) < 4 + n:
            break
        out.append((buf[4:5], buf[5:4 + n]))
        buf = buf[4 + n:]
    return out, buf


# ------------------------------------------------------------------------------------------ child


_M_MMAP_THRESHOLD, _M_ARENA_MAX = -3, -8  # mallopt parameters (glibc's malloc.h)


@functools.cache
def _glibc() -> Any:
    """This process's C library when it is glibc on Linux (``mallopt``, ``malloc_trim``), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
        libc = ctypes.CDLL(None)
        libc.mallopt, libc.malloc_trim  # noqa: B018 - both must exist
    except (ValueError, OSError, AttributeError):  # not glibc (musl has no such name)
        return None
    return libc


def bound_native_heap() -> bool:
    """Keep glibc's heap from growing with the store (Linux with glibc; a no-op elsewhere).

    Compaction rewrites the events table's open fragment (every fragment under LanceDB's target of
    about a million rows), so its buffers grow with the table. glibc raises its mmap threshold to the
    largest buffer freed (up to 32 MiB), after which such buffers come from the heap, and each of
    LanceDB's threads gets an arena of its own: freed, they stay in the process as fragments, a
    growth per request that does not level off. A fixed
    threshold sends large buffers to mmap, which returns them to the system when freed, and two
    arenas bound the rest. ``MALLOC_ARENA_MAX`` / ``MALLOC_MMAP_THRESHOLD_`` in the environment win.
    Returns whether the settings were applied.
    """
    libc = _glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    ok = True
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        ok &= mallopt(_M_MMAP_THRESHOLD, 128 << 10) == 1
    if "MALLOC_ARENA_MAX" not in os.environ:
        ok &= mallopt(_M_ARENA_MAX, 2) == 1
    return ok


def arrow_pool_on_native_heap() -> bool:
    """Make pyarrow allocate from glibc's heap (its system pool) instead of its bundled mimalloc,
    unless ``ARROW_DEFAULT_MEMORY_POOL`` says otherwise. Returns whether the pool was changed.

    The capture child builds each delivery's events table in Arrow. mimalloc keeps the segments it
    committed for reuse, so its share of the child's memory followed the largest table built so far
    (a delivery after a stall, while the store compacted) and rose with every new high; with the
    system pool, those buffers are above :func:`bound_native_heap`'s mmap threshold and go back to
    the system when freed, and the small ones are in the heap :func:`trim_native_heap` trims.
    """
    if "ARROW_DEFAULT_MEMORY_POOL" in os.environ:
        return False
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    return True


#: How often the capture process hands the free memory in glibc's heaps back (see :func:`trim_native_heap`).
TRIM_INTERVAL_S = 10.0


def trim_native_heap() -> bool:
    """Give the free memory inside glibc's heaps back to the system (``malloc_trim(0)``; Linux with
    glibc, a no-op elsewhere). Returns whether any was given back.

    LanceDB's threads (appends, compaction) and the Recorder's share one glibc arena besides the main
    one (:func:`bound_native_heap`). Their transient buffers come and go in it, and what they free in
    its middle stays in the process: glibc gives a heap's memory back only from its top, and a few
    long-lived blocks above the holes pin it. So the arena grows to the high-water mark of those
    buffers and keeps it, mostly free: in the capture process under load, two thirds of it was free
    chunks (``malloc_info``), and its growth was most of what the child's RSS gained.
    ``malloc_trim`` releases the whole pages inside free chunks (``MADV_DONTNEED``); it takes each
    arena's lock for a moment (milliseconds), so a call every few seconds costs nothing measurable.
    """
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


def _trim_native_heap_every(interval_s: float, stop: threading.Event) -> None:
    while not stop.wait(interval_s):
        try:
            trim_native_heap()
        except Exception:  # best effort: memory, never capture
            log.debug("malloc_trim failed", exc_info=True)
            return


#: Debugging the child's memory: a file the child appends a JSON line of its allocators' counters to
#: every ``MOLT_CAPTURE_MEMSTATS_S`` seconds (default 30). Unset (the default), nothing is sampled.
MEMSTATS_ENV = "MOLT_CAPTURE_MEMSTATS"


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]


def native_heap_counters() -> dict[str, float] | None:
    """glibc's own account of this process's heap (``mallinfo2``), in MiB: ``glibc_used`` (in use),
    ``glibc_free`` (free inside its heaps), ``glibc_mmapped`` (blocks served by mmap) and their number,
    ``glibc_mmapped_n``. None where the C library is not glibc (or too old to have ``mallinfo2``)."""
    libc = _glibc()
    f = getattr(libc, "mallinfo2", None) if libc is not None else None
    if f is None:
        return None
    f.restype = _Mallinfo2
    m = f()
    mib = 1 / 2**20
    return {"glibc_used": round(m.uordblks * mib, 2), "glibc_free": round(m.fordblks * mib, 2),
            "glibc_mmapped": round(m.hblkhd * mib, 2), "glibc_mmapped_n": m.hblks}


def _memstats(store: Any, records: int, t0: float) -> dict[str, Any]:
    """What the child's memory is made of, as far as its allocators tell (for :data:`MEMSTATS_ENV`)."""
    import pyarrow as pa

    mib = 1 / 2**20
    d: dict[str, Any] = {"t": round(time.monotonic() - t0, 1), "records": records}
    with contextlib.suppress(OSError):
        with open("/proc/self/status") as status:
            lines = status.read().splitlines()
        for line in lines:
            if line.startswith(("RssAnon:", "Threads:")):
                k, v = line.split()[:2]
                d[k.rstrip(":").lower()] = int(v)
    d.update(native_heap_counters() or {})
    pool = pa.default_memory_pool()
    d.update(arrow_pool=pool.backend_name, arrow_used=round(pool.bytes_allocated() * mib, 2),
             arrow_peak=round(pool.max_memory() * mib, 2), py_blocks=sys.getallocatedblocks(),
             store_caches=round(store.cache_bytes() * mib, 2))
    return d


def _sample_memory_every(path: str, interval_s: float, store: Any, records: list[int], stop: threading.Event) -> None:
    t0 = time.monotonic()
    while not stop.wait(interval_s):
        try:
            with open(path, "ab") as f:
                f.write(orjson.dumps({"pid": os.getpid(), **_memstats(store, records[0], t0)}) + b"\n")
        except Exception:  # a debugging aid: never capture's problem
            log.debug("memory sample failed", exc_info=True)


def _read_exact(stream: Any, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        piece = stream.read(n - len(buf))
        if not piece:
            return None
        buf += piece
    return buf


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
    import sys

    from molt.capture import Recorder
    from molt.errors import SpoolInUse

    config = orjson.loads(sys.argv[1])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    # A signal to the process group (Ctrl-C, SIGTERM) is for the gateway: this process outlives it
    # just long enough to make everything it was sent durable, and ends when its stdin closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Recording is background work: when cores are short, serving goes first and capture catches up.
    with contextlib.suppress(OSError):
        os.nice(int(config.get("nice", 10)))
    bound_native_heap()  # before LanceDB starts its threads
    arrow_pool_on_native_heap()  # before the first table is built
    trim_interval_s = float(config.get("trim_interval_s", TRIM_INTERVAL_S))
    stop_trimming = threading.Event()
    if trim_interval_s > 0:
        threading.Thread(target=_trim_native_heap_every, args=(trim_interval_s, stop_trimming),
                         name="molt-heap-trim", daemon=True).start()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    store = _open_store(config)
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
            rec = Recorder(store, spool_dir=config["spool_dir"], fsync=config.get("fsync", "always"),
                           deliver_interval_s=float(config.get("deliver_interval_s", 0.25)),
                           dedupe_ids=int(config.get("dedupe_ids", 200_000)),
                           chain_heads=int(config.get("chain_heads", 200_000)),
                           name="molt-gateway-capture", hook=pipeline)
            break
        except SpoolInUse as exc:
            if time.monotonic() >= spool_deadline:
                raise
            if not warned and not config.get("replacing"):
                log.warning("%s Waiting up to %.0f s for it to exit (a gateway that was just stopped?).", exc,
                            spool_wait_s)
                warned = True
            time.sleep(0.02)
    capture = CallRecorder(rec)
    stdout.write(_frame(_STATS, _HOLDS_SPOOL))
    stdout.flush()
    records = [0]  # read by the memory sampler
    if os.environ.get(MEMSTATS_ENV):
        threading.Thread(target=_sample_memory_every, name="molt-memstats", daemon=True,
                         args=(os.environ[MEMSTATS_ENV], float(os.environ.get(MEMSTATS_ENV + "_S", "30")), store,
                               records, stop_trimming)).start()
    try:
        while True:
            head = _read_exact(stdin, 4)
            if head is None:
                break
            (n,) = _LEN.unpack(head)
            body = _read_exact(stdin, n)
            if body is None:
                break
            kind, payload = body[:1], body[1:]
            if kind == _QUIT:
                break
            if kind in _RECORDS:
                records[0] += 1
            try:
                if kind == _CALL:
                    capture.submit(call_from_wire(payload))
                elif kind == _EVENT:
                    rec.record(Event.model_validate_json(payload))
                elif kind == _REWARD:
                    rec.reward(RewardAnnotation.model_validate_json(payload))
                elif kind == _FRESH:
                    # a trajectory the gateway started: its chain starts fresh, no store lookup
                    rec.announce_trajectory(payload.decode())
                elif kind in (_FLUSH, _STATS):
                    req = orjson.loads(payload)
                    ok = True
                    if kind == _FLUSH:
                        ok = rec.flush(timeout=req["timeout"], deliver=req["deliver"])
                    stats = asdict(rec.stats)
                    stats["capture_failed"] = capture.failed
                    stdout.write(_frame(kind, orjson.dumps({"id": req["id"], "ok": ok, "stats": stats})))
                    stdout.flush()
            except Exception:  # one bad record never stops capture
                log.exception("The capture process could not handle a %r record.", kind)
    finally:
        # What this process was sent is made durable in the spool first, however long that takes under
        # load (up to handover_s: the parent kills a replaced child that is still here well after it),
        # and only delivery to the store is bounded by close_timeout: a record still queued in memory
        # when the process ends is lost, one left in the spool goes to the next child.
        rec.flush(timeout=float(config.get("handover_s", 90.0)))
        done = rec.close(timeout=float(config.get("close_timeout", 10.0)))
        # Last words for a parent that recycles this process: its counters, to carry over. Sent as
        # soon as the spool is handed over (before the store's compactor is joined), so the parent
        # adds them before the next child can answer for its own.
        final = asdict(rec.stats)
        final["capture_failed"] = capture.failed
        with contextlib.suppress(OSError, ValueError):
            stdout.write(_frame(_STATS, orjson.dumps({"id": _FINAL, "ok": done, "stats": final})))
            stdout.flush()
        store.close()
        stop_trimming.set()


# ------------------------------------------------------------------------------------------ parent


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
            :data:`SPOOL_WAIT_S`: time for the child of a gateway that just died to finish); then it exits
            naming the holder, and calls are served unrecorded (counted in :attr:`failed`).
        trim_interval_s: how often the child gives the free memory in its native heap back to the
            system (default :data:`TRIM_INTERVAL_S`; 0 never; see :func:`trim_native_heap`).
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
        self._holds_spool = False  # whether the current child said it took the spool (_HOLDS_SPOOL)
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
            [sys.executable, "-c", "from molt.gateway.capture_process import main; main()",
             orjson.dumps(config).decode()], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)

    # ------------------------------------------------------------------ the Recorder surface

    def _put(self, kind: bytes, payload: bytes) -> bool:
        if self._closed or len(self._pending) >= self.max_pending or self._proc.poll() is not None:
            if kind in _RECORDS:  # a request (stats after close) or a hint is not a lost record
                self._dropped += 1
            return False
        self._pending.append(_frame(kind, payload))
        # The sender wakes by itself every batch_s; only requests and bursts wake it at once.
        if kind in (_FLUSH, _STATS, _QUIT) or len(self._pending) >= 512:
            self._wake.set()
        return True

    def submit(self, rec: CallRecord) -> None:
        """Record a whole model call (its events are built in the child)."""
        try:
            self._put(_CALL, call_to_wire(rec))
        except Exception:
            self._dropped += 1
            log.exception("Molt could not serialize a model call of trajectory %s.", rec.trajectory_id)

    def record(self, event: Event) -> bool:
        """Record one event."""
        return self._put(_EVENT, event.model_dump_json().encode())

    def reward(self, annotation: RewardAnnotation) -> bool:
        """Record a late reward."""
        return self._put(_REWARD, annotation.model_dump_json().encode())

    def new_trajectory(self) -> str:
        """A new trajectory id, announced to the child so its Recorder starts a fresh chain without
        a store lookup (the same shortcut as ``Recorder.new_trajectory``)."""
        tid = new_id()
        self._put(_FRESH, tid.encode())
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
        frames, self._reply_buf = _split_frames(self._reply_buf)
        out = []
        for kind, payload in frames:
            if kind == _STATS and payload == _HOLDS_SPOOL:
                self._holds_spool = True
            else:
                out.append((kind, payload))
        return out

    def flush(self, timeout: float | None = 10.0, *, deliver: bool = False) -> bool:
        """Wait until everything submitted so far is durable in the child's spool (and delivered to
        the store with ``deliver=True``). Blocking: for tests and shutdown, not the event loop."""
        reply = self._request(_FLUSH, 10.0 if timeout is None else timeout, deliver=deliver)
        return bool(reply and reply["ok"])

    @property
    def stats(self) -> RecorderStats:
        """The child Recorder's counters (asked for, at most 1 s), with this side's drops added."""
        reply = self._request(_STATS, 1.0)
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
        self._put(_QUIT, b"")
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
                if self.recycle_after and f[4:5] in _RECORDS:
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
                self._read_replies(0)  # its _HOLDS_SPOOL frame may be waiting (other replies are stale)
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
                frames, buf = _split_frames(buf + data)
                for kind, payload in frames:
                    if kind == _STATS and (reply := orjson.loads(payload)).get("id") == _FINAL:
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
