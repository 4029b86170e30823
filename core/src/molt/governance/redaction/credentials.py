"""Detectors for credentials: API keys and tokens in vendor formats, private keys, passwords.

Vendor formats are matched by their fixed prefixes (``AKIA``, ``ghp_``, ``xoxb-``, ``sk_live_``,
``sk-``, ``AIza``, ``hf_``, JWTs), which keeps false positives near zero. Free-form secrets are
found by what names them: ``password=…``, ``"api_key": "…"``, ``Authorization: Bearer …``, the
user-info part of a URL. :func:`secret_key_type` lets the structure-aware JSON walker treat the
whole value of a ``"password"`` key as a secret.

Registered detector names: ``api_key``, ``private_key``, ``password``.

>>> [s.entity_type for s in ApiKeyDetector().detect("export GITHUB_TOKEN=ghp_" + "a" * 36)]
['API_KEY']
"""

from __future__ import annotations

import re

from molt.governance.redaction.base import Span, detectors
from molt.governance.redaction.patterns import RegexDetector, lowered

__all__ = ["ApiKeyDetector", "PasswordDetector", "PrivateKeyDetector", "secret_key_type"]

_VENDOR_TOKENS = "|".join(
    (
        r"(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}",  # AWS access key ids
        r"gh[pousr]_[A-Za-z0-9]{36,255}",  # GitHub tokens
        r"github_pat_[A-Za-z0-9_]{22,255}",
        r"glpat-[A-Za-z0-9_-]{20,}",  # GitLab
        r"xox[abposre]-[A-Za-z0-9-]{10,}",  # Slack
        r"(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}",  # Stripe
        r"sk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",  # OpenAI, Anthropic
        r"AIza[0-9A-Za-z_-]{35}",  # Google API keys
        r"ya29\.[0-9A-Za-z_-]{20,}",  # Google OAuth access tokens
        r"hf_[A-Za-z0-9]{30,}",  # Hugging Face
        r"npm_[A-Za-z0-9]{36}",
        r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}",
        r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}",  # SendGrid
        r"(?:AC|SK)[0-9a-f]{32}",  # Twilio
        r"dop_v1_[a-f0-9]{64}",  # DigitalOcean
        r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}",  # Shopify
        r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWT
    )
)
#: Substrings every vendor token contains; the token regex runs only when one is present.
_VENDOR_PREFIXES = (
    "AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA", "ghp_", "gho_", "ghu_",
    "ghs_", "ghr_", "github_pat_", "glpat-", "xox", "_live_", "_test_", "sk-", "AIza", "ya29.", "hf_", "npm_",
    "pypi-", "SG.", "dop_v1_", "shpat_", "shpca_", "shppa_", "shpss_", "eyJ",
)  # fmt: skip
_TWILIO_HINT = re.compile(r"(?:AC|SK)[0-9a-f]{32}")
# the prefixes grouped by a character each group's members all hold, so a text without that
# character skips the whole group with one substring test; the AWS-style "A…" prefixes are one
# regex, whose literal first character keeps the scan in C
_PREFIX_GROUPS = tuple(
    (anchor, tuple(p for p in _VENDOR_PREFIXES if anchor in p and not p.startswith("A")))
    for anchor in ("_", "-", ".", "xox", "eyJ")
)
_A_PREFIXES = re.compile("A(?:" + "|".join(p[1:] for p in _VENDOR_PREFIXES if p.startswith("A")) + ")")


def _vendor_hint(text: str) -> bool:
    """Whether ``text`` holds a vendor token prefix (or a Twilio-shaped id)."""
    for anchor, group in _PREFIX_GROUPS:
        if anchor in text and any(p in text for p in group):
            return True
    if _A_PREFIXES.search(text) is not None:
        return True
    return ("AC" in text or "SK" in text) and _TWILIO_HINT.search(text) is not None


_BEARER_HINTS = ("earer", "oken", "asic")  # in the lowered text: any case of bearer / token / basic
_TOKEN_RX = re.compile(rf"(?<![\w-])(?:{_VENDOR_TOKENS})(?![\w-])")
_BEARER_RX = re.compile(r"\b(?:bearer|token|basic)\s+([A-Za-z0-9._~+/-]{16,}=*)", re.IGNORECASE)


class ApiKeyDetector:
    """API keys and access tokens in known vendor formats, and ``Bearer`` credentials."""

    name = "api_key"
    entities = frozenset({"API_KEY"})

    def __init__(self) -> None:
        self._vendor = RegexDetector("api_key", "API_KEY", _TOKEN_RX, score=1.0)
        self._bearer = RegexDetector("api_key", "API_KEY", _BEARER_RX, score=0.9, group=1)

    def detect(self, text: str) -> list[Span]:
        """Token spans (each pattern runs only when its fixed prefix is in the text)."""
        out: list[Span] = []
        if _vendor_hint(text):
            out += self._vendor.detect(text)
        if any(p in lowered(text) for p in _BEARER_HINTS):
            out += self._bearer.detect(text)
        return out


