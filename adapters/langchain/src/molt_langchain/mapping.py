"""LangChain callbacks → ATDP events. Runs on Molt's dispatcher thread, never on the agent's.

Each LangChain run (chat model, tool, retriever, chain, graph node) becomes one event when it ends,
carrying its action and outcome; its event id is fixed when it starts, so children name it as their
parent. Parents come from ``run_id``/``parent_run_id`` only. A run without a known parent starts a
trajectory; a LangGraph run resumed after ``interrupt()`` continues the interrupted one.

LangGraph's ``interrupt()`` surfaces as ``GraphInterrupt`` in ``on_chain_error``: the node's event gets
status ``interrupted`` (not ``error``) and each interrupt becomes a ``human_approval`` event with status
``pending``. When the same thread is resumed with ``Command(resume=…)``, a second ``human_approval``
event records the decision (its latency is the human's), and the resumed graph run hangs under it.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any

from pydantic import BaseModel

from molt.atdp import (
    ApprovalRequest,
    EventKind,
    Message,
    Outcome,
    OutcomeStatus,
    ToolCallRequest,
)
from molt.capture.adapt import CALL_ID_TAG, Capture, OpenSpan, SpanTable, bound_payload, error_outcome

_ROLES = {
    "human": "user",
    "user": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "system": "system",
    "developer": "developer",
    "tool": "tool",
    "function": "tool",
}
_MAX_MESSAGES = 100
_MAX_PASSAGES = 100
_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "max_tokens", "max_completion_tokens", "seed", "stop", "n")
_HIDDEN_TAG = "langgraph:hidden"
_MISSING: Any = object()
# The events' parts are built as plain dicts and validated once, with the event (Capture.event);
# a model built apart per part cost the dispatcher thread another pass through pydantic each.
_OK = Outcome(status=OutcomeStatus.OK)  # frozen: one instance serves every event
# read from the class dict: pydantic defines __getattr__ only outside TYPE_CHECKING
_PYDANTIC_GETATTR = vars(BaseModel).get("__getattr__")
# (class, name) -> where a name that is not in an instance's __dict__ can still come from: "extra" (only
# pydantic's extras), "none" (nowhere: the attribute is missing), "getattr" (ask the object).
_LOOKUP: dict[tuple[type, str], str] = {}


def _attr(obj: Any, name: str, default: Any = None) -> Any:
    """``getattr(obj, name, default)`` for the framework objects a mapper reads (messages, results).

    A miss on a pydantic model (``tool_calls`` of a ``HumanMessage``) goes through its ``__getattr__``,
    which builds and raises an AttributeError, twice (once more through the class): that cost more than
    the rest of converting the message. So a name that no class of the object's MRO defines (no
    property, method or descriptor can shadow it) is read from the instance ``__dict__`` (where pydantic
    keeps fields) and, for a pydantic model whose ``__getattr__`` is pydantic's own, from its extras —
    the only other place that ``__getattr__`` looks for a public name. Anything else asks ``getattr``.
    """
    d = getattr(obj, "__dict__", None)
    if d is None:
        return getattr(obj, name, default)
    cls = type(obj)
    where = _LOOKUP.get((cls, name))
    if where is None:
        if any(name in c.__dict__ for c in cls.__mro__) or name in (getattr(cls, "__private_attributes__", None) or ()):
            where = "getattr"
        else:
            ga = getattr(cls, "__getattr__", None)
            where = "none" if ga is None else ("extra" if ga is _PYDANTIC_GETATTR else "getattr")
        if len(_LOOKUP) < 4096:
            _LOOKUP[(cls, name)] = where
    if where == "getattr":
        return getattr(obj, name, default)
    v = d.get(name, _MISSING)
    if v is not _MISSING:
        return v
    if where == "extra":
        extra = getattr(obj, "__pydantic_extra__", None)
        if extra and name in extra:
            return extra[name]
    return default


def _is_bubble_up(exc: BaseException) -> str | None:
    """``"interrupt"`` for LangGraph's GraphInterrupt, ``"control"`` for its other control-flow
    exceptions (ParentCommand, …), else None. Checked by name: langgraph is optional."""
    names = {c.__name__ for c in type(exc).__mro__}
    if "GraphInterrupt" in names:
        return "interrupt"
    if "GraphBubbleUp" in names:
        return "control"
    return None


class LangChainMapper:
    """Turns the callback stream of one handler (or of the global hook) into events."""

    def __init__(self, capture: Capture, *, capture_chain_io: bool = True):
        self.capture = capture
        self.spans = SpanTable(capture)
        self.capture_chain_io = capture_chain_io
        # thread_id -> interrupts waiting for a human: [(interrupt id, event id, trajectory, request, t_ns)]
        self._pending: OrderedDict[str, list[tuple[str, str, str, Any, int]]] = OrderedDict()
        self._seen_interrupts: OrderedDict[str, None] = OrderedDict()
        self._messages = _MessageCache()

    # ------------------------------------------------------------------ starts

    def start(
        self,
        kind: str,
        run_id: Any,
        parent_run_id: Any,
        t_ns: int,
        name: str | None,
        inputs: Any,
        metadata: dict[str, Any] | None,
        tags: list[str] | None,
        extra: dict[str, Any],
    ) -> None:
        """Open the span of a run (``kind``: llm, chat, tool, retriever, chain)."""
        md = metadata or {}
        hidden = kind == "chain" and bool(tags) and _HIDDEN_TAG in tags  # type: ignore[operator]
        trajectory_id = parent_event_id = None
        if parent_run_id is None and kind == "chain":
            trajectory_id, parent_event_id = self._resume(md, inputs, t_ns)
        # a resumed graph joins the interrupted trajectory, under the human's decision
        self.spans.open(
            run_id,
            parent_run_id,
            t_ns,
            trajectory_id=trajectory_id,
            parent_event_id=parent_event_id,
            hidden=hidden,
            kind=kind,
            name=name,
            inputs=inputs,
            metadata=md,
            extra=extra,
        )

    def _resume(self, md: dict[str, Any], inputs: Any, t_ns: int) -> tuple[str | None, str | None]:
        thread = md.get("thread_id")
        resume = getattr(inputs, "resume", None)
        if thread is None or resume is None or thread not in self._pending:
            return None, None
        waiting = self._pending.pop(thread)
        c = self.capture
        decision_id = None
        tid = waiting[0][2]
        for interrupt_id, request_event, tid, request, t_req in waiting:
            value = resume.get(interrupt_id, resume) if isinstance(resume, dict) else resume
            ev = c.event(
                EventKind.HUMAN_APPROVAL,
                trajectory_id=tid,
                parent_id=request_event,
                start_ns=t_req,
                end_ns=t_ns,
                name="resume",
                session_id=str(thread),
                action=ApprovalRequest(request=_request_text(request)),
                outcome=Outcome(status=_decision_status(value), output=c.payload(value)),
                tags={"interrupt_id": interrupt_id},
            )
            decision_id = ev.event_id
            c.record(ev)
        return tid, decision_id

    # ------------------------------------------------------------------ ends

    def end(self, run_id: Any, t_ns: int, output: Any) -> None:
        """A run ended normally with ``output`` (an LLMResult, tool output, documents, chain outputs)."""
        sp = self.spans.close(run_id)
        if sp is None:
            return
        if not sp.hidden:
            self._emit(sp, t_ns, output, None)
        self._close_subtree(sp, t_ns)

    def error(self, run_id: Any, t_ns: int, exc: BaseException, partial: Any = None) -> None:
        """A run raised ``exc`` (``partial``: the LLMResult LangChain built from streamed chunks)."""
        sp = self.spans.close(run_id)
        if sp is None:
            return
        bubble = _is_bubble_up(exc)
        if bubble == "interrupt":
            outcome = Outcome(status=OutcomeStatus.INTERRUPTED, output={"interrupt": type(exc).__name__})
        elif bubble == "control":
            outcome = Outcome(status=OutcomeStatus.OK, output={"control": type(exc).__name__})
        else:
            outcome = error_outcome(exc)
        if not sp.hidden:
            self._emit(sp, t_ns, partial, outcome)
        if bubble == "interrupt":
            self._interrupts(sp, exc, t_ns)
        self._close_subtree(sp, t_ns)

    def _close_subtree(self, sp: OpenSpan, t_ns: int) -> None:
        if sp.key != sp.root_key:
            return
        # A root that ends with runs still open below it (a stream closed early, a run the framework
        # never ended) ends them too, so no event is lost and none stays open forever.
        for child in self.spans.open_under(sp.key):
            if self.spans.close(child.key) is not None and not child.hidden:
                self._emit(
                    child,
                    t_ns,
                    None,
                    Outcome(status=OutcomeStatus.CANCELLED, output={"reason": "the enclosing run ended first"}),
                )

    def _interrupts(self, sp: OpenSpan, exc: BaseException, t_ns: int) -> None:
        c = self.capture
        thread = sp.data["metadata"].get("thread_id")
        items = exc.args[0] if exc.args and isinstance(exc.args[0], tuple | list) else ()
        for it in items:
            iid = str(getattr(it, "id", "") or id(it))
            if iid in self._seen_interrupts:  # a subgraph interrupt bubbles through every parent node
                continue
            self._seen_interrupts[iid] = None
            if len(self._seen_interrupts) > 10_000:
                self._seen_interrupts.popitem(last=False)
            value = getattr(it, "value", it)
            parent = sp.parent_event_id if sp.hidden else sp.event_id
            ev = c.event(
                EventKind.HUMAN_APPROVAL,
                trajectory_id=sp.trajectory_id,
                parent_id=parent,
                start_ns=t_ns,
                end_ns=t_ns,
                name="interrupt",
                session_id=str(thread) if thread is not None else None,
                action=ApprovalRequest(request=_request_text(value), options=_options(value)),
                outcome=Outcome(status=OutcomeStatus.PENDING, output=c.payload(value)),
                tags={"interrupt_id": iid},
            )
            c.record(ev)
            if thread is not None:
                self._pending.setdefault(str(thread), []).append((iid, ev.event_id, sp.trajectory_id, value, t_ns))
                self._pending.move_to_end(str(thread))
                if len(self._pending) > 10_000:
                    self._pending.popitem(last=False)

    # ------------------------------------------------------------------ events

    def _emit(self, sp: OpenSpan, t_ns: int, output: Any, outcome: Outcome | None) -> None:
        c, d = self.capture, sp.data
        md = d["metadata"]
        thread = md.get("thread_id")
        common: dict[str, Any] = dict(
            trajectory_id=sp.trajectory_id,
            event_id=sp.event_id,
            parent_id=sp.parent_event_id,
            start_ns=sp.start_ns,
            end_ns=t_ns,
            name=_name(d["name"]),
        )
        if thread is not None:
            common["session_id"] = str(thread)
        kind = d["kind"]
        if kind in ("chat", "llm"):
            ev = self._model_event(sp, output, outcome, common)
        elif kind == "tool":
            ev = c.event(
                EventKind.TOOL_CALL,
                action=_tool_action(c, d),
                outcome=outcome or _tool_outcome(c, output),
                **common,
            )
        elif kind == "retriever":
            ev = c.event(
                EventKind.RETRIEVAL,
                action={"type": "retrieval", "query": str(d["inputs"]), "index": d["name"]},
                observation=_passages(c, output) if outcome is None else None,
                outcome=outcome or {"output": {"documents": len(output or [])}},
                **common,
            )
        else:
            step_type = (
                "node"
                if md.get("langgraph_node") == d["name"]
                else ("graph" if sp.parent_event_id is None or d["name"] == "LangGraph" else "chain")
            )
            inputs = c.payload(d["inputs"]) if self.capture_chain_io else None
            ev = c.event(
                EventKind.AGENT_STEP,
                action={"type": "agent_step", "name": d["name"] or "chain", "step_type": step_type, "inputs": inputs},
                outcome=outcome or ({"output": c.payload(output)} if self.capture_chain_io else _OK),
                **common,
            )
        c.record(ev)

    def _model_event(self, sp: OpenSpan, result: Any, outcome: Outcome | None, common: dict[str, Any]) -> Any:
        c, d = self.capture, sp.data
        md, extra = d["metadata"], d["extra"]
        params = extra.get("invocation_params") or {}
        msg, gen_info = _first_generation(result)
        usage = _usage(msg, result)
        model = (
            _model_from(msg)
            or md.get("ls_model_name")
            or params.get("model")
            or params.get("model_name")
            or d["name"]
            or "unknown"
        )
        text, tool_calls, finish, reasoning = None, None, None, None
        if msg is not None:
            text = _text(msg)
            tool_calls = [
                {"id": tc.get("id"), "name": tc.get("name") or "?", "arguments": c.payload(tc.get("args"))}
                for tc in getattr(msg, "tool_calls", None) or []
            ] or None
            rm = getattr(msg, "response_metadata", None) or {}
            finish = rm.get("finish_reason") or rm.get("stop_reason") or (gen_info or {}).get("finish_reason")
            reasoning = (getattr(msg, "additional_kwargs", None) or {}).get("reasoning_content")
        elif isinstance(result, str):
            text = result
        sampling = {k: c.payload(params[k]) for k in _SAMPLING_KEYS if params.get(k) is not None} or None
        action = {
            "type": "generation",
            "model": str(model),
            "text": c.payload(text) if text else None,
            "tool_calls": tool_calls,
            "finish_reason": str(finish) if finish else None,
            "sampling": sampling,
        }
        call = _call_id(msg, result)
        if call is not None:  # a gateway handed this event joins its run to the call's trajectory
            common = {**common, "tags": {CALL_ID_TAG: call}}
        return c.event(
            EventKind.MODEL_CALL,
            model=str(model),
            usage=usage,
            action=action,
            observation=_observation(c, d["kind"], d["inputs"], self._messages, _offered_tools(params.get("tools"))),
            hidden={"reasoning": c.payload(str(reasoning))} if reasoning else None,
            outcome=outcome or _OK,
            **common,
        )


# ---------------------------------------------------------------------- conversions


def _name(name: Any) -> str | None:
    return str(name)[:512] if name is not None else None


def _text(msg: Any) -> str | None:
    text: str | None
    try:
        text = str(msg.text)
    except Exception:
        content = getattr(msg, "content", None)
        text = content if isinstance(content, str) else None
    return text or None


def _model_from(msg: Any) -> str | None:
    rm = getattr(msg, "response_metadata", None) or {}
    return rm.get("model_name") or rm.get("model")


def _call_id(msg: Any, result: Any) -> str | None:
    """The provider's id of the answered call (``chatcmpl-…`` from an OpenAI-compatible API, the
    gateway's included), not LangChain's own run-based message id."""
    rm = getattr(msg, "response_metadata", None) or {}
    for v in (rm.get("id"), (getattr(result, "llm_output", None) or {}).get("id"), getattr(msg, "id", None)):
        if isinstance(v, str) and v and not v.startswith(("run-", "lc_run-", "lc_")) and len(v) <= 200:
            return v
    return None


def _first_generation(result: Any) -> tuple[Any, dict[str, Any] | None]:
    gens = getattr(result, "generations", None)
    if not gens or not gens[0]:
        return None, None
    g = gens[0][0]
    return getattr(g, "message", None), getattr(g, "generation_info", None)


def _usage(msg: Any, result: Any) -> dict[str, Any] | None:
    um = getattr(msg, "usage_metadata", None) if msg is not None else None
    if um:
        return {
            "input_tokens": um.get("input_tokens"),
            "output_tokens": um.get("output_tokens"),
            "total_tokens": um.get("total_tokens"),
        }
    tu = (getattr(result, "llm_output", None) or {}).get("token_usage") or {}
    if tu:
        return {
            "input_tokens": tu.get("prompt_tokens"),
            "output_tokens": tu.get("completion_tokens"),
            "total_tokens": tu.get("total_tokens"),
        }
    return None


def _message(c: Capture, m: Any, budget: int) -> Message:
    role = _ROLES.get(_attr(m, "type", "")) or _ROLES.get(_attr(m, "role", ""), "user")
    if isinstance(m, str):
        content: Any = m
    else:
        content = _attr(m, "content", _MISSING)
        if content is _MISSING:
            content = repr(m)[:4000]  # str() of a LangChain object is slow (signature inspection)
    content = bound_payload(content, max_bytes=budget, blob_store=c.blob_store)
    if not isinstance(content, str | list):
        content = str(content)
    calls = [
        ToolCallRequest(
            id=tc.get("id"),
            name=tc.get("name") or "?",
            arguments=bound_payload(tc.get("args"), max_bytes=budget),
        )
        for tc in _attr(m, "tool_calls") or []
    ] or None
    return Message(
        role=role,
        content=content,
        name=_attr(m, "name") if role != "tool" else None,
        tool_call_id=_attr(m, "tool_call_id"),
        tool_calls=calls,
    )


class _MessageCache:
    """Converted messages by object identity: an agent re-sends its whole history on every model call,
    so each message is converted once, not once per call (a quadratic cost otherwise). Only messages
    small enough that no budget would cut them are kept; a weak reference guards against id reuse."""

    def __init__(self, size: int = 20_000):
        self._d: OrderedDict[int, tuple[Any, Message]] = OrderedDict()
        self._size = size

    def get(self, c: Capture, m: Any, budget: int) -> Message:
        hit = self._d.get(id(m))
        if hit is not None and hit[0]() is m:
            return hit[1]
        msg = _message(c, m, budget)
        content = _attr(m, "content")
        calls = _attr(m, "tool_calls")
        if isinstance(content, str) and len(content) <= 2048 and (not calls or len(repr(calls)) <= 2048):
            try:
                self._d[id(m)] = (weakref.ref(m), msg)
            except TypeError:  # not weak-referenceable: convert it every time
                return msg
            if len(self._d) > self._size:
                self._d.popitem(last=False)
        return msg

    def convert(self, c: Capture, msgs: list[Any], budget: int) -> list[Message]:
        """:meth:`get` of each of ``msgs``, its hit path inline: past the first turns, a model call's
        history is nearly all hits, and a method call per message cost as much as the lookup."""
        d = self._d
        out = []
        for m in msgs:
            hit = d.get(id(m))
            out.append(hit[1] if hit is not None and hit[0]() is m else self.get(c, m, budget))
        return out


def _observation(c: Capture, kind: str, inputs: Any, cache: _MessageCache | None = None,
                 tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    if kind == "llm":  # text-completion LLMs get prompts
        prompts = list(inputs or [])
        return {"text": c.payload("\n\n".join(str(p) for p in prompts))}
    msgs = list((inputs or [[]])[0])
    omitted = max(0, len(msgs) - _MAX_MESSAGES)
    msgs = msgs[omitted:]
    budget = max(2048, c.max_field_bytes // max(1, len(msgs)))
    data: dict[str, Any] = {"$molt": "truncated", "omitted_messages": omitted} if omitted else {}
    if tools:
        # The tool schemas the model was offered, where the gateway keeps them (observation.data.tools):
        # replay offers the same tools again, and a candidate's tool rewrite applies to them.
        data["tools"] = c.payload(tools)
    messages = cache.convert(c, msgs, budget) if cache is not None else [_message(c, m, budget) for m in msgs]
    return {"messages": messages, "data": data or None}


def _offered_tools(tools: Any) -> list[dict[str, Any]] | None:
    """The tools bound to a model call (its ``invocation_params["tools"]``) in the OpenAI shape, as the
    gateway records them; a provider-specific schema LangChain cannot convert is left out (unknown is
    better than a wrong schema)."""
    if not isinstance(tools, list | tuple) or not tools:
        return None
    from langchain_core.utils.function_calling import convert_to_openai_tool

    out = []
    for t in tools:
        try:
            out.append(t if isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("function"), dict)
                       else convert_to_openai_tool(t))
        except Exception:
            return None
    return out


def _tool_action(c: Capture, d: dict[str, Any]) -> dict[str, Any]:
    extra = d["extra"]
    args = extra.get("inputs")
    return {
        "type": "tool_call",
        "tool_name": d["name"] or "tool",
        "call_id": extra.get("tool_call_id"),
        "arguments": c.payload(args if args is not None else d["inputs"]),
    }


def _tool_outcome(c: Capture, output: Any) -> Outcome | dict[str, Any]:
    content = getattr(output, "content", output)
    if getattr(output, "status", None) == "error":
        return error_outcome({"type": "ToolError", "message": str(content)[:4000]}, output=c.payload(content))
    artifact = getattr(output, "artifact", None)
    out = c.payload({"content": content, "artifact": artifact} if artifact is not None else content)
    return {"output": out}


def _passages(c: Capture, docs: Any) -> dict[str, Any]:
    docs = list(docs or [])[:_MAX_PASSAGES]
    budget = max(1024, c.max_field_bytes // max(1, len(docs)))
    out = []
    for doc in docs:
        meta = getattr(doc, "metadata", None) or {}
        score = meta.get("score", meta.get("relevance_score"))
        text = bound_payload(str(getattr(doc, "page_content", doc)), max_bytes=budget)
        out.append({
            "text": text if isinstance(text, str) else str(text),
            "doc_id": str(getattr(doc, "id", None) or meta.get("id") or "") or None,
            "score": float(score) if isinstance(score, int | float) else None,
            "source": str(meta["source"]) if meta.get("source") is not None else None,
        })
    return {"passages": out}


def _request_text(value: Any) -> str:
    if isinstance(value, str):
        return value[:4000]
    if isinstance(value, dict):
        for key in ("question", "request", "message", "description", "action"):
            if isinstance(value.get(key), str):
                return str(value[key])[:4000]
    return repr(value)[:4000]


def _options(value: Any) -> list[str] | None:
    opts = value.get("options") if isinstance(value, dict) else None
    return [str(o) for o in opts][:50] if isinstance(opts, list) else None


def _decision_status(value: Any) -> OutcomeStatus:
    v = value.get("type", value.get("decision")) if isinstance(value, dict) else value
    if isinstance(v, bool):
        return OutcomeStatus.OK if v else OutcomeStatus.DENIED
    if isinstance(v, str) and v.strip().lower() in {"reject", "rejected", "deny", "denied", "no"}:
        return OutcomeStatus.DENIED
    return OutcomeStatus.OK
