"""Rules that read a whole text after its capitalised runs are classified: lists introduced as
people, "X is a company", "the X office", names joined by "and" to a person, the other items of a
list of names, the organisation above an address block, and fields named for an organisation."""

from __future__ import annotations

import itertools

from molt.governance.redaction.base import Span
from molt.governance.redaction.entity_facts import WordFacts
from molt.governance.redaction.entity_words import (
    AND_AFTER,
    AND_BEFORE,
    IS_A,
    LINE_OF_WORDS,
    LIST_GAP,
    LIST_ITEM,
    NOT_A_SUBJECT,
    ORG_FIELD_BARE,
    ORG_FIELD_COLON,
    ORG_FIELD_QUOTED,
    PEOPLE_ITEMS,
    PEOPLE_NOUNS,
    SUBJECT,
    THE_WORDS,
)
from molt.governance.redaction.patterns import lowered
from molt.governance.redaction.positions import (
    word_before,
)

__all__ = ["ContextRules"]


class ContextRules:
    """Whole-text rules of the entity detector; each adds to or overrules the spans found so far."""

    name = "entities"

    def __init__(self, facts: WordFacts) -> None:
        self.facts = facts
        self.lex = facts.lex

    def org_fields(self, text: str, low: str, out: list[Span]) -> None:
        """The value of a field named for an organisation ("company": "Kuhl", merchant=Diaz), in a
        log line or a JSON document written as text, is an organisation whatever its words are; it
        wins over a person or a place read in it."""
        if len(low) != len(text):
            return
        for rx in (ORG_FIELD_QUOTED, ORG_FIELD_BARE, ORG_FIELD_COLON):
            for m in rx.finditer(low):
                a, b = m.span(1)
                value = text[a:b].rstrip(" .")
                b = a + len(value)
                if not any(c.isalpha() for c in value) or "@" in value or "://" in value:
                    continue
                if rx is not ORG_FIELD_QUOTED and not text[a].isupper():
                    continue  # "our company: we sell shoes" is prose, not a field
                if any(s.start < a < s.end or s.start < b < s.end for s in out if s.entity_type == "ADDRESS"):
                    continue
                out[:] = [s for s in out if s.end <= a or s.start >= b]
                out.append(Span(a, b, "ORGANIZATION", 0.8, self.name))

    def people_lists(self, text: str, out: list[Span]) -> None:
        """Every item of a list introduced as people ("our 3 founders: Kovalev, Lee and Phillips"),
        in any case, is a person; an item read as a place or an organisation is overruled."""
        k = text.find(":")
        while k > 0:
            if text[k - 1].isalpha() and word_before(text, k) in PEOPLE_NOUNS:
                m = PEOPLE_ITEMS.match(text, k + 1)
                if m is not None:
                    self._people_items(text, m.start(1), m.end(1), out)
            k = text.find(":", k + 1)

    def _people_items(self, text: str, a0: int, b0: int, out: list[Span]) -> None:
        for item in LIST_ITEM.finditer(text, a0, b0):
            a, b = item.span()
            f, _first, _last, z = self.facts.lookup(item.group())
            if f in ("and", "or") or z >= 4.5:
                continue
            if any(s.start < b and a < s.end and (s.start < a or s.end > b) for s in out):
                continue
            out.append(Span(a, b, "PERSON", 0.85, self.name))

    def offices(self, text: str, out: list[Span]) -> None:
        """Organisations named as "the datamyne office", "the morningstar inc. headquarters" in text
        without capitals: the words before the office name one when a word is no frequent English."""
        for noun in (" office", " headquarters"):
            k = text.find(noun)
            while k >= 0:
                m = THE_WORDS.search(text, max(0, k - 60), k)
                k = text.find(noun, k + 1)
                if m is None:
                    continue
                a, b = m.span(1)
                if any(s.start < b and a < s.end for s in out):
                    continue
                words = [self.facts.lookup(w.rstrip(".")) for w in m.group(1).split(" ")]
                if any(z < 3.0 and not first for _f, first, _last, z in words):
                    out.append(Span(a, b, "ORGANIZATION", 0.6, self.name))

    def defined_orgs(self, text: str, out: list[Span]) -> None:
        """The subject of "X is a company / a startup / the brainchild of …" is an organisation,
        in any case ("recargo is the brainchild of …"); it wins over a name read in it."""
        low = lowered(text)
        if len(low) != len(text):
            return
        for word in (" is ", " was "):
            k = low.find(word)
            while k >= 0:
                verb = IS_A.match(low, k)
                k = low.find(word, k + 1)
                if verb is None:
                    continue
                m = SUBJECT.search(text, max(0, verb.start() - 80), verb.start())
                if m is None:
                    continue
                a, b = m.span(1)
                words = m.group(1).split(" ")
                if words[0].casefold() in NOT_A_SUBJECT or all(self.facts.lookup(w)[3] >= 4.0 for w in words):
                    continue
                if any(s.start < b and a < s.end and (s.start < a or s.end > b) for s in out):
                    continue  # crosses a span found otherwise (an address, a longer name)
                out.append(Span(a, b, "ORGANIZATION", 0.9, self.name))

    def coordinated(self, text: str, out: list[Span]) -> None:
        """A capitalised word no lexicon knows, joined by "and" to a person, is a person too
        ("Sigursteinsson and Dean were …"); not before a house number ("Ana and Hraunás 84")."""
        persons = [s for s in out if s.entity_type == "PERSON"]
        for p in persons:
            for m in (
                AND_BEFORE.search(text, max(0, p.start - 40), p.start),
                AND_AFTER.match(text, p.end),
            ):
                if m is None:
                    continue
                a, b = m.span(1)
                if a and (text[a - 1].isalnum() or text[a - 1] in "_'’-@./\\"):
                    continue
                f, _first, _last, z = self.facts.lookup(m.group(1))
                if z or self.facts.place(f) or any(s.start < b and a < s.end for s in out):
                    continue
                out.append(Span(a, b, "PERSON", 0.55, self.name))

    def name_list(self, text: str, out: list[Span]) -> None:
        """The other items of a list of names ("they had 6: natalina, thomas, crystal and omar"):
        between two names of a list, a lone word that is a first name or no frequent English word
        is a name too."""
        persons = sorted((s for s in out if s.entity_type == "PERSON"), key=lambda s: s.start)
        for a, b in itertools.pairwise(persons):
            gap = text[a.end : b.start]
            if not 4 <= len(gap) <= 60 or "\n" in gap:
                continue
            m = LIST_GAP.fullmatch(gap)
            if m is None:
                continue
            for w in LIST_ITEM.finditer(gap):
                _f, first, last, z = self.facts.lookup(w.group())
                if first or last or z < 3.5:
                    out.append(Span(a.end + w.start(), a.end + w.end(), "PERSON", 0.6, self.name))

    def letterhead(self, text: str, block_at: int, out: list[Span]) -> None:
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
            m = LINE_OF_WORDS.fullmatch(text, start, end)
            if m is None:
                if start < end:
                    return  # the block above the address ends at a line that is not a name
                end = line_start - 1
                continue
            if not any(sp.start < end and start < sp.end for sp in out):
                words = [self.facts.lookup(w) for w in m.group().split(" ")]
                place = self.facts.place(" ".join(w[0] for w in words))
                if not (place or words[0][1] or words[-1][0] in self.facts.job_words) and (
                    len(words) > 1 or words[0][3] < 3.5
                ):
                    out.append(Span(start, end, "ORGANIZATION", 0.6, self.name))
            end = line_start - 1