class PrivateKeyDetector(RegexDetector):
    """PEM private key blocks (RSA, EC, OpenSSH, PKCS#8, encrypted), header to footer."""

    requires = "-----BEGIN"

    def __init__(self) -> None:
        super().__init__(
            "private_key", "PRIVATE_KEY",
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----"
            r"[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----",
            score=1.0,
        )  # fmt: skip


_PASSWORD_KEYS = r"pass(?:word|wd|phrase)?|pwd|secret|client[_-]?secret|db[_-]?pass(?:word)?"
_TOKEN_KEYS = (
    r"api[_-]?key|apikey|access[_-]?key(?:[_-]?id)?|secret[_-]?access[_-]?key"
    r"|(?:access|auth|refresh|session|id)[_-]?token|token|private[_-]?key|x-api-key"
)
_ASSIGN_RX = re.compile(
    rf"(?<![\w-])[\w.-]*?(?P<key>{_PASSWORD_KEYS}|{_TOKEN_KEYS})[\"']?\s*(?:[:=]|=>)\s*"
    r"(?:\"(?P<v1>[^\"\n]{3,200})\"|'(?P<v2>[^'\n]{3,200})'|(?P<v3>[^\s\"',;&]{3,200}))",
    re.IGNORECASE,
)
_SAID_RX = re.compile(r"\b(?:password|passcode|passphrase|pin)\s+(?:is|was|:)\s+[\"']?([^\s\"']{4,100})", re.I)
_URL_CRED_RX = re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@]+:([^@\s/]+)@", re.IGNORECASE)
_KEY_TYPE_RX = (
    (re.compile(rf"^(?:[\w.-]*[_.-])?(?:{_PASSWORD_KEYS})$", re.I), "PASSWORD"),
    (re.compile(rf"^(?:[\w.-]*[_.-])?(?:{_TOKEN_KEYS})$", re.I), "API_KEY"),
)
#: Lowercase fragments of every key name ``_ASSIGN_RX`` knows; it runs only around them.
_KEY_HINTS = ("pass", "pwd", "secret", "key", "token")
# what follows a hint that ends an assignment's key: the rest of the key, a quote, ":" or "="
_ASSIGN_TAIL = re.compile(r"[\w-]*[\"']?\s*[:=]")


def _find_all(s: str, sub: str) -> list[int]:
    out = []
    k = s.find(sub)
    while k >= 0:
        out.append(k)
        k = s.find(sub, k + 1)
    return out


_PLACEHOLDER_VALUES = frozenset({"none", "null", "true", "false", "****", "xxx", "redacted", "changeme", "<redacted>"})


def secret_key_type(key: str) -> str | None:
    """``"PASSWORD"`` or ``"API_KEY"`` when a JSON/config key names a secret (``db_password``,
    ``OPENAI_API_KEY``), else ``None``."""
    try:
        return _key_types[key]
    except KeyError:
        pass
    found = None
    for rx, entity in _KEY_TYPE_RX:
        if rx.match(key):
            found = entity
            break
    if len(_key_types) < 10_000:  # payload keys repeat; a bounded memo keeps the walker cheap
        _key_types[key] = found
    return found


_key_types: dict[str, str | None] = {}


class PasswordDetector:
    """Secrets named by their context: ``password=…``, ``"api_key": "…"``, "my password is …",
    and the password in ``scheme://user:password@host``."""

    name = "password"
    entities = frozenset({"PASSWORD", "API_KEY"})

    def detect(self, text: str) -> list[Span]:
        """Secret value spans (the value only, never the key that names it)."""
        out: list[Span] = []
        low = lowered(text)
        if len(low) != len(text):
            low = text
        # the hints that can start an assignment's key (the rest of the key, then ":" or "=")
        starts = sorted({k for key in _KEY_HINTS for k in _find_all(low, key) if _ASSIGN_TAIL.match(low, k)})
        end = 0
        for k in starts:  # the assignment regex runs only around the words that name a secret
            if k < end:
                continue
            for m in _ASSIGN_RX.finditer(text, max(end, k - 40), min(len(text), k + 260)):
                end = max(end, m.end())
                span = self._value(m)
                if span is not None:
                    out.append(span)
        for word in ("password", "passcode", "passphrase", "pin"):
            for k in _find_all(low, word):
                said = _SAID_RX.match(text, k)
                if said is not None:
                    out.append(Span(said.start(1), said.end(1), "PASSWORD", 0.9, self.name))
        if "://" in text and "@" in text:
            for m in _URL_CRED_RX.finditer(text):
                out.append(Span(m.start(1), m.end(1), "PASSWORD", 0.9, self.name))
        return out

    def _value(self, m: re.Match[str]) -> Span | None:
        group = "v1" if m.group("v1") is not None else "v2" if m.group("v2") is not None else "v3"
        value = m.group(group).strip()
        if value.casefold() in _PLACEHOLDER_VALUES or value.startswith(("{", "$", "<", "%")):
            return None
        entity = secret_key_type(m.group("key")) or "PASSWORD"
        start = m.start(group)
        return Span(start, start + len(value), entity, 0.9, self.name)


detectors.register("api_key", ApiKeyDetector)
detectors.register("private_key", PrivateKeyDetector)
detectors.register("password", PasswordDetector)
