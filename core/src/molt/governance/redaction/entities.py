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

Its parts: the vocabulary (:mod:`.entity_words`), lexicon lookups (:mod:`.entity_facts`), lowercase
text (:mod:`.entity_lowercase`, step 3), the whole-text rules run after the runs are classified
(:mod:`.entity_context`) and text positions (:mod:`.positions`); this module scans and classifies
the capitalised runs (step 2) and names organisations by their legal form.

One module at ~690 lines because it is one idea: the classification of a capitalised run, one ordered
decision whose rules read what the earlier ones concluded (a run led by a first name is not taken for a
firm, a place-shaped word is not taken for a brand); what it consults is in the modules above.

Registered as detector ``entities``.
"""

from __future__ import annotations

import threading

from molt.governance.redaction.addresses import AddressFinder
from molt.governance.redaction.base import Span, detectors
from molt.governance.redaction.entity_context import ContextRules
from molt.governance.redaction.entity_facts import RunWord, WordFacts, shared_memo
from molt.governance.redaction.entity_lowercase import LowercaseText
from molt.governance.redaction.entity_words import (
    CAMEL,
    CASED_WORD,
    CONTRACTION,
    COUNTRY_AFTER,
    DATE_WORDS,
    DETERMINERS,
    DIGIT,
    EMPLOYER_CUES,
    EXCEPTION_TYPE,
    FIRM_HEAD,
    GREETINGS,
    HONORIFICS,
    JOINERS,
    KEYWORDS,
    MEMO_SIZE,
    NAME_CONN,
    NAME_SUFFIXES,
    NOT_A_SUBJECT,
    NOT_STREET_TYPES,
    OF_ORG,
    ORG_AFTER,
    ORG_BEFORE_OF,
    ORG_BY,
    ORG_CUES,
    ORG_LEADS,
    ORG_NOUNS,
    ORG_POSSESSIONS,
    ORG_VERBS,
    PERSON_CUES,
    PERSON_LABELS,
    PERSON_VERBS,
    PLACE_CUES,
    ROLES,
    RUN,
    SENT_END,
    STREET_WORDS,
    STRONG_ORG_CUES,
    STRONG_PLACE_CUES,
    TOPONYM_LEADS,
    WORKS,
    WORLD_REGIONS,
    ZIP,
    legal_form_rx,
    org_field_named,
    toponym_shaped,
    zip_named,
)
from molt.governance.redaction.lexicon import Lexicon, fold, get_lexicon
from molt.governance.redaction.patterns import lowered
from molt.governance.redaction.positions import (
    field_value,
    label_before,
    line_start,
    merged,
    next_word,
    outside,
    overlaps,
    prefixes,
    prev_word,
)

__all__ = ["EntityDetector"]


class EntityDetector:
    """PERSON, LOCATION, ADDRESS and ORGANIZATION from lexicons, capitalisation and context."""

    name = "entities"
    entities = frozenset({"PERSON", "LOCATION", "ADDRESS", "ORGANIZATION"})

    def __init__(self, lexicon: Lexicon | None = None):
        self.lex = lexicon or get_lexicon()
        lx = self.lex
        self.facts = WordFacts(lx)
        self.lowercase = LowercaseText(self.facts)
        self.context = ContextRules(self.facts)
        # per word, what the lexicons say (_facts) and whether it can be skipped (_never_entity):
        # the lexicon's facts, shared by every detector on the same lexicon (see shared_memo)
        self._word_facts: dict[str, tuple[int, str, str, bool, bool, float, bool, bool, bool, bool]] = shared_memo(
            lx, "run_word"
        )
        extra_types = frozenset(  # Faker's street suffixes, less names and frequent words
            s for s in lx.street_suffixes
            if len(s) >= 3 and s.isalpha() and s not in lx.first_names and s not in lx.last_names
            and lx.zipf(s) < 4.5 and s not in NOT_STREET_TYPES
        )  # fmt: skip
        # Faker's street prefixes ("Vereda", "Cañada", "Rodovia"), one word, less names and frequent
        # words; and its street types that are no English word, which the Romance languages write
        # before the name ("Piazza Smirnoff", "Borgo Detti")
        extra_prefixes = frozenset(
            s for s in lx.street_prefixes
            if len(s) >= 3 and s.isalpha() and s not in lx.first_names and lx.zipf(s) < 4.5
            and s not in NOT_STREET_TYPES
        ) | frozenset(s for s in extra_types if lx.zipf(s) < 3.5)  # fmt: skip
        facts = self.facts
        self._addresses = AddressFinder(facts.is_place_phrase, facts.is_common_word, extra_types, extra_prefixes)
        self._legal = legal_form_rx(lx.legal_forms)
        self._skip: dict[str, int] = shared_memo(lx, "never_entity")
        self._memo: dict[tuple[int, int], tuple[tuple[int, int, str, float], ...]] = {}
        #: Entries kept in the run memo (0 turns it off).
        self.memo_size = MEMO_SIZE
        # per thread: set by a rule that looked beyond the memo key's context
        self._local = threading.local()

    def country_level(self, phrase: str) -> bool:
        """Whether a place ``phrase`` is a country or larger (see :meth:`WordFacts.country_level`):
        the seam a :class:`~molt.governance.redaction.redactor.Redactor` asks when its policy keeps
        country-level places."""
        return self.facts.country_level(phrase)

    def identifies_alone(self, word: str, initial: bool) -> bool:
        """Whether ``word``, one word of a person's name found in the same text or event, names
        that person when it is written alone (see :mod:`~molt.governance.redaction.mentions`): two
        letters or more, no title or name suffix ("Mr", "Jr"), and not frequent English — by the
        test a capitalised run's words get mid-sentence (Zipf ≥ 3, unless a first or last name below
        Zipf 6: "Smith" is, "Will" is not), and by Zipf < 3 alone at the start of a sentence or a
        field (``initial``), where a capital says nothing ("Mark the ticket …")."""
        f, first, last, z = self.facts.lookup(word)
        if len(f) < 2 or not f.replace("-", "").replace("'", "").isalpha():
            return False
        if f in self.lex.name_prefixes or f in NAME_SUFFIXES:
            return False
        if initial:
            return z < 3.0
        return not (z >= 3.0 and not ((first or last) and z < 6.0))

    # ------------------------------------------------------------------ lexicon helpers

    def _plural_noun(self, w: RunWord) -> bool:
        """A capitalised plural of an English word ("Hobbits") that is no name and no place."""
        f = w.f
        return (
            len(f) > 4 and f[-1] == "s" and f[-2] != "s" and not (w.first or w.last)
            and self.lex.zipf(f[:-1]) >= 3.0 and not self.facts.place(f)
        )  # fmt: skip

    def _brandlike(self, w: RunWord) -> bool:
        t = w.text
        if CAMEL.search(t) and not t.startswith(("Mc", "Mac", "O'", "De", "Di", "La", "Le", "Van", "Von")):
            return True
        if not t.isalpha() and any(c.isdigit() for c in t):  # (no character is both)
            return True
        return not (w.first or w.last) and w.z == 0 and self.facts.compound(w.f)

    # ------------------------------------------------------------------ detection

    def detect(self, text: str) -> list[Span]:
        """Entity spans in ``text``."""
        lowercase = CASED_WORD.search(text) is None
        source = text
        if lowercase:
            source = self.lowercase.promote(text)
        elif "\n\n" in text:  # paragraphs (a redacted event's fields) written all in lowercase
            source = self.lowercase.promote_paragraphs(text)
        any_lower = lowercase or source is not text
        out: list[Span] = []
        blocked: list[tuple[int, int]] = []
        block_at = -1
        if DIGIT.search(text) is not None or "orner of" in text:
            for a in self._addresses.find(text, any_lower):
                if a.parts:
                    if block_at < 0:
                        block_at = a.start
                    for s, e, kind in a.parts:
                        out.append(Span(s, e, "LOCATION" if kind == "place" else "ADDRESS", 0.8, self.name))
                else:
                    out.append(Span(a.start, a.end, "ADDRESS", 0.8, self.name))
                    if block_at < 0 and a.start and line_start(text, a.start):
                        block_at = a.start  # an address on a line of its own: a letterhead may be above
                blocked.append((a.start, a.end))
            blocked = merged(blocked)
        skip = self._skip
        for m in RUN.finditer(source):
            s, e = m.span()
            if s and (source[s - 1].isalnum() or source[s - 1] in "_'’-@./\\"):
                continue  # a capital inside a word, an identifier or a path
            word = m.group()
            if " " not in word:  # one word: most are sentence starts ("The", "Please", "I")
                drop = skip.get(word)
                if drop is None:
                    if len(skip) > 200_000:  # bounded like the other word memos (ids are words too)
                        skip.clear()
                    drop = skip[word] = self._never_entity(word)
                if drop == 1 or (
                    drop == 2
                    and (after := next_word(source, e)[0]) not in ORG_VERBS
                    and after not in ORG_AFTER
                    and prev_word(source, s)[0] not in EMPLOYER_CUES
                    and OF_ORG.search(source, max(0, s - 30), s) is None
                ):
                    continue
            if blocked:
                s, e = outside(blocked, s, e)
                if e <= s:
                    continue
            self._run_memoised(source, s, e, out)
        if " " in text:
            self.lowercase.names_after_cues(text, blocked, out)
        if zip_named(text, lowered(text)):
            for m in ZIP.finditer(text):  # a postcode named as one is part of an address
                if not overlaps(blocked, m.start(1), m.end(1)):
                    out.append(Span(m.start(1), m.end(1), "ADDRESS", 0.8, self.name))
        if block_at > 0:
            self.context.letterhead(source, block_at, out)
        if len(out) >= 2 and ", " in text:
            self.context.name_list(source, out)
        if out and " and " in text:
            self.context.coordinated(source, out)
        if " is " in text or " was " in text or ", a " in text or ", an " in text or ", the " in text:
            self.context.defined_orgs(text, out)
        if " office" in text or " headquarters" in text:
            self.context.offices(text, out)
        if self._legal is not None and not lowercase:
            self.context.legal_orgs(source, out, self._legal, self._run)
        if "=" in text or ":" in text:
            low = lowered(text)
            if org_field_named(low):
                self.context.org_fields(text, low, out)
        return out

    def _never_entity(self, word: str) -> int:
        """Whether a single capitalised word can be skipped without classifying it: 1 when no rule
        would take it (a letter, a month, frequent English that is neither a name nor a place:
        "The", "Please"), 2 when only a company verb after it would ("Deloitte invested"), else 0."""
        low = word.casefold()
        if EXCEPTION_TYPE.fullmatch(word) is not None and low not in ("error", "exception", "warning"):
            return 1
        if len(word) == 1 or low in DATE_WORDS or low in KEYWORDS or low in ROLES or CONTRACTION.search(word):
            return 1
        if word.isupper():
            return 0  # acronyms: "at BBC"
        if "-" in word and self._slug(word):
            return 1
        f, first, last, z = self.facts.lookup(word)
        if z >= 3.0 and not (first or last) and not self.facts.place(f) and f not in ORG_NOUNS:
            return 1 if z >= 4.2 else 2  # 2: unless a company verb follows ("Deloitte invested")
        return 0

    def _slug(self, word: str) -> bool:
        """An identifier written with hyphens ("Pinecrest-help", "Order-status"): a lowercase part
        after the first is a frequent English word, which no name's or place's part is ("Georges-sur-
        Mer", "Stratford-upon-Avon" join with particles; "Jean-Pierre" is capitalised)."""
        for part in word.split("-")[1:]:
            if len(part) >= 3 and part.islower() and part not in JOINERS:
                _f, first, last, z = self.facts.lookup(part)
                if z >= 3.0 and not (first or last):
                    return True
        return False

    # ------------------------------------------------------------------ capitalised runs

    def _words(self, text: str, s: int, e: int) -> list[RunWord]:
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
            out.append(RunWord(i, i + n, word, f, first, last, z, conn, common, foreign))
            if possessive:  # "Cynthia Vasala's Cautionary Tales": the name ends at the possessive
                out.append(RunWord(i + n, i + len(raw), "'s", "'s", False, False, 0.0, True, False, False))
        return out

    def _facts(self, raw: str) -> tuple[int, str, str, bool, bool, float, bool, bool, bool, bool]:
        """What the lexicons say about one word of a run, kept per word (no text around it)."""
        conn = raw[0].islower() or raw == "&"
        word = raw
        possessive = not conn and len(word) > 2 and word[-2] in "'’" and word[-1] in "sS"
        if possessive:
            word = word[:-2]
        f, first, last, z = self.facts.lookup(word.rstrip("."))
        common = z >= 3.0 and not ((first or last) and z < 6.0)
        unlisted = self.facts.unlisted(f)
        # frequent in another European language and no name ("Buongiorno", "Betrag"); a name that
        # is also a very frequent word there stays a name ("Hans", "André", "Sie" too)
        foreign = not (common or first or last or unlisted) and f in self.lex.other_zipf
        known = (len(word), word, f, first, last, z, conn, common, foreign, possessive)
        if not unlisted:  # an id or a code (a digit, in no word list) costs less to read again than to keep
            facts = self._word_facts
            if len(facts) > 200_000:
                facts.clear()
            facts[raw] = known
        return known

    def _run_memoised(self, text: str, s: int, e: int, out: list[Span]) -> None:
        """:meth:`_run`, memoised on the run and the words around it: agent traffic repeats the same
        product names, headings and phrases in the same places. Keys are digests
        (:func:`~molt.governance.redaction.base.text_key`; no text is kept); a run whose rules
        looked further than that context is not memoised."""
        if not self.memo_size:
            self._run(text, s, e, out)
            return
        prev = prev_word(text, s)
        nxt = next_word(text, e)
        label = label_before(text, s) if prev[1] == ":" else ""
        around = "\x1f".join(
            (text[s:e], prev[0], prev[1], "," if prev[2] else "", label, nxt[0], nxt[1], text[e : e + 2])
        )
        key = (len(around), hash(around))  # text_key(around), without an interpreted call
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
        group: list[RunWord] = []
        prev_word = ""
        for w in words:
            if w.conn and w.f not in JOINERS:
                if group:
                    self._group(text, group, out)
                group = []
                prev_word = w.f
                continue
            group.append(w)
        if group:
            self._group(text, group, out)
        del prev_word

    def _group(self, text: str, words: list[RunWord], out: list[Span]) -> None:
        person_cue = False
        while words and words[0].f in HONORIFICS:
            person_cue = True
            words = words[1:]
        while words and words[0].conn:
            words = words[1:]
        while words and words[-1].conn:
            words = words[:-1]
        if not words:
            return
        prev, prev_char, comma = prev_word(text, words[0].start)
        if person_cue:
            prev = "mr"
        at_start = prev_char in SENT_END or prev_char == ""
        labelled = (
            prev_char == ":"
            and label_before(text, words[0].start) in PERSON_LABELS
            and field_value(text, words[-1].end)
        )
        if labelled:
            # "Contact: Binaren Nutobo, …": the value of a field whose label says it holds a
            # person's name is read as after any other person's cue, not as a sentence's start
            prev, at_start = "name", False
        n_out = len(out)
        if at_start and len(words) > 1 and words[0].f in DETERMINERS:  # "The Wolfram Research version"
            prev, at_start = words[0].f, False
            words = words[1:]
        if len(words) > 1 and any(w.conn for w in words):
            # known places that hold connectors ("Trinidad and Tobago", "Kostelec nad Orlicí")
            if self._places_in(text, words, at_start, out):
                return
            if any(w.text in ("&", "n'") for w in words) or (
                any(w.f == "of" for w in words) and words[0].f in ORG_BEFORE_OF
            ):
                out.append(Span(words[0].start, self._org_end(text, words), "ORGANIZATION", 0.75, self.name))
                return
        # "Jones, Mitchell and Williams": a firm named after three surnames
        if len(words) == 3 and words[1].f in ("and", "&") and words[0].last and words[2].last:
            self._local.wide = True
            m = FIRM_HEAD.search(text, max(0, words[0].start - 40), words[0].start)
            if m is not None and self.facts.lookup(m.group(1))[2]:
                if out and out[-1].start == m.start(1):
                    out.pop()
                out.append(Span(m.start(1), words[2].end, "ORGANIZATION", 0.75, self.name))
                return
        # split at connectors that do not belong inside a name ("Mary and John")
        seg: list[RunWord] = []
        seg_prev, seg_start, seg_comma = prev, at_start, comma
        for w in words:
            if w.conn and w.f not in NAME_CONN:
                if seg:
                    self._classify(text, seg, seg_prev, seg_start, out, seg_comma)
                seg, seg_prev, seg_start, seg_comma = [], w.f, False, False
                continue
            seg.append(w)
        if seg:
            self._classify(text, seg, seg_prev, seg_start, out, seg_comma)
        if (
            labelled
            and len(out) == n_out
            and not any(w.conn or (w.common and not (w.first or w.last)) for w in words)
            and not any(c.isdigit() for w in words for c in w.text)
            and not any(w.text.isupper() and len(w.text) > 1 for w in words)
        ):
            # nothing else read it, and no word of it is an English word, an acronym or a code: a
            # name in a person's field is one whatever language its words are also words of
            out.append(Span(words[0].start, words[-1].end, "PERSON", 0.55, self.name))

    def _places_in(self, text: str, words: list[RunWord], at_start: bool, out: list[Span]) -> bool:
        """Emit the group as one known place when it is one; True when it did."""
        if len(words) > 6:
            return False
        kind = self.facts.place(" ".join(w.f for w in words))
        if kind and not (at_start and words[0].z >= 4.0 and kind != "country"):
            out.append(Span(words[0].start, words[-1].end, "LOCATION", 0.7, self.name))
            return True
        return False

    def _org_end(self, text: str, words: list[RunWord]) -> int:
        end = words[-1].end
        if end < len(text) and text[end] == "." and words[-1].f in ("inc", "corp", "co", "ltd", "bros"):
            end += 1
        return end

    def _classify(
        self, text: str, words: list[RunWord], prev: str, at_start: bool, out: list[Span], comma: bool = False
    ) -> None:
        """Classify one segment of a run. ``prev`` is the word before it, ``comma`` whether a comma
        stands between them (a vocative "…, Anna!" is not a place after "town")."""
        while words and words[-1].conn:
            words = words[:-1]
        if not words:
            return
        # name suffixes stay outside the span ("Andrew Turcotte MD")
        suffix = False
        while len(words) > 1 and words[-1].f in NAME_SUFFIXES:
            words = words[:-1]
            suffix = True
        first, last = words[0], words[-1]
        start, end = first.start, last.end
        n = len(words)
        # "Sunday" split off "Sunday at Acme"; "Hobbits", "Vikings": plurals of words. A month that
        # closes a list of names is a name ("John, Evan and April").
        if (
            n == 1
            and (first.f in DATE_WORDS or self._plural_noun(first))
            and not (first.first and prev in ("and", "or") and out and out[-1].entity_type == "PERSON")
        ):
            return
        nxt, nxt_char = next_word(text, end)
        name = self.name
        if n == 1 and first.text.casefold() in GREETINGS:
            return  # "Olá, …", "Hola Marta": the greeting, not a name
        if n == 1 and first.f in NOT_A_SUBJECT:
            return  # a pronoun or a determiner ("We partnered with …"), whatever a lexicon says
        joined = first.f if n == 1 else " ".join(w.f for w in words)
        # a country or a larger place is one whatever its last word is ("Russian Federation",
        # "United Arab Emirates", "North America"), unless a company word follows ("Ghana office")
        if (joined in WORLD_REGIONS or (n > 1 and self.facts.place(joined) == "country")) and nxt not in ORG_AFTER:
            out.append(Span(start, end, "LOCATION", 0.75, name))
            return
        # organisation: a company word at the end ("Acme Corp", "Wolfram Research")
        if (
            n > 1
            and (last.f in ORG_NOUNS or last.f in self.lex.company_suffixes)
            and not suffix
            and (len(last.f) > 3 or last.text.isascii())  # "Sá" (a surname) is not "SA"
            and not (at_start and n == 2 and first.common and not first.first)
        ):
            out.append(Span(start, self._org_end(text, words), "ORGANIZATION", 0.8, name))
            return
        if n > 1 and first.f in ORG_LEADS and not suffix and last.f not in STREET_WORDS and not last.common:
            # the head noun first: "Stichting Groenveldhof", "Banco Sabadell", "Hotel Adlon"
            out.append(Span(start, self._org_end(text, words), "ORGANIZATION", 0.75, name))
            return
        kind = self.facts.place(first.f if n == 1 else " ".join(w.f for w in words))
        if kind == "country" and nxt not in ORG_AFTER:  # countries, sentence-initial ones too
            out.append(Span(start, end, "LOCATION", 0.75, name))
            return
        # a sentence-initial common word is not part of an entity ("Please", "The"); drop it
        if at_start and n > 1 and (((first.common or first.foreign) and not first.first) or first.z >= 6.0):
            self._classify(text, words[1:], first.f, False, out)
            return
        if n == 1 and at_start and (first.common or first.foreign) and nxt not in ORG_VERBS:
            return
        if n == 1 and at_start and nxt_char == ":" and first.z >= 3.0 and not first.first:
            return  # a field label: "Date: 2007-03-23", "Name: …"
        if n > 1 and last.f in STREET_WORDS and last.text[0].isupper() and last.f not in ("st", "dr"):
            out.append(Span(start, end, "ADDRESS", 0.6, name))  # "Gordon Street", no number
            return
        names = sum(1 for w in words if w.first or w.last)
        if nxt in ORG_AFTER and prev == "the" and (n > 1 or not (kind or first.common)):  # "the Oliver Wyman office"
            out.append(Span(start, self._org_end(text, words), "ORGANIZATION", 0.7, name))
            return
        if (
            prev in STRONG_ORG_CUES
            and n > 1
            and names < n
            and not at_start
            and not kind
            and not (first.first and not first.common and not last.common and last.f not in ORG_NOUNS)
        ):
            # "at New Media Parents"; a run led by a first name is a person's name, whatever its
            # other words are ("a parcel for Marta Quenelleux Brandvik", "for Joris van Tessel")
            out.append(Span(start, self._org_end(text, words), "ORGANIZATION", 0.6, name))
            return
        if prev == "of":
            self._local.wide = True
        if prev == "of" and OF_ORG.search(text, max(0, start - 30), start) and not first.first and not kind:
            out.append(Span(start, self._org_end(text, words), "ORGANIZATION", 0.6, name))  # "the address of SAP"
            return
        if prev in ("by", "for", "with") and not first.first and not kind and not at_start:
            self._local.wide = True
            if ORG_BY.search(text, max(0, start - 32), start) is not None:
                # "employed by Hargreaves", "works for Brennick", "an account with Globex"
                out.append(Span(start, self._org_end(text, words), "ORGANIZATION", 0.6, name))
                return
        if (
            nxt in ORG_AFTER
            and not (names == n and first.first and n > 1)
            and (not (n == 1 and first.common) or nxt in ORG_VERBS)
        ):
            out.append(Span(start, self._org_end(text, words), "ORGANIZATION", 0.7, name))
            return
        if prev == "the" and nxt in WORKS and kind != "country" and not any(w.common for w in words):
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
        strong = prev in STRONG_PLACE_CUES and not comma
        possessive = text.startswith(("'s", "’s"), end)
        if possessive and not first.first and not kind:
            after, _ = next_word(text, end + 2)
            if after in ORG_POSSESSIONS:  # "Acme's CEO", "Globex's employees"
                out.append(Span(start, end, "ORGANIZATION", 0.65, name))
                return
        if not first.first and text.startswith(", ", end):
            country = COUNTRY_AFTER.match(text, end + 2)
            if country is not None and any(self.facts.place(fold(p)) == "country" for p in prefixes(country.group())):
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
        if n == 1 and first.common and prev in EMPLOYER_CUES and not at_start and not kind and first.z < 4.2:
            # "a year at Verizon", "joined Stripe": a capitalised word English uses, mid-sentence
            # after an employer's cue, names the firm ("at Home" is frequent enough to be skipped)
            out.append(Span(start, end, "ORGANIZATION", 0.55, name))
            return
        if n == 1 and (
            first.common
            or (first.foreign and prev not in PERSON_CUES)
            or first.f in STREET_WORDS
            or (first.text.isupper() and len(first.text) <= 5)
        ):
            if prev in ("at", "joined", "for") and not at_start and (
                (first.text.isupper() and len(first.text) > 1) or (first.foreign and not first.common and not kind)
            ):
                # "at BBC"; "work for Allianz": a capitalised word of another language after an
                # employer's cue, in English text, is a firm's name, not a word of the sentence
                out.append(Span(start, end, "ORGANIZATION", 0.55, name))
            return
        if all(w.text.isupper() and len(w.text) > 1 for w in words) and not names:
            return  # acronyms and shouting ("SSN", "CAN I SPEAK")
        if n > 1 and first.f in TOPONYM_LEADS and not last.common and not suffix:
            # "North Austin", "Lake Iainburgh", "Saint Patricia", "Port Quillborough": people and
            # brands are not named with a compass point or "Lake" first, whatever the words after it
            out.append(Span(start, end, "LOCATION", 0.6, name))
            return
        if names == 0 or (n == 1 and not first.first):
            # no first name: an org context, a place-shaped word, brand-shaped words, or a
            # hyphenated pair of surnames
            if (
                prev in ORG_CUES
                and not at_start
                and not (prev in ("with", "by") and names)
                and (not any(w.common for w in words) or n > 1)
            ):
                out.append(Span(start, end, "ORGANIZATION", 0.6, name))
                return
            if (
                n == 1
                and not (first.first or first.last or first.z)
                and not at_start
                and toponym_shaped(first.f)
                and (prev not in PERSON_CUES or prev in ("to", "from"))  # "says Rosvikheim": a surname built the same way
                and nxt not in ORG_AFTER
                and nxt not in PERSON_VERBS
                and not text.startswith(("'s", "’s"), end)
            ):
                # a word no lexicon knows, built as place names are ("Harlowville", "Quillport",
                # "Morrowton"), with no firm's cue around it: a town, not a brand run together
                # from two words ("at Stackhaven", "Lumenfield's support" are firms)
                out.append(Span(start, end, "LOCATION", 0.55, name))
                return
            if any(self._brandlike(w) for w in words) or (
                n == 1 and "-" in first.text and all(self.facts.lookup(p)[2] for p in first.text.split("-") if p)
            ):
                out.append(Span(start, end, "ORGANIZATION", 0.65, name))
                return
        if n == 1 and prev not in PERSON_CUES and nxt not in PERSON_VERBS:
            # one of the hundred or so most frequent words of another language that is a name too
            # ("melden Sie sich": German "you"), with nothing saying it is a name here
            if self.lex.other_zipf.get(first.f, 0.0) >= 6.5:
                return
            # a frequent English word that is only a surname, with nothing saying it is one here:
            # "List the files", "Best regards", "call Echo"
            if not first.first and first.z >= 4.5:
                return
            # at the start of a sentence a capital says nothing: a word frequent in running text
            # in English, or (when no first name) in another language, is that word there, a name
            # list holding it or not ("Love this song", "Come on", "Hoy toca"); "Mark said" keeps
            # its verb of speech
            if at_start and (first.z >= 4.0 or (not first.first and self.lex.other_zipf.get(first.f, 0.0) >= 5.0)):
                return
            # a word and a number: a pier, gate, room or model ("Pier 19", "Nimbus 2"), not a person
            if text[end : end + 1] == " " and text[end + 1 : end + 2].isdigit():
                return
        if names:
            if n > 1 and any(c.isdigit() for w in words for c in w.text):
                # "Dock DK-200", "Gate B12": a word and its code is a place or a model, as "Pier 19"
                # is (no name holds a digit); a full name before a code is still one ("Maria Lopez
                # R2"), and so is one word after a cue ("Mr Lopez R2")
                k = next(i for i, w in enumerate(words) if any(c.isdigit() for c in w.text))
                if (k >= 2 or (k == 1 and prev in PERSON_CUES)) and (first.first or first.last):
                    self._classify(text, words[:k], prev, at_start, out, comma)
                return
            common = [w for w in words if w.common and not (w.first or w.last or w.conn)]
            if common and prev not in PERSON_CUES:
                return  # a product or a title ("Aurora Wireless Earbuds")
            if all(w.common or w.conn for w in words) and prev not in PERSON_CUES:
                return
            # another language's words, one of them no name at all: "Sie den Betrag" (Sie: a name
            # too, but one of the most frequent German words)
            if (
                n > 1
                and any(w.foreign for w in words)
                and all(w.foreign or w.conn or self.lex.other_zipf.get(w.f, 0.0) >= 6.0 for w in words)
                and prev not in PERSON_CUES
            ):
                return
            if n > 2 and not (first.first or first.last) and words[1].first:
                # a word no lexicon has as a name before a first name and a surname is what they
                # are ("Kontoinhaber Rebecca Trub": the account holder), not part of the name
                start = words[1].start
            out.append(Span(start, end, "PERSON", 0.8 if names == n else 0.7, name))
            return
        if at_start and prev not in PERSON_CUES:
            if n == 1 and first.z == 0 and nxt_char in ",:!?":
                out.append(Span(start, end, "PERSON", 0.5, name))  # "Vittore, can I …"
            return
        if any(w.common or w.foreign for w in words):
            return
        if text[end : end + 2][:1] == " " and text[end + 1 : end + 2].isdigit():
            return  # "Nimbus 2", "Pixel 10": a product and its model number
        if prev in PLACE_CUES and prev not in ("to", "at") and not comma:
            out.append(Span(start, end, "LOCATION", 0.55, name))
            return
        if prev == "of" and not (first.first or first.last):
            # what something is "of", named by no name list: what a desk, a team or a branch belongs
            # to ("the support desk of Acme"), a firm rather than a person; a person's name after
            # "of" is one the lists know ("the son of David")
            out.append(Span(start, end, "ORGANIZATION", 0.55, name))
            return
        out.append(Span(start, end, "PERSON", 0.55, name))


detectors.register("entities", EntityDetector)
