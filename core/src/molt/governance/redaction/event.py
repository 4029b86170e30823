"""Redact every text-bearing field of an ATDP :class:`~molt.atdp.Event`, structure-aware for JSON.

The walker visits the payload (observation, hidden, action, outcome): messages and their content
parts, tool-call arguments, tool results, retrieved passages, memory contents, file contents and
diffs, browser values, hidden plans and reasoning. JSON values are walked structurally — keys are
kept, string leaves are redacted — and a string that *holds* JSON (OpenAI's ``arguments`` is a JSON
string) is parsed, walked and re-serialised, so the result is still valid JSON. The value of a key
that names a secret (``password``, ``api_key``, ``access_token``) is redacted whole.

Identifiers, enums, model names, tool names and numbers are left alone; so is the envelope
(ids, metadata, provenance).

Example::

    event, report = redact_event(event, redactor=Redactor(policy))
    report.counts            # {"EMAIL_ADDRESS": 2, "PERSON": 1}
    report.spans[0].field    # "observation.messages[0].content"
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter

from molt.atdp.models import Event
from molt.errors import GovernanceError
from molt.governance.redaction.redactor import Redactor
from molt.governance.redaction.report import RedactedSpan, RedactionReport
from molt.governance.redaction.walk import PAYLOAD_ORDER, NotWalkable, Walker, constructed, put, updated

__all__ = ["RedactedSpan", "RedactionReport", "redact_event"]

_REPORT_FIELDS = frozenset(RedactionReport.model_fields)
_ADAPTERS: dict[str, TypeAdapter[Any]] = {}


def _adapter(field: str) -> TypeAdapter[Any]:
    """A validator for one payload field of :class:`Event` (built once per field)."""
    adapter = _ADAPTERS.get(field)
    if adapter is None:
        annotation = Event.model_fields[field].annotation
        assert annotation is not None  # every payload field of Event is annotated
        adapter = _ADAPTERS[field] = TypeAdapter(annotation)
    return adapter


def redact_event(
    event: Event,
    *,
    redactor: Redactor | None = None,
    policy_name: str | None = None,
    keep: Callable[[str], bool] | None = None,
) -> tuple[Event, RedactionReport]:
    """A redacted copy of ``event`` and the report of what was replaced.

    ``redactor`` defaults to the ``default`` policy's. Token ids of a generation are dropped when
    anything in the event was redacted (policy ``token_traces``), because they encode the original
    text. ``keep`` says which detected organisation and place names are left as they are (a tenant's
    operator vocabulary, :meth:`~molt.governance.redaction.vocabulary.OperatorVocabulary.keeps`). Raises
    :class:`~molt.errors.GovernanceError` (with the event's ids) when a detector fails or (for a
    payload holding values that are not JSON, redacted through its dump) the redacted payload no
    longer validates.
    """
    redactor = redactor or Redactor()
    policy = redactor.policy
    walker = Walker(redactor, keep)
    # the payload's models are walked as they are (no dump, no validation of the result: only
    # string leaves are replaced, by strings, so every model stays valid) ...
    dumped: dict[str, Any] | None = None
    try:
        walker.walk_event(event)
    except NotWalkable:
        # ... unless it holds a value that is not JSON: then its JSON dump is walked and the
        # changed parts validated again (only the payload is dumped; the envelope stays as it is)
        walker = Walker(redactor, keep)
        dumped = {
            f: _adapter(f).dump_python(v, mode="json") for f in PAYLOAD_ORDER if (v := getattr(event, f)) is not None
        }
        walker.walk(dumped)
    try:
        changed = walker.run()
    except GovernanceError as exc:
        exc.trajectory_id, exc.event_id = event.trajectory_id, event.event_id
        raise
    dropped = False
    action = walker.payload.get("action")
    if (
        walker.records
        and action is not None
        and (action if isinstance(action, dict) else action.__dict__).get("tokens") is not None
        and policy.token_traces == "drop_if_redacted"
    ):
        put(walker.root("action"), "tokens", None)
        changed.add("action")
        dropped = True
    counts: dict[str, int] = {}
    for r in walker.records:
        counts[r.entity_type] = counts.get(r.entity_type, 0) + 1
    report = constructed(
        RedactionReport,
        _REPORT_FIELDS,
        {
            "event_id": event.event_id,
            "trajectory_id": event.trajectory_id,
            "policy": policy_name or policy.name,
            "policy_fingerprint": redactor.fingerprint,
            "spans": walker.records,
            "counts": counts,
            "fields_scanned": walker.fields,
            "token_trace_dropped": dropped,
        },
    )
    if not walker.records:
        return event, report
    # the envelope and the untouched payload parts are shared with the original (frozen) event
    if dumped is None:
        return updated(event, {f: walker.root(f) for f in PAYLOAD_ORDER if f in changed}), report
    try:
        update = {f: _adapter(f).validate_python(dumped[f]) for f in PAYLOAD_ORDER if f in changed}
        redacted = event.model_copy(update=update)
    except ValueError as exc:
        raise GovernanceError(
            f"The redacted event no longer validates ({exc}); this is a bug in a detector or the walker.",
            trajectory_id=event.trajectory_id,
            event_id=event.event_id,
        ) from exc
    return redacted, report
