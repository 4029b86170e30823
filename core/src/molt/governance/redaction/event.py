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

from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from molt.atdp.models import Event
from molt.errors import GovernanceError
from molt.governance.redaction.base import Span
from molt.governance.redaction.credentials import secret_key_type
from molt.governance.redaction.redactor import Redactor, ReplacementState

__all__ = ["RedactedSpan", "RedactionReport", "redact_event"]

#: Payload keys whose string values are identifiers or enums, never free text.
_SKIP_KEYS = frozenset(
    {
        "type", "role", "id", "tool_call_id", "call_id", "doc_id", "model", "finish_reason", "tool_name",
        "tool_version", "index", "operation", "status", "policy_version", "tokenizer", "step_type",
        "score", "top_k", "confidence", "rating", "retryable",
    }
)  # fmt: skip
_SKIP_PATHS = frozenset({("action", "tokens"), ("action", "sampling")})
_PAYLOAD_ORDER = ("observation", "hidden", "action", "outcome")
_ADAPTERS: dict[str, TypeAdapter[Any]] = {}


def _adapter(field: str) -> TypeAdapter[Any]:
    """A validator for one payload field of :class:`Event` (built once per field)."""
    adapter = _ADAPTERS.get(field)
    if adapter is None:
        adapter = _ADAPTERS[field] = TypeAdapter(Event.model_fields[field].annotation)
    return adapter


class RedactedSpan(BaseModel):
    """One replaced span: where (field path + offsets into the field's original string), what type,
    which detector, which mode. Never the original value."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    field: str
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    entity_type: str
    detector: str
    score: float
    mode: str


class RedactionReport(BaseModel):
    """What redaction did to one event (or one text): spans, counts by type, the policy that ran."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event_id: str | None = None
    trajectory_id: str | None = None
    policy: str
    policy_fingerprint: str
    spans: list[RedactedSpan] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    fields_scanned: int = 0
    token_trace_dropped: bool = False

    @property
    def redacted(self) -> bool:
        """Whether anything was replaced."""
        return bool(self.spans)


_RECORD_FIELDS = frozenset(RedactedSpan.model_fields)
_REPORT_FIELDS = frozenset(RedactionReport.model_fields)
# what a string that holds JSON starts with, leading whitespace included (any str.isspace character)
_JSON_OR_SPACE = frozenset("{[") | frozenset(chr(c) for c in range(0x3000 + 1) if chr(c).isspace())
_set = object.__setattr__
_M = TypeVar("_M", bound=BaseModel)


def _constructed(model: type[_M], fields: frozenset[str], **values: Any) -> _M:
    """``model`` from checked values, one for every field (what ``model_construct`` does, without
    its per-field alias and default handling). The walker builds its records and the report from
    values whose types it knows, so validating them again would only cost time."""
    obj: _M = object.__new__(model)
    _set(obj, "__dict__", values)
    _set(obj, "__pydantic_fields_set__", set(fields))
    _set(obj, "__pydantic_extra__", None)
    _set(obj, "__pydantic_private__", None)
    return obj


def _record(field: str, sp: Span, mode: str) -> RedactedSpan:
    """A :class:`RedactedSpan` from checked values (see :func:`_constructed`)."""
    return _constructed(
        RedactedSpan, _RECORD_FIELDS, field=field, start=sp.start, end=sp.end, entity_type=sp.entity_type,
        detector=sp.detector, score=round(sp.score, 3), mode=mode,
    )  # fmt: skip


def _path(node: Any) -> str:
    """The field path of a leaf, from its ``(parent, key)`` chain: ``action.arguments.items[2]``."""
    parts: list[str] = []
    while isinstance(node, tuple):
        node, key = node
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    parts.append(node)
    return "".join(reversed(parts))


