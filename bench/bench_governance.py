"""Governance on the capture path: what it costs the agent's thread, and how fast the writer runs it.

Prints three tables:

1. ``record()`` caller-side cost p50/p99 — the time the agent's thread spends per event — with and
   without the governance pipeline on the Recorder, in bursts (a tight loop) and paced (one event
   every 200 µs). The pipeline runs on the Recorder's writer thread, so the call should not change.
2. What the agent's thread loses overall: wall time of a fixed CPU-bound "agent" loop that records
   one event per step, with and without the pipeline (in one process the writer thread competes for
   the GIL, so this, not the call, is where governance shows up).
3. Pipeline throughput on the writer thread: events/s for the whole pipeline (validate,
   authenticate, redact, classify, eligibility, retention) on ~1 KB events, for the pipeline without
   the redact stage, and end-to-end governed ingest (record → pipeline → spool → LanceDB + decisions).

Run: ``.venv/bin/python bench/bench_governance.py`` (about 2 minutes; ``--quick`` for ~30 s).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from molt.atdp import Event, EventKind, Generation, Outcome, ToolCall, UserMessage
from molt.capture import MemorySink, Recorder
from molt.governance import GovernancePipeline, GovernancePolicy, GovernedSink
from molt.store import Store

console = Console()

POLICY = GovernancePolicy.model_validate({
    "name": "bench",
    "defaults": {"training": {"opt_in": True, "require_consent": False, "exclude_tools": ["payments.*"]}},
    "tenants": {"acme": {}, "globex": {}, "initech": {"redaction": {"policy": "mask"}}},
})

_NAMES = ["Ana Lima", "Bob Stone", "Chen Wei", "Dana Kowalski", "Emeka Obi"]
_FILLER = ("The customer asked about the delivery window for the replacement part and whether the "
           "warranty covers the second repair visit; the agent checked the order history first. ")


def make_events(n: int, seed: int = 0) -> list[Event]:
    """~1 KB events (serialized): user messages with PII, model calls with tool calls, tool results."""
    rng = random.Random(seed)
    tenants = ["acme", "globex", "initech"]
    out = []
    for i in range(n):
        tid = f"traj-{seed}-{i // 6:06d}"
        name = rng.choice(_NAMES)
        md = {"tenant_id": tenants[i % 3], "agent_id": "support-bot", "task": "orders",
              "consent": {"training": True, "subject_id": f"cust-{i % 97}"}}
        email = name.lower().replace(" ", ".") + "@example.org"
        k = i % 3
        if k == 0:
            ev = Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata=md, action=UserMessage(
                content=f"Hi, this is {name} ({email}, +1 415 555 01{i % 90:02d}). My order A-{i} is late. "
                        + _FILLER * 2))
        elif k == 1:
            ev = Event(trajectory_id=tid, kind=EventKind.MODEL_CALL, metadata=md, action=Generation(
                model="smollm2-135m", text=f"Sorry {name.split()[0]}, let me look that up. " + _FILLER * 2,
                tool_calls=[{"id": f"c{i}", "name": "lookup_order", "arguments": {"order_id": f"A-{i}"}}]))
        else:
            ev = Event(trajectory_id=tid, kind=EventKind.TOOL_CALL, metadata=md,
                       action=ToolCall(tool_name="lookup_order", call_id=f"c{i}", arguments={"order_id": f"A-{i}"}),
                       outcome=Outcome(output={"order_id": f"A-{i}", "state": "shipped", "carrier": "DHL",
                                               "ship_to": f"{name}, 12 Harbour Road, Leeds", "notes": _FILLER * 2}))
        out.append(ev)
    return out


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


# ------------------------------------------------------------------------------ 1. caller cost


def caller_cost(events: list[Event], tmp: Path) -> tuple[Table, dict[str, Any]]:
    rows = []
    figures: dict[str, Any] = {}
    for governed in (False, True):
        for paced in (False, True):
            pipe = GovernancePipeline(POLICY) if governed else None
            rec = Recorder(MemorySink(), spool_dir=tmp / f"spool-{governed}-{paced}", pipeline=pipe,
                           max_queue=10 * len(events))
            samples = []
            pc = time.perf_counter_ns
            for ev in events:
                t0 = pc()
                rec.record(ev)
                samples.append((pc() - t0) / 1000)
                if paced:
                    until = pc() + 200_000
                    while pc() < until:
                        pass
            rec.close(timeout=600)
            label = "with governance pipeline" if governed else "without pipeline"
            mode = "paced" if paced else "burst"
            p50, p99 = pct(samples, 0.5), pct(samples, 0.99)
            rows.append((label, mode, p50, p99))
            figures[f"record_{'gov' if governed else 'plain'}_{mode}"] = {"p50_us": p50, "p99_us": p99}
    t = Table("Recorder.record()", "mode", "p50 µs", "p99 µs",
              title=f"1. record() cost on the agent's thread ({len(events):,} events of ~1 KB)")
    for label, mode, p50, p99 in rows:
        t.add_row(label, mode, f"{p50:.2f}", f"{p99:.2f}")
    return t, figures


# ------------------------------------------------------------------------------ 2. agent loop


def _agent_step(i: int) -> None:
    """A fixed slice of agent CPU work (prompt assembly, JSON handling) between two events."""
    doc = {"messages": [{"role": "user", "content": _FILLER * 3, "i": i}] * 8}
    for _ in range(20):
        json.loads(json.dumps(doc))


def agent_loop(events: list[Event], tmp: Path, repeats: int = 3) -> tuple[Table, dict[str, Any]]:
    """Best of ``repeats`` interleaved runs of each variant (the machine may be shared)."""
    walls: dict[str, float] = {"alone": float("inf"), "plain": float("inf"), "gov": float("inf")}
    for r in range(repeats):
        t0 = time.perf_counter()
        for i in range(len(events)):
            _agent_step(i)
        walls["alone"] = min(walls["alone"], time.perf_counter() - t0)
        for variant in ("plain", "gov"):
            pipe = GovernancePipeline(POLICY) if variant == "gov" else None
            rec = Recorder(MemorySink(), spool_dir=tmp / f"agent-{variant}-{r}", pipeline=pipe,
                           max_queue=10 * len(events))
            t0 = time.perf_counter()
            for i, ev in enumerate(events):
                _agent_step(i)
                rec.record(ev)
            walls[variant] = min(walls[variant], time.perf_counter() - t0)
            rec.close(timeout=600)
    alone = walls["alone"]
    t = Table("agent loop (CPU work + one record() per step)", "wall s", "vs. no Molt",
              title=f"2. the agent's thread overall ({len(events):,} steps, best of {repeats}; "
                    f"the writer thread shares the GIL)")
    t.add_row("agent work alone, no Molt", f"{alone:.2f}", "1.00×")
    t.add_row("with Recorder, no pipeline", f"{walls['plain']:.2f}", f"{walls['plain'] / alone:.2f}×")
    t.add_row("with Recorder + governance pipeline", f"{walls['gov']:.2f}", f"{walls['gov'] / alone:.2f}×")
    return t, {"agent_alone_s": alone, "agent_plain_s": walls["plain"], "agent_gov_s": walls["gov"]}


# ------------------------------------------------------------------------------ 3. throughput


def throughput(all_events: list[Event], n_tp: int, ingest_n: int, tmp: Path) -> tuple[Table, dict[str, Any]]:
    events = all_events[:n_tp]
    full = GovernancePipeline(POLICY)
    for ev in events[:30]:  # build each tenant's redactor before timing
        full.process(ev)
    t0 = time.perf_counter()
    for ev in events:
        full.process(ev)
    full_s = time.perf_counter() - t0
    no_redact = GovernancePipeline(GovernancePolicy.model_validate({
        **POLICY.model_dump(mode="json", exclude={"pipeline"}),
        "pipeline": ["validate", "authenticate", "classify", "eligibility", "retention"]}))
    t0 = time.perf_counter()
    for ev in events:
        no_redact.process(ev)
    rest_s = time.perf_counter() - t0
    size = sum(len(e.model_dump_json()) for e in events) / len(events)

    ingest = all_events[:ingest_n]
    store = Store.open(tmp / "ingest-store", auto_compact=False)
    pipe = GovernancePipeline(POLICY)
    rec = Recorder(GovernedSink(store), spool_dir=tmp / "ingest-spool", pipeline=pipe, max_queue=len(ingest) + 1)
    t0 = time.perf_counter()
    for ev in ingest:
        rec.record(ev)
    assert rec.flush(timeout=1200, deliver=True)
    e2e = time.perf_counter() - t0
    rec.close()
    assert store.count() + store.count("quarantine") == len(ingest)
    decisions = store.count("governance")
    store.close()

    n = len(events)
    t = Table("path (one core: the writer thread)", "events", "seconds", "events/s",
              title=f"3. governance throughput on the writer thread (mean event {size:,.0f} B)")
    t.add_row("full pipeline: validate → auth → redact → classify → eligibility → retention", f"{n:,}",
              f"{full_s:.2f}", f"{n / full_s:,.0f}")
    t.add_row("pipeline without redact (eligibility, classification, retention, validation)", f"{n:,}",
              f"{rest_s:.2f}", f"{n / rest_s:,.0f}")
    t.add_row("end to end: record → pipeline → spool (fsync) → LanceDB + decisions table", f"{len(ingest):,}",
              f"{e2e:.2f}", f"{len(ingest) / e2e:,.0f}")
    figures = {"pipeline_events_per_s": n / full_s, "pipeline_no_redact_events_per_s": n / rest_s,
               "e2e_events_per_s": len(ingest) / e2e, "decisions": decisions, "mean_event_bytes": size}
    return t, figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer events (~30 s)")
    ap.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args()
    n_call, n_agent, n_tp, n_ingest = (2_000, 600, 600, 1_500) if args.quick else (10_000, 2_000, 3_000, 6_000)
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="molt-bench-gov-") as d:
        tmp = Path(d)
        for fn, fargs in ((caller_cost, (make_events(n_call, 1), tmp)), (agent_loop, (make_events(n_agent, 2), tmp)),
                          (throughput, (make_events(max(n_tp, n_ingest), 3), n_tp, n_ingest, tmp))):
            table, figs = fn(*fargs)  # type: ignore[operator]
            figures.update(figs)
            console.print(table)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
