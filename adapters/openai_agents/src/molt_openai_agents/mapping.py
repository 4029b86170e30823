"""Agents SDK traces and spans → ATDP events. Runs on Molt's dispatcher thread, never the agent's.

A trace is a trajectory whose root event is the workflow; every span becomes one event when it ends,
under its parent span (``span.parent_id``, else the trace). Span types map as follows:

==============================  ===============================================================
``generation`` / ``response``   ``model_call``: input messages, text, tool calls, usage, model
``function``                    ``tool_call``: name, arguments, output; ``span.error`` → error outcome
                                 (the model's call id is matched from the sibling generation)
``agent``                       ``agent_step`` (step_type ``agent``): tools, handoffs, output type
``handoff``                     ``agent_step`` (``handoff``): from and to agent
``guardrail``                   ``agent_step`` (``guardrail``): ``denied`` when the tripwire fired
``mcp_tools``                   ``agent_step`` (``mcp.list_tools``): server and tool names
``task``, ``turn``, ``custom``  ``agent_step`` with their name and usage
==============================  ===============================================================
"""

from __future__ import annotations

import json
from typing import Any

from molt.atdp import (
    AgentStep,
    EventKind,
    Generation,
    Message,
    Observation,
    Outcome,
    OutcomeStatus,
    ToolCall,
    ToolCallRequest,
    Usage,
)
from molt.capture.adapt import CALL_ID_TAG, Capture, OpenSpan, SpanTable, bound_payload, error_outcome, text_of

_ROLES = {"system", "developer", "user", "assistant", "tool"}
_MAX_MESSAGES = 100
_SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "stop",
    "tool_choice",
)


