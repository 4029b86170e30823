"""Checksums and validity rules for structured identifiers.

>>> luhn_valid("4111 1111 1111 1111")
True
>>> iban_valid("GB82 WEST 1234 5698 7654 32")
True
>>> ssn_valid("078-05-1120"), ssn_valid("000-12-3456")
(True, False)
"""

from __future__ import annotations

__all__ = ["IBAN_LENGTHS", "iban_valid", "luhn_valid", "ssn_valid"]

#: IBAN length by country code (ISO 13616 registry; the countries that issue IBANs).
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HN": 28, "HR": 21, "HU": 28,
    "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28,
    "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22,
    "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23,
    "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24,
    "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip


def _digits(s: str) -> str:
    return "".join(c for c in s if c.isdigit())


def luhn_valid(number: str) -> bool:
    """Luhn (mod 10) check of the digits in ``number`` (separators ignored), 12–19 digits."""
    digits = _digits(number)
    if not 12 <= len(digits) <= 19:
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def iban_valid(iban: str) -> bool:
    """ISO 13616 check: known country, that country's length, and mod-97 of the rearranged digits == 1."""
    s = "".join(iban.split()).replace("-", "").upper()
    if len(s) < 15 or not s.isalnum() or not s[:2].isalpha() or not s[2:4].isdigit():
        return False
    if IBAN_LENGTHS.get(s[:2]) != len(s):
        return False
    rearranged = s[4:] + s[:4]
    remainder = 0
    for ch in rearranged:  # letters become 10..35; fold into the remainder digit by digit
        value = ord(ch) - 55 if ch.isalpha() else ord(ch) - 48
        remainder = (remainder * (100 if value > 9 else 10) + value) % 97
    return remainder == 1


def ssn_valid(ssn: str) -> bool:
    """US SSN rules: 9 digits, area not 000/666/9xx, group not 00, serial not 0000, no all-same digits."""
    d = _digits(ssn)
    if len(d) != 9 or len(set(d)) == 1:
        return False
    area, group, serial = d[:3], d[3:5], d[5:]
    if area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000":
        return False
    return d != "123456789"
