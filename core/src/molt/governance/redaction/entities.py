"""Lexicon-and-context detector for names, places, postal addresses and organisations.

A fast offline "model" for PERSON, LOCATION, ADDRESS and ORGANIZATION: no neural network, so it
runs at tens of thousands of 1 KB texts per second on one core. It combines

1. packaged lexicons (:mod:`molt.governance.redaction.lexicon`: first and last names of ~80 locales,
   world cities, regions and countries, street and company suffixes, English word frequencies);
2. capitalisation: a run of capitalised words not at a sentence start is an entity candidate,
   and a common English word ("Please", "Monday") is not a name;
3. context: "from / in / near X" → place; "Mr / Dr / name is X" → person; "X Inc / X LLC",
   "works at X", "X office" → organisation;
4. address grammar: house number + street (``221B Baker Street``, ``Hochstrasse 96``,
   ``40 rue Victor Hugo``), unit (``Apt. 4``, ``Suite 200``, ``P.O. Box 12``), city, region code,
   postcode, country. A one-line address is one span; an address laid out one part per line is
   emitted part by part (street, unit, city as LOCATION, country as LOCATION, postcode).

Registered as detector ``entities``.
"""

from __future__ import annotations

import re

from molt.governance.redaction.base import Span, detectors
from molt.governance.redaction.lexicon import Lexicon, fold, get_lexicon

__all__ = ["EntityDetector"]

