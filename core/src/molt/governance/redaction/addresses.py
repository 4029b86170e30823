"""Postal addresses: candidates anchored on numbers, parsed and extended part by part.

An address starts with a *street* in one of four shapes:

1. house number first: ``221B Baker Street``, ``19 2249 College Street``, ``40 rue Victor Hugo``,
   ``91 Vila Miguel Tavares 1160`` (a number, a street name, then a street type or a number);
2. street first: ``Hochstrasse 96``, ``ul. Lubartowska 42``, ``Via Roma 41``, ``Dózsa György út 78``
   (a street prefix, a street-morpheme word or a street-type word, then the number);
3. a unit or box: ``Apt. 4``, ``Suite 200``, ``P.O. Box 12``, ``PSC 1083, Box 3672``;
4. a military address ending in ``APO/FPO/DPO AA 12345`` (``USNS Ship``, ``Unit 1234 Box 567``);

and is then extended part by part — house number, unit, crossing street (``… 63 and Henriksen
Street``), city, region code, postcode, country — across commas and up to four line breaks, as
long as each part looks like one (a known place, a postcode, a unit, a state code before a
postcode).

Layout decides the granularity, following the common labelling convention: an address written
inline (in a sentence, on one line or several) is one span; a block laid out one part per line
from the start of a line (an envelope, a signature) is returned part by part, its city and
country as places.

Speed: every candidate is found by a regex that starts with a digit (or a rare literal), so the
scan stays in C and ordinary prose costs almost nothing; the street grammar itself is a few lines
of Python over the handful of words around each candidate. The street vocabulary is general
postal knowledge (USPS suffixes, the street types of the major European languages), not learned
from any labelled data.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from molt.governance.redaction.lexicon import fold

__all__ = ["Address", "AddressFinder"]


def _wordset(words: str) -> frozenset[str]:
    return frozenset(words.split())


# street types that follow the name: "Baker Street", "Oakridge Ln"
_STREET_TYPES = _wordset(
    """street st avenue ave av road rd boulevard blvd lane ln drive dr court ct place pl square sq terrace
    ter way parkway pkwy highway hwy circle cir crescent cres close row alley aly trail trl path walk plaza
    grove gardens gdns hill heights hts creek park ridge view mews loop crossing xing expressway expy freeway
    fwy turnpike tpke pike wharf quay esplanade parade promenade junction jct bypass causeway green point pt
    landing commons estates manor meadow meadows orchard pass cove glen vale dale summit track route rte broadway
    embankment center ctr centre harbor harbour shores springs valley village ville lakes lake falls fields
    forest fork forks gateway haven hollow island isle knoll mall mill mills mount mountain mtn oval pines
    plains prairie ranch rapids run skyway spur stream trace tunnel viaduct vista wynd via
    marg chowk ganj zila nagar colony"""
)
# street words that come before the name: "rue Victor Hugo", "ul. Lubartowska", "Calle Mayor"
_STREET_PREFIXES = _wordset(
    """rue route chemin avenue avenida avda av boulevard bd allée allee impasse place quai cours via viale
    vicolo corso piazza piazzale largo strada calle carrera camino paseo plaza ronda travesía travesia rambla
    carrer avinguda rua r travessa praça praca estrada alameda ladeira ul ulica al aleja os plac pl ulitsa
    prospekt pr pereulok per jalan jl jln lorong soi thanon odos leoforos plateia sokak bulevar bulevardul
    calea drumul aleea intrarea vila postfach rúa camiño vía callejón callejon pasaje pasadizo glorieta cuesta
    urbanización urbanizacion carretera c λ οδός λεωφόρος trg námestie nám třída"""
)
# a word ending in one of these is a street name (German, Dutch, Nordic, Finnish, Hungarian, Slavic, …)
_STREET_MORPHS = tuple(
    sorted(
        _wordset(
            """strasse straße str gasse weg vej gade laan straat plein dreef kade steenweg singel gracht gata gatan
    vägen väg veien vei gate tie katu kuja polku utca út útja allee ring platz damm ufer chaussee markt
    stieg pfad torget torv bakken stræde plads vegur stræti gränd gränden ulica iela gatve tänav cesta ulice
    steeg boulevard plantsoen
    náměstí sokak caddesi bulvar baan hof brink wal dijk kamp veld rakpart körút tér köz sétány"""
        )
    )
)
# street types written as their own word between the name and the number ("Dózsa György út 78")
_POST_TYPES = _wordset(
    "út utca u körút krt tér köz sor sétány rakpart straße strasse str gasse weg allee platz ulica gata vej "
    "gade laan straat street road tee maantee puiestee kalea enparantza etorbidea"
)
# words before a unit number that can start an address; more only continue one (_PART_UNIT)
_UNITS = _wordset("apt apartment suite ste unit flat studio room rm floor fl bldg building dept box psc cmr")
_CONNECTORS = _wordset("de da do dos das del della di du la le van von der den y e al el u nad am an im i")

# --- candidate regexes (each starts with a digit or a rare literal) ---
# a house number after a separator (or at the start of the text), then a word: group 1 is the
# number. The separator test is a lookbehind after the first digit, so the pattern starts with a
# digit and the scan for one stays in C; :func:`_house_numbers` steps past each match's separator.
_NUMBER_WORD = re.compile(
    r"(\d(?<![^\s(>\"“'][\s\S])\d{0,4}[A-Za-z]?(?:[-/]\d{1,4}[A-Za-z]?)?),?[ ]+"
    r"(?=[^\W\d_]|\d{1,5}[ ]|\d{1,4}(?:st|nd|rd|th)\b)"
)
# the same for ASCII text (str.isascii() is a flag test): a leading [0-9] is a byte-range test in the
# regex engine's scan, where \d is a Unicode table lookup per character
_NUMBER_WORD_ASCII = re.compile("([0-9]" + _NUMBER_WORD.pattern.removeprefix("(\\d"))
# a number after a space, not part of a longer number: checked for a street word before it
_WORD_NUMBER = re.compile(r"[ ]\d{1,5}[A-Za-z]?(?:[-/]\d{1,4}[A-Za-z]?)?\b(?![.,:/-]?\d)")
_MILITARY = re.compile(r"(?:APO|FPO|DPO)[ ](?:AA|AE|AP)[ ]\d{5}\b")
_MILITARY_HINT = "PO "  # in every _MILITARY match: one substring test skips its scan
# --- tokens of one line, for the small parsers ---
# an ordinal is one token ("40th Street", "184th"), so a numbered street reads as a name word
_TOK = re.compile(
    r"[^\W\d_][\w'’-]*\.?|\d{1,4}(?i:st|nd|rd|th)\b|\d{1,5}(?:/\d{1,5})?[A-Za-z]?\b\.?|\d+|[^\s\w]"
)
# --- parts after a street, each tried with .match at the current position ---
_SEP = re.compile(r"[ \t]*(?:,[ \t]*|\.?[ \t]*\n(?:[\s>*•,-]|\?+[ \t])*|\.?[ \t]+)?")
_PART_UNIT = re.compile(
    r"(?:(?i:apt|apartment|suite|ste|unit|flat|studio|room|rm|floor|fl|bldg|building|puerta|piso|esc|escalera|porta"
    r"|andar|etage|étage"
    # the flat, floor, staircase and block words of the other European postal conventions, written
    # after the street as these are: Italian (piano, appartamento, interno, scala), French (appt,
    # bâtiment), Spanish and Portuguese (apto, depto, dpto, bloque, bloco, sala), German (Wohnung),
    # Polish (lokal, mieszkanie)
    r"|piano|appartamento|app|interno|int|scala|appt|bât|bat|bâtiment|batiment|apto|depto|dpto|bloque|bloco|sala"
    r"|wohnung|whg|lokal|lok|mieszkanie)(?![^\W\d_])\.?[ ]*#?[ ]*[\w-]{1,6}\b"
    r"|(?i:p\.?[ ]?o\.?[ ]?box)[ ]*\d{1,6}\b|(?i:box)[ ]\d{1,6}\b)"
)
_PART_POSTCODE = re.compile(
    r"(?:\d{4}[ ]?[A-Z]{2}(?![\w-])|\d{5}-?\d{3}(?![\w-])|\d{4,6}(?:-\d{4})?|\d{2}-\d{3}|\d{3}[ ]\d{2}"
    r"|[A-Z]{1,2}\d[A-Z\d]?[ ]?\d[A-Z]{2}|[A-Z]\d[A-Z][ ]?\d[A-Z]\d)"
    r"(?![\w-]|[ ]?[\d(+])"
)
# words that join the words of a place name without being capitalised ("Chiclana de la Frontera")
_PLACE_JOINERS = _wordset(
    "de del la le di da do du des van von der den am an im upon on sur nad pod u y i e and of the"
)
# a region code after a slash or in parentheses, as Brazilian and Italian addresses end ("/ MS", "(MO)")
_PART_PROVINCE = re.compile(r"(?:/[ ]?[A-Z]{2}|\([A-Z]{2}\))(?!\w)")
# a town joined to its six-digit PIN by a hyphen, as Indian addresses end ("Kozhikode-390762")
_PART_TOWN_PIN = re.compile(r"(?:[^\W\d_][\w'’.]*[ ]){0,3}[^\W\d_][\w'’.]*-\d{6}(?!\d)")
_PART_STATE = re.compile(r"[A-Z]{1,3}(?=[ \t]*(?:,[ \t]*)?(?:\d{4,6}|\n|$))")
_PART_PLACE = re.compile(
    r"[^\W\d_][\w'’.-]*(?:[ ](?:(?:de|del|la|le|di|da|do|du|des|van|von|der|den|am|an|im|upon|on|sur|nad|pod|"
    r"u|y|i|e|and|of|the)[ ])*[^\W\d_][\w'’.-]*){0,4}"
)
_POSTCODE_AT_EOL = re.compile(r"[^\n]{0,24}?[ ,]\d{4,6}(?:-\d{4})?[ \t]*(?:\n|$)")
# a line that is a place name, a postcode after it or not: group 1 is the name
_PLACE_LINE = re.compile(r"([^\W\d_][^\n\d,]{0,40}?)(?:[ ,]+\d{4,6}(?:-\d{4})?)?[ \t]*(?:\n|$)")
_HOUSE_NUMBER = re.compile(r"[ ]\d{1,5}[A-Za-z]?\b\.?(?![.,]?\d)")
_SHIP = re.compile(r"(?:USNS|USNV|USS|USCGC|PSC|CMR|Unit)[ ][^\n]{1,40}$")
_CROSS = re.compile(r"\.?[ ]+and[ ]+")
# ", Town" closing a sentence or the text right after a street
_TRAIL_TOWN = re.compile(r",[ ]([^\W\d_][\w'’-]*(?:[ ][^\W\d_][\w'’-]*){0,2})[ \t]*(?=$|[!?\n]|\.(?:\s|$))")
# "36 19 folkestone road", "03 Strandalléen 61": a short number, then a street that has its own
# (an ordinal after the number is the street's name, not its number: "2914 184th Street")
_LEAD = re.compile(r"(\d{1,4}[A-Za-z]?)[ ]+(?=\d(?!\d{0,3}(?i:st|nd|rd|th)\b)|[^\W\d_][^\n]*[ ]\d{1,5}[A-Za-z]?\.?$)")
_TRAIL = " \t,;:-"
# a short number right before a street-first address, itself after a space or a line's start
# (not the last group of a longer number: "415 555 0100 Hochstrasse 9")
_NUMBER_BEFORE = re.compile(r"(?:^|(?<=[\s>]))(?<!\d[ ])(\d{1,4}[A-Za-z]?)[ ]\Z", re.MULTILINE)
# what follows a label word: ": " or ". " and a number ("Tel. +49 30 …", "Fax: 0113 …")
_LABEL_AFTER = re.compile(r"(?::[ \t]*|\.[ \t]*)[+(\d]")


class Address(NamedTuple):
    """An address ``text[start:end]``; ``parts`` ``(start, end, kind)`` when it is a block laid out
    one part per line (kind ``"place"`` for a city or country, else ``"address"``), else empty."""

    start: int
    end: int
    parts: tuple[tuple[int, int, str], ...]


class _T(NamedTuple):
    start: int
    end: int
    text: str
    key: str  # casefolded, trailing dot removed


def _tokens(text: str, a: int, b: int) -> list[_T]:
    return [
        _T(m.start(), m.end(), w, w.rstrip(".").casefold()) for m in _TOK.finditer(text, a, b) for w in (m.group(),)
    ]


def _house_numbers(text: str) -> list[tuple[int, int]]:
    """``(number start, match end)`` of each :data:`_NUMBER_WORD` match, as if its separator were
    consumed: matches do not overlap, and the separator of the next one lies at or after the end
    of the last (a search resumes one past the end, because the separator precedes the digit)."""
    out = []
    search = (_NUMBER_WORD_ASCII if text.isascii() else _NUMBER_WORD).search
    m = search(text)
    while m is not None:
        out.append((m.start(), m.end()))
        m = search(text, m.end() + 1)
    return out


def _is_num(t: _T) -> bool:
    return t.text[0].isdigit()


def _morph(key: str) -> bool:
    return len(key) > 3 and key.endswith(_STREET_MORPHS)


class AddressFinder:
    """Finds addresses in text.

    ``is_place(phrase)`` says whether a phrase is a known city, region or country; ``is_common(word)``
    whether a word is frequent English (so "Thanks" after a street is not taken for a city).
    """

    def __init__(
        self,
        is_place: Callable[[str], bool],
        is_common: Callable[[str], bool],
        street_types: frozenset[str] = frozenset(),
        street_prefixes: frozenset[str] = frozenset(),
    ):
        self._is_place = is_place
        self._is_common = is_common
        #: Street types after the name: the built-in ones plus ``street_types`` (e.g. from a lexicon).
        self.street_types = _STREET_TYPES | street_types
        #: Street words before the name: the built-in ones plus ``street_prefixes`` (folded: without
        #: accents, as a lexicon holds them; see :meth:`_prefix`).
        self.street_prefixes = _STREET_PREFIXES | street_prefixes

    def _prefix(self, key: str) -> bool:
        """Whether a casefolded word is a street word written before the name."""
        return key in self.street_prefixes or (not key.isascii() and fold(key) in self.street_prefixes)

    # ------------------------------------------------------------------ streets

    def _name_word(self, t: _T, lowercase: bool) -> bool:
        """A word that may be part of a street name."""
        c = t.text[0]
        if c.isdigit():
            return t.key.endswith(("st", "nd", "rd", "th")) and t.key[:-2].isdigit()  # 184th
        if not c.isalpha():
            return False
        return lowercase or c.isupper() or t.key in _CONNECTORS

    def _street_forward(self, toks: list[_T], lowercase: bool) -> int:
        """End offset of a street that starts at ``toks[0]`` (a house number or a street word), or -1."""
        n = len(toks)
        i = 0
        numbers = 0
        while i < n and i < 2 and _is_num(toks[i]) and toks[i].text[-1] != "." and not toks[i].key.endswith("th"):
            i += 1
            numbers += 1
        if numbers and i < n and toks[i].text == ",":  # "41, chemin de Rivière"
            i += 1
        if i >= n or not (toks[i].text[0].isalpha() or self._name_word(toks[i], lowercase)):
            return -1
        if self._prefix(toks[i].key) and i + 1 < n:
            j = i + 1
            while j < n and j - i <= 6 and self._name_word(toks[j], lowercase or toks[j].key in _CONNECTORS):
                j += 1
            if j > i + 1:
                if j < n and _is_num(toks[j]):
                    return toks[j].end
                return toks[j - 1].end
            # no name after it: the word is the street's name itself ("52 Stubben 149")
        j = i
        while j < n and j - i < 6:
            t = toks[j]
            if _is_num(t) and not t.key.endswith(("st", "nd", "rd", "th")):
                if j > i:
                    # words then a number: "Vila Miguel Tavares 1160" (after a house number only)
                    if numbers and (lowercase or toks[i].text[0].isupper()) and self._part_ends(toks, j + 1):
                        return t.end
                    if _morph(toks[j - 1].key) or toks[j - 1].key in _POST_TYPES:
                        return t.end
                return -1
            if not self._name_word(t, lowercase):
                break
            if j > i and t.key in self.street_types:
                return t.end
            if _morph(t.key):
                if j + 1 < n and _is_num(toks[j + 1]):
                    return toks[j + 1].end
                return t.end if numbers else -1
            j += 1
        # two numbers and a name up to the end of the line or a comma: "79 291 Adelianos Kambos"
        if numbers == 2 and j > i and toks[i].text[0].isupper() and self._part_ends(toks, j):
            return toks[j - 1].end
        return -1

    @staticmethod
    def _part_ends(toks: list[_T], j: int) -> bool:
        """The street ends before ``toks[j]``: at the end of the line, a comma or a unit."""
        return j >= len(toks) or toks[j].text == "," or toks[j].key in _UNITS

    def _street_backward(
        self, text: str, num_start: int, num_end: int, lowercase: bool, *, prefix_only: bool = False
    ) -> int:
        """Start offset of a street that ends with the number at ``num_start``, or -1; with
        ``prefix_only``, only a street led by a street word ("Via Roma")."""
        a = max(text.rfind("\n", 0, num_start) + 1, num_start - 80)
        words = [
            w.strip("\"'“”‘’«»(").rstrip(".,").casefold() for w in text[max(a, num_start - 60) : num_start].split()[-6:]
        ]
        if prefix_only:
            words = [w for w in words if self._prefix(w)][-1:]
        if not words or not (
            words[-1] in _UNITS
            or words[-1] == "h.no"
            or words[-1] in _POST_TYPES
            or _morph(words[-1])
            or any(self._prefix(w) for w in words)
        ):
            return -1
        toks = _tokens(text, a, num_start)
        if not toks:
            return -1
        last = toks[-1]
        k = len(toks) - 1
        if last.key == "no" and k >= 1 and toks[k - 1].key == "h" and not prefix_only:
            return toks[k - 1].start  # "H.No. 72": a house number, as Indian addresses write it
        if last.key in _UNITS and not prefix_only:
            if last.key == "box" and k >= 1 and toks[k - 1].key in ("p.o", "po", "o"):
                k -= 1
                if k >= 1 and toks[k - 1].key == "p":
                    k -= 1
            return toks[k].start
        if not last.text[0].isalpha():
            return -1
        if (_morph(last.key) or last.key in _POST_TYPES) and not prefix_only:
            j = k
            if (
                last.key in _POST_TYPES
                and not _morph(last.key)
                and (k == 0 or not self._name_word(toks[k - 1], lowercase))
            ):
                return -1
            if not lowercase:
                while j > 0 and j > k - 4 and self._name_word(toks[j - 1], False) and toks[j - 1].text[0] != "&":
                    j -= 1
                while j < k and toks[j].key in _CONNECTORS:
                    j += 1
            return toks[j].start
        # a prefix word up to five words back: "ul. Lubartowska", "Via Roma", "rue de la Paix"
        for j in range(k, max(-1, k - 6), -1):
            t = toks[j]
            if self._prefix(t.key) and j < k:
                if all(self._name_word(x, lowercase) for x in toks[j + 1 : k + 1]):
                    return t.start
                return -1
            if not self._name_word(t, lowercase):
                return -1
        return -1

    # ------------------------------------------------------------------ addresses

    def find(self, text: str, lowercase: bool = False) -> list[Address]:
        """Non-overlapping addresses, sorted. ``lowercase`` also takes all-lowercase street names."""
        cands: list[tuple[int, int]] = []
        for s, e in _house_numbers(text):
            if s >= 2 and text[s - 2].isdigit():
                continue  # a group inside a longer number ("032 696 10 69")
            c = text[e]
            if not (lowercase or c.isupper() or c.isdigit()):
                w = text[e : text.find(" ", e, e + 16)].rstrip(".").casefold()
                if not self._prefix(w):
                    continue  # "50 year old", "30 days": a quantity, not a street
            line_end = text.find("\n", s, s + 90)
            toks = _tokens(text, s, line_end if line_end >= 0 else min(len(text), s + 90))
            end = self._street_forward(toks, lowercase)
            if end > 0:
                cands.append((s, end))
        for m in _WORD_NUMBER.finditer(text):
            num = m.start() + 1
            c = text[m.start() - 1] if m.start() else ""
            if c == "," and m.start() >= 2 and text[m.start() - 2].isalpha():
                # the number after a comma, as Italian and Brazilian addresses write it: only after a
                # street led by a street word ("Piazza Smirnoff, 69"), never a bare name and a number
                start = self._street_backward(text, m.start() - 1, m.end(), lowercase, prefix_only=True)
                if start >= 0:
                    cands.append((start, m.end()))
                continue
            if not (c.isalpha() or c == "."):
                continue
            start = self._street_backward(text, num, m.end(), lowercase)
            if start >= 0:
                cands.append((start, m.end()))
        if _MILITARY_HINT in text:
            for m in _MILITARY.finditer(text):
                line = text.rfind("\n", 0, m.start())
                ship = _SHIP.search(text, max(0, line - 60), line) if line > 0 else None
                cands.append((ship.start() if ship is not None else m.start(), m.end()))
        k = text.find("orner of ")
        while k > 0:
            p = k + 9
            toks = _tokens(text, p, min(len(text), p + 60))
            j = 0
            while j < len(toks) and j < 5 and toks[j].key != "and" and toks[j].text[0].isalnum():
                j += 1
            if 0 < j < len(toks) - 1 and toks[j].key == "and":
                cands.append((p, toks[j - 1].end))
            k = text.find("orner of ", p)
        if not cands:
            return []
        return self._assemble(text, cands, lowercase)

    def _assemble(self, text: str, cands: list[tuple[int, int]], lowercase: bool) -> list[Address]:
        cands.sort(key=lambda c: (c[0], -c[1]))
        out: list[Address] = []
        for s, e in cands:
            if out and s < out[-1].end:
                continue
            parts: list[tuple[int, int, str]] = [(s, e, "address")]
            if out and not text[out[-1].end : s].strip(" ,\t"):  # a further part of the last address
                prev = out.pop()
                s = prev.start
                parts = [*prev.parts, *parts] if prev.parts else [(prev.start, prev.end, "address"), *parts]
            else:
                s = self._extend_back(text, s)
                parts[0] = (s, e, "address")
            e = self._extend(text, e, lowercase, parts)
            while e > s and text[e - 1] in _TRAIL:
                e -= 1
            if e <= s:
                continue
            if "\n" in text[s:e] and _line_starts(text, s):
                out.append(Address(s, e, tuple(_split_lead(text, parts))))
                continue
            inline, e = self._inline_parts(text, parts, e, lowercase)
            out.append(Address(s, e, inline))
        return out

    def _inline_parts(
        self, text: str, parts: list[tuple[int, int, str]], e: int, lowercase: bool
    ) -> tuple[tuple[tuple[int, int, str], ...], int]:
        """Parts of an inline address that is only a street and a town ("95 Lille Vibyvej 8, Måløv"):
        the town is a place of its own, and so is a building number written before a street that
        has its own number. Anything longer (a unit, a postcode, a country) stays one span."""
        if len(parts) > 2 or parts[0][2] != "address" or (len(parts) == 2 and parts[1][2] != "place"):
            return (), e
        if len(parts) == 2 and "\n" in text[parts[0][1] : parts[1][0]]:
            return (), e  # the town on the next line: a postal block quoted in a sentence, one span
        if len(parts) == 1:  # an unknown town at the end of the sentence: "…, 61 Wiesenstrasse 31, Barzheim"
            m = _TRAIL_TOWN.match(text, e)
            if m is not None and (lowercase or m.group(1)[0].isupper()):
                words = m.group(1).split(" ")
                if not (len(words) == 1 and self._is_common(words[0])):
                    parts = [*parts, (m.start(1), m.end(1), "place")]
                    e = m.end(1)
        split = _split_lead(text, parts)
        if len(split) == 1:
            return (), e
        return tuple(split), e

    @staticmethod
    def _extend_back(text: str, s: int) -> int:
        # a building number before a street that has its own ("01 Luite tee 71"): its first part
        m = _NUMBER_BEFORE.search(text, max(0, s - 8), s)
        if m is not None:
            return m.start(1)
        # "Felicity and Hraunás 84": a street corner whose first street is a bare name
        if text.endswith(" and ", max(0, s - 5), s):
            j = s - 5
            i = j
            while i > 0 and (text[i - 1].isalpha() or text[i - 1] in "'’-"):
                i -= 1
            if i < j and text[i].isupper():
                return i
        return s

    def _street_at(self, text: str, p: int, lowercase: bool) -> int:
        """End of a street starting at ``p`` (a crossing or a further line), or ``p``."""
        line_end = text.find("\n", p, p + 90)
        words = [w.rstrip(".,").casefold() for w in text[p : line_end if line_end >= 0 else p + 60].split()[:7]]
        if not any(
            w[:1].isdigit() or w in self.street_types or self._prefix(w) or w in _POST_TYPES or _morph(w) for w in words
        ):
            return p
        toks = _tokens(text, p, line_end if line_end >= 0 else min(len(text), p + 90))
        end = self._street_forward(toks, lowercase)
        if end < 0 and toks and toks[0].text[0].isalpha():
            # "Hansen Street" (no number) as a crossing or a further line
            j = 0
            while j < len(toks) and j < 4 and self._name_word(toks[j], lowercase):
                if j > 0 and toks[j].key in self.street_types:
                    return toks[j].end
                j += 1
        return end if end > 0 else p

    def _extend(self, text: str, e: int, lowercase: bool, parts: list[tuple[int, int, str]]) -> int:
        n = len(text)
        x = _CROSS.match(text, e)
        if x is not None:
            y = self._street_at(text, x.end(), lowercase)
            if y > x.end():
                e = y
                parts[-1] = (parts[-1][0], e, "address")
        m = _HOUSE_NUMBER.match(text, e)
        if m is not None:
            # a house number, and the street it leads when one follows ("Suite 574 34 Sireli 74")
            y = self._street_at(text, m.start() + 1, lowercase)
            e = max(y, m.end())
            parts[-1] = (parts[-1][0], e, "address")
        lines = 0
        while e < n and len(parts) < 10:
            sep = _SEP.match(text, e)
            p = sep.end() if sep is not None else e
            if p >= n:
                break
            newline = text.count("\n", e, p)
            if not newline and parts[-1][2] != "address" and "." in text[e:p]:
                break  # ". " after a town, a country or a postcode ends the sentence, not a part
            if newline == 2 and lines < 4 and self._place_line(text, p):
                newline = 1  # a blank line before the last line, a place ("\n\n Greece 79976")
            if newline > 1 or (newline and lines >= 4):
                break
            end, kind = self._part(
                text, p, lowercase, after_newline=bool(newline), after_postcode=parts[-1][2] == "postcode"
            )
            if end <= p:
                break
            lines += newline
            parts.append((p, end, kind))
            e = end
        return e

    def _place_line(self, text: str, p: int) -> bool:
        """Whether the line at ``p`` is a known place (a country, a city), a postcode after it or not."""
        m = _PLACE_LINE.match(text, p)
        return m is not None and self._is_place(m.group(1).rstrip("."))

    def _part(
        self, text: str, p: int, lowercase: bool, *, after_newline: bool, after_postcode: bool = False
    ) -> tuple[int, str]:
        """End and kind of the address part at ``p``; the end is ``p`` when none starts there. Kind
        ``"postcode"`` is an address part that a town may follow."""
        for rx in (_MILITARY, _PART_UNIT, _PART_POSTCODE, _PART_STATE, _PART_PROVINCE, _PART_TOWN_PIN):
            m = rx.match(text, p)
            if m is not None and m.end() > p:
                return m.end(), "postcode" if rx is _PART_POSTCODE else "address"
        c = text[p]
        if c.isdigit() or c.isalpha():
            end = self._street_at(text, p, lowercase)
            if end > p:
                return end, "address"
        m = _PART_PLACE.match(text, p)
        if m is None:
            return p, ""
        phrase = m.group()
        if not (lowercase or phrase[0].isupper()):
            return p, ""
        words = phrase.split(" ")
        # a place name does not run past the end of a sentence ("…, United Kingdom. We also ship"):
        # only an abbreviation ("St. Louis", "Ft. Worth") is followed by more of the name after its
        # dot; and in capitalised text its later words are capitalised or joiners ("de la")
        k = 1
        while k < len(words):
            before, word = words[k - 1], words[k]
            if before.endswith(".") and len(before) > 4:
                break
            if not (lowercase or word[:1].isupper() or word in _PLACE_JOINERS):
                break
            k += 1
        while k > 1 and words[k - 1] in _PLACE_JOINERS:
            k -= 1
        if k < len(words):
            words = words[:k]
            phrase = " ".join(words)
        m_end = p + len(phrase)
        if len(words) == 1 and _LABEL_AFTER.match(text, m_end - phrase.endswith(".")) is not None:
            return p, ""  # a field label before a number ("Tel. +49 …", "Fax: 0113 …"), not the town
        if after_postcode:
            # the words after a postcode are its town ("60111 Traore-les-Bains", "84-180 Iława"),
            # up to the first word that is not part of a name
            k = 1
            while k < len(words) and (lowercase or words[k][:1].isupper() or words[k] in _CONNECTORS):
                k += 1
            while k > 1 and words[k - 1] in _CONNECTORS:
                k -= 1
            town = " ".join(words[:k])
            if not (k == 1 and self._is_common(town.rstrip("."))):
                return p + len(town.rstrip(".")), "place"
        if after_newline and len(words) > 1 and _line_ends(text, m_end):
            return m_end, "place"  # a line of its own in a block is the town, whole ("Torres de Albánchez")
        # the longest known place, else the whole run if a postcode, a state or the line's end follows
        for k in range(len(words), 0, -1):
            cand = " ".join(words[:k]).rstrip(".")
            if self._is_place(cand):
                return p + len(cand), "place"
        if len(words) == 1 and self._is_common(words[0].rstrip(".")):
            return p, ""
        end = m_end
        tail = _SEP.match(text, end)
        q = tail.end() if tail is not None else end
        if _PART_POSTCODE.match(text, q) or _PART_STATE.match(text, q):
            return end, "place"
        if after_newline and (_line_ends(text, end) or _POSTCODE_AT_EOL.match(text, end)):
            return end, "place"
        nxt = _PART_PLACE.match(text, q)
        if nxt is not None and q > end:
            following = nxt.group().split(" ")
            if any(self._is_place(" ".join(following[:k]).rstrip(".")) for k in (1, 2, 3)):
                return end, "place"  # "SCHLAGLES, Madagascar"
        return p, ""


def _split_lead(text: str, parts: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """A building number before a full street address is its own part: "03 | Strandalléen 61"."""
    out = []
    for s, e, kind in parts:
        m = _LEAD.match(text, s, e)
        if kind == "address" and m is not None and m.end() < e:
            out.append((s, s + len(m.group(1)), kind))
            s = m.end()
        out.append((s, e, kind))
    return out


def _line_starts(text: str, i: int) -> bool:
    j = text.rfind("\n", 0, i)
    return not text[j + 1 : i].strip(" \t>*•?-")


def _line_ends(text: str, i: int) -> bool:
    j = i
    while j < len(text) and text[j] in " \t,":
        j += 1
    return j >= len(text) or text[j] == "\n"
