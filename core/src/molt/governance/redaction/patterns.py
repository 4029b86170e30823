"""Pattern and checksum detectors for structured identifiers.

Each detector is a compiled regular expression plus a validator: Luhn for card numbers, ISO 13616
mod-97 for IBANs, SSA rules for SSNs, :mod:`ipaddress` for IPs, a digit-count and shape check for
phone numbers. Validators are what keep precision high on the long digit runs agent traffic is
full of (order ids, timestamps, hashes).

Registered detector names: ``phone``, ``credit_card``, ``us_ssn``, ``iban``, ``ip``,
``us_driver_license``, ``date_time`` (``email`` and ``url``: :mod:`.internet`).

>>> [s.entity_type for s in CreditCardDetector().detect("card 4111 1111 1111 1111, not 4111 1111 1111 1112")]
['CREDIT_CARD']
"""

from __future__ import annotations

import importlib
import ipaddress
import re
from collections.abc import Callable
from typing import Any

from molt.governance.redaction.base import DIGIT, Span, detectors
from molt.governance.redaction.checksums import iban_valid, luhn_valid, ssn_valid

__all__ = [
    "CARD_NETWORKS",
    "CreditCardDetector",
    "DateTimeDetector",
    "IbanDetector",
    "IpDetector",
    "PhoneDetector",
    "RegexDetector",
    "SsnDetector",
    "UsDriverLicenseDetector",
    "card_network",
    "card_spans",
    "dialable",
    "matches_near_digits",
]


