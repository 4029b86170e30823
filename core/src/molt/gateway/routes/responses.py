"""``POST /v1/responses``: the OpenAI Responses API (what the OpenAI Agents SDK and Codex CLI speak by
default) served by the chat path.

One module at ~680 lines because it is one idea: the Responses API's wire format at the gateway — its
requests read, its answers and event stream written, its state kept — whether served by the chat path
or passed through to an upstream that speaks it.

A Responses request is translated into the chat request it means — ``instructions`` as the system
message, input items as messages (an assistant message and the ``function_call`` items after it are
one assistant message with tool calls, the way the chat path's session index hashes a served answer;
``function_call_output`` items are tool messages), function tools and ``tool_choice`` in chat form —
and then goes through :class:`~molt.gateway.service.Gateway` exactly as a chat completion does:
trajectory resolution, routing, the version's harness (memories, skills, tool rewrites), the backend,
capture (token ids when the backend gives them), governance. Only the wire format differs, so a
reward by the response id (``resp_<event id>``) reaches the recorded call.

``previous_response_id`` continues a stored response: the conversation up to and including its answer
is kept per tenant (:class:`ResponseStore`, bounded and forgotten when idle) and put in front of the
new input; another tenant's id is answered as one that does not exist. ``store: false`` keeps no state
(the call is still recorded, as every call through the gateway is). Streaming sends the SDK's event
sequence (``response.created`` … ``response.completed``, or ``response.failed`` when the backend dies
mid-stream). Errors are the API's ``{"error": {message, type, param, code}}`` objects, raised before
anything is routed or stored.

With a backend whose upstream serves the Responses API itself (``molt serve --backend openai
--passthrough responses``), the request passes through (:class:`~molt.gateway.service.Passthrough`):
the client's body goes to the upstream's ``/responses`` as it is — hosted tools, reasoning items and
every other field included — with only what the chat path would change (the routed model, the
harness's system text as ``instructions``, its tool rewrites). The upstream keeps the conversation:
the response id the client sees is still the gateway's ``resp_<event id>``, stored per tenant with
the upstream's own id, so ``previous_response_id`` is looked up within the caller's tenant (another
tenant's id is "not found", as ever) and sent upstream as the upstream's id. The answer, streamed event
by event, is the upstream's but for that id, the model name the client asked for and tool names
restored; it is recorded from what the events mean, and the upstream's own 4xx errors are relayed as
it sent them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from molt.backends import openai_wire as wire
from molt.backends.base import ChatRequest, Result
from molt.backends.chat_format import text_content
from molt.backends.upstream import RelayedEvent
from molt.errors import BackendError, InvalidRequest
from molt.gateway.call_record import reply_message
from molt.gateway.error_responses import JSON_MEDIA_TYPE
from molt.gateway.routes.context import RouteContext, read_json
from molt.gateway.service import Call, Gateway, Passthrough, passthrough_metadata
from molt.gateway.sessions import IdleLRU
from molt.governance.access import Permission
from molt.harness import Applied

__all__ = ["PreviousResponseNotFound", "ResponseStore", "ResponsesRequest", "install", "parse_responses_request",
           "passthrough_body", "response_object"]

#: Responses kept for ``previous_response_id`` (per gateway, all tenants together).
MAX_RESPONSES = 20_000

_ROLES = frozenset({"user", "assistant", "system", "developer"})
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


class PreviousResponseNotFound(InvalidRequest):
    """``previous_response_id`` names no response of the caller's tenant (expired, never stored, or
    another tenant's: the same answer for each)."""

    code = "previous_response_not_found"


# --------------------------------------------------------------------------------- state


@dataclass(frozen=True, slots=True)
class _Stored:
    """A stored response: the messages it added to the conversation (its input and its answer), after
    those of its parent. A chain of parents, not a copy of the conversation per response."""

    parent: _Stored | None
    messages: tuple[dict[str, Any], ...]
    #: The upstream's id of this response when it was passed through (the upstream keeps its state).
    upstream_id: str | None = None

    def conversation(self) -> list[dict[str, Any]]:
        parts: list[tuple[dict[str, Any], ...]] = []
        node: _Stored | None = self
        while node is not None:
            parts.append(node.messages)
            node = node.parent
        return [m for p in reversed(parts) for m in p]


