"""The gateway's capture child keeps its memory flat over thousands of store appends (issue 10, item 4).

``molt serve`` records through a child process (:class:`~molt.gateway.capture_process.CaptureProcess`)
that appends a small batch to the store every few requests, for as long as the gateway runs. Each
append is a new LanceDB version and the store compacts every 64 of them; in a 10-minute soak the
child grew by about 20 KB per request without levelling off (the serving process stayed flat). Two
native causes, no Python objects: LanceDB's metadata cache filling with superseded versions, and
glibc keeping the growing buffers of compaction as heap fragments. Here the same child takes a few
thousand appends and its resident memory after warm-up must stay within a bound per append that
the old child exceeded several times over. The full soak is ``bench/reliability/run.py --only 7``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from molt.atdp.ids import new_id
from molt.backends.base import Choice, Result, TokenCounts
from molt.gateway.call_record import CallRecord
from molt.gateway.capture_process import CaptureProcess
from molt.store import Store

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/statm")

WARMUP_APPENDS = 300  # the writer's metadata cache fills (16 MiB is ~300 versions), first compactions
MEASURED_APPENDS = 800
CALLS_PER_APPEND = 4  # a busy gateway hands the child a few calls per batch
# Bytes per append after warm-up: the old child grew about 110 KB (metadata cache of 128 MiB still
# filling, heap fragments), the bounded one a few KB (LanceDB's own state, the Recorder's bounded
# sets of recent ids and chain heads).
MAX_GROWTH_PER_APPEND = 30_000


def _rss(pid: int) -> int:
    pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def _call(tid: str, k: int) -> CallRecord:
    return CallRecord(
        endpoint="chat.completions", event_ids=[new_id()], trajectory_id=tid, session_id=f"s-{tid}", parent_id=None,
        tenant_id="acme", agent_id="soak", public_model="stub", decision=None, started=time.time(),
        messages=[{"role": "system", "content": "You are a soak test."}, {"role": "user", "content": f"load {k}"}],
        sampling={"temperature": 1.0},
        result=Result(choices=[Choice(index=0, text=f"stub reply {k} " * 8, finish_reason="stop", token_ids=None)],
                      model="stub", usage=TokenCounts(12, 20)),
        latency_ms=3.0, key_name="load")


def test_capture_child_memory_is_flat_over_thousands_of_appends(tmp_path: Path) -> None:
    proc = CaptureProcess(tmp_path / "store", tmp_path / "spool", fsync="never")
    pid = proc._proc.pid
    k = 0
    tid = proc.new_trajectory()

    def appends(n: int) -> list[int]:
        """``n`` flushes of a few calls each (one store append apiece); RSS after every 25th."""
        nonlocal k, tid
        samples = []
        for i in range(n):
            for _ in range(CALLS_PER_APPEND):
                if k % 20 == 0:  # a new conversation every 20 calls, like the soak's sessions
                    tid = proc.new_trajectory()
                proc.submit(_call(tid, k))
                k += 1
            assert proc.flush(timeout=60, deliver=True)
            if i % 25 == 24:
                samples.append(_rss(pid))
        return samples

    try:
        warm = appends(WARMUP_APPENDS)
        measured = appends(MEASURED_APPENDS)
        stats = proc.stats
    finally:
        proc.close(timeout=60)
    assert stats.dropped_queue_full == 0 and stats.sink_errors == 0, stats
    with Store.open(tmp_path / "store", auto_compact=False) as store:  # the appends were many small ones
        assert store.table("events").version >= WARMUP_APPENDS + MEASURED_APPENDS
        assert store.count() == k
    # Floors of the first and the last samples, not single ones: a compaction in flight briefly maps
    # its buffers (released after), which a line fitted through every sample would count.
    assert len(warm) == WARMUP_APPENDS // 25
    start, end = min(measured[:6]), min(measured[-6:])
    per_append = (end - start) / ((len(measured) - 6) * 25)
    mib = 2**20
    assert per_append < MAX_GROWTH_PER_APPEND, (
        f"The capture child grew {per_append / 1000:.1f} KB per store append after warm-up "
        f"({start / mib:.0f} → {end / mib:.0f} MiB over {MEASURED_APPENDS} appends; samples "
        f"{[round(m / mib) for m in measured]} MiB). Troubleshooting: a cache or table handle that keeps "
        f"every LanceDB version, or native buffers the allocator keeps (see bound_native_heap).")
