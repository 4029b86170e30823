"""Capture benchmark: Recorder caller cost, sustained ingest into LanceDB, read by id at scale.

Prints three tables, each with a reference measured in the same run. Capture alone: the Recorders
here run without the governance pipeline (``hook=None``); ``bench/bench_governance.py`` measures
the default, governed Recorder (caller cost, writer throughput, governed ingest).

1. ``record()`` caller-side cost p50/p99 — the time the agent's thread spends per event — next to
   the standard library's ``logging.QueueHandler`` (what most tracing SDKs do on the caller thread)
   and a synchronous JSON-lines append. Measured in bursts (a tight loop) and paced (one event every
   200 µs, closer to an agent that also waits on models and tools).
2. Sustained ingest: events/s from the first ``record()`` to the last event committed in LanceDB
   (Recorder → spool with fsync → batched LanceDB appends), next to appending the same events to
   LanceDB one row per write (the naive approach batching replaces).
3. Trajectory read by id at N stored events (default 1M, 50 events per trajectory) after compaction:
   p50/p99 of ``Store.sealed_events`` (the stored records) and ``Store.trajectory`` (records parsed
   back into Events), next to the same filter on a table without the scalar index.

Tables 1 and 2 also give the process CPU per event over all threads (the Recorder's writer and
delivery threads, LanceDB's), beside the same figure for each reference.

Run: ``.venv/bin/python bench/bench_capture.py`` (about 5 minutes; ``--quick`` for a 1-minute run;
``--only ingest`` for one table).
"""

from __future__ import annotations

import argparse
import json
import logging
import logging.handlers
import os
import queue
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from molt.atdp import GENESIS, Event, EventKind, Generation, Outcome, ToolCall, UserMessage, seal
from molt.capture import Recorder, SealedRow, SinkBatch, index_fields
from molt.store import Store

console = Console()


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def make_events(n: int, trajectories: int, seed: int = 0) -> list[Event]:
    """Realistic small events (~600 B serialized): user messages, model calls with tool calls, tools."""
    rng = random.Random(seed)
    tids = [f"traj-{seed}-{i:06d}" for i in range(trajectories)]
    out = []
    for i in range(n):
        tid = tids[i % trajectories]
        md = {"tenant_id": f"tenant-{i % 7}", "agent_id": "support-bot", "task": "orders",
              "latency_ms": rng.uniform(1, 900), "usage": {"input_tokens": 312, "output_tokens": 41}}
        k = i % 3
        if k == 0:
            ev = Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata=md,
                       action=UserMessage(content=f"Hi, where is my order A-{i}? It was due yesterday."))
        elif k == 1:
            ev = Event(trajectory_id=tid, kind=EventKind.MODEL_CALL, metadata=md,
                       action=Generation(model="smollm2-135m", text="Let me look that up.",
                                         tool_calls=[{"id": f"c{i}", "name": "lookup_order",
                                                      "arguments": {"order_id": f"A-{i}"}}]))
        else:
            ev = Event(trajectory_id=tid, kind=EventKind.TOOL_CALL, metadata=md,
                       action=ToolCall(tool_name="lookup_order", call_id=f"c{i}", arguments={"order_id": f"A-{i}"}),
                       outcome=Outcome(output={"order_id": f"A-{i}", "state": "shipped", "carrier": "DHL"}))
        out.append(ev)
    return out


# ------------------------------------------------------------------------------ 1. caller cost


