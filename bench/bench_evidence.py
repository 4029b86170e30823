"""Evidence benchmark (issue 43): the guarded bar against the strict bar of before, on the same windows,
with 0 %, 15 % and 25 % of the outcome rewards flipped and the users' corrections arriving late.

1. **False changes** on windows where nothing should change, ``--seeds`` seeded windows of each kind
   (the flip rate cycles 0 / 15 / 25 % over the seeds):

   - *noise-only*: healthy traffic (order lookups, documented questions), a flaky order service (10 % of
     lookups time out), two asks of a fact the knowledge base lacks (corrected) and two tax sums the
     model cannot do;
   - *contradicting*: eight asks of one missing fact whose users correct it with different values
     (at most two agree), beside twelve healthy requests;
   - *environment fault*: order lookups against a service that times out 60 % of the time, beside ten
     documented questions.

   A change is any new version (canary or live) or a weight update asked of the trainer, after the
   first cycle and — its corrections arrived — the second. The bound the issue sets is 5 %.
2. **Right choices per failure kind**: the first ``--per-kind`` scenarios of each kind of the desk
   suite (:data:`molt_desk.scenarios.SCENARIOS`) at each flip rate, late corrections, under each bar:
   the share whose choice is the ground truth's intervention (a guarded canary counts as its kind).

Run: ``.venv/bin/python bench/bench_evidence.py`` (``--seeds 40 --per-kind 1``; ``--part false`` or
``--part choices`` for one part, ``--kinds``, ``--bars guarded,strict``). Writes ``bench/out/evidence.json``
as it goes.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from molt.control.plane import PlaneSettings
from molt_desk.scenarios import SCENARIOS, TRUTH, Scenario, Traffic, run_scenario
from molt_desk.world import AGENT, FACTS, ORDERS

console = Console(width=130)
ROOT = Path(__file__).resolve().parents[1]
FLIPS = (0.0, 0.15, 0.25)
BARS = {"guarded (now)": PlaneSettings(), "strict (before)": PlaneSettings(guarded=False)}
_IDS = sorted(ORDERS)
_MISSING = [t for t in FACTS if t != "returns"]


def _status(rng: random.Random, n: int) -> list[Traffic]:
    return [Traffic("acme", AGENT, f"Where is order {rng.choice(_IDS)}? (ticket {rng.randrange(10**6)})", "status")
            for _ in range(n)]


def _kb(rng: random.Random, n: int) -> list[Traffic]:
    f = FACTS["returns"]
    return [Traffic("acme", AGENT, f"{rng.choice(f.questions)} (ticket {rng.randrange(10**6)})", "kb_question")
            for _ in range(n)]


def window(kind: str, seed: int) -> Scenario:
    """One seeded window of ``kind`` (module docstring)."""
    rng = random.Random(f"evidence-{kind}-{seed}")
    flaky = 0.0
    if kind == "noise-only":
        items = _status(rng, 8 + rng.randrange(8)) + _kb(rng, 8 + rng.randrange(8))
        f = FACTS[rng.choice(_MISSING)]
        items += [Traffic("acme", AGENT, f"{rng.choice(f.questions)} (ticket {rng.randrange(10**6)})", "kb_question",
                          f.text) for _ in range(2)]
        for _ in range(2):
            oid = rng.choice(_IDS)
            items.append(Traffic("acme", AGENT, f"What is the total of order {oid} in cents including 7% tax? "
                                                f"(ticket {rng.randrange(10**6)})", "capability"))
        flaky = 0.1
    elif kind == "contradicting":
        f = FACTS[rng.choice(_MISSING)]
        values = rng.sample([3, 5, 7, 10, 14, 21, 30, 45, 60, 90, 120, 180], 7)
        values.append(values[0])  # two users agree, the rest do not
        rng.shuffle(values)
        items = [Traffic("acme", AGENT, f"{f.questions[i % 3]} (ticket {rng.randrange(10**6)})", "kb_question",
                         f"For the {f.topic}: it is {v} days.") for i, v in enumerate(values)]
        items += _status(rng, 6) + _kb(rng, 6)
    elif kind == "environment fault":
        items = _status(rng, 10 + rng.randrange(6)) + _kb(rng, 10)
        flaky = 0.6
    else:
        raise ValueError(kind)
    rng.shuffle(items)
    return Scenario(f"ev-{kind.replace(' ', '-')}-{seed}", "noise", "acme", AGENT, tuple(items), flaky=flaky)


def _changed(r: Any) -> bool:
    return r.cycle is not None and (r.cycle.version is not None or r.choice == "weight_update")


KINDS = ("noise-only", "contradicting", "environment fault")


def false_changes(seeds: int, root: Path, kinds: list[str], bars: list[str], save: Any,
                  out: dict[str, Any]) -> dict[str, Any]:
    for kind in kinds:
        for bar in bars:
            settings = BARS[bar]
            rows: list[dict[str, Any]] = []
            for seed in range(seeds):
                flip = FLIPS[seed % len(FLIPS)]
                r = run_scenario(window(kind, seed), root / bar.split()[0], settings=settings, flip=flip,
                                 late_corrections=True)
                rows.append({"seed": seed, "flip": flip, "choice": r.choice, "changed": _changed(r),
                             "reason": r.reason[:200]})
                out[f"{kind}|{bar}"] = rows
                save()
            n = sum(x["changed"] for x in rows)
            console.print(f"  {kind:18} {bar:16} {n}/{len(rows)} changed", highlight=False)
    return out


def choices(per_kind: int, root: Path, bars: list[str], save: Any, out: dict[str, Any]) -> dict[str, Any]:
    picked = [s for k in TRUTH for s in [x for x in SCENARIOS if x.kind == k][:per_kind]]
    for flip in FLIPS:
        for bar in bars:
            settings = BARS[bar]
            rows: list[dict[str, Any]] = []
            for s in picked:
                r = run_scenario(s, root / f"{bar.split()[0]}-{flip}", settings=settings, flip=flip,
                                 late_corrections=True)
                guarded = bool(r.cycle and "guard" in r.cycle.record.signals)
                rows.append({"name": s.name, "kind": s.kind, "truth": s.truth, "choice": r.choice,
                             "right": r.choice == s.truth, "guarded": guarded})
                out[f"{flip}|{bar}"] = rows
                save()
            console.print(f"  flip {flip:.0%} {bar:16} {sum(x['right'] for x in rows)}/{len(rows)} right",
                          highlight=False)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--per-kind", type=int, default=1)
    ap.add_argument("--part", choices=["both", "false", "choices"], default="both")
    ap.add_argument("--kinds", default=",".join(KINDS), help="false-change window kinds, comma-separated")
    ap.add_argument("--bars", default=",".join(b.split()[0] for b in BARS), help="guarded,strict")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "evidence.json"))
    args = ap.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    bars = [b for b in BARS if b.split()[0] in args.bars.split(",")]
    t0 = time.perf_counter()
    result: dict[str, Any] = {"seeds": args.seeds, "per_kind": args.per_kind}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # what is done so far, so a long run can be read before it ends
        out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))

    with tempfile.TemporaryDirectory(prefix="molt-bench-evidence-") as d:
        if args.part in ("both", "false"):
            console.print(f"[bold]false changes[/bold] ({args.seeds} seeded windows per kind, flips "
                          f"{'/'.join(f'{f:.0%}' for f in FLIPS)} over the seeds, late corrections)")
            result["false_changes"] = {}
            false_changes(args.seeds, Path(d) / "false", kinds, bars, save, result["false_changes"])
        if args.part in ("both", "choices"):
            console.print(f"[bold]right choices[/bold] (first {args.per_kind} scenario(s) of each kind)")
            result["choices"] = {}
            choices(args.per_kind, Path(d) / "choices", bars, save, result["choices"])
    if "false_changes" in result:
        t = Table(title="False-change rate on windows where nothing should change (bound: 5 %)")
        t.add_column("window")
        for bar in BARS:
            t.add_column(bar, justify="right")
        for kind in kinds:
            cells = []
            for bar in BARS:
                rows = result["false_changes"].get(f"{kind}|{bar}") or []
                cells.append(f"{sum(x['changed'] for x in rows) / len(rows):.1%} of {len(rows)}" if rows else "-")
            t.add_row(kind, *cells)
        console.print(t)
    if "choices" in result:
        t = Table(title="Right choices per failure kind (late corrections)")
        t.add_column("kind")
        for flip in FLIPS:
            for bar in BARS:
                t.add_column(f"{flip:.0%} {bar.split()[0]}", justify="right")
        by: dict[tuple[str, float, str], list[bool]] = defaultdict(list)
        for key, rows in result["choices"].items():
            flip, bar = key.split("|")
            for x in rows:
                by[(x["kind"], float(flip), bar)].append(x["right"])
        for kind in TRUTH:
            t.add_row(kind, *[f"{sum(v)}/{len(v)}" if v else "-" for flip in FLIPS for bar in BARS
                              for v in [by[(kind, flip, bar)]]])
        console.print(t)
    result["seconds"] = round(time.perf_counter() - t0)
    console.print(f"{result['seconds']} s")
    save()


if __name__ == "__main__":
    main()