class ResponseStore:
    """Responses that a later request may continue by ``previous_response_id``: keyed by tenant and id,
    at most ``limit`` of them, each forgotten after ``idle_s`` seconds unused."""

    def __init__(self, limit: int = MAX_RESPONSES, idle_s: float | None = 1800.0):
        self._lru: IdleLRU[tuple[str, str], _Stored] = IdleLRU(limit, idle_s)

    def get(self, tenant: str, response_id: str) -> _Stored:
        hit = self._lru.get((tenant, response_id))
        if hit is None:
            raise PreviousResponseNotFound(f"Previous response with id {response_id!r} not found.",
                                           param="previous_response_id")
        return hit

    def put(self, tenant: str, response_id: str, parent: _Stored | None, messages: list[dict[str, Any]],
            upstream_id: str | None = None) -> None:
        self._lru.put((tenant, response_id), _Stored(parent, tuple(messages), upstream_id))

    def __len__(self) -> int:
        return len(self._lru)


# --------------------------------------------------------------------------------- request


@dataclass(slots=True)
class ResponsesRequest:
    """A validated Responses request: the chat request it means, and what the response echoes."""

    chat: ChatRequest
    stream: bool
    store: bool
    previous: _Stored | None
    previous_response_id: str | None
    #: The messages this request adds to the conversation (its input items, without ``instructions``).
    input: list[dict[str, Any]]
    echo: dict[str, Any]


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def _content(content: Any, where: str, passthrough: bool = False) -> str | list[dict[str, Any]]:
    """A message item's content as chat content: text parts joined into a string, an image part as
    the chat ``image_url`` part (``passthrough``: a part of a type this gateway does not read is left
    out; the upstream reads it)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"{where}.content must be a string or a list of content parts.", f"{where}.content")
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        if not isinstance(part, dict):
            raise _bad(f"{at} must be an object with a 'type'.", at)
        typ = part.get("type")
        if typ in _TEXT_PARTS or typ == "refusal":
            text = part.get("text" if typ != "refusal" else "refusal")
            if not isinstance(text, str):
                raise _bad(f"{at}.text must be a string.", f"{at}.text")
            parts.append({"type": "text", "text": text})
        elif typ == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                raise _bad(f"{at}.image_url must be a URL or a data: URL (file ids are not served here).",
                           f"{at}.image_url")
            parts.append({"type": "image_url", "image_url": {"url": url, "detail": part.get("detail") or "auto"}})
        elif passthrough and isinstance(typ, str):
            continue  # files, audio…: relayed as they are
        else:
            raise _bad(f"{at}.type {typ!r} is not a content part this gateway takes (input_text, output_text, "
                       "refusal, input_image).", f"{at}.type")
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _output_text(output: Any, where: str) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        content = _content(output, where)
        return content if isinstance(content, str) else text_content(content)
    raise _bad(f"{where}.output must be a string or a list of content parts.", f"{where}.output")


def _str_field(item: dict[str, Any], key: str, where: str) -> str:
    v = item.get(key)
    if not isinstance(v, str) or not v:
        raise _bad(f"{where}.{key} is required and must be a non-empty string.", f"{where}.{key}")
    return v


def input_messages(items: Any, passthrough: bool = False) -> list[dict[str, Any]]:
    """Responses input (a string or a list of items) as chat messages (see the module docstring);
    ``passthrough``: items and parts of types this gateway does not read are left out of them."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise _bad("'input' must be a string or a list of input items.", "input")
    out: list[dict[str, Any]] = []
    turn: dict[str, Any] | None = None  # the assistant message being built from its items

    def flush() -> None:
        nonlocal turn
        if turn is not None:
            out.append(turn)
            turn = None

    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _bad(f"{where} must be an input item object.", where)
        typ = item.get("type", "message" if "role" in item else None)
        if typ == "message":
            role = item.get("role")
            if role not in _ROLES:
                raise _bad(f"{where}.role must be one of {', '.join(sorted(_ROLES))}, got {role!r}.",
                           f"{where}.role")
            content = _content(item.get("content"), where, passthrough)
            flush()
            if role == "assistant":
                turn = {"role": "assistant", "content": content}
            else:
                out.append({"role": role, "content": content})
        elif typ == "function_call":
            call_id, name = _str_field(item, "call_id", where), _str_field(item, "name", where)
            args = item.get("arguments", "")
            if not isinstance(args, str):
                raise _bad(f"{where}.arguments must be a JSON string.", f"{where}.arguments")
            if isinstance(item.get("namespace"), str) and item["namespace"]:
                name = f"{item['namespace']}.{name}"
            if turn is None:
                turn = {"role": "assistant", "content": None}
            turn.setdefault("tool_calls", []).append(
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}})
        elif typ == "function_call_output":
            call_id = _str_field(item, "call_id", where)
            flush()
            out.append({"role": "tool", "tool_call_id": call_id, "content": _output_text(item.get("output"), where)})
        elif typ == "reasoning":
            continue  # a reasoning model's summary: not part of what a chat backend is shown
        elif passthrough and isinstance(typ, str):
            continue  # hosted tools' calls, item references…: the upstream reads them
        else:
            raise _bad(f"{where}.type {typ!r} is not an input item this gateway takes (message, function_call, "
                       "function_call_output, reasoning).", f"{where}.type")
    flush()
    return out


