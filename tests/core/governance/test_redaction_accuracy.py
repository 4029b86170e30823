"""Accuracy floors on the labelled PII set (../shared/data/pii), held-out templates included.

The floors are the figures this build reaches, so a regression fails; the issue's targets that are
not reached yet are pinned as strict xfails, so reaching them is noticed too. Run
``python bench/bench_redaction.py`` for the full table next to Presidio's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from molt.governance.redaction import STRUCTURED_ENTITIES, Redactor
from molt.governance.redaction.evaluate import Scores, evaluate, load_labelled, split_by_template

DATA = Path(__file__).resolve().parents[4] / "shared" / "data" / "pii" / "presidio_generated_large.json"
IN_SCOPE = [
    "PERSON", "ADDRESS", "LOCATION", "ORGANIZATION", "CREDIT_CARD", "PHONE_NUMBER", "EMAIL_ADDRESS",
    "US_SSN", "IBAN_CODE", "IP_ADDRESS", "DOMAIN_NAME", "US_DRIVER_LICENSE",
]  # fmt: skip

pytestmark = pytest.mark.skipif(not DATA.is_file(), reason=f"labelled PII data not found at {DATA}")


@pytest.fixture(scope="module")
def scores() -> dict[str, Scores]:
    """The labels' scope ("all", "held"): countries are LOCATION there, so the policy measured is the
    default one with ``keep_country_level_places=False``. The default policy's scope ("policy_all",
    "policy_held"): it keeps countries, so country-level LOCATION spans are scored by neither side."""
    records = load_labelled(str(DATA))
    _dev, held = split_by_template(records)
    default = Redactor()
    labels = Redactor(default.policy.model_copy(update={"keep_country_level_places": False}))
    judge = next(d.country_level for d in default.detectors if hasattr(d, "country_level"))

    def skip(entity_type: str, text: str) -> bool:
        return entity_type == "LOCATION" and judge(text)

    def predict(redactor: Redactor):  # type: ignore[no-untyped-def]
        return lambda text: [(s.start, s.end, s.entity_type) for s in redactor.detect(text)]

    return {
        "all": evaluate(records, predict(labels), types=IN_SCOPE),
        "held": evaluate(held, predict(labels), types=IN_SCOPE),
        "policy_all": evaluate(records, predict(default), types=IN_SCOPE, skip=skip),
        "policy_held": evaluate(held, predict(default), types=IN_SCOPE, skip=skip),
    }


def test_kept_countries_are_what_the_policy_scope_leaves_out(scores: dict[str, Scores]) -> None:
    # the default policy leaves countries in the text; inside its own scope it is measured as well
    held = scores["policy_held"].micro(IN_SCOPE)
    assert held.recall >= 0.875 and held.precision >= 0.85, (held.precision, held.recall)  # P 0.856 R 0.879
    assert scores["policy_held"].by_type["LOCATION"].gold < scores["held"].by_type["LOCATION"].gold


def test_structured_types_recall(scores: dict[str, Scores]) -> None:
    assert scores["all"].micro(STRUCTURED_ENTITIES).recall >= 0.99
    assert scores["held"].micro(STRUCTURED_ENTITIES).recall >= 0.99
    for t in ("EMAIL_ADDRESS", "CREDIT_CARD", "US_SSN", "IBAN_CODE", "IP_ADDRESS", "PHONE_NUMBER"):
        assert scores["all"].by_type[t].recall >= 0.99, t
    assert scores["all"].micro(STRUCTURED_ENTITIES).precision >= 0.99


def test_all_types_issue_target(scores: dict[str, Scores]) -> None:
    # issue 3: all in-scope types together, recall ≥ 0.90 and precision ≥ 0.85 (reached: P 0.913, R 0.909)
    full = scores["all"].micro(IN_SCOPE)
    assert full.recall >= 0.90, full.recall
    assert full.precision >= 0.85, full.precision


def test_all_types_regression_floor(scores: dict[str, Scores]) -> None:
    # the figures this build reaches (held-out P 0.851 R 0.884, all P 0.913 R 0.909), less a hair
    held = scores["held"].micro(IN_SCOPE)
    assert held.recall >= 0.88 and held.precision >= 0.845
    full = scores["all"].micro(IN_SCOPE)
    assert full.recall >= 0.905 and full.precision >= 0.905


def test_per_type_regression_floor_on_held_out(scores: dict[str, Scores]) -> None:
    held = scores["held"].by_type
    floors = {  # (precision, recall) reached on the held-out templates, less a hair
        "PERSON": (0.875, 0.885),  # P 0.879 R 0.890
        "ADDRESS": (0.75, 0.865),  # P 0.759 R 0.871
        "LOCATION": (0.78, 0.93),  # P 0.784 R 0.934
        # P 0.843 R 0.662 (102 of 154) since the structure rules of issue 21, which were chosen on the
        # dev split and the inspected second source only (before them: P 0.844 R 0.669, 103 of 154)
        "ORGANIZATION": (0.84, 0.66),
    }
    for t, (p, r) in floors.items():
        assert held[t].precision >= p and held[t].recall >= r, (t, held[t].precision, held[t].recall)


@pytest.mark.xfail(
    strict=True,
    reason="issue 21 target (recall ≥ 0.90, precision ≥ 0.85) not reached on held-out templates: "
    "P 0.851, R 0.884 (all sentences: P 0.913, R 0.909); recall is short",
)
def test_all_types_issue_target_on_held_out(scores: dict[str, Scores]) -> None:
    held = scores["held"].micro(IN_SCOPE)
    assert held.recall >= 0.90 and held.precision >= 0.85