_TOKEN = re.compile(r"[^\W\d_]+(?:['’\-][^\W\d_]+)*\.?|\d+[^\W_]*|\n|[^\w\s]")
_SENT_END = frozenset(
    {".", "!", "?", "\n", ":", ";", '"', "“", "”", ">", "*", "•", "(", "[", "|", "-", "…", "#"}
)
_CONNECTORS = frozenset(
    {"van", "der", "den", "de", "da", "das", "do", "dos", "del", "della", "di", "du", "la", "le", "von",
     "zu", "ter", "ten", "bin", "ibn", "al", "el", "y", "e", "st"}
)  # fmt: skip
_PERSON_CUES = frozenset(
    {"mr", "mrs", "ms", "miss", "dr", "prof", "sir", "madam", "dear", "hi", "hello", "hey", "thanks",
     "mister", "named", "called", "name", "says", "said", "by", "with", "signed", "regards", "cc",
     "contact", "commenter", "tell", "ask", "meet", "met", "son", "daughter", "wife", "husband",
     "mother", "father", "brother", "sister", "friend", "partner", "colleague", "uncle", "aunt",
     "md", "phd", "jr", "sr"}
)  # fmt: skip
_PLACE_CUES = frozenset(
    {"in", "from", "to", "near", "at", "visit", "visiting", "visited", "city", "town", "village",
     "country", "across", "around", "outside", "inside", "toward", "towards", "via", "reach",
     "flew", "fly", "moved", "live", "lives", "living", "born", "arrived", "leaving", "left"}
)  # fmt: skip
_ORG_CUES = frozenset(
    {"works", "work", "working", "worked", "employed", "employer", "company", "firm", "joined",
     "join", "ceo", "cto", "founder", "founded", "hired", "acquired", "startup", "corporation",
     "organization", "organisation", "for", "at"}
)  # fmt: skip
_LOWER_PERSON_CUES = frozenset(
    {"said", "says", "to", "named", "him", "her", "me", "with", "commenter", "tell", "ask", "mr", "mrs",
     "ms", "dr", "dear", "hi", "hello", "hey", "thanks", "town", "is", "the", "by", "and", "but"}
)  # fmt: skip
_LOWER_PERSON_AFTER = frozenset({"is", "was", "has", "had", "said", "says", "spent", "just", "and", "can"})
_STRONG_PLACE_CUES = frozenset(
    {"in", "from", "near", "visit", "visiting", "visited", "city", "town", "village", "country", "across",
     "around", "outside", "inside", "toward", "towards", "via", "moved", "born", "arrived", "live", "lives"}
)  # fmt: skip
_ORG_AFTER = frozenset(
    {"office", "offices", "headquarters", "hq", "team", "employees", "staff", "inc", "ltd"}
)
_ORG_WORDS = frozenset(
    {"inc", "llc", "ltd", "plc", "corp", "corporation", "company", "co", "group", "gmbh", "ag", "sa",
     "bv", "nv", "llp", "lp", "holdings", "partners", "associates", "foundation", "institute",
     "university", "bank", "technologies", "technology", "solutions", "systems", "labs", "consulting",
     "services", "industries", "international", "enterprises", "ventures", "capital", "media",
     "insurance", "energy", "logistics", "pharmaceuticals", "networks", "software", "association",
     "society", "council", "agency", "department", "ministry", "sons", "brothers", "report", "club"}
)  # fmt: skip
_STREET_WORDS = frozenset(
    {"street", "st", "avenue", "ave", "road", "rd", "boulevard", "blvd", "lane", "ln", "drive", "dr",
     "court", "ct", "place", "pl", "square", "sq", "terrace", "way", "parkway", "pkwy", "highway",
     "hwy", "circle", "cir", "crescent", "close", "row", "alley", "trail", "path", "walk", "plaza",
     "grove", "gardens", "hill", "heights", "creek", "park", "ridge", "view", "mews", "loop",
     "crossing", "expressway", "freeway", "turnpike", "pike", "wharf", "quay", "esplanade", "str"}
)  # fmt: skip
_STREET_PREFIXES = frozenset(
    {"rue", "via", "viale", "calle", "avenida", "av", "rua", "travessa", "largo", "piazza", "corso",
     "camino", "carrera", "plaza", "paseo", "boulevard", "bd", "allée", "chemin", "impasse", "place",
     "route", "quai", "ulica", "ul", "ulitsa", "pr", "prospekt", "strada", "vicolo", "rambla",
     "avinguda", "carrer", "sokak", "cadde", "jalan", "jl", "odos", "leoforos", "plateia", "postbox",
     "camiño", "rúa", "praça", "estrada", "alameda"}
)  # fmt: skip
_STREET_MORPHEMES = re.compile(
    r"(?:stra(?:ss|ß)e|str\.?|gasse|weg|vej|gade|laan|straat|plein|dreef|kade|steenweg|gata|gatan|"
    r"vägen|väg|veien|vei|gate|tie|katu|kuja|polku|utca|út|útja|u\.|allee|ring|platz|damm|ufer|"
    r"chaussee|markt|stieg|pfad|berg|hof|torget|torv|bakken|lunden|stræde|plads|huset|vegur|"
    r"ulica|iela|gatve|tänav|tee|põik|cesta|ulice|náměstí|sokak|caddesi|bulvar)$",
    re.IGNORECASE,
)
_UNIT_WORDS = frozenset(
    {
        "apt",
        "apartment",
        "suite",
        "ste",
        "unit",
        "flat",
        "floor",
        "fl",
        "room",
        "rm",
        "box",
        "po",
        "p.o",
        "bldg",
        "building",
        "dept",
        "psc",
        "cmr",
    }
)
_MILITARY = re.compile(
    r"\b(?:USNS|USNV|USS|USCGC|PSC|CMR|Unit)\b[^\n]{0,40}\n\s*(?:FPO|APO|DPO) (?:AA|AE|AP) \d{5}"
)
_POSTCODE = re.compile(r"^(?:\d{4,6}(?:-\d{4})?|[A-Z]{1,2}\d[A-Z\d]? ?\d[A-Z]{2})$")
_STATE_CODE = re.compile(r"^[A-Z]{2,3}$")
_MAX_ZIPF_NAME = 6.0  # a capitalised word this frequent in English ("Will", "Grant") needs more evidence


class _Tok:
    __slots__ = ("cap", "end", "f", "kind", "place", "start", "text")

    def __init__(self, text: str, start: int, end: int):
        self.text, self.start, self.end = text, start, end
        c = text[0]
        self.kind = "w" if c.isalpha() else "n" if c.isdigit() else "nl" if c == "\n" else "p"
        self.cap = self.kind == "w" and c.isupper()
        self.f = fold(text.rstrip(".")) if self.kind == "w" else text
        self.place: tuple[int, str] | None = None  # memo of EntityDetector._place_len