class RegexDetector:
    """A detector from one regex: each match (or its ``group``) that ``validate`` accepts is a span.

    ``context``, when given, is a regex that must match within ``context_window`` characters before
    the candidate; it is how weak formats (nine bare digits) are only taken when a cue names them.
    ``min_digits``, when given, runs the regex only around runs of digits with at least that many
    digits (:func:`digit_clusters`), starting ``before`` characters ahead of them.
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
        min_digits: int | None = None,
        before: int = 0,
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
        self.min_digits = min_digits
        self.before = before

    def detect(self, text: str) -> list[Span]:
        """Validated matches of the pattern in ``text``."""
        out: list[Span] = []
        if self.min_digits is None:
            matches = self.rx.finditer(text)
        else:
            matches = _windows(text, self.rx, clusters_with(text, self.min_digits), self.min_digits, before=self.before)
        for m in matches:
            start, end = m.span(self.group)
            if start < 0 or start == end:
                continue
            value = text[start:end]
            if self.validate is not None and not self.validate(value):
                continue
            if self.context is not None and not self.context.search(text, max(0, start - self.context_window), start):
                continue
            out.append(Span(start, end, self.entity_type, self.score, self.name))
        return out


# --------------------------------------------------------------------------- shared digit scan

#: A run of digits with the separators numbers are written with: the numeric detectors (card,
#: SSN, phone, IPv4, IBAN) only look at windows around these, so prose without digits costs one
#: C-level regex scan, and each detector skips clusters with too few digits.
_CLUSTER = re.compile(r"\d(?:[\d().+/-]|[ ](?=[\d(+]))+")  # two characters or more
# the same for ASCII text (str.isascii() is a flag test): the engine's scan for a leading [0-9] is a
# byte-range test, for \d a Unicode table lookup per character
_CLUSTER_ASCII = re.compile("[0-9]" + _CLUSTER.pattern.removeprefix("\\d"))
_NOT_DIGITS = str.maketrans("", "", " ().+/-")
_last_scan: tuple[str, list[tuple[int, int, int]]] = ("", [])
_span = re.Match.span
_last_min: tuple[str, dict[int, list[tuple[int, int, int]]]] = ("", {})


_last_lower: tuple[str, str] = ("", "")


def lowered(text: str) -> str:
    """``text.lower()``, kept for the last text like the digit scan, so the detectors of one
    :class:`~molt.governance.redaction.redactor.Redactor` pass lower a text once. Detectors use it
    for case-insensitive screens (a superset of the cased spellings) and their own lowercase scans."""
    global _last_lower
    last = _last_lower
    if last[0] is text:
        return last[1]
    low = text.lower()
    _last_lower = (text, low)
    return low


def clusters_with(text: str, min_digits: int) -> list[tuple[int, int, int]]:
    """The :func:`digit_clusters` of ``text`` that hold at least ``min_digits`` digits (kept per
    text like the scan, so each detector does not walk every cluster again)."""
    clusters = digit_clusters(text)
    last = _last_min
    if last[0] is not text:  # another thread's text took the slot in between: filter without keeping
        return [c for c in clusters if c[2] >= min_digits]
    found = last[1].get(min_digits)
    if found is None:
        found = last[1][min_digits] = [c for c in clusters if c[2] >= min_digits]
    return found


def digit_clusters(text: str) -> list[tuple[int, int, int]]:
    """``(start, end, digits)`` of each run of digits and number separators in ``text`` (single
    digits left out: no detector wants one).

    The result for the last text is kept (one slot, replaced atomically), so the detectors of one
    :class:`~molt.governance.redaction.redactor.Redactor` share a single scan.
    """
    global _last_scan, _last_min
    last = _last_scan
    if last[0] is text:
        return last[1]
    _last_min = (text, {})
    out = [
        (a, b, b - a if b - a < 4 else len(text[a:b].translate(_NOT_DIGITS)))
        for a, b in map(_span, (_CLUSTER_ASCII if text.isascii() else _CLUSTER).finditer(text))
    ]
    _last_scan = (text, out)
    return out


def _windows(
    text: str,
    rx: re.Pattern[str],
    clusters: list[tuple[int, int, int]],
    min_digits: int,
    *,
    before: int = 0,
    after: int = 12,
):  # type: ignore[no-untyped-def]
    """Matches of ``rx`` in the windows around the clusters that have at least ``min_digits`` digits.
    The window reaches ``after`` characters past a cluster so lookaheads see the real next text."""
    n = len(text)
    last_end = 0
    for cs, ce, digits in clusters:
        if digits < min_digits:
            continue
        a = max(cs - before, last_end)
        for m in rx.finditer(text, a, min(n, ce + after)):
            if m.start() >= ce:
                break  # starts after this cluster: the next window's
            if m.start() >= last_end:
                last_end = m.end()
                yield m


def matches_near_digits(
    text: str, rx: re.Pattern[str], min_digits: int, *, before: int = 0, after: int = 12
) -> list[re.Match[str]]:
    """The matches of ``rx`` a scan of the whole text would give, for a pattern whose every match
    holds a run of ``min_digits`` digits (a :func:`digit_clusters` cluster with that many) and starts
    at most ``before`` characters ahead of it and ends at most ``after - 1`` after it: only the
    windows around those clusters are scanned."""
    return list(_windows(text, rx, clusters_with(text, min_digits), min_digits, before=before, after=after))


# --------------------------------------------------------------------------- ip

_IPV4 = r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\w]|\.\d)"
_IPV6 = r"(?<![\w:.])(?:[0-9a-f]{0,4}:){2,7}(?:[0-9a-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?(?:%\w+)?(?![\w:])"


# three colon-separated hex groups (or "::"): a cheap ':'-led test before the full IPv6 pattern
_IPV6_HINT = re.compile(r":[0-9a-fA-F]{1,4}:[0-9a-fA-F]{1,4}:")


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
        self._v4 = RegexDetector("ip", "IP_ADDRESS", _IPV4, score=0.95, min_digits=4)
        self._v6 = RegexDetector("ip", "IP_ADDRESS", _IPV6, score=0.95, validate=_ipv6_valid, flags=re.I)

    def detect(self, text: str) -> list[Span]:
        """IPv4 and IPv6 addresses."""
        out = []
        if "." in text:  # only the clusters with three dots can hold a dotted quad
            quads = [c for c in clusters_with(text, 4) if text.count(".", c[0], c[1]) >= 3]
            if quads:
                v4 = self._v4
                for m in _windows(text, v4.rx, quads, 4):
                    out.append(Span(m.start(), m.end(), "IP_ADDRESS", v4.score, self.name))
        if "::" in text or _IPV6_HINT.search(text) is not None:
            out += self._v6.detect(text)
        return out


# --------------------------------------------------------------------------- numbers

# Payment card networks by their published issuer (IIN) ranges and card lengths — ISO/IEC 7812
# numbering as the networks publish it (Visa, Mastercard, Amex, Discover, JCB, Diners Club,
# Maestro, UnionPay, Mir, RuPay, Troy, Verve, Dankort, …). A candidate is a card when some
# network's range holds its first digits, that network issues its length, and the Luhn check
# passes: recognised because it is a card, not because it looks like the cards of one data set.
# A range is ``(low, high)`` over the first ``len(low)`` digits (strings: "0604" keeps its zero).
CARD_NETWORKS: tuple[tuple[str, tuple[tuple[str, str], ...], tuple[int, ...]], ...] = (
    ("visa", (("4", "4"),), (13, 16, 19)),
    ("mastercard", (("51", "55"), ("2221", "2720")), (16,)),
    ("amex", (("34", "34"), ("37", "37")), (15,)),
    ("discover", (("6011", "6011"), ("644", "649"), ("65", "65"), ("622126", "622925")), (16, 17, 18, 19)),
    # JCB's allocation is 3528-3589; the rest of 35 is not allocated to another network, and
    # test-data generators (Faker among them) draw JCB numbers from all of 35: the block is taken whole
    ("jcb", (("35", "35"),), (16, 17, 18, 19)),
    ("jcb-15", (("2131", "2131"), ("1800", "1800")), (15,)),
    ("diners", (("300", "305"), ("3095", "3095"), ("36", "36"), ("38", "39")), (14, 15, 16, 17, 18, 19)),
    # Mastercard's Maestro ranges (50, 56-58, 6xxx) and the older UK ones (0604, 6304, 6759)
    ("maestro", (("50", "50"), ("56", "58"), ("639", "639"), ("67", "67"), ("6304", "6304"), ("6759", "6759"),
                 ("0604", "0604")), tuple(range(12, 20))),
    ("unionpay", (("62", "62"), ("81", "81")), (16, 17, 18, 19)),
    ("mir", (("2200", "2204"),), (16, 17, 18, 19)),
    ("rupay", (("60", "60"), ("65", "65"), ("81", "82"), ("508", "508"), ("353", "353"), ("356", "356")), (16,)),
    ("troy", (("65", "65"), ("9792", "9792")), (16,)),
    ("verve", (("506099", "506198"), ("507865", "507964"), ("650002", "650027")), (16, 18, 19)),
    ("dankort", (("5019", "5019"),), (16,)),
    ("interpayment", (("636", "636"),), (16, 17, 18, 19)),
    ("instapayment", (("637", "639"),), (16,)),
    ("uzcard-humo", (("8600", "8600"), ("9860", "9860")), (16,)),
    ("borica", (("2205", "2205"),), (16,)),
)  # fmt: skip

# (prefix digits, low, high, lengths) flattened once, for the check below
_CARD_RANGES: list[tuple[int, str, str, frozenset[int]]] = [
    (len(lo), lo, hi, frozenset(lengths)) for _n, ranges, lengths in CARD_NETWORKS for lo, hi in ranges
]


def card_network(digits: str) -> str | None:
    """The network whose IIN range and lengths ``digits`` (digits only) fit, or ``None``.
    The Luhn check is separate (:func:`~molt.governance.redaction.checksums.luhn_valid`)."""
    n = len(digits)
    for name, ranges, lengths in CARD_NETWORKS:
        if n not in lengths:
            continue
        for lo, hi in ranges:
            if lo <= digits[: len(lo)] <= hi:
                return name
    return None


def _card_digits_valid(digits: str) -> bool:
    n = len(digits)
    if not 12 <= n <= 19 or len(set(digits)) == 1:
        return False
    for k, lo, hi, lengths in _CARD_RANGES:
        if n in lengths and lo <= digits[:k] <= hi:
            return luhn_valid(digits)
    return False


# A run of ASCII digit groups joined by one separator used throughout (space, dash or dot) or none:
# 4-4-4-4, 4-6-5 (Amex), 4-6-4 (Diners), 4-4-4-4-3, compact. The separator is captured once and
# required again (\2), so "12 34-56" is two runs, and a dotted quad never starts with four digits.
_CARD = re.compile(r"(?<![\w.-])([0-9]{4}(?:([ .-])[0-9]{1,6}(?:\2[0-9]{1,6})*|[0-9]{8,15}))(?![\w-]|[.][0-9])")


def card_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Card numbers in ``text[start:end]``, one :data:`_CARD` run. A run of 12–19 digits is a card
    or not as a whole (a Luhn-invalid number is not made valid by dropping its last group); a longer
    grouped run (two numbers in a row) is cut at group boundaries into the longest valid cards,
    each starting at a group of four."""
    value = text[start:end]
    digit_count = sum(c.isdigit() for c in value)
    if digit_count <= 19:
        return [(start, end)] if _card_digits_valid(value.translate(_NOT_DIGITS)) else []
    if value.isdigit():
        return []
    sep = value[4]
    groups = value.split(sep)
    out: list[tuple[int, int]] = []
    i = 0
    offset = start
    while i < len(groups):
        if len(groups[i]) == 4:
            digits = ""
            best = -1
            for j in range(i, len(groups)):
                digits += groups[j]
                if len(digits) > 19:
                    break
                if len(digits) >= 12 and _card_digits_valid(digits):
                    best = j
            if best >= 0:
                length = sum(len(g) for g in groups[i : best + 1]) + (best - i)
                out.append((offset, offset + length))
                offset += length + 1
                i = best + 1
                continue
        offset += len(groups[i]) + 1
        i += 1
    return out


