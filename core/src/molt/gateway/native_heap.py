"""The capture child's native memory: glibc's heap bounded and trimmed, Arrow allocating from it.

The child appends small batches for as long as the gateway runs. LanceDB's threads and Arrow's
buffers would otherwise leave its resident memory at the high-water mark of its largest compaction
or delivery: glibc keeps freed large buffers in per-thread arenas and gives a heap back only from its
top, and Arrow's bundled mimalloc keeps the segments it committed. These functions bound that (Linux
with glibc; a no-op elsewhere), and sample what the allocators hold when :data:`MEMSTATS_ENV` asks.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import sys
import threading
import time
from typing import Any

import orjson

__all__ = ["MEMSTATS_ENV", "TRIM_INTERVAL_S", "arrow_pool_on_native_heap", "bound_native_heap", "memstats",
           "native_heap_counters", "sample_memory_every", "trim_native_heap", "trim_native_heap_every"]

log = logging.getLogger("molt.gateway")

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


def trim_native_heap_every(interval_s: float, stop: threading.Event) -> None:
    """:func:`trim_native_heap` every ``interval_s`` seconds until ``stop`` is set (a thread's target)."""
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


def memstats(store: Any, records: int, t0: float) -> dict[str, Any]:
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


def sample_memory_every(path: str, interval_s: float, store: Any, records: list[int], stop: threading.Event) -> None:
    """Append a line of :func:`memstats` to ``path`` every ``interval_s`` seconds until ``stop`` is set."""
    t0 = time.monotonic()
    while not stop.wait(interval_s):
        try:
            with open(path, "ab") as f:
                f.write(orjson.dumps({"pid": os.getpid(), **memstats(store, records[0], t0)}) + b"\n")
        except Exception:  # a debugging aid: never capture's problem
            log.debug("memory sample failed", exc_info=True)
