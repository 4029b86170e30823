"""Pattern and checksum detectors for structured identifiers.

Each detector is a compiled regular expression plus a validator: Luhn for card numbers, ISO 13616
mod-97 for IBANs, SSA rules for SSNs, :mod:`ipaddress` for IPs, a digit-count and shape check for
phone numbers. Validators are what keep precision high on the long digit runs agent traffic is
full of (order ids, timestamps, hashes).

Registered detector names: ``email``, ``phone``, ``credit_card``, ``us_ssn``, ``iban``, ``ip``,
``url``, ``us_driver_license``, ``date_time``.

>>> [s.entity_type for s in CreditCardDetector().detect("card 4111 1111 1111 1111, not 4111 1111 1111 1112")]
['CREDIT_CARD']
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

from molt.governance.redaction.base import Span, detectors
from molt.governance.redaction.checksums import iban_valid, luhn_valid, ssn_valid

__all__ = [
    "CreditCardDetector",
    "DateTimeDetector",
    "EmailDetector",
    "IbanDetector",
    "IpDetector",
    "PhoneDetector",
    "RegexDetector",
    "SsnDetector",
    "UrlDetector",
    "UsDriverLicenseDetector",
]


class RegexDetector:
    """A detector from one regex: each match (or its ``group``) that ``validate`` accepts is a span.

    ``context``, when given, is a regex that must match within ``context_window`` characters before
    the candidate; it is how weak formats (nine bare digits) are only taken when a cue names them.
    """

    def __init__(
        self,
        name: str,
        entity_type: str,
        pattern: str | re.Pattern[str],
        *,
        score: float = 0.9,
        group: int = 0,
        validate: Callable[[str], bool] | None = None,
        context: str | None = None,
        context_window: int = 48,
        flags: int = 0,
    ):
        self.name = name
        self.entity_type = entity_type
        self.entities = frozenset({entity_type})
        self.rx = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, flags)
        self.score = score
        self.group = group
        self.validate = validate
        self.context = re.compile(context, re.IGNORECASE) if context else None
        self.context_window = context_window

    def detect(self, text: str) -> list[Span]:
        """Validated matches of the pattern in ``text``."""
        out: list[Span] = []
        for m in self.rx.finditer(text):
            start, end = m.span(self.group)
            if start < 0 or start == end:
                continue
            value = text[start:end]
            if self.validate is not None and not self.validate(value):
                continue
            if self.context is not None and not self.context.search(
                text, max(0, start - self.context_window), start
            ):
                continue
            out.append(Span(start, end, self.entity_type, self.score, self.name))
        return out


# --------------------------------------------------------------------------- email, url, ip

_EMAIL = re.compile(r"(?<![\w.%+-])[\w.%+'-]+@(?:[^\W_](?:[\w-]*[^\W_])?\.)+[^\W\d_]{2,24}(?![\w-])")


class EmailDetector(RegexDetector):
    """E-mail addresses (RFC 5322 local parts as they appear in prose, internationalised domains)."""

    def __init__(self) -> None:
        super().__init__("email", "EMAIL_ADDRESS", _EMAIL, score=1.0)


#: Top-level domains a bare domain (no scheme, no ``www.``) may end with. Country codes that are
#: also common file extensions (``.py``, ``.md``, ``.sh``, ``.rs``, ``.pl``, …) are left out so
#: ``models.py`` is not a domain; with a scheme or ``www.`` any TLD is accepted.
_BARE_TLDS = (
    "com|org|net|edu|gov|mil|int|info|biz|io|ai|app|dev|co|me|tv|cloud|online|site|shop|tech|store|"
    "xyz|blog|news|agency|email|ac|ad|ae|af|ag|al|am|ao|ar|at|au|aw|az|ba|bb|bd|be|bf|bg|bh|bj|bo|br|"
    "bs|bt|bw|by|bz|ca|cd|cf|cg|ch|ci|cl|cm|cn|cr|cu|cv|cy|cz|de|dk|do|dz|ec|ee|eg|es|et|eu|fi|fj|fr|"
    "ga|gd|ge|gh|gi|gl|gm|gr|gt|gy|hk|hn|hr|ht|hu|id|ie|il|im|in|iq|ir|is|it|je|jm|jo|jp|ke|kg|kh|kr|"
    "kw|kz|la|lb|li|lk|lt|lu|lv|ly|ma|mc|mg|mk|ml|mn|mo|mt|mu|mv|mw|mx|my|mz|na|ne|ng|ni|nl|no|np|nz|"
    "om|pa|pe|pg|ph|pk|pr|pt|qa|ro|rw|sa|sc|sd|se|sg|si|sk|sn|sr|sv|sy|tg|th|tj|tn|tr|tt|tw|tz|"
    "ua|ug|uk|us|uy|uz|va|vc|ve|vn|za|zm|zw"
)
_URL = re.compile(
    r"(?:(?:https?|ftp)://|(?<![\w@.-])www\.)[^\s<>\"'`{}|\\^\[\]]+"
    rf"|(?<![\w@./-])(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+(?:{_BARE_TLDS})(?![\w@-]|\.\w)(?:/[^\s<>\"'`]*)?",
    re.IGNORECASE,
)
_TRAILING = ".,;:!?)]}'\""


class UrlDetector:
    """Web addresses with a scheme or ``www.`` (any TLD), and bare domains with a common TLD."""

    name = "url"
    entities = frozenset({"DOMAIN_NAME"})

    def detect(self, text: str) -> list[Span]:
        """URL and domain spans, trailing sentence punctuation excluded."""
        out = []
        for m in _URL.finditer(text):
            start, end = m.span()
            while end > start and text[end - 1] in _TRAILING:
                if text[end - 1] == ")" and "(" in text[start:end]:
                    break
                end -= 1
            value = text[start:end]
            if "." not in value or end - start < 4:
                continue
            scheme = "://" in value or value[:4].lower() == "www."
            out.append(Span(start, end, "DOMAIN_NAME", 0.95 if scheme else 0.6, self.name))
        return out


_IPV4 = (
    r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\w]|\.\d)"
)
_IPV6 = r"(?<![\w:.])(?:[0-9a-f]{0,4}:){2,7}(?:[0-9a-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?(?:%\w+)?(?![\w:])"


def _ipv6_valid(value: str) -> bool:
    try:
        ipaddress.IPv6Address(value.split("%", 1)[0])
    except ValueError:
        return False
    return value.count(":") >= 2 and any(c.isdigit() or c.isalpha() for c in value)


class IpDetector:
    """IPv4 (dotted quad, each octet 0–255) and IPv6 (validated by :mod:`ipaddress`)."""

    name = "ip"
    entities = frozenset({"IP_ADDRESS"})

    def __init__(self) -> None:
        self._v4 = RegexDetector("ip", "IP_ADDRESS", _IPV4, score=0.95)
        self._v6 = RegexDetector("ip", "IP_ADDRESS", _IPV6, score=0.95, validate=_ipv6_valid, flags=re.I)

    def detect(self, text: str) -> list[Span]:
        """IPv4 and IPv6 addresses."""
        if "." not in text and ":" not in text:
            return []
        return self._v4.detect(text) + (self._v6.detect(text) if ":" in text else [])


# --------------------------------------------------------------------------- numbers

_CARD = re.compile(r"(?<![\w-])(?:\d[ -]?){11,18}\d(?![\w-])")
_CARD_PREFIX = re.compile(r"(?:3[47]|3[0689]|4|5[1-5]|2[2-7]|6(?:011|5|4[4-9]|2))")


def _card_valid(value: str) -> bool:
    digits = "".join(c for c in value if c.isdigit())
    return bool(_CARD_PREFIX.match(digits)) and luhn_valid(digits) and len(set(digits)) > 1


class CreditCardDetector(RegexDetector):
    """Payment card numbers: 12–19 digits, a known issuer prefix, and a valid Luhn checksum."""

    def __init__(self) -> None:
        super().__init__("credit_card", "CREDIT_CARD", _CARD, score=1.0, validate=_card_valid)


class SsnDetector:
    """US Social Security numbers: ``123-45-6789`` shapes valid under SSA rules; nine bare digits
    only after a cue such as "SSN" or "social security"."""

    name = "us_ssn"
    entities = frozenset({"US_SSN"})

    def __init__(self) -> None:
        self._dashed = RegexDetector(
            "us_ssn", "US_SSN", r"(?<![\w-])\d{3}([- ])\d{2}\1\d{4}(?![\w-])", score=0.9, validate=ssn_valid
        )
        self._bare = RegexDetector(
            "us_ssn", "US_SSN", r"(?<![\w-])\d{9}(?![\w-])", score=0.8, validate=ssn_valid,
            context=r"\b(?:ssn|ss#|social\s+security)", context_window=40,
        )  # fmt: skip

    def detect(self, text: str) -> list[Span]:
        """SSN spans."""
        return self._dashed.detect(text) + self._bare.detect(text)


def _iban_candidates(text: str) -> list[Span]:
    out = []
    for m in _IBAN.finditer(text):
        value = m.group(0)
        # A grouped IBAN may swallow a following short word; try shorter cuts at group boundaries.
        cut = len(value)
        while cut >= 15:
            if iban_valid(value[:cut]):
                out.append(Span(m.start(), m.start() + cut, "IBAN_CODE", 1.0, "iban"))
                break
            space = value.rfind(" ", 0, cut)
            if space < 0:
                break
            cut = space
    return out


_IBAN = re.compile(
    r"(?<![\w])[a-z]{2}\d{2}(?:[a-z0-9]{11,30}|(?: ?[a-z0-9]{4}){2,7}(?: ?[a-z0-9]{1,3})?)(?!\w)", re.I
)


class IbanDetector:
    """IBANs, compact or in groups of four, accepted only with the country's length and mod-97 == 1."""

    name = "iban"
    entities = frozenset({"IBAN_CODE"})

    def detect(self, text: str) -> list[Span]:
        """IBAN spans."""
        return _iban_candidates(text)


