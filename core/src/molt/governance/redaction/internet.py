"""Internet identifiers: e-mail addresses and URLs (with a scheme, ``www.`` or a bare domain of a
known top-level domain).

An account handle as social networks and chat tools write it (``@ana_lima``) is an online identifier
of a person or an organisation: ``handle`` finds it (type ``USERNAME``), but not a decorator
(``@property`` alone on a line or before ``(``), an ``@`` inside a word (e-mails), or ``@`` followed
by a digit (``@ 5pm``, ``@2x``).

Registered detector names: ``email``, ``url``, ``handle``.
"""

from __future__ import annotations

import re

from molt.governance.redaction.base import Span, detectors
from molt.governance.redaction.patterns import RegexDetector

__all__ = ["EmailDetector", "HandleDetector", "UrlDetector"]


_EMAIL = re.compile(r"(?<![\w.%+-])[\w.%+'-]+@(?:[^\W_](?:[\w-]*[^\W_])?\.)+[^\W\d_]{2,24}(?![\w-])")


def _local_char(c: str) -> bool:
    """Whether ``c`` may be in an e-mail local part as :data:`_EMAIL` reads one (``[\\w.%+'-]``)."""
    return c.isalnum() or c in "_.%+'-"


class EmailDetector(RegexDetector):
    """E-mail addresses (RFC 5322 local parts as they appear in prose, internationalised domains)."""

    requires = "@"

    def __init__(self) -> None:
        super().__init__("email", "EMAIL_ADDRESS", _EMAIL, score=1.0)

    def detect(self, text: str) -> list[Span]:
        """E-mail spans (nothing to do without an ``@``)."""
        if "@" not in text:
            return []
        out: list[Span] = []
        end = 0
        n = len(text)
        at = text.find("@")
        while at >= 0:
            if at >= end:
                # the local part is the run of local-part characters right before this "@" (at most
                # 64 of them): walk back to its start and match there once. Trying every start
                # in a window before each "@" cost a regex attempt per character: "a@a@…" took
                # seconds per 100 KB.
                s = at
                floor = max(end, at - 65)
                while s > floor and _local_char(text[s - 1]):
                    s -= 1
                if s < at and not (s > 0 and _local_char(text[s - 1])):
                    m = _EMAIL.match(text, s, min(n, at + 256))
                    if m is not None:
                        out.append(Span(m.start(), m.end(), "EMAIL_ADDRESS", 1.0, self.name))
                        end = m.end()
            at = text.find("@", at + 1)
        return out


#: Top-level domains a bare domain (no scheme, no ``www.``) may end with. Country codes that are
#: also common file extensions (``.py``, ``.md``, ``.sh``, ``.rs``, ``.pl``, …) are left out so
#: ``models.py`` is not a domain; with a scheme or ``www.`` any TLD is accepted.
_BARE_TLDS = (
    "com|org|net|edu|gov|mil|int|info|biz|io|ai|app|dev|co|me|tv|cloud|online|site|shop|tech|store|"
    "xyz|blog|news|agency|email|ac|ad|ae|af|ag|al|am|ao|ar|at|au|aw|az|ba|bb|bd|be|bf|bg|bh|bj|bo|br|"
    "bs|bt|bw|by|bz|ca|cd|cf|cg|ch|ci|cl|cm|cn|cr|cu|cv|cy|cz|de|dk|do|dz|ec|ee|eg|es|et|eu|fi|fj|fr|"
    "ga|gd|ge|gh|gi|gl|gm|gr|gt|gy|hk|hn|hr|ht|hu|id|ie|il|im|in|iq|ir|is|it|je|jm|jo|jp|ke|kg|kh|kr|"
    "kw|kz|la|lb|li|lk|lt|lu|lv|ly|ma|mc|mg|mk|ml|mn|mo|mt|mu|mv|mw|mx|my|mz|na|ne|ng|ni|nl|no|np|nz|"
    "om|pa|pe|pg|ph|pk|pr|pt|qa|ro|rw|sa|sc|sd|se|sg|si|sk|sn|sr|sv|sy|tg|th|tj|tn|tr|tt|tw|tz|"
    "ua|ug|uk|us|uy|uz|va|vc|ve|vn|za|zm|zw"
)
_URL_SCHEME = re.compile(r"(?:(?:https?|ftp)://|(?<![\w@.-])www\.)[^\s<>\"'`{}|\\^\[\]]+", re.IGNORECASE)
_URL_BARE = re.compile(
    rf"(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+(?:{_BARE_TLDS})(?![\w@-]|\.\w)(?:/[^\s<>\"'`]*)?", re.IGNORECASE
)
_BARE_TLD_SET = frozenset(_BARE_TLDS.split("|"))
# a dot and a word that may be a TLD: the '.'-led scan that finds bare-domain candidates. The word
# is checked against _BARE_TLD_SET afterwards: a 230-way alternation in the regex was tried, branch
# by branch, at every dot of every text.
_DOT_TLD = re.compile(rf"\.([A-Za-z]{{2,{max(map(len, _BARE_TLD_SET))}}})(?![\w@-]|\.\w)")
_DOMAIN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-")
_TRAILING = ".,;:!?)]}'\""


