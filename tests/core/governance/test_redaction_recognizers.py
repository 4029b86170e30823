"""One recognizer interface: a Presidio recognizer, a spaCy pipeline and Molt's own detectors are
interchangeable (real Presidio, real spaCy; a blank spaCy pipeline with an entity ruler, so no
model is downloaded)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS", "")

presidio_analyzer = pytest.importorskip("presidio_analyzer")
spacy = pytest.importorskip("spacy")

from molt.governance.redaction import Detector, Redactor, detectors, policies  # noqa: E402
from molt.governance.redaction.recognizers import (  # noqa: E402
    PresidioDetector,
    SpacyDetector,
    as_presidio_recognizer,
)


def _policy_with(*extra: str):  # type: ignore[no-untyped-def]
    base = policies.get("default")
    return base.model_copy(update={"entities": base.entities | frozenset(extra)})


def test_a_presidio_pattern_recognizer_runs_as_a_molt_detector() -> None:
    from presidio_analyzer import Pattern, PatternRecognizer

    rec = PatternRecognizer(supported_entity="EMPLOYEE_ID", patterns=[Pattern("emp", r"\bEMP-\d{6}\b", 0.9)])
    det = PresidioDetector(rec)
    assert isinstance(det, Detector) and det.entities == {"EMPLOYEE_ID"}
    redactor = Redactor(_policy_with("EMPLOYEE_ID"), extra_detectors=[det])
    text, spans = redactor.redact("Badge EMP-204518 belongs to ana.lima@example.org")
    assert "EMP-204518" not in text and "ana.lima" not in text
    assert {s.entity_type for s in spans} == {"EMPLOYEE_ID", "EMAIL_ADDRESS"}
    assert [s.detector for s in spans if s.entity_type == "EMPLOYEE_ID"] == [det.name]


def test_a_presidio_predefined_recognizer_maps_url_to_domain_name() -> None:
    from presidio_analyzer.predefined_recognizers import UrlRecognizer

    det = PresidioDetector(UrlRecognizer())
    assert "DOMAIN_NAME" in det.entities
    spans = det.detect("docs at https://shop.example.de/help today")
    assert [s.entity_type for s in spans] == ["DOMAIN_NAME"]


def test_a_spacy_pipeline_runs_as_a_molt_detector() -> None:
    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns(
        [
            {"label": "ORG", "pattern": "Globex Corporation"},
            {"label": "PER", "pattern": [{"LOWER": "zq"}, {"LOWER": "vantrell"}]},
            {"label": "PRODUCT", "pattern": "Widget"},  # not mapped: dropped
        ]
    )
    det = SpacyDetector(nlp)
    text = "zq vantrell from Globex Corporation bought a Widget"
    assert sorted((text[s.start : s.end], s.entity_type) for s in det.detect(text)) == [
        ("Globex Corporation", "ORGANIZATION"),
        ("zq vantrell", "PERSON"),
    ]
    redacted, _ = Redactor(extra_detectors=[det]).redact(text)
    assert "vantrell" not in redacted and "Globex" not in redacted and "Widget" in redacted


def test_a_spacy_pipeline_fills_gaps_and_does_not_replace_what_molt_found() -> None:
    """A pipeline's span with wrong bounds or type over a name Molt found loses the overlap (its
    default score is below the lexicon's); one where Molt found nothing is added."""
    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns(
        [
            {"label": "ORG", "pattern": [{"LOWER": "maria"}, {"LOWER": "gonzalez"}, {"LOWER": "paid"}]},
            {"label": "ORG", "pattern": [{"LOWER": "qzxvtron"}]},
        ]
    )
    text = "Maria Gonzalez paid qzxvtron in full."
    alone = {(text[s.start : s.end], s.entity_type) for s in Redactor().detect(text)}
    assert ("Maria Gonzalez", "PERSON") in alone and not any("qzxv" in v for v, _ in alone)
    with_nlp = Redactor(extra_detectors=[SpacyDetector(nlp)])
    found = {(text[s.start : s.end], s.entity_type) for s in with_nlp.detect(text)}
    assert ("Maria Gonzalez", "PERSON") in found
    assert ("qzxvtron", "ORGANIZATION") in found
    assert not any(t == "ORGANIZATION" and "Maria" in v for v, t in found)


def test_molt_detectors_run_inside_a_presidio_analyzer_engine() -> None:
    from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
    from presidio_analyzer.nlp_engine import SpacyNlpEngine

    class Blank(SpacyNlpEngine):
        def load(self) -> None:
            self.nlp = {"en": spacy.blank("en")}

    engine = Blank(models=[{"lang_code": "en", "model_name": "blank"}])
    engine.load()
    registry = RecognizerRegistry(supported_languages=["en"])
    registry.add_recognizer(as_presidio_recognizer(detectors.get("entities")))
    registry.add_recognizer(as_presidio_recognizer(detectors.get("credit_card")()))
    analyzer = AnalyzerEngine(registry=registry, nlp_engine=engine, supported_languages=["en"])
    text = "Maria Gonzalez paid with 3530 1113 3330 0000 in Barcelona."
    found = {(text[r.start : r.end], r.entity_type) for r in analyzer.analyze(text, language="en")}
    assert ("Maria Gonzalez", "PERSON") in found
    assert ("3530 1113 3330 0000", "CREDIT_CARD") in found
    assert ("Barcelona", "LOCATION") in found


def test_a_recognizer_without_supported_entities_is_refused() -> None:
    class Nothing:
        supported_entities = ()

        def analyze(self, text, entities, nlp_artifacts):  # type: ignore[no-untyped-def]
            return []

    with pytest.raises(ValueError, match="supported_entities"):
        PresidioDetector(Nothing())
