"""OpenTelemetry ingest: GenAI-convention spans from any OTel-instrumented stack, recorded as ATDP events.

A home-grown orchestration that already emits OpenTelemetry needs no Molt adapter: point its OTLP/HTTP
exporter at an endpoint serving :class:`OtlpIngest` (see :mod:`molt.capture.otlp_app`), or add
:class:`MoltSpanProcessor` to its ``TracerProvider`` in-process. Each finished span becomes one event
(:func:`molt.atdp.otel.span_to_event`: ``gen_ai.operation.name`` ``chat`` → ``model_call``,
``execute_tool`` → ``tool_call``, ``invoke_agent`` → ``agent_step``, …), with:

- **trajectory** = the trace: ``trajectory_id`` is the 32-hex trace id, so a trajectory is found by
  the id every OTel backend shows;
- **event ids** derived from (trace id, span id), so a child can name its parent before the parent
  span has ended (children end, and are exported, first) and a re-sent export is deduplicated by
  the Recorder instead of recorded twice; a span whose parent is remote (another service, per the
  OTLP span flags) is a root;
- **tenants**: with the caller's tenant (``tenant_id``) and a
  :class:`~molt.capture.tenancy.TrajectoryNamespace` that is on (more than one tenant), the trace
  id is resolved within the tenant like every other client-chosen trajectory id (another tenant's
  trace id names the caller's own namespaced trajectory) and event ids are derived from the resolved
  trajectory, so one tenant's export never lands in, links to, or deduplicates away another's; an
  event Molt exported itself (``molt.event``) is re-homed the same way and stamped with the tenant;
- **errors as outcomes**: status ``ERROR`` (or an ``error.type`` attribute) becomes
  ``outcome.status == "error"`` with the status message, else the recorded exception's message; an
  ended span with status ``UNSET`` or ``OK`` is ``ok``;
- **usage** from ``gen_ai.usage.*`` (``total_tokens`` filled in), the model from
  ``gen_ai.response.model`` / ``gen_ai.request.model``, input messages as the observation;
- **provenance**: ``integration="otlp"`` at molt-core's version, ``framework`` and
  ``framework_version`` from the instrumentation scope; ``service.name`` in ``metadata.tags``.

Payloads are bounded like an adapter's (:func:`~molt.capture.adapt.bound_payload`). Spans are recorded
in the order they arrive (end order), so ``seq`` follows end times as with every adapter. A span
written by :func:`molt.atdp.otel.event_to_span` comes back as exactly the event it carried.

Example::

    from molt.capture.otlp import OtlpIngest
    from molt.capture.otlp_app import create_app

    app = create_app(OtlpIngest(recorder))  # POST /v1/traces (protobuf or JSON, gzip or not)
"""

from __future__ import annotations

import base64
import contextlib
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from molt.atdp.models import Event, Observation, Outcome, OutcomeStatus, Provenance
from molt.atdp.otel import AttributeValue, OtelSpan, span_to_event
from molt.capture.adapt import Capture, CaptureStats, distribution_version
from molt.capture.tenancy import TrajectoryNamespace
from molt.errors import AdapterError

try:
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as _svc
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue
except ImportError as exc:  # pragma: no cover - depends on the environment
    err = AdapterError("molt.capture.otlp needs opentelemetry-proto, but it is not installed.")
    err.add_note(
        'molt.capture.otlp needs opentelemetry-proto; install it with: pip install "opentelemetry-proto>=1.30"'
    )
    raise err from exc

try:  # only MoltSpanProcessor needs the SDK
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
except ImportError:  # pragma: no cover - depends on the environment
    SpanProcessor = object  # type: ignore[assignment,misc]
    ReadableSpan = Any  # type: ignore[assignment,misc]

__all__ = [
    "IngestResult",
    "IngestSpan",
    "MoltSpanProcessor",
    "OtlpIngest",
    "decode_json",
    "decode_protobuf",
    "event_id_for",
    "from_readable",
    "genai_messages",
]

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
#: Event ids from (trajectory, span id): one derivation, shared with the tenant namespace.
_IDS = TrajectoryNamespace()
#: Default cap on one request body (after decompression), in bytes.
MAX_BODY_BYTES = 32 << 20


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


@dataclass(frozen=True)
class IngestResult:
    """What one export did: spans recorded, spans rejected (and why, for the first)."""

    accepted: int
    rejected: int = 0
    error: str | None = None


