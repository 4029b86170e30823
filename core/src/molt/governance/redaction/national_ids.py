"""National identity and tax numbers, each by its country's format and check digits.

=========================  ===================================  ==========================================
number                     format                               check
=========================  ===================================  ==========================================
Spain DNI / NIE            ``12345678Z``, ``X1234567L``         letter = table[number mod 23]
Netherlands BSN            9 digits                             "11-proof" (weights 9..2, −1)
Poland PESEL               11 digits                            weights 1,3,7,9,…; mod 10
Brazil CPF                 ``123.456.789-09`` or 11 digits      two mod-11 check digits
UK NHS number              ``943 476 5919`` or 10 digits        weights 10..2, mod 11
India Aadhaar              ``2345 6789 0124`` or 12 digits      Verhoeff; first digit 2–9
=========================  ===================================  ==========================================

A checksum passes for about one random number in ten (one in 23 for the DNI letter), so a bare
digit run is taken only after a cue that names the number ("BSN", "PESEL", "CPF", "NHS",
"Aadhaar", "DNI"/"NIE"/"NIF") within the 40 characters before it; the letter-suffixed DNI/NIE and
the punctuated CPF are distinctive enough alone. Each cue names its own number, so an 11-digit
PESEL that happens to pass the CPF check is not taken as a CPF. Registered as detector ``national_id``, entity
``NATIONAL_ID``.

>>> [s.entity_type for s in NationalIdDetector().detect("BSN 111222333, DNI 12345678Z")]
['NATIONAL_ID', 'NATIONAL_ID']
"""

from __future__ import annotations

import re
from collections.abc import Callable

from molt.governance.redaction.base import DIGIT, Span, detectors
from molt.governance.redaction.patterns import clusters_with, lowered, matches_near_digits

__all__ = [
    "NationalIdDetector",
    "aadhaar_valid",
    "bsn_valid",
    "cpf_valid",
    "dni_valid",
    "nhs_valid",
    "pesel_valid",
]

_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


def _digits(s: str) -> str:
    return "".join(c for c in s if c.isdigit())


def dni_valid(value: str) -> bool:
    """Spanish DNI (8 digits + letter) or NIE (X/Y/Z + 7 digits + letter)."""
    v = value.replace("-", "").replace(" ", "").upper()
    if len(v) != 9 or not v[-1].isalpha():
        return False
    body = v[:-1]
    if body[0] in "XYZ":
        body = str("XYZ".index(body[0])) + body[1:]
    return body.isdigit() and _DNI_LETTERS[int(body) % 23] == v[-1]


def bsn_valid(value: str) -> bool:
    """Dutch BSN: 9 digits, sum of digit × (9..2) minus the last digit divisible by 11."""
    d = _digits(value)
    if len(d) != 9 or d == "000000000":
        return False
    total = sum(int(c) * w for c, w in zip(d[:8], range(9, 1, -1), strict=True)) - int(d[8])
    return total % 11 == 0


def pesel_valid(value: str) -> bool:
    """Polish PESEL: 11 digits, weights 1,3,7,9 repeated, check = (10 − sum mod 10) mod 10."""
    d = _digits(value)
    if len(d) != 11 or len(set(d)) == 1:
        return False
    total = sum(int(c) * w for c, w in zip(d[:10], (1, 3, 7, 9, 1, 3, 7, 9, 1, 3), strict=True))
    return (10 - total % 10) % 10 == int(d[10])


def cpf_valid(value: str) -> bool:
    """Brazilian CPF: 11 digits, two mod-11 check digits, not all one digit."""
    d = [int(c) for c in _digits(value)]
    if len(d) != 11 or len(set(d)) == 1:
        return False
    for n in (9, 10):
        check = sum(x * w for x, w in zip(d[:n], range(n + 1, 1, -1), strict=True)) * 10 % 11 % 10
        if check != d[n]:
            return False
    return True


def nhs_valid(value: str) -> bool:
    """UK NHS number: 10 digits, weights 10..2, check = 11 − sum mod 11 (11 → 0; 10 never issued)."""
    d = _digits(value)
    if len(d) != 10 or len(set(d)) == 1:
        return False
    check = 11 - sum(int(c) * w for c, w in zip(d[:9], range(10, 1, -1), strict=True)) % 11
    check = 0 if check == 11 else check
    return check != 10 and check == int(d[9])


