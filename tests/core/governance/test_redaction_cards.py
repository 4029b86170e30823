"""Payment cards are found because they are cards: property tests generated from the networks'
published numbering (IIN ranges and lengths, Luhn), not from any labelled data set.

The table below is written from the networks' own published ranges, independently of the
detector's table, so a range or a length the detector misses fails here.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from molt.governance.redaction import Redactor
from molt.governance.redaction.checksums import luhn_valid
from molt.governance.redaction.patterns import CreditCardDetector, card_network

# network: (IIN ranges as (low, high) over the first len(str(low)) digits, lengths issued)
PUBLISHED = {
    "Visa": ([(4, 4)], [13, 16, 19]),
    "Visa Electron": ([(4026, 4026), (417500, 417500), (4508, 4508), (4844, 4844), (4913, 4913)], [16]),
    "Mastercard 51-55": ([(51, 55)], [16]),
    "Mastercard 2-series": ([(2221, 2720)], [16]),
    "American Express": ([(34, 34), (37, 37)], [15]),
    "Discover": ([(6011, 6011), (644, 649), (65, 65), (622126, 622925)], [16, 17, 18, 19]),
    "JCB": ([(3528, 3589)], [16, 17, 18, 19]),
    "JCB 15-digit": ([(2131, 2131), (1800, 1800)], [15]),
    "Diners Club": ([(36, 36)], [14, 15, 16, 17, 18, 19]),
    "Diners Club Carte Blanche": ([(300, 305)], [14]),
    "Diners Club (Discover network)": ([(3095, 3095), (38, 39)], [16, 17, 18, 19]),
    "Maestro": ([(50, 50), (56, 58), (6304, 6304), (6759, 6759), (639, 639), (67, 67)], list(range(12, 20))),
    "UnionPay": ([(62, 62)], [16, 17, 18, 19]),
    "Mir": ([(2200, 2204)], [16, 17, 18, 19]),
    "RuPay": ([(60, 60), (65, 65), (81, 82), (508, 508), (353, 353), (356, 356)], [16]),
    "Troy": ([(9792, 9792)], [16]),
    "Verve": ([(506099, 506198), (507865, 507964), (650002, 650027)], [16, 18, 19]),
    "Dankort": ([(5019, 5019)], [16]),
}
SEPARATORS = ["", " ", "-", "."]


def _check_digit(body: str) -> str:
    """The Luhn check digit that makes ``body + digit`` valid."""
    for d in "0123456789":
        if luhn_valid(body + d):
            return d
    raise AssertionError("no check digit")  # pragma: no cover - one of ten always fits


@st.composite
def card_numbers(draw: st.DrawFn, *, valid: bool = True) -> tuple[str, str]:
    """(network, digits) of a number in a published range and length; Luhn-valid or not."""
    network = draw(st.sampled_from(sorted(PUBLISHED)))
    ranges, lengths = PUBLISHED[network]
    lo, hi = draw(st.sampled_from(ranges))
    prefix = str(draw(st.integers(lo, hi))).zfill(len(str(lo)))
    length = draw(st.sampled_from(lengths))
    body = prefix + "".join(draw(st.lists(st.sampled_from("0123456789"), min_size=length - len(prefix) - 1,
                                          max_size=length - len(prefix) - 1)))  # fmt: skip
    check = _check_digit(body)
    if not valid:
        check = str((int(check) + draw(st.integers(1, 9))) % 10)
    digits = body + check
    if len(set(digits)) == 1:  # a run of one digit is not taken as a card (too often a placeholder)
        digits = body[:-1] + str((int(body[-1]) + 1) % 10) + check
        digits = digits[:-1] + (_check_digit(digits[:-1]) if valid else digits[-1])
    return network, digits


def _grouped(digits: str, sep: str, shape: str) -> str:
    """``digits`` written as people write them: compact, 4-4-4-4(-…), or 4-6-5 / 4-6-4 (Amex,
    Diners; 4-6-rest up to 16 digits, longer numbers are printed in fours)."""
    if not sep:
        return digits
    sizes = [4, 6, len(digits) - 10] if shape == "4-6-rest" and len(digits) <= 16 else []
    if not sizes:
        sizes = [4] * (len(digits) // 4) + ([len(digits) % 4] if len(digits) % 4 else [])
    out, k = [], 0
    for n in sizes:
        out.append(digits[k : k + n])
        k += n
    return sep.join(out)


SENTENCES = [
    "Please charge {} for the order.",
    "card: {}",
    "{}",
    "Meine Karte ist {}, danke.",
    '{{"payment": {{"pan": "{}", "exp": "12/27"}}}}',
    "The number on the back reads {}.\nThanks!",
]
_detector = CreditCardDetector()
_redactor = Redactor(cache_size=0)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(card_numbers(), st.sampled_from(SEPARATORS), st.sampled_from(["4-4-4-4", "4-6-rest"]),
       st.sampled_from(SENTENCES))  # fmt: skip
def test_valid_numbers_of_every_network_are_found(card: tuple[str, str], sep: str, shape: str, sentence: str) -> None:
    network, digits = card
    written = _grouped(digits, sep, shape)
    text = sentence.format(written)
    start = text.index(written)
    spans = [(s.start, s.end) for s in _detector.detect(text)]
    assert (start, start + len(written)) in spans, f"{network} {written!r} not found in {text!r}: {spans}"
    # and the default redactor replaces it whole (no other detector takes part of it)
    found = [(s.start, s.end, s.entity_type) for s in _redactor.detect(text)]
    assert (start, start + len(written), "CREDIT_CARD") in found, found
    assert card_network(digits) is not None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(card_numbers(valid=False), st.sampled_from(SEPARATORS), st.sampled_from(["4-4-4-4", "4-6-rest"]),
       st.sampled_from(SENTENCES))  # fmt: skip
def test_luhn_invalid_runs_of_the_same_shapes_are_not_cards(
    card: tuple[str, str], sep: str, shape: str, sentence: str
) -> None:
    _network, digits = card
    assert not luhn_valid(digits)
    text = sentence.format(_grouped(digits, sep, shape))
    assert _detector.detect(text) == []
    assert not [s for s in _redactor.detect(text) if s.entity_type == "CREDIT_CARD"]


def test_known_test_numbers_of_each_network() -> None:
    """The networks' published test numbers (processor sandboxes), in the separators people use."""
    numbers = [
        "4111 1111 1111 1111", "4012888888881881", "4222222222222",  # Visa 16, 16, 13
        "5555-5555-5555-4444", "2223 0031 2200 3222",  # Mastercard, 2-series
        "3782 822463 10005", "371449635398431",  # Amex 4-6-5
        "6011 1111 1111 1117", "6445644564456445",  # Discover
        "3530 1113 3330 0000", "3566-0020-2036-0505", "213112345678904",  # JCB, JCB 15-digit 2131
        "3056 930902 5904", "3852 0000 0232 37",  # Diners 14
        "6759 6498 2643 8453", "5018.0000.0009",  # Maestro 16 and 12
        "6200 0000 0000 0005", "2200 0000 0000 0004",  # UnionPay, Mir
    ]  # fmt: skip
    for n in numbers:
        text = f"pay with {n} today"
        got = [text[s.start : s.end] for s in _detector.detect(text)]
        assert got == [n], (n, got)


def test_two_numbers_in_one_grouped_run_are_cut_at_group_boundaries() -> None:
    text = "cards 4111 1111 1111 1111 5555 5555 5555 4444 on file"
    got = [text[s.start : s.end] for s in _detector.detect(text)]
    assert got == ["4111 1111 1111 1111", "5555 5555 5555 4444"]