def caller_cost(n: int, tmp: Path) -> Table:
    events = make_events(n, 100, seed=1)
    rows = []

    def measure(name: str, fn, paced: bool) -> None:  # type: ignore[no-untyped-def]
        samples = []
        pc = time.perf_counter_ns
        cpu[name, paced] = time.process_time()
        for ev in events:
            t0 = pc()
            fn(ev)
            samples.append((pc() - t0) / 1000)
            if paced:
                until = pc() + 200_000
                while pc() < until:
                    pass
        rows.append((name, "paced" if paced else "burst", pct(samples, 0.5), pct(samples, 0.99)))

    cpu: dict[tuple[str, bool], float] = {}

    def done(name: str, paced: bool) -> None:
        """All-threads process CPU per event since ``measure`` began, now that the handler has flushed
        (its background thread's work included). Paced rows spin between events: no figure."""
        cpu[name, paced] = (time.process_time() - cpu[name, paced]) / n * 1e6

    for paced in (False, True):
        # capture alone, as these rows always measured it: bench_governance.py measures the governance
        # pipeline a Recorder runs by default, beside this
        rec = Recorder(None, spool_dir=tmp / f"spool-{paced}", max_queue=10 * n, hook=None)
        measure("molt Recorder.record()", rec.record, paced)
        rec.close(timeout=30)
        done("molt Recorder.record()", paced)

        q: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        logger = logging.getLogger(f"bench-{paced}")
        logger.propagate = False
        logger.setLevel(logging.INFO)  # left at the root's WARNING, info() returned before reaching the handler
        logger.addHandler(logging.handlers.QueueHandler(q))
        listener = logging.handlers.QueueListener(q, logging.FileHandler(tmp / f"log-{paced}.jsonl"))
        listener.start()
        measure("stdlib logging.QueueHandler", lambda ev, lg=logger: lg.info("%s", ev), paced)
        listener.stop()
        done("stdlib logging.QueueHandler", paced)

        fh = open(tmp / f"sync-{paced}.jsonl", "w")  # noqa: SIM115
        measure("sync JSON line write+flush",
                lambda ev, f=fh: (f.write(ev.model_dump_json() + "\n"), f.flush()), paced)
        fh.close()
        done("sync JSON line write+flush", paced)

    t = Table("caller-side cost per event", "mode", "p50 µs", "p99 µs", "all threads CPU µs/event",
              title=f"1. record() cost on the agent's thread ({n:,} events; goal p50 ≤ 5 µs, p99 ≤ 50 µs; "
                    f"all threads: process CPU until the handler has flushed to its file or spool)")
    for name, mode, p50, p99 in rows:
        paced = mode == "paced"
        t.add_row(name, mode, f"{p50:.2f}", f"{p99:.2f}", "—" if paced else f"{cpu[name, paced]:.1f}")
    return t


# ------------------------------------------------------------------------------ 2. ingest


def ingest(n: int, tmp: Path, naive_n: int) -> Table:
    events = make_events(n, 1000, seed=2)
    store = Store.open(tmp / "ingest-store", auto_compact=True)
    rec = Recorder(store, spool_dir=tmp / "ingest-spool", max_queue=n + 1, batch_size=8192, hook=None)
    c0 = time.process_time()
    t0 = time.perf_counter()
    for ev in events:
        rec.record(ev)
    t_enq = time.perf_counter() - t0
    assert rec.flush(timeout=600, deliver=True)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    assert store.count() == n, (store.count(), n)
    rec.close()
    store.close()

    # the store alone: the same events already sealed, appended in 8,192-row batches
    sealed = _sealed_rows(events)
    batched = Store.open(tmp / "batched-store", auto_compact=False)
    c2 = time.process_time()
    t2 = time.perf_counter()
    for i in range(0, n, 8192):
        batched.write_batch(SinkBatch(events=sealed[i:i + 8192]))
    batched_elapsed = time.perf_counter() - t2
    batched_cpu = time.process_time() - c2
    batched.close()

    # naive peer: the same events, one LanceDB append per event
    naive = Store.open(tmp / "naive-store", auto_compact=False)
    rows = sealed[:naive_n]
    c1 = time.process_time()
    t1 = time.perf_counter()
    for r in rows:
        naive.write_batch(SinkBatch(events=[r]))
    naive_elapsed = time.perf_counter() - t1
    naive_cpu = time.process_time() - c1
    naive.close()

    t = Table("path", "events", "seconds", "events/s", "all threads CPU µs/event",
              title=f"2. sustained ingest into LanceDB (goal ≥ 50,000 events/s batched; load average "
                    f"{os.getloadavg()[0]:.1f} at the end)")
    t.add_row("molt Recorder → spool (fsync per batch) → batched LanceDB", f"{n:,}", f"{elapsed:.2f}",
              f"{n / elapsed:,.0f}", f"{cpu / n * 1e6:.1f}")
    t.add_row("  of which: record() calls on the caller thread", f"{n:,}", f"{t_enq:.2f}", f"{n / t_enq:,.0f}", "")
    t.add_row("molt Store batched append of sealed rows (8,192/append)", f"{n:,}", f"{batched_elapsed:.2f}",
              f"{n / batched_elapsed:,.0f}", f"{batched_cpu / n * 1e6:.1f}")
    t.add_row("naive: one LanceDB append per event", f"{naive_n:,}", f"{naive_elapsed:.2f}",
              f"{naive_n / naive_elapsed:,.0f}", f"{naive_cpu / naive_n * 1e6:.1f}")
    rate = n / elapsed
    t.caption = (f"end-to-end goal ≥ 50,000 events/s: {'met' if rate >= 50_000 else 'MISSED'} ({rate:,.0f}; "
                 f"{rate / (naive_n / naive_elapsed):,.0f}× the naive peer, "
                 f"{rate / (n / batched_elapsed):.2f}× the store alone)")
    return t


