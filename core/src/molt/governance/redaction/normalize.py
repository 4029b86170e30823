"""The text detectors read: Unicode-normalised, with offsets that map back to the text as written.

A detector written for ``ana@example.org`` does not match ``ａｎａ＠ｅｘａｍｐｌｅ．ｏｒｇ`` (fullwidth
forms), ``Ana\u00a0Lima`` (a no-break space) or ``a\u200bna@example.org`` (a zero-width space between
letters), although a reader sees the same address or name in each. :func:`fold_for_detection` gives
the text a detector should read instead: NFKC (compatibility forms folded: fullwidth, ligatures,
superscripts, the exotic spaces) with the characters that render as nothing removed (zero-width
spaces and joiners, the word joiner, the BOM, the soft hyphen, and the bidirectional controls an
attacker uses to reorder what is displayed). :meth:`Folded.span` maps a span found in the folded
text back to the characters of the original that produced it, so the redactor replaces the original
characters — zero-width ones inside the span included — and leaves the rest of the text as written:
the original is kept where it is clean, and only what was found is replaced.

Text that is ASCII, or already normal with none of those characters, costs one check and is read as
it is (``None``).

>>> f = fold_for_detection("mail ａｎａ＠ｅｘａｍｐｌｅ．ｏｒｇ")
>>> f.text
'mail ana@example.org'
>>> f.span(5, 20)
(5, 20)
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["INVISIBLE", "Folded", "fold_for_detection"]

#: Characters that render as nothing and are removed before detection: zero-width space, non-joiner
#: and joiner, word joiner, invisible operators, BOM, soft hyphen, Mongolian vowel separator, and
#: the bidirectional marks, embeddings, overrides and isolates.
INVISIBLE = frozenset(
    "\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff\u00ad\u180e"
    "\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
_INVISIBLE_RE = re.compile("[" + "".join(sorted(INVISIBLE)) + "]")


class Folded:
    """A text as detectors read it (:attr:`text`), and where each of its characters came from."""

    __slots__ = ("_ends", "_starts", "text")

    def __init__(self, text: str, starts: list[int], ends: list[int]) -> None:
        self.text = text
        self._starts = starts  # folded index -> first original index of the chunk it came from
        self._ends = ends  # folded index -> one past the last original index of that chunk

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original ``[start, end)`` that the folded ``[start, end)`` came from (whole chunks:
        a base character with its combining marks, and the invisible characters between)."""
        if end <= start:  # an empty span stays empty, where its start falls
            at = self._starts[start] if start < len(self._starts) else self._ends[-1]
            return at, at
        return self._starts[start], self._ends[end - 1]


def _needs_folding(text: str) -> bool:
    if text.isascii():
        return False
    if _INVISIBLE_RE.search(text) is not None:
        return True
    return not unicodedata.is_normalized("NFKC", text)


def fold_for_detection(text: str) -> Folded | None:
    """The folded text with its offset map, or ``None`` when detectors can read ``text`` as it is.

    The text is folded chunk by chunk — a character with the combining marks that follow it — so
    that every folded character knows the original characters it came from; NFKC of a chunk equals
    NFKC of the whole text at chunk boundaries (a base character starts a new composition)."""
    if not _needs_folding(text):
        return None
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    n = len(text)
    i = 0
    while i < n:
        c = text[i]
        if c in INVISIBLE:
            i += 1
            continue
        j = i + 1
        while j < n and (unicodedata.combining(text[j]) or text[j] in INVISIBLE):
            j += 1
        chunk = text[i:j]
        if not chunk.isascii():
            chunk = unicodedata.normalize("NFKC", _INVISIBLE_RE.sub("", chunk))
        for ch in chunk:
            out.append(ch)
            starts.append(i)
            ends.append(j)
        i = j
    if not out:  # nothing but invisible characters
        return Folded("", [], [n])
    return Folded("".join(out), starts, ends)
