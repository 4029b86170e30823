"""National ids are found by their country's format and check digits: property tests that compute
valid numbers from each published check-digit rule (written here independently of the detector),
and the same numbers with a wrong check digit, which must not be found."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from molt.governance.redaction import Redactor
from molt.governance.redaction.national_ids import NationalIdDetector

DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


def _dni(n: int, ok: bool) -> str:
    letter = DNI_LETTERS[n % 23] if ok else DNI_LETTERS[(n + 1) % 23]
    return f"{n:08d}{letter}"


def _bsn(body: str, ok: bool) -> str | None:
    total = sum(int(c) * w for c, w in zip(body, range(9, 1, -1), strict=True))
    last = total % 11
    if last > 9:
        return None  # no check digit makes this body valid
    return body + str(last if ok else (last + 1) % 10)


def _pesel(body: str, ok: bool) -> str:
    total = sum(int(c) * w for c, w in zip(body, (1, 3, 7, 9, 1, 3, 7, 9, 1, 3), strict=True))
    check = (10 - total % 10) % 10
    return body + str(check if ok else (check + 1) % 10)


def _cpf(body: str, ok: bool) -> str:
    d = [int(c) for c in body]
    for n in (9, 10):
        d.append(sum(x * w for x, w in zip(d, range(n + 1, 1, -1), strict=False)) * 10 % 11 % 10)
    if not ok:
        d[10] = (d[10] + 1) % 10
    s = "".join(map(str, d))
    return f"{s[:3]}.{s[3:6]}.{s[6:9]}-{s[9:]}"


def _nhs(body: str, ok: bool) -> str | None:
    check = 11 - sum(int(c) * w for c, w in zip(body, range(10, 1, -1), strict=True)) % 11
    check = 0 if check == 11 else check
    if check == 10:
        return None
    s = body + str(check if ok else (check + 1) % 10)
    return f"{s[:3]} {s[3:6]} {s[6:]}"


DIGITS = st.text("0123456789", min_size=1, max_size=1)


def _body(n: int) -> st.SearchStrategy[str]:
    return st.lists(DIGITS, min_size=n, max_size=n).map("".join).filter(lambda s: len(set(s)) > 1)


@st.composite
def national_ids(draw: st.DrawFn, ok: bool = True) -> tuple[str, str]:
    kind = draw(st.sampled_from(["DNI", "BSN", "PESEL", "CPF", "NHS"]))
    value: str | None
    if kind == "DNI":
        value = _dni(draw(st.integers(10_000_000, 99_999_999)), ok)
    elif kind == "BSN":
        value = _bsn(draw(_body(8).filter(lambda s: s[0] != "0")), ok)
    elif kind == "PESEL":
        value = _pesel(draw(_body(10)), ok)
    elif kind == "CPF":
        value = _cpf(draw(_body(9)), ok)
    else:
        value = _nhs(draw(_body(9)), ok)
    if value is None:
        value = _dni(12_345_678, ok)
        kind = "DNI"
    return kind, value


_detector = NationalIdDetector()


@settings(max_examples=300, deadline=None)
@given(national_ids(), st.sampled_from(["My {k} is {v}.", "{k}: {v}", '{{"{k}": "{v}"}}']))
def test_valid_numbers_are_found_after_their_name(item: tuple[str, str], sentence: str) -> None:
    kind, value = item
    text = sentence.format(k=kind, v=value)
    start = text.index(value)
    assert (start, start + len(value)) in [(s.start, s.end) for s in _detector.detect(text)], text


@settings(max_examples=300, deadline=None)
@given(national_ids(ok=False), st.sampled_from(["My {k} is {v}.", "{k}: {v}"]))
def test_a_wrong_check_digit_is_not_a_national_id(item: tuple[str, str], sentence: str) -> None:
    kind, value = item
    assert _detector.detect(sentence.format(k=kind, v=value)) == []


def test_bare_digit_runs_need_a_cue_and_the_default_policy_redacts_national_ids() -> None:
    assert _detector.detect("order 111222333 shipped") == []  # BSN-valid, but nothing names it
    assert _detector.detect("Aadhaar 2341 2341 2346") != []  # Verhoeff-valid, named
    text, spans = Redactor(cache_size=0).redact("BSN 111222333 en DNI 12345678Z")
    assert "111222333" not in text and "12345678Z" not in text
    assert [s.entity_type for s in spans] == ["NATIONAL_ID", "NATIONAL_ID"]
