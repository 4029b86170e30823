"""Mapping between ATDP events and OpenTelemetry GenAI spans.

Events map to spans that follow the GenAI semantic conventions (``gen_ai.*`` attributes), so any
OTel-instrumented stack can feed ATDP and any OTel backend can show ATDP data. What the conventions do
not cover travels in ``molt.*`` attributes, which makes :func:`event_to_span` → :func:`span_to_event`
lossless; a foreign span without ``molt.*`` attributes still maps to a sensible event.

>>> from molt.atdp import Event, EventKind, ToolCall
>>> ev = Event(trajectory_id="t", kind=EventKind.TOOL_CALL, action=ToolCall(tool_name="search"))
>>> span_to_event(event_to_span(ev)) == ev
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from molt.atdp.ids import new_id
from molt.atdp.models import (
    AgentStep,
    ErrorInfo,
    Event,
    EventKind,
    Generation,
    Outcome,
    OutcomeStatus,
    RetrievalQuery,
    ToolCall,
    Usage,
)
from molt.errors import ProtocolError

__all__ = ["OtelSpan", "event_to_span", "span_to_event"]

AttributeValue = str | bool | int | float | list[str] | list[int] | list[float] | list[bool]

#: gen_ai.operation.name for each event kind (GenAI semantic conventions, v1.37+).
_OPERATION = {
    EventKind.MODEL_CALL: "chat",
    EventKind.TOOL_CALL: "execute_tool",
    EventKind.AGENT_STEP: "invoke_agent",
    EventKind.RETRIEVAL: "retrieval",
}
_KIND_FOR_OPERATION = {
    "chat": EventKind.MODEL_CALL,
    "text_completion": EventKind.MODEL_CALL,
    "generate_content": EventKind.MODEL_CALL,
    "execute_tool": EventKind.TOOL_CALL,
    "invoke_agent": EventKind.AGENT_STEP,
    "create_agent": EventKind.AGENT_STEP,
    "retrieval": EventKind.RETRIEVAL,
    "embeddings": EventKind.RETRIEVAL,
}


@dataclass
class OtelSpan:
    """The parts of an OTel span that ATDP maps: name, times (ns since epoch) and attributes."""

    name: str
    start_time_unix_nano: int
    end_time_unix_nano: int | None = None
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    trace_id: str | None = None
    span_id: str | None = None
    parent_span_id: str | None = None
    status_code: str = "UNSET"  # "UNSET" | "OK" | "ERROR"


def _ns(ts: datetime) -> int:
    return int(ts.timestamp() * 1_000_000) * 1000


def _j(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def event_to_span(event: Event) -> OtelSpan:
    """Map an event to a GenAI span; the full event rides along in ``molt.*`` attributes."""
    a: dict[str, AttributeValue] = {}
    op = _OPERATION.get(event.kind)
    if op:
        a["gen_ai.operation.name"] = op
    md = event.metadata
    if event.session_id:
        a["gen_ai.conversation.id"] = event.session_id
    if md.agent_id:
        a["gen_ai.agent.id"] = md.agent_id
    if md.usage:
        if md.usage.input_tokens is not None:
            a["gen_ai.usage.input_tokens"] = md.usage.input_tokens
        if md.usage.output_tokens is not None:
            a["gen_ai.usage.output_tokens"] = md.usage.output_tokens
    act = event.action
    if isinstance(act, Generation):
        if act.model or md.model:
            a["gen_ai.request.model"] = act.model or md.model or ""
        if act.finish_reason:
            a["gen_ai.response.finish_reasons"] = [act.finish_reason]
        if act.text is not None or act.tool_calls:
            parts: list[dict[str, Any]] = []
            if act.text is not None:
                parts.append({"type": "text", "content": act.text})
            for tc in act.tool_calls or []:
                parts.append({"type": "tool_call", "id": tc.id, "name": tc.name, "arguments": tc.arguments})
            a["gen_ai.output.messages"] = _j([{"role": "assistant", "parts": parts}])
    elif isinstance(act, ToolCall):
        a["gen_ai.tool.name"] = act.tool_name
        if act.call_id:
            a["gen_ai.tool.call.id"] = act.call_id
        if act.arguments is not None:
            a["gen_ai.tool.call.arguments"] = _j(act.arguments)
    elif isinstance(act, AgentStep):
        a["gen_ai.agent.name"] = act.name
    elif isinstance(act, RetrievalQuery) and act.index:
        a["gen_ai.data_source.id"] = act.index
    if event.outcome is not None and event.outcome.error is not None:
        a["error.type"] = event.outcome.error.type
    if isinstance(act, ToolCall) and event.outcome is not None and event.outcome.output is not None:
        a["gen_ai.tool.call.result"] = _j(event.outcome.output)
    # Lossless part: the whole event, in ATDP's own namespace.
    a["molt.event_id"] = event.event_id
    a["molt.trajectory_id"] = event.trajectory_id
    a["molt.kind"] = event.kind.value
    a["molt.event"] = _j(event.model_dump(mode="json", exclude_none=True))
    if event.parent_id:
        a["molt.parent_id"] = event.parent_id
    status = "UNSET"
    if event.outcome is not None:
        status = "ERROR" if event.outcome.status == OutcomeStatus.ERROR else "OK"
    end = None
    if md.latency_ms is not None:
        end = _ns(event.timestamp) + int(md.latency_ms * 1e6)
    name = f"{op or event.kind.value} {event.name or _target(event) or ''}".strip()
    return OtelSpan(
        name=name,
        start_time_unix_nano=_ns(event.timestamp),
        end_time_unix_nano=end,
        attributes=a,
        trace_id=event.trajectory_id.replace("-", "")[:32] or None,
        span_id=event.event_id.replace("-", "")[-16:] or None,
        parent_span_id=event.parent_id.replace("-", "")[-16:] if event.parent_id else None,
        status_code=status,
    )


def _target(event: Event) -> str | None:
    act = event.action
    if isinstance(act, Generation):
        return act.model or event.metadata.model
    if isinstance(act, ToolCall):
        return act.tool_name
    if isinstance(act, AgentStep):
        return act.name
    return None


def _loads(value: AttributeValue | None) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value


def span_to_event(span: OtelSpan, *, trajectory_id: str | None = None,
                  parent_ids: Mapping[str, str] | None = None) -> Event:
    """Map a span to an event.

    A span written by :func:`event_to_span` comes back exactly. A foreign span is mapped from its
    ``gen_ai.*`` attributes: the trace id becomes the trajectory id unless ``trajectory_id`` is given,
    and ``parent_ids`` (span id → event id) resolves causal parents.
    """
    a = span.attributes
    full = a.get("molt.event")
    if isinstance(full, str):
        return Event.model_validate(orjson.loads(full))
    op = str(a.get("gen_ai.operation.name", ""))
    kind = _KIND_FOR_OPERATION.get(op, EventKind.AGENT_STEP)
    try:
        ts = datetime.fromtimestamp(span.start_time_unix_nano / 1e9, tz=UTC)
    except (OverflowError, OSError, ValueError):  # a hostile or broken exporter's clock
        raise ProtocolError(f"The span {span.span_id!r} starts at {span.start_time_unix_nano} ns since the epoch, "
                            f"which is not a representable time; send startTimeUnixNano in nanoseconds.") from None
    latency = None
    if span.end_time_unix_nano is not None:
        latency = max(0.0, (span.end_time_unix_nano - span.start_time_unix_nano) / 1e6)
    usage = None
    if "gen_ai.usage.input_tokens" in a or "gen_ai.usage.output_tokens" in a:
        usage = Usage(input_tokens=a.get("gen_ai.usage.input_tokens"),  # type: ignore[arg-type]
                      output_tokens=a.get("gen_ai.usage.output_tokens"))  # type: ignore[arg-type]
    model = a.get("gen_ai.response.model") or a.get("gen_ai.request.model")
    action: Any
    output: Any = None
    if kind == EventKind.MODEL_CALL:
        text, calls = None, []
        for msg in _loads(a.get("gen_ai.output.messages")) or []:
            for part in msg.get("parts", []) if isinstance(msg, dict) else []:
                if part.get("type") == "text":
                    text = (text or "") + str(part.get("content", ""))
                elif part.get("type") == "tool_call":
                    calls.append({"id": part.get("id"), "name": part.get("name"),
                                  "arguments": part.get("arguments")})
        reasons = a.get("gen_ai.response.finish_reasons")
        action = Generation(model=str(model) if model else None, text=text, tool_calls=calls or None,
                            finish_reason=reasons[0] if isinstance(reasons, list) and reasons else None)
    elif kind == EventKind.TOOL_CALL:
        action = ToolCall(tool_name=str(a.get("gen_ai.tool.name", "unknown")),
                          call_id=a.get("gen_ai.tool.call.id"),  # type: ignore[arg-type]
                          arguments=_loads(a.get("gen_ai.tool.call.arguments")))
        output = _loads(a.get("gen_ai.tool.call.result"))
    elif kind == EventKind.RETRIEVAL:
        action = RetrievalQuery(query=str(a.get("gen_ai.retrieval.query.text", "")),
                                index=a.get("gen_ai.data_source.id"))  # type: ignore[arg-type]
    else:
        action = AgentStep(name=str(a.get("gen_ai.agent.name") or span.name), step_type=op or None)
    outcome = None
    if span.status_code == "ERROR" or "error.type" in a:
        outcome = Outcome(status=OutcomeStatus.ERROR, output=output,
                          error=ErrorInfo(type=str(a.get("error.type", "error")), message=span.name))
    elif span.status_code == "OK" or output is not None:
        outcome = Outcome(status=OutcomeStatus.OK, output=output)
    parent = None
    if span.parent_span_id and parent_ids:
        parent = parent_ids.get(span.parent_span_id)
    return Event(
        event_id=str(a.get("molt.event_id") or new_id()),
        trajectory_id=trajectory_id or str(a.get("molt.trajectory_id") or span.trace_id or new_id()),
        session_id=a.get("gen_ai.conversation.id"),  # type: ignore[arg-type]
        parent_id=parent,
        kind=kind,
        name=span.name,
        timestamp=ts,
        action=action,
        outcome=outcome,
        metadata={"agent_id": a.get("gen_ai.agent.id"), "model": model, "latency_ms": latency,
                  "usage": usage},  # type: ignore[arg-type]
        provenance={"integration": "otel"},  # type: ignore[arg-type]
    )
