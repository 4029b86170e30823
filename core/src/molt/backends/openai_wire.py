"""The OpenAI wire format: request bodies ⇄ :class:`ChatRequest`, results ⇄ response bodies and
stream chunks.

One module for both directions, so the gateway (which speaks it to clients), the ``openai`` and
``vllm`` backends (which speak it to upstreams) and the stub server agree on every field. Request
parsing validates what it reads and raises :class:`~molt.errors.InvalidRequest` (HTTP 400) with the
offending ``param``, the way OpenAI does.
"""

from __future__ import annotations

import math
import re
from typing import Any

from molt.backends.base import (
    ChatRequest,
    Choice,
    CompletionRequest,
    Delta,
    Result,
    StreamEnd,
    StreamItem,
    TokenCounts,
    TokenLogprob,
    ToolCallDelta,
    ToolCallOut,
)
from molt.errors import BackendStreamError, InvalidRequest

__all__ = [
    "ResponsesStreamParser",
    "chat_chunk",
    "chat_request_body",
    "chat_response",
    "completion_chunk",
    "completion_request_body",
    "completion_response",
    "parse_chat_chunk",
    "parse_chat_request",
    "parse_chat_response",
    "parse_completion_chunk",
    "parse_completion_request",
    "parse_completion_response",
    "parse_responses_response",
    "usage_dict",
]

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_CHAT_KNOWN = frozenset({
    "model", "messages", "tools", "tool_choice", "n", "stop", "temperature", "top_p", "max_tokens",
    "max_completion_tokens", "logprobs", "top_logprobs", "seed", "stream", "stream_options", "user",
    "metadata", "parallel_tool_calls",
})
_COMPLETION_KNOWN = frozenset({
    "model", "prompt", "n", "stop", "temperature", "top_p", "max_tokens", "logprobs", "seed", "stream",
    "stream_options", "user", "metadata", "echo", "suffix", "best_of",
})

# --------------------------------------------------------------------------------- request parsing


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def _opt_number(body: dict[str, Any], key: str, lo: float, hi: float) -> float | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not lo <= v <= hi:
        raise _bad(f"'{key}' must be a number between {lo:g} and {hi:g}, got {v!r}.", key)
    return float(v)


def _opt_int(body: dict[str, Any], key: str, lo: int, hi: int) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _bad(f"'{key}' must be an integer between {lo} and {hi}, got {v!r}.", key)
    return v


def _stop(body: dict[str, Any]) -> list[str] | None:
    v = body.get("stop")
    if v is None:
        return None
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and len(v) <= 16 and all(isinstance(s, str) and s for s in v):
        return v or None
    raise _bad("'stop' must be a string or a list of up to 16 non-empty strings.", "stop")


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("'model' is required and must be a non-empty string.", "model")
    return model


