"""One recognizer interface: Molt detectors, Presidio recognizers and spaCy pipelines interchangeably.

Molt's :class:`~molt.governance.redaction.base.Detector` (``name``, ``entities``,
``detect(text) -> [Span]``) is the interface every detector implements — the structured ones
(cards, IBANs, phones, …) and the name / place / organisation one (``entities``, lexicon-based)
alike. This module connects it to the two interfaces users already have recognizers for:

- :class:`PresidioDetector` runs any Presidio ``EntityRecognizer`` (a ``PatternRecognizer``, a
  predefined recognizer, the ``SpacyRecognizer``, one of your own) as a Molt detector;
- :func:`as_presidio_recognizer` goes the other way: a Molt detector as a Presidio
  ``EntityRecognizer``, to add to a Presidio ``AnalyzerEngine``'s registry;
- :class:`SpacyDetector` runs a spaCy pipeline's entities (``doc.ents``, any model or an
  ``entity_ruler``) as a Molt detector, with a label map (``PER``/``PERSON`` → ``PERSON``, …).

Plug one in for one redactor, or register it by name so a policy's ``detectors`` can list it::

    from molt.governance.redaction import Redactor, detectors
    from molt.governance.redaction.recognizers import PresidioDetector, SpacyDetector

    redactor = Redactor(extra_detectors=[SpacyDetector(spacy.load("en_core_web_sm"))])
    detectors.register("my_ids", lambda: PresidioDetector(my_pattern_recognizer))

Presidio and spaCy are imported only by the code that uses them; this module needs neither.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from molt.governance.redaction.base import Detector, Span

__all__ = ["SPACY_LABELS", "PresidioDetector", "SpacyDetector", "as_presidio_recognizer"]

#: spaCy / CoNLL / OntoNotes labels → Molt entity types (labels not listed are dropped).
SPACY_LABELS: dict[str, str] = {
    "PERSON": "PERSON", "PER": "PERSON",
    "GPE": "LOCATION", "LOC": "LOCATION", "FAC": "LOCATION",
    "ORG": "ORGANIZATION", "NORP": "",
}  # fmt: skip


class PresidioDetector:
    """A Presidio ``EntityRecognizer`` as a Molt :class:`Detector`.

    ``recognizer.analyze(text, entities, nlp_artifacts)`` is called with the recognizer's own
    supported entities; ``nlp_artifacts`` is made by ``nlp_engine`` when one is given (recognizers
    that read tokens or lemmas need it), else ``None`` (pattern recognizers do not). ``aliases``
    renames Presidio types to Molt's (``URL`` → ``DOMAIN_NAME`` by default).
    """

    def __init__(
        self,
        recognizer: Any,
        *,
        name: str | None = None,
        language: str = "en",
        nlp_engine: Any = None,
        aliases: Mapping[str, str] | None = None,
    ):
        self.recognizer = recognizer
        self.name = name or f"presidio:{getattr(recognizer, 'name', type(recognizer).__name__)}"
        self.language = language
        self.nlp_engine = nlp_engine
        self.aliases = dict({"URL": "DOMAIN_NAME"} if aliases is None else aliases)
        supported = list(getattr(recognizer, "supported_entities", []) or [])
        if not supported:
            raise ValueError(f"{self.name}: a Presidio recognizer must list its supported_entities")
        self._supported = supported
        self.entities = frozenset(self.aliases.get(e, e) for e in supported)

    def detect(self, text: str) -> list[Span]:
        """The recognizer's results as spans (its scores kept)."""
        artifacts = self.nlp_engine.process_text(text, self.language) if self.nlp_engine is not None else None
        results = self.recognizer.analyze(text, self._supported, artifacts) or []
        return [
            Span(r.start, r.end, self.aliases.get(r.entity_type, r.entity_type), float(r.score), self.name)
            for r in results
            if r.end > r.start
        ]


class SpacyDetector:
    """A spaCy pipeline's named entities as a Molt :class:`Detector`.

    ``labels`` maps the pipeline's labels to Molt types (default :data:`SPACY_LABELS`; a label
    mapped to ``""`` or not listed is dropped). spaCy gives no per-entity confidence, so every
    span gets ``score``. Where spans overlap the higher score wins, so the default 0.5 — below the
    lexicon detector's 0.7–0.8 and the structured detectors' — makes the pipeline fill what Molt's
    detectors did not find rather than replace what they did (with ``en_core_web_sm``, letting its
    spans win lowered both precision and recall on the development sets of ``bench/bench_redaction.py``:
    its bounds and types replaced the lexicon's). Raise it for a pipeline you trust over the lexicon.
    """

    def __init__(self, nlp: Any, *, labels: Mapping[str, str] | None = None, score: float = 0.5, name: str = "spacy"):
        self.nlp = nlp
        self.labels = {k: v for k, v in (labels or SPACY_LABELS).items() if v}
        self.name = name
        self.score = score
        self.entities = frozenset(self.labels.values())

    def detect(self, text: str) -> list[Span]:
        """Entities of ``nlp(text)`` with a mapped label."""
        out = []
        for ent in self.nlp(text).ents:
            ty = self.labels.get(ent.label_)
            if ty:
                out.append(Span(ent.start_char, ent.end_char, ty, self.score, self.name))
        return out


def as_presidio_recognizer(
    detector: Detector | Callable[[], Detector],
    *,
    language: str = "en",
    entities: Iterable[str] | None = None,
) -> Any:
    """A Presidio ``EntityRecognizer`` that runs a Molt detector (or a detector factory, such as
    ``detectors.get("entities")``), for a Presidio ``AnalyzerEngine``::

        registry.add_recognizer(as_presidio_recognizer(detectors.get("entities")))

    Needs ``presidio-analyzer`` (``pip install 'molt-core[redaction]'``).
    """
    try:
        from presidio_analyzer import EntityRecognizer, RecognizerResult
    except ImportError as exc:  # pragma: no cover - the redaction extra brings it
        raise ImportError("as_presidio_recognizer needs presidio-analyzer: pip install 'molt-core[redaction]'") from exc
    # a factory is a class or a function; an instance has a bound detect
    det = detector() if isinstance(detector, type) or not hasattr(detector, "detect") else detector  # type: ignore[operator]
    supported = sorted(entities or det.entities)  # type: ignore[union-attr]

    class MoltRecognizer(EntityRecognizer):  # type: ignore[misc]
        """Presidio's view of a Molt detector."""

        def load(self) -> None:
            """Nothing to load: the detector is built."""

        def analyze(self, text: str, entities: list[str], nlp_artifacts: Any = None) -> list[Any]:
            wanted = set(entities or supported)
            return [
                RecognizerResult(s.entity_type, s.start, s.end, s.score)
                for s in det.detect(text)  # type: ignore[union-attr]
                if s.entity_type in wanted
            ]

    return MoltRecognizer(supported_entities=supported, name=f"molt:{det.name}", supported_language=language)  # type: ignore[union-attr]