_PHONE = re.compile(
    r"(?<![\w+/.:-])(?:\+\d{1,3}[ .-]?|00\d{0,2}[ .-]?)?(?:\(\d{1,5}\)[ .-]?)?\d{1,12}(?:[ .-]\d{1,8}){0,5}"
    r"(?:[ ]?(?:x|ext\.?|#)[ ]?\d{1,6})?(?![\w/:]|[.-]\d)",
    re.IGNORECASE,
)
_DATEISH = re.compile(r"\d{4}-\d{1,2}-\d{1,2}$|\d{1,2}[./-]\d{1,2}[./-]\d{2,4}$|\d{3}-\d{2}-\d{4}$")
_PHONE_CUE = re.compile(
    r"(?:\b|_)(?:phone|tel|telephone|mobile|cell|fax|call|number|contact|whatsapp|sms|office|home|work)(?:\b|_)",
    re.I,
)


def _phone_digits(value: str) -> tuple[int, bool]:
    core = re.split(r"[ ]?(?:x|ext\.?|#)", value, maxsplit=1, flags=re.I)[0]
    digits = sum(c.isdigit() for c in core)
    separated = any(c in core for c in " .-(") or core.startswith("+")
    return digits, separated


class PhoneDetector:
    """Phone numbers in international and national formats, extensions included.

    A candidate needs 7–15 digits; a run of bare digits (no separator, no ``+``) needs 10+ digits
    and a cue word ("phone", "call", "fax", …) just before it. Dates, SSN shapes and dotted quads are
    rejected.
    """

    name = "phone"
    entities = frozenset({"PHONE_NUMBER"})

    def detect(self, text: str) -> list[Span]:
        """Phone number spans."""
        out = []
        for m in _PHONE.finditer(text):
            start, end = m.span()
            value = m.group(0).rstrip(" .-")
            end = start + len(value)
            digits, separated = _phone_digits(value)
            cue = (
                _PHONE_CUE.search(text, max(0, start - 40), start) is not None
                or _PHONE_CUE.match(text, end + 1, end + 12) is not None  # "…-Fax", "… mobile"
            )
            if not (7 if not cue else 6) <= digits <= 15 or _DATEISH.match(value):
                continue
            if value.count(".") == 3 and " " not in value and "-" not in value:
                continue  # dotted quad: an IP address or a version number
            if not separated and not (digits >= 10 and cue):
                continue
            groups = re.split(r"[ .-]", value)
            if (
                " " in value
                and not cue
                and value[0] not in "+(0"
                and len(groups) > 2
                and max(map(len, groups)) < 3
            ):
                continue  # "1 2 3 45 6": a list of small numbers, not a phone number
            out.append(Span(start, end, "PHONE_NUMBER", 0.75, self.name))
        return out


