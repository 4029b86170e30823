"""Mentions: a name found once is redacted wherever the same text or event writes it again.

The detectors judge each occurrence of a name by the words around it, so a name that one sentence
introduces ("my name is Zorblat Quenneville", ``"customer": "Kuhl"``) can go unrecognised where
another sentence of the same event repeats it without a cue ("Thanks, Zorblat!", an assistant reply
echoing it, a tool result that carries it). Whether it is the same person does not depend on the
cue: once any occurrence is found, every other occurrence of the same words in the same scope (one
text for :meth:`~molt.governance.redaction.redactor.Redactor.detect`, every string field of one
event for :meth:`~molt.governance.redaction.redactor.Redactor.detect_many`) is that entity too.

What counts as an occurrence: the same characters, case included, not inside a longer word. For
the four name-like types (:data:`MENTION_TYPES`) the whole value found is looked for; for a
person's name, also each of its words that names the person alone, as the entity detector judges
it (``identifies_alone(word, initial)``): mid-sentence, where a capital says "name", a word of two
letters or more that is no title and not frequent English unless it is also a name ("Zorblat",
"Smith"; not "Will" of "Will Smith", nor "Mr"). At the start of a sentence or a field, where every
word is capitalised, an occurrence of any one-word value is taken only if the word is not frequent
English at all ("Zorblat"; not "Mark" in "Mark the ticket as urgent", whether "Mark" was found
alone or in "Mark Jones"). A mention gets the type and score of what it repeats and detector
``mention``; an occurrence some detector already took keeps that span.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable

from molt.governance.redaction.base import Span

__all__ = ["MENTION", "MENTION_TYPES", "Alone", "with_mentions"]

#: The types whose values are looked for again: names of people, organisations, places and
#: addresses. Structured identifiers are found by what they are wherever they are written.
MENTION_TYPES = frozenset({"PERSON", "ORGANIZATION", "LOCATION", "ADDRESS"})
#: The detector name a mention's span carries.
MENTION = "mention"
_JOIN = "\x00"  # between the texts searched together (no value found holds it: they are words)
_MIN_VALUE = 2  # characters: a one-letter "name" (an initial) is not looked for


#: What a word of a person's name is judged by: ``alone(word, initial)``, ``initial`` when the
#: occurrence starts a sentence or a field (see the module's docstring).
Alone = Callable[[str, bool], bool]
# the character before a word (spaces skipped) that makes it the start of a sentence or a field
_INITIAL_AFTER = frozenset(".!?:;\n\"'“‘(>*-•")


def _initial(text: str, i: int) -> bool:
    """Whether the word at ``i`` starts a sentence, a line or a field's value."""
    j = i - 1
    while j >= 0 and text[j] in " \t":
        j -= 1
    return j < 0 or text[j] in _INITIAL_AFTER


def _targets(texts: list[str], found: list[list[Span]], alone: Alone | None) -> list[tuple[str, Span]]:
    """``(value, span it was found as)`` to look for, longest first (a full name before its words)."""
    seen: dict[str, Span] = {}
    for text, spans in zip(texts, found, strict=True):
        for sp in spans:
            if sp.entity_type not in MENTION_TYPES:
                continue
            value = text[sp.start : sp.end].strip()
            if len(value) >= _MIN_VALUE and value not in seen:
                seen[value] = sp
            if sp.entity_type == "PERSON" and alone is not None and " " in value:
                for word in value.split():
                    word = word.rstrip(",.;:")
                    if word[-2:] in ("'s", "’s"):
                        word = word[:-2]
                    if len(word) >= _MIN_VALUE and word not in seen and alone(word, False):
                        seen[word] = sp
    return sorted(seen.items(), key=lambda kv: -len(kv[0]))


def _free(taken: list[tuple[int, int]], a: int, b: int) -> bool:
    """Whether ``[a, b)`` overlaps none of ``taken``."""
    return all(not (s < b and a < e) for s, e in taken)


def with_mentions(texts: list[str], found: list[list[Span]], alone: Alone | None = None) -> list[list[Span]]:
    """``found`` (the spans of each of ``texts``, sorted and not overlapping) with every further
    occurrence of a found name added, in any of ``texts``; each text's spans stay sorted and
    non-overlapping. ``alone`` says whether one word of a person's name names them on its own; None
    looks for whole values only. Returns ``found`` itself when nothing is added."""
    targets = _targets(texts, found, alone)
    if not targets:
        return found
    # one search per value over all the texts, joined by a character no name holds: the loop in
    # Python runs per occurrence, not per text and value
    joined = _JOIN.join(texts)
    bases: list[int] = []
    pos = 0
    for text in texts:
        bases.append(pos)
        pos += len(text) + 1
    taken: dict[int, list[tuple[int, int]]] = {}
    added: dict[int, list[Span]] = {}
    for value, sp in targets:
        n = len(value)
        one_word = " " not in value
        g = joined.find(value)
        while g >= 0:
            k = bisect_right(bases, g) - 1
            text = texts[k]
            i = g - bases[k]
            j = i + n
            if j > len(text):  # across a join: a value that holds the joining character
                pass
            elif (i == 0 or not text[i - 1].isalnum()) and (j == len(text) or not text[j].isalnum()):
                spans_taken = taken.get(k)
                if spans_taken is None:
                    spans_taken = taken[k] = [(s.start, s.end) for s in found[k]]
                if _free(spans_taken, i, j) and not (
                    one_word and alone is not None and _initial(text, i) and not alone(value, True)
                ):
                    added.setdefault(k, []).append(Span(i, j, sp.entity_type, sp.score, MENTION))
                    spans_taken.append((i, j))
            g = joined.find(value, g + 1)
    if not added:
        return found
    return [sorted(spans + added[k]) if k in added else spans for k, spans in enumerate(found)]
