"""The walker of :func:`~molt.governance.redaction.event.redact_event`: every string leaf of an
event's payload, detected on in one pass and written back redacted. It walks the payload's models
as they are and copies only the containers a redacted leaf sits in (the rest is shared with the
input event); a payload holding a value that is not JSON is walked as its JSON dump instead.

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
from molt.governance.redaction.fields import field_type, party_name, typed_value
from molt.governance.redaction.redactor import Redactor, ReplacementState
from molt.governance.redaction.report import RedactedSpan
from molt.governance.redaction.vocabulary import KEEPABLE_TYPES

__all__ = ["PAYLOAD_ORDER", "NotWalkable", "Walker", "constructed", "span_record", "updated"]

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


class NotWalkable(Exception):
    """A payload holds a value that is neither JSON nor a pydantic model (a datetime, bytes, a
    tuple): :meth:`Walker.walk_event` cannot tell how it serialises, so the caller walks the
    payload's JSON dump instead (:meth:`Walker.walk`)."""


class _Owner:
    """Where a container of the walked payload sits (its parent's ``slot``), and its writable copy.

    Walking an event's models directly (:meth:`Walker.walk_event`) borrows the event's own objects,
    which are shared with the caller's event and must not change: a container is copied, with its
    chain of parents, only when a leaf under it is written (``writable``). Containers the walker
    made itself (a dumped payload, a parsed JSON string) are written in place (``copy`` is the
    container from the start)."""

    __slots__ = ("container", "copy", "parent", "slot")

    def __init__(self, container: Any, parent: _Owner | None, slot: Any, owned: bool) -> None:
        self.container = container
        self.parent = parent
        self.slot = slot
        self.copy: Any = container if owned else None

    def writable(self) -> Any:
        """The container to write to: the original when the walker owns it, else a shallow copy,
        put in place of the original in the (copied) parent."""
        copy = self.copy
        if copy is None:
            c = self.container
            if isinstance(c, dict):
                copy = dict(c)
            elif isinstance(c, list):
                copy = list(c)
            else:  # a pydantic model: a shallow copy, its fields written through __dict__
                copy = _shallow(c)
            parent = self.parent
            assert parent is not None  # a borrowed container always has one (the roots are owned)
            put(parent.writable(), self.slot, copy)
            self.copy = copy
        return copy


def _shallow(model: Any) -> Any:
    """What ``model.model_copy()`` makes (a new instance holding a copy of ``__dict__`` and of the
    set fields), without its generic path; a model with extra or private attributes takes it."""
    if model.__pydantic_extra__ is not None or model.__pydantic_private__ is not None:
        return model.model_copy()
    obj = object.__new__(type(model))
    object.__setattr__(obj, "__dict__", dict(model.__dict__))
    object.__setattr__(obj, "__pydantic_fields_set__", set(model.__pydantic_fields_set__))
    object.__setattr__(obj, "__pydantic_extra__", None)
    object.__setattr__(obj, "__pydantic_private__", None)
    return obj


def updated(model: Any, update: dict[str, Any]) -> Any:
    """What ``model.model_copy(update=update)`` makes for a model without extra or private
    attributes (its ``__dict__`` and set fields copied, then ``update`` written into both), without
    pydantic's generic path; any other model takes that path. ``update`` holds fields of the model,
    set as given (not validated), as ``model_copy`` does."""
    if model.__pydantic_extra__ is not None or model.__pydantic_private__ is not None:
        return model.model_copy(update=update)
    obj = _shallow(model)
    obj.__dict__.update(update)
    obj.__pydantic_fields_set__.update(update)
    return obj