#: Tools the API's host runs (not the client): a chat backend cannot, so they are not offered to it.
HOSTED_TOOLS = frozenset({"web_search", "web_search_preview", "file_search", "computer_use_preview", "code_interpreter",
                          "image_generation", "local_shell", "mcp", "custom"})


def _tools(tools: Any, passthrough: bool = False) -> list[dict[str, Any]] | None:
    """Function tools in chat form; a ``namespace``'s tools as ``<namespace>.<name>`` (an answer's call
    of one is given back with its ``namespace``); hosted tools (:data:`HOSTED_TOOLS`) left out."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise _bad("'tools' must be a list of tool objects.", "tools")
    out = []

    def add(t: dict[str, Any], prefix: str, where: str) -> None:
        if not isinstance(t.get("name"), str):
            raise _bad(f"{where}.name is required and must be a string.", f"{where}.name")
        fn = {k: t[k] for k in ("description", "parameters") if t.get(k) is not None}
        out.append({"type": "function", "function": {"name": prefix + t["name"], **fn}})

    for i, t in enumerate(tools):
        typ = t.get("type") if isinstance(t, dict) else None
        if typ == "function":
            add(t, "", f"tools[{i}]")
        elif typ == "namespace" and isinstance(t.get("name"), str) and isinstance(t.get("tools"), list):
            for j, inner in enumerate(t["tools"]):
                if isinstance(inner, dict) and inner.get("type") == "function":
                    add(inner, t["name"] + ".", f"tools[{i}].tools[{j}]")
        elif typ not in HOSTED_TOOLS and not (passthrough and isinstance(typ, str)):
            raise _bad(f"tools[{i}].type {typ!r} is not a tool type this gateway takes (function, namespace; "
                       f"hosted tools — {', '.join(sorted(HOSTED_TOOLS))} — are left out).", f"tools[{i}].type")
    return out or None


def _tool_choice(choice: Any) -> Any:
    if choice is None or isinstance(choice, str):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise _bad("tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'name': …}.", "tool_choice")


def parse_responses_request(body: Any, store: ResponseStore, tenant: str, *,
                            passthrough: bool = False) -> ResponsesRequest:
    """Validate a Responses body and look up its ``previous_response_id`` within ``tenant``. With
    ``passthrough`` (every backend relays the body to a Responses upstream) item, part and tool types
    this gateway does not read are left out of the chat request — the record — rather than refused."""
    if not isinstance(body, dict):
        raise _bad("The request body must be a JSON object.", "body")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("'model' is required and must be a non-empty string.", "model")
    if body.get("input") is None:
        raise _bad("'input' is required: a string or a list of input items.", "input")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _bad("'instructions' must be a string.", "instructions")
    for key in ("stream", "store", "parallel_tool_calls"):
        if body.get(key) is not None and not isinstance(body[key], bool):
            raise _bad(f"'{key}' must be true or false.", key)
    if body.get("n") not in (None, 1):
        raise _bad("The Responses API answers one choice; 'n' is not a parameter of it.", "n")
    prev_id = body.get("previous_response_id")
    if prev_id is not None and (not isinstance(prev_id, str) or not prev_id):
        raise _bad("'previous_response_id' must be a response id string.", "previous_response_id")
    conversation_input = input_messages(body["input"], passthrough)
    tools = _tools(body.get("tools"), passthrough)
    max_out = body.get("max_output_tokens")
    if max_out is not None and (isinstance(max_out, bool) or not isinstance(max_out, int)
                                or not 1 <= max_out <= 1 << 20):
        raise _bad(f"'max_output_tokens' must be an integer between 1 and {1 << 20}, got {max_out!r}.",
                   "max_output_tokens")
    previous = store.get(tenant, prev_id) if prev_id is not None else None
    messages = ([{"role": "system", "content": instructions}] if instructions else []) + (
        previous.conversation() if previous is not None else []) + conversation_input
    if not messages:
        raise _bad("'input' is empty and there is no instructions or previous response to answer.", "input")
    chat_body: dict[str, Any] = {"model": model, "messages": messages, "tools": tools,
                                 "tool_choice": _tool_choice(body.get("tool_choice")), "max_tokens": max_out}
    for key in ("temperature", "top_p", "top_logprobs"):
        if body.get(key) is not None:
            chat_body[key] = body[key]
    if body.get("parallel_tool_calls") is False:
        chat_body["parallel_tool_calls"] = False
    req, _ = wire.parse_chat_request({k: v for k, v in chat_body.items() if v is not None})
    echo = {"instructions": instructions, "max_output_tokens": max_out, "previous_response_id": prev_id,
            "store": body.get("store", True) is not False, "temperature": body.get("temperature", 1.0),
            "top_p": body.get("top_p", 1.0), "tools": body.get("tools") or [],
            "tool_choice": body.get("tool_choice", "auto"),
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "metadata": body.get("metadata") if isinstance(body.get("metadata"), dict) else {},
            "text": body.get("text") if isinstance(body.get("text"), dict) else {"format": {"type": "text"}},
            "truncation": body.get("truncation") if isinstance(body.get("truncation"), str) else "disabled",
            "reasoning": body.get("reasoning") if isinstance(body.get("reasoning"), dict)
            else {"effort": None, "summary": None},
            "user": body.get("user") if isinstance(body.get("user"), str) else None}
    return ResponsesRequest(chat=req, stream=bool(body.get("stream")), store=echo["store"], previous=previous,
                            previous_response_id=prev_id, input=conversation_input, echo=echo)


# --------------------------------------------------------------------------------- response


def _usage(result: Result | None) -> dict[str, Any] | None:
    if result is None or result.usage is None:
        return None
    u = result.usage
    return {"input_tokens": u.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": u.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.prompt_tokens + u.completion_tokens}


def _message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def _call_item(call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
    item = {"type": "function_call", "id": "fc_" + call_id, "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}
    namespace, dot, short = name.rpartition(".")
    if dot and namespace:  # a namespace's tool, offered to the backend as <namespace>.<name>
        item["namespace"], item["name"] = namespace, short
    return item


def output_items(result: Result, event_id: str) -> list[dict[str, Any]]:
    """The output items of an answer: its text as one message, then one item per tool call."""
    choice = result.choices[0]
    items = []
    if choice.text:
        items.append(_message_item("msg_" + event_id, choice.text))
    for c in choice.tool_calls or ():
        items.append(_call_item(c.id, c.name, c.arguments))
    return items


def response_object(rid: str, created: float, model: str, echo: dict[str, Any], *, status: str,
                    output: list[dict[str, Any]], usage: dict[str, Any] | None = None,
                    error: dict[str, Any] | None = None, incomplete: str | None = None) -> dict[str, Any]:
    """A ``response`` object (``model`` is the name the client asked for)."""
    return {"id": rid, "object": "response", "created_at": int(created), "status": status, "error": error,
            "incomplete_details": {"reason": incomplete} if incomplete else None, "model": model,
            "output": output, "usage": usage, **echo}


def _status(result: Result) -> tuple[str, str | None]:
    if result.choices and result.choices[0].finish_reason == "length":
        return "incomplete", "max_output_tokens"
    return "completed", None


def _sse(seq: Iterator[int], typ: str, payload: dict[str, Any]) -> bytes:
    body = {"type": typ, "sequence_number": next(seq), **payload}
    return b"event: " + typ.encode() + b"\ndata: " + orjson.dumps(body) + b"\n\n"


# --------------------------------------------------------------------------------- passthrough


def _system_text(messages: list[dict[str, Any]]) -> str | None:
    if messages and messages[0].get("role") in ("system", "developer"):
        return text_content(messages[0].get("content"))
    return None


def conversation_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as Responses input items (the inverse of :func:`input_messages`)."""
    items: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id"),
                          "output": text_content(m.get("content"))})
            continue
        if m.get("content"):
            items.append({"role": role, "content": text_content(m.get("content"))})
        for c in m.get("tool_calls") or ():
            fn = c.get("function") or {}
            items.append({"type": "function_call", "call_id": c.get("id"), "name": fn.get("name"),
                          "arguments": fn.get("arguments") or "{}"})
    return items