class _Walker:
    """Walks a dumped payload in two passes: collect every string leaf (parsing strings that hold
    JSON), then detect on all of them at once (:meth:`Redactor.detect_many`) and write the redacted
    values back in place."""

    def __init__(self, redactor: Redactor):
        self.redactor = redactor
        self.state = ReplacementState()
        self.records: list[RedactedSpan] = []
        self.fields = 0
        # (holder, slot, path, value, secret entity or None), in walk order
        self.leaves: list[tuple[Any, Any, Any, str, str | None]] = []
        self.json_strings: list[tuple[Any, Any, Any]] = []

    def collect(self, value: Any, path: Any, key: str | None, holder: Any, slot: Any) -> None:
        """Collect the string leaves under ``value``. ``path`` is a string or a ``(parent, key)``
        chain, turned into a string only for the leaves that get a span."""
        if isinstance(value, str):
            if value:
                self._text(value, path, key, holder, slot)
        elif isinstance(value, dict):
            for k, v in value.items():
                if isinstance(v, str):
                    if v and k not in _SKIP_KEYS:
                        self._text(v, (path, k), k, value, k)
                elif isinstance(v, (dict, list)):
                    self.collect(v, (path, k), k, value, k)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                if isinstance(v, str):
                    if v:
                        self._text(v, (path, i), key, value, i)
                elif isinstance(v, (dict, list)):
                    self.collect(v, (path, i), key, value, i)

    def _text(self, value: str, path: Any, key: str | None, holder: Any, slot: Any) -> None:
        self.fields += 1
        if value[0] in _JSON_OR_SPACE and value.lstrip()[:1] in ("{", "[") and len(value.lstrip()) > 1:
            try:
                parsed = orjson.loads(value)
            except orjson.JSONDecodeError:
                parsed = None
            if isinstance(parsed, (dict, list)):
                self.json_strings.append((holder, slot, parsed))
                self.collect(parsed, path, None, None, None)
                return
        entity = secret_key_type(key) if key else None
        if entity is not None and (entity not in self.redactor.policy.entities or not value.strip()):
            entity = None
        self.leaves.append((holder, slot, path, value, entity))

    def run(self) -> None:
        """Detect on every collected leaf, replace, and re-serialise the strings that held JSON."""
        texts = [leaf[3] for leaf in self.leaves if leaf[4] is None]
        found = self._detect_all(texts)
        k = 0
        policy = self.redactor.policy
        for holder, slot, path, value, entity in self.leaves:
            if entity is not None:
                spans = [Span(0, len(value), entity, 1.0, "json_key")]
            else:
                spans = found[k]
                k += 1
            if not spans:
                continue
            field = path if isinstance(path, str) else _path(path)
            for sp in spans:  # built from checked values, so constructed without re-validation
                self.records.append(_record(field, sp, policy.mode_for(sp.entity_type).value))
            holder[slot] = self.redactor.apply(value, spans, self.state)
        for holder, slot, parsed in self.json_strings[::-1]:  # inner JSON strings first
            if holder is not None:
                holder[slot] = orjson.dumps(parsed).decode()

    def _detect_all(self, texts: list[str]) -> list[list[Span]]:
        return self.redactor.detect_many(texts) if texts else []


def redact_event(
    event: Event, *, redactor: Redactor | None = None, policy_name: str | None = None
) -> tuple[Event, RedactionReport]:
    """A redacted copy of ``event`` and the report of what was replaced.

    ``redactor`` defaults to the ``default`` policy's. Token ids of a generation are dropped when
    anything in the event was redacted (policy ``token_traces``), because they encode the original
    text. Raises :class:`~molt.errors.GovernanceError` (with the event's ids) when a detector fails
    or the redacted payload no longer validates.
    """
    redactor = redactor or Redactor()
    policy = redactor.policy
    walker = _Walker(redactor)
    # only the payload is walked, so only the payload is dumped (the envelope stays as it is)
    dumped = {
        f: _adapter(f).dump_python(v, mode="json") for f in _PAYLOAD_ORDER if (v := getattr(event, f)) is not None
    }
    try:
        for field in _PAYLOAD_ORDER:
            value = dumped.get(field)
            if not isinstance(value, dict):
                continue
            for key, sub in value.items():
                if (field, key) in _SKIP_PATHS or (key in _SKIP_KEYS and not isinstance(sub, (dict, list))):
                    continue
                walker.collect(sub, f"{field}.{key}", key, value, key)
        walker.run()
    except GovernanceError as exc:
        exc.trajectory_id, exc.event_id = event.trajectory_id, event.event_id
        raise
    dropped = False
    action = dumped.get("action")
    if (
        walker.records
        and isinstance(action, dict)
        and action.get("tokens") is not None
        and policy.token_traces == "drop_if_redacted"
    ):
        action["tokens"] = None
        dropped = True
    counts: dict[str, int] = {}
    for r in walker.records:
        counts[r.entity_type] = counts.get(r.entity_type, 0) + 1
    report = _constructed(
        RedactionReport,
        _REPORT_FIELDS,
        event_id=event.event_id,
        trajectory_id=event.trajectory_id,
        policy=policy_name or policy.name,
        policy_fingerprint=redactor.fingerprint,
        spans=walker.records,
        counts=counts,
        fields_scanned=walker.fields,
        token_trace_dropped=dropped,
    )
    if not walker.records:
        return event, report
    try:
        # revalidate the payload parts that hold a redacted leaf; the envelope and the untouched
        # parts are shared with the original (frozen) event
        changed = {f.split(".", 1)[0].split("[", 1)[0] for f in {r.field for r in walker.records}}
        if dropped:
            changed.add("action")
        update = {f: _adapter(f).validate_python(dumped[f]) for f in _PAYLOAD_ORDER if f in changed}
        redacted = event.model_copy(update=update)
    except ValueError as exc:
        raise GovernanceError(
            f"The redacted event no longer validates ({exc}); this is a bug in a detector or the walker.",
            trajectory_id=event.trajectory_id,
            event_id=event.event_id,
        ) from exc
    return redacted, report
