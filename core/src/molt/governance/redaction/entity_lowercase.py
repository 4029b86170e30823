"""Names and places in text written in lowercase, where capitals carry no signal: words the
lexicons hold as names or places are promoted to capitalised candidates (the text keeps its length,
so offsets stay), and in mixed text a lowercase name is taken after a strong cue ("my name is …")."""

from __future__ import annotations

import re

from molt.governance.redaction.base import Span
from molt.governance.redaction.entity_facts import WordFacts
from molt.governance.redaction.entity_words import (
    CASED_WORD,
    JOINERS,
    KEYWORDS,
    LOWER_CUE_RXS,
    LOWER_NAME,
    LOWER_WORD,
    PERSON_CUES,
    PERSON_VERBS,
    PLACE_CUES,
    POSSESSIVE_DETERMINERS,
    ROLES,
    TWO_LETTERS,
)
from molt.governance.redaction.lexicon import fold
from molt.governance.redaction.patterns import lowered
from molt.governance.redaction.positions import (
    overlaps,
)

__all__ = ["LowercaseText"]

# a word after the cues of a firm's name in lowercase text ("a year at zentrilo", "joined quorvane")
LOWER_EMPLOYER = re.compile(r"(?<![^\W\d_])(?:at|for|joined)[ ]([^\W\d_]{5,})")


