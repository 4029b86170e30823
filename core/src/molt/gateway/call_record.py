"""Model calls → ATDP events, recorded off the request path.

The request handler gathers what it knows into a :class:`CallRecord` (plain references, no copies);
after the response is sent, :meth:`CallRecorder.submit` turns it into events and hands them to the
Recorder (a deque append). One call becomes:

- one ``TOOL_CALL`` event per tool result the agent sent since the previous call (the tool's name and
  arguments come from the assistant message that asked for it; the result is the outcome), so the
  trajectory holds the tool cassette for replay;
- one ``MODEL_CALL`` event per choice: the client's messages and tools as the observation, the
  generation (text, tool calls, finish reason, sampling parameters, and the exact token trace with
  the policy version when the backend knows it) as the action, tenant / latency / usage as metadata,
  and the policy version, adapter, checkpoint and harness fingerprint as provenance.

A failed call is recorded too, with the error as its outcome. Building an event never raises into
the gateway: a failure is counted and logged.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from molt.atdp.ids import new_id
from molt.atdp.models import (
    ErrorInfo,
    Event,
    EventKind,
    Generation,
    Message,
    Metadata,
    Observation,
    Outcome,
    OutcomeStatus,
    Provenance,
    TokenTrace,
    ToolCall,
    ToolCallRequest,
    Usage,
)
from molt.backends.base import Choice, Delta, Result, StreamEnd, TokenCounts, TokenLogprob, ToolCallOut
from molt.backends.chat_format import text_content
from molt.gateway.router import Route
from molt.gateway.sessions import normalize_arguments

__all__ = ["CallRecord", "CallRecorder", "StreamAssembler", "tool_results"]

log = logging.getLogger("molt.gateway")

_VERSION = "0.1.0"
_ROLE = {"function": "tool", "developer": "developer"}


@dataclass(slots=True)
class CallRecord:
    """What the gateway knows about one model call, gathered on the request path."""

    endpoint: str
    event_ids: list[str]
    trajectory_id: str
    session_id: str | None
    parent_id: str | None
    tenant_id: str
    agent_id: str | None
    public_model: str
    decision: Route | None
    started: float
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    prompt: Any = None
    sampling: dict[str, Any] = field(default_factory=dict)
    harness_fingerprint: str | None = None
    new_tools: list[tuple[str, str | None, str, Any, str]] = field(default_factory=list)
    result: Result | None = None
    task: str | None = None
    status: OutcomeStatus = OutcomeStatus.OK
    error: BaseException | None = None
    latency_ms: float = 0.0
    key_name: str | None = None


def tool_results(messages: list[dict[str, Any]], new_from: int) -> list[tuple[str, str | None, str, Any, str]]:
    """``(event id, call_id, tool name, arguments, result)`` of each tool message from ``new_from`` on,
    matched to the assistant tool call that asked for it (the event id is made here, once)."""
    out = []
    asked: dict[str, tuple[str, Any]] = {}
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            for c in m.get("tool_calls") or ():
                fn = c.get("function") or {}
                asked[c.get("id") or ""] = (fn.get("name") or "", fn.get("arguments"))
        elif m.get("role") in ("tool", "function") and i >= new_from:
            cid = m.get("tool_call_id")
            name, args = asked.get(cid or "", (m.get("name") or "unknown_tool", None))
            out.append((new_id(), cid, name or "unknown_tool", normalize_arguments(args),
                        text_content(m.get("content"))))
    return out


def _message(m: dict[str, Any]) -> Message:
    calls = None
    if m.get("tool_calls"):
        calls = [ToolCallRequest(id=c.get("id"), name=(c.get("function") or {}).get("name") or "",
                                 arguments=normalize_arguments((c.get("function") or {}).get("arguments")))
                 for c in m["tool_calls"]]
    content = m.get("content")
    return Message(role=_ROLE.get(m.get("role", "user"), m.get("role", "user")), content=content,
                   name=m.get("name") if isinstance(m.get("name"), str) else None,
                   tool_call_id=m.get("tool_call_id"), tool_calls=calls)


def _calls(calls: list[ToolCallOut] | None) -> list[ToolCallRequest] | None:
    if not calls:
        return None
    return [ToolCallRequest(id=c.id, name=c.name, arguments=normalize_arguments(c.arguments)) for c in calls]


class CallRecorder:
    """Records model calls: builds the events of each :class:`CallRecord` and hands them to a
    Recorder (see the module docstring).

    ``recorder`` is a :class:`~molt.capture.Recorder` (or anything with ``record(event) -> bool``).
    """

    def __init__(self, recorder: Any):
        self.recorder = recorder
        self.recorded = 0
        self.failed = 0

    def submit(self, rec: CallRecord) -> None:
        """Build and record the events of ``rec``; never raises."""
        try:
            for ev in self.events(rec):
                if self.recorder.record(ev):
                    self.recorded += 1
                else:
                    self.failed += 1
        except Exception:
            self.failed += 1
            log.exception("Molt could not record a model call of trajectory %s.", rec.trajectory_id)

    def events(self, rec: CallRecord) -> list[Event]:
        """The events of one call (tool results first, then one model call per choice)."""
        ts = datetime.fromtimestamp(rec.started, UTC)
        md = self._metadata(rec)
        prov = self._provenance(rec)
        out: list[Event] = []
        parent = rec.parent_id
        for tool_event_id, call_id, name, args, result in rec.new_tools:
            ev = Event(event_id=tool_event_id, trajectory_id=rec.trajectory_id, session_id=rec.session_id,
                       parent_id=parent, kind=EventKind.TOOL_CALL, name=name, timestamp=ts,
                       action=ToolCall(tool_name=name, call_id=call_id, arguments=args),
                       outcome=Outcome(status=OutcomeStatus.OK, output=result),
                       metadata=Metadata(tenant_id=rec.tenant_id, agent_id=rec.agent_id, task=rec.task),
                       provenance=Provenance(integration="gateway", integration_version=_VERSION))
            out.append(ev)
            parent = ev.event_id
        obs = self._observation(rec)
        choices: list[Choice | None] = list(rec.result.choices) if rec.result and rec.result.choices else [None]
        for i, choice in enumerate(choices):
            eid = rec.event_ids[i] if i < len(rec.event_ids) else rec.event_ids[0] + f"-{i}"
            gen = self._generation(rec, choice)
            if rec.error is not None:
                outcome = Outcome(status=rec.status if rec.status != OutcomeStatus.OK else OutcomeStatus.ERROR,
                                  error=ErrorInfo(type=getattr(rec.error, "type_name", type(rec.error).__name__),
                                                  message=str(rec.error)[:4000],
                                                  retryable=rec.status == OutcomeStatus.TIMEOUT))
            else:
                outcome = Outcome(status=rec.status)
            tags = {"endpoint": rec.endpoint}
            if rec.decision is not None:
                tags["backend"] = rec.decision.backend
            if len(choices) > 1:
                tags["choice"] = str(i)
            out.append(Event(event_id=eid, trajectory_id=rec.trajectory_id, session_id=rec.session_id,
                             parent_id=parent, kind=EventKind.MODEL_CALL, name=rec.endpoint, timestamp=ts,
                             observation=obs, action=gen, outcome=outcome,
                             metadata=md.model_copy(update={"tags": tags}), provenance=prov))
        return out

    def _observation(self, rec: CallRecord) -> Observation:
        if rec.messages is not None:
            data = {"tools": rec.tools} if rec.tools else None
            return Observation(messages=[_message(m) for m in rec.messages], data=data)
        prompt = rec.prompt
        if isinstance(prompt, str):
            return Observation(text=prompt)
        return Observation(data={"prompt_token_ids": prompt})

    def _generation(self, rec: CallRecord, choice: Choice | None) -> Generation:
        tokens = None
        res = rec.result
        if choice is not None and res is not None and res.prompt_ids is not None and choice.token_ids is not None:
            lps = [lp.logprob for lp in choice.logprobs] if choice.logprobs else None
            if lps is not None and len(lps) != len(choice.token_ids):
                lps = None
            tokens = TokenTrace(prompt_ids=res.prompt_ids, completion_ids=choice.token_ids,
                                completion_logprobs=lps, tokenizer=res.tokenizer,
                                policy_version=rec.decision.version.version if rec.decision else None)
        return Generation(model=rec.public_model, text=choice.text if choice else None,
                          tool_calls=_calls(choice.tool_calls) if choice else None,
                          finish_reason=choice.finish_reason if choice else None,
                          sampling=rec.sampling or None, tokens=tokens)

    def _metadata(self, rec: CallRecord) -> Metadata:
        usage = None
        if rec.result is not None and rec.result.usage is not None:
            u = rec.result.usage
            usage = Usage(input_tokens=u.prompt_tokens, output_tokens=u.completion_tokens,
                          total_tokens=u.prompt_tokens + u.completion_tokens)
        return Metadata(tenant_id=rec.tenant_id, agent_id=rec.agent_id, task=rec.task, model=rec.public_model,
                        latency_ms=max(rec.latency_ms, 0.0), usage=usage)

    def _provenance(self, rec: CallRecord) -> Provenance:
        d = rec.decision
        if d is None:
            return Provenance(integration="gateway", integration_version=_VERSION,
                              harness_fingerprint=rec.harness_fingerprint)
        return Provenance(policy_version=d.version.version, lora_adapter=d.version.lora_adapter,
                          model_checkpoint=d.version.model_checkpoint or d.version.upstream_model,
                          harness_fingerprint=rec.harness_fingerprint, integration="gateway",
                          integration_version=_VERSION)


class StreamAssembler:
    """Accumulates streamed deltas into a :class:`Result` (for the event and the session index)."""

    def __init__(self, model: str):
        self.model = model
        self._text: dict[int, list[str]] = {}
        self._calls: dict[int, dict[int, list[Any]]] = {}
        self._ids: dict[int, list[int]] = {}
        self._lps: dict[int, list[TokenLogprob]] = {}
        self._finish: dict[int, str | None] = {}
        self._token_ids_known = True
        self.end: StreamEnd | None = None
        self.chunks = 0

    def add(self, d: Delta) -> None:
        """Fold one delta in."""
        self.chunks += 1
        i = d.index
        self._finish.setdefault(i, None)
        if d.text:
            self._text.setdefault(i, []).append(d.text)
        if d.tool_calls:
            calls = self._calls.setdefault(i, {})
            for t in d.tool_calls:
                slot = calls.setdefault(t.index, [None, None, []])
                if t.id:
                    slot[0] = t.id
                if t.name:
                    slot[1] = t.name
                slot[2].append(t.arguments)
        if d.token_ids is not None:
            self._ids.setdefault(i, []).extend(d.token_ids)
        elif d.text or d.tool_calls:
            self._token_ids_known = False
        if d.logprobs:
            self._lps.setdefault(i, []).extend(d.logprobs)
        if d.finish_reason:
            self._finish[i] = d.finish_reason

    def result(self) -> Result:
        """What was streamed so far, as a result."""
        choices = []
        for i in sorted(self._finish):
            calls = None
            if i in self._calls:
                calls = [ToolCallOut(id=s[0] or "", name=s[1] or "", arguments="".join(s[2]))
                         for _, s in sorted(self._calls[i].items())]
            text = "".join(self._text.get(i, [])) or (None if calls else "")
            ids = self._ids.get(i, []) if self._token_ids_known else None
            choices.append(Choice(index=i, text=text, tool_calls=calls, finish_reason=self._finish[i],
                                  token_ids=ids, logprobs=self._lps.get(i) or None))
        end = self.end
        usage = end.usage if end is not None else None
        if usage is None and choices and all(c.token_ids is not None for c in choices):
            usage = TokenCounts(0, sum(len(c.token_ids or ()) for c in choices))
        return Result(choices=choices, model=self.model, usage=usage,
                      prompt_ids=end.prompt_ids if end is not None else None,
                      tokenizer=end.tokenizer if end is not None else None)


def reply_message(choice: Choice) -> dict[str, Any]:
    """The assistant message a client will send back for ``choice`` (for the session index)."""
    msg: dict[str, Any] = {"role": "assistant", "content": choice.text}
    if choice.tool_calls:
        msg["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                             for c in choice.tool_calls]
    return msg


def monotonic_ms(since: float) -> float:
    """Milliseconds from ``since`` (a ``time.perf_counter()`` value) to now."""
    return (time.perf_counter() - since) * 1000.0


def dumps(obj: Any) -> bytes:
    """JSON bytes (orjson)."""
    return orjson.dumps(obj)