class CreditCardDetector:
    """Payment card numbers of every major network (:data:`CARD_NETWORKS`: IIN range, length and
    Luhn), compact or grouped with spaces, dashes or dots."""

    name = "credit_card"
    entities = frozenset({"CREDIT_CARD"})
    requires = DIGIT

    def detect(self, text: str) -> list[Span]:
        """Card number spans."""
        out: list[Span] = []
        for m in _windows(text, _CARD, clusters_with(text, 12), 12):
            for a, b in card_spans(text, m.start(), m.end()):
                out.append(Span(a, b, "CREDIT_CARD", 1.0, self.name))
        return out


class SsnDetector:
    """US Social Security numbers: ``123-45-6789`` shapes valid under SSA rules; nine bare digits
    only after a cue such as "SSN" or "social security"."""

    name = "us_ssn"
    entities = frozenset({"US_SSN"})
    requires = DIGIT

    def __init__(self) -> None:
        self._dashed = RegexDetector(
            "us_ssn",
            "US_SSN",
            r"(?<![\w-])\d{3}([- ])\d{2}\1\d{4}(?![\w-])",
            score=0.9,
            validate=ssn_valid,
            min_digits=9,
        )
        self._bare = RegexDetector(
            "us_ssn", "US_SSN", r"(?<![\w-])\d{9}(?![\w-])", score=0.8, validate=ssn_valid,
            context=r"\b(?:ssn|ss#|social\s+security)", context_window=40, min_digits=9,
        )  # fmt: skip

    def detect(self, text: str) -> list[Span]:
        """SSN spans (nine bare digits only looked for when a cue is in the text)."""
        out = self._dashed.detect(text)
        low = lowered(text)
        if "ssn" in low or "ss#" in low or "social" in low:
            out += self._bare.detect(text)
        return out


