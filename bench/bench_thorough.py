"""The thorough redaction pass off the request path: how fast its backlog drains, beside the fast pass.

    taskset -c 0 python bench/bench_thorough.py [--events 400] [--demo-rate R]

Events: the typical support-agent events of ``bench/bench_redaction.py`` (``agent_traffic``: ~1 KB of
text in ~13 fields, 35 % with PII), first through the fast pass (what capture stores), then submitted
all at once to a :class:`~molt.governance.thorough.ThoroughWorker` — the backlog a burst leaves. Printed:
the backlog sampled while it drains, the wall time and the worker's CPU to drain it, events per
second (wall) and per CPU-second, and the fast pass's events per CPU-second on the same events in the
same run (the peer). ``--demo-rate`` is the event rate to compare with: by default the rate of
``molt demo --quick`` as the README states it (192 requests in 166 s) times the events per request this
script counts in one run of the demo's traffic shape (``--events-per-request``, default 6: a LangChain
agent's user message, two model calls, a tool call and its result, the answer).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_redaction import agent_traffic
from molt.governance.redaction import Redactor, redact_event
from molt.governance.thorough import ThoroughPass, ThoroughWorker


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=400)
    ap.add_argument("--events-per-request", type=float, default=6.0)
    ap.add_argument("--demo-rate", type=float, default=None, help="events/s to compare with")
    args = ap.parse_args(argv)
    demo = args.demo_rate or 192 / 166 * args.events_per_request
    fast = Redactor(cache_size=0)
    items = agent_traffic(args.events)
    fast.detect("warm up the lexicons, Anna Smith")
    t0 = time.process_time()
    stored = [redact_event(it.event, redactor=fast)[0] for it in items]
    fast_cpu = time.process_time() - t0
    thorough = ThoroughPass()
    thorough.clean_text("warm up the model, Anna Smith")  # loads spaCy outside the timing
    worker = ThoroughWorker(thorough)
    w0, c0 = time.monotonic(), time.process_time()
    worker.submit(stored)
    samples = []
    while worker.backlog:
        samples.append((time.monotonic() - w0, worker.backlog))
        time.sleep(0.5)
    wall, cpu = time.monotonic() - w0, time.process_time() - c0
    worker.close()
    print(f"{args.events} typical events; fast pass {args.events / fast_cpu:,.0f} events/CPU-s (same run)")
    step = max(1, len(samples) // 6)
    print("backlog while draining (s, events): " + ", ".join(f"{t:.1f}s {b}" for t, b in samples[::step]))
    rate = args.events / wall
    print(f"thorough pass: drained {args.events} in {wall:.1f} s wall, {cpu:.1f} s CPU -> {rate:,.1f} events/s wall, "
          f"{worker.rate:,.1f} events/CPU-s of the pass "
          f"({args.events / fast_cpu / worker.rate:.0f}x the fast pass's CPU)")
    print(f"demo event rate {demo:.1f} events/s ({args.events_per_request:g} per request): drains at "
          f"{rate / demo:.1f}x it (goal >= 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
