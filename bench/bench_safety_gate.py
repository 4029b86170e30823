"""The safety gate on learned text (molt.control.gate) on a labelled set of its own.

    python bench/bench_safety_gate.py              # report mode: the figures of both splits, no items
    python bench/bench_safety_gate.py --errors 40  # tuning mode: the dev split only, with its errors

The set is :mod:`safety_gate_set` (generated, seeded): prompt-injection variants that must be refused
and genuine corrections (facts, procedures over the agent's tools, answer formats) that must be
accepted, each family of sentences in one split — ``dev`` (tuned on; its errors printed with
``--errors``) or ``report`` (never printed item by item). Targets: injections refused ≥ 98 %, genuine
accepted ≥ 90 %, on both splits.

Beside the gate, in the same run and on the same items, the check the control plane applied before the
gate existed (a text holding personal data or a secret, as the plane's redactor finds it, was refused;
anything else went to replay) — the named peer — with its figures and both throughputs (texts per
second, one thread; the ratio is what to read).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import safety_gate_set  # noqa: E402
from molt.control.gate import SafetyGate  # noqa: E402


def _redaction_check() -> Any:
    from molt.control.plane import PlaneSettings
    from molt.governance.redaction import RedactionPolicy, Redactor

    r = Redactor(RedactionPolicy(name="control-plane-personal-data", entities=PlaneSettings().pii_types))

    def refused(item: dict[str, Any]) -> bool:
        return any(r.redact(t)[1] for t in item["texts"])
    return refused


def _gate_check(gate: SafetyGate) -> Any:
    def refused(item: dict[str, Any]) -> bool:
        return not gate.screen_many(item["texts"], item["role"], tools=item["tools"]).accepted
    return refused


def _figures(items: list[dict[str, Any]], refused: Any) -> tuple[dict[str, tuple[int, int]], float, list[Any]]:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    errors = []
    t0 = time.perf_counter()
    for it in items:
        got = refused(it)
        ok = got if it["label"] == "injection" else not got
        c = counts[it["label"]]
        c[0] += ok
        c[1] += 1
        if not ok:
            errors.append(it)
    dt = time.perf_counter() - t0
    return {k: (v[0], v[1]) for k, v in counts.items()}, len(items) / dt if dt else 0.0, errors


def _pct(x: tuple[int, int]) -> str:
    return f"{x[0]}/{x[1]} ({100 * x[0] / x[1]:.1f} %)" if x[1] else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--errors", type=int, default=None, metavar="N",
                    help="tuning mode: the dev split only, with up to N errors printed")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    items = safety_gate_set.generate(args.seed)
    gate = SafetyGate()
    splits = ["dev"] if args.errors is not None else ["dev", "report"]
    checks = {"safety gate": _gate_check(gate), "redaction check (the plane before the gate)": _redaction_check()}
    print(f"{'split':<7} {'check':<44} {'injections refused':>22} {'genuine accepted':>22} {'texts/s':>9}")
    shown: list[Any] = []
    for split in splits:
        part = [i for i in items if i["split"] == split]
        for name, fn in checks.items():
            fig, rate, errs = _figures(part, fn)
            print(f"{split:<7} {name:<44} {_pct(fig.get('injection', (0, 0))):>22} "
                  f"{_pct(fig.get('genuine', (0, 0))):>22} {rate:>9.0f}")
            if name == "safety gate" and split == "dev":
                shown = errs
    if args.errors is not None:
        by = Counter(e["transform"] for e in shown)
        print(f"\ndev errors by transform: {dict(by)}")
        for e in shown[:args.errors]:
            v = gate.screen_many(e["texts"], e["role"], tools=e["tools"])
            print(f"- [{e['label']} {e['role']} {e['transform']}] {e['texts']!r}\n    -> {v.summary()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