class UsDriverLicenseDetector(RegexDetector):
    """US driver licence numbers (letter + digits, or 7–13 digits), only after a licence cue."""

    def __init__(self) -> None:
        super().__init__(
            "us_driver_license", "US_DRIVER_LICENSE",
            r"(?<![\w-])(?:[A-Z]{1,2}\d{5,14}[A-Z]?|\d{7,13}|[A-Z]\d{3}-\d{3}-\d{2}-\d{3}-\d)(?![\w-])",
            score=0.85, flags=re.I,
            context=r"\b(?:driver'?s?|driving)\s+licen[cs]e|\bDL\b|\blicen[cs]e\s+(?:no|number|#)",
            context_window=60,
        )  # fmt: skip


_MONTHS = r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|jun(?:e)?|jul(?:y)?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_DATE = re.compile(
    r"(?<![\w/.-])(?:\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
    r"|\d{1,2}[/.]\d{1,2}[/.](?:\d{4}|\d{2})"
    rf"|\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTHS}\.?,?\s+\d{{4}}|{_MONTHS}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}"
    r"|(?:mon|tues|wednes|thurs|fri|satur|sun)day)(?![\w/-])",
    re.IGNORECASE,
)


class DateTimeDetector(RegexDetector):
    """Dates and timestamps (ISO 8601, numeric, month-name) and weekday names.

    Out of the default policy's scope; a policy adds ``DATE_TIME`` to its entities to use it.
    """

    def __init__(self) -> None:
        super().__init__("date_time", "DATE_TIME", _DATE, score=0.6)


for _name, _factory in (
    ("email", EmailDetector),
    ("phone", PhoneDetector),
    ("credit_card", CreditCardDetector),
    ("us_ssn", SsnDetector),
    ("iban", IbanDetector),
    ("ip", IpDetector),
    ("url", UrlDetector),
    ("us_driver_license", UsDriverLicenseDetector),
    ("date_time", DateTimeDetector),
):
    detectors.register(_name, _factory)