def _url_starts(text: str) -> list[int]:
    """Sorted offsets where :data:`_URL_SCHEME` can match: a scheme before each ``://`` (the
    earliest that spells one), each ``www.`` (any case)."""
    starts = []
    k = text.find("://")
    while k >= 0:
        for n in (5, 4, 3):
            if k >= n and text[k - n : k].lower() in ("https", "http", "ftp"):
                starts.append(k - n)
                break
        k = text.find("://", k + 3)
    low = text.lower()
    if len(low) != len(text):  # a few characters lowercase to two: offsets would shift
        return [m.start() for m in _URL_SCHEME.finditer(text)]
    if "www." in low:
        k = low.find("www.")
        while k >= 0:
            starts.append(k)
            k = low.find("www.", k + 1)
    return sorted(starts)


class UrlDetector:
    """Web addresses with a scheme or ``www.`` (any TLD), and bare domains with a common TLD."""

    name = "url"
    entities = frozenset({"DOMAIN_NAME"})
    requires = "."

    def detect(self, text: str) -> list[Span]:
        """URL and domain spans, trailing sentence punctuation excluded."""
        out: list[Span] = []
        if "://" in text or "www." in text or "WWW." in text:
            last = 0
            for start in _url_starts(text):  # the regex runs only where a URL can start
                if start < last:
                    continue
                m = _URL_SCHEME.match(text, start)
                if m is not None:
                    self._add(text, m.start(), m.end(), out)
                    last = m.end()
        covered = [(s.start, s.end) for s in out]
        last = 0
        for m in _DOT_TLD.finditer(text):
            dot = m.start()
            if dot < last or m.group(1).lower() not in _BARE_TLD_SET or any(a <= dot < b for a, b in covered):
                continue
            s = dot
            while s > 0 and text[s - 1] in _DOMAIN_CHARS:
                s -= 1
            while s < dot and text[s] in ".-":
                s += 1
            if s == dot or (s > 0 and text[s - 1] in "_@/"):
                continue
            b = _URL_BARE.match(text, s)
            if b is not None and b.end() > dot:
                self._add(text, s, b.end(), out)
                last = b.end()
        return out

    def _add(self, text: str, start: int, end: int, out: list[Span]) -> None:
        while end > start and text[end - 1] in _TRAILING:
            if text[end - 1] == ")" and "(" in text[start:end]:
                break
            end -= 1
        value = text[start:end]
        if "." not in value or end - start < 4:
            return
        scheme = "://" in value or value[:4].lower() == "www."
        out.append(Span(start, end, "DOMAIN_NAME", 0.95 if scheme else 0.6, self.name))


_HANDLE = re.compile(r"(?<![\w@.+-])@([A-Za-z_][A-Za-z0-9_]{1,30})(?![\w@(-]|\.\w)")


class HandleDetector:
    """Account handles (``@name``): Twitter/X, Instagram, Slack, GitHub mentions."""

    name = "handle"
    entities = frozenset({"USERNAME"})
    requires = "@"

    def detect(self, text: str) -> list[Span]:
        """``@name`` spans, the ``@`` included; a decorator alone on its line is code, not a handle."""
        out: list[Span] = []
        for m in _HANDLE.finditer(text):
            a, b = m.span()
            line_start = text.rfind("\n", 0, a) + 1
            if not text[line_start:a].strip() and (b == len(text) or text[b] == "\n"):
                continue  # "@property" on a line of its own
            out.append(Span(a, b, "USERNAME", 0.9, self.name))
        return out


detectors.register("email", EmailDetector)
detectors.register("handle", HandleDetector)
detectors.register("url", UrlDetector)