def _iban_candidates(text: str) -> list[Span]:
    out: list[Span] = []
    n = len(text)
    done = 0
    for cs, _ce, _digits in digit_clusters(text):
        # an IBAN starts with two letters right before its check digits
        if cs < 2 or cs - 2 < done or not text[cs - 2 : cs].isalpha():
            continue
        m = _IBAN.match(text, cs - 2, min(n, cs + 48))
        if m is None:
            continue
        value = m.group(0)
        # A grouped IBAN may swallow a following short word; try shorter cuts at group boundaries.
        cut = len(value)
        while cut >= 15:
            if iban_valid(value[:cut]):
                out.append(Span(m.start(), m.start() + cut, "IBAN_CODE", 1.0, "iban"))
                done = m.start() + cut
                break
            space = value.rfind(" ", 0, cut)
            if space < 0:
                break
            cut = space
    return out


_IBAN = re.compile(r"(?<![\w])[a-z]{2}\d{2}(?:[a-z0-9]{11,30}|(?: ?[a-z0-9]{4}){2,7}(?: ?[a-z0-9]{1,3})?)(?!\w)", re.I)


class IbanDetector:
    """IBANs, compact or in groups of four, accepted only with the country's length and mod-97 == 1."""

    name = "iban"
    entities = frozenset({"IBAN_CODE"})
    requires = DIGIT

    def detect(self, text: str) -> list[Span]:
        """IBAN spans."""
        return _iban_candidates(text)


