"""Redaction accuracy and throughput: Molt vs Presidio's default pattern-only analyzer.

    python bench/bench_redaction.py [--data ../shared/data/pii/presidio_generated_large.json] [--seconds 3]

Accuracy: span-level precision / recall / F1 per entity type on the labelled file (IoU ≥ 0.5, same
type; see :mod:`molt.governance.redaction.evaluate`), for the whole file and for the held-out split
by ``template_id`` (templates never looked at while tuning). Micro figures for all in-scope types
and for the structured types. Out-of-scope types (DATE_TIME, TITLE, PREFIX) are reported on their
own, not counted in "all".

Presidio reference — exactly what is measured: ``presidio_analyzer.AnalyzerEngine`` with a
``RecognizerRegistry`` of its predefined recognizers for English minus ``SpacyRecognizer`` (its only
NER), and an NLP engine that is ``spacy.blank("en")`` (tokens, no model, so nothing is downloaded;
context-word enhancement then sees tokens but no lemmas). tldextract is pointed at its bundled
suffix list (``TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS=""``) so it makes no network call. Presidio's
``URL`` is scored as ``DOMAIN_NAME``. Presidio pattern-only has no PERSON / LOCATION / ADDRESS /
ORGANIZATION recognizer, so its figures for those are 0 recall by construction.

Throughput: ~1 KB texts made by concatenating the labelled sentences (dense in PII, the worst case),
single thread, ``Redactor.redact`` (detect + replace) and ``redact_event`` on a tool-call event
carrying the same text, vs ``AnalyzerEngine.analyze`` on the same texts.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS", "")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rich.console import Console
from rich.table import Table

from molt.atdp import Event, EventKind, Outcome, ToolCall, new_id
from molt.governance.redaction import OUT_OF_SCOPE_ENTITIES, STRUCTURED_ENTITIES, Redactor, redact_event
from molt.governance.redaction.evaluate import Scores, evaluate, load_labelled, split_by_template

DEFAULT_DATA = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "pii" / "presidio_generated_large.json"
)
IN_SCOPE = [
    "PERSON", "ADDRESS", "LOCATION", "ORGANIZATION", "CREDIT_CARD", "PHONE_NUMBER", "EMAIL_ADDRESS",
    "US_SSN", "IBAN_CODE", "IP_ADDRESS", "DOMAIN_NAME", "US_DRIVER_LICENSE",
]  # fmt: skip
ALIASES = {"URL": "DOMAIN_NAME"}


def presidio_pattern_analyzer():  # type: ignore[no-untyped-def]
    """Presidio's AnalyzerEngine with its predefined pattern recognizers only, no spaCy model."""
    import spacy
    from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
    from presidio_analyzer.nlp_engine import SpacyNlpEngine

    class BlankSpacyEngine(SpacyNlpEngine):
        def load(self) -> None:
            self.nlp = {"en": spacy.blank("en")}

    engine = BlankSpacyEngine(models=[{"lang_code": "en", "model_name": "blank"}])
    engine.load()
    registry = RecognizerRegistry(supported_languages=["en"])
    registry.load_predefined_recognizers(nlp_engine=engine, languages=["en"])
    registry.remove_recognizer("SpacyRecognizer")
    return AnalyzerEngine(registry=registry, nlp_engine=engine, supported_languages=["en"])


def _table(title: str, molt: Scores, presidio: Scores | None, types: list[str]) -> Table:
    t = Table(title=title)
    t.add_column("entity type")
    t.add_column("gold", justify="right")
    for who in ("Molt", "Presidio") if presidio else ("Molt",):
        for m in ("P", "R", "F1"):
            t.add_column(f"{who} {m}", justify="right")

    def row(name: str, a, b) -> None:  # type: ignore[no-untyped-def]
        cells = [name, str(a.gold), f"{a.precision:.3f}", f"{a.recall:.3f}", f"{a.f1:.3f}"]
        if b is not None:
            cells += [f"{b.precision:.3f}", f"{b.recall:.3f}", f"{b.f1:.3f}"]
        t.add_row(*cells)

    for ty in types:
        if molt.by_type[ty].gold or molt.by_type[ty].predicted:
            row(ty, molt.by_type[ty], presidio.by_type[ty] if presidio else None)
    t.add_section()
    row(
        "structured (micro)",
        molt.micro(STRUCTURED_ENTITIES),
        presidio.micro(STRUCTURED_ENTITIES) if presidio else None,
    )
    row("all in scope (micro)", molt.micro(IN_SCOPE), presidio.micro(IN_SCOPE) if presidio else None)
    return t