def event_id_for(trace_id: str, span_id: str) -> str:
    """The event id of span ``span_id`` in trace ``trace_id`` (a UUID derived from both, stable)."""
    return _IDS.event_id(trace_id, span_id)


# --------------------------------------------------------------------------- decoding


def _any_value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_any_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    return getattr(v, which)


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
    """The spans of a protobuf ``ExportTraceServiceRequest``."""
    req = _svc.ExportTraceServiceRequest.FromString(body)
    out = []
    for rs in req.resource_spans:
        resource = {kv.key: _attr(_any_value(kv.value)) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                events = [(e.name, {kv.key: _any_value(kv.value) for kv in e.attributes}) for e in s.events]
                attrs = genai_messages({kv.key: _any_value(kv.value) for kv in s.attributes}, events)
                out.append(
                    IngestSpan(
                        span=OtelSpan(
                            name=s.name,
                            start_time_unix_nano=s.start_time_unix_nano,
                            end_time_unix_nano=s.end_time_unix_nano or None,
                            attributes={k: _attr(v) for k, v in attrs.items()},
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex() or None,
                            status_code=_status(s.status.code),
                        ),
                        status_message=s.status.message or None,
                        exception=_exception(events),
                        scope_name=ss.scope.name or None,
                        scope_version=ss.scope.version or None,
                        resource=resource,
                        parent_remote=bool(s.flags & _REMOTE_KNOWN and s.flags & _REMOTE),
                        events=tuple(events),
                    )
                )
    return out


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


# --------------------------------------------------------------------------- mapping and recording


class OtlpIngest:
    """Turns OTLP spans into ATDP events and hands them to a Recorder.

    Thread-safe (it keeps no per-trace state: ids are derived, not remembered).

    Args:
        recorder: the :class:`~molt.capture.Recorder` (default: the process-wide one).
        tenant_id: ``metadata.tenant_id`` of every event (default: the ``tenant.id`` resource
            attribute, if any).
        max_field_bytes: bound of each free-form payload field (default 192 KiB).
        strict: raise the first mapping or Recorder error from :meth:`flush` (tests).
        namespace: resolves trace ids within the caller's tenant (the gateway's; ``None``: trace ids
            are trajectory ids as given).
        **capture_options: other :class:`~molt.capture.adapt.Capture` options (``blob_store``, ``tags``).

    Example::

        ingest = OtlpIngest(recorder)
        status, body, content_type = ingest.handle_http(request_body, "application/x-protobuf", None)
    """

    def __init__(
        self,
        recorder: Any = None,
        *,
        tenant_id: str | None = None,
        strict: bool = False,
        namespace: TrajectoryNamespace | None = None,
        **capture_options: Any,
    ):
        self.capture = Capture(
            recorder,
            integration="otlp",
            framework="opentelemetry",
            strict=strict,
            tenant_id=tenant_id,
            **capture_options,
        )
        self.tenant_id = tenant_id
        self.namespace = namespace
        self._tags = {str(k): str(v) for k, v in (capture_options.get("tags") or {}).items()}
        self._version = distribution_version("molt-core")

    # ---------------------------------------------------------------- HTTP

    def handle_http(
        self,
        body: bytes,
        content_type: str | None,
        content_encoding: str | None = None,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        tenant_id: str | None = None,
    ) -> tuple[int, bytes, str]:
        """Serve one OTLP/HTTP ``POST /v1/traces``: ``(status, response body, response content type)``.

        Protobuf (``application/x-protobuf``) and JSON (``application/json``) bodies, plain or
        ``gzip``/``deflate``; answers 200 with an ``ExportTraceServiceResponse`` in the request's
        encoding (``partial_success`` naming rejected spans), 400 for an undecodable body, 413 for
        one over ``max_body_bytes``, 415 for another content type. ``tenant_id`` (the tenant the
        caller authenticated as) overrides every other source of ``metadata.tenant_id``.
        """
        ctype = (content_type or "").split(";")[0].strip().lower()
        is_json = ctype == "application/json"
        if not is_json and ctype not in ("application/x-protobuf", "application/protobuf"):
            return (
                415,
                _status_body(
                    f"Unsupported content type {ctype!r}; send application/x-protobuf or application/json.", True
                ),
                "application/json",
            )
        try:
            body = _decompress(body, (content_encoding or "").strip().lower(), max_body_bytes)
        except _TooLarge:
            return (
                413,
                _status_body(f"The request body is over {max_body_bytes:,} bytes; export smaller batches.", is_json),
                _ctype(is_json),
            )
        except (OSError, zlib.error, EOFError, ValueError) as exc:
            return 400, _status_body(f"Could not decompress the body: {exc}.", is_json), _ctype(is_json)
        try:
            spans = decode_json(body) if is_json else decode_protobuf(body)
        except (DecodeError, orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            what = "OTLP/JSON" if is_json else "OTLP protobuf"
            return (
                400,
                _status_body(f"The body is not a valid {what} ExportTraceServiceRequest: {exc}.", is_json),
                _ctype(is_json),
            )
        result = self.ingest(spans, tenant_id=tenant_id)
        return 200, _response_body(result, is_json), _ctype(is_json)

    # ---------------------------------------------------------------- spans

    def ingest(self, spans: Iterable[IngestSpan], *, tenant_id: str | None = None) -> IngestResult:
        """Record each span as an event; a span that cannot be mapped is rejected (counted), not raised.

        ``tenant_id`` overrides the ingest's own and the spans' ``tenant.id`` resource attribute.
        """
        accepted = rejected = 0
        first: str | None = None
        for s in spans:
            try:
                self.capture.record(self.to_event(s, tenant_id=tenant_id))
                accepted += 1
            except Exception as exc:
                rejected += 1
                first = first or f"span {s.span.span_id} ({s.span.name!r}): {type(exc).__name__}: {exc}"[:500]
                self.capture.fail(exc)
        return IngestResult(accepted, rejected, first)

    def _namespace(self, tenant_id: str | None) -> TrajectoryNamespace | None:
        ns = self.namespace
        return ns if tenant_id is not None and ns is not None and ns.enabled else None

    def to_event(self, s: IngestSpan, *, tenant_id: str | None = None) -> Event:
        """The ATDP event for one span (see the module docstring for the mapping)."""
        span = s.span
        ns = self._namespace(tenant_id)
        if isinstance(span.attributes.get("molt.event"), str):
            ev = span_to_event(span)  # an event Molt exported itself: as it was, in the caller's tenant
            if tenant_id is None:
                return ev
            update: dict[str, Any] = {"metadata": ev.metadata.model_copy(update={"tenant_id": tenant_id})}
            if ns is not None:
                tid = ns.resolve(tenant_id, ev.trajectory_id)
                update.update(trajectory_id=tid, event_id=ns.event_id(tid, ev.event_id), seq=None,
                              parent_id=ns.event_id(tid, ev.parent_id) if ev.parent_id else None)
            return ev.model_copy(update=update)
        trace = span.trace_id or "0" * 32
        if ns is not None:
            trace = ns.resolve(tenant_id or "", trace)
        parents = None
        if span.parent_span_id and not s.parent_remote:
            parents = {span.parent_span_id: event_id_for(trace, span.parent_span_id)}
        ev = span_to_event(span, trajectory_id=trace, parent_ids=parents)
        d = ev.model_dump(mode="json", exclude_none=True)
        d["event_id"] = event_id_for(trace, span.span_id or ev.event_id)
        a = span.attributes
        action, outcome = d.get("action") or {}, d.get("outcome")
        for key in ("arguments", "text"):
            if key in action:
                action[key] = self.capture.payload(action[key])
        if outcome is not None and "output" in outcome:
            outcome["output"] = self.capture.payload(outcome["output"])
        if span.status_code == "ERROR" or "error.type" in a:
            etype, emsg = s.exception or (None, None)
            outcome = outcome or {"status": "error"}
            outcome["error"] = {
                "type": str(a.get("error.type") or etype or "error")[:200],
                "message": (s.status_message or emsg or span.name)[:4000],
            }
        elif outcome is None and span.end_time_unix_nano is not None:
            outcome = {"status": OutcomeStatus.OK.value}
        if outcome is not None:
            d["outcome"] = Outcome.model_validate(outcome).model_dump(mode="json", exclude_none=True)
        inputs = a.get("gen_ai.input.messages")
        if inputs is not None:
            with contextlib.suppress(orjson.JSONDecodeError):
                inputs = orjson.loads(inputs) if isinstance(inputs, str) else inputs
            d["observation"] = Observation(data=self.capture.payload(inputs)).model_dump(mode="json")
        md = d.setdefault("metadata", {})
        usage = md.get("usage")
        if usage and "total_tokens" not in usage:
            usage["total_tokens"] = (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)
        tenant = tenant_id or self.tenant_id or s.resource.get("tenant.id")
        if tenant:
            md["tenant_id"] = str(tenant)
        tags = {**(md.get("tags") or {}), **self._tags}
        if s.resource.get("service.name"):
            tags["service.name"] = str(s.resource["service.name"])
        if tags:
            md["tags"] = tags
        d["provenance"] = Provenance(
            framework=s.scope_name or "opentelemetry",
            framework_version=s.scope_version,
            integration="otlp",
            integration_version=self._version,
        ).model_dump(mode="json", exclude_none=True)
        return Event.model_validate(d)

    # ---------------------------------------------------------------- both

    def flush(self, timeout: float | None = 10.0, *, deliver: bool = False) -> bool:
        """Wait until every span so far is durable in the Recorder (see :meth:`Capture.flush`)."""
        return self.capture.flush(timeout, deliver=deliver)

    @property
    def stats(self) -> CaptureStats:
        """Counters: events recorded, drops, mapping errors."""
        return self.capture.stats


class MoltSpanProcessor(SpanProcessor):
    """An OpenTelemetry SDK span processor that records finished spans as ATDP events, in-process.

    ``on_end`` costs the instrumented thread a queue append; mapping happens on Molt's dispatcher
    thread, and errors are counted in :attr:`stats`, never raised.

    Args:
        recorder: the Recorder (default: the process-wide one); other arguments as :class:`OtlpIngest`.

    Example::

        provider = TracerProvider()
        provider.add_span_processor(MoltSpanProcessor(recorder))
    """

    def __init__(self, recorder: Any = None, **options: Any):
        self.ingest = OtlpIngest(recorder, **options)
        self.capture = self.ingest.capture

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        """Nothing: a span is recorded when it ends."""

    def on_end(self, span: ReadableSpan) -> None:
        """Queue ``span`` for mapping on the dispatcher thread."""
        try:
            self.capture.submit(self._map, span)
        except Exception as exc:
            self.capture.fail(exc)

    def _map(self, span: ReadableSpan) -> None:
        self.capture.record(self.ingest.to_event(from_readable(span)))

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until the spans ended so far are durable in the Recorder."""
        return self.flush(timeout_millis / 1000)

    def flush(self, timeout: float | None = 10.0, *, deliver: bool = False) -> bool:
        """See :meth:`OtlpIngest.flush`."""
        return self.ingest.flush(timeout, deliver=deliver)

    def shutdown(self) -> None:
        """Flush what is queued (the Recorder stays open: it is the caller's)."""
        self.ingest.flush(5.0)

    @property
    def stats(self) -> CaptureStats:
        """See :attr:`OtlpIngest.stats`."""
        return self.capture.stats


# --------------------------------------------------------------------------- HTTP helpers


class _TooLarge(Exception):
    pass


def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    if encoding in ("", "identity"):
        data = body
    elif encoding == "gzip":
        data = _bounded(zlib.decompressobj(16 + zlib.MAX_WBITS), body, limit)
    elif encoding == "deflate":
        data = _bounded(zlib.decompressobj(), body, limit)
    else:
        raise ValueError(f"unsupported Content-Encoding {encoding!r} (use gzip, deflate or none)")
    if len(data) > limit:
        raise _TooLarge
    return data


def _bounded(d: Any, body: bytes, limit: int) -> bytes:
    out = d.decompress(body, limit + 1)  # a zip bomb stops at the limit
    if len(out) > limit:
        raise _TooLarge
    return bytes(out)


def _ctype(is_json: bool) -> str:
    return "application/json" if is_json else "application/x-protobuf"


def _status_body(message: str, is_json: bool) -> bytes:
    if is_json:
        return orjson.dumps({"code": 3, "message": message})
    try:
        from google.rpc import status_pb2  # type: ignore[import-untyped]

        return bytes(status_pb2.Status(code=3, message=message).SerializeToString())
    except ImportError:  # pragma: no cover
        return message.encode()


def _response_body(result: IngestResult, is_json: bool) -> bytes:
    if is_json:
        if not result.rejected:
            return b"{}"
        return orjson.dumps(
            {"partialSuccess": {"rejectedSpans": str(result.rejected), "errorMessage": result.error or ""}}
        )
    resp = _svc.ExportTraceServiceResponse()
    if result.rejected:
        resp.partial_success.rejected_spans = result.rejected
        resp.partial_success.error_message = result.error or ""
    return bytes(resp.SerializeToString())