_VERHOEFF_D = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 4, 0, 6, 7, 8, 9, 5], [2, 3, 4, 0, 1, 7, 8, 9, 5, 6],
    [3, 4, 0, 1, 2, 8, 9, 5, 6, 7], [4, 0, 1, 2, 3, 9, 5, 6, 7, 8], [5, 9, 8, 7, 6, 0, 4, 3, 2, 1],
    [6, 5, 9, 8, 7, 1, 0, 4, 3, 2], [7, 6, 5, 9, 8, 2, 1, 0, 4, 3], [8, 7, 6, 5, 9, 3, 2, 1, 0, 4],
    [9, 8, 7, 6, 5, 4, 3, 2, 1, 0],
]  # fmt: skip
_VERHOEFF_P = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 5, 7, 6, 2, 8, 3, 0, 9, 4], [5, 8, 0, 3, 7, 9, 6, 1, 4, 2],
    [8, 9, 1, 6, 0, 4, 3, 5, 2, 7], [9, 4, 5, 3, 1, 2, 6, 8, 7, 0], [4, 2, 8, 6, 5, 7, 3, 9, 0, 1],
    [2, 7, 9, 3, 8, 0, 6, 4, 1, 5], [7, 0, 4, 6, 9, 1, 3, 2, 5, 8],
]  # fmt: skip


def aadhaar_valid(value: str) -> bool:
    """Indian Aadhaar: 12 digits, first 2–9, Verhoeff check digit."""
    d = _digits(value)
    if len(d) != 12 or d[0] in "01":
        return False
    c = 0
    for i, ch in enumerate(reversed(d)):
        c = _VERHOEFF_D[c][_VERHOEFF_P[i % 8][int(ch)]]
    return c == 0


# (pattern, validator, cue) per number: a number that needs one is taken only when its own name
# (or a generic "national id", "identity number") is in the 40 characters before it. Patterns are
# anchored on digits, so the scan stays in C.
_GENERIC = r"national\s+id|id\s+number|identity\s+number|personal\s+number"


def _cue(words: str) -> re.Pattern[str]:
    return re.compile(rf"\b(?:{words}|{_GENERIC})\b", re.IGNORECASE)


_RULES: list[tuple[re.Pattern[str], Callable[[str], bool], re.Pattern[str] | None]] = [
    (re.compile(r"(?<![\w-])(?:\d{8}|[XYZ]\d{7})-?[A-Z](?![\w-])"), dni_valid, None),
    (re.compile(r"(?<![\w.-])\d{3}\.\d{3}\.\d{3}-\d{2}(?![\w-])"), cpf_valid, None),
    (re.compile(r"(?<![\w.-])\d{9}(?![\w-])"), bsn_valid, _cue(r"bsn|burgerservicenummer|sofi-?nummer")),
    (re.compile(r"(?<![\w.-])\d{11}(?![\w-])"), pesel_valid, _cue("pesel")),
    (re.compile(r"(?<![\w.-])\d{11}(?![\w-])"), cpf_valid, _cue("cpf")),
    (re.compile(r"(?<![\w.-])\d{3}[ -]?\d{3}[ -]?\d{4}(?![\w-])"), nhs_valid, _cue("nhs")),
    (re.compile(r"(?<![\w.-])[2-9]\d{3}[ -]?\d{4}[ -]?\d{4}(?![\w-])"), aadhaar_valid, _cue(r"aadhaa?r|uidai")),
]
# a cheap screen of the lowered text before any cued rule runs
_CUE_SCREEN = ("bsn", "burgerservice", "sofi", "pesel", "cpf", "nhs", "aadha", "uidai", "national", "identity",
               "id number", "personal number")  # fmt: skip


class NationalIdDetector:
    """National identity and tax numbers by format and check digits (see the module table)."""

    name = "national_id"
    entities = frozenset({"NATIONAL_ID"})
    requires = DIGIT

    def detect(self, text: str) -> list[Span]:
        """National id spans; bare digit runs only after a cue naming the number."""
        # every number here has 7 digits or more in one run: texts without such a run (most JSON
        # leaves, most prose) cost the shared digit scan the other detectors already made
        if not clusters_with(text, 7):
            return []
        low = lowered(text)
        cued = any(w in low for w in _CUE_SCREEN)
        out: list[Span] = []
        taken: list[tuple[int, int]] = []
        for rx, valid, cue in _RULES:
            if cue is not None and not cued:
                continue
            # each number is a run of 7+ digits (with its dots, dashes or spaces: one cluster) and at
            # most a letter before or a dash and a letter after it: the scan stays near such runs
            for m in matches_near_digits(text, rx, 7, before=1):
                a, b = m.span()
                if any(x < b and a < y for x, y in taken) or not valid(m.group()):
                    continue
                if cue is not None and cue.search(text, max(0, a - 40), a) is None:
                    continue
                taken.append((a, b))
                out.append(Span(a, b, "NATIONAL_ID", 0.9, self.name))
        return out


detectors.register("national_id", NationalIdDetector)