def put(container: Any, slot: Any, value: Any) -> None:
    """``container[slot] = value``, for a pydantic model too (frozen: set in its ``__dict__``)."""
    if isinstance(container, (dict, list)):
        container[slot] = value
    else:
        container.__dict__[slot] = value


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
        # (holder's owner, slot, path, value, secret entity or None), in walk order
        self.leaves: list[tuple[_Owner, Any, Any, str, str | None]] = []
        # (holder's owner, slot, parsed value, payload field) of each string that held JSON
        self.json_strings: list[tuple[_Owner, Any, Any, str]] = []
        #: The walked payload, field -> value (a model or a dumped dict): what :meth:`run` wrote,
        #: the copies of the event's models (walk_event) or the dumped dicts written in place (walk).
        self.payload: dict[str, Any] = {}
        self._top = _Owner(self.payload, None, None, True)
        self._roots: dict[str, _Owner] = {}
        self._field = ""

    def walk(self, dumped: dict[str, Any]) -> None:
        """Collect the string leaves of a dumped payload (``{"observation": {...}, ...}``), leaving
        out identifiers, enums and token traces; :meth:`run` writes the dicts in place."""
        for field in PAYLOAD_ORDER:
            value = dumped.get(field)
            if isinstance(value, dict):
                self.payload[field] = value
                self._walk_root(field, value, True)

    def walk_event(self, event: Any) -> None:
        """:meth:`walk` over the event's payload models themselves, not a dump of them: the same
        leaves, paths and order (a model's fields are its dumped keys, in declaration order), and
        :meth:`run` writes copies of only the containers it changes (the event is left as it is).
        Raises :class:`NotWalkable` (before anything is detected) for a value that is neither JSON
        nor a model."""
        for field in PAYLOAD_ORDER:
            value = getattr(event, field)
            if isinstance(value, BaseModel):
                self.payload[field] = value
                self._walk_root(field, value, False)
            elif value is not None:
                raise NotWalkable(f"{field} is a {type(value).__name__}")

    def _walk_root(self, field: str, value: Any, owned: bool) -> None:
        owner = self._roots[field] = _Owner(value, self._top, field, owned)
        self._field = field
        items = value.items() if isinstance(value, dict) else value.__dict__.items()
        for key, sub in items:
            if (field, key) in _SKIP_PATHS or (key in _SKIP_KEYS and not isinstance(sub, (dict, list, BaseModel))):
                continue
            self.collect(sub, f"{field}.{key}", key, owner, key)

    def root(self, field: str) -> Any:
        """The writable value of payload ``field`` (copied now if nothing under it was written)."""
        return self._roots[field].writable()

    def collect(self, value: Any, path: Any, key: str | None, holder: _Owner, slot: Any) -> None:
        """Collect the string leaves under ``value``, which sits at ``holder``'s ``slot``.
        ``path`` is a string or a ``(parent, key)`` chain, turned into a string only for the
        leaves that get a span."""
        if isinstance(value, str):
            if value:
                self._text(value, path, key, holder, slot)
            return
        if isinstance(value, dict):
            items = value.items()
        elif isinstance(value, list):
            owner = _Owner(value, holder, slot, holder.copy is holder.container)
            for i, v in enumerate(value):
                if isinstance(v, str):
                    if v:
                        self._text(v, (path, i), key, owner, i)
                elif v is None or isinstance(v, (int, float)):
                    pass  # (checked before BaseModel, whose isinstance goes through ABCMeta)
                elif isinstance(v, (dict, list, BaseModel)):
                    self.collect(v, (path, i), key, owner, i)
                else:
                    raise NotWalkable(f"a {type(v).__name__} in a list")
            return
        elif value is None or isinstance(value, (int, float)):
            return
        elif isinstance(value, BaseModel):
            items = value.__dict__.items()
        else:
            raise NotWalkable(f"a {type(value).__name__}")
        owner = _Owner(value, holder, slot, holder.copy is holder.container)
        # a bare "name" beside a person's or an address's fields is the name of the record's party
        party = isinstance(value, dict) and ("name" in value or "Name" in value) and party_name(value)
        for k, v in items:
            if isinstance(v, str):
                if v and k not in _SKIP_KEYS:
                    self._text(v, (path, k), k, owner, k, "PERSON" if party and k in ("name", "Name") else None)
            elif v is None or isinstance(v, (int, float)):
                pass
            elif isinstance(v, (dict, list, BaseModel)):
                self.collect(v, (path, k), k, owner, k)
            else:
                raise NotWalkable(f"a {type(v).__name__} at {k!r}")

    def _text(
        self, value: str, path: Any, key: str | None, holder: _Owner, slot: Any, typed: str | None = None
    ) -> None:
        """Collect one string leaf; ``typed`` is the entity type its place says it holds, if any."""
        self.fields += 1
        if value[0] in _JSON_OR_SPACE and value.lstrip()[:1] in ("{", "[") and len(value.lstrip()) > 1:
            try:
                parsed = orjson.loads(value)
            except orjson.JSONDecodeError:
                parsed = None
            if isinstance(parsed, (dict, list)) and (
                value.count("[") + value.count("{") <= _MAX_JSON_DEPTH or _serialisable(parsed)
            ):
                self.json_strings.append((holder, slot, parsed, self._field))
                self.collect(parsed, path, None, _Owner(None, None, None, True), None)
                return
        entity = None
        if key:
            entity = secret_key_type(key)
            if entity is None:  # a field its key names (fields.py): taken whole when of its type's shape
                entity = typed or field_type(key)
                if entity is not None and not typed_value(value, entity):
                    entity = None
        if entity is not None and (entity not in self.redactor.policy.entities or not value.strip()):
            entity = None
        self.leaves.append((holder, slot, path, value, entity))

    def run(self) -> set[str]:
        """Detect on every collected leaf, replace, and re-serialise the strings that held JSON in
        the payload fields that changed; returns those fields."""
        # a leaf its key types is one span, known before any detector runs; it joins the others so
        # that a name it holds is looked for in the rest of the event (mentions.py)
        texts = [leaf[3] for leaf in self.leaves]
        known: list[list[Span] | None] = [
            None if entity is None else [Span(0, len(value), entity, 1.0, "json_key")]
            for _, _, _, value, entity in self.leaves
        ]
        found = self._detect_all(texts, known)
        redactor = self.redactor
        changed: set[str] = set()
        if any(found):
            # placeholders an earlier pass wrote anywhere in the event keep their numbers: a value
            # this pass finds gets the next free one, never one that already names another value
            for value in texts:
                if "<" in value:
                    self.state.reserve(value)
        for (holder, slot, path, value, _entity), spans in zip(self.leaves, found, strict=True):
            if spans and self.keep is not None:
                spans = self._not_kept(value, spans, self.keep)
            if not spans:
                continue
            field = path if isinstance(path, str) else _path(path)
            for sp in spans:  # built from checked values, so constructed without re-validation
                self.records.append(span_record(field, sp, redactor.mode_name(sp.entity_type)))
            put(holder.writable(), slot, redactor.apply(value, spans, self.state))
            changed.add(field.split(".", 1)[0].split("[", 1)[0])
        for holder, slot, parsed, root in self.json_strings[::-1]:  # inner JSON strings first
            if root in changed:
                put(holder.writable(), slot, orjson.dumps(parsed).decode())
        return changed

    def _not_kept(self, value: str, spans: list[Span], keep: Callable[[str], bool]) -> list[Span]:
        return [sp for sp in spans if sp.entity_type not in KEEPABLE_TYPES or not keep(value[sp.start : sp.end])]

    def _detect_all(self, texts: list[str], known: list[list[Span] | None]) -> list[list[Span]]:
        return self.redactor.detect_many(texts, known) if texts else []
