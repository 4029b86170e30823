"""The walker of :func:`~molt.governance.redaction.event.redact_event`: every string leaf of an
event's dumped payload, detected on in one pass and written back redacted.

Part of the compiled build (:mod:`~molt.governance.redaction.native`): it is plain Python over
dicts, lists and strings, run for every field of every captured event. It also builds the report's
records and the report itself (:func:`constructed`): the pydantic models stay in
:mod:`~molt.governance.redaction.report`, which cannot be compiled, but filling them can be.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel

from molt.governance.redaction.base import Span
from molt.governance.redaction.credentials import secret_key_type
from molt.governance.redaction.redactor import Redactor, ReplacementState
from molt.governance.redaction.report import RedactedSpan
from molt.governance.redaction.vocabulary import KEEPABLE_TYPES

__all__ = ["PAYLOAD_ORDER", "Walker", "constructed", "span_record"]

#: Payload keys whose string values are identifiers or enums, never free text.
_SKIP_KEYS = frozenset(
    {
        "type", "role", "id", "tool_call_id", "call_id", "doc_id", "model", "finish_reason", "tool_name",
        "tool_version", "index", "operation", "status", "policy_version", "tokenizer", "step_type",
        "score", "top_k", "confidence", "rating", "retryable",
    }
)  # fmt: skip
_SKIP_PATHS = frozenset({("action", "tokens"), ("action", "sampling")})
PAYLOAD_ORDER = ("observation", "hidden", "action", "outcome")
# what a string that holds JSON starts with, leading whitespace included (any str.isspace character)
_JSON_OR_SPACE = frozenset("{[") | frozenset(chr(c) for c in range(0x3000 + 1) if chr(c).isspace())

# orjson re-serialises at most 254 levels (TypeError past that) and orjson.loads accepts 1024: a
# string nested deeper than this is redacted as the text it is, not walked as JSON (a string with
# no more brackets than this cannot be deeper, so only such strings pay for the check).
_MAX_JSON_DEPTH = 250


def _serialisable(parsed: Any) -> bool:
    try:
        orjson.dumps(parsed)
    except TypeError:
        return False
    return True


_M = TypeVar("_M", bound=BaseModel)
_RECORD_FIELDS = frozenset(RedactedSpan.model_fields)
_ROUNDED: dict[float, float] = {}  # score -> round(score, 3); detectors emit a handful of scores


def constructed(model: type[_M], fields: frozenset[str], values: dict[str, Any]) -> _M:
    """``model`` from checked ``values``, one for every field (what ``model_construct`` does, without
    its per-field alias and default handling). The walker builds its records and the report from
    values whose types it knows, so validating them again would only cost time."""
    obj: _M = object.__new__(model)
    object.__setattr__(obj, "__dict__", values)
    object.__setattr__(obj, "__pydantic_fields_set__", set(fields))
    object.__setattr__(obj, "__pydantic_extra__", None)
    object.__setattr__(obj, "__pydantic_private__", None)
    return obj


def span_record(field: str, sp: Span, mode: str) -> RedactedSpan:
    """A :class:`RedactedSpan` from checked values (see :func:`constructed`)."""
    score = _ROUNDED.get(sp.score)
    if score is None:  # round() with digits goes through a decimal conversion: ~0.3 µs a call
        score = round(sp.score, 3)
        if len(_ROUNDED) < 4096:
            _ROUNDED[sp.score] = score
    values: dict[str, Any] = {
        "field": field, "start": sp.start, "end": sp.end, "entity_type": sp.entity_type,
        "detector": sp.detector, "score": score, "mode": mode,
    }  # fmt: skip
    return constructed(RedactedSpan, _RECORD_FIELDS, values)


def _path(node: Any) -> str:
    """The field path of a leaf, from its ``(parent, key)`` chain: ``action.arguments.items[2]``."""
    parts: list[str] = []
    while isinstance(node, tuple):
        node, key = node
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    parts.append(node)
    return "".join(reversed(parts))


class Walker:
    """Walks a dumped payload in two passes: collect every string leaf (parsing strings that hold
    JSON), then detect on all of them at once (:meth:`Redactor.detect_many`) and write the redacted
    values back in place."""

    def __init__(self, redactor: Redactor, keep: Callable[[str], bool] | None = None):
        self.redactor = redactor
        # whether an organisation or place name is the tenant's operator vocabulary, kept as it is
        # (molt.governance.redaction.vocabulary); None: everything detected is replaced
        self.keep = keep
        self.state = ReplacementState()
        self.records: list[RedactedSpan] = []
        self.fields = 0
        # (holder, slot, path, value, secret entity or None), in walk order
        self.leaves: list[tuple[Any, Any, Any, str, str | None]] = []
        self.json_strings: list[tuple[Any, Any, Any]] = []

    def walk(self, dumped: dict[str, Any]) -> None:
        """Collect the string leaves of a dumped payload (``{"observation": {...}, ...}``), leaving
        out identifiers, enums and token traces."""
        for field in PAYLOAD_ORDER:
            value = dumped.get(field)
            if not isinstance(value, dict):
                continue
            for key, sub in value.items():
                if (field, key) in _SKIP_PATHS or (key in _SKIP_KEYS and not isinstance(sub, (dict, list))):
                    continue
                self.collect(sub, f"{field}.{key}", key, value, key)

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
            if isinstance(parsed, (dict, list)) and (
                value.count("[") + value.count("{") <= _MAX_JSON_DEPTH or _serialisable(parsed)
            ):
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
        redactor = self.redactor
        for holder, slot, path, value, entity in self.leaves:
            if entity is not None:
                spans = [Span(0, len(value), entity, 1.0, "json_key")]
            else:
                spans = found[k]
                k += 1
            if spans and self.keep is not None:
                spans = self._not_kept(value, spans, self.keep)
            if not spans:
                continue
            field = path if isinstance(path, str) else _path(path)
            for sp in spans:  # built from checked values, so constructed without re-validation
                self.records.append(span_record(field, sp, redactor.mode_name(sp.entity_type)))
            holder[slot] = redactor.apply(value, spans, self.state)
        for holder, slot, parsed in self.json_strings[::-1]:  # inner JSON strings first
            if holder is not None:
                holder[slot] = orjson.dumps(parsed).decode()

    def _not_kept(self, value: str, spans: list[Span], keep: Callable[[str], bool]) -> list[Span]:
        return [sp for sp in spans if sp.entity_type not in KEEPABLE_TYPES or not keep(value[sp.start : sp.end])]

    def _detect_all(self, texts: list[str]) -> list[list[Span]]:
        return self.redactor.detect_many(texts) if texts else []