_PHONE = re.compile(
    r"(?<![\w+/.:-])(?:\+\d{1,3}[ .-]?|00\d{0,2}[ .-]?)?(?:\(\d{1,5}\)[ .-]?)?\d{1,12}(?:[ .-]\d{1,10}){0,5}"
    r"(?:[ ]?(?:x|ext\.?|#)[ ]?\d{1,6})?(?![\w/:]|[.-]\d)",
    re.IGNORECASE,
)
_DATEISH = re.compile(r"\d{4}-\d{1,2}-\d{1,2}$|\d{1,2}[./-]\d{1,2}[./-]\d{2,4}$|\d{3}-\d{2}-\d{4}$")
_PHONE_CUE = re.compile(
    # the words for "phone"/"number" in the languages of the locales Molt is used in, not English only
    r"(?:\b|_)(?:phone|tel|telephone|mobile|cell|fax|call|number|contact|whatsapp|sms|office|home|work"
    r"|telefon|telefono|teléfono|téléphone|tél|telefone|telefoon|nummer|numéro|numero|número|handy|mobil|móvil"
    r"|movil|portable|cellulare|celular|rufnummer|tlf|tfn)(?:\b|_)",
    re.I,
)
# the cue words that name a telephone, not any number ("order number", "contact", "office" left out):
# a run of bare digits too short to be read as a phone number on its own shape needs one of these
_PHONE_WORD = re.compile(
    r"(?:\b|_)(?:phone|tel|telephone|mobile|cell|fax|call|whatsapp|sms|telefon|telefono|teléfono|téléphone|tél"
    r"|telefone|telefoon|handy|mobil|móvil|movil|portable|cellulare|celular"
    r"|rufnummer|tlf|tfn|bel)(?:\b|_)",
    re.I,
)

# --------------------------------------------------------------------------- numbering plans
# A run of bare digits carries no shape to go by, so whether it can be a telephone number at all is
# decided by the numbering plans themselves: the ITU country codes and each country's national
# number lengths, leading digits and trunk prefix, as the ``phonenumbers`` library (Google's
# libphonenumber metadata) keeps them. Without the library (it ships with Presidio, in the
# ``redaction`` extra) bare runs are judged by the hand rules alone.

_plans: Any = None  # the phonenumbers module once imported; False when it is not installed
_plan_regions: dict[int, list[str]] = {}  # national number length (trunk prefix included) -> regions
_plan_memo: dict[str, bool] = {}


def _phone_plans() -> Any:
    global _plans, _plan_regions
    if _plans is None:
        try:
            pn = importlib.import_module("phonenumbers")
        except ImportError:
            _plans = False
            return _plans
        # built whole before it is published, so a thread that sees the module sees the index too
        regions: dict[int, dict[str, None]] = {}
        for region in sorted(pn.SUPPORTED_REGIONS):
            meta = pn.PhoneMetadata.metadata_for_region(region)
            if meta is None or meta.general_desc is None:
                continue
            trunk = len(meta.national_prefix or "")
            for n in meta.general_desc.possible_length or ():
                regions.setdefault(n, {})[region] = None
                if trunk:
                    regions.setdefault(n + trunk, {})[region] = None
        _plan_regions = {n: list(rs) for n, rs in regions.items()}
        _plans = pn
    return _plans


def dialable(digits: str) -> bool:
    """Whether a run of bare digits is a valid telephone number under some country's numbering plan:
    an international number after ``00`` (the international call prefix of most of the world), else a
    national one, trunk prefix included, in a country whose plan has numbers of that length (the
    number's leading digits and length checked against the plan's number types). False when the
    ``phonenumbers`` library is not installed."""
    known = _plan_memo.get(digits)
    if known is not None:
        return known
    pn = _phone_plans()
    ok = False
    if pn:
        if digits.startswith("00"):
            try:
                ok = bool(pn.is_valid_number(pn.parse("+" + digits[2:], None)))
            except pn.NumberParseException:
                ok = False
        else:
            for region in _plan_regions.get(len(digits), ()):
                try:
                    number = pn.parse(digits, region)
                except pn.NumberParseException:
                    continue
                if pn.is_valid_number_for_region(number, region):
                    ok = True
                    break
    if len(_plan_memo) > 4096:
        _plan_memo.clear()
    _plan_memo[digits] = ok
    return ok


_EXTENSION = re.compile(r"[ ]?(?:x|ext\.?|#)", re.I)
_GROUP_SEP = re.compile(r"[ .-]")


