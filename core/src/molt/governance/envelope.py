"""The identifiers a client chooses that an event's envelope stores, governed like its payload.

Payload redaction (:func:`~molt.governance.redaction.redact_event`) leaves the envelope alone: ids,
metadata and provenance are structure, not text. Some envelope fields are nevertheless whatever the
client sent, and clients put people in them: the OpenAI ``user`` field (the gateway's session key when
no ``X-Molt-Session`` is given) is often an e-mail address, and ``X-Molt-Agent``, ``metadata.task``
and tags recorded from headers or OpenTelemetry resources are free text. :func:`redact_envelope` runs
the tenant's redactor over exactly those fields (:data:`CLIENT_FIELDS` and every tag value), so a
detected identifier is replaced per the policy (placeholder, mask, or keyed pseudonym: the same
value gets the same pseudonym, so grouping by session or agent still works) and an ordinary id such
as ``support-bot`` stays as it is.
"""

from __future__ import annotations

from typing import Any

from molt.atdp.models import Event
from molt.capture.payload import clip, max_length

__all__ = ["CLIENT_FIELDS", "redact_envelope"]

#: Envelope fields whose value a client chooses: (path in the event, attribute chain).
CLIENT_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("session_id", ("session_id",)),
    ("metadata.agent_id", ("metadata", "agent_id")),
    ("metadata.task", ("metadata", "task")),
)
# A placeholder can be longer than what it replaces ("<EMAIL_ADDRESS_1>" for "a@b.io"): a redacted
# session id is clipped back to the bound the model declares, or the sealed event would not validate
# when read back.
_SESSION_MAX = max_length(Event, "session_id")


def redact_envelope(event: Event, redactor: Any, state: Any = None) -> tuple[Event, list[Any]]:
    """``event`` with the client-chosen envelope fields redacted by ``redactor`` (a
    :class:`~molt.governance.redaction.Redactor`), and the :class:`RedactedSpan` records of what
    was replaced (field paths like ``metadata.task`` or ``metadata.tags.user``; never the value)."""
    from molt.governance.redaction import RedactedSpan, ReplacementState

    state = state if state is not None else ReplacementState()
    records: list[Any] = []

    def one(path: str, text: str) -> str:
        spans = redactor.detect(text)
        if not spans:
            return text
        for s in spans:
            records.append(RedactedSpan(field=path, start=s.start, end=s.end, entity_type=s.entity_type,
                                        detector=s.detector, score=s.score, mode=redactor.mode_name(s.entity_type)))
        return str(redactor.apply(text, spans, state))

    md = event.metadata
    session = clip(one("session_id", event.session_id), _SESSION_MAX) if event.session_id else event.session_id
    md_update: dict[str, Any] = {}
    for path, chain in CLIENT_FIELDS[1:]:
        value = getattr(md, chain[1])
        if value:
            new = one(path, value)
            if new != value:
                md_update[chain[1]] = new
    if md.tags:
        tags = {k: one(f"metadata.tags.{k}", v) if isinstance(v, str) else v for k, v in md.tags.items()}
        if tags != md.tags:
            md_update["tags"] = tags
    if not records:
        return event, records
    update: dict[str, Any] = {}
    if session != event.session_id:
        update["session_id"] = session
    if md_update:
        update["metadata"] = md.model_copy(update=md_update)
    return event.model_copy(update=update), records
