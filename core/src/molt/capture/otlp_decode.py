"""Decoding OTLP traces: protobuf and JSON ``ExportTraceServiceRequest`` bodies, and SDK ``ReadableSpan``
objects, into :class:`IngestSpan` (an :class:`~molt.atdp.otel.OtelSpan` plus what the mapping needs),
with GenAI messages read from every generation of the conventions into the current one.

:mod:`molt.capture.otlp` maps the spans to events and records them; :mod:`molt.interop.otlp` reads
collector files with the same decoders.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from molt.atdp.otel import AttributeValue, OtelSpan
from molt.errors import AdapterError

try:
    from google.protobuf import json_format  # type: ignore[import-untyped]
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace_service
except ImportError as exc:  # pragma: no cover - depends on the environment
    err = AdapterError("molt.capture.otlp needs opentelemetry-proto, but it is not installed.")
    err.add_note(
        'molt.capture.otlp needs opentelemetry-proto; install it with: pip install "opentelemetry-proto>=1.30"'
    )
    raise err from exc

try:  # only from_readable needs the SDK
    from opentelemetry.sdk.trace import ReadableSpan
except ImportError:  # pragma: no cover - depends on the environment
    ReadableSpan = Any  # type: ignore[assignment,misc]

__all__ = ["DecodeError", "IngestSpan", "decode_json", "decode_protobuf", "from_readable", "genai_messages",
           "trace_service"]

_REMOTE_KNOWN = 0x100  # SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_REMOTE = 0x200  # SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_STATUS = {
    0: "UNSET",
    1: "OK",
    2: "ERROR",
    "STATUS_CODE_UNSET": "UNSET",
    "STATUS_CODE_OK": "OK",
    "STATUS_CODE_ERROR": "ERROR",
}


@dataclass(frozen=True)
class IngestSpan:
    """One finished span as decoded from OTLP (or taken from the SDK), with what the mapping needs
    beyond :class:`~molt.atdp.otel.OtelSpan`."""

    span: OtelSpan
    status_message: str | None = None
    exception: tuple[str | None, str | None] | None = None  # (type, message) of a recorded exception
    scope_name: str | None = None
    scope_version: str | None = None
    resource: Mapping[str, AttributeValue] = field(default_factory=dict)
    parent_remote: bool = False
    #: the span's events as ``(name, attributes)`` (messages, evaluations, exceptions)
    events: tuple[tuple[str, Mapping[str, Any]], ...] = ()




def _attr(value: Any) -> AttributeValue:
    """An OTLP value as an OtelSpan attribute: maps (kvlist) and mixed lists travel as JSON text."""
    if isinstance(value, dict) or (isinstance(value, list) and any(isinstance(x, dict | list) for x in value)):
        return orjson.dumps(value).decode()
    return value  # type: ignore[no-any-return]


def _exception(events: Iterable[tuple[str, Mapping[str, Any]]]) -> tuple[str | None, str | None] | None:
    for name, attrs in events:
        if name == "exception":
            return (_str(attrs.get("exception.type")), _str(attrs.get("exception.message")))
    return None


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


def _status(code: Any) -> str:
    """The status code's name; one outside the OTLP enum is kept visible as ``UNKNOWN(<code>)`` (the
    mapping treats it as unset; a file import refuses the span with the value)."""
    try:
        return _STATUS[code]
    except (KeyError, TypeError):
        return f"UNKNOWN({str(code)[:40]})"


# GenAI messages: instrumentations emit three generations of the conventions. All are read into the
# current one (``gen_ai.input.messages`` / ``gen_ai.output.messages`` attributes: role + typed parts),
# so the mapping below has one form to read:
# - current: the attributes themselves, or the ``gen_ai.client.inference.operation.details`` event
#   carrying them;
# - semconv 1.28-1.36: one span event per message (``gen_ai.system.message``, ``gen_ai.user.message``,
#   ``gen_ai.assistant.message``, ``gen_ai.tool.message``) and ``gen_ai.choice`` per output, the body
#   in the event's attributes (or JSON in ``gen_ai.event.content``);
# - before 1.28 (OpenLLMetry and others): flattened ``gen_ai.prompt.<i>.<field>`` and
#   ``gen_ai.completion.<i>.<field>`` attributes (``tool_calls.<j>.<field>`` nested the same way).
_MESSAGE_EVENTS = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                   "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}
_DETAILS_EVENT = "gen_ai.client.inference.operation.details"


def _json_or(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("[", "{"):
        with contextlib.suppress(orjson.JSONDecodeError):
            return orjson.loads(value)
    return value


def _parts(msg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The typed parts of an OpenAI-style message (content, tool_calls, tool_call_id)."""
    parts: list[dict[str, Any]] = []
    content = _json_or(msg.get("content"))
    if msg.get("role") == "tool" or msg.get("tool_call_id"):
        return [{"type": "tool_call_response", "id": msg.get("tool_call_id") or msg.get("id"), "response": content}]
    if isinstance(content, list):
        for c in content:
            if isinstance(c, Mapping) and c.get("type") == "text":
                parts.append({"type": "text", "content": c.get("text", c.get("content"))})
            elif c is not None:
                parts.append({"type": "text", "content": c if isinstance(c, str) else orjson.dumps(c).decode()})
    elif content is not None:
        text = content if isinstance(content, str) else orjson.dumps(content).decode()
        parts.append({"type": "text", "content": text})
    calls = _json_or(msg.get("tool_calls"))
    for tc in calls if isinstance(calls, list) else []:
        if not isinstance(tc, Mapping):
            continue
        fn: Mapping[str, Any] = tc["function"] if isinstance(tc.get("function"), Mapping) else tc
        parts.append({"type": "tool_call", "id": tc.get("id"), "name": fn.get("name"),
                      "arguments": _json_or(fn.get("arguments"))})
    return parts