class AgentsMapper:
    """Turns the trace/span callbacks of one processor into events."""

    def __init__(self, capture: Capture):
        self.capture = capture
        self.spans = SpanTable(capture)
        # parent span key -> tool calls its generation asked for: [(call id, name, arguments json)]
        self._asked: dict[Any, list[tuple[str | None, str, str]]] = {}

    # ------------------------------------------------------------------ trace / span lifecycle

    def trace_start(self, trace_id: str, t_ns: int, info: dict[str, Any] | None) -> None:
        """Open the trajectory's root (the workflow)."""
        self.spans.open(trace_id, None, t_ns, kind="trace", info=info or {})

    def trace_end(self, trace_id: str, t_ns: int) -> None:
        """Close the workflow, and whatever the SDK left open under it (a cancelled stream)."""
        sp = self.spans.get(trace_id)
        if sp is None:
            return
        for child in self.spans.open_under(trace_id):
            if self.spans.close(child.key) is not None:
                self._emit(child, child.data.get("span"), t_ns, cancelled=True)
        self.spans.close(trace_id)
        info = sp.data["info"]
        c = self.capture
        c.record(
            c.event(
                EventKind.AGENT_STEP,
                trajectory_id=sp.trajectory_id,
                event_id=sp.event_id,
                start_ns=sp.start_ns,
                end_ns=t_ns,
                name=_s(info.get("workflow_name")),
                session_id=_s(info.get("group_id")),
                action=AgentStep(
                    name=text_of(info.get("workflow_name") or "workflow"),
                    step_type="workflow",
                    inputs=c.payload(info.get("metadata")),
                ),
                outcome=Outcome(status=OutcomeStatus.OK),
            )
        )
        self._asked = {k: v for k, v in self._asked.items() if k[0] != trace_id}

    def span_start(self, span_id: str, parent_id: str | None, trace_id: str, t_ns: int, span: Any) -> None:
        """Open a span under its parent span, or under the trace."""
        self.spans.open(
            span_id,
            parent_id or trace_id,
            t_ns,
            kind="span",
            span=span,
            trace_id=trace_id,
            siblings=(trace_id, parent_id or trace_id),
        )

    def span_end(self, span_id: str, t_ns: int, span: Any) -> None:
        """Record the span's event."""
        sp = self.spans.close(span_id)
        if sp is not None:
            self._emit(sp, span, t_ns)

    # ------------------------------------------------------------------ events

    def _emit(self, sp: OpenSpan, span: Any, t_ns: int, *, cancelled: bool = False) -> None:
        c = self.capture
        data = getattr(span, "span_data", None)
        stype = getattr(data, "type", "custom")
        trace_group = None
        root = self.spans.get(sp.data.get("trace_id"))
        if root is not None:
            trace_group = _s(root.data["info"].get("group_id"))
        common: dict[str, Any] = dict(
            trajectory_id=sp.trajectory_id,
            event_id=sp.event_id,
            parent_id=sp.parent_event_id,
            start_ns=sp.start_ns,
            end_ns=t_ns,
            session_id=trace_group,
        )
        error = getattr(span, "error", None)
        if cancelled:
            outcome: Outcome | None = Outcome(
                status=OutcomeStatus.CANCELLED, output={"reason": "the trace ended first"}
            )
        elif error:
            # The SDK's SpanError is a dict {message, data}; a span set_error() was given anything
            # else is still an error, recorded by its text rather than dropped with the event.
            if isinstance(error, dict):
                data_ = error.get("data")
                detail = data_.get("error") if isinstance(data_, dict) else None
                message = error.get("message")
            else:
                detail = message = None
            outcome = error_outcome(
                {
                    "type": message if isinstance(message, str) and message else "SpanError",
                    "message": text_of(detail or message or error),
                }
            )
        else:
            outcome = None
        parent_key = sp.data["siblings"]
        if stype in ("generation", "response"):
            ev = self._model_event(stype, data, outcome, parent_key, common)
        elif stype == "function":
            call_id = self._match_call(parent_key, data.name, data.input)
            out = (
                Outcome(output=c.payload(data.output))
                if outcome is None
                else Outcome(status=outcome.status, error=outcome.error, output=c.payload(data.output))
            )
            ev = c.event(
                EventKind.TOOL_CALL,
                name=_s(data.name),
                action=ToolCall(
                    tool_name=text_of(data.name or "tool"),
                    call_id=call_id,
                    arguments=c.payload(_json_or_str(data.input)),
                ),
                outcome=out,
                tags={"mcp": "1"} if data.mcp_data else None,
                **common,
            )
        else:
            name, step_type, inputs, output = _step(stype, data)
            if outcome is None and stype == "guardrail" and getattr(data, "triggered", False):
                outcome = Outcome(status=OutcomeStatus.DENIED, output={"triggered": True})
            ev = c.event(
                EventKind.AGENT_STEP,
                name=_s(name),
                action=AgentStep(name=text_of(name), step_type=step_type, inputs=c.payload(inputs)),
                outcome=outcome or Outcome(output=c.payload(output)),
                **common,
            )
        c.record(ev)

    def _model_event(
        self, stype: str, data: Any, outcome: Outcome | None, parent_key: Any, common: dict[str, Any]
    ) -> Any:
        c = self.capture
        if stype == "generation":
            model = data.model
            msgs = _items(data.input)
            out_msgs = _items(data.output)
            text = " ".join(text_of(m["content"]) for m in out_msgs if isinstance(m, dict) and m.get("content")) or None
            requests = _requested(out_msgs)
            usage = data.usage if isinstance(data.usage, dict) else {}
            finish = None
            config = data.model_config if isinstance(data.model_config, dict) else {}
        else:  # a Responses API call
            resp = data.response
            model = getattr(resp, "model", None)
            msgs = (
                list(data.input or [])
                if isinstance(data.input, list)
                else ([{"role": "user", "content": data.input}] if data.input else [])
            )
            texts, requests = [], []
            for item in _items(getattr(resp, "output", None)):
                itype = getattr(item, "type", None)
                if itype == "message":
                    parts = _items(getattr(item, "content", None))
                    texts += [text_of(t) for p in parts if (t := getattr(p, "text", None))]
                elif itype == "function_call":
                    call_id = getattr(item, "call_id", None)
                    name = text_of(getattr(item, "name", None) or "?")
                    requests.append((None if call_id is None else text_of(call_id), name,
                                     getattr(item, "arguments", None) or ""))
            text = "".join(texts) or None
            u = getattr(resp, "usage", None)
            usage = (
                {
                    "input_tokens": getattr(u, "input_tokens", None),
                    "output_tokens": getattr(u, "output_tokens", None),
                    "total_tokens": getattr(u, "total_tokens", None),
                }
                if u is not None
                else (data.usage if isinstance(data.usage, dict) else {})
            )
            finish = getattr(resp, "status", None)
            config = {}
        self._asked.setdefault(parent_key, []).extend(requests)
        tokens_in, tokens_out, total = (_count(usage.get(k)) for k in ("input_tokens", "output_tokens", "total_tokens"))
        if total is None and tokens_in is not None and tokens_out is not None:
            total = tokens_in + tokens_out
        u_obj = Usage(input_tokens=tokens_in, output_tokens=tokens_out, total_tokens=total) if usage else None
        sampling = {k: c.payload(config[k]) for k in _SAMPLING_KEYS if config.get(k) is not None} or None
        action = Generation(
            model=text_of(model) if model else None,
            text=c.payload(text) if text else None,
            tool_calls=[ToolCallRequest(id=i, name=n, arguments=c.payload(_json_or_str(a))) for i, n, a in requests]
            or None,
            finish_reason=("tool_calls" if requests else "stop") if finish is None else text_of(finish),
            sampling=sampling,
        )
        call = getattr(data.response, "id", None) if stype == "response" else None
        if isinstance(call, str) and call:  # a gateway handed this event joins its run to the call's trajectory
            common = {**common, "tags": {CALL_ID_TAG: call[:200]}}
        return c.event(
            EventKind.MODEL_CALL,
            name=text_of(model) if model else stype,
            model=text_of(model) if model else None,
            usage=u_obj,
            action=action,
            observation=_observation(c, msgs),
            outcome=outcome or Outcome(status=OutcomeStatus.OK),
            **common,
        )

    def _match_call(self, parent_key: Any, name: str | None, args: str | None) -> str | None:
        asked = self._asked.get(parent_key)
        if not asked:
            return None
        for exact in (True, False):
            for i, (cid, n, a) in enumerate(asked):
                if n == name and (not exact or _same_args(a, args)):
                    del asked[i]
                    return cid
        return None


