"""What the lexicons say about a word, for the entity rules: first name, last name, English
frequency, the kind of place a phrase names, and the word lists built from Faker (lorem words, job
titles), each looked up once and kept."""

from __future__ import annotations

import itertools
import re
from typing import Any

from molt.governance.redaction.entity_words import NAME_WORDS, WORLD_REGIONS, surname_shaped
from molt.governance.redaction.lexicon import Lexicon, fold

__all__ = ["RunWord", "WordFacts", "shared_memo"]


class RunWord:
    """One word of a run: offsets, surface text, folded key, and what the lexicons say about it.

    A plain class, not a NamedTuple: compiled, it is a native class built without a Python call
    (a NamedTuple's ``__new__`` is interpreted code), and every capitalised run builds a few.
    """

    __slots__ = ("common", "conn", "end", "f", "first", "foreign", "last", "start", "text", "z")

    def __init__(
        self,
        start: int,
        end: int,
        text: str,
        f: str,
        first: bool,
        last: bool,
        z: float,
        conn: bool,
        common: bool,
        foreign: bool,
    ) -> None:
        self.start = start
        self.end = end
        self.text = text
        self.f = f
        self.first = first  # a first name
        self.last = last  # a last name
        self.z = z  # English Zipf frequency
        self.conn = conn  # a lowercase connector ("van", "of", "and")
        self.common = common  # frequent English (Zipf ≥ 3) that is not (also) a name
        # the same for another European language ("Buongiorno", "Sie"): alone it is a word of
        # the sentence; beside a first name it may be a rare surname, so it weighs less
        self.foreign = foreign


class WordFacts:
    """Lexicon lookups shared by the entity detector and its rule modules."""

    def __init__(self, lx: Lexicon) -> None:
        self.lex = lx
        # what the lexicon says about a word depends on the lexicon alone, so every detector built
        # on the same lexicon shares one memo (a new Redactor does not look up every word again)
        self._info: dict[str, tuple[str, bool, bool, float]] = shared_memo(lx, "word_info")
        #: Whether no first name, last name or frequent word (English or other) of the lexicon holds
        #: an ASCII digit, so a word that holds one ("NW-686963", "SKU-4976") is none of them.
        self.digitless = _digitless(lx)
        #: First names that are also everyday English words ("will", "grace"): in lowercase text
        #: they need to be rare to count as names. Faker's English lorem vocabulary plus a list.
        self.name_words = NAME_WORDS | _lorem_words()
        # first word of every place name of two or more words -> the most words such a name has
        multi: dict[str, int] = {}
        for names in (lx.countries, lx.cities, lx.regions):
            for p in names:
                if " " in p:
                    head, n = p.split(" ", 1)[0], p.count(" ") + 1
                    if n > multi.get(head, 0):
                        multi[head] = min(n, 5)
        self.multi_first = multi
        #: Every folded word the lowercase promotion could act on (a name, a place, the first word
        #: of a place of several words): other words are passed over with one lookup. The value
        #: is the place kind (:meth:`place`), so a place is one lookup, not three.
        self.promotable = _promotable(lx, multi)
        #: Last words of job titles ("engineer", "coordinator"), from Faker's job list: a line of a
        #: signature that ends with one is the person's title, not their company.
        self.job_words = _job_words()

    def lookup(self, word: str) -> tuple[str, bool, bool, float]:
        info = self._info.get(word)
        if info is None:
            f = fold(word)
            if self.unlisted(f):
                # ids and codes, most of them seen once: answered without a probe, and not kept
                return (f, False, False, 0.0)
            lx = self.lex
            first, last, z = f in lx.first_names, f in lx.last_names, lx.zipf(f)
            if (first or last) and not word.isascii():
                cf = word.casefold()
                if cf != f and cf not in lx.name_spellings:
                    first = last = False  # "Está": accents no listed name is written with
            if f in lx.languages:
                first, last, z = False, False, max(z, 3.0)  # "French", "Swahili": a language, a word
            if not (first or last or z) and surname_shaped(f) and not self.place(f):
                last = True  # "Kolbenikova", "Thorgrimsdottir": built as surnames are, in no list
            info = (f, first, last, z)
            if len(self._info) > 200_000:
                self._info.clear()
            self._info[word] = info
        return info

    def unlisted(self, f: str) -> bool:
        """Whether the folded word ``f`` is in none of the name and word-frequency lists for sure:
        it holds an ASCII digit and no word of those lists does (:attr:`digitless`)."""
        # (most words are letters only, which no regex call is needed to tell)
        return self.digitless and not f.isalpha() and _ASCII_DIGIT.search(f) is not None

    def place(self, key: str) -> str:
        """``"country"``, ``"city"`` (cities and regions) or ``""`` for a folded phrase."""
        return self.promotable.get(key) or ""

    def country_level(self, phrase: str) -> bool:
        """Whether ``phrase`` names a country or a larger place (a continent, a world region, a
        union of countries: "Norway", "the EU", "Southeast Asia"); cities, regions inside a
        country, streets and addresses are not."""
        f = fold(phrase.strip().rstrip("."))
        if f.startswith("the "):
            f = f[4:]
        if f in WORLD_REGIONS:
            return True
        # the lexicon's countries hold a few fragments of longer names ("man" of "Isle of Man",
        # "el" of "El Salvador"); no country's name is shorter than four letters
        return len(f) >= 4 and self.place(f) == "country"

    def is_place_phrase(self, phrase: str) -> bool:
        f = fold(phrase)
        kind = self.place(f)
        if not kind:
            return False
        # a frequent English word that happens to be a small town ("March", "Union") needs a capital
        return kind == "country" or " " in f or self.lex.zipf(f) < 4.5 or phrase[:1].isupper()

    def is_common_word(self, word: str) -> bool:
        return self.lookup(word)[3] >= 3.5

    def compound(self, f: str) -> bool:
        """Two English words run together ("healthmap", "karmadata"): a typical brand name."""
        if len(f) < 7 or not f.isalpha():
            return False
        z = self.lex.zipf
        return any(z(f[:i]) >= 3.2 and z(f[i:]) >= 3.2 for i in range(3, len(f) - 2))

    def everyday_word(self, f: str) -> bool:
        """A first name that is as frequent as an everyday English word ("echo", "grace"): written
        in lowercase, it is that word unless a cue or a surname says otherwise. Zipf 4 (once in
        10^5 words), the bar :meth:`LowercaseText._promotes` uses for names too: popular first
        names are frequent in English text as names ("samantha" 3.75, "sara" 3.96), which alone
        does not make them words."""
        _f, first, last, z = self.lookup(f)
        return first and not last and z >= 4.0