def passthrough_body(body: dict[str, Any], rr: ResponsesRequest, breq: ChatRequest,
                     applied: Applied | None) -> dict[str, Any]:
    """The client's Responses body as it goes to a Responses upstream: the routed model, the previous
    response named by the upstream's own id (or, for one the upstream never saw, the conversation as
    input items), and what the harness changed of the chat form carried over — the system text as
    ``instructions``, the tools' rewrites, a renamed tool's calls in the input; the gateway's own
    ``metadata`` keys taken out. Everything else is the client's, as it sent it."""
    out = {k: v for k, v in passthrough_metadata(body).items() if k != "stream"}
    out["model"] = breq.model
    prev = rr.previous
    if prev is not None and prev.upstream_id is not None:
        out["previous_response_id"] = prev.upstream_id
    elif prev is not None:
        out.pop("previous_response_id", None)
        given = body["input"] if isinstance(body["input"], list) else [{"role": "user", "content": body["input"]}]
        out["input"] = conversation_items(prev.conversation()) + given
    if applied is None:
        return out
    req = rr.chat
    new_system = _system_text(breq.messages)
    if breq.messages is not req.messages and new_system is not None and new_system != _system_text(req.messages):
        first = out["input"][0] if isinstance(out["input"], list) and out["input"] else None
        if (not rr.echo["instructions"] and prev is None and isinstance(first, dict)
                and first.get("role") in ("system", "developer")):
            out["input"] = [{**first, "content": new_system}, *out["input"][1:]]  # the system text it sent
        else:
            out["instructions"] = new_system
    if breq.tools is not req.tools and breq.tools and req.tools and isinstance(body.get("tools"), list):
        rewritten = {old["function"]["name"]: new["function"] for old, new in zip(req.tools, breq.tools, strict=False)}
        forward = {name: fn["name"] for name, fn in rewritten.items() if fn["name"] != name}

        def tool(t: Any, prefix: str) -> Any:
            if not isinstance(t, dict) or t.get("type") != "function" or prefix + str(t.get("name")) not in rewritten:
                return t
            fn = rewritten[prefix + t["name"]]
            name = fn["name"][len(prefix):] if fn["name"].startswith(prefix) else t["name"]
            return {**t, "name": name, **{k: fn[k] for k in ("description", "parameters") if k in fn}}

        out["tools"] = [{**t, "tools": [tool(i, t["name"] + ".") for i in t["tools"]]}
                        if isinstance(t, dict) and t.get("type") == "namespace" and isinstance(t.get("tools"), list)
                        else tool(t, "") for t in body["tools"]]
        if forward and isinstance(out["input"], list):
            out["input"] = [{**i, "name": forward[i["name"]]}
                            if isinstance(i, dict) and i.get("type") == "function_call" and not i.get("namespace")
                            and i.get("name") in forward else i for i in out["input"]]
    return out


