"""Rules that read a whole text after its capitalised runs are classified: lists introduced as
people, "X is a company", "the X office", names joined by "and" to a person, the other items of a
list of names, the organisation above an address block, fields named for an organisation, and
names followed by a company's legal form."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

from molt.governance.redaction.base import Span
from molt.governance.redaction.entity_facts import WordFacts
from molt.governance.redaction.entity_words import (
    AND_AFTER,
    AND_BEFORE,
    APPOSED,
    APPOSITION_ORG,
    BEFORE_FIRM,
    COORDINATORS,
    FIRM_NAME,
    IS_A,
    LINE_OF_WORDS,
    LIST_GAP,
    LIST_ITEM,
    NOT_A_SUBJECT,
    ORG_FIELD_BARE,
    ORG_FIELD_COLON,
    ORG_FIELD_QUOTED,
    ORG_NOUNS,
    PARTICLES,
    SUBJECT,
    THE_WORDS,
    WORD,
)
from molt.governance.redaction.lexicon import fold
from molt.governance.redaction.patterns import lowered

# a capitalised word and the ", " after it, right before a firm's name: one partner of a list
PARTNER_BEFORE = re.compile(rf"(?<![^\W_])({WORD}),[ ]\Z")

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
        """The subject of "X is a company / a startup …" is an organisation,
        in any case ("recargo is a startup"); it wins over a name read in it. So is a
        name in apposition to such a noun ("Stackhaven, a startup based in Austin, …")."""
        low = lowered(text)
        if len(low) != len(text):
            return
        for word in (" is ", " was ", ", a ", ", an ", ", the "):
            rx = IS_A if word[0] == " " else APPOSITION_ORG
            k = low.find(word)
            while k >= 0:
                verb = rx.match(low, k)
                k = low.find(word, k + 1)
                if verb is None:
                    continue
                # the subject of "is a …", or the capitalised words right before an apposition
                m = (SUBJECT if rx is IS_A else APPOSED).search(text, max(0, verb.start() - 80), verb.start())
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
        """A word no lexicon knows, joined by "and" to a firm, is a firm too ("Zorblatt and Acme
        Corp bid"), not the person it was read as for lack of any cue."""
        for o in [s for s in out if s.entity_type == "ORGANIZATION"]:
            for m in (
                AND_BEFORE.search(text, max(0, o.start - 40), o.start),
                AND_AFTER.match(text, o.end),
            ):
                if m is None:
                    continue
                a, b = m.span(1)
                f, first, last, z = self.facts.lookup(m.group(1))
                if z or first or last or self.facts.place(f):
                    continue
                for k, sp in enumerate(out):
                    if sp.start == a and sp.end == b and sp.entity_type == "PERSON" and sp.score <= 0.55:
                        out[k] = Span(a, b, "ORGANIZATION", 0.55, self.name)

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

    def _surname_below_name(self, text: str, line_start: int, start: int, end: int, sp: Span, out: list[Span]) -> bool:
        """Whether ``sp`` is a PERSON that is the whole line ``text[start:end]``, one word that is no
        first name, and the line above is a person's name (a PERSON span led by a first name)."""
        if sp.entity_type != "PERSON" or sp.start != start or sp.end != end or " " in text[start:end]:
            return False
        if self.facts.lookup(text[start:end])[1]:
            return False
        above_end = line_start - 1
        if above_end <= 0:
            return False
        above_start = text.rfind("\n", 0, above_end) + 1
        while above_start < above_end and text[above_start] in " \t>*•?-":
            above_start += 1
        for o in out:
            if o.entity_type == "PERSON" and o.start == above_start and o.end == above_end:
                return self.facts.lookup(text[o.start : o.end].split(" ")[0])[1]
        return False

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
            covering = [i for i, sp in enumerate(out) if sp.start < end and start < sp.end]
            if len(covering) == 1 and self._surname_below_name(text, line_start, start, end, out[covering[0]], out):
                # "Étienne Gérard / Renault / 682, rue …": a surname alone on the line under the
                # person's name, above the address, is the firm named after someone
                out[covering[0]] = Span(start, end, "ORGANIZATION", 0.6, self.name)
            elif not covering:
                words = [self.facts.lookup(w) for w in m.group().split(" ")]
                place = self.facts.place(" ".join(w[0] for w in words))
                if not (place or words[0][1] or words[-1][0] in self.facts.job_words) and (
                    len(words) > 1 or words[0][3] < 3.5
                ):
                    out.append(Span(start, end, "ORGANIZATION", 0.6, self.name))
            end = line_start - 1

    def legal_orgs(
        self, text: str, out: list[Span], legal: re.Pattern[str], run: Callable[[str, int, int, list[Span]], None]
    ) -> None:
        """A name followed by a company's legal form ("Malena Leon Pazos S.A.", "Mitoraj Sp. z o.o.
        Sp.k.", "Cavalcante e Filhos") is an organisation, whatever its words are on their own: it
        wins over the person or place read in it, and a span that ran into it from before keeps only
        its part before the firm's name, classified again ("Leyre Mancebo" of "Leyre Mancebo de
        Jiménez & Asociados S.L.U.")."""
        for m in legal.finditer(text):
            k = m.start(1)
            head = FIRM_NAME.search(text, max(0, k - 80), k)
            if head is None:
                continue
            a, b = head.start(), m.end(1)
            a = self.firm_start(text, a, k)
            keep: list[Span] = []
            again: list[tuple[int, int]] = []
            for sp in out:
                if sp.end <= a or sp.start >= b:
                    keep.append(sp)
                elif sp.start < a:
                    again.append((sp.start, a))
            if not again and not any(sp.end > a - 60 and sp.start < a for sp in keep):
                # nothing read before the firm: a name joined to it by "de" / "da" is its person's,
                # which the firm's words (often no name at all) hid when the run was classified
                pre = BEFORE_FIRM.search(text, max(0, a - 80), a)
                if pre is not None:
                    again.append((pre.start(1), pre.end(1)))
            for s0, e0 in again:
                words = text[s0:e0].split()
                while words and words[-1].casefold() in PARTICLES:
                    words.pop()
                if words:
                    e1 = text.index(words[-1], s0) + len(words[-1])
                    run(text, s0, e1, keep)
            keep.append(Span(a, b, "ORGANIZATION", 0.85, self.name))
            out[:] = keep

    def firm_start(self, text: str, a: int, k: int) -> int:
        """Where the firm's name in ``text[a:k]`` starts: after its last "and" / "y" / "e" when that
        joins it to another name, not within it — a list ("Healthmap, Solarlist and Morningstar
        Inc.") or a firm before ("Underwood Group and Spikes Cavell & Co.")."""
        words = text[a:k].split(" ")
        listed = text[max(0, a - 2) : a] == ", "
        if listed and self._partners(text, a, words):
            # "Ricolfi, Curatoli e Gilardoni s.r.l.", "Skidmore, Owings & Merrill LLP": every item a
            # surname, so the list is the partners the firm is named after, not a list of firms
            while (partner := self._partner_before(text, a)) is not None:
                a = partner
            return a
        pos = a
        start = a
        for i, w in enumerate(words):
            if 0 < i < len(words) - 1 and w in COORDINATORS:
                before = fold(words[i - 1])
                if listed or before in ORG_NOUNS or before in self.facts.lex.company_suffixes:
                    start = pos + len(w) + 1
            pos += len(w) + 1
        return start

    def _partner_before(self, text: str, a: int) -> int | None:
        """The start of the surname listed right before ``a`` ("Ricolfi" of "Ricolfi, " before it),
        or None when the word there is not a surname."""
        m = PARTNER_BEFORE.search(text, max(0, a - 40), a)
        return m.start(1) if m is not None and self.facts.lookup(m.group(1))[2] else None

    def _partners(self, text: str, a: int, words: list[str]) -> bool:
        """Whether the firm's name ``words`` and the comma-separated item before it are all surnames
        joined by a coordinator ("Curatoli e Gilardoni" after "Ricolfi, ")."""
        if len(words) != 3 or (words[1] not in COORDINATORS and words[1] != "&"):
            return False
        return self._partner_before(text, a) is not None and all(self.facts.lookup(w)[2] for w in (words[0], words[2]))
