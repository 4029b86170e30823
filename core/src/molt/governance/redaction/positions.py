"""Positions in a text: the word before or after an offset, line starts, and sorted span lists
(merged, then bisected) — the small helpers the entity rules share."""

from __future__ import annotations

from bisect import bisect_right

from molt.governance.redaction.entity_words import ABBREVIATIONS, QUOTES


def word_before(text: str, k: int) -> str:
    """The folded word that ends at ``k``, skipping a "were" / "are" ("the founders were: …")."""
    j = k
    while j > 0 and (text[j - 1].isalpha() or text[j - 1] == "-"):
        j -= 1
    word = text[j:k].casefold()
    if word in ("were", "are") and j > 1 and text[j - 1] == " ":
        return word_before(text, j - 1)
    return word


def line_start(text: str, i: int) -> bool:
    """Whether only bullets and spaces stand between the line's start and ``i``."""
    j = text.rfind("\n", 0, i)
    return j >= 0 and not text[j + 1 : i].strip(" \t>*•?-")


def prefixes(phrase: str) -> list[str]:
    """``"Czech Republic Today"`` → ``["Czech Republic Today", "Czech Republic", "Czech"]``."""
    words = phrase.split(" ")
    return [" ".join(words[:k]) for k in range(len(words), 0, -1)]


def prev_word(text: str, i: int) -> tuple[str, str, bool]:
    """The folded word before position ``i`` (quotes and a comma skipped), the character that ends
    the gap before the run (``""`` at the start of the text), and whether a comma was skipped. An
    abbreviation or an initial before a dot ("Dr. Smith", "J. Smith") is the previous word, not a
    sentence end."""
    k = i - 1
    while k >= 0 and text[k] in QUOTES:
        k -= 1
    if k < 0:
        return "", "", False
    comma = text[k] == ","
    if comma:
        k -= 1
        while k >= 0 and text[k] in QUOTES:
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
    if dot and not (word in ABBREVIATIONS or (k == j + 1 and text[k].isupper())):
        return word, ".", comma
    return word, text[k], comma


def label_before(text: str, i: int) -> str:
    """The folded word of a field label ``"Word:"`` that ends the gap before position ``i`` (spaces
    between), or ``""`` when the gap is not a label's colon."""
    k = i - 1
    while k >= 0 and text[k] in " \t":
        k -= 1
    if k < 1 or text[k] != ":":
        return ""
    return word_before(text, k)


def field_value(text: str, end: int) -> bool:
    """Whether a run ending at ``end`` is the whole value of a field: the text, the line or the
    list item ends there, or a bracketed detail follows ("Jane Roe <jane@…>", "Jane Roe (agent)")."""
    k = end
    n = len(text)
    while k < n and text[k] in " \t":
        k += 1
    if k >= n:
        return True
    c = text[k]
    if c in ",;|\n\r<([":
        return True
    return c == "." and (k + 1 >= n or text[k + 1] in " \t\n\r\"'")


def next_word(text: str, i: int) -> tuple[str, str]:
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


def merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
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


def first_ending_after(spans: list[tuple[int, int]], s: int) -> int:
    """Index of the first of the (merged) ``spans`` that ends after ``s``."""
    i = bisect_right(spans, (s, s))
    return i - 1 if i and spans[i - 1][1] > s else i


def overlaps(spans: list[tuple[int, int]], s: int, e: int) -> bool:
    """Whether ``[s, e)`` touches one of the (merged) ``spans``."""
    i = first_ending_after(spans, s)
    return i < len(spans) and spans[i][0] < e


def outside(spans: list[tuple[int, int]], s: int, e: int) -> tuple[int, int]:
    """The part of ``[s, e)`` before the first blocked span it touches, else after the last one."""
    i = first_ending_after(spans, s)
    while i < len(spans):
        a, b = spans[i]
        if a >= e:
            break
        if a > s:
            return s, a
        s = b
        i += 1
    return s, e