def _listify(node: Any) -> Any:
    if isinstance(node, dict):
        node = {k: _listify(v) for k, v in node.items()}
        if node and all(isinstance(k, int) for k in node):
            return [v for _, v in sorted(node.items())]
    return node


def _indexed(attrs: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """``prefix.<i>.<path>`` attributes as a list of nested dicts in index order (numeric path
    segments, as in ``tool_calls.<j>.name``, become lists)."""
    root: dict[Any, Any] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        path: list[Any] = [int(p) if p.isdigit() else p for p in key[len(prefix):].split(".")]
        if len(path) < 2 or not isinstance(path[0], int):
            continue
        node = root
        for p in path[:-1]:
            nxt = node.get(p)
            if not isinstance(nxt, dict):
                nxt = node[p] = {}
            node = nxt
        node[path[-1]] = value
    out = _listify(root)
    return [m for m in out if isinstance(m, dict)] if isinstance(out, list) else []


def genai_messages(attrs: dict[str, Any], events: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> dict[str, Any]:
    """``attrs`` with ``gen_ai.input.messages`` / ``gen_ai.output.messages`` filled in from the older
    conventions (see above) when the span does not carry them already; returns ``attrs``."""
    if "gen_ai.input.messages" in attrs and "gen_ai.output.messages" in attrs:
        return attrs
    inputs: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    reasons: list[str] = []
    for name, ea in events:
        if name == _DETAILS_EVENT:
            for key in ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions"):
                if key in ea and key not in attrs:
                    attrs[key] = ea[key]
            continue
        body = dict(ea)
        if "gen_ai.event.content" in body:
            got = _json_or(body.pop("gen_ai.event.content"))
            body.update(got if isinstance(got, Mapping) else {"content": got})
        if name in _MESSAGE_EVENTS:
            inputs.append({"role": body.get("role") or _MESSAGE_EVENTS[name], "parts": _parts(body)})
        elif name == "gen_ai.choice":
            msg = _json_or(body.get("message"))
            msg = msg if isinstance(msg, Mapping) else body
            outputs.append({"role": msg.get("role") or "assistant", "parts": _parts(msg),
                            **({"finish_reason": body["finish_reason"]} if body.get("finish_reason") else {})})
            if body.get("finish_reason"):
                reasons.append(str(body["finish_reason"]))
    if not inputs:
        inputs = [{"role": m.get("role") or "user", "parts": _parts(m)} for m in _indexed(attrs, "gen_ai.prompt.")]
    if not outputs:
        for m in _indexed(attrs, "gen_ai.completion."):
            outputs.append({"role": m.get("role") or "assistant", "parts": _parts(m),
                            **({"finish_reason": m["finish_reason"]} if m.get("finish_reason") else {})})
            if m.get("finish_reason"):
                reasons.append(str(m["finish_reason"]))
    if inputs and "gen_ai.input.messages" not in attrs:
        attrs["gen_ai.input.messages"] = orjson.dumps(inputs).decode()
    if outputs and "gen_ai.output.messages" not in attrs:
        attrs["gen_ai.output.messages"] = orjson.dumps(outputs).decode()
        if reasons and "gen_ai.response.finish_reasons" not in attrs:
            attrs["gen_ai.response.finish_reasons"] = reasons
    return attrs


def decode_protobuf(body: bytes) -> list[IngestSpan]:
    """The spans of a protobuf ``ExportTraceServiceRequest``. OTLP/JSON is the protobuf message's JSON
    mapping with the ids in hex, so the message is read through that mapping and one decoder,
    :func:`decode_json`, serves both encodings."""
    req = trace_service.ExportTraceServiceRequest.FromString(body)
    doc = json_format.MessageToDict(req, use_integers_for_enums=True)
    for rs in doc.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for s in ss.get("spans", ()):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in s:  # the JSON mapping writes bytes as base64; OTLP/JSON writes ids in hex
                        s[key] = base64.b64decode(s[key]).hex()
    return decode_json(doc)


def _field(d: Mapping[str, Any], camel: str, snake: str, default: Any = None) -> Any:
    """A field of an OTLP/JSON object by its camelCase name (the spec's) or its snake_case one (the
    protobuf field name, which some exporters write)."""
    return d.get(camel, d.get(snake, default))


def _json_value(v: Mapping[str, Any]) -> Any:
    for key, conv in (
        ("stringValue", str),
        ("string_value", str),
        ("boolValue", bool),
        ("bool_value", bool),
        ("intValue", int),
        ("int_value", int),
        ("doubleValue", float),
        ("double_value", float),
    ):
        if key in v:
            return conv(v[key])
    arr = _field(v, "arrayValue", "array_value")
    if arr is not None:
        return [_json_value(x) for x in arr.get("values", [])]
    kvl = _field(v, "kvlistValue", "kvlist_value")
    if kvl is not None:
        return {kv["key"]: _json_value(kv.get("value", {})) for kv in kvl.get("values", [])}
    return _field(v, "bytesValue", "bytes_value")  # base64 text already


def _json_attrs(items: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    return {kv["key"]: _json_value(kv.get("value") or {}) for kv in items or []}


def decode_json(body: bytes | Mapping[str, Any]) -> list[IngestSpan]:
    """The spans of an OTLP/JSON ``ExportTraceServiceRequest`` (hex trace and span ids, camelCase keys;
    snake_case accepted too)."""
    doc = orjson.loads(body) if isinstance(body, bytes | bytearray | str) else body
    out = []
    for rs in _field(doc, "resourceSpans", "resource_spans", []):
        resource = {k: _attr(v) for k, v in _json_attrs((rs.get("resource") or {}).get("attributes")).items()}
        for ss in _field(rs, "scopeSpans", "scope_spans", []):
            scope = ss.get("scope") or {}
            for s in ss.get("spans", []):
                status = s.get("status") or {}
                events = [(e.get("name", ""), _json_attrs(e.get("attributes"))) for e in s.get("events", [])]
                flags = int(s.get("flags") or 0)
                end = int(_field(s, "endTimeUnixNano", "end_time_unix_nano", 0) or 0)
                out.append(
                    IngestSpan(
                        span=OtelSpan(
                            name=str(s.get("name", "")),
                            start_time_unix_nano=int(_field(s, "startTimeUnixNano", "start_time_unix_nano", 0) or 0),
                            end_time_unix_nano=end or None,
                            attributes={k: _attr(v) for k, v in
                                        genai_messages(_json_attrs(s.get("attributes")), events).items()},
                            trace_id=str(_field(s, "traceId", "trace_id", "")).lower(),
                            span_id=str(_field(s, "spanId", "span_id", "")).lower(),
                            parent_span_id=str(_field(s, "parentSpanId", "parent_span_id", "")).lower() or None,
                            status_code=_status(status.get("code", 0)),
                        ),
                        status_message=status.get("message") or None,
                        exception=_exception(events),
                        scope_name=scope.get("name") or None,
                        scope_version=scope.get("version") or None,
                        resource=resource,
                        parent_remote=bool(flags & _REMOTE_KNOWN and flags & _REMOTE),
                        events=tuple(events),
                    )
                )
    return out


def from_readable(span: ReadableSpan) -> IngestSpan:
    """An SDK ``ReadableSpan`` (what a SpanProcessor's ``on_end`` gets) as an :class:`IngestSpan`."""
    ctx = span.context
    parent = span.parent
    scope = span.instrumentation_scope
    events = [(e.name, {k: list(v) if isinstance(v, tuple) else v for k, v in (e.attributes or {}).items()})
              for e in span.events]
    attrs = genai_messages({k: list(v) if isinstance(v, tuple) else v for k, v in (span.attributes or {}).items()},
                           events)
    return IngestSpan(
        span=OtelSpan(
            name=span.name,
            start_time_unix_nano=span.start_time or 0,
            end_time_unix_nano=span.end_time,
            attributes={k: _attr(v) for k, v in attrs.items()},
            trace_id=f"{ctx.trace_id:032x}" if ctx else None,
            span_id=f"{ctx.span_id:016x}" if ctx else None,
            parent_span_id=f"{parent.span_id:016x}" if parent else None,
            status_code=span.status.status_code.name,
        ),
        status_message=span.status.description,
        exception=_exception(events),
        scope_name=scope.name if scope else None,
        scope_version=scope.version if scope else None,
        resource={k: _attr(v) for k, v in span.resource.attributes.items()} if span.resource else {},
        parent_remote=bool(parent and parent.is_remote),
        events=tuple(events),
    )
