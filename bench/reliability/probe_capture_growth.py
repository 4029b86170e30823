"""Does the capture child grow per record? ``molt serve``'s capture child, fed directly.

The soak (``run.py --only 7``) measures the child behind a real gateway and HTTP load, which on a
2-core machine caps it at a few hundred calls a second. This probe drives a
:class:`~molt.gateway.capture_process.CaptureProcess` (recycling off, governance on, the soak's
bounds) with the soak's calls — one user message and a stub reply each, a new conversation every 20
calls of each of 16 clients — as fast as the child takes them (or at ``--rate``), and prints the
child's own memory counters (``MOLT_CAPTURE_MEMSTATS``): RssAnon, glibc's heap in use and mmapped,
Arrow's pool, Python's allocated blocks, LanceDB's caches, threads.

    .venv/bin/python bench/reliability/probe_capture_growth.py --calls 60000 --every 15
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from molt.atdp.ids import new_id
from molt.backends.base import Choice, Result, TokenCounts
from molt.gateway.call_record import CallRecord
from molt.gateway.capture_process import CaptureProcess
from molt.gateway.native_heap import MEMSTATS_ENV

CLIENTS = 16
CALLS_PER_CONVERSATION = 20


def _call(tid: str, client: int, i: int) -> CallRecord:
    return CallRecord(
        endpoint="chat.completions", event_ids=[new_id()], trajectory_id=tid, session_id=f"w{client}-{i // 20}",
        parent_id=None, tenant_id="acme", agent_id="soak", public_model="stub", decision=None, started=time.time(),
        messages=[{"role": "user", "content": f"load {client} {i}"}], sampling={},
        result=Result(choices=[Choice(index=0, text=f"stub reply to load {client} {i}", finish_reason="stop",
                                      token_ids=None)], model="stub", usage=TokenCounts(4, 6)),
        latency_ms=1.0, key_name="sk-load")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=60_000)
    ap.add_argument("--rate", type=float, default=0.0, help="calls per second (0: as fast as the child takes them)")
    ap.add_argument("--every", type=float, default=15.0, help="seconds between the child's samples")
    ap.add_argument("--dedupe-ids", type=int, default=10_000)
    ap.add_argument("--chain-heads", type=int, default=2_000)
    ap.add_argument("--governance", default="default", help="'default', a policy file, or 'none'")
    ap.add_argument("--out", default=None, help="the child's JSON lines (default: printed only)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="molt-probe-capture-"))
    stats = Path(args.out or work / "memstats.jsonl")
    stats.unlink(missing_ok=True)
    os.environ[MEMSTATS_ENV] = str(stats)
    os.environ[MEMSTATS_ENV + "_S"] = str(args.every)
    proc = CaptureProcess(work / "store", work / "spool", governance=None if args.governance == "none" else
                          args.governance, recycle_after=0, dedupe_ids=args.dedupe_ids, chain_heads=args.chain_heads)
    printed = 0

    def show() -> None:
        nonlocal printed
        if not stats.exists():
            return
        lines = stats.read_text().splitlines()
        for line in lines[printed:]:
            print(line, flush=True)
        printed = len(lines)

    t0 = time.monotonic()
    tids: dict[tuple[int, int], str] = {}
    try:
        for n in range(args.calls):
            client, i = n % CLIENTS, n // CLIENTS
            key = (client, i // CALLS_PER_CONVERSATION)
            if key not in tids:
                tids.pop((client, key[1] - 1), None)
                tids[key] = proc.new_trajectory()
            proc.submit(_call(tids[key], client, i))
            if n % 2000 == 0:
                show()
                if not args.rate:
                    proc.flush(timeout=60)  # as fast as the child takes them: never more than 2,000 queued
            if args.rate:
                time.sleep(max(0.0, t0 + (n + 1) / args.rate - time.monotonic()))
        proc.flush(timeout=120)
        show()
    finally:
        proc.close()
        show()
        shutil.rmtree(work, ignore_errors=True)
        print(f"{args.calls} calls in {time.monotonic() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