def _sealed_rows(events: list[Event]) -> list[SealedRow]:
    heads: dict[str, tuple[int, str]] = {}
    rows = []
    for ev in events:
        seq, prev = heads.get(ev.trajectory_id, (-1, GENESIS))
        s = seal(ev, seq + 1, prev)
        heads[ev.trajectory_id] = (seq + 1, s.hash)
        rows.append(SealedRow(x=index_fields(ev, seq + 1), envelope=s.envelope, payload=s.payload, salt=s.salt,
                              digest=s.digest, prev_hash=s.prev_hash, hash=s.hash))
    return rows


# ------------------------------------------------------------------------------ 3. read by id


def read_by_id(n: int, per_traj: int, tmp: Path, reads: int) -> Table:
    trajectories = n // per_traj
    store = Store.open(tmp / "read-store", auto_compact=False)
    chunk = 50_000
    t0 = time.perf_counter()
    # build once: seal a template trajectory set and re-key it, to reach 1M rows in reasonable time
    template = _sealed_rows(make_events(chunk, chunk // per_traj, seed=3))
    written = 0
    round_ = 0
    while written < n:
        rows = []
        for r in template[: n - written]:
            x = dict(r.x)
            x["trajectory_id"] = f"{x['trajectory_id']}-r{round_}"
            x["event_id"] = f"{x['event_id']}-r{round_}"
            rows.append(r._replace(x=x))
        store.write_batch(SinkBatch(events=rows))
        written += len(rows)
        round_ += 1
    store.compact(keep_versions_s=0)
    build = time.perf_counter() - t0
    tids = store.trajectory_ids()
    rng = random.Random(4)
    sample = [rng.choice(tids) for _ in range(reads)]

    def timed(fn) -> list[float]:  # type: ignore[no-untyped-def]
        out = []
        for tid in sample:
            t = time.perf_counter()
            fn(tid)
            out.append((time.perf_counter() - t) * 1000)
        return out

    sealed = timed(store.sealed_events)
    parsed = timed(store.trajectory)

    # peer: the same query on a copy of the events without the scalar index
    noidx = Store.open(tmp / "noidx-store", auto_compact=False)
    noidx.table("events").add(store.table("events").search().limit(None).to_arrow())
    plain = []
    for tid in sample[: max(10, reads // 10)]:
        t = time.perf_counter()
        noidx.sealed_events(tid)
        plain.append((time.perf_counter() - t) * 1000)
    store.close()
    noidx.close()

    t = Table("read", "p50 ms", "p99 ms",
              title=f"3. trajectory read by id at {written:,} events ({trajectories:,} trajectories × "
                    f"{per_traj}; built in {build:.0f}s; goal p50 ≤ 10 ms)")
    t.add_row("molt Store.sealed_events(id) (indexed)", f"{statistics.median(sealed):.2f}", f"{pct(sealed, .99):.2f}")
    t.add_row("molt Store.trajectory(id) (parsed Events + rewards)", f"{statistics.median(parsed):.2f}",
              f"{pct(parsed, .99):.2f}")
    t.add_row("same filter, no scalar index", f"{statistics.median(plain):.2f}", f"{pct(plain, .99):.2f}")
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes (about a minute)")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON here")
    ap.add_argument("--only", default="caller,ingest,read",
                    help="comma-separated tables to run: caller, ingest, read (default all three)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    n_caller, n_ingest, n_naive, n_read, reads = (
        (20_000, 50_000, 300, 200_000, 100) if args.quick else (50_000, 200_000, 1_000, 1_000_000, 300))
    console.print(f"[bold]molt capture benchmark[/bold] — python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
                  f"load average {os.getloadavg()[0]:.1f} at the start")
    with tempfile.TemporaryDirectory(prefix="molt-bench-") as d:
        tmp = Path(d)
        tables = []
        runs = {"caller": lambda: caller_cost(n_caller, tmp), "ingest": lambda: ingest(n_ingest, tmp, n_naive),
                "read": lambda: read_by_id(n_read, 50, tmp, reads)}
        for name, run in runs.items():
            if name not in only:
                continue
            tables.append(run())
            console.print(tables[-1])
    if args.json:
        args.json.write_text(json.dumps([{"title": str(t.title), "rows": [[c._cells[i] for c in t.columns]
                                                                         for i in range(t.row_count)]}
                                         for t in tables], indent=2))


if __name__ == "__main__":
    main()