def _phone_digits(value: str) -> tuple[int, bool]:
    core = _EXTENSION.split(value, maxsplit=1)[0]
    digits = sum(c.isdigit() for c in core)
    separated = any(c in core for c in " .-(") or core.startswith("+")
    return digits, separated


class PhoneDetector:
    """Phone numbers in international and national formats, extensions included.

    A candidate needs 7–15 digits. A run of bare digits (no separator, no ``+``) has no shape to go
    by: with 10+ digits it needs a cue word ("phone", "call", "fax", …) near it, or a trunk ("0…")
    or international ("00…") prefix and a valid number under some country's numbering plan
    (:func:`dialable`); with 7–9 digits, a word for a telephone just before it and a valid number.
    Dates, SSN shapes and dotted quads are rejected.
    """

    name = "phone"
    entities = frozenset({"PHONE_NUMBER"})
    requires = DIGIT

    def __init__(self, plans: bool = True) -> None:
        # plans=False: the hand rules alone (bench/bench_phone.py measures the difference)
        self.plans = plans

    def detect(self, text: str) -> list[Span]:
        """Phone number spans."""
        plans = self.plans
        out = []
        for m in _windows(text, _PHONE, clusters_with(text, 6), 6, before=2):
            start, end = m.span()
            value = m.group(0).rstrip(" .-")
            end = start + len(value)
            digits, separated = _phone_digits(value)
            # the cheap rejections first; the cue (a regex around the candidate) only when it decides
            if not 6 <= digits <= 15 or _DATEISH.match(value):
                continue
            if value.count(".") == 3 and " " not in value and "-" not in value:
                continue  # dotted quad: an IP address or a version number
            if not separated and digits < 10:
                # a short bare run ("016549996"): a phone number only right after a word for one, and
                # only when some country's plan has such a number
                if digits < 7 or _PHONE_WORD.search(text, max(0, start - 24), start) is None:
                    continue
                if not plans or not dialable(value[:digits]):  # (bare: the digits lead, any extension after)
                    continue
                out.append(Span(start, end, "PHONE_NUMBER", 0.75, self.name))
                continue
            cue = (
                _PHONE_CUE.search(text, max(0, start - 40), start) is not None
                or _PHONE_CUE.match(text, end + 1, end + 12) is not None  # "…-Fax", "… mobile"
            )
            if digits == 6 and not cue:
                continue
            if (
                not separated
                and not cue
                and not (plans and value[0] == "0" and (digits <= 12 or value[1] == "0") and dialable(value[:digits]))
            ):
                # bare digits with no cue: only a number written with its trunk prefix ("0…") or the
                # international one ("00…") and valid under a plan; other runs are ids, counts, codes
                continue
            groups = _GROUP_SEP.split(value)
            if " " in value and not cue and value[0] not in "+(0" and len(groups) > 2 and max(map(len, groups)) < 3:
                continue  # "1 2 3 45 6": a list of small numbers, not a phone number
            out.append(Span(start, end, "PHONE_NUMBER", 0.75, self.name))
        return out


class UsDriverLicenseDetector(RegexDetector):
    """US driver licence numbers (letter + digits, or 7–13 digits), only after a licence cue."""

    requires = DIGIT

    def __init__(self) -> None:
        super().__init__(
            "us_driver_license", "US_DRIVER_LICENSE",
            r"(?<![\w-])(?:[A-Z]{1,2}\d{5,14}[A-Z]?|\d{7,13}|[A-Z]\d{3}-\d{3}-\d{2}-\d{3}-\d)(?![\w-])",
            score=0.85, flags=re.I,
            context=r"\b(?:driver'?s?|driving)\s+licen[cs]e|\bDL\b|\blicen[cs]e\s+(?:no|number|#)",
            context_window=60, min_digits=5, before=2,
        )  # fmt: skip

    def detect(self, text: str) -> list[Span]:
        """Licence numbers, looked for only when a licence cue is in the text."""
        if "DL" not in text and "icen" not in lowered(text):  # any case of "licence" / "license"
            return []
        return super().detect(text)


_MONTHS = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|jun(?:e)?|jul(?:y)?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
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
    ("phone", PhoneDetector),
    ("credit_card", CreditCardDetector),
    ("us_ssn", SsnDetector),
    ("iban", IbanDetector),
    ("ip", IpDetector),
    ("us_driver_license", UsDriverLicenseDetector),
    ("date_time", DateTimeDetector),
):
    detectors.register(_name, _factory)