def _texts_1kb(records: list[dict], n: int) -> list[str]:
    texts, cur = [], ""
    i = 0
    while len(texts) < n:
        cur += records[i % len(records)]["full_text"] + "\n"
        i += 1
        if len(cur) >= 1000:
            texts.append(cur[:1024])
            cur = ""
    return texts


def _rate(fn, texts: list[str], seconds: float) -> float:  # type: ignore[no-untyped-def]
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for x in texts:
            fn(x)
        done += len(texts)
    return done / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the tables."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--seconds", type=float, default=3.0, help="time per throughput measurement")
    ap.add_argument("--no-presidio", action="store_true")
    args = ap.parse_args(argv)
    console = Console(width=150)
    records = load_labelled(args.data)
    dev, held = split_by_template(records)
    redactor = Redactor()
    redactor.detect("warm up the lexicons, Anna Smith")

    def molt_predict(text: str) -> list[tuple[int, int, str]]:
        return [(s.start, s.end, s.entity_type) for s in redactor.detect(text)]

    analyzer = None if args.no_presidio else presidio_pattern_analyzer()

    def presidio_predict(text: str) -> list[tuple[int, int, str]]:
        assert analyzer is not None
        return [(r.start, r.end, r.entity_type) for r in analyzer.analyze(text, language="en")]

    for title, rs in (("all sentences", records), ("held-out templates", held), ("dev templates", dev)):
        m = evaluate(rs, molt_predict, types=IN_SCOPE, aliases=ALIASES)
        p = evaluate(rs, presidio_predict, types=IN_SCOPE, aliases=ALIASES) if analyzer else None
        console.print(_table(f"Redaction accuracy, {title} (n={len(rs)}, IoU ≥ 0.5)", m, p, IN_SCOPE))

    oos = sorted(OUT_OF_SCOPE_ENTITIES)
    dt = Redactor(
        redactor.policy.model_copy(update={"entities": frozenset({"DATE_TIME"}), "detectors": ("date_time",)})
    )
    m = evaluate(records, lambda t: [(s.start, s.end, s.entity_type) for s in dt.detect(t)], types=oos)
    t = Table(title="Out of the default scope (not redacted by default; DATE_TIME via an opt-in detector)")
    for c in ("entity type", "gold", "opt-in P", "opt-in R"):
        t.add_column(c)
    for ty in oos:
        s = m.by_type[ty]
        t.add_row(
            ty,
            str(s.gold),
            f"{s.precision:.3f}" if ty == "DATE_TIME" else "—",
            f"{s.recall:.3f}" if ty == "DATE_TIME" else "—",
        )
    console.print(t)

    texts = _texts_1kb(records, 200)
    event_of = [
        Event(trajectory_id=new_id(), kind=EventKind.TOOL_CALL, action=ToolCall(tool_name="crm.lookup", arguments={"note": x}),
              outcome=Outcome(output={"result": "ok"}))
        for x in texts
    ]  # fmt: skip
    molt_rate = _rate(redactor.redact, texts, args.seconds)
    events = iter(range(10**9))
    ev_rate = _rate(
        lambda _x: redact_event(event_of[next(events) % len(event_of)], redactor=redactor),
        texts,
        args.seconds,
    )
    t = Table(title=f"Throughput, one core, {len(texts)} texts of ~1 KB (PII-dense)")
    for c in ("system", "texts/s", "vs Presidio"):
        t.add_column(c)
    pres_rate = _rate(presidio_predict, texts[:40], args.seconds) if analyzer else None
    t.add_row(
        "Molt Redactor.redact (detect + replace)",
        f"{molt_rate:,.0f}",
        f"{molt_rate / pres_rate:.1f}×" if pres_rate else "",
    )
    t.add_row(
        "Molt redact_event (tool-call event)",
        f"{ev_rate:,.0f}",
        f"{ev_rate / pres_rate:.1f}×" if pres_rate else "",
    )
    if pres_rate:
        t.add_row("Presidio AnalyzerEngine, pattern recognizers only (detect)", f"{pres_rate:,.0f}", "1.0×")
    console.print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
