"""PII and secret redaction for ATDP events.

Detectors (pattern + checksum for structured identifiers and credentials, lexicon + context for
names, places, addresses and organisations) find spans; a :class:`Redactor` applies a tenant's
:class:`RedactionPolicy` (mask, typed placeholder, or keyed HMAC pseudonym); :func:`redact_event`
walks every text-bearing field of an event, JSON structurally, and returns a
:class:`RedactionReport` of what it replaced — offsets, types and field paths, never values.

Example::

    from molt.governance.redaction import Redactor, redact_event

    text, spans = Redactor().redact("Ana Lima, card 4111 1111 1111 1111")
    # '<PERSON_1>, card <CREDIT_CARD_1>'
    event, report = redact_event(event)
"""

# ruff: noqa: E402  (the imports below must come after activate())
# First: the compiled detectors, when a current build exists, go in front of the sources (see native).
from molt.governance.redaction import native as _native

_native.activate(__path__)

from molt.governance.redaction import credentials as _credentials  # noqa: F401  (registers secret detectors)
from molt.governance.redaction import entities as _entities  # noqa: F401  (registers "entities")
from molt.governance.redaction import internet as _internet  # noqa: F401  (registers "email", "url")
from molt.governance.redaction import national_ids as _national_ids  # noqa: F401  (registers "national_id")
from molt.governance.redaction import patterns as _patterns  # noqa: F401  (registers pattern detectors)
from molt.governance.redaction.base import (
    DEFAULT_ENTITIES,
    OUT_OF_SCOPE_ENTITIES,
    STRUCTURED_ENTITIES,
    Detector,
    EntityType,
    Span,
    detectors,
)
from molt.governance.redaction.event import RedactedSpan, RedactionReport, redact_event
from molt.governance.redaction.policy import (
    RedactionPolicy,
    ReplacementMode,
    TokenTraceHandling,
    derive_tenant_key,
    load_policy,
    policies,
)
from molt.governance.redaction.redactor import Redactor, ReplacementState, redactors, resolve_overlaps

__all__ = [
    "DEFAULT_ENTITIES",
    "OUT_OF_SCOPE_ENTITIES",
    "STRUCTURED_ENTITIES",
    "Detector",
    "EntityType",
    "RedactedSpan",
    "RedactionPolicy",
    "RedactionReport",
    "Redactor",
    "ReplacementMode",
    "ReplacementState",
    "Span",
    "TokenTraceHandling",
    "derive_tenant_key",
    "detectors",
    "load_policy",
    "policies",
    "redact_event",
    "redactors",
    "resolve_overlaps",
]
