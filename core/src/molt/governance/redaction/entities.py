"""Lexicon-and-context detector for names, places, postal addresses and organisations.

A fast offline "model" for PERSON, LOCATION, ADDRESS and ORGANIZATION, with no neural network.
It is built so that the per-character work happens inside compiled regular expressions and
Python only sees candidates:

1. addresses (:mod:`~molt.governance.redaction.addresses`): a regex grammar anchored on house
   numbers, street words and units, extended part by part (unit, city, region, postcode, country);
2. capitalised runs: one regex finds every run of capitalised words ("Christine Sørensen",
   "Kostelec nad Orlicí", "Jones, Mitchell and Williams" is three runs joined by a rule); each run
   is split at connectors ("and", "of", "&") unless the whole is a known place or organisation,
   and each part is classified from packaged lexicons (first and last names of ~80 locales, world
   cities, regions and countries, English word frequencies — see
   :mod:`~molt.governance.redaction.lexicon`) and the words around it: "from / in X" → place,
   "Mr / Dr / name is X" → person, "X Inc / X Labs / the X office / X invested / at X" →
   organisation, brand-shaped words ("BioFlower", "Healthmap") → organisation;
3. text written all in lowercase (chat), where capitals carry no signal: words that are names or
   places in the lexicons are promoted to capitalised candidates and go through step 2; in mixed
   text a lowercase name is taken only after a strong cue ("my name is …", "hi …").

Registered as detector ``entities``.
"""

from __future__ import annotations

import itertools
import re
import threading
from bisect import bisect_right
from collections.abc import Iterable

from molt.governance.redaction.addresses import AddressFinder
from molt.governance.redaction.base import Span, detectors, text_key
from molt.governance.redaction.lexicon import Lexicon, fold, get_lexicon
from molt.governance.redaction.patterns import lowered

__all__ = ["EntityDetector"]

_UP = "".join(re.escape(chr(c)) for c in range(0x3000) if chr(c).isupper() or chr(c).istitle())
_WORD = rf"[{_UP}][^\W_]*(?:['’][^\W_]+)*(?:-[^\W_]+)*"
# capitalised words, joined by single spaces or by up to three short lowercase words ("van der",
# "and", "of the"); Python splits a run again at the lowercase words that do not belong in a name.
# No alternation at the start, so the scan for the first capital stays in C.
_RUN = re.compile(rf"{_WORD}(?:[ \t]{{1,2}}(?:[a-z&][a-z']{{0,4}}[ \t]{{1,2}}){{0,3}}{_WORD})*")
_FIRM_HEAD = re.compile(rf"({_WORD}), $")
# a list introduced as people ("our 3 founders: Eklund, Warren and Bailey") is not a firm's name
_PEOPLE_LIST = re.compile(
    r"\b(?i:founders|co-founders|cofounders|partners|owners|members|engineers|authors|children|kids|sons"
    r"|daughters|friends|brothers|sisters|siblings|parents|people|guests|speakers|winners|players)"
    r"[ ]?(?:were|are|is|was|:)?[ ]?:?[ ]*$"
)
_LOWER_CUES = (
    "name is", "name's", "i'm", "this is", "call me", "dear", "hi", "hello", "hey", "thanks", "thank you",
    "mr.", "mrs.", "ms.", "dr.", "ask for", "speak to", "speak with",
)  # fmt: skip
_LOWER_NAME = re.compile(r"[ ,:]+([a-z][a-z'’-]+)(?:[ ]([a-z][a-z'’-]+))?")
# (cue, its regex): the literal cue is tested first, since a text holds few of them
_LOWER_CUE_RXS = tuple((cue, re.compile(re.escape(cue) + r"(?=[ ,:]+[a-z])")) for cue in _LOWER_CUES)
# a line made only of capitalised words ("Northern Reflections", "Berkery Noyes Mandasoft")
_LINE_OF_WORDS = re.compile(rf"{_WORD}(?:[ ]{_WORD}){{0,5}}")
# A postcode named as one, in the languages of the locales Molt is used in (ZIP, postcode, PLZ,
# code postal, código postal, CAP, CEP, PIN code, kod pocztowy), in the formats of the postal
# systems that use them: US ZIP(+4), 4- to 6-digit codes, Polish 00-000, Swedish/Czech 000 00,
# Brazilian 00000-000, Dutch 0000 AA, British and Canadian alphanumeric codes.
_ZIP_HINTS = ("zip", "ostcode", "ostal", "ost code", "plz", "postleitzahl", "cap", "cep", "pin", "pocztowy")
_ZIP = re.compile(
    r"(?:(?i:\b(?:zip|postal|post)[ ]?code|\bpostcode|\bzip|\bplz|\bpostleitzahl|\bcode[ ]postal|\bc[óo]digo[ ]postal"
    r"|\bpin[ ]?code|\bkod[ ]pocztowy)|\bCAP\b|\bCEP\b)"  # CAP, CEP in capitals only ("cap" is a word)
    r"(?:[ ](?:is|was|of|ist|est|es|é|è))?[ ]*[:#]?[ ]*"
    r"(\d{5}-\d{3}(?![\w-])|\d{5}(?:-\d{4})?|\d{6}|\d{4}[ ]?[A-Z]{2}(?![\w-])|\d{4}|\d{2}-\d{3}|\d{3}[ ]\d{2}"
    r"|[A-Z]{1,2}\d[A-Z\d]?[ ]?\d[A-Z]{2}|[A-Z]\d[A-Z][ ]?\d[A-Z]\d)"
    r"(?![\w-])"
)
# a field that names an organisation, its value quoted (JSON) or bare up to the next field (logs)
_ORG_FIELDS = r"(?:company|company_name|employer|organi[sz]ation|merchant|merchant_name|vendor|supplier|firm)"
_ORG_FIELD_HINTS = ("company", "employer", "organi", "merchant", "vendor", "supplier", "firm")
_ORG_FIELD_QUOTED = re.compile(rf"(?<![\w-])[\"']{_ORG_FIELDS}[\"'][ ]?:[ ]?[\"']([^\"'\n]{{1,80}})[\"']")
_ORG_FIELD_BARE = re.compile(  # key=value: the value runs to the next key= ("merchant=Hayes, Taylor and Burton retry=2")
    rf"(?<![\w\"'-]){_ORG_FIELDS}[ ]?=[ ]?(?![\"' ])([^\n;=&|\"']{{1,80}}?)(?=[ ]+[\w.-]+=|[;&|\n]|$)"
)
_ORG_FIELD_COLON = re.compile(  # key: value, to the end of the clause
    rf"(?<![\w\"'-]){_ORG_FIELDS}[ ]?:[ ]?(?![\"' ])([^\n,;=&|\"']{{1,80}}?)(?=[ ]+[\w.-]+=|[,;&|\n]|$)"
)
# between two names of a list: ", word, word and " (items are single words)
_LIST_GAP = re.compile(r"(?:,[ ]|,?[ ]and[ ])(?:[^\W\d_][\w'’-]*(?:,[ ]|,?[ ]and[ ]))+")
_LIST_ITEM = re.compile(r"[^\W\d_][\w'’-]*")
_CASED_WORD = re.compile(rf"[{_UP}][^\W\d_]")  # a capital that starts a word of 2+ letters
_DIGIT = re.compile(r"\d")
_MEMO_SIZE = 50_000
_TWO_LETTERS = re.compile(r"[^\W\d_]{2}")
_LOWER_WORD = re.compile(r"[^\W\d_][^\W\d_'’-]*")
_CAMEL = re.compile(r"[a-z]{2}[A-Z][a-z]")
# an exception class by the naming convention of Python, Java, C# and JavaScript ("ValidationError",
# "KeyError", "TimeoutException", "DeprecationWarning"): a type in a traceback, not a company
_EXCEPTION_TYPE = re.compile(r"[A-Z][A-Za-z0-9]*(?:Error|Exception|Warning|Interrupt|Exit|Fault)")