_promotable_cache: list[tuple[Lexicon, dict[str, str]]] = []
_ASCII_DIGIT = re.compile("[0-9]")
_digitless_cache: list[tuple[Lexicon, bool]] = []


def _digitless(lx: Lexicon) -> bool:
    """Whether no key of the lexicon's first names, last names and word frequencies (English and
    other languages) holds an ASCII digit; checked once per lexicon (one scan of the joined keys)."""
    for known, found in _digitless_cache:
        if known is lx:
            return found
    found = not any(
        _ASCII_DIGIT.search("\n".join(words)) for words in (lx.first_names, lx.last_names, lx.word_zipf, lx.other_zipf)
    )
    _digitless_cache[:] = [(lx, found)]
    return found


_memos: list[tuple[Lexicon, dict[str, dict[str, Any]]]] = []


def shared_memo(lx: Lexicon, name: str) -> dict[str, Any]:
    """The memo ``name`` of word → fact for the lexicon ``lx``, one per lexicon and process: facts
    derived from the lexicon alone (a word's lookup, whether a capitalised word can be an entity at
    all) are the same for every detector built on it. Kept for the last lexicon asked about, like
    :func:`_promotable`; a detector holds on to the dicts it got, so another lexicon only stops
    the sharing. Each user bounds the memo's size itself."""
    memos: dict[str, dict[str, Any]] | None = None
    for known, found in _memos:
        if known is lx:
            memos = found
            break
    if memos is None:
        memos = {}
        _memos[:] = [(lx, memos)]
    memo = memos.get(name)
    if memo is None:
        memo = memos[name] = {}
    return memo


def _promotable(lx: Lexicon, multi: dict[str, int]) -> dict[str, str]:
    """Names, places and first words of multi-word places → ``"country"``, ``"city"`` (cities and
    regions) or ``""`` (not a place), built once per lexicon. A dict of strings, so the garbage
    collector never walks it (see :data:`~molt.governance.redaction.lexicon.WordSet`)."""
    for known, found in _promotable_cache:
        if known is lx:
            return found
    found = dict.fromkeys(itertools.chain(lx.first_names, lx.last_names, multi), "")
    found.update(dict.fromkeys(itertools.chain(lx.cities, lx.regions), "city"))
    found.update(dict.fromkeys(lx.countries, "country"))  # a country that is also a city is a country
    _promotable_cache[:] = [(lx, found)]
    return found


def _job_words() -> frozenset[str]:
    try:
        from faker.providers.job.en_US import Provider
    except ImportError:  # pragma: no cover - faker is part of the redaction extra
        return frozenset()
    return frozenset(fold(j.split(",")[0].split()[-1]) for j in Provider.jobs if j.strip())


def _lorem_words() -> frozenset[str]:
    try:
        from faker.providers.lorem.en_US import Provider
    except ImportError:  # pragma: no cover - faker is part of the redaction extra
        return frozenset()
    return frozenset(Provider.word_list)
