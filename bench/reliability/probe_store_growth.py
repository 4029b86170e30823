"""Does a long-running store writer grow per append? The capture child's store side, alone.

``molt serve``'s capture child appends a small batch to the events table about four times a second
(one LanceDB version each) and compacts every 64 appends, for as long as the gateway runs. This
probe does the same with synthetic sealed rows through :class:`molt.store.Store`, opened with the
child's cache bounds, with the child's allocator settings and heap trimming, and samples what could
grow with the number of appends: RSS, glibc's heap in use (``mallinfo2``), Arrow's pool, the
LanceDB caches, the table's versions on disk and fragments, open fds and threads.

Time is compressed by appending faster than the child does (``--rate``): growth per append shows
up as the same growth per append at any rate; growth per second does not.

    .venv/bin/python bench/reliability/probe_store_growth.py --appends 1000 --rate 100 --sample-every 200
    .venv/bin/python bench/reliability/probe_store_growth.py --index-cache-mib 4 --metadata-cache-mib 1
    .venv/bin/python bench/reliability/probe_store_growth.py --keep-versions-s 5   # versions kept vs append cost

LanceDB's Session reports only the sum of its two caches (``caches``); bounding one of them to a
MiB shows which one is still filling.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from anon_maps import anon_mappings  # this folder

from molt.atdp.ids import new_id
from molt.capture.sinks import SealedRow, SinkBatch
from molt.gateway.capture_child import WRITER_INDEX_CACHE_BYTES
from molt.gateway.native_heap import bound_native_heap, native_heap_counters, trim_native_heap
from molt.store import FOLLOWER_METADATA_CACHE_BYTES, Store


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _rows(n: int, tids: list[str], seqs: dict[str, int]) -> list[SealedRow]:
    out = []
    now = int(time.time() * 1e6)
    for i in range(n):
        tid = tids[i % len(tids)]
        seq = seqs[tid] = seqs.get(tid, -1) + 1
        x = {"event_id": new_id(), "trajectory_id": tid, "session_id": f"s-{tid}", "parent_id": None, "seq": seq,
             "kind": "llm_call", "name": "chat", "tenant_id": "acme", "agent_id": "soak", "task": None,
             "status": "ok", "reward": None, "policy_version": "stub@1", "classification": "internal",
             "subject_id": None, "ts_us": now}
        out.append(SealedRow(x, b"e" * 600, b"p" * 900, b"s" * 16, "d" * 64, "0" * 64, "h" * 64))
    return out


def _timed_compaction(store: Store) -> tuple[float, float]:
    """One compaction's seconds and the process's peak RSS during it (MiB, VmHWM; the peak is reset first)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM
    t = time.monotonic()
    store.compact()
    took = time.monotonic() - t
    hwm = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
               if line.startswith("VmHWM:"))
    return took, hwm / 1024


def _sample(store: Store, t0: float, appends: int, uri: Path) -> dict[str, Any]:
    heap = native_heap_counters() or {}
    versions = len(os.listdir(uri / "events.lance" / "_versions"))
    return {"t": round(time.monotonic() - t0, 1), "appends": appends, "rss": round(_rss_mib(), 1),
            "heap_used": round(heap.get("glibc_used", 0.0), 1), "mmapped": round(heap.get("glibc_mmapped", 0.0), 1),
            "arrow": round(pa.total_allocated_bytes() / 2**20, 1),
            "caches": round(store.cache_bytes() / 2**20, 2), "versions": versions,
            "fragments": store.fragment_count(), "fds": len(os.listdir("/proc/self/fd")),
            "threads": threading.active_count(), "os_threads": len(os.listdir("/proc/self/task")),
            **anon_mappings()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--appends", type=int, default=4000)
    ap.add_argument("--rate", type=float, default=40.0, help="appends per second (the child: ~4)")
    ap.add_argument("--rows", type=int, default=80, help="rows per append (the child at 300 req/s: ~75)")
    ap.add_argument("--sample-every", type=int, default=250, help="appends between samples")
    ap.add_argument("--keep-versions-s", type=float, default=None)
    ap.add_argument("--index-cache-mib", type=float, default=WRITER_INDEX_CACHE_BYTES / 2**20)
    ap.add_argument("--metadata-cache-mib", type=float, default=FOLLOWER_METADATA_CACHE_BYTES / 2**20)
    ap.add_argument("--no-trim", action="store_true")
    ap.add_argument("--compact-inline", type=int, default=0, metavar="N",
                    help="compact on this thread every N appends (the child: 64 on its compactor thread) and "
                         "report the longest compaction and the peak RSS during one since the last sample")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    bound_native_heap()
    work = Path(args.dir or tempfile.mkdtemp(prefix="molt-probe-"))
    uri = work / "store"
    kw: dict[str, Any] = {}
    if args.keep_versions_s is not None:
        kw["keep_versions_s"] = args.keep_versions_s
    if args.compact_inline:
        kw["auto_compact"] = False
    store = Store.open(uri, index_cache_bytes=int(args.index_cache_mib * 2**20),
                       metadata_cache_bytes=int(args.metadata_cache_mib * 2**20), **kw)
    compactions: list[tuple[float, float]] = []  # (seconds, peak RssAnon MiB) of each, since the last sample
    tids = [new_id() for _ in range(40)]
    seqs: dict[str, int] = {}
    samples = []
    t0 = time.monotonic()
    last_trim = t0
    period = 1.0 / args.rate
    try:
        for i in range(1, args.appends + 1):
            start = time.monotonic()
            if i % 500 == 0:  # conversations end and new ones start
                tids = tids[10:] + [new_id() for _ in range(10)]
            store.write_batch(SinkBatch(events=_rows(args.rows, tids, seqs)))
            if args.compact_inline and i % args.compact_inline == 0:
                compactions.append(_timed_compaction(store))
            if not args.no_trim and time.monotonic() - last_trim >= 10.0:
                trim_native_heap()
                last_trim = time.monotonic()
            if i % args.sample_every == 0:
                s = _sample(store, t0, i, uri)
                if compactions:
                    s["compact_s"] = round(max(c[0] for c in compactions), 2)
                    s["compact_peak"] = round(max(c[1] for c in compactions), 1)
                    compactions.clear()
                samples.append(s)
                print(json.dumps(s), flush=True)
            time.sleep(max(0.0, period - (time.monotonic() - start)))
    finally:
        store.close()
        if args.json:
            Path(args.json).write_text(json.dumps(samples))
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
