"""Phone numbers written as bare digits, judged by the countries' numbering plans (``phonenumbers``'
metadata): values generated from the plans' own example numbers, not from a labelled set."""

from __future__ import annotations

import pytest

from molt.governance.redaction.patterns import PhoneDetector, dialable

pn = pytest.importorskip("phonenumbers")
T = pn.PhoneNumberType


def _examples() -> list[tuple[str, str]]:
    """(region, national number as bare digits, trunk prefix included) of every region's example
    fixed-line and mobile numbers."""
    out = []
    for region in sorted(pn.SUPPORTED_REGIONS):
        for kind in (T.FIXED_LINE, T.MOBILE):
            number = pn.example_number_for_type(region, kind)
            if number is not None:
                out.append((region, pn.normalize_digits_only(pn.format_number(number, pn.PhoneNumberFormat.NATIONAL))))
    return out


EXAMPLES = _examples()


def _found(text: str, value: str) -> bool:
    i = text.index(value)
    return any(s.start <= i and s.end >= i + len(value) for s in PhoneDetector().detect(text))


def test_short_bare_numbers_after_a_phone_word() -> None:
    # 7-9 bare digits ("016549996", an Italian landline) were never read as a number
    cases = [(r, d) for r, d in EXAMPLES if 7 <= len(d) <= 9]
    assert len({r for r, _ in cases}) > 100
    missed = [(r, d) for r, d in cases if not _found(f"Call me on {d} please.", d)]
    assert missed == []


def test_bare_numbers_with_a_trunk_prefix_need_no_cue() -> None:
    cases = [(r, d) for r, d in EXAMPLES if d[0] == "0" and 10 <= len(d) <= 12]
    assert len({r for r, _ in cases}) > 30
    missed = [(r, d) for r, d in cases if not _found(f"Reach me at {d} tomorrow.", d)]
    assert missed == []


def test_international_prefix_and_long_groups() -> None:
    for region in ("AT", "DE", "IT", "GB", "FR", "JP"):
        number = pn.example_number_for_type(region, T.FIXED_LINE)
        e164 = pn.format_number(number, pn.PhoneNumberFormat.E164)
        bare = "00" + e164[1:]
        assert _found(f"Reach me at {bare} tomorrow.", bare), region
        intl = pn.format_number(number, pn.PhoneNumberFormat.INTERNATIONAL)  # "+43 1 234567890": a 9-digit group
        assert _found(f"Reach me at {intl} tomorrow.", intl), region


def test_runs_no_plan_allows_are_not_phone_numbers() -> None:
    for n in range(7, 13):
        zeros = "0" * n
        assert not dialable(zeros)
        if n < 10:  # (10+ bare digits after a cue are read as a number by their shape alone)
            assert PhoneDetector().detect(f"Call me on {zeros} please.") == []
        assert PhoneDetector().detect(f"Reach me at {zeros} tomorrow.") == []
    assert not dialable("00099912345")  # no country code 099
    # without a cue, bare runs with no trunk or international prefix stay ids, counts and codes
    for _, d in EXAMPLES[:200]:
        if d[0] != "0" and len(d) >= 10:
            assert PhoneDetector().detect(f"Order {d} shipped.") == [], d
    # a short bare run needs a word for a telephone, not just "number"
    assert PhoneDetector().detect("Order number 016549996 shipped.") == []
    assert PhoneDetector().detect("Il numero d'ordine 016549996 è partito.") == []