class LowercaseText:
    """Promotion of lowercase names and places, and names after strong cues."""

    name = "entities"

    def __init__(self, facts: WordFacts) -> None:
        self.facts = facts
        self.lex = facts.lex

    def promote(self, text: str) -> str:
        """``text`` with lexicon names and places capitalised (same length), for all-lowercase input.
        A place of several words ("united arab emirates") is promoted word by word when it follows a
        place cue or holds a word that is not frequent English."""
        promoted = self._promote_known(text)
        if " at " in text or " for " in text or "joined " in text:
            # "a year at zentrilo", "recorded for quorvane": after an employer's cue, a word no
            # lexicon knows (no English word, no name, no place) is a firm's coined name
            chars = None
            for m in LOWER_EMPLOYER.finditer(text):
                w = m.group(1)
                if self._coined(text, w, fold(w), m.end(1)):
                    up = w[0].upper()
                    if len(up) == 1:
                        if chars is None:
                            chars = list(promoted)
                        chars[m.start(1)] = up
            if chars is not None:
                promoted = "".join(chars)
        return promoted

    def _promote_known(self, text: str) -> str:
        """:meth:`promote` for the words the lexicons hold as names or places."""
        promotable = self.facts.promotable
        if text.isascii() and promotable.keys().isdisjoint(LOWER_WORD.findall(text.lower())):
            return text  # no word any lexicon holds (ASCII words fold to their lowercase): nothing to do
        words = [(m.start(), m.end(), m.group()) for m in LOWER_WORD.finditer(text)]
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
            if f not in promotable or f in KEYWORDS:
                prev = f
                continue
            span = self._multiword_place(words, i, f, prev)
            if span:
                promote_to = i + span
            elif prev not in POSSESSIVE_DETERMINERS and self._promotes(w, prev):  # not "your boss"
                promote_to = i + 1
                if i + 1 < len(words) and self._surname_after(text, words[i], words[i + 1]):
                    promote_to = i + 2
                elif (
                    self.facts.everyday_word(f)
                    and prev not in PERSON_CUES
                    and prev not in PLACE_CUES
                    and not (i + 1 < len(words) and words[i + 1][0] == words[i][1] + 1
                             and (self.facts.lookup(words[i + 1][2])[2] or words[i + 1][2] in PERSON_VERBS))
                ):  # fmt: skip
                    prev = f  # "echo the prompt", "call the echo tool": a word, until a cue says a name
                    continue
            else:
                prev = f
                continue
            for j in range(i, promote_to):
                s2, _e2, w2 = words[j]
                up = w2[0].upper()
                if len(up) == 1 and (j == i or w2 not in JOINERS):
                    if chars is None:
                        chars = list(text)
                    chars[s2] = up
            skip_to = promote_to
            prev = f
        return text if chars is None else "".join(chars)

    def _coined(self, text: str, w: str, f: str, e: int) -> bool:
        """A lowercase word of letters that no lexicon holds, not code: English does not use it, it
        is no name and no place, and no ``(``, ``/``, ``_``, ``=``, ``-``, ``@`` or ``:`` touches its end,
        nor a dot that a letter follows (a host or a file name)."""
        if len(f) < 5 or not w.isalpha() or f in KEYWORDS or text[e : e + 1] in ("(", "/", "_", "=", "-", "@", ":"):
            return False
        if e + 1 < len(text) and text[e] == "." and text[e + 1].isalnum():
            return False
        _f, first, last, z = self.facts.lookup(w)
        return not (first or last or z or self.facts.place(f) or f in self.lex.other_zipf)

    def _multiword_place(self, words: list[tuple[int, int, str]], i: int, f: str, prev: str) -> int:
        """Words in a known place of two or more words starting at ``words[i]`` (folded ``f``), or 0."""
        longest = self.facts.multi_first.get(f, 0)
        if not longest:
            return 0
        for k in range(min(longest, len(words) - i), 1, -1):
            if words[i + k - 1][0] - words[i][1] > 4 * k:  # the words must be adjacent
                continue
            key = " ".join(fold(w) for _s, _e, w in words[i : i + k])
            if self.facts.place(key) and (
                prev in PLACE_CUES or any(self.facts.lookup(w)[3] < 4.5 for _s, _e, w in words[i : i + k])
            ):
                return k
        return 0

    def promote_paragraphs(self, text: str) -> str:
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
            if CASED_WORD.search(para) is None and TWO_LETTERS.search(para) is not None:
                promoted = self.promote(para)
                changed = changed or promoted is not para
                parts[k] = promoted
        return "\n\n".join(parts) if changed else text

    def _promotes(self, word: str, prev: str) -> bool:
        """Whether a lowercase word counts as a capitalised name or place candidate."""
        f, first, last, z = self.facts.lookup(word)
        if f in KEYWORDS or f in ROLES:
            return False
        kind = self.facts.place(f)  # (a country that is also a city passes as a country whenever as a city)
        return bool(
            ((first or last) and z < 4.0)
            or (first and z < 5.6 and f not in self.facts.name_words)  # "john", "marie" but not "will"
            or (z < 4.0 and kind == "city" and len(f) > 3)
            or (kind == "country" and (prev in PLACE_CUES or z < 4.5))
        )

    def _surname_after(self, text: str, word: tuple[int, int, str], nxt: tuple[int, int, str]) -> bool:
        """Whether ``nxt`` is the surname of the lowercase first name ``word``: right after it, and
        a word English does not use (no frequent word, no keyword)."""
        if nxt[0] != word[1] + 1 or text[word[1]] != " " or not self.facts.lookup(word[2])[1]:
            return False
        f, _first, _last, z = self.facts.lookup(nxt[2])
        return z < 2.5 and len(f) > 1 and f not in KEYWORDS and f not in JOINERS and nxt[2].isalpha()

    def names_after_cues(self, text: str, blocked: list[tuple[int, int]], out: list[Span]) -> None:
        """Lowercase names after a strong cue ("my name is john smith"), in cased text or not."""
        low = lowered(text)
        if len(low) != len(text):  # a few capitals lowercase to two characters; offsets would shift
            return
        for cue, cue_rx in LOWER_CUE_RXS:  # each a literal, so the scan for it stays in C
            if cue not in low:
                continue
            for c in cue_rx.finditer(low):
                k = c.start()
                if k and low[k - 1].isalpha():
                    continue
                m = LOWER_NAME.match(text, c.end())
                if m is None:
                    continue
                f, first, last, z = self.facts.lookup(m.group(1))
                if not (first or last) or (z >= 4.5 and not (first and z < 6.0 and f not in self.facts.name_words)):
                    continue
                a, b = m.span(1)
                if m.group(2) is not None:
                    f2, first2, last2, z2 = self.facts.lookup(m.group(2))
                    if ((last2 or first2) and z2 < 5.5) or (z2 == 0 and f2 not in KEYWORDS):
                        b = m.end(2)  # a known name, or a word English does not use: the surname
                if not overlaps(blocked, a, b):  # a strong cue: wins over a shorter run span
                    out.append(Span(a, b, "PERSON", 0.85, self.name))
