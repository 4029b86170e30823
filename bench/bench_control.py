"""Control-plane benchmark: the built-in failure-scenario suite, the plane against two baselines.

Runs every scenario of :data:`molt_desk.scenarios.SCENARIOS` (the scripted support-desk example:
agent runs recorded as ATDP trajectories in a fresh LanceDB store, one control-plane cycle each) and
prints:

1. per failure kind: scenarios, how often the plane's choice matches the ground-truth intervention,
   and the same for the two baselines measured in the same run — *always weight update* and
   *always no-op* — with the total intervention cost each policy would spend;
2. per kind, for the context interventions the plane chose: the failing cluster's success rate
   before → after in replay (the decision's evidence) and live (fresh runs under the old and the new
   version), and the held-back tasks live before → after (the regression check).

3. the same suite, in the same run, captured four ways — the choice = ground truth share of each:
   *registered* (the ``@molt.replayable`` agents recorded in process, the run above); *gateway only*
   (their twins driven through a real gateway as plain HTTP loops with no label — no ``X-Molt-Task``,
   so no ``metadata.task`` —, outcomes posted as late rewards, no entry point registered: the plane
   clusters without labels and replays them from the recording alone, judged by the desk's checker
   registered for the agents, :mod:`molt_desk.gateway`); *20 % flipped*
   (registered, a fifth of the verifier rewards flipped); *late corrections* (registered, the users'
   corrections held back until after a first cycle, which then runs again if it chose nothing).

Run: ``.venv/bin/python bench/bench_control.py`` (``--kinds missing_fact,format`` to run a subset,
``--runs registered,gateway`` to run some of the four, ``--jobs N`` runs measured at once, each in its
own process). Writes ``bench/out/control.json``.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from statistics import mean
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from molt.control.diagnose import COSTS
from molt_desk.scenarios import SCENARIOS, TRUTH, ScenarioResult, run_suite

console = Console(width=130)
ROOT = Path(__file__).resolve().parents[1]

BASELINES = {"always weight update": "weight_update", "always no-op": "noop"}


def _avg(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return mean(vals) if vals else None


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


RUNS: dict[str, dict[str, Any]] = {"registered": {}, "gateway only": {"capture": "gateway"},
                                   "20% flipped": {"flip": 0.2}, "late corrections": {"late_corrections": True}}


def _run(run: str, kinds: list[str], shard: int = 0, shards: int = 1) -> tuple[list[ScenarioResult], float]:
    """One run of the suite, or every ``shards``-th scenario of it from ``shard`` (in a worker process);
    the cycles are dropped (not picklable, not needed)."""
    scenarios = [s for s in SCENARIOS if s.kind in kinds][shard::shards]
    t0 = time.perf_counter()
    done: list[ScenarioResult] = []

    def progress(r: ScenarioResult) -> None:
        done.append(r)
        mark = "ok " if r.match else "BAD"
        print(f"{mark} {run:16} {len(done):2}/{len(scenarios)} {r.name:34} {r.choice:17} ({r.seconds:.1f}s)",
              flush=True)

    results = run_suite(scenarios, progress=progress, **RUNS[run])
    for r in results:
        r.cycle = None
    return results, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="", help="comma-separated failure kinds to run (default: all)")
    ap.add_argument("--jobs", type=int, default=2, help="runs measured at once, each in its own process")
    ap.add_argument("--gateway-shards", type=int, default=2, help="processes the gateway run is split over")
    ap.add_argument("--runs", default="",
                    help="comma-separated runs among: " + ", ".join(RUNS).replace("%", "%%") + " (default: all)")
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k] or list(TRUTH)
    runs = [r for r in args.runs.split(",") if r] or list(RUNS)
    scenarios = [s for s in SCENARIOS if s.kind in kinds]
    by_run: dict[str, list[ScenarioResult]] = {}
    walls: dict[str, float] = {}
    # Each run in its own process (spawned: a fresh interpreter, its own stores), all at once.
    # The gateway run is the slowest (a server, HTTP, governed capture): it is split over --gateway-shards.
    jobs = [(run, i, args.gateway_shards if run == "gateway only" else 1) for run in runs
            for i in range(args.gateway_shards if run == "gateway only" else 1)]
    order = {s.name: i for i, s in enumerate(scenarios)}
    with ProcessPoolExecutor(max_workers=min(args.jobs, len(jobs)), mp_context=get_context("spawn")) as pool:
        futures = [(run, pool.submit(_run, run, kinds, i, n)) for run, i, n in jobs]
        for run, fut in futures:
            rs, w = fut.result()
            by_run[run] = sorted(by_run.get(run, []) + rs, key=lambda r: order[r.name])
            walls[run] = max(walls.get(run, 0.0), w)
    main_run = runs[0]
    results = by_run[main_run]
    wall = walls[main_run]

    by_kind: dict[str, list[ScenarioResult]] = defaultdict(list)
    for r in results:
        by_kind[r.kind].append(r)

    t1 = Table(title=f"Choice vs ground truth on {len(results)} scenarios ({main_run}; same run; {wall:.0f} s)")
    t1.add_column("failure kind")
    t1.add_column("truth")
    t1.add_column("n", justify="right")
    t1.add_column("Molt plane", justify="right")
    for name in BASELINES:
        t1.add_column(name, justify="right")
    for k in kinds:
        rs = by_kind[k]
        row = [k, TRUTH[k], str(len(rs)), f"{sum(r.match for r in rs)}/{len(rs)}"]
        row += [f"{sum(r.truth == b for r in rs)}/{len(rs)}" for b in BASELINES.values()]
        t1.add_row(*row)
    n = len(results)
    plane_match = sum(r.match for r in results) / n
    base_match = {name: sum(r.truth == b for r in results) / n for name, b in BASELINES.items()}
    t1.add_row("all", "", str(n), f"[bold]{plane_match:.1%}[/bold]", *[f"{v:.1%}" for v in base_match.values()])
    plane_cost = sum(COSTS.get(r.choice, 0.0) for r in results)
    t1.add_row("cost spent", "", "", f"{plane_cost:.0f}",
               *[f"{COSTS[b] * n:.0f}" for b in BASELINES.values()])
    console.print(t1)

    t2 = Table(title=f"Fixes of the chosen context interventions ({main_run}): success rate before → after")
    for col in ("failure kind", "chosen", "replay (cluster)", "live (cluster)", "live (held-back tasks)"):
        t2.add_column(col, justify="right" if "(" in col else "left")
    for k in kinds:
        rs = [r for r in by_kind[k] if r.match and r.live_after is not None]
        if not rs:
            continue
        t2.add_row(k, TRUTH[k],
                   f"{_pct(_avg([r.replay_before for r in rs]))} → {_pct(_avg([r.replay_after for r in rs]))}",
                   f"{_pct(_avg([r.live_before for r in rs]))} → {_pct(_avg([r.live_after for r in rs]))}",
                   f"{_pct(_avg([r.regression_before for r in rs]))} → {_pct(_avg([r.regression_after for r in rs]))}")
    console.print(t2)

    t3 = Table(title="Choice = ground truth by how the agents were captured and how noisy the signals were "
                     "(same run)")
    t3.add_column("failure kind")
    t3.add_column("n", justify="right")
    for run in runs:
        t3.add_column(f"{run} ({walls[run]:.0f} s)", justify="right")
    for k in kinds:
        cells = []
        for run in runs:
            rs = [r for r in by_run[run] if r.kind == k]
            cells.append(f"{sum(r.match for r in rs)}/{len(rs)}")
        t3.add_row(k, str(len([s for s in scenarios if s.kind == k])), *cells)
    share = {run: sum(r.match for r in by_run[run]) / len(by_run[run]) for run in runs}
    t3.add_row("all", str(n), *[f"[bold]{share[run]:.1%}[/bold]" for run in runs])
    console.print(t3)
    # The split used to tune the evidence bar (even positions in SCENARIOS) and the one it is reported on (odd).
    pos = {sc.name: i for i, sc in enumerate(SCENARIOS)}
    split = {run: {half: (sum(r.match for r in by_run[run] if pos[r.name] % 2 == j),
                          sum(1 for r in by_run[run] if pos[r.name] % 2 == j))
                   for j, half in enumerate(("even", "odd"))} for run in runs}
    console.print("choice = ground truth, tuning (even) / reporting (odd) scenarios: " + "; ".join(
        f"{run} {v['even'][0]}/{v['even'][1]}, {v['odd'][0]}/{v['odd'][1]}" for run, v in split.items()))
    if "late corrections" in by_run:
        early = [r for r in by_run["late corrections"] if r.first_choice not in ("noop", r.truth)]
        console.print(f"late corrections: {len(early)} first cycle(s) made a wrong change before the corrections "
                      f"arrived" + (": " + ", ".join(f"{r.name} ({r.first_choice})" for r in early) if early else ""))
    for run in runs:
        wrong = [r for r in by_run[run] if not r.match and r.choice != "noop"]
        console.print(f"{run}: {sum(not r.match for r in by_run[run])} mismatch(es), {len(wrong)} of them a wrong "
                      f"change (the others chose no-op: not enough evidence yet)")
    for run in runs:
        for r in by_run[run]:
            if not r.match:
                console.print(f"[red]mismatch[/red] [{run}] {r.name}: chose {r.choice}, truth {r.truth} — "
                              f"{r.reason[:160]}")

    out: dict[str, Any] = {
        "scenarios": n, "wall_s": wall, "plane_match": plane_match, "baselines": base_match,
        "plane_cost": plane_cost, "match_by_run": share, "wall_by_run": walls, "even_odd_by_run": split,
        "results": [{k: v for k, v in r.__dict__.items() if k != "cycle"} for r in results],
        "results_by_run": {run: [{k: v for k, v in r.__dict__.items() if k != "cycle"} for r in rs]
                           for run, rs in by_run.items()},
    }
    (ROOT / "bench" / "out").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "out" / "control.json").write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    console.print("choice = ground truth: " + "; ".join(f"{run} {v:.1%}" for run, v in share.items())
                  + f"; always-weight-update {base_match['always weight update']:.1%}; "
                    f"always-no-op {base_match['always no-op']:.1%}  → bench/out/control.json")


if __name__ == "__main__":
    main()
