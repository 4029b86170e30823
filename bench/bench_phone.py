"""Phone numbers: Molt's hand patterns vs the ``phonenumbers`` library's matcher, measured.

    taskset -c 0 python bench/bench_phone.py

Issue 21 asked for phone numbers through a well-kept library where that measures better. This
prints precision / recall of PHONE_NUMBER alone (each detector on its own, no other detector to
resolve overlaps with) on the development set's held-out templates and on the second source
(:mod:`pii_second_source`, inspected and blind templates), and sentences per CPU-second over 600
sentences, for: Molt's ``PhoneDetector`` as it runs by default (its hand rules find and shape the
candidates; bare digit runs the rules cannot judge by shape are checked against the countries'
numbering plans through ``phonenumbers``' metadata, ``patterns.dialable``); the hand rules alone
(``PhoneDetector(plans=False)``); ``phonenumbers.PhoneNumberMatcher`` (leniency POSSIBLE) with the
region ``US``; and the same over the regions ``US, GB, DE, FR`` (a number found under any).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import phonenumbers

from bench_redaction import DEFAULT_DATA
from molt.governance.redaction.evaluate import evaluate, load_labelled, split_by_template
from molt.governance.redaction.patterns import PhoneDetector
from pii_second_source import generate

Spans = list[tuple[int, int, str]]


def library(text: str, regions: tuple[str, ...] = ("US", "GB", "DE", "FR")) -> Spans:
    """Numbers ``phonenumbers`` finds in ``text`` under any of ``regions``."""
    seen: dict[tuple[int, int], None] = {}
    for region in regions:
        for m in phonenumbers.PhoneNumberMatcher(text, region, leniency=phonenumbers.Leniency.POSSIBLE):
            seen[(m.start, m.end)] = None
    return [(a, b, "PHONE_NUMBER") for a, b in seen]


def main() -> int:
    """Print one row per detector."""
    records = load_labelled(str(DEFAULT_DATA))
    _dev, held = split_by_template(records)
    second = generate(1500)
    blind = generate(1500, blind=True)
    hybrid, hand = PhoneDetector(), PhoneDetector(plans=False)
    systems = [
        (
            "Molt PhoneDetector (hand rules + numbering plans)",
            lambda t: [(s.start, s.end, s.entity_type) for s in hybrid.detect(t)],
        ),
        ("Molt PhoneDetector (hand rules alone)", lambda t: [(s.start, s.end, s.entity_type) for s in hand.detect(t)]),
        ("phonenumbers, region US", lambda t: library(t, ("US",))),
        ("phonenumbers, regions US+GB+DE+FR", library),
    ]
    texts = [r["full_text"] for r in records[:600]]
    print("detector | held-out templates | second source, inspected | second source, blind | sentences/s")
    for name, fn in systems:
        row = [name]
        for rs in (held, second, blind):
            sc = evaluate(rs, fn, types=["PHONE_NUMBER"]).by_type["PHONE_NUMBER"]
            row.append(f"P {sc.precision:.3f} R {sc.recall:.3f}")
        t0 = time.process_time()
        for t in texts:
            fn(t)
        row.append(f"{len(texts) / (time.process_time() - t0):,.0f}")
        print(" | ".join(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