def _check_body(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise _bad("The request body must be a JSON object.", "body")
    return body


def _check_messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' is required and must be a non-empty list of message objects.", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise _bad(f"messages[{i}] must be an object with 'role' and 'content'.", f"messages[{i}]")
        role = m.get("role")
        if role not in _ROLES:
            raise _bad(f"messages[{i}].role must be one of {', '.join(sorted(_ROLES))}, got {role!r}.",
                       f"messages[{i}].role")
        content = m.get("content")
        if content is not None and not isinstance(content, str | list):
            raise _bad(f"messages[{i}].content must be a string, a list of content parts or null.",
                       f"messages[{i}].content")
        calls = m.get("tool_calls")
        if calls is not None and (not isinstance(calls, list) or not all(
                isinstance(c, dict) and isinstance(c.get("function"), dict) for c in calls)):
            raise _bad(f"messages[{i}].tool_calls must be a list of {{'id', 'type', 'function'}} objects.",
                       f"messages[{i}].tool_calls")
    return messages


def check_tools(tools: Any) -> list[dict[str, Any]] | None:
    """Validate an OpenAI ``tools`` list (function tools with JSON-schema parameters)."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise _bad("'tools' must be a list of tool objects.", "tools")
    seen: set[str] = set()
    for i, t in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(
                t.get("function"), dict):
            raise _bad(f"{where} must be {{'type': 'function', 'function': {{'name', 'parameters'}}}}.", where)
        fn = t["function"]
        name = fn.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise _bad(f"{where}.function.name must be 1-64 letters, digits, '_', '-' or '.', got {name!r}.",
                       f"{where}.function.name")
        if name in seen:
            raise _bad(f"{where}.function.name {name!r} is used by two tools; tool names must be unique.",
                       f"{where}.function.name")
        seen.add(name)
        desc = fn.get("description")
        if desc is not None and not isinstance(desc, str):
            raise _bad(f"{where}.function.description must be a string.", f"{where}.function.description")
        params = fn.get("parameters")
        if params is not None:
            _check_schema(params, f"{where}.function.parameters")
    return tools


def _check_schema(schema: Any, where: str) -> None:
    if not isinstance(schema, dict):
        raise _bad(f"{where} must be a JSON Schema object.", where)
    typ = schema.get("type")
    if typ is not None and typ != "object":
        raise _bad(f"{where}.type must be 'object' for function parameters, got {typ!r}.", where)
    props = schema.get("properties")
    if props is not None and (not isinstance(props, dict) or not all(isinstance(v, dict) for v in props.values())):
        raise _bad(f"{where}.properties must map property names to JSON Schema objects.", where)
    required = schema.get("required")
    if required is not None:
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise _bad(f"{where}.required must be a list of property names.", where)
        missing = [r for r in required if props is not None and r not in props]
        if missing:
            raise _bad(f"{where}.required names {missing} which are not in properties.", where)


def _check_tool_choice(choice: Any, tools: list[dict[str, Any]] | None) -> Any:
    if choice is None or choice in ("none", "auto"):
        return choice
    if choice == "required":
        if not tools:
            raise _bad("tool_choice 'required' needs a non-empty 'tools' list.", "tool_choice")
        return choice
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        if not tools or name not in {t["function"]["name"] for t in tools}:
            raise _bad(f"tool_choice names the function {name!r}, which is not in 'tools'.", "tool_choice")
        return choice
    raise _bad("tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': "
               "{'name': …}}.", "tool_choice")


def parse_chat_request(body: Any) -> tuple[ChatRequest, bool]:
    """Validate a chat-completions body; returns the request and whether it asks to stream."""
    body = _check_body(body)
    model = _model(body)
    messages = _check_messages(body.get("messages"))
    tools = check_tools(body.get("tools"))
    max_tokens = _opt_int(body, "max_completion_tokens", 1, 1 << 20)
    if max_tokens is None:
        max_tokens = _opt_int(body, "max_tokens", 1, 1 << 20)
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise _bad("'logprobs' must be true or false.", "logprobs")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _bad("'stream' must be true or false.", "stream")
    req = ChatRequest(
        model=model,
        messages=messages,
        tools=tools or None,
        tool_choice=_check_tool_choice(body.get("tool_choice"), tools),
        n=_opt_int(body, "n", 1, 128) or 1,
        stop=_stop(body),
        temperature=_opt_number(body, "temperature", 0.0, 2.0),
        top_p=_opt_number(body, "top_p", 0.0, 1.0),
        max_tokens=max_tokens,
        logprobs=bool(logprobs),
        top_logprobs=_opt_int(body, "top_logprobs", 0, 20),
        seed=_opt_int(body, "seed", -(1 << 63), (1 << 63) - 1),
        extra={k: v for k, v in body.items() if k not in _CHAT_KNOWN},
    )
    return req, bool(stream)


def parse_completion_request(body: Any) -> tuple[CompletionRequest, bool]:
    """Validate a (legacy) completions body; returns the request and whether it asks to stream."""
    body = _check_body(body)
    model = _model(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, list):
        if not prompt or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
            raise _bad("'prompt' must be a string or a list of token ids (batches are not supported).",
                       "prompt")
    elif not isinstance(prompt, str):
        raise _bad("'prompt' is required and must be a string or a list of token ids.", "prompt")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _bad("'stream' must be true or false.", "stream")
    req = CompletionRequest(
        model=model,
        prompt=prompt,
        n=_opt_int(body, "n", 1, 128) or 1,
        stop=_stop(body),
        temperature=_opt_number(body, "temperature", 0.0, 2.0),
        top_p=_opt_number(body, "top_p", 0.0, 1.0),
        max_tokens=_opt_int(body, "max_tokens", 1, 1 << 20),
        logprobs=_opt_int(body, "logprobs", 0, 20),
        seed=_opt_int(body, "seed", -(1 << 63), (1 << 63) - 1),
        extra={k: v for k, v in body.items() if k not in _COMPLETION_KNOWN},
    )
    return req, bool(stream)


# --------------------------------------------------------------------------------- request bodies


def chat_request_body(req: ChatRequest, *, stream: bool = False) -> dict[str, Any]:
    """The JSON body an OpenAI-compatible upstream takes for ``req``."""
    body: dict[str, Any] = dict(req.extra)
    body["model"] = req.model
    body["messages"] = req.messages
    if req.tools:
        body["tools"] = req.tools
    if req.tool_choice is not None:
        body["tool_choice"] = req.tool_choice
    if req.n != 1:
        body["n"] = req.n
    for key in ("stop", "temperature", "top_p", "max_tokens", "top_logprobs", "seed"):
        v = getattr(req, key)
        if v is not None:
            body[key] = v
    if req.logprobs:
        body["logprobs"] = True
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def completion_request_body(req: CompletionRequest, *, stream: bool = False) -> dict[str, Any]:
    """The JSON body an OpenAI-compatible upstream takes for ``req``."""
    body: dict[str, Any] = dict(req.extra)
    body["model"] = req.model
    body["prompt"] = req.prompt
    if req.n != 1:
        body["n"] = req.n
    for key in ("stop", "temperature", "top_p", "max_tokens", "logprobs", "seed"):
        v = getattr(req, key)
        if v is not None:
            body[key] = v
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


# --------------------------------------------------------------------------------- response bodies


def usage_dict(usage: TokenCounts | None) -> dict[str, int] | None:
    """OpenAI ``usage`` object."""
    if usage is None:
        return None
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens}


def _token_bytes(token: str) -> list[int]:
    return list(token.encode("utf-8", "surrogatepass"))


def _chat_logprobs(lps: list[TokenLogprob] | None) -> dict[str, Any] | None:
    if lps is None:
        return None
    return {"content": [
        {"token": lp.token, "logprob": lp.logprob, "bytes": _token_bytes(lp.token),
         "top_logprobs": [{"token": t, "logprob": v, "bytes": _token_bytes(t)} for t, v in (lp.top or [])]}
        for lp in lps
    ]}


def _tool_calls(calls: list[ToolCallOut]) -> list[dict[str, Any]]:
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls]


def chat_response(result: Result, *, id: str, created: int, model: str, logprobs: bool) -> dict[str, Any]:
    """A ``chat.completion`` object for ``result`` (``model`` is the name the client asked for)."""
    choices = []
    for c in result.choices:
        msg: dict[str, Any] = {"role": "assistant", "content": c.text}
        finish = c.finish_reason
        if c.tool_calls:
            msg["tool_calls"] = _tool_calls(c.tool_calls)
            if finish in (None, "stop"):
                finish = "tool_calls"
        choices.append({"index": c.index, "message": msg,
                        "logprobs": _chat_logprobs(c.logprobs) if logprobs else None,
                        "finish_reason": finish})
    out: dict[str, Any] = {"id": id, "object": "chat.completion", "created": created, "model": model,
                           "choices": choices}
    u = usage_dict(result.usage)
    if u is not None:
        out["usage"] = u
    return out


def chat_chunk(*, id: str, created: int, model: str, delta: Delta | None = None, first: bool = False,
               logprobs: bool = False, usage: TokenCounts | None = None) -> dict[str, Any]:
    """A ``chat.completion.chunk`` for one delta (or, with ``usage`` and no delta, the usage chunk)."""
    out: dict[str, Any] = {"id": id, "object": "chat.completion.chunk", "created": created, "model": model}
    if delta is None:
        out["choices"] = []
        out["usage"] = usage_dict(usage)
        return out
    d: dict[str, Any] = {}
    if first:
        d["role"] = "assistant"
    if delta.text:
        d["content"] = delta.text
    elif first:
        d["content"] = "" if not delta.tool_calls else None
    if delta.tool_calls:
        calls = []
        for t in delta.tool_calls:
            c: dict[str, Any] = {"index": t.index}
            if t.id is not None:
                c["id"] = t.id
                c["type"] = "function"
            fn: dict[str, Any] = {"arguments": t.arguments}
            if t.name is not None:
                fn["name"] = t.name
            c["function"] = fn
            calls.append(c)
        d["tool_calls"] = calls
    out["choices"] = [{"index": delta.index, "delta": d,
                       "logprobs": _chat_logprobs(delta.logprobs) if logprobs and delta.logprobs else None,
                       "finish_reason": delta.finish_reason}]
    return out


def _completion_logprobs(lps: list[TokenLogprob] | None, text: str | None) -> dict[str, Any] | None:
    if lps is None:
        return None
    offsets, pos = [], 0
    for lp in lps:
        offsets.append(pos)
        pos += len(lp.token)
    return {"tokens": [lp.token for lp in lps], "token_logprobs": [lp.logprob for lp in lps],
            "top_logprobs": [dict(lp.top) if lp.top else None for lp in lps], "text_offset": offsets}


def completion_response(result: Result, *, id: str, created: int, model: str,
                        logprobs: bool) -> dict[str, Any]:
    """A ``text_completion`` object for ``result``."""
    choices = [{"index": c.index, "text": c.text or "",
                "logprobs": _completion_logprobs(c.logprobs, c.text) if logprobs else None,
                "finish_reason": c.finish_reason} for c in result.choices]
    out: dict[str, Any] = {"id": id, "object": "text_completion", "created": created, "model": model,
                           "choices": choices}
    u = usage_dict(result.usage)
    if u is not None:
        out["usage"] = u
    return out


def completion_chunk(*, id: str, created: int, model: str, delta: Delta | None = None,
                     logprobs: bool = False, usage: TokenCounts | None = None) -> dict[str, Any]:
    """A streamed ``text_completion`` chunk (or, with ``usage`` and no delta, the usage chunk)."""
    out: dict[str, Any] = {"id": id, "object": "text_completion", "created": created, "model": model}
    if delta is None:
        out["choices"] = []
        out["usage"] = usage_dict(usage)
        return out
    out["choices"] = [{"index": delta.index, "text": delta.text or "",
                       "logprobs": _completion_logprobs(delta.logprobs, delta.text) if logprobs else None,
                       "finish_reason": delta.finish_reason}]
    return out


# --------------------------------------------------------------------------------- response parsing


def _parse_usage(u: Any) -> TokenCounts | None:
    if not isinstance(u, dict):
        return None
    return TokenCounts(prompt_tokens=int(u.get("prompt_tokens") or 0),
                 completion_tokens=int(u.get("completion_tokens") or 0))


def _parse_chat_logprobs(lp: Any) -> list[TokenLogprob] | None:
    if not isinstance(lp, dict) or not isinstance(lp.get("content"), list):
        return None
    return [TokenLogprob(token=e.get("token", ""), logprob=float(e.get("logprob", 0.0)),
                         top=[(t.get("token", ""), float(t.get("logprob", 0.0)))
                              for t in e.get("top_logprobs") or []] or None)
            for e in lp["content"]]


def parse_chat_response(body: dict[str, Any]) -> Result:
    """A :class:`Result` from an upstream ``chat.completion`` object."""
    choices: list[Choice] = []
    for c in body.get("choices") or []:
        msg = c.get("message") or {}
        calls = None
        if msg.get("tool_calls"):
            calls = [ToolCallOut(id=t.get("id") or "", name=(t.get("function") or {}).get("name", ""),
                                 arguments=(t.get("function") or {}).get("arguments") or "{}")
                     for t in msg["tool_calls"]]
        choices.append(Choice(index=int(c.get("index", len(choices))), text=msg.get("content"),
                              tool_calls=calls, finish_reason=c.get("finish_reason"),
                              logprobs=_parse_chat_logprobs(c.get("logprobs"))))
    return Result(choices=choices, model=str(body.get("model", "")), usage=_parse_usage(body.get("usage")))


def parse_chat_chunk(body: dict[str, Any]) -> list[StreamItem]:
    """Stream items from an upstream ``chat.completion.chunk`` (a usage chunk becomes a StreamEnd)."""
    items: list[StreamItem] = []
    for c in body.get("choices") or []:
        d = c.get("delta") or {}
        calls = None
        if d.get("tool_calls"):
            calls = []
            for t in d["tool_calls"]:
                fn = t.get("function") or {}
                calls.append(ToolCallDelta(index=int(t.get("index", 0)), id=t.get("id"), name=fn.get("name"),
                                           arguments=fn.get("arguments") or ""))
        items.append(Delta(index=int(c.get("index", 0)), text=d.get("content"), tool_calls=calls,
                           logprobs=_parse_chat_logprobs(c.get("logprobs")),
                           finish_reason=c.get("finish_reason")))
    if body.get("usage"):
        items.append(StreamEnd(model=str(body.get("model", "")), usage=_parse_usage(body["usage"])))
    return items


def _parse_completion_logprobs(lp: Any) -> list[TokenLogprob] | None:
    if not isinstance(lp, dict) or not isinstance(lp.get("tokens"), list):
        return None
    tops = lp.get("top_logprobs") or [None] * len(lp["tokens"])
    out = []
    for tok, val, top in zip(lp["tokens"], lp.get("token_logprobs") or [], tops, strict=False):
        out.append(TokenLogprob(token=tok, logprob=float(val if val is not None else 0.0),
                                top=list(top.items()) if isinstance(top, dict) else None))
    return out


def parse_completion_response(body: dict[str, Any]) -> Result:
    """A :class:`Result` from an upstream ``text_completion`` object."""
    choices = [Choice(index=int(c.get("index", i)), text=c.get("text"), finish_reason=c.get("finish_reason"),
                      logprobs=_parse_completion_logprobs(c.get("logprobs")))
               for i, c in enumerate(body.get("choices") or [])]
    return Result(choices=choices, model=str(body.get("model", "")), usage=_parse_usage(body.get("usage")))


def parse_completion_chunk(body: dict[str, Any]) -> list[StreamItem]:
    """Stream items from an upstream streamed ``text_completion`` chunk."""
    items: list[StreamItem] = [
        Delta(index=int(c.get("index", 0)), text=c.get("text"), finish_reason=c.get("finish_reason"),
              logprobs=_parse_completion_logprobs(c.get("logprobs")))
        for c in body.get("choices") or []
    ]
    if body.get("usage"):
        items.append(StreamEnd(model=str(body.get("model", "")), usage=_parse_usage(body["usage"])))
    return items


# --------------------------------------------------------------------------------- Responses API answers


def _responses_usage(u: Any) -> TokenCounts | None:
    if not isinstance(u, dict):
        return None
    return TokenCounts(prompt_tokens=int(u.get("input_tokens") or 0),
                       completion_tokens=int(u.get("output_tokens") or 0))


def _function_name(item: dict[str, Any]) -> str:
    """A ``function_call`` item's tool name as the chat path names it (a namespace's tool: ``ns.name``)."""
    name = str(item.get("name") or "")
    return f"{item['namespace']}.{name}" if isinstance(item.get("namespace"), str) and item["namespace"] else name


def _responses_finish(body: dict[str, Any], calls: bool) -> str:
    if body.get("status") == "incomplete":
        return "length"
    return "tool_calls" if calls else "stop"


def parse_responses_response(body: dict[str, Any]) -> Result:
    """A :class:`Result` from an upstream Responses API ``response`` object: its ``output_text`` parts
    as the text, its ``function_call`` items as tool calls (reasoning and other items carry no answer)."""
    text: list[str] = []
    calls: list[ToolCallOut] = []
    for item in body.get("output") or []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            text += [str(p.get("text", "")) for p in item.get("content") or []
                     if isinstance(p, dict) and p.get("type") == "output_text"]
        elif item.get("type") == "function_call":
            calls.append(ToolCallOut(id=str(item.get("call_id") or item.get("id") or ""), name=_function_name(item),
                                     arguments=str(item.get("arguments") or "{}")))
    choice = Choice(index=0, text="".join(text) if text else None, tool_calls=calls or None,
                    finish_reason=_responses_finish(body, bool(calls)))
    return Result(choices=[choice], model=str(body.get("model", "")), usage=_responses_usage(body.get("usage")))


class ResponsesStreamParser:
    """Stream items from an upstream Responses API event stream, one event at a time: text deltas,
    function calls (opened by ``response.output_item.added``, arguments by their deltas), and the end
    (``response.completed`` / ``response.incomplete``) with usage. ``response.failed`` or an ``error``
    event raises :class:`~molt.errors.BackendStreamError`. ``who`` names the upstream in messages."""

    def __init__(self, who: str, backend: str | None = None):
        self.who, self.backend = who, backend
        self._calls: dict[int, int] = {}  # output index → tool-call index
        self._args: dict[int, bool] = {}  # tool-call index → whether any argument text arrived

    def feed(self, event: str | None, data: dict[str, Any]) -> tuple[list[StreamItem], bool]:
        """``(items, whether this was the stream's last event)`` for one event."""
        typ = data.get("type") or event
        if typ == "response.output_text.delta" and isinstance(data.get("delta"), str):
            return [Delta(text=data["delta"])], False
        item = data.get("item")
        if typ == "response.output_item.added" and isinstance(item, dict) and item.get("type") == "function_call":
            k = self._calls[int(data.get("output_index", len(self._calls)))] = len(self._calls)
            args = str(item.get("arguments") or "")
            self._args[k] = bool(args)
            return [Delta(tool_calls=[ToolCallDelta(index=k, id=str(item.get("call_id") or item.get("id") or ""),
                                                    name=_function_name(item), arguments=args)])], False
        if typ in ("response.function_call_arguments.delta", "response.function_call_arguments.done"):
            at = self._calls.get(int(data.get("output_index", -1)))
            if at is None:
                return [], False
            k = at
            text = data.get("delta") if typ.endswith("delta") else (None if self._args[k] else data.get("arguments"))
            if not isinstance(text, str) or not text:
                return [], False
            self._args[k] = True
            return [Delta(tool_calls=[ToolCallDelta(index=k, arguments=text)])], False
        if typ in ("response.completed", "response.incomplete"):
            resp: dict[str, Any] = data["response"] if isinstance(data.get("response"), dict) else {}
            return [Delta(finish_reason=_responses_finish(resp, bool(self._calls))),
                    StreamEnd(model=str(resp.get("model", "")), usage=_responses_usage(resp.get("usage")))], True
        if typ in ("response.failed", "error"):
            failed: dict[str, Any] = data["response"] if isinstance(data.get("response"), dict) else data
            err: dict[str, Any] = failed["error"] if isinstance(failed.get("error"), dict) else failed
            raise BackendStreamError(f"{self.who} failed mid-stream: {err.get('message', err)}", backend=self.backend)
        return [], False