# lowercase words a group of capitalised words may hold ("Trinidad and Tobago", "Bank of America")
_JOINERS = frozenset(
    {"van", "von", "der", "den", "de", "da", "das", "do", "dos", "del", "della", "di", "du", "la", "le", "les",
     "des", "zu", "ter", "ten", "bin", "ibn", "al", "el", "y", "e", "of", "the", "and", "&", "n'", "nad", "pod",
     "u", "upon", "on", "sur", "am", "an", "im", "i", "en", "'s"}
)  # fmt: skip
_DETERMINERS = frozenset({"the", "a", "an", "this", "that", "these", "those", "our", "your", "my", "their"})
# lowercase words that may stand inside a name ("Ludwig van Beethoven", "Maria da Silva")
_NAME_CONN = frozenset(
    {"van", "von", "der", "den", "de", "da", "das", "do", "dos", "del", "della", "di", "du", "la", "le", "les",
     "des", "zu", "ter", "ten", "bin", "ibn", "al", "el", "y", "e"}
)  # fmt: skip
_ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "mx", "dr", "prof", "st", "mt", "ft", "hon", "rev", "capt", "col", "gen", "lt", "sgt",
     "jr", "sr"}
)  # fmt: skip
_HONORIFICS = frozenset(
    {"mr", "mrs", "ms", "mx", "miss", "dr", "prof", "sir", "madam", "dame", "lord", "lady", "rev", "hon",
     "capt", "col", "gen", "lt", "sgt", "mister", "doctor", "professor"}
)  # fmt: skip
_NAME_SUFFIXES = frozenset({"jr", "sr", "md", "phd", "ii", "iii", "iv", "esq", "dds", "dvm", "rn"})
_PERSON_CUES = frozenset(
    {"mr", "mrs", "ms", "miss", "dr", "prof", "sir", "madam", "dear", "hi", "hello", "hey", "thanks",
     "mister", "named", "called", "name", "says", "said", "by", "with", "signed", "regards", "cc",
     "contact", "commenter", "tell", "ask", "meet", "met", "son", "daughter", "wife", "husband",
     "mother", "father", "brother", "sister", "friend", "partner", "colleague", "uncle", "aunt",
     "customer", "agent", "assistant", "manager", "is", "am", "i'm", "to", "from"}
)  # fmt: skip
_STRONG_PLACE_CUES = frozenset(
    {"in", "from", "near", "visit", "visiting", "visited", "city", "town", "village", "country", "across",
     "around", "outside", "inside", "toward", "towards", "via", "moved", "born", "arrived", "live", "lives",
     "living", "flew", "fly", "flight", "trip", "travel", "traveling", "travelling", "relocated", "based",
     "headquartered", "downtown",
     # the same prepositions in the other languages Molt's users write: "j'habite à Lyon",
     # "aus Köln", "nach Wien", "moro em Recife", "desde Sevilla", "depuis Nantes"
     "à", "aus", "nach", "em", "desde", "depuis"}
)  # fmt: skip
_PLACE_CUES = _STRONG_PLACE_CUES | {"to", "at", "reach", "leaving", "left", "through", "into", "toward"}
_ORG_CUES = frozenset(
    {"works", "work", "working", "worked", "employed", "employer", "company", "firm", "joined", "join",
     "ceo", "cto", "cfo", "founder", "founded", "hired", "acquired", "startup", "corporation", "vendor",
     "organization", "organisation", "became", "client", "supplier", "brand", "for", "at", "with", "by"}
)  # fmt: skip
_ORG_AFTER = frozenset(
    {"office", "offices", "headquarters", "hq", "employees", "staff", "shares", "stock", "invested", "acquired",
     "announced", "launched", "hired", "raised", "merged", "partnered", "manufactures", "sells", "employs",
     "reported", "filed", "ceo", "cto", "spokesperson", "spokesman", "spokeswoman", "board", "branch",
     "store", "stores", "subsidiary", "division", "inc", "ltd", "llc", "corp"}
)  # fmt: skip
# words before a run that make it an employer or a venue ("a year at X", "joined X")
_STRONG_ORG_CUES = frozenset({"at", "joined", "for", "employer", "client", "vendor", "supplier"})
# "the address / headquarters / CEO of X"
_OF_ORG = re.compile(
    r"(?i:address|headquarters|offices?|ceo|cto|cfo|founder|employees|staff|customers|subsidiary|shares)[ ]of[ ]+$"
)
# what a company has: "Acme's CEO", "Globex's shares"
_ORG_POSSESSIONS = frozenset(
    {"ceo", "cto", "cfo", "founder", "founders", "employees", "staff", "headquarters", "hq", "stock", "shares",
     "products", "customers", "clients", "website", "app", "platform", "board", "revenue", "subsidiary",
     "offices", "office", "factory", "brand", "stores"}
)  # fmt: skip
_COUNTRY_AFTER = re.compile(rf"[{_UP}][^\W\d_]+(?:[ ](?:and[ ]|of[ ](?:the[ ])?)?[{_UP}][^\W\d_]+){{0,3}}")
_AND_BEFORE = re.compile(rf"({_WORD})[ ]and[ ]$")
_AND_AFTER = re.compile(rf"[ ]and[ ]({_WORD})(?![\w'’-]|[ ]\d)")  # not "Ana and Hraunás 84": two streets
_ARRIVED_AT = re.compile(r"\b(?i:arrived|arrives|arriving|landed|lands|landing|stopped|stopping|born)[ ]at[ ]+$")
# "X is a company", "X was the brainchild of …": each of these nouns, then the verb phrase before it
_ORG_KINDS = (
    "brainchild", "501(c)", "company", "startup", "start-up", "nonprofit", "non-profit", "charity", "firm",
    "corporation", "manufacturer", "retailer", "brand", "organisation", "organization", "agency", "foundation",
    "subsidiary", "conglomerate",
)  # fmt: skip
_IS_A = re.compile(
    r"[ ](?:is|was)[ ](?:a|an|the)[ ](?:[\w-]+[ ]){0,2}?(?:"
    + "|".join(re.escape(k) for k in _ORG_KINDS)
    + r")(?![a-z-])"
)  # matched on lowercased text
# the subject before it: one to five words from the start of a sentence or clause
_SUBJECT = re.compile(r"(?:^|(?<=[.!?:][ ])|(?<=\n)|(?<=, ))([^\W_][\w&'’.-]*(?:[ ][^\W_][\w&'’.-]*){0,4})$")
# a list introduced as people: the noun before a colon, then the items after it
_PEOPLE_NOUNS = frozenset(
    {"founders", "co-founders", "cofounders", "partners", "owners", "members", "authors", "children", "kids",
     "sons", "daughters", "friends", "siblings", "guests", "speakers", "winners", "players"}
)  # fmt: skip
_PEOPLE_ITEMS = re.compile(r"[ ]+([^\W\d_][\w'’-]*(?:,[ ][^\W\d_][\w'’-]*){0,8},?[ ](?i:and|or)[ ][^\W\d_][\w'’-]*)")
# "the datamyne office": the words between "the" and the office
_THE_WORDS = re.compile(r"\bthe[ ]([a-z][\w&'’-]*\.?(?:[ ][a-z][\w&'’-]*\.?){0,3})$")
_NOT_A_SUBJECT = frozenset(
    {"he", "she", "it", "they", "we", "i", "you", "this", "that", "there", "what", "which", "who", "the", "a",
     "an", "my", "our", "his", "her", "their", "its", "your", "one", "each", "every", "here"}
)  # fmt: skip
# verbs whose subject is a person ("Gayane shouted at …", "Xenophon said")
_PERSON_VERBS = frozenset(
    {"said", "says", "shouted", "asked", "asks", "told", "tells", "replied", "replies", "answered", "smiled",
     "laughed", "cried", "whispered", "yelled", "nodded", "wrote", "writes", "thinks", "thought", "feels", "felt",
     "grew", "married", "lives", "lived", "sings", "sang", "studied", "graduated"}
)  # fmt: skip
# verbs that follow a company as their subject ("Canon invested heavily")
_ORG_VERBS = frozenset(
    {"invested", "acquired", "announced", "launched", "hired", "merged", "partnered", "manufactures", "sells",
     "employs"}
)  # fmt: skip
# head nouns that end an organisation's name ("Wolfram Research", "Castle Biosciences")
_ORG_NOUNS = frozenset(
    {"inc", "incorporated", "llc", "ltd", "limited", "plc", "corp", "corporation", "company", "co", "group",
     "gmbh", "ag", "sa", "sas", "sarl", "srl", "spa", "bv", "nv", "oy", "ab", "as", "asa", "llp", "lp",
     "pty", "holdings", "holding", "partners", "associates", "foundation", "institute", "university",
     "college", "academy", "school", "bank", "technologies", "technology", "tech", "solutions", "systems",
     "labs", "lab", "laboratories", "consulting", "consultants", "research", "services", "industries",
     "international", "enterprises", "ventures", "capital", "media", "insurance", "energy", "logistics",
     "pharmaceuticals", "pharma", "therapeutics", "biosciences", "bioscience", "biotech", "networks",
     "software", "analytics", "robotics", "dynamics", "electronics", "motors", "airlines", "airways",
     "communications", "telecom", "entertainment", "studios", "studio", "pictures", "records",
     "publishing", "press", "news", "association", "society", "council", "committee", "commission",
     "agency", "authority", "department", "ministry", "bureau", "federation", "union", "league", "club",
     "sons", "brothers", "bros", "report", "trust", "fund", "investments", "realty", "properties",
     "construction", "engineering", "manufacturing", "works", "brands", "products", "designs",
     "interactive", "digital", "games", "apps", "app", "data", "cloud", "health", "healthcare",
     "medical", "clinic", "hospital", "pharmacy", "foods", "restaurants", "hotels", "resorts", "airport",
     "movers", "maintenance", "appraisals", "unlimited", "supplies", "supply", "store", "stores",
     "market", "markets", "traffic", "exchange", "partnership", "cooperative", "coop", "collective",
     "co-op", "outfitters", "mart", "depot", "express", "wholesale", "retail", "finance", "financial",
     "securities", "advisors", "advisers", "management", "marketing", "global", "worldwide", "board",
     "institution", "museum", "library", "church", "orchestra"}
)  # fmt: skip
# "University of X", "Bank of X": the part before "of" names an organisation
_ORG_BEFORE_OF = frozenset(
    {"university", "bank", "institute", "department", "ministry", "college", "school", "museum", "society",
     "association", "board", "council", "academy", "federation", "union", "league", "office", "bureau",
     "commission", "court", "church", "hospital", "library", "seeds", "friends", "house", "order"}
)  # fmt: skip
_STREET_WORDS = frozenset(
    {"street", "st", "avenue", "ave", "road", "rd", "boulevard", "blvd", "lane", "ln", "drive", "court",
     "place", "square", "terrace", "way", "parkway", "highway", "circle", "crescent", "close", "alley"}
)  # fmt: skip
_NOT_STREET_TYPES = frozenset(
    {"upper", "vermont", "magazine", "lights", "edge", "corner", "reach", "rise", "ride", "strip", "steps", "towers",
     "stairs", "slope", "pocket", "madras", "formation", "extension", "entrance", "divide", "deviation", "approach",
     "retreat", "reserve", "camp", "cutting", "distributor", "elbow", "gap", "dip", "pad", "quad", "ramp", "spur"}
)  # fmt: skip
_NAME_WORDS = frozenset(
    str.split(
        """mark grace rose jack frank dawn june april august joy faith lily daisy ivy violet ruby amber crystal
    penny sky river chase grant hunter miles drew dean gene ray rich rob sue pat max sandy rusty buck bud
    cliff glen heath holly iris jade pearl robin sage storm autumn winter spring royal king earl duke prince
    major price ward law bishop sterling fisher baker cook hope will may bill art guy page summer young"""
    )
)
# identifiers that name a kind of PII, not a person ("My IBAN is …")
_KEYWORDS = frozenset(
    {"iban", "ssn", "cvv", "cvc", "pin", "otp", "dob", "api", "url", "id", "ip", "email", "atm", "zip", "postal",
     "postcode"}
)  # fmt: skip
_POSSESSIVE_DETERMINERS = frozenset({"my", "your", "his", "her", "its", "our", "their", "this", "these", "those"})
# the speakers of a transcript ("Bot: …", "User: …"): roles, not people
_ROLES = frozenset(
    {"bot", "chatbot", "user", "assistant", "system", "agent", "customer", "human", "operator", "moderator", "admin"}
)
_CONTRACTION = re.compile(r"['’](?:m|re|ve|ll|d|t)$|^I['’]", re.IGNORECASE)
# never an entity alone: months and weekdays are dates ("in March"), not places or people
_DATE_WORDS = frozenset(
    {"january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
)  # fmt: skip
# what a person makes: "the Fry novel", "the Leah Holmberg version"
_WORKS = frozenset(
    {"novel", "novels", "book", "books", "film", "films", "movie", "movies", "song", "songs", "album", "albums",
     "poem", "poems", "play", "biography", "memoir", "version", "recording", "painting", "paintings",
     "portrait", "symphony", "opera", "sonata", "trilogy", "saga", "essay", "documentary", "biopic", "quote"}
)  # fmt: skip
_SENT_END = frozenset('.!?\n:;"“”>*•([|-…#')
_QUOTES = " \t'\"“‘’”(["
_BRAND_END = ("ly", "ify", "io", "hq", "sy", "co", "com", "x", "ix")


class _W:
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


class EntityDetector:
    """PERSON, LOCATION, ADDRESS and ORGANIZATION from lexicons, capitalisation and context."""

    name = "entities"
    entities = frozenset({"PERSON", "LOCATION", "ADDRESS", "ORGANIZATION"})

    def __init__(self, lexicon: Lexicon | None = None):
        self.lex = lexicon or get_lexicon()
        lx = self.lex
        extra_types = frozenset(  # Faker's street suffixes, less names and frequent words
            s for s in lx.street_suffixes
            if len(s) >= 3 and s.isalpha() and s not in lx.first_names and s not in lx.last_names
            and lx.zipf(s) < 4.5 and s not in _NOT_STREET_TYPES
        )  # fmt: skip
        # Faker's street prefixes ("Vereda", "Cañada", "Rodovia"), one word, less names and frequent
        # words; and its street types that are no English word, which the Romance languages write
        # before the name ("Piazza Smirnoff", "Borgo Detti")
        extra_prefixes = frozenset(
            s for s in lx.street_prefixes
            if len(s) >= 3 and s.isalpha() and s not in lx.first_names and lx.zipf(s) < 4.5
            and s not in _NOT_STREET_TYPES
        ) | frozenset(s for s in extra_types if lx.zipf(s) < 3.5)  # fmt: skip
        self._addresses = AddressFinder(self._is_place_phrase, self._is_common_word, extra_types, extra_prefixes)
        self._info: dict[str, tuple[str, bool, bool, float]] = {}
        self._word_facts: dict[str, tuple[int, str, str, bool, bool, float, bool, bool, bool, bool]] = {}
        #: First names that are also everyday English words ("will", "grace"): in lowercase text
        #: they need to be rare to count as names. Faker's English lorem vocabulary plus a list.
        self._name_words = _NAME_WORDS | _lorem_words()
        # first word of every place name of two or more words -> the most words such a name has
        multi: dict[str, int] = {}
        for names in (lx.countries, lx.cities, lx.regions):
            for p in names:
                if " " in p:
                    head, n = p.split(" ", 1)[0], p.count(" ") + 1
                    if n > multi.get(head, 0):
                        multi[head] = min(n, 5)
        self._multi_first = multi
        #: Every folded word the lowercase promotion could act on (a name, a place, the first word
        #: of a place of several words): other words are passed over with one lookup. The value
        #: is the place kind (:meth:`_place`), so a place is one lookup, not three.
        self._promotable = _promotable(lx, multi)
        #: Last words of job titles ("engineer", "coordinator"), from Faker's job list: a line of a
        #: signature that ends with one is the person's title, not their company.
        self._job_words = _job_words()
        self._legal = _legal_form_rx(lx.legal_forms)
        self._skip: dict[str, int] = {}
        self._memo: dict[tuple[int, int], tuple[tuple[int, int, str, float], ...]] = {}
        #: Entries kept in the run memo (0 turns it off).
        self.memo_size = _MEMO_SIZE
        # per thread: set by a rule that looked beyond the memo key's context
        self._local = threading.local()

    # ------------------------------------------------------------------ lexicon helpers

    def _lookup(self, word: str) -> tuple[str, bool, bool, float]:
        info = self._info.get(word)
        if info is None:
            f = fold(word)
            lx = self.lex
            info = (f, f in lx.first_names, f in lx.last_names, lx.zipf(f))
            if len(self._info) > 200_000:
                self._info.clear()
            self._info[word] = info
        return info

    def _place(self, key: str) -> str:
        """``"country"``, ``"city"`` (cities and regions) or ``""`` for a folded phrase."""
        return self._promotable.get(key) or ""

    def _is_place_phrase(self, phrase: str) -> bool:
        f = fold(phrase)
        kind = self._place(f)
        if not kind:
            return False
        # a frequent English word that happens to be a small town ("March", "Union") needs a capital
        return kind == "country" or " " in f or self.lex.zipf(f) < 4.5 or phrase[:1].isupper()

    def _is_common_word(self, word: str) -> bool:
        return self._lookup(word)[3] >= 3.5

    def _compound(self, f: str) -> bool:
        """Two English words run together ("healthmap", "karmadata"): a typical brand name."""
        if len(f) < 7 or not f.isalpha():
            return False
        z = self.lex.zipf
        return any(z(f[:i]) >= 3.2 and z(f[i:]) >= 3.2 for i in range(3, len(f) - 2))

    def _plural_noun(self, w: _W) -> bool:
        """A capitalised plural of an English word ("Hobbits") that is no name and no place."""
        f = w.f
        return (
            len(f) > 4 and f[-1] == "s" and f[-2] != "s" and not (w.first or w.last)
            and self.lex.zipf(f[:-1]) >= 3.0 and not self._place(f)
        )  # fmt: skip

    def _brandlike(self, w: _W) -> bool:
        t = w.text
        if _CAMEL.search(t) and not t.startswith(("Mc", "Mac", "O'", "De", "Di", "La", "Le", "Van", "Von")):
            return True
        if not t.isalpha() and any(c.isdigit() for c in t):  # (no character is both)
            return True
        return not (w.first or w.last) and w.z == 0 and self._compound(w.f)

    # ------------------------------------------------------------------ detection

    def detect(self, text: str) -> list[Span]:
        """Entity spans in ``text``."""
        lowercase = _CASED_WORD.search(text) is None
        source = text
        if lowercase:
            source = self._promote_lowercase(text)
        elif "\n\n" in text:  # paragraphs (a redacted event's fields) written all in lowercase
            source = self._promote_paragraphs(text)
        any_lower = lowercase or source is not text
        out: list[Span] = []
        blocked: list[tuple[int, int]] = []
        block_at = -1
        if _DIGIT.search(text) is not None or "orner of" in text:
            for a in self._addresses.find(text, any_lower):
                if a.parts:
                    if block_at < 0:
                        block_at = a.start
                    for s, e, kind in a.parts:
                        out.append(Span(s, e, "LOCATION" if kind == "place" else "ADDRESS", 0.8, self.name))
                else:
                    out.append(Span(a.start, a.end, "ADDRESS", 0.8, self.name))
                    if block_at < 0 and a.start and _line_start(text, a.start):
                        block_at = a.start  # an address on a line of its own: a letterhead may be above
                blocked.append((a.start, a.end))
            blocked = _merged(blocked)
        skip = self._skip
        for m in _RUN.finditer(source):
            s, e = m.span()
            if s and (source[s - 1].isalnum() or source[s - 1] in "_'’-@./\\"):
                continue  # a capital inside a word, an identifier or a path
            word = m.group()
            if " " not in word:  # one word: most are sentence starts ("The", "Please", "I")
                drop = skip.get(word)
                if drop is None:
                    drop = skip[word] = self._never_entity(word)
                if drop == 1 or (drop == 2 and _next_word(source, e)[0] not in _ORG_VERBS):
                    continue
            if blocked:
                s, e = _outside(blocked, s, e)
                if e <= s:
                    continue
            self._run_memoised(source, s, e, out)
        if " " in text:
            self._lowercase_names(text, blocked, out)
        if any(h in lowered(text) for h in _ZIP_HINTS):
            for m in _ZIP.finditer(text):  # a postcode named as one is part of an address
                if not _overlaps(blocked, m.start(1), m.end(1)):
                    out.append(Span(m.start(1), m.end(1), "ADDRESS", 0.8, self.name))
        if block_at > 0:
            self._letterhead(source, block_at, out)
        if len(out) >= 2 and ", " in text:
            self._name_list(source, out)
        if out and " and " in text:
            self._coordinated(source, out)
        if " is " in text or " was " in text:
            self._defined_orgs(text, out)
        if ":" in text:
            self._people_lists(text, out)
        if " office" in text or " headquarters" in text:
            self._offices(text, out)
        if self._legal is not None and not lowercase:
            self._legal_orgs(source, out)
        if "=" in text or ":" in text:
            low = lowered(text)
            if any(k in low for k in _ORG_FIELD_HINTS):
                self._org_fields(text, low, out)
        return out

    def _org_fields(self, text: str, low: str, out: list[Span]) -> None:
        """The value of a field named for an organisation ("company": "Kuhl", merchant=Diaz), in a
        log line or a JSON document written as text, is an organisation whatever its words are; it
        wins over a person or a place read in it."""
        if len(low) != len(text):
            return
        for rx in (_ORG_FIELD_QUOTED, _ORG_FIELD_BARE, _ORG_FIELD_COLON):
            for m in rx.finditer(low):
                a, b = m.span(1)
                value = text[a:b].rstrip(" .")
                b = a + len(value)
                if not any(c.isalpha() for c in value) or "@" in value or "://" in value:
                    continue
                if rx is not _ORG_FIELD_QUOTED and not text[a].isupper():
                    continue  # "our company: we sell shoes" is prose, not a field
                if any(s.start < a < s.end or s.start < b < s.end for s in out if s.entity_type == "ADDRESS"):
                    continue
                out[:] = [s for s in out if s.end <= a or s.start >= b]
                out.append(Span(a, b, "ORGANIZATION", 0.8, self.name))

    def _legal_orgs(self, text: str, out: list[Span]) -> None:
        """A name followed by a company's legal form ("Malena Leon Pazos S.A.", "Mitoraj Sp. z o.o.
        Sp.k.", "Cavalcante e Filhos") is an organisation, whatever its words are on their own: it
        wins over the person or place read in it, and a span that ran into it from before keeps only
        its part before the firm's name, classified again ("Leyre Mancebo" of "Leyre Mancebo de
        Jiménez & Asociados S.L.U.")."""
        assert self._legal is not None
        for m in self._legal.finditer(text):
            k = m.start(1)
            head = _FIRM_NAME.search(text, max(0, k - 80), k)
            if head is None:
                continue
            a, b = head.start(), m.end(1)
            a = self._firm_start(text, a, k)
            keep: list[Span] = []
            again: list[tuple[int, int]] = []
            for sp in out:
                if sp.end <= a or sp.start >= b:
                    keep.append(sp)
                elif sp.start < a:
                    again.append((sp.start, a))
            for s0, e0 in again:
                words = text[s0:e0].split()
                while words and words[-1].casefold() in _PARTICLES:
                    words.pop()
                if words:
                    e1 = text.index(words[-1], s0) + len(words[-1])
                    self._run(text, s0, e1, keep)
            keep.append(Span(a, b, "ORGANIZATION", 0.85, self.name))
            out[:] = keep

    def _people_lists(self, text: str, out: list[Span]) -> None:
        """Every item of a list introduced as people ("our 3 founders: Kovalev, Lee and Phillips"),
        in any case, is a person; an item read as a place or an organisation is overruled."""
        k = text.find(":")
        while k > 0:
            if text[k - 1].isalpha() and _word_before(text, k) in _PEOPLE_NOUNS:
                m = _PEOPLE_ITEMS.match(text, k + 1)
                if m is not None:
                    self._people_items(text, m.start(1), m.end(1), out)
            k = text.find(":", k + 1)

    def _people_items(self, text: str, a0: int, b0: int, out: list[Span]) -> None:
        for item in _LIST_ITEM.finditer(text, a0, b0):
            a, b = item.span()
            f, _first, _last, z = self._lookup(item.group())
            if f in ("and", "or") or z >= 4.5:
                continue
            if any(s.start < b and a < s.end and (s.start < a or s.end > b) for s in out):
                continue
            out.append(Span(a, b, "PERSON", 0.85, self.name))

    def _offices(self, text: str, out: list[Span]) -> None:
        """Organisations named as "the datamyne office", "the morningstar inc. headquarters" in text
        without capitals: the words before the office name one when a word is no frequent English."""
        for noun in (" office", " headquarters"):
            k = text.find(noun)
            while k >= 0:
                m = _THE_WORDS.search(text, max(0, k - 60), k)
                k = text.find(noun, k + 1)
                if m is None:
                    continue
                a, b = m.span(1)
                if any(s.start < b and a < s.end for s in out):
                    continue
                words = [self._lookup(w.rstrip(".")) for w in m.group(1).split(" ")]
                if any(z < 3.0 and not first for _f, first, _last, z in words):
                    out.append(Span(a, b, "ORGANIZATION", 0.6, self.name))

    def _defined_orgs(self, text: str, out: list[Span]) -> None:
        """The subject of "X is a company / a startup / the brainchild of …" is an organisation,
        in any case ("recargo is the brainchild of …"); it wins over a name read in it."""
        low = lowered(text)
        if len(low) != len(text):
            return
        for word in (" is ", " was "):
            k = low.find(word)
            while k >= 0:
                verb = _IS_A.match(low, k)
                k = low.find(word, k + 1)
                if verb is None:
                    continue
                m = _SUBJECT.search(text, max(0, verb.start() - 80), verb.start())
                if m is None:
                    continue
                a, b = m.span(1)
                words = m.group(1).split(" ")
                if words[0].casefold() in _NOT_A_SUBJECT or all(self._lookup(w)[3] >= 4.0 for w in words):
                    continue
                if any(s.start < b and a < s.end and (s.start < a or s.end > b) for s in out):
                    continue  # crosses a span found otherwise (an address, a longer name)
                out.append(Span(a, b, "ORGANIZATION", 0.9, self.name))

    def _coordinated(self, text: str, out: list[Span]) -> None:
        """A capitalised word no lexicon knows, joined by "and" to a person, is a person too
        ("Sigursteinsson and Dean were …"); not before a house number ("Ana and Hraunás 84")."""
        persons = [s for s in out if s.entity_type == "PERSON"]
        for p in persons:
            for m in (
                _AND_BEFORE.search(text, max(0, p.start - 40), p.start),
                _AND_AFTER.match(text, p.end),
            ):
                if m is None:
                    continue
                a, b = m.span(1)
                if a and (text[a - 1].isalnum() or text[a - 1] in "_'’-@./\\"):
                    continue
                f, _first, _last, z = self._lookup(m.group(1))
                if z or self._place(f) or any(s.start < b and a < s.end for s in out):
                    continue
                out.append(Span(a, b, "PERSON", 0.55, self.name))

    def _name_list(self, text: str, out: list[Span]) -> None:
        """The other items of a list of names ("they had 6: natalina, thomas, crystal and omar"):
        between two names of a list, a lone word that is a first name or no frequent English word
        is a name too."""
        persons = sorted((s for s in out if s.entity_type == "PERSON"), key=lambda s: s.start)
        for a, b in itertools.pairwise(persons):
            gap = text[a.end : b.start]
            if not 4 <= len(gap) <= 60 or "\n" in gap:
                continue
            m = _LIST_GAP.fullmatch(gap)
            if m is None:
                continue
            for w in _LIST_ITEM.finditer(gap):
                _f, first, last, z = self._lookup(w.group())
                if first or last or z < 3.5:
                    out.append(Span(a.end + w.start(), a.end + w.end(), "PERSON", 0.6, self.name))

    def _letterhead(self, text: str, block_at: int, out: list[Span]) -> None:
        """The lines just above an address block laid out one part per line (a signature, an
        envelope): a line of capitalised words that is not a person, a place or a job title is the
        organisation's name ("Helen Földesy / Northern Reflections / PSC 7580, Box 2412")."""
        end = text.rfind("\n", 0, block_at)
        for _ in range(4):
            if end <= 0:
                return
            start = text.rfind("\n", 0, end) + 1
            line_start = start
            while start < end and text[start] in " \t>*•?-":
                start += 1
            m = _LINE_OF_WORDS.fullmatch(text, start, end)
            if m is None:
                if start < end:
                    return  # the block above the address ends at a line that is not a name
                end = line_start - 1
                continue
            if not any(sp.start < end and start < sp.end for sp in out):
                words = [self._lookup(w) for w in m.group().split(" ")]
                place = self._place(" ".join(w[0] for w in words))
                if not (place or words[0][1] or words[-1][0] in self._job_words) and (
                    len(words) > 1 or words[0][3] < 3.5
                ):
                    out.append(Span(start, end, "ORGANIZATION", 0.6, self.name))
            end = line_start - 1

    def _never_entity(self, word: str) -> int:
        """Whether a single capitalised word can be skipped without classifying it: 1 when no rule
        would take it (a letter, a month, frequent English that is neither a name nor a place:
        "The", "Please"), 2 when only a company verb after it would ("Deloitte invested"), else 0."""
        low = word.casefold()
        if _EXCEPTION_TYPE.fullmatch(word) is not None and low not in ("error", "exception", "warning"):
            return 1
        if len(word) == 1 or low in _DATE_WORDS or low in _KEYWORDS or low in _ROLES or _CONTRACTION.search(word):
            return 1
        if word.isupper():
            return 0  # acronyms: "at BBC"
        if "-" in word and self._slug(word):
            return 1
        f, first, last, z = self._lookup(word)
        if z >= 3.0 and not (first or last) and not self._place(f) and f not in _ORG_NOUNS:
            return 1 if z >= 4.2 else 2  # 2: unless a company verb follows ("Deloitte invested")
        return 0

    def _firm_start(self, text: str, a: int, k: int) -> int:
        """Where the firm's name in ``text[a:k]`` starts: after its last "and" / "y" / "e" when that
        joins it to another name, not within it — a list ("Healthmap, Solarlist and Morningstar
        Inc.") or a firm before ("Underwood Group and Spikes Cavell & Co.")."""
        words = text[a:k].split(" ")
        listed = text[max(0, a - 2) : a] == ", "
        pos = a
        start = a
        for i, w in enumerate(words):
            if 0 < i < len(words) - 1 and w in _COORDINATORS:
                before = fold(words[i - 1])
                if listed or before in _ORG_NOUNS or before in self.lex.company_suffixes:
                    start = pos + len(w) + 1
            pos += len(w) + 1
        return start

    def _slug(self, word: str) -> bool:
        """An identifier written with hyphens ("Pinecrest-help", "Order-status"): a lowercase part
        after the first is a frequent English word, which no name's or place's part is ("Georges-sur-
        Mer", "Stratford-upon-Avon" join with particles; "Jean-Pierre" is capitalised)."""
        for part in word.split("-")[1:]:
            if len(part) >= 3 and part.islower() and part not in _JOINERS:
                _f, first, last, z = self._lookup(part)
                if z >= 3.0 and not (first or last):
                    return True
        return False

    # ------------------------------------------------------------------ lowercase text

    def _promote_lowercase(self, text: str) -> str:
        """``text`` with lexicon names and places capitalised (same length), for all-lowercase input.
        A place of several words ("united arab emirates") is promoted word by word when it follows a
        place cue or holds a word that is not frequent English."""
        promotable = self._promotable
        if text.isascii() and promotable.keys().isdisjoint(_LOWER_WORD.findall(text.lower())):
            return text  # no word any lexicon holds (ASCII words fold to their lowercase): nothing to do
        words = [(m.start(), m.end(), m.group()) for m in _LOWER_WORD.finditer(text)]
        chars = None
        prev = ""
        skip_to = -1
        for i, (_s, e, w) in enumerate(words):
            if i < skip_to:
                continue
            if text[e : e + 1] in ("'", "’"):
                prev = w
                continue  # "don't", "i'll": contractions, not names
            f = fold(w)
            if f not in promotable or f in _KEYWORDS:
                prev = f
                continue
            span = self._multiword_place(words, i, f, prev)
            if span:
                promote_to = i + span
            elif prev not in _POSSESSIVE_DETERMINERS and self._promotes(w, prev):  # not "your boss"
                promote_to = i + 1
                if i + 1 < len(words) and self._surname_after(text, words[i], words[i + 1]):
                    promote_to = i + 2
                elif (
                    self._everyday_word(f)
                    and prev not in _PERSON_CUES
                    and prev not in _PLACE_CUES
                    and not (i + 1 < len(words) and words[i + 1][0] == words[i][1] + 1
                             and (self._lookup(words[i + 1][2])[2] or words[i + 1][2] in _PERSON_VERBS))
                ):  # fmt: skip
                    prev = f  # "echo the prompt", "call the echo tool": a word, until a cue says a name
                    continue
            else:
                prev = f
                continue
            for j in range(i, promote_to):
                s2, _e2, w2 = words[j]
                up = w2[0].upper()
                if len(up) == 1 and (j == i or w2 not in _JOINERS):
                    if chars is None:
                        chars = list(text)
                    chars[s2] = up
            skip_to = promote_to
            prev = f
        return text if chars is None else "".join(chars)

    def _multiword_place(self, words: list[tuple[int, int, str]], i: int, f: str, prev: str) -> int:
        """Words in a known place of two or more words starting at ``words[i]`` (folded ``f``), or 0."""
        longest = self._multi_first.get(f, 0)
        if not longest:
            return 0
        for k in range(min(longest, len(words) - i), 1, -1):
            if words[i + k - 1][0] - words[i][1] > 4 * k:  # the words must be adjacent
                continue
            key = " ".join(fold(w) for _s, _e, w in words[i : i + k])
            if self._place(key) and (
                prev in _PLACE_CUES or any(self._lookup(w)[3] < 4.5 for _s, _e, w in words[i : i + k])
            ):
                return k
        return 0

    def _promote_paragraphs(self, text: str) -> str:
        """``text`` with the paragraphs that have no capitalised word promoted (same length)."""
        parts = text.split("\n\n")
        changed = False
        for k, para in enumerate(parts):
            if para.isalpha():  # one word (most JSON values): promote it or leave it, no scan
                if para.islower() and self._promotes(para, ""):
                    parts[k] = para[0].upper() + para[1:] if len(para[0].upper()) == 1 else para
                    changed = changed or parts[k] is not para
                continue
            # a paragraph without two letters in a row ("2025-01-03T13:04:11Z") has no word to promote
            if _CASED_WORD.search(para) is None and _TWO_LETTERS.search(para) is not None:
                promoted = self._promote_lowercase(para)
                changed = changed or promoted is not para
                parts[k] = promoted
        return "\n\n".join(parts) if changed else text

    def _promotes(self, word: str, prev: str) -> bool:
        """Whether a lowercase word counts as a capitalised name or place candidate."""
        f, first, last, z = self._lookup(word)
        if f in _KEYWORDS or f in _ROLES:
            return False
        kind = self._place(f)  # (a country that is also a city passes as a country whenever as a city)
        return bool(
            ((first or last) and z < 4.0)
            or (first and z < 5.6 and f not in self._name_words)  # "john", "marie" but not "will"
            or (z < 4.0 and kind == "city" and len(f) > 3)
            or (kind == "country" and (prev in _PLACE_CUES or z < 4.5))
        )

    def _everyday_word(self, f: str) -> bool:
        """A first name that is as frequent as an everyday English word ("echo", "grace"): written
        in lowercase, it is that word unless a cue or a surname says otherwise."""
        _f, first, last, z = self._lookup(f)
        return first and not last and z >= 3.5

    def _surname_after(self, text: str, word: tuple[int, int, str], nxt: tuple[int, int, str]) -> bool:
        """Whether ``nxt`` is the surname of the lowercase first name ``word``: right after it, and
        a word English does not use (no frequent word, no keyword)."""
        if nxt[0] != word[1] + 1 or text[word[1]] != " " or not self._lookup(word[2])[1]:
            return False
        f, _first, _last, z = self._lookup(nxt[2])
        return z < 2.5 and len(f) > 1 and f not in _KEYWORDS and f not in _JOINERS and nxt[2].isalpha()

    def _lowercase_names(self, text: str, blocked: list[tuple[int, int]], out: list[Span]) -> None:
        """Lowercase names after a strong cue ("my name is john smith"), in cased text or not."""
        low = lowered(text)
        if len(low) != len(text):  # a few capitals lowercase to two characters; offsets would shift
            return
        for cue, cue_rx in _LOWER_CUE_RXS:  # each a literal, so the scan for it stays in C
            if cue not in low:
                continue
            for c in cue_rx.finditer(low):
                k = c.start()
                if k and low[k - 1].isalpha():
                    continue
                m = _LOWER_NAME.match(text, c.end())
                if m is None:
                    continue
                f, first, last, z = self._lookup(m.group(1))
                if not (first or last) or (z >= 4.5 and not (first and z < 6.0 and f not in self._name_words)):
                    continue
                a, b = m.span(1)
                if m.group(2) is not None:
                    f2, first2, last2, z2 = self._lookup(m.group(2))
                    if ((last2 or first2) and z2 < 5.5) or (z2 == 0 and f2 not in _KEYWORDS):
                        b = m.end(2)  # a known name, or a word English does not use: the surname
                if not _overlaps(blocked, a, b):  # a strong cue: wins over a shorter run span
                    out.append(Span(a, b, "PERSON", 0.85, self.name))

    # ------------------------------------------------------------------ capitalised runs

    def _words(self, text: str, s: int, e: int) -> list[_W]:
        out = []
        pos = s
        facts = self._word_facts
        for raw in text[s:e].split():
            i = text.index(raw, pos)
            pos = i + len(raw)
            known = facts.get(raw)
            if known is None:
                known = self._facts(raw)
            n, word, f, first, last, z, conn, common, foreign, possessive = known
            out.append(_W(i, i + n, word, f, first, last, z, conn, common, foreign))
            if possessive:  # "Cynthia Vasala's Cautionary Tales": the name ends at the possessive
                out.append(_W(i + n, i + len(raw), "'s", "'s", False, False, 0.0, True, False, False))
        return out

    def _facts(self, raw: str) -> tuple[int, str, str, bool, bool, float, bool, bool, bool, bool]:
        """What the lexicons say about one word of a run, kept per word (no text around it)."""
        conn = raw[0].islower() or raw == "&"
        word = raw
        possessive = not conn and len(word) > 2 and word[-2] in "'’" and word[-1] in "sS"
        if possessive:
            word = word[:-2]
        f, first, last, z = self._lookup(word.rstrip("."))
        common = z >= 3.0 and not ((first or last) and z < 6.0)
        # frequent in another European language and no name ("Buongiorno", "Betrag"); a name that
        # is also a very frequent word there stays a name ("Hans", "André", "Sie" too)
        foreign = not (common or first or last) and f in self.lex.other_zipf
        facts = self._word_facts
        if len(facts) > 200_000:
            facts.clear()
        known = facts[raw] = (len(word), word, f, first, last, z, conn, common, foreign, possessive)
        return known

    def _run_memoised(self, text: str, s: int, e: int, out: list[Span]) -> None:
        """:meth:`_run`, memoised on the run and the words around it: agent traffic repeats the same
        product names, headings and phrases in the same places. Keys are digests
        (:func:`~molt.governance.redaction.base.text_key`; no text is kept); a run whose rules
        looked further than that context is not memoised."""
        if not self.memo_size:
            self._run(text, s, e, out)
            return
        prev = _prev_word(text, s)
        key = text_key(
            "\x1f".join((text[s:e], prev[0], prev[1], "," if prev[2] else "", *_next_word(text, e), text[e : e + 2]))
        )
        memo = self._memo
        hit = memo.get(key)
        if hit is not None:
            out.extend(Span(s + a, s + b, t, score, self.name) for a, b, t, score in hit)
            return
        n = len(out)
        local = self._local
        local.wide = False
        self._run(text, s, e, out)
        if local.wide or len(out) < n:
            return
        if len(memo) >= self.memo_size:
            memo.clear()
        memo[key] = tuple((x.start - s, x.end - s, x.entity_type, x.score) for x in out[n:])

    def _run(self, text: str, s: int, e: int, out: list[Span]) -> None:
        """Split a regex run into tight groups (capitalised words joined only by connectors such as
        "van", "and", "of"; other lowercase words end a group) and classify each."""
        words = self._words(text, s, e)
        group: list[_W] = []
        prev_word = ""
        for w in words:
            if w.conn and w.f not in _JOINERS:
                if group:
                    self._group(text, group, out)
                group = []
                prev_word = w.f
                continue
            group.append(w)
        if group:
            self._group(text, group, out)
        del prev_word

    def _group(self, text: str, words: list[_W], out: list[Span]) -> None:
        person_cue = False
        while words and words[0].f in _HONORIFICS:
            person_cue = True
            words = words[1:]
        while words and words[0].conn:
            words = words[1:]
        while words and words[-1].conn:
            words = words[:-1]
        if not words:
            return
        prev, prev_char, comma = _prev_word(text, words[0].start)
        if person_cue:
            prev = "mr"
        at_start = prev_char in _SENT_END or prev_char == ""
        if at_start and len(words) > 1 and words[0].f in _DETERMINERS:  # "The Wolfram Research version"
            prev, at_start = words[0].f, False
            words = words[1:]
        if len(words) > 1 and any(w.conn for w in words):
            # known places that hold connectors ("Trinidad and Tobago", "Kostelec nad Orlicí")
            if self._places_in(text, words, at_start, out):
                return
            if any(w.text in ("&", "n'") for w in words) or (
                any(w.f == "of" for w in words) and words[0].f in _ORG_BEFORE_OF
            ):
                out.append(Span(words[0].start, self._org_end(text, words), "ORGANIZATION", 0.75, self.name))
                return
        # "Jones, Mitchell and Williams": a firm named after three surnames
        if len(words) == 3 and words[1].f in ("and", "&") and words[0].last and words[2].last:
            self._local.wide = True
            m = _FIRM_HEAD.search(text, max(0, words[0].start - 40), words[0].start)
            if (
                m is not None
                and self._lookup(m.group(1))[2]
                and _PEOPLE_LIST.search(text, max(0, m.start(1) - 40), m.start(1)) is None
            ):
                if out and out[-1].start == m.start(1):
                    out.pop()
                out.append(Span(m.start(1), words[2].end, "ORGANIZATION", 0.75, self.name))
                return
        # split at connectors that do not belong inside a name ("Mary and John")
        seg: list[_W] = []
        seg_prev, seg_start, seg_comma = prev, at_start, comma
        for w in words:
            if w.conn and w.f not in _NAME_CONN:
                if seg:
                    self._classify(text, seg, seg_prev, seg_start, out, seg_comma)
                seg, seg_prev, seg_start, seg_comma = [], w.f, False, False
                continue
            seg.append(w)
        if seg:
            self._classify(text, seg, seg_prev, seg_start, out, seg_comma)

    def _places_in(self, text: str, words: list[_W], at_start: bool, out: list[Span]) -> bool:
        """Emit the group as one known place when it is one; True when it did."""
        if len(words) > 6:
            return False
        kind = self._place(" ".join(w.f for w in words))
        if kind and not (at_start and words[0].z >= 4.0 and kind != "country"):
            out.append(Span(words[0].start, words[-1].end, "LOCATION", 0.7, self.name))
            return True
        return False

    def _org_end(self, text: str, words: list[_W]) -> int:
        end = words[-1].end
        if end < len(text) and text[end] == "." and words[-1].f in ("inc", "corp", "co", "ltd", "bros"):
            end += 1
        return end

    def _classify(
        self, text: str, words: list[_W], prev: str, at_start: bool, out: list[Span], comma: bool = False
    ) -> None:
        """Classify one segment of a run. ``prev`` is the word before it, ``comma`` whether a comma
        stands between them (a vocative "…, Anna!" is not a place after "town")."""
        while words and words[-1].conn:
            words = words[:-1]
        if not words:
            return
        # name suffixes stay outside the span ("Andrew Turcotte MD")
        suffix = False
        while len(words) > 1 and words[-1].f in _NAME_SUFFIXES:
            words = words[:-1]
            suffix = True
        first, last = words[0], words[-1]
        start, end = first.start, last.end
        n = len(words)
        if prev == "at":
            self._local.wide = True  # looks two words back, beyond the run memo's key
            if _ARRIVED_AT.search(text, max(0, start - 24), start) is not None:
                prev = "in"  # "arrived at Mozirje", "landed at Needham": a place, not a venue or employer
        # "Sunday" split off "Sunday at Acme"; "Hobbits", "Vikings": plurals of words. A month that
        # closes a list of names is a name ("John, Evan and April").
        if (
            n == 1
            and (first.f in _DATE_WORDS or self._plural_noun(first))
            and not (first.first and prev in ("and", "or") and out and out[-1].entity_type == "PERSON")
        ):
            return
        nxt, nxt_char = _next_word(text, end)
        name = self.name
        # organisation: a company word at the end ("Acme Corp", "Wolfram Research")
        if (
            n > 1
            and (last.f in _ORG_NOUNS or last.f in self.lex.company_suffixes)
            and not suffix
            and not (at_start and n == 2 and first.common and not first.first)
        ):
            out.append(Span(start, self._org_end(text, words), "ORGANIZATION", 0.8, name))
            return
        kind = self._place(first.f if n == 1 else " ".join(w.f for w in words))
        if kind == "country" and nxt not in _ORG_AFTER:  # countries, sentence-initial ones too
            out.append(Span(start, end, "LOCATION", 0.75, name))
            return
        # a sentence-initial common word is not part of an entity ("Please", "The"); drop it
        if at_start and n > 1 and (((first.common or first.foreign) and not first.first) or first.z >= 6.0):
            self._classify(text, words[1:], first.f, False, out)
            return
        if n == 1 and at_start and (first.common or first.foreign) and nxt not in _ORG_VERBS:
            return
        if n == 1 and at_start and nxt_char == ":" and first.z >= 3.0 and not first.first:
            return  # a field label: "Date: 2007-03-23", "Name: …"
        if n > 1 and last.f in _STREET_WORDS and last.text[0].isupper() and last.f not in ("st", "dr"):
            out.append(Span(start, end, "ADDRESS", 0.6, name))  # "Gordon Street", no number
            return
        names = sum(1 for w in words if w.first or w.last)
        if nxt in _ORG_AFTER and prev == "the" and (n > 1 or not (kind or first.common)):  # "the Oliver Wyman office"
            out.append(Span(start, self._org_end(text, words), "ORGANIZATION", 0.7, name))
            return
        if prev in _STRONG_ORG_CUES and n > 1 and names < n and not at_start and not kind:
            out.append(Span(start, self._org_end(text, words), "ORGANIZATION", 0.6, name))  # "at New Media Parents"
            return
        if prev == "of":
            self._local.wide = True
        if prev == "of" and _OF_ORG.search(text, max(0, start - 30), start) and not first.first and not kind:
            out.append(Span(start, self._org_end(text, words), "ORGANIZATION", 0.6, name))  # "the address of SAP"
            return
        if (
            nxt in _ORG_AFTER
            and not (names == n and first.first and n > 1)
            and (not (n == 1 and first.common) or nxt in _ORG_VERBS)
        ):
            out.append(Span(start, self._org_end(text, words), "ORGANIZATION", 0.7, name))
            return
        if prev == "the" and nxt in _WORKS and kind != "country" and not any(w.common for w in words):
            out.append(Span(start, end, "PERSON", 0.6, name))  # "the Fry novel": its author
            return
        if prev in ("the", "a", "an") and n == 1:  # "the Reno warehouse"
            if kind and first.z >= 3.5:
                out.append(Span(start, end, "LOCATION", 0.6, name))
            elif first.last and not first.first:
                out.append(Span(start, end, "PERSON", 0.6, name))
            elif kind and first.f not in self.lex.small_towns:
                out.append(Span(start, end, "LOCATION", 0.6, name))
            return
        strong = prev in _STRONG_PLACE_CUES and not comma
        possessive = text.startswith(("'s", "’s"), end)
        if possessive and not first.first and not kind:
            after, _ = _next_word(text, end + 2)
            if after in _ORG_POSSESSIONS:  # "Acme's CEO", "Globex's employees"
                out.append(Span(start, end, "ORGANIZATION", 0.65, name))
                return
        if not first.first and text.startswith(", ", end):
            country = _COUNTRY_AFTER.match(text, end + 2)
            if country is not None and any(self._place(fold(p)) == "country" for p in _prefixes(country.group())):
                out.append(Span(start, end, "LOCATION", 0.65, name))  # "Sobeslav, Czech Republic"
                return
        # places: the whole segment is a known city or region (a lone small town needs a cue)
        if kind and (n > 1 or strong or first.f not in self.lex.small_towns):
            all_names = names == n
            if (strong or (not all_names and prev not in ("at", "for", "by") and (first.z < 4.5 or n > 1))) and not (
                n == 1 and first.z >= 4.5 and not strong
            ):
                out.append(Span(start, end, "LOCATION", 0.65, name))
                return
        # after "in / from / near …", what is not led by a first name is a place ("in TYSTBERGA")
        if strong and not first.first and not possessive and not any(w.common for w in words):
            if prev == "from" and n == 1 and not (first.last or first.z or first.text.isupper()):
                # a word no lexicon knows, not a shouted town: a company ("she is from Redfin"); the
                # place lexicons hold the world's towns, so an unknown one is the rarer reading
                out.append(Span(start, end, "ORGANIZATION", 0.55, name))
                return
            out.append(Span(start, end, "LOCATION", 0.6, name))
            return
        if n == 1 and (
            first.common
            or (first.foreign and prev not in _PERSON_CUES)
            or first.f in _STREET_WORDS
            or (first.text.isupper() and len(first.text) <= 5)
        ):
            if prev in ("at", "joined", "for") and first.text.isupper() and len(first.text) > 1 and not at_start:
                out.append(Span(start, end, "ORGANIZATION", 0.55, name))  # "at BBC"
            return
        if all(w.text.isupper() and len(w.text) > 1 for w in words) and not names:
            return  # acronyms and shouting ("SSN", "CAN I SPEAK")
        if names == 0 or (n == 1 and not first.first):
            # no first name: brand-shaped words, a hyphenated pair of surnames, or an org context
            if any(self._brandlike(w) for w in words) or (
                n == 1 and "-" in first.text and all(self._lookup(p)[2] for p in first.text.split("-") if p)
            ):
                out.append(Span(start, end, "ORGANIZATION", 0.65, name))
                return
            if (
                prev in _ORG_CUES
                and not at_start
                and not (prev in ("with", "by") and names)
                and (not any(w.common for w in words) or n > 1)
            ):
                out.append(Span(start, end, "ORGANIZATION", 0.6, name))
                return
        if n == 1 and prev not in _PERSON_CUES and nxt not in _PERSON_VERBS:
            # one of the hundred or so most frequent words of another language that is a name too
            # ("melden Sie sich": German "you"), with nothing saying it is a name here
            if self.lex.other_zipf.get(first.f, 0.0) >= 6.5:
                return
            # a frequent English word that is only a surname, with nothing saying it is one here:
            # "List the files", "Best regards", "call Echo"
            if not first.first and first.z >= 4.5:
                return
            # a word and a number: a pier, gate, room or model ("Pier 19", "Nimbus 2"), not a person
            if text[end : end + 1] == " " and text[end + 1 : end + 2].isdigit():
                return
        if names:
            common = [w for w in words if w.common and not (w.first or w.last or w.conn)]
            if common and prev not in _PERSON_CUES:
                return  # a product or a title ("Aurora Wireless Earbuds")
            if all(w.common or w.conn for w in words) and prev not in _PERSON_CUES:
                return
            # another language's words, one of them no name at all: "Sie den Betrag" (Sie: a name
            # too, but one of the most frequent German words)
            if (
                n > 1
                and any(w.foreign for w in words)
                and all(w.foreign or w.conn or self.lex.other_zipf.get(w.f, 0.0) >= 6.0 for w in words)
                and prev not in _PERSON_CUES
            ):
                return
            if n > 2 and not (first.first or first.last) and words[1].first:
                # a word no lexicon has as a name before a first name and a surname is what they
                # are ("Kontoinhaber Rebecca Trub": the account holder), not part of the name
                start = words[1].start
            out.append(Span(start, end, "PERSON", 0.8 if names == n else 0.7, name))
            return
        if at_start and prev not in _PERSON_CUES:
            if n == 1 and first.z == 0 and nxt in ("is", "was"):
                self._local.wide = True  # " is from " looks past the next word, beyond the memo's key
            if (
                n == 1
                and first.z == 0
                and (nxt_char in ",:!?" or nxt in _PERSON_VERBS or text.startswith((" is from ", " was from "), end))
            ):
                out.append(Span(start, end, "PERSON", 0.5, name))  # "Vittore, can I …", "Gayane shouted"
            return
        if any(w.common or w.foreign for w in words):
            return
        if text[end : end + 2][:1] == " " and text[end + 1 : end + 2].isdigit():
            return  # "Nimbus 2", "Pixel 10": a product and its model number
        if prev in _PLACE_CUES and prev not in ("to", "at") and not comma:
            out.append(Span(start, end, "LOCATION", 0.55, name))
            return
        out.append(Span(start, end, "PERSON", 0.55, name))


def _trie_pattern(words: list[str]) -> str:
    """A regex alternation of ``words`` as a trie (for "S.A.", "S.A.S." and "S.L." one "S", then a
    dot, then "A" or "L"): at each place the scan reaches, one character decides, not one try per
    word (a plain alternation of the ~150 legal forms tried each of them at every space)."""
    trie: dict[str, dict] = {}
    for w in words:
        node = trie
        for c in w:
            node = node.setdefault(c, {})
        node[""] = {}
    return _trie_node(trie)


def _trie_node(node: dict[str, dict]) -> str:
    optional = "" in node
    alts = [re.escape(c) + _trie_node(sub) for c, sub in sorted(node.items()) if c]
    if not alts:
        return ""
    body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
    if optional:
        return body + "?" if len(alts) == 1 and len(body) == 2 and body[0] == "\\" else f"(?:{body})?"
    return body


def _legal_form_rx(forms: Iterable[str]) -> re.Pattern[str] | None:
    """One or more legal forms after a word ("… Pazos S.A.", "… y asociados S.L.", "… Sp. z o.o.
    Sp.k."), as written; a form of several words led by a lowercase one ("e Filhos", "and Sons")
    in lowercase too, a dotted form without its last dot ("S.A" at a sentence's end)."""
    variants: set[str] = set()
    for f in forms:
        variants.add(f)
        if " " in f and f[:1].islower():
            variants.add(f.lower())
        if f.endswith(".") and "." in f[:-1]:
            variants.add(f[:-1])
    if not variants:
        return None
    trie = _trie_pattern(sorted(variants))
    # led by a capitalised word, so the scan only tries at capitals, not at every space (a third
    # of the time on typical events); group 1 is the forms with the space before them
    return re.compile(rf"[{_UP}][^\W_]*([ ](?:{trie})(?:[ ](?:{trie}))*)(?![^\W_])")


# the name a legal form follows: capitalised words, "&" and the words that join a firm's names
# ("Jiménez & Asociados", "Restauración del Levante", "Robledo y asociados"); a particle of a
# person's name ("de", "da", "van") is where it starts ("Octavio Oliver de Malena Pazos S.A.")
_FIRM_NAME = re.compile(rf"(?<![^\W_])(?:{_WORD})(?:[ ](?:{_WORD}|&|[yei]|et|and|und|og|del|of|the))*\Z")
_COORDINATORS = frozenset({"and", "y", "e", "i", "et", "und", "og"})
_PARTICLES = frozenset({"de", "da", "do", "dos", "das", "di", "del", "von", "van", "y", "e", "i", "et", "and", "&"})


_promotable_cache: list[tuple[Lexicon, dict[str, str]]] = []


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


def _word_before(text: str, k: int) -> str:
    """The folded word that ends at ``k``, skipping a "were" / "are" ("the founders were: …")."""
    j = k
    while j > 0 and (text[j - 1].isalpha() or text[j - 1] == "-"):
        j -= 1
    word = text[j:k].casefold()
    if word in ("were", "are") and j > 1 and text[j - 1] == " ":
        return _word_before(text, j - 1)
    return word


def _line_start(text: str, i: int) -> bool:
    """Whether only bullets and spaces stand between the line's start and ``i``."""
    j = text.rfind("\n", 0, i)
    return j >= 0 and not text[j + 1 : i].strip(" \t>*•?-")


def _prefixes(phrase: str) -> list[str]:
    """``"Czech Republic Today"`` → ``["Czech Republic Today", "Czech Republic", "Czech"]``."""
    words = phrase.split(" ")
    return [" ".join(words[:k]) for k in range(len(words), 0, -1)]


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


def _prev_word(text: str, i: int) -> tuple[str, str, bool]:
    """The folded word before position ``i`` (quotes and a comma skipped), the character that ends
    the gap before the run (``""`` at the start of the text), and whether a comma was skipped. An
    abbreviation or an initial before a dot ("Dr. Smith", "J. Smith") is the previous word, not a
    sentence end."""
    k = i - 1
    while k >= 0 and text[k] in _QUOTES:
        k -= 1
    if k < 0:
        return "", "", False
    comma = text[k] == ","
    if comma:
        k -= 1
        while k >= 0 and text[k] in _QUOTES:
            k -= 1
        if k < 0:
            return "", "", True
    dot = text[k] == "."
    if dot:
        k -= 1
    j = k
    while j >= 0 and (text[j].isalpha() or text[j] in "'’"):
        j -= 1
    if j == k:
        return "", text[k + 1] if dot else text[k], comma
    word = text[j + 1 : k + 1].casefold()
    if dot and not (word in _ABBREVIATIONS or (k == j + 1 and text[k].isupper())):
        return word, ".", comma
    return word, text[k], comma


def _next_word(text: str, i: int) -> tuple[str, str]:
    """The folded word after position ``i`` and the first non-space character there."""
    n = len(text)
    k = i
    while k < n and text[k] in " \t'\"’”":
        k += 1
    if k >= n:
        return "", ""
    j = k
    while j < n and text[j].isalpha():
        j += 1
    return text[k:j].casefold(), text[k]


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` sorted and with overlapping ones merged, so starts and ends both increase and the
    lookups below can bisect (a scan of every address per capitalised run was quadratic: a 1 MB
    text of addresses took seconds)."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a < out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _first_ending_after(spans: list[tuple[int, int]], s: int) -> int:
    """Index of the first of the (merged) ``spans`` that ends after ``s``."""
    i = bisect_right(spans, (s, s))
    return i - 1 if i and spans[i - 1][1] > s else i


def _overlaps(spans: list[tuple[int, int]], s: int, e: int) -> bool:
    """Whether ``[s, e)`` touches one of the (merged) ``spans``."""
    i = _first_ending_after(spans, s)
    return i < len(spans) and spans[i][0] < e


def _outside(spans: list[tuple[int, int]], s: int, e: int) -> tuple[int, int]:
    """The part of ``[s, e)`` before the first blocked span it touches, else after the last one."""
    i = _first_ending_after(spans, s)
    while i < len(spans):
        a, b = spans[i]
        if a >= e:
            break
        if a > s:
            return s, a
        s = b
        i += 1
    return s, e


detectors.register("entities", EntityDetector)
