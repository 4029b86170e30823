"""The text the safety gate reads: normalised (letters of other scripts that look Latin, leetspeak, spaced
letters folded, NFKC) and decoded (percent, HTML entities, escapes, base64 and hex payloads hidden in a
candidate's text), so the gate's word classes match what a model would read."""

from __future__ import annotations

import base64
import binascii
import html
import re
import unicodedata
import urllib.parse

__all__ = ["decoded_payloads", "normalize"]


# ---------------------------------------------------------------------------------------------- normalising

#: Letters of other scripts that look like Latin ones (Cyrillic, Greek), folded inside words that also
#: hold Latin letters: "іgnоre" written with Cyrillic і and о reads as "ignore".
_CONFUSABLE = str.maketrans({
    "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "і": "i", "ј": "j", "ѕ": "s",
    "ԁ": "d", "ɡ": "g", "һ": "h", "ӏ": "l", "ԛ": "q", "ѡ": "w", "к": "k", "м": "m", "т": "t", "в": "b",
    "н": "h", "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C",
    "Т": "T", "Х": "X", "У": "Y", "І": "I", "Ј": "J", "Ѕ": "S",
    "α": "a", "ο": "o", "ρ": "p", "ε": "e", "ι": "i", "κ": "k", "ν": "v", "τ": "t", "υ": "u", "χ": "x",
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O",
    "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X", "ı": "i", "ℓ": "l",
})
_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s", "|": "l",
                       "!": "i", "8": "b", "9": "g"})
_LATIN = re.compile(r"[A-Za-z]")
_LEET_RUN = re.compile(r"[A-Za-z0-9@$|]+(?:!+[A-Za-z0-9@$|]+)*")  # a run of letters and digits ("G-7731": two)
_SPACED = re.compile(r"(?<![\w])(?:[^\W\d_][ .\-_*]){2,}[^\W\d_](?![\w])")
_WORDISH = re.compile(r"[^\s]+")


def _fold_word(w: str, latin_text: bool) -> str:
    # look-alike letters: inside a word that also holds Latin letters, or anywhere in a text that is
    # mostly Latin (a word of look-alikes only, "еvеryоnе", in an English sentence)
    if (latin_text or _LATIN.search(w)) and w.translate(_CONFUSABLE) != w:
        w = w.translate(_CONFUSABLE)
    # digits standing for letters inside a word ("1gn0re", "3v3ry0n3"); a number, a price or a time
    # ("7731", "$19", "12:00") has no letter and is left as it is
    return _LEET_RUN.sub(lambda m: m.group(0).translate(_LEET) if any(c.isalpha() for c in m.group(0)) and any(
        c in "0134579@$|!8" for c in m.group(0)) else m.group(0), w)


def _mostly_latin(t: str) -> bool:
    latin = len(_LATIN.findall(t))
    other = sum(1 for c in t if c.isalpha() and not ("a" <= c.lower() <= "z") and c.translate(_CONFUSABLE) == c)
    return latin > 2 * other


def normalize(text: str, *, casefold: bool = True) -> str:
    """``text`` as the gate reads it: NFKC, format characters dropped, HTML entities decoded, look-alike
    letters and digits-as-letters folded, spaced-out letters joined, casing folded (unless not
    ``casefold``)."""
    t = unicodedata.normalize("NFKC", text)
    t = "".join(c for c in t if unicodedata.category(c) != "Cf" and c != "\u034f")
    t = html.unescape(t)
    t = unicodedata.normalize("NFKC", t)
    t = _SPACED.sub(lambda m: re.sub(r"[ .\-_*]", "", m.group(0)), t)
    latin = _mostly_latin(t)
    t = _WORDISH.sub(lambda m: _fold_word(m.group(0), latin), t)
    return t.casefold() if casefold else t


# ---------------------------------------------------------------------------------------------- encodings

_B64 = re.compile(r"[A-Za-z0-9+/_\-]{16,}={0,2}")
_PCT = re.compile(r"%[0-9A-Fa-f]{2}")
_HTML_NUM = re.compile(r"&#(?:\d{2,7}|[xX][0-9A-Fa-f]{2,6});")
_ESCAPES = re.compile(r"(?:\\x[0-9A-Fa-f]{2}|\\u[0-9A-Fa-f]{4}){3,}")
_HEX = re.compile(r"\b(?:[0-9A-Fa-f]{2}){12,}\b")


def _texty(b: bytes) -> str | None:
    """``b`` as text when it reads as text (UTF-8, mostly printable, with letters), else ``None``."""
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError:
        return None
    s = "".join(c for c in s if unicodedata.category(c) != "Cf")  # zero-width characters inside the payload
    if len(s) < 6:
        return None
    printable = sum(c.isprintable() or c in "\n\t" for c in s)
    letters = sum(c.isalpha() for c in s)
    if printable < 0.95 * len(s) or letters < 0.5 * len(s.replace(" ", "")):
        return None
    return s


def decoded_payloads(text: str) -> list[tuple[str, str]]:
    """The encoded payloads in ``text`` that decode to text: ``(encoding, decoded)`` pairs."""
    out: list[tuple[str, str]] = []
    for m in _B64.finditer(text):
        tok = m.group(0)
        body = tok.rstrip("=")
        # an identifier in one case with no digits mixed in is a word, not an encoding
        if not (re.search(r"[a-z]", body) and re.search(r"[A-Z0-9+/]", body)):
            continue
        for alt in (base64.b64decode, base64.urlsafe_b64decode):
            try:
                s = _texty(alt(body + "=" * (-len(body) % 4)))
            except (binascii.Error, ValueError):
                s = None
            if s is not None:
                out.append(("base64", s))
                break
    if len(_PCT.findall(text)) >= 3:  # decoded whole: words split by encoded spaces then read as words
        out.append(("URL percent-encoding", urllib.parse.unquote_plus(text)))
    if len(_HTML_NUM.findall(text)) >= 3:
        out.append(("HTML entities", html.unescape(text)))
    for m in _ESCAPES.finditer(text):
        try:
            s = m.group(0).encode("ascii").decode("unicode_escape")
        except UnicodeDecodeError:
            continue
        out.append(("escape sequences", s))
    for m in _HEX.finditer(text):
        s = _texty(bytes.fromhex(m.group(0)))
        if s is not None:
            out.append(("hex", s))
    return out
