"""Entity types, detected spans, the :class:`Detector` protocol and the detector registry.

A detector turns a text into :class:`Span` candidates ``(start, end, entity_type, score)``; the
:class:`~molt.governance.redaction.redactor.Redactor` resolves overlaps and replaces them. Spans
carry offsets, a type and a score — never the text they cover — so they can be logged freely.

Detectors are registered by name in :data:`detectors` (a :class:`molt.registry.Registry` of
zero-argument factories), so a policy names the detectors it runs and a replay can rebuild them::

    from molt.governance.redaction import detectors
    email = detectors.get("email")()
    email.detect("write to ana@example.org")   # [Span(start=9, end=24, entity_type='EMAIL_ADDRESS', ...)]
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import NamedTuple, Protocol, runtime_checkable

from molt.registry import Registry

__all__ = [
    "DEFAULT_ENTITIES",
    "DIGIT",
    "OUT_OF_SCOPE_ENTITIES",
    "STRUCTURED_ENTITIES",
    "Detector",
    "EntityType",
    "Span",
    "detectors",
    "text_key",
]


class EntityType(StrEnum):
    """Entity types Molt detects. Names follow Presidio's where Presidio has one."""

    EMAIL_ADDRESS = "EMAIL_ADDRESS"
    PHONE_NUMBER = "PHONE_NUMBER"
    CREDIT_CARD = "CREDIT_CARD"
    US_SSN = "US_SSN"
    IBAN_CODE = "IBAN_CODE"
    IP_ADDRESS = "IP_ADDRESS"
    #: Web addresses, with or without a scheme (``https://shop.example.de/``, ``example.de``).
    DOMAIN_NAME = "DOMAIN_NAME"
    US_DRIVER_LICENSE = "US_DRIVER_LICENSE"
    #: National identity and tax numbers with a checksum (ES DNI/NIE, NL BSN, PL PESEL, BR CPF, UK NHS, IN Aadhaar).
    NATIONAL_ID = "NATIONAL_ID"
    #: API keys and access tokens in known formats (AWS, GitHub, Slack, Stripe, OpenAI, JWT, …).
    API_KEY = "API_KEY"
    #: PEM private key blocks.
    PRIVATE_KEY = "PRIVATE_KEY"
    #: Values of ``password=…`` / ``"password": "…"`` style assignments and URL credentials.
    PASSWORD = "PASSWORD"
    #: Account handles (``@name``): online identifiers of people and organisations.
    USERNAME = "USERNAME"
    PERSON = "PERSON"
    LOCATION = "LOCATION"
    ADDRESS = "ADDRESS"
    ORGANIZATION = "ORGANIZATION"
    #: Dates and times: detected only when a policy asks for it (out of the default scope).
    DATE_TIME = "DATE_TIME"


#: Pattern- and checksum-detected types (the issue's recall ≥ 0.99 group).
STRUCTURED_ENTITIES: frozenset[str] = frozenset(
    {"EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "US_SSN", "IBAN_CODE", "IP_ADDRESS"}
)

#: Types a default policy redacts. DATE_TIME, job titles and honorifics are not personal data on
#: their own and are what makes a trajectory learnable (deadlines, schedules), so they are out of
#: the default scope; a policy can still add DATE_TIME.
DEFAULT_ENTITIES: frozenset[str] = frozenset(e.value for e in EntityType) - {"DATE_TIME"}

#: Types labelled in common PII benchmarks that the default policy deliberately leaves alone.
OUT_OF_SCOPE_ENTITIES: frozenset[str] = frozenset({"DATE_TIME", "TITLE", "PREFIX"})


#: A detector's ``requires`` value meaning "some decimal digit" (see :class:`Detector`).
DIGIT = "<digit>"


class Span(NamedTuple):
    """A detected entity: ``text[start:end]`` is of ``entity_type``; ``score`` in [0, 1].

    A tuple rather than a model because detectors emit many of them on the hot path.
    """

    start: int
    end: int
    entity_type: str
    score: float
    detector: str


@runtime_checkable
class Detector(Protocol):
    """Finds entities in text. Implementations must be pure (no I/O) and thread-safe."""

    #: Registry name of the detector, recorded in every span it emits.
    name: str
    #: Entity types this detector can emit.
    entities: frozenset[str]
    # Optional: ``requires`` — a substring (or :data:`DIGIT`) without which the detector finds
    # nothing; the redactor skips the call when the text lacks it (most JSON leaves are short).

    def detect(self, text: str) -> list[Span]:
        """Every candidate span in ``text`` (overlaps allowed; the redactor resolves them)."""
        ...


def text_key(text: str) -> tuple[int, int]:
    """A memo key for ``text`` that does not hold it: its length and its ``hash()``.

    ``hash()`` of a string is SipHash-1-3 (64 bits) under a key drawn at random for each process
    and is computed once per string object, so a key costs next to nothing (a BLAKE2b digest of
    the text cost ~0.6 µs per field). Two different texts of the same length share a key with
    probability 2⁻⁶⁴; against memos of a few thousand (fields) to fifty thousand (entity runs)
    entries, about one lookup in 10¹⁴ could return another text's spans, and the per-process
    random key keeps that out of an attacker's hands (a ``PYTHONHASHSEED`` fixed by the host makes
    the key known, which still leaves a collision at ~2⁶⁴ tries).
    """
    return (len(text), hash(text))


#: Detector factories by name. A factory takes no argument and returns a :class:`Detector`.
detectors: Registry[Callable[[], Detector]] = Registry("detector")
