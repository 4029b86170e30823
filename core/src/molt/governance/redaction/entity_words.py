"""The vocabulary of the entity detector: closed classes of words (honorifics, joiners, cue words
before and after a name, a place or an organisation, the head nouns of organisations' names), the
regexes of capitalised words and runs, and the legal forms of companies as one trie-shaped regex.

General language knowledge, not learned from any labelled set; :mod:`.entities` and its rule
modules (:mod:`.entity_lowercase`, :mod:`.entity_context`) share it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

UP = "".join(re.escape(chr(c)) for c in range(0x3000) if chr(c).isupper() or chr(c).istitle())
WORD = rf"[{UP}][^\W_]*(?:['’][^\W_]+)*(?:-[^\W_]+)*"
# capitalised words, joined by single spaces or by up to three short lowercase words ("van der",
# "and", "of the"); Python splits a run again at the lowercase words that do not belong in a name.
# No alternation at the start, so the scan for the first capital stays in C.
RUN = re.compile(rf"{WORD}(?:[ \t]{{1,2}}(?:[a-z&][a-z']{{0,4}}[ \t]{{1,2}}){{0,3}}{WORD})*")
FIRM_HEAD = re.compile(rf"({WORD}), $")
LOWER_CUES = (
    "name is", "name's", "i'm", "this is", "call me", "dear", "hi", "hello", "hey", "thanks", "thank you",
    "mr.", "mrs.", "ms.", "dr.", "ask for", "speak to", "speak with",
)  # fmt: skip
LOWER_NAME = re.compile(r"[ ,:]+([a-z][a-z'’-]+)(?:[ ]([a-z][a-z'’-]+))?")
# (cue, its regex): the literal cue is tested first, since a text holds few of them
LOWER_CUE_RXS = tuple((cue, re.compile(re.escape(cue) + r"(?=[ ,:]+[a-z])")) for cue in LOWER_CUES)
# a line made only of capitalised words ("Northern Reflections", "Berkery Noyes Mandasoft")
LINE_OF_WORDS = re.compile(rf"{WORD}(?:[ ]{WORD}){{0,5}}")
# A postcode named as one, in the languages of the locales Molt is used in (ZIP, postcode, PLZ,
# code postal, código postal, CAP, CEP, PIN code, kod pocztowy), in the formats of the postal
# systems that use them: US ZIP(+4), 4- to 6-digit codes, Polish 00-000, Swedish/Czech 000 00,
# Brazilian 00000-000, Dutch 0000 AA, British and Canadian alphanumeric codes.
ZIP_HINTS = ("zip", "ostcode", "ostal", "ost code", "plz", "postleitzahl", "cap", "cep", "pin", "pocztowy")
# the same for an ASCII text, where the lowered text is the one ZIP matches case-insensitively: a
# match holds one of these (lowered), or "CAP" / "CEP" in capitals; "pin" and "cap" alone are in
# "shipping" and "capture", which sent most texts of agent traffic through ZIP's scan for nothing
ZIP_HINTS_ASCII = ("zip", "ostcode", "ostal", "ost code", "plz", "postleitzahl", "pincode", "pin code", "pocztowy")
ZIP = re.compile(
    r"(?:(?i:\b(?:zip|postal|post)[ ]?code|\bpostcode|\bzip|\bplz|\bpostleitzahl|\bcode[ ]postal|\bc[óo]digo[ ]postal"
    r"|\bpin[ ]?code|\bkod[ ]pocztowy)|\bCAP\b|\bCEP\b)"  # CAP, CEP in capitals only ("cap" is a word)
    r"(?:[ ](?:is|was|of|ist|est|es|é|è))?[ ]*[:#]?[ ]*"
    r"(\d{5}-\d{3}(?![\w-])|\d{5}(?:-\d{4})?|\d{6}|\d{4}[ ]?[A-Z]{2}(?![\w-])|\d{4}|\d{2}-\d{3}|\d{3}[ ]\d{2}"
    r"|[A-Z]{1,2}\d[A-Z\d]?[ ]?\d[A-Z]{2}|[A-Z]\d[A-Z][ ]?\d[A-Z]\d)"
    r"(?![\w-])"
)
# a field that names an organisation, its value quoted (JSON) or bare up to the next field (logs)
ORG_FIELDS = r"(?:company|company_name|employer|organi[sz]ation|merchant|merchant_name|vendor|supplier|firm)"
ORG_FIELD_HINTS = ("company", "employer", "organi", "merchant", "vendor", "supplier", "firm")
ORG_FIELD_QUOTED = re.compile(rf"(?<![\w-])[\"']{ORG_FIELDS}[\"'][ ]?:[ ]?[\"']([^\"'\n]{{1,80}})[\"']")
ORG_FIELD_BARE = re.compile(  # key=value: the value runs to the next key= ("merchant=Hayes, Taylor and Burton retry=2")
    rf"(?<![\w\"'-]){ORG_FIELDS}[ ]?=[ ]?(?![\"' ])([^\n;=&|\"']{{1,80}}?)(?=[ ]+[\w.-]+=|[;&|\n]|$)"
)
ORG_FIELD_COLON = re.compile(  # key: value, to the end of the clause
    rf"(?<![\w\"'-]){ORG_FIELDS}[ ]?:[ ]?(?![\"' ])([^\n,;=&|\"']{{1,80}}?)(?=[ ]+[\w.-]+=|[,;&|\n]|$)"
)
# between two names of a list: ", word, word and " (items are single words)
LIST_GAP = re.compile(r"(?:,[ ]|,?[ ]and[ ])(?:[^\W\d_][\w'’-]*(?:,[ ]|,?[ ]and[ ]))+")
LIST_ITEM = re.compile(r"[^\W\d_][\w'’-]*")
CASED_WORD = re.compile(rf"[{UP}][^\W\d_]")  # a capital that starts a word of 2+ letters
DIGIT = re.compile(r"\d")
MEMO_SIZE = 50_000
TWO_LETTERS = re.compile(r"[^\W\d_]{2}")
LOWER_WORD = re.compile(r"[^\W\d_][^\W\d_'’-]*")
CAMEL = re.compile(r"[a-z]{2}[A-Z][a-z]")
# an exception class by the naming convention of Python, Java, C# and JavaScript ("ValidationError",
# "KeyError", "TimeoutException", "DeprecationWarning"): a type in a traceback, not a company
EXCEPTION_TYPE = re.compile(r"[A-Z][A-Za-z0-9]*(?:Error|Exception|Warning|Interrupt|Exit|Fault)")

# lowercase words a group of capitalised words may hold ("Trinidad and Tobago", "Bank of America")
JOINERS = frozenset(
    {"van", "von", "der", "den", "de", "da", "das", "do", "dos", "del", "della", "di", "du", "la", "le", "les",
     "des", "zu", "ter", "ten", "bin", "ibn", "al", "el", "y", "e", "of", "the", "and", "&", "n'", "nad", "pod",
     "u", "upon", "on", "sur", "am", "an", "im", "i", "en", "'s"}
)  # fmt: skip
DETERMINERS = frozenset({"the", "a", "an", "this", "that", "these", "those", "our", "your", "my", "their"})
# lowercase words that may stand inside a name ("Ludwig van Beethoven", "Maria da Silva")
NAME_CONN = frozenset(
    {"van", "von", "der", "den", "de", "da", "das", "do", "dos", "del", "della", "di", "du", "la", "le", "les",
     "des", "zu", "ter", "ten", "bin", "ibn", "al", "el", "y", "e"}
)  # fmt: skip
ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "mx", "dr", "prof", "st", "mt", "ft", "hon", "rev", "capt", "col", "gen", "lt", "sgt",
     "jr", "sr"}
)  # fmt: skip
HONORIFICS = frozenset(
    {"mr", "mrs", "ms", "mx", "miss", "dr", "prof", "sir", "madam", "dame", "lord", "lady", "rev", "hon",
     "capt", "col", "gen", "lt", "sgt", "mister", "doctor", "professor"}
)  # fmt: skip
NAME_SUFFIXES = frozenset({"jr", "sr", "md", "phd", "ii", "iii", "iv", "esq", "dds", "dvm", "rn"})
PERSON_CUES = frozenset(
    {"mr", "mrs", "ms", "miss", "dr", "prof", "sir", "madam", "dear", "hi", "hello", "hey", "thanks",
     "mister", "named", "called", "name", "says", "said", "by", "with", "signed", "regards", "cc",
     "contact", "commenter", "tell", "ask", "meet", "met", "son", "daughter", "wife", "husband",
     "mother", "father", "brother", "sister", "friend", "partner", "colleague", "uncle", "aunt",
     "customer", "agent", "assistant", "manager", "is", "am", "i'm", "to", "from"}
)  # fmt: skip
STRONG_PLACE_CUES = frozenset(
    {"in", "from", "near", "visit", "visiting", "visited", "city", "town", "village", "country", "across",
     "around", "outside", "inside", "toward", "towards", "via", "moved", "born", "arrived", "live", "lives",
     "living", "flew", "fly", "flight", "trip", "travel", "traveling", "travelling", "relocated", "based",
     "headquartered", "downtown",
     # the same prepositions in the other languages Molt's users write: "j'habite à Lyon",
     # "aus Köln", "nach Wien", "moro em Recife", "desde Sevilla", "depuis Nantes"
     "à", "aus", "nach", "em", "desde", "depuis"}
)  # fmt: skip
# places larger than a country, folded: continents, world regions, unions and trade areas, and the
# abbreviations countries go by ("EU", "UK", "USA"). With the countries of the lexicon they are
# the country-level places a policy may keep (see RedactionPolicy.keep_country_level_places).
WORLD_REGIONS = frozenset(
    {"africa", "antarctica", "asia", "europe", "oceania", "australasia", "eurasia", "americas", "the americas",
     "north america", "south america", "central america", "latin america", "middle east", "near east",
     "far east", "scandinavia", "nordics", "the nordics", "nordic countries", "baltics", "baltic states",
     "balkans", "the balkans", "benelux", "caribbean", "the caribbean", "maghreb", "levant", "the levant",
     "sub-saharan africa", "north africa", "west africa", "east africa", "central africa", "southern africa",
     "east asia", "south asia", "southeast asia", "south-east asia", "central asia", "western asia",
     "western europe", "eastern europe", "central europe", "northern europe", "southern europe",
     "asia-pacific", "asia pacific", "apac", "emea", "latam", "mena", "dach", "eu", "e.u", "european union",
     "eea", "european economic area", "schengen area", "eurozone", "euro area", "asean", "mercosur",
     "gulf states", "uk", "u.k", "usa", "u.s.a", "u.s", "uae", "prc", "drc"}
)  # fmt: skip
# first words that make a name of two or more words a place, never a person's name: compass
# points and the generic words of toponyms ("North Austin", "Lake Tahoe", "Port Louis", "Fort
# Worth", "Mount Vernon", "Saint-Étienne", "San José", "New Haven")
TOPONYM_LEADS = frozenset(
    {"north", "south", "east", "west", "northeast", "northwest", "southeast", "southwest", "upper", "lower",
     "lake", "port", "fort", "mount", "saint", "sainte", "san", "santa", "sankt", "new", "nieuw", "neu",
     "bad", "porto", "puerto", "villa", "ciudad"}
)  # fmt: skip
# greetings that open a message in the languages Molt's users write ("Olá, …", "Hola, …"): a word
# of the sentence, never a name, and a name may follow them. Written as they are spelt (compared
# with the word casefolded, accents kept): "Olá" is a greeting where "Ola" is a first name too, so
# greetings that are also first or last names ("Cara", "Dag", "Tere") are left out
GREETINGS = frozenset(
    {"hi", "hello", "hey", "hiya", "howdy", "greetings", "dear", "hola", "olá", "oi", "bonjour",
     "bonsoir", "salut", "coucou", "hallo", "servus", "moin", "grüezi", "gruezi", "ciao", "salve",
     "buongiorno", "buonasera", "hej", "hei", "heippa", "moi", "hoi", "ahoj", "cześć", "czesc", "witam",
     "dzień", "szia", "sziasztok", "merhaba", "selam", "sveiki", "zdravo", "здравствуйте",
     "привет", "γεια", "namaste", "salaam", "shalom", "aloha", "goedemorgen", "goedendag", "buenas",
     "buenos", "bom", "boa", "estimado", "estimada", "prezado", "prezada", "liebe", "lieber",
     "kære", "kæra", "hæ", "halló", "szervusz", "bună"}
)  # fmt: skip
# a greeting before a word says a name may follow ("Hola Marta")
PERSON_CUES = PERSON_CUES | GREETINGS
PLACE_CUES = STRONG_PLACE_CUES | {"to", "at", "reach", "leaving", "left", "through", "into", "toward"}
ORG_CUES = frozenset(
    {"works", "work", "working", "worked", "employed", "employer", "company", "firm", "joined", "join",
     "ceo", "cto", "cfo", "founder", "founded", "hired", "acquired", "startup", "corporation", "vendor",
     "organization", "organisation", "became", "client", "supplier", "brand", "for", "at", "with", "by"}
)  # fmt: skip
ORG_AFTER = frozenset(
    {"office", "offices", "headquarters", "hq", "employees", "staff", "shares", "stock", "invested", "acquired",
     "announced", "launched", "hired", "raised", "merged", "partnered", "manufactures", "sells", "employs",
     "reported", "filed", "ceo", "cto", "spokesperson", "spokesman", "spokeswoman", "board", "branch",
     "store", "stores", "subsidiary", "division", "inc", "ltd", "llc", "corp", "team", "account", "customers",
     # what only a company has or does after its name: its site and app, its owners and officers,
     # its listing ("Acme shareholders", "the Globex website", "Initech announces")
     "website", "app", "shareholders", "stockholders", "investors", "executives", "subsidiaries", "headquartered",
     "cfo", "coo", "chairman", "chairwoman", "cofounder", "co-founder", "ipo", "workforce", "acquires",
     "announces", "launches", "hires", "invests", "merges", "unveiled", "unveils", "subscription", "subscriptions",
     "membership"}
)  # fmt: skip
# words before a run that make it an employer or a venue ("a year at X", "joined X")
STRONG_ORG_CUES = frozenset({"at", "joined", "for", "employer", "client", "vendor", "supplier"})
# the words before a firm that no place or product follows as well: "joined X", "employer: X"
EMPLOYER_CUES = frozenset({"at", "joined", "employer", "client", "vendor", "supplier"})
# "the address / headquarters / CEO of X"
OF_ORG = re.compile(
    r"(?i:address|headquarters|offices?|ceo|cto|cfo|coo|founder|co-?founders?|founders|employees?|staff|customers?"
    r"|clients?|shareholders?|stockholders?|investors?|owners?|chairman|chairwoman|executives?|spokes(?:person|man|woman)"
    r"|subsidiary|subsidiaries|shares|website)[ ]of[ ]+$"
)
# "employed by X", "acquired by X", "works for X", "a contract with X": a firm after the verb phrase
ORG_BY = re.compile(
    r"\b(?:(?i:employed|acquired|owned|funded|sponsored|operated|bought|purchased|backed|insured|underwritten)[ ]by"
    r"|(?i:works?|worked|working|contracting|contractor|consultant|consulting)[ ]for"
    r"|(?i:contract|partnership|agreement|account|merger|subscription)[ ]with)[ ]+$"
)
# what a company has: "Acme's CEO", "Globex's shares"
ORG_POSSESSIONS = frozenset(
    {"ceo", "cto", "cfo", "founder", "founders", "employees", "staff", "headquarters", "hq", "stock", "shares",
     "products", "customers", "clients", "website", "app", "platform", "board", "revenue", "subsidiary",
     "offices", "office", "factory", "brand", "stores"}
)  # fmt: skip
COUNTRY_AFTER = re.compile(rf"[{UP}][^\W\d_]+(?:[ ](?:and[ ]|of[ ](?:the[ ])?)?[{UP}][^\W\d_]+){{0,3}}")
AND_BEFORE = re.compile(rf"({WORD})[ ]and[ ]$")
AND_AFTER = re.compile(rf"[ ]and[ ]({WORD})(?![\w'’-]|[ ]\d)")  # not "Ana and Hraunás 84": two streets
# "X is a company", "X was a software firm": each of these nouns, then the verb phrase before it
ORG_KINDS = (
    "501(c)", "company", "startup", "start-up", "nonprofit", "non-profit", "charity", "firm",
    "corporation", "manufacturer", "retailer", "brand", "organisation", "organization", "agency", "foundation",
    "subsidiary", "conglomerate",
)  # fmt: skip
IS_A = re.compile(
    r"[ ](?:is|was)[ ](?:a|an|the)[ ](?:[\w-]+[ ]){0,2}?(?:"
    + "|".join(re.escape(k) for k in ORG_KINDS)
    + r")(?![a-z-])"
)  # matched on lowercased text
# the same noun in an apposition: "Stackhaven, a startup based in Austin, …", "Initech, the software
# firm, …"; the noun ends the phrase or a participle or preposition follows it (not "a company director")
APPOSITION_ORG = re.compile(
    r",[ ](?:a|an|the)[ ](?:[\w-]+[ ]){0,2}?(?:"
    + "|".join(re.escape(k) for k in ORG_KINDS)
    + r")(?=[ ]?[,.;:)]|$|[ ](?:based|headquartered|founded|that|which|in|from|with|of|known|owned|backed|run)\b)"
)  # matched on lowercased text
# the name an apposition describes: the capitalised words right before its comma
APPOSED = re.compile(rf"(?<![^\W\d_])({WORD}(?:[ ](?:{WORD}|&|and|of|the)){{0,4}})$")
# the subject before it: one to five words from the start of a sentence or clause
SUBJECT = re.compile(r"(?:^|(?<=[.!?:][ ])|(?<=\n)|(?<=, ))([^\W_][\w&'’.-]*(?:[ ][^\W_][\w&'’.-]*){0,4})$")
# "the datamyne office": the words between "the" and the office
THE_WORDS = re.compile(r"\bthe[ ]([a-z][\w&'’-]*\.?(?:[ ][a-z][\w&'’-]*\.?){0,3})$")
NOT_A_SUBJECT = frozenset(
    {"he", "she", "it", "they", "we", "i", "you", "this", "that", "there", "what", "which", "who", "the", "a",
     "an", "my", "our", "his", "her", "their", "its", "your", "one", "each", "every", "here"}
)  # fmt: skip
# verbs whose subject is a person ("Gayane shouted at …", "Xenophon said")
PERSON_VERBS = frozenset(
    {"said", "says", "shouted", "asked", "asks", "told", "tells", "replied", "replies", "answered", "smiled",
     "laughed", "cried", "whispered", "yelled", "nodded", "wrote", "writes", "thinks", "thought", "feels", "felt",
     "grew", "married", "lives", "lived", "sings", "sang", "studied", "graduated"}
)  # fmt: skip
# verbs that follow a company as their subject ("Canon invested heavily")
ORG_VERBS = frozenset(
    {"invested", "acquired", "announced", "launched", "hired", "merged", "partnered", "manufactures", "sells",
     "employs", "invests", "acquires", "announces", "launches", "hires", "merges", "unveiled", "unveils",
     "headquartered"}
)  # fmt: skip
# head nouns that end an organisation's name ("Wolfram Research", "Castle Biosciences")
ORG_NOUNS = frozenset(
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
# words that open an organisation's name in the languages that put the head noun first (folded):
# foundations, groups, companies, banks, universities, institutes, associations, cooperatives,
# hotels, clinics, publishers ("Stichting Vrienden", "Banco Sabadell", "Grupo Ferrovial",
# "Università Bocconi", "Hotel Adlon"); a run of two or more words led by one is an organisation
ORG_LEADS = frozenset(
    {"stichting", "stiftung", "verein", "fundacion", "fundacao", "fondazione", "fondation", "fundacja", "grupo",
     "gruppo", "groupe", "societe", "sociedad", "societa", "sociedade", "compagnie", "compania", "companhia",
     "banco", "banca", "banque", "caixa", "caisse", "universidad", "universidade", "universita", "universite",
     "universitat", "uniwersytet", "instituto", "istituto", "institut", "instytut", "associazione", "asociacion",
     "associacao", "stowarzyszenie", "cooperativa", "cooperatie", "genossenschaft", "spoldzielnia", "hotel",
     "clinica", "klinik", "ospedale", "laboratorios", "laboratoires", "laboratori", "editorial", "editora",
     "edizioni", "editions", "verlag", "agencia", "agenzia", "agence", "bank"}
)  # fmt: skip
# "University of X", "Bank of X": the part before "of" names an organisation
ORG_BEFORE_OF = frozenset(
    {"university", "bank", "institute", "department", "ministry", "college", "school", "museum", "society",
     "association", "board", "council", "academy", "federation", "union", "league", "office", "bureau",
     "commission", "court", "church", "hospital", "library", "seeds", "friends", "house", "order"}
)  # fmt: skip
STREET_WORDS = frozenset(
    {"street", "st", "avenue", "ave", "road", "rd", "boulevard", "blvd", "lane", "ln", "drive", "court",
     "place", "square", "terrace", "way", "parkway", "highway", "circle", "crescent", "close", "alley"}
)  # fmt: skip
NOT_STREET_TYPES = frozenset(
    {"upper", "vermont", "magazine", "lights", "edge", "corner", "reach", "rise", "ride", "strip", "steps", "towers",
     "stairs", "slope", "pocket", "madras", "formation", "extension", "entrance", "divide", "deviation", "approach",
     "retreat", "reserve", "camp", "cutting", "distributor", "elbow", "gap", "dip", "pad", "quad", "ramp", "spur"}
)  # fmt: skip
NAME_WORDS = frozenset(
    str.split(
        """mark grace rose jack frank dawn june april august joy faith lily daisy ivy violet ruby amber crystal
    penny sky river chase grant hunter miles drew dean gene ray rich rob sue pat max sandy rusty buck bud
    cliff glen heath holly iris jade pearl robin sage storm autumn winter spring royal king earl duke prince
    major price ward law bishop sterling fisher baker cook hope will may bill art guy page summer young"""
    )
)
# identifiers that name a kind of PII, not a person ("My IBAN is …")
KEYWORDS = frozenset(
    {"iban", "ssn", "cvv", "cvc", "pin", "otp", "dob", "api", "url", "id", "ip", "email", "atm", "zip", "postal",
     "postcode"}
)  # fmt: skip
POSSESSIVE_DETERMINERS = frozenset({"my", "your", "his", "her", "its", "our", "their", "this", "these", "those"})
# the speakers of a transcript ("Bot: …", "User: …"): roles, not people
ROLES = frozenset(
    {"bot", "chatbot", "user", "assistant", "system", "agent", "customer", "human", "operator", "moderator", "admin"}
)
# the field labels of a form, a ticket, a letter or a mail header whose value is a person's name
# ("Name: …", "Contact: …", "Attn: …", "Cardholder: …"). A transcript's speaker labels ("Agent:",
# "Assistant:", "User:") introduce what was said and are not among them; "Customer:" is both, and
# the label counts only where the run after it is the whole value (positions.field_value).
PERSON_LABELS = frozenset(
    {"name", "fullname", "contact", "customer", "client", "patient", "recipient", "sender", "from", "to", "cc",
     "bcc", "attn", "attention", "signed", "author", "requester", "requestor", "reporter", "assignee", "owner",
     "cardholder", "holder", "applicant", "employee", "guest", "passenger", "tenant", "beneficiary", "witness",
     "caller", "member", "addressee", "consignee", "insured", "policyholder", "borrower", "payee", "payer"}
)  # fmt: skip
CONTRACTION = re.compile(r"['’](?:m|re|ve|ll|d|t)$|^I['’]", re.IGNORECASE)
# never an entity alone: months and weekdays are dates ("in March"), not places or people
DATE_WORDS = frozenset(
    {"january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
)  # fmt: skip
# what a person makes: "the Fry novel", "the Leah Holmberg version"
WORKS = frozenset(
    {"novel", "novels", "book", "books", "film", "films", "movie", "movies", "song", "songs", "album", "albums",
     "poem", "poems", "play", "biography", "memoir", "version", "recording", "painting", "paintings",
     "portrait", "symphony", "opera", "sonata", "trilogy", "saga", "essay", "documentary", "biopic", "quote"}
)  # fmt: skip
# endings of place names in English, German, Dutch and the Nordic languages ("-ville", "-borough",
# "-haven", "-furt", "-stad", "-dorf"): a word no lexicon knows, built on one of them after a stem
# of three letters or more, reads as a town ("Harlowville", "Quillport"), not as a brand
TOPONYM_SUFFIXES = (
    "ville", "borough", "burgh", "burg", "bury", "town", "ton", "ford", "field", "haven", "land", "mouth",
    "port", "stad", "stadt", "furt", "fort", "berg", "dorf", "hausen", "heim", "chester", "caster", "shire",
    "polis", "grad", "dale", "wick", "brook", "bridge",
)  # fmt: skip


def toponym_shaped(f: str) -> bool:
    """Whether the folded word ``f`` ends in a place-name ending (:data:`TOPONYM_SUFFIXES`) after
    a stem of three letters or more."""
    if not f.isalpha():
        return False
    return any(f.endswith(x) and len(f) - len(x) >= 3 for x in TOPONYM_SUFFIXES)


# endings of surnames by the naming conventions of European and neighbouring languages: Nordic
# patronymics (-sson, -sen, -dottir), Slavic (-ov/-ova, -ev/-eva, -sky/-ski/-ska, -wicz, -vich,
# -enko, -chuk), Greek (-poulos, -akis, -idis), Armenian (-yan, -ian), Georgian (-shvili, -dze),
# Romanian (-escu, -eanu), Turkish (-oglu), Italian (-etti, -elli, -ucci), Spanish patronymics
# (-ez after a consonant): a word no lexicon knows that ends in one reads as a surname
SURNAME_ENDINGS = (
    "sson", "ssen", "sen", "dottir", "ov", "ova", "ev", "eva", "yev", "yeva", "sky", "ski", "ska", "skaya",
    "skiy", "wicz", "vich", "vic", "enko", "chuk", "czuk", "czyk", "czak", "poulos", "akis", "idis",
    "yan", "ian", "shvili", "dze", "escu", "eanu", "oglu", "etti", "elli", "ucci", "acci", "ndez", "rez", "guez",
    "quez", "nez", "lez",
)  # fmt: skip


def surname_shaped(f: str) -> bool:
    """Whether the folded word ``f`` ends in a surname ending (:data:`SURNAME_ENDINGS`) after a
    stem of three letters or more."""
    if not f.isalpha():
        return False
    return any(f.endswith(x) and len(f) - len(x) >= 3 for x in SURNAME_ENDINGS)


SENT_END = frozenset('.!?\n:;"“”>*•([|-…#')
QUOTES = " \t'\"“‘’”(["
BRAND_END = ("ly", "ify", "io", "hq", "sy", "co", "com", "x", "ix")


def trie_pattern(words: list[str]) -> str:
    """A regex alternation of ``words`` as a trie (for "S.A.", "S.A.S." and "S.L." one "S", then a
    dot, then "A" or "L"): at each place the scan reaches, one character decides, not one try per
    word (a plain alternation of the ~150 legal forms tried each of them at every space)."""
    trie: dict[str, dict] = {}
    for w in words:
        node = trie
        for c in w:
            node = node.setdefault(c, {})
        node[""] = {}
    return trie_node(trie)


def trie_node(node: dict[str, dict]) -> str:
    optional = "" in node
    alts = [re.escape(c) + trie_node(sub) for c, sub in sorted(node.items()) if c]
    if not alts:
        return ""
    body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
    if optional:
        return body + "?" if len(alts) == 1 and len(body) == 2 and body[0] == "\\" else f"(?:{body})?"
    return body


def legal_form_rx(forms: Iterable[str]) -> re.Pattern[str] | None:
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
    trie = trie_pattern(sorted(variants))
    # led by a capitalised word, so the scan only tries at capitals, not at every space (a third
    # of the time on typical events); group 1 is the forms with the space before them
    return re.compile(rf"[{UP}][^\W_]*([ ](?:{trie})(?:[ ](?:{trie}))*)(?![^\W_])")


# the name a legal form follows: capitalised words, "&" and the words that join a firm's names
# ("Jiménez & Asociados", "Restauración del Levante", "Robledo y asociados"); a particle of a
# person's name ("de", "da", "van") is where it starts ("Octavio Oliver de Malena Pazos S.A.")
FIRM_NAME = re.compile(rf"(?<![^\W_])(?:{WORD})(?:[ ](?:{WORD}|&|[yei]|et|and|und|og|del|of|the))*\Z")
# a person's name, then the "de / da / of / from" that says where they work, right before a firm's
# name ("Hola, soy Marco Jerez de Fábrica Baró S.A.", "Ana Lima da Silva Ltda.")
BEFORE_FIRM = re.compile(rf"(?<![^\W_])({WORD}(?:[ ]{WORD}){{1,3}})[ ](?:de|da|do|del|von|van|of|from)[ ]\Z")
COORDINATORS = frozenset({"and", "y", "e", "i", "et", "und", "og"})
PARTICLES = frozenset({"de", "da", "do", "dos", "das", "di", "del", "von", "van", "y", "e", "i", "et", "and", "&"})


def zip_named(text: str, low: str) -> bool:
    """Whether :data:`ZIP` can match in ``text`` (``low`` is its :func:`lowered` copy): a cheap
    screen that every match passes, so a text that fails it needs no scan."""
    if text.isascii():
        return any(h in low for h in ZIP_HINTS_ASCII) or "CAP" in text or "CEP" in text
    return any(h in low for h in ZIP_HINTS)


def org_field_named(low: str) -> bool:
    """Whether a field named for an organisation (:data:`ORG_FIELDS`) can be in the lowered text
    ``low``: each field name starts with one of :data:`ORG_FIELD_HINTS`, after no word character
    (the field regexes' lookbehinds), so "confirmation" (firm) does not send a text to their scans."""
    for hint in ORG_FIELD_HINTS:
        k = low.find(hint)
        while k >= 0:
            if k == 0 or not (low[k - 1].isalnum() or low[k - 1] == "_"):
                return True
            k = low.find(hint, k + 1)
    return False
