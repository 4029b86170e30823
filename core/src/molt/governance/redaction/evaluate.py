"""Span-level evaluation of redaction against labelled data.

Scoring (the issue's definition): a gold span is *found* when some predicted span of the same
entity type overlaps it with IoU ≥ ``iou`` (intersection over union of character ranges); a
predicted span is *correct* when it matches some gold span that way. Recall = found / gold,
precision = correct / predicted, per type and micro-averaged over a set of types.

Predictions whose type is out of the evaluated scope are ignored; a type alias table maps a
predictor's names onto the labels' (Presidio says ``URL`` where the labels say ``DOMAIN_NAME``).
``skip(entity_type, covered_text)`` takes spans out of the scoring, gold and predicted alike, for
every predictor: what a policy deliberately leaves in the text although the labels mark it (the
countries a default policy keeps, :attr:`RedactionPolicy.keep_country_level_places`).

:func:`evaluate_chars` is a second, redaction-centred reading of the same labels: of the characters
inside labelled spans, how many a predictor covers (recall), and of the characters it covers, how
many are labelled (precision), whatever the types. Labels draw one postal address whole in some
templates and in parts (street, city, postcode) in others; the span metric counts a whole-block
prediction against part labels (and the reverse) as misses and false positives at once, while
what reaches the store — the characters replaced — is the same either way.

The labelled format is presidio-research's: ``{"full_text", "spans": [{"entity_type",
"start_position", "end_position"}], "template_id"}``. :func:`split_by_template` makes a
deterministic split by template. It does not make a held-out set of a file whose templates were
looked at while tuning (the Presidio file's were: bench/bench_redaction.py treats all of it as
development data); held-out figures need text no one tuned on (bench/bench_redaction_btc.py's
report sections, the sealed second-source split).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Scores", "TypeScore", "evaluate", "evaluate_chars", "iou", "load_labelled", "split_by_template"]

SpanT = tuple[int, int, str]


def iou(a: tuple[int, int], b: tuple[int, int]) -> float:
    """Intersection over union of two half-open character ranges."""
    inter = min(a[1], b[1]) - max(a[0], b[0])
    if inter <= 0:
        return 0.0
    return inter / (max(a[1], b[1]) - min(a[0], b[0]))


@dataclass
class TypeScore:
    """Counts for one entity type."""

    gold: int = 0
    found: int = 0
    predicted: int = 0
    correct: int = 0

    @property
    def recall(self) -> float:
        """found / gold (1.0 with no gold spans)."""
        return self.found / self.gold if self.gold else 1.0

    @property
    def precision(self) -> float:
        """correct / predicted (1.0 with no predictions)."""
        return self.correct / self.predicted if self.predicted else 1.0

    @property
    def f1(self) -> float:
        """Harmonic mean of precision and recall."""
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def add(self, other: TypeScore) -> None:
        """Accumulate ``other`` into this score."""
        self.gold += other.gold
        self.found += other.found
        self.predicted += other.predicted
        self.correct += other.correct


@dataclass
class Scores:
    """Per-type scores plus micro-averages over any set of types."""

    by_type: dict[str, TypeScore] = field(default_factory=dict)

    def micro(self, types: Iterable[str] | None = None) -> TypeScore:
        """The summed counts over ``types`` (all scored types when None)."""
        total = TypeScore()
        wanted = set(types) if types is not None else None
        for t, s in self.by_type.items():
            if wanted is None or t in wanted:
                total.add(s)
        return total


def load_labelled(path: str) -> list[dict[str, Any]]:
    """Read a presidio-research style JSON list of labelled sentences."""
    import orjson

    with open(path, "rb") as f:
        data = orjson.loads(f.read())
    if not isinstance(data, list):
        raise ValueError(f"{path} must hold a JSON list of labelled sentences.")
    return data


def split_by_template(records: list[dict[str, Any]], held_out_fraction: float = 0.3) -> tuple[list, list]:
    """(dev, held_out): a deterministic split by ``template_id`` (hash-based, so stable across runs)."""
    dev, held = [], []
    for r in records:
        key = str(r.get("template_id", r.get("full_text", "")))
        h = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        (held if h < held_out_fraction else dev).append(r)
    return dev, held


def evaluate(
    records: list[dict[str, Any]],
    predict: Callable[[str], list[SpanT]],
    *,
    types: Iterable[str],
    iou_threshold: float = 0.5,
    aliases: dict[str, str] | None = None,
    skip: Callable[[str, str], bool] | None = None,
) -> Scores:
    """Score ``predict(text) -> [(start, end, entity_type)]`` on labelled ``records`` for ``types``."""
    wanted = set(types)
    aliases = aliases or {}
    scores = Scores({t: TypeScore() for t in sorted(wanted)})
    for r in records:
        text = r["full_text"]
        gold = [
            (s["start_position"], s["end_position"], s["entity_type"]) for s in r["spans"] if s["entity_type"] in wanted
        ]
        pred = []
        for s, e, t in predict(text):
            t = aliases.get(t, t)
            if t in wanted:
                pred.append((s, e, t))
        if skip is not None:
            gold = [g for g in gold if not skip(g[2], text[g[0] : g[1]])]
            pred = [p for p in pred if not skip(p[2], text[p[0] : p[1]])]
        for gs, ge, gt in gold:
            sc = scores.by_type[gt]
            sc.gold += 1
            if any(pt == gt and iou((gs, ge), (ps, pe)) >= iou_threshold for ps, pe, pt in pred):
                sc.found += 1
        for ps, pe, pt in pred:
            sc = scores.by_type[pt]
            sc.predicted += 1
            if any(pt == gt and iou((gs, ge), (ps, pe)) >= iou_threshold for gs, ge, gt in gold):
                sc.correct += 1
    return scores


def evaluate_chars(
    records: list[dict[str, Any]],
    predict: Callable[[str], list[SpanT]],
    *,
    types: Iterable[str],
    aliases: dict[str, str] | None = None,
    skip: Callable[[str, str], bool] | None = None,
) -> TypeScore:
    """Character-level counts over ``types``, any type matching any type: ``gold`` / ``predicted``
    are the non-space characters inside labelled / predicted spans, ``found`` and ``correct`` both
    the characters inside both (so precision and recall read as for :class:`TypeScore`)."""
    wanted = set(types)
    aliases = aliases or {}
    total = TypeScore()
    for r in records:
        text = r["full_text"]
        gold: set[int] = set()
        for g in r["spans"]:
            a, b, t = g["start_position"], g["end_position"], g["entity_type"]
            if t in wanted and not (skip is not None and skip(t, text[a:b])):
                gold.update(i for i in range(a, b) if not text[i].isspace())
        pred: set[int] = set()
        for a, b, t in predict(text):
            t = aliases.get(t, t)
            if t in wanted and not (skip is not None and skip(t, text[a:b])):
                pred.update(i for i in range(a, b) if not text[i].isspace())
        both = len(gold & pred)
        total.gold += len(gold)
        total.predicted += len(pred)
        total.found += both
        total.correct += both
    return total