def _restored_item(item: Any, applied: Applied | None) -> Any:
    if applied is None or not applied.tool_names or not isinstance(item, dict) or item.get("type") != "function_call":
        return item
    chat = wire_name = str(item.get("name") or "")
    if item.get("namespace"):
        chat = f"{item['namespace']}.{wire_name}"
    client = applied.client_tool_name(chat)
    if client == chat:
        return item
    namespace, dot, short = client.rpartition(".")
    if item.get("namespace") and dot:
        return {**item, "namespace": namespace, "name": short}
    return {**item, "name": client}


def _relayed_response(resp: dict[str, Any], rid: str, rr: ResponsesRequest, applied: Applied | None) -> dict[str, Any]:
    """The upstream's ``response`` as the client gets it: the gateway's id, the client's model name,
    previous response id and tool names."""
    out = {**resp, "id": rid, "model": rr.chat.model, "previous_response_id": rr.previous_response_id}
    if isinstance(resp.get("output"), list):
        out["output"] = [_restored_item(i, applied) for i in resp["output"]]
    return out


def _relayed_event(ev: RelayedEvent, rid: str, rr: ResponsesRequest, applied: Applied | None) -> bytes:
    data = dict(ev.data)
    if isinstance(data.get("response"), dict):
        data["response"] = _relayed_response(data["response"], rid, rr, applied)
    if isinstance(data.get("item"), dict):
        data["item"] = _restored_item(data["item"], applied)
    typ = str(data.get("type") or ev.event or "")
    return b"event: " + typ.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