def _tokenize(text: str) -> list[_Tok]:
    toks = []
    for m in _TOKEN.finditer(text):
        t, s, e = m.group(), m.start(), m.end()
        if t[-1] == "." and t[0].isalpha():
            core = t[:-1]
            # keep the period only on short abbreviations (Dr., St., Apt., Inc.); else it ends a sentence
            if len(core) > 4 or fold(core) not in _ABBREVIATIONS:
                toks.append(_Tok(core, s, e - 1))
                toks.append(_Tok(".", e - 1, e))
                continue
        if len(t) > 2 and t[-2] in "'’" and t[-1] in "sS":
            toks.append(_Tok(t[:-2], s, e - 2))
            toks.append(_Tok("'s", e - 2, e))
            continue
        toks.append(_Tok(t, s, e))
    return toks


_ABBREVIATIONS = frozenset(
    {"dr", "mr", "mrs", "ms", "st", "apt", "inc", "ltd", "co", "corp", "jr", "sr", "ave", "rd",
     "blvd", "ste", "no", "p.o", "u", "str", "prof", "fl", "bldg", "mt", "ft", "av", "pl", "sq"}
)  # fmt: skip


class EntityDetector:
    """PERSON, LOCATION, ADDRESS and ORGANIZATION from lexicons, capitalisation and context."""

    name = "entities"
    entities = frozenset({"PERSON", "LOCATION", "ADDRESS", "ORGANIZATION"})

    def __init__(self, lexicon: Lexicon | None = None):
        self.lex = lexicon or get_lexicon()
        lx = self.lex
        self._street_suffix = _STREET_WORDS | {
            s for s in lx.street_suffixes if len(s) >= 4 and " " not in s and lx.zipf(s) < 4.5
        }
        self._street_prefix = _STREET_PREFIXES | {
            s for s in lx.street_prefixes if len(s) >= 3 and " " not in s and lx.zipf(s) < 4.0
        }

    # ------------------------------------------------------------------ lexicon helpers

    def _is_name(self, t: _Tok) -> bool:
        return t.f in self.lex.first_names or t.f in self.lex.last_names

    def _place_len(self, toks: list[_Tok], i: int) -> tuple[int, str]:
        """Longest known place starting at token ``i``: (tokens, kind) or (0, "")."""
        memo = toks[i].place
        if memo is None:
            memo = toks[i].place = self._place_scan(toks, i)
        return memo

    def _place_scan(self, toks: list[_Tok], i: int) -> tuple[int, str]:
        lx = self.lex
        best, kind = 0, ""
        words = []
        j = i
        while j < len(toks) and len(words) < lx.max_place_len:
            t = toks[j]
            if t.kind != "w" and not (t.kind == "p" and t.text in "-'" and words):
                break
            if t.kind == "w":
                words.append(t.f)
                if len(words) == 1 and lx.zipf(t.f) >= 4.0 and t.f not in lx.countries:
                    return 0, ""
                key = " ".join(words)
                if key in lx.countries:
                    best, kind = j - i + 1, "country"
                elif key in lx.cities or key in lx.regions:
                    best, kind = j - i + 1, "city"
            j += 1
        return best, kind

    def _common(self, t: _Tok) -> bool:
        """A frequent English word that is not (also) a name."""
        z = self.lex.zipf(t.f)
        return z >= 3.0 and not (self._is_name(t) and z < _MAX_ZIPF_NAME)

    # ------------------------------------------------------------------ detection

    def detect(self, text: str) -> list[Span]:
        """Entity spans in ``text``."""
        toks = _tokenize(text)
        if not toks:
            return []
        used = [False] * len(toks)
        out: list[Span] = []
        self._addresses(text, toks, used, out)
        self._names(toks, used, out)
        return out

    # ------------------------------------------------------------------ addresses

    def _street_at(self, toks: list[_Tok], i: int) -> int:
        """End index (exclusive) of a street address starting at token ``i`` (a number), or ``i``."""
        n = len(toks)
        j = i
        if toks[j].kind != "n":
            return i
        j += 1
        if j < n and toks[j].kind == "n":
            j += 1
        if j >= n or toks[j].kind != "w":
            return i
        # "NUM rue Victor Hugo [NUM]" / "NUM Via Carlo Cattaneo 130"
        if toks[j].f in self._street_prefix:
            k = j + 1
            while (
                k < n
                and k - j <= 6
                and (
                    toks[k].kind == "w"
                    and (toks[k].cap or toks[k].f in _CONNECTORS or toks[k].text.islower())
                )
            ):
                if toks[k].f in _UNIT_WORDS:
                    break
                k += 1
            if k < n and toks[k].kind == "n":
                k += 1
            return k if k > j + 1 else i
        # "NUM Words Street" / "NUM Words NUM"
        k = j
        while (
            k < n
            and k - j < 5
            and toks[k].kind == "w"
            and (toks[k].cap or toks[k].f in _CONNECTORS or toks[k].text.islower())
        ):
            if toks[k].f in _UNIT_WORDS and k > j:
                break
            if toks[k].f in self._street_suffix and k > j:
                k += 1
                if k < n and toks[k].text == ".":
                    k += 1
                return k
            k += 1
        if k < n and toks[k].kind == "n" and k > j:
            return k + 1
        if k > j and _STREET_MORPHEMES.search(toks[k - 1].text) and toks[k - 1].cap:
            return k
        return i

    def _street_no_number(self, toks: list[_Tok], i: int) -> int:
        """``Hochstrasse 96`` / ``Dózsa György út 78.`` / ``Gordon Street``: end index or ``i``."""
        n = len(toks)
        k = i
        while k < n and k - i < 4 and toks[k].kind == "w" and toks[k].cap:
            k += 1
            if (
                k < n
                and toks[k].kind == "w"
                and (_STREET_MORPHEMES.search(toks[k - 1].text) or toks[k - 1].f in ("u.", "út"))
            ):
                pass
            if _STREET_MORPHEMES.search(toks[k - 1].text) and k < n and toks[k].kind == "n":
                return k + 1
            if toks[k - 1].f in ("street", "avenue", "road", "boulevard", "lane", "drive") and k - 1 > i:
                return k
        return i

    def _unit_at(self, toks: list[_Tok], i: int) -> int:
        n = len(toks)
        if toks[i].kind != "w" or toks[i].f not in _UNIT_WORDS:
            return i
        j = i + 1
        if toks[i].f in ("p.o", "po") and j < n and toks[j].f == "box":
            j += 1
        if j < n and toks[j].text == ".":
            j += 1
        if j < n and toks[j].text == "#":
            j += 1
        if j < n and toks[j].kind == "n":
            j += 1
            if j + 1 < n and toks[j].f == "box" and toks[j + 1].kind == "n":
                j += 2
            return j
        return i

    def _addresses(self, text: str, toks: list[_Tok], used: list[bool], out: list[Span]) -> None:
        n = len(toks)
        for m in _MILITARY.finditer(text):
            out.append(Span(m.start(), m.end(), "ADDRESS", 0.85, self.name))
            for k, t in enumerate(toks):
                if m.start() <= t.start < m.end():
                    used[k] = True
        i = 0
        while i < n:
            if used[i]:
                i += 1
                continue
            t = toks[i]
            end = i
            lead = None
            if t.kind == "n":
                end = self._street_at(toks, i)
                if (
                    (end > i
                    and toks[i + 1].kind == "n")
                    or (
                        end > i
                        and toks[end - 1].kind == "n"
                        and end - i > 2
                        and self._lead_split(toks, i, end)
                    )
                ):
                    lead = i  # "19 2249 College Street": a building number before a full street address
            elif t.kind == "w" and t.cap:
                end = self._unit_at(toks, i)
                if end == i:
                    end = self._street_no_number(toks, i)
            if end == i:
                i += 1
                continue
            self._emit_address(text, toks, used, out, i, end, lead)
            i = end

    @staticmethod
    def _lead_split(toks: list[_Tok], i: int, end: int) -> bool:
        # NUM Word(s) NUM: only a split when the first NUM is short (a building/flat number)
        return len(toks[i].text) <= 3 and toks[i + 1].kind == "w"

    def _line_kind(self, toks: list[_Tok], a: int, b: int) -> str:
        """Classify tokens a..b (one line, no newline) of an address block."""
        words = [t for t in toks[a:b] if t.kind != "p" or t.text not in ",>"]
        if not words:
            return "empty"
        if self._unit_at(toks, a) == b or (self._unit_at(toks, a) > a and self._unit_at(toks, a) >= b - 1):
            return "unit"
        return "other"

    def _emit_address(
        self,
        text: str,
        toks: list[_Tok],
        used: list[bool],
        out: list[Span],
        i: int,
        end: int,
        lead: int | None,
    ) -> None:
        """Emit the address whose street (or unit) is tokens ``i..end``.

        Layouts decide the granularity: an address written inline with a postcode, unit or more
        lines is one span; a block laid out one part per line (an envelope or a signature) and a
        bare "street, City" are emitted part by part.
        """
        n = len(toks)
        j, last, rich = end, end, False
        while j < n and toks[j].kind != "nl":  # extend on the same line
            t = toks[j]
            if t.kind == "p":
                if t.text in ",-/#" or (t.text == "." and toks[j - 1].f in _ABBREVIATIONS):
                    j += 1
                    continue
                break
            if t.kind == "n":
                if _POSTCODE.match(t.text) or len(t.text) <= 5:
                    j += 1
                    last, rich = j, True
                    continue
                break
            u = self._unit_at(toks, j)
            if u > j:
                j = last = u
                rich = True
                continue
            place = self._place_len(toks, j)[0]
            if t.cap or t.f in _CONNECTORS or place or _STATE_CODE.match(t.text):
                if t.f in _ORG_WORDS or (self.lex.zipf(t.f) >= 4.5 and not place):
                    break
                if place and self._place_len(toks, j)[1] == "country":
                    rich = True
                j += 1
                last = j
                continue
            break
        multi = last < n and toks[last].kind == "nl" and self._continues(toks, last)
        line_initial = self._line_start(toks, lead if lead is not None else i)
        if multi and not line_initial:  # inline multi-line address: one span over its lines
            k = last
            while k < n and toks[k].kind == "nl" and self._continues(toks, k):
                a = k
                while a < n and toks[a].kind == "nl":
                    a += 1
                b = a
                while (
                    b < n
                    and toks[b].kind != "nl"
                    and not (
                        toks[b].kind == "p" and toks[b].text in ".?!;" and toks[b - 1].f not in _ABBREVIATIONS
                    )
                ):
                    if (
                        toks[b].kind == "w"
                        and not toks[b].cap
                        and self.lex.zipf(toks[b].f) >= 4.0
                        and toks[b].f not in _CONNECTORS
                    ):
                        break
                    b += 1
                if b == a:
                    break
                last = b
                if b < n and toks[b].kind != "nl":
                    break
                k = b
            self._span(toks, used, out, i, last, "ADDRESS", 0.75)
            return
        if not multi and rich:  # inline one-line address with postcode / unit / country
            self._span(toks, used, out, i, last, "ADDRESS", 0.75)
            return
        start_tok = i
        if lead is not None:
            self._span(toks, used, out, lead, lead + 1, "ADDRESS", 0.7)
            start_tok = lead + 1
        self._span(toks, used, out, start_tok, end, "ADDRESS", 0.75)
        if end < last:
            self._line_parts(toks, used, out, end, last)
        if not multi:
            return
        k, lines = last, 0
        while k < n and toks[k].kind == "nl" and lines < 6:
            while k < n and toks[k].kind == "nl":
                k += 1
            a = k
            while k < n and toks[k].kind != "nl":
                k += 1
            if a == k or not self._line_parts(toks, used, out, a, k):
                break
            lines += 1

    def _span(
        self, toks: list[_Tok], used: list[bool], out: list[Span], a: int, b: int, entity: str, score: float
    ) -> None:
        while b > a and toks[b - 1].kind == "p" and toks[b - 1].text != ".":
            b -= 1
        if b <= a:
            return
        out.append(Span(toks[a].start, toks[b - 1].end, entity, score, self.name))
        for k in range(a, b):
            used[k] = True

    @staticmethod
    def _line_start(toks: list[_Tok], i: int) -> bool:
        k = i - 1
        while k >= 0 and toks[k].kind == "p" and toks[k].text in ">*-•|":
            k -= 1
        return k < 0 or toks[k].kind == "nl"

    def _continues(self, toks: list[_Tok], nl: int) -> bool:
        k = nl
        while k < len(toks) and toks[k].kind == "nl":
            k += 1
        while k < len(toks) and toks[k].kind == "p" and toks[k].text in ">*-,":
            k += 1
        if k >= len(toks):
            return False
        t = toks[k]
        return (
            self._unit_at(toks, k) > k
            or t.cap
            or (t.kind == "n" and bool(_POSTCODE.match(t.text)))
            or self._place_len(toks, k)[0] > 0
        )

    def _rest_of_line(self, toks: list[_Tok], used: list[bool], out: list[Span], a: int, b: int) -> None:
        if a < b:
            self._line_parts(toks, used, out, a, b)

    def _line_parts(self, toks: list[_Tok], used: list[bool], out: list[Span], a: int, b: int) -> bool:
        """Emit the parts of one address line; False when the line is not part of an address."""
        k = a
        emitted = False
        while k < b:
            t = toks[k]
            if t.kind == "p":
                k += 1
                continue
            u = self._unit_at(toks, k)
            if u > k:
                out.append(Span(t.start, toks[u - 1].end, "ADDRESS", 0.75, self.name))
                k = u
                emitted = True
                continue
            if t.kind == "n":
                if not (_POSTCODE.match(t.text) or len(t.text) <= 5):
                    return emitted
                out.append(Span(t.start, t.end, "ADDRESS", 0.7, self.name))
                k += 1
                emitted = True
                continue
            if _STATE_CODE.match(t.text) and not self._place_len(toks, k)[0]:
                out.append(Span(t.start, t.end, "ADDRESS", 0.6, self.name))
                k += 1
                emitted = True
                continue
            if t.text == "nan":
                k += 1
                continue
            # a run of capitalised words / a known place → LOCATION
            j = k
            while (
                j < b
                and toks[j].kind == "w"
                and (toks[j].cap or toks[j].f in _CONNECTORS or self._place_len(toks, j)[0])
            ):
                j += 1
            if j == k:
                return emitted
            out.append(Span(t.start, toks[j - 1].end, "LOCATION", 0.7, self.name))
            k = j
            emitted = True
        for x in range(a, b):
            used[x] = True
        return emitted

    # ------------------------------------------------------------------ names, places, organisations

    def _names(self, toks: list[_Tok], used: list[bool], out: list[Span]) -> None:
        n = len(toks)
        i = 0
        lx = self.lex
        while i < n:
            t = toks[i]
            if used[i] or t.kind != "w":
                i += 1
                continue
            # the run: capitalised words (connectors inside), or a lowercase first+last name pair
            j = i
            if t.cap:
                while (
                    j < n
                    and not used[j]
                    and toks[j].kind == "w"
                    and (toks[j].cap or (toks[j].f in _CONNECTORS and j > i and self._connects(toks, j)))
                ):
                    j += 1
                    if (
                        j < n
                        and toks[j].text == "."
                        and len(toks[j - 1].text) <= 2
                        and toks[j - 1].text[0].isupper()
                    ):
                        j += 1  # an initial: "J. Smith"
            else:
                nxt = toks[i + 1] if i + 1 < n else None
                if (
                    t.f in lx.first_names
                    and lx.zipf(t.f) < 4.5
                    and nxt is not None
                    and nxt.kind == "w"
                    and not nxt.cap
                    and not used[i + 1]
                    and ((nxt.f in lx.last_names and lx.zipf(nxt.f) < 4.0) or lx.zipf(nxt.f) < 1.5)
                ):
                    j = i + 2
                else:
                    place, kind = self._place_len(toks, i)
                    if place and kind == "country" and self._prev_word(toks, i) in _PLACE_CUES:
                        out.append(Span(t.start, toks[i + place - 1].end, "LOCATION", 0.6, self.name))
                        i += place
                        continue
                    if (
                        self._is_name(t)
                        and lx.zipf(t.f) < 4.5
                        and (
                            self._prev_word(toks, i) in _LOWER_PERSON_CUES
                            or self._next_word(toks, i) in _LOWER_PERSON_AFTER
                        )
                    ):
                        out.append(Span(t.start, t.end, "PERSON", 0.55, self.name))
                    i += 1
                    continue
            run = [k for k in range(i, j) if toks[k].kind == "w"]
            self._classify(toks, run, out)
            i = max(j, i + 1)

    @staticmethod
    def _connects(toks: list[_Tok], j: int) -> bool:
        """Connectors ("van der") join a name only when a capitalised word follows them."""
        while j < len(toks) and toks[j].kind == "w" and toks[j].f in _CONNECTORS:
            j += 1
        return j < len(toks) and toks[j].cap

    @staticmethod
    def _next_word(toks: list[_Tok], i: int) -> str:
        k = i + 1
        while k < len(toks) and toks[k].kind == "p" and toks[k].text in "'\"":
            k += 1
        return toks[k].f if k < len(toks) and toks[k].kind == "w" else ""

    @staticmethod
    def _prev_word(toks: list[_Tok], i: int) -> str:
        k = i - 1
        while k >= 0 and toks[k].kind == "p" and toks[k].text in ",'\"":
            k -= 1
        return toks[k].f if k >= 0 and toks[k].kind == "w" else ""

    def _sentence_start(self, toks: list[_Tok], i: int) -> bool:
        k = i - 1
        while k >= 0 and toks[k].kind == "p" and toks[k].text in "'\"“‘(":
            k -= 1
        return k < 0 or toks[k].kind == "nl" or (toks[k].kind == "p" and toks[k].text in _SENT_END)

    def _classify(self, toks: list[_Tok], run: list[int], out: list[Span]) -> None:
        lx = self.lex
        # strip honorifics at the front ("Dr." stays outside the PERSON span), trailing connectors
        while run and toks[run[0]].f in lx.name_prefixes and toks[run[0]].f in _PERSON_CUES and len(run) > 1:
            run = run[1:]
        while run and toks[run[-1]].f in _CONNECTORS:
            run = run[:-1]
        if not run:
            return
        first, last = run[0], run[-1]
        at_start = self._sentence_start(toks, first)
        prev = self._prev_word(toks, first)
        nxt = toks[last + 1] if last + 1 < len(toks) else None
        nxt_word = nxt.f if nxt is not None and nxt.kind == "w" else ""
        start, end = toks[first].start, toks[last].end
        words = [toks[k] for k in run]
        # organisation: a company word at the end ("Acme Corp", "Smith Ltd."), or "X office"
        if words[-1].f in _ORG_WORDS or (words[-1].f in lx.company_suffixes and len(words) > 1):
            out.append(Span(start, end, "ORGANIZATION", 0.8, self.name))
            return
        # a sentence-initial common word is not an entity ("Please", "The"); drop it and go on
        if at_start and len(words) > 1 and self._common(words[0]) and not self._is_name(words[0]):
            self._classify(toks, run[1:], out)
            return
        place, kind = self._place_len(toks, first)
        if place == len(run):
            all_names = all(self._is_name(w) for w in words)
            if kind == "country" or prev in _STRONG_PLACE_CUES or (not all_names and prev != "at"):
                out.append(Span(start, end, "LOCATION", 0.75 if kind == "country" else 0.65, self.name))
                return
        if len(words) == 1 and (
            self._common(words[0]) or words[0].f in _STREET_WORDS or "'" in words[0].text
        ):
            return
        if all(w.text.isupper() and len(w.text) > 1 for w in words) and not any(
            self._is_name(w) for w in words
        ):
            return  # acronyms and shouting ("SSN", "CAN I SPEAK")
        names = sum(self._is_name(w) for w in words)
        if nxt_word in _ORG_AFTER or (prev in _ORG_CUES and prev not in ("at", "for") and not names):
            out.append(Span(start, end, "ORGANIZATION", 0.6, self.name))
            return
        if names:
            if all(self._common(w) for w in words) and prev not in _PERSON_CUES:
                return
            out.append(Span(start, end, "PERSON", 0.8 if names == len(words) else 0.7, self.name))
            return
        if at_start and prev not in _PERSON_CUES:
            if len(words) == 1 and self.lex.zipf(words[0].f) == 0 and nxt is not None and nxt.kind != "w":
                out.append(Span(start, end, "PERSON", 0.5, self.name))  # "Vittore, can I …"
            return
        if any(self._common(w) for w in words):
            return
        if prev == "at" or prev in _ORG_CUES:
            out.append(Span(start, end, "ORGANIZATION", 0.55, self.name))
            return
        if prev in _PLACE_CUES:
            out.append(Span(start, end, "LOCATION", 0.55, self.name))
            return
        out.append(Span(start, end, "PERSON", 0.55, self.name))


detectors.register("entities", EntityDetector)