# ---------------------------------------------------------------------- conversions


def _s(v: Any) -> str | None:
    return text_of(v)[:512] if v is not None else None


def _requested(out_msgs: list[Any]) -> list[tuple[Any, Any, Any]]:
    """(id, name, arguments) of each tool call the output messages ask for; parts of another shape
    than the Chat Completions one are skipped (the output itself is kept in the observation)."""
    out = []
    for m in out_msgs:
        calls = m.get("tool_calls") if isinstance(m, dict) else None
        for tc in calls if isinstance(calls, list) else []:
            if isinstance(tc, dict):
                fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
                call_id = tc.get("id")
                out.append((None if call_id is None else text_of(call_id), text_of(fn.get("name") or "?"),
                            fn.get("arguments") or ""))
    return out


def _count(v: Any) -> int | None:
    """A token count as ATDP takes it (a non-negative integer), else unknown."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _items(v: Any) -> list[Any]:
    """A span's message list as a list: None is none, a value of another shape is one item (the
    observation keeps what it cannot read as a message under ``data.items``)."""
    if v is None:
        return []
    return list(v) if isinstance(v, list | tuple) else [v]


def _json_or_str(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def _same_args(a: str | None, b: str | None) -> bool:
    return a == b or _json_or_str(a) == _json_or_str(b)


def _observation(c: Capture, msgs: list[Any]) -> Observation | None:
    if not msgs:
        return None
    omitted = max(0, len(msgs) - _MAX_MESSAGES)
    msgs = msgs[omitted:]
    budget = max(2048, c.max_field_bytes // max(1, len(msgs)))
    out: list[Message] = []
    other: list[Any] = []
    for m in msgs:
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            other.append(m)  # Responses items without a chat role (function calls, reasoning, …)
            continue
        content = bound_payload(m.get("content"), max_bytes=budget, blob_store=c.blob_store)
        calls = [
            ToolCallRequest(
                id=tc.get("id"),
                name=(tc.get("function") or {}).get("name") or "?",
                arguments=bound_payload(_json_or_str((tc.get("function") or {}).get("arguments")), max_bytes=budget),
            )
            for tc in m.get("tool_calls") or []
        ] or None
        out.append(
            Message(
                role=m["role"],
                content=content if isinstance(content, str | list) or content is None else text_of(content),
                tool_call_id=m.get("tool_call_id"),
                tool_calls=calls,
                name=m.get("name") if m["role"] != "tool" else None,
            )
        )
    data: dict[str, Any] = {}
    if omitted:
        data["$molt_omitted_messages"] = omitted
    if other:
        data["items"] = c.payload(other)
    return Observation(messages=out or None, data=data or None)


def _step(stype: str, data: Any) -> tuple[str, str, Any, Any]:
    """(name, step_type, inputs, output) of a non-model, non-tool span."""
    if stype == "agent":
        return (
            data.name,
            "agent",
            {"tools": data.tools, "handoffs": data.handoffs, "output_type": data.output_type},
            None,
        )
    if stype == "handoff":
        return (
            f"{text_of(data.from_agent)} -> {text_of(data.to_agent)}",
            "handoff",
            {"from_agent": data.from_agent},
            {"to_agent": data.to_agent},
        )
    if stype == "guardrail":
        return data.name, "guardrail", None, {"triggered": bool(data.triggered)}
    if stype == "mcp_tools":
        return f"mcp:{text_of(data.server)}", "mcp.list_tools", {"server": data.server}, {"tools": data.result}
    if stype == "turn":
        return f"turn {text_of(data.turn)}: {text_of(data.agent_name)}", "turn", None, {"usage": data.usage}
    if stype == "task":
        return text_of(data.name), "task", None, {"usage": data.usage}
    exported = _export(data)
    if stype == "custom":
        return text_of(exported.get("name") or "custom"), "custom", None, exported.get("data")
    return text_of(exported.get("name") or stype), stype, None, exported


def _export(data: Any) -> dict[str, Any]:
    try:
        out = data.export()
    except Exception:
        return {}
    return out if isinstance(out, dict) else {}