# --------------------------------------------------------------------------------- routes


def install(ctx: RouteContext) -> None:
    gw = ctx.gateway
    store = ResponseStore(idle_s=gw.config.session_idle_s)

    def begin(request: Request, body: Any) -> tuple[Call, ResponsesRequest]:
        p = ctx.auth(request, Permission.WRITE)
        rr = parse_responses_request(body, store, p.tenant_id, passthrough=gw.passes_through("responses"))
        call = gw.begin_chat(p, rr.chat, body, request.headers)
        call.record.endpoint = "responses"
        return call, rr

    def keep(call: Call, rr: ResponsesRequest, rid: str, upstream_id: str | None = None) -> None:
        result = call.record.result
        if rr.store and result is not None and result.choices:
            store.put(call.principal.tenant_id, rid, rr.previous, [*rr.input, reply_message(result.choices[0])],
                      upstream_id)

    async def record_later(call: Any) -> None:
        gw.record(call)

    @ctx.route("/v1/responses", "POST")
    async def responses(request: Request) -> Response:
        t0 = time.perf_counter()
        body = await read_json(request, gw.config.max_body_bytes)
        call, rr = begin(request, body)
        rid = "resp_" + call.record.event_ids[0]
        model = rr.chat.model
        relay = Passthrough("responses", lambda breq, applied: passthrough_body(body, rr, breq, applied))
        if rr.stream:
            first, it = await gw.open_stream(call, rr.chat, relay)
            gw.metrics.observe("/v1/responses", 200, time.perf_counter() - t0)
            out = (_relay(gw, call, rr, rid, first, it, keep) if call.passed_through
                   else _stream(gw, call, rr, rid, first, it, keep))
            return StreamingResponse(out, media_type="text/event-stream",
                                     headers={**call.headers, "cache-control": "no-cache"})
        result = await gw.run(call, rr.chat, relay)
        gw.finish(call, result)
        if call.relayed is not None:
            keep(call, rr, rid, str(call.relayed.get("id") or "") or None)
            payload = _relayed_response(call.relayed, rid, rr, call.applied)
        else:
            keep(call, rr, rid)
            status, incomplete = _status(result)
            payload = response_object(rid, call.record.started, model, rr.echo, status=status,
                                      output=output_items(result, call.record.event_ids[0]), usage=_usage(result),
                                      incomplete=incomplete)
        later = None
        if gw.acks is not None:  # --ack-after-durable: the answer waits for its record's durability
            await gw.record_durably(call)
        else:
            later = BackgroundTask(record_later, call)
        resp = Response(orjson.dumps(payload), media_type=JSON_MEDIA_TYPE, headers=call.headers, background=later)
        gw.metrics.observe("/v1/responses", 200, time.perf_counter() - t0)
        return resp


async def _stream(gw: Gateway, call: Call, rr: ResponsesRequest, rid: str, first: Any, it: Any,
                  keep: Any) -> AsyncIterator[bytes]:
    """The Responses SSE body: the SDK's event sequence, items opened as the backend's deltas arrive and
    closed in order at the end; a backend failure mid-stream ends it with ``response.failed``."""
    seq = iter(range(1 << 62))
    eid = call.record.event_ids[0]
    model, started, echo = rr.chat.model, call.record.started, rr.echo
    yield _sse(seq, "response.created", {"response": response_object(rid, started, model, echo,
                                                                      status="in_progress", output=[])})
    yield _sse(seq, "response.in_progress", {"response": response_object(rid, started, model, echo,
                                                                          status="in_progress", output=[])})
    items: list[dict[str, Any]] = []  # open output items, in output order
    text_at: int | None = None
    calls_at: dict[int, int] = {}  # the backend's tool-call index → output index
    recorded = False
    try:
        async with contextlib.aclosing(gw.deltas(call, first, it)) as pieces:
            async for d in pieces:
                if d.text:
                    if text_at is None:
                        text_at = len(items)
                        items.append(_message_item("msg_" + eid, "", status="in_progress"))
                        yield _sse(seq, "response.output_item.added", {"output_index": text_at,
                                                                       "item": {**items[text_at], "content": []}})
                        yield _sse(seq, "response.content_part.added", {
                            "item_id": "msg_" + eid, "output_index": text_at, "content_index": 0,
                            "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}})
                    items[text_at]["content"][0]["text"] += d.text
                    yield _sse(seq, "response.output_text.delta", {"item_id": "msg_" + eid, "output_index": text_at,
                                                                   "content_index": 0, "delta": d.text,
                                                                   "logprobs": []})
                for t in d.tool_calls or ():
                    at = calls_at.get(t.index)
                    if at is None:
                        at = calls_at[t.index] = len(items)
                        cid = t.id or f"call_{eid}_{t.index}"
                        items.append(_call_item(cid, t.name or "", "", status="in_progress"))
                        yield _sse(seq, "response.output_item.added", {"output_index": at, "item": dict(items[at])})
                    if t.arguments:
                        items[at]["arguments"] += t.arguments
                        yield _sse(seq, "response.function_call_arguments.delta", {
                            "item_id": items[at]["id"], "output_index": at, "delta": t.arguments})
    except BackendError as exc:
        error = {"code": "server_error", "message": exc.message}
        yield _sse(seq, "response.failed", {"response": response_object(
            rid, started, model, echo, status="failed", output=items, error=error)})
        return
    try:
        for at, item in enumerate(items):
            item["status"] = "completed"
            if item["type"] == "message":
                part = item["content"][0]
                yield _sse(seq, "response.output_text.done", {"item_id": item["id"], "output_index": at,
                                                              "content_index": 0, "text": part["text"],
                                                              "logprobs": []})
                yield _sse(seq, "response.content_part.done", {"item_id": item["id"], "output_index": at,
                                                               "content_index": 0, "part": part})
            else:
                yield _sse(seq, "response.function_call_arguments.done", {
                    "item_id": item["id"], "output_index": at, "name": item["name"], "arguments": item["arguments"]})
            yield _sse(seq, "response.output_item.done", {"output_index": at, "item": item})
        result = call.record.result
        keep(call, rr, rid)
        status, incomplete = _status(result) if result is not None else ("completed", None)
        if gw.acks is not None:  # --ack-after-durable: the stream ends once its record is durable
            recorded = True
            await gw.record_durably(call)
        yield _sse(seq, "response.completed" if status == "completed" else "response.incomplete", {
            "response": response_object(rid, started, model, echo, status=status, output=items,
                                        usage=_usage(result), incomplete=incomplete)})
    finally:
        if not recorded:
            gw.record(call)


async def _relay(gw: Gateway, call: Call, rr: ResponsesRequest, rid: str, first: Any, it: Any,
                 keep: Any) -> AsyncIterator[bytes]:
    """A passed-through Responses stream: the upstream's events as they arrive (the gateway's response
    id, the client's model and tool names). The response is kept for ``previous_response_id`` before
    its last event, which under ``--ack-after-durable`` also waits for the record; an upstream failure
    mid-stream ends it with ``response.failed``."""
    recorded = False
    upstream_id: str | None = None
    last: RelayedEvent | None = None
    seq = 0
    try:
        async with contextlib.aclosing(gw.deltas(call, first, it)) as events:
            async for ev in events:
                if isinstance(ev.data.get("response"), dict) and upstream_id is None:
                    upstream_id = str(ev.data["response"].get("id") or "") or None
                seq = int(ev.data.get("sequence_number", seq) or 0) + 1
                if (ev.data.get("type") or ev.event) in ("response.completed", "response.incomplete"):
                    last = ev
                    continue
                yield _relayed_event(ev, rid, rr, call.applied)
    except BackendError as exc:
        failed = response_object(rid, call.record.started, rr.chat.model, rr.echo, status="failed", output=[],
                                 error={"code": "server_error", "message": exc.message})
        yield _sse(iter([seq]), "response.failed", {"response": failed})  # deltas() recorded the call
        return
    try:
        keep(call, rr, rid, upstream_id)
        if gw.acks is not None:
            recorded = True
            await gw.record_durably(call)
        if last is not None:
            yield _relayed_event(last, rid, rr, call.applied)
    finally:
        if not recorded:
            gw.record(call)
