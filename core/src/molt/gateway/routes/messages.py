"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: the Anthropic Messages API (what Claude
Code, the Claude Agent SDK and the ``anthropic`` SDK speak) served by the chat path.

A Messages request is translated into the chat request it means — ``system`` as the system message,
``text`` blocks as content, an assistant's ``tool_use`` blocks as its tool calls, a user's
``tool_result`` blocks as tool messages (before the rest of that user turn), Anthropic tools and
``tool_choice`` in chat form — and then goes through :class:`~molt.gateway.service.Gateway` as a chat
completion does: trajectory resolution (a conversation that resends its history continues its
trajectory), routing, the version's harness, the backend, capture with token ids, governance. A reward
by the message id (``msg_<event id>``) reaches the recorded call.

The caller's key is read from ``x-api-key`` (or ``Authorization: Bearer``); ``anthropic-version``, when
sent, must be a ``YYYY-MM-DD`` date (every version is answered the same way). Errors leave in
Anthropic's shape, ``{"type": "error", "error": {"type", "message"}}``, with the status the chat path
would use, raised before anything is routed or recorded; a backend dying mid-stream ends the stream
with an ``error`` event (the partial answer is recorded with the error).

With a backend whose upstream speaks the Messages API itself (``molt serve --backend anthropic``), the
request passes through (:class:`~molt.gateway.service.Passthrough`): the client's body goes upstream
as it is — thinking blocks, ``cache_control`` and every other field included — with only what the
chat path would change: the model the routed version names, the harness's system text, its tool
rewrites (and the history's calls renamed to match). The answer, streamed event by event, comes back
as the upstream sent it but for the message id (``msg_<event id>``, so a reward by it reaches the
record), the model (the name the client asked for) and tool names restored to the client's; it is
recorded from what those events mean. The upstream's own 4xx errors are relayed as it sent them.

``count_tokens`` counts the request's prompt as the chat template renders it: exact for a byte-level
tokenizer (the stub), an estimate of ``bytes / 4`` otherwise; a Messages upstream counts it itself
(the client's body, without the harness's additions).
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from molt.backends import openai_wire as wire
from molt.backends.base import ChatRequest, Result
from molt.backends.chat_format import render_chatml, template_messages
from molt.backends.upstream import RelayedEvent
from molt.errors import BackendError, InvalidRequest, UpstreamRejected
from molt.gateway.error_responses import JSON_MEDIA_TYPE, classify
from molt.gateway.routes.context import RouteContext, read_json
from molt.gateway.service import Call, Gateway, Passthrough, passthrough_metadata
from molt.gateway.sessions import normalize_arguments
from molt.governance.access import Permission
from molt.harness import Applied

__all__ = ["anthropic_error", "install", "message_object", "parse_messages_request", "passthrough_body"]

_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}
_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def _bad(message: str, param: str | None = None) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def anthropic_error(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """The status and Anthropic-shaped body an exception leaves ``/v1/messages`` as (the status is the
    one :func:`~molt.gateway.error_responses.classify` gives every route)."""
    if isinstance(exc, UpstreamRejected) and exc.api == "anthropic" and isinstance(exc.body, dict) \
            and exc.body.get("type") == "error":
        return exc.status, exc.body  # an Anthropic upstream's own error, relayed as it is
    status, body = classify(exc)
    return status, {"type": "error", "error": {"type": _ERROR_TYPES.get(status, "api_error"),
                                               "message": body["error"]["message"]}}


# --------------------------------------------------------------------------------- request


def _text_blocks(blocks: list[Any], where: str, *, allowed: tuple[str, ...] = ("text",)) -> str:
    parts = []
    for j, b in enumerate(blocks):
        at = f"{where}[{j}]"
        if not isinstance(b, dict) or b.get("type") not in allowed:
            typ = b.get("type") if isinstance(b, dict) else None
            raise _bad(f"{at}.type {typ!r} is not a block this gateway takes here ({', '.join(allowed)}).", at)
        if not isinstance(b.get("text"), str):
            raise _bad(f"{at}.text must be a string.", f"{at}.text")
        parts.append(b["text"])
    return "".join(parts)


def _image(b: dict[str, Any], at: str) -> dict[str, Any]:
    src = b.get("source")
    if isinstance(src, dict) and src.get("type") == "base64" and isinstance(src.get("data"), str):
        url = f"data:{src.get('media_type') or 'image/png'};base64,{src['data']}"
    elif isinstance(src, dict) and src.get("type") == "url" and isinstance(src.get("url"), str):
        url = src["url"]
    else:
        raise _bad(f"{at}.source must be {{'type': 'base64', 'media_type', 'data'}} or {{'type': 'url', 'url'}}.",
                   f"{at}.source")
    return {"type": "image_url", "image_url": {"url": url}}


def _message(m: Any, i: int, passthrough: bool = False) -> list[dict[str, Any]]:
    """One Anthropic message as chat messages (a user turn with tool results: the tool messages first).
    ``passthrough``: a block of a type this gateway does not read is left out (the upstream reads it)."""
    where = f"messages[{i}]"
    if not isinstance(m, dict):
        raise _bad(f"{where} must be an object with 'role' and 'content'.", where)
    role = m.get("role")
    if role not in ("user", "assistant", "system"):
        raise _bad(f"{where}.role must be 'user', 'assistant' or 'system', got {role!r}.", f"{where}.role")
    content = m.get("content")
    if role == "system":  # a system turn within the conversation (Claude Code sends them): text only
        text = content if isinstance(content, str) else _text_blocks(content if isinstance(content, list) else [None],
                                                                       f"{where}.content")
        return [{"role": "system", "content": text}]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise _bad(f"{where}.content must be a string or a list of content blocks.", f"{where}.content")
    tools: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for j, b in enumerate(content):
        at = f"{where}.content[{j}]"
        if not isinstance(b, dict):
            raise _bad(f"{at} must be a content block object with a 'type'.", at)
        typ = b.get("type")
        if typ == "text":
            if not isinstance(b.get("text"), str):
                raise _bad(f"{at}.text must be a string.", f"{at}.text")
            parts.append({"type": "text", "text": b["text"]})
        elif typ == "image" and role == "user":
            parts.append(_image(b, at))
        elif typ == "tool_use" and role == "assistant":
            if not isinstance(b.get("id"), str) or not isinstance(b.get("name"), str) or not b["name"]:
                raise _bad(f"{at} needs a string 'id' and 'name'.", at)
            args = b.get("input", {})
            if not isinstance(args, dict):
                raise _bad(f"{at}.input must be an object.", f"{at}.input")
            calls.append({"id": b["id"], "type": "function",
                          "function": {"name": b["name"], "arguments": orjson.dumps(args).decode()}})
        elif typ == "tool_result" and role == "user":
            if not isinstance(b.get("tool_use_id"), str) or not b["tool_use_id"]:
                raise _bad(f"{at}.tool_use_id is required.", f"{at}.tool_use_id")
            out = b.get("content", "")
            if isinstance(out, list) and passthrough:  # documents, search results…: their text, if any
                out = "".join(str(r.get("text", "")) for r in out if isinstance(r, dict) and r.get("type") == "text")
            elif isinstance(out, list):
                out = _text_blocks(out, f"{at}.content", allowed=("text", "image"))  # an image result: its text
            elif not isinstance(out, str):
                raise _bad(f"{at}.content must be a string or a list of blocks.", f"{at}.content")
            if b.get("is_error") is True:
                out = "Error: " + out
            tools.append({"role": "tool", "tool_call_id": b["tool_use_id"], "content": out})
        elif typ in ("thinking", "redacted_thinking") and role == "assistant":
            continue  # a reasoning model's thinking: not part of what a chat backend is shown
        elif passthrough and isinstance(typ, str) and typ not in ("text", "image", "tool_use", "tool_result"):
            continue  # a block the upstream reads (documents, server tool results…), relayed as it is
        else:
            raise _bad(f"{at}.type {typ!r} is not a {role} content block this gateway takes (text, "
                       f"{'image, tool_result' if role == 'user' else 'tool_use, thinking'}).", f"{at}.type")
    text: str | list[dict[str, Any]] | None = parts
    if all(p["type"] == "text" for p in parts):
        text = "".join(p["text"] for p in parts) if parts else None
    out_msgs = list(tools)
    if role == "assistant":
        msg: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            msg["tool_calls"] = calls
        out_msgs.append(msg)
    elif text is not None or not tools:
        out_msgs.append({"role": "user", "content": text if text is not None else ""})
    return out_msgs


def _tools(tools: Any, passthrough: bool = False) -> list[dict[str, Any]] | None:
    """Client tools in chat form; with ``passthrough``, server tools (``web_search_…``, ``bash_…``) are
    left out of it and go upstream as they are."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise _bad("'tools' must be a list of tool objects.", "tools")
    out = []
    for i, t in enumerate(tools):
        if passthrough and isinstance(t, dict) and isinstance(t.get("type"), str) and t["type"] != "custom":
            continue
        if not isinstance(t, dict) or t.get("type") not in (None, "custom") or "input_schema" not in t:
            typ = t.get("type") if isinstance(t, dict) else None
            raise _bad(f"tools[{i}] must be a client tool {{'name', 'description', 'input_schema'}}"
                       f"{f' (server tool {typ!r} is not served here)' if typ else ''}.", f"tools[{i}]")
        fn = {"name": t.get("name"), "parameters": t["input_schema"]}
        if t.get("description") is not None:
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: Any) -> Any:
    if choice is None:
        return None
    if isinstance(choice, dict):
        typ = choice.get("type")
        if typ in ("auto", "none"):
            return typ
        if typ == "any":
            return "required"
        if typ == "tool":
            return {"type": "function", "function": {"name": choice.get("name")}}
    raise _bad("tool_choice must be {'type': 'auto' | 'any' | 'none'} or {'type': 'tool', 'name': …}.", "tool_choice")


def _chat_messages(body: dict[str, Any], passthrough: bool = False) -> list[dict[str, Any]]:
    system = body.get("system")
    msgs: list[dict[str, Any]] = []
    if isinstance(system, list):
        system = _text_blocks(system, "system")
    elif system is not None and not isinstance(system, str):
        raise _bad("'system' must be a string or a list of text blocks.", "system")
    if system:
        msgs.append({"role": "system", "content": system})
    turns = body.get("messages")
    if not isinstance(turns, list) or not turns:
        raise _bad("'messages' is required and must be a non-empty list of messages.", "messages")
    for i, m in enumerate(turns):
        msgs += _message(m, i, passthrough)
    return msgs


def parse_messages_request(body: Any, *, count_only: bool = False,
                           passthrough: bool = False) -> tuple[ChatRequest, bool]:
    """Validate a Messages body: the chat request it means, and whether it asks to stream. With
    ``passthrough`` (every backend relays the body to a Messages upstream) block types and server tools
    this gateway does not read are left out of the chat request — the record — rather than refused:
    the upstream is the judge of its own API. The structure the record needs is checked either way."""
    if not isinstance(body, dict):
        raise _bad("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model: Field required (a non-empty string).", "model")
    max_tokens = body.get("max_tokens")
    if not count_only and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise _bad("max_tokens: Field required (a positive integer).", "max_tokens")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _bad("'stream' must be true or false.", "stream")
    stop = body.get("stop_sequences")
    chat_body: dict[str, Any] = {"model": model, "messages": _chat_messages(body, passthrough),
                                 "tools": _tools(body.get("tools"), passthrough),
                                 "tool_choice": _tool_choice(body.get("tool_choice")),
                                 "max_tokens": min(max_tokens, 1 << 20) if isinstance(max_tokens, int) else None,
                                 "stop": stop or None,
                                 "temperature": body.get("temperature"), "top_p": body.get("top_p")}
    req, _ = wire.parse_chat_request({k: v for k, v in chat_body.items() if v is not None})
    return req, bool(stream)


# --------------------------------------------------------------------------------- response


def _stop_reason(result: Result) -> tuple[str, str | None]:
    c = result.choices[0]
    if c.tool_calls:
        return "tool_use", None
    return _STOP.get(c.finish_reason or "stop", "end_turn"), None


def _input(arguments: str) -> Any:
    args = normalize_arguments(arguments)
    return args if isinstance(args, dict) else {"input": args}


def message_object(mid: str, model: str, result: Result) -> dict[str, Any]:
    """A ``message`` object for ``result`` (``model`` is the name the client asked for)."""
    c = result.choices[0]
    content: list[dict[str, Any]] = []
    if c.text:
        content.append({"type": "text", "text": c.text})
    for t in c.tool_calls or ():
        content.append({"type": "tool_use", "id": t.id, "name": t.name, "input": _input(t.arguments)})
    reason, seq = _stop_reason(result)
    u = result.usage
    return {"id": mid, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": seq,
            "usage": {"input_tokens": u.prompt_tokens if u else 0, "output_tokens": u.completion_tokens if u else 0}}


# --------------------------------------------------------------------------------- passthrough


def _system_text(messages: list[dict[str, Any]]) -> str | None:
    if messages and messages[0].get("role") == "system":
        c = messages[0].get("content")
        return c if isinstance(c, str) else "".join(str(p.get("text", "")) for p in c or () if isinstance(p, dict))
    return None


def passthrough_body(body: dict[str, Any], req: ChatRequest, breq: ChatRequest,
                     applied: Applied | None) -> dict[str, Any]:
    """The client's Messages body as it goes to a Messages upstream: the routed model, and what the
    harness changed of the chat form ``req`` → ``breq`` carried over — the system text, the tools'
    rewrites and, for a renamed tool, the history's ``tool_use`` blocks; the gateway's own ``metadata``
    keys taken out. Everything else is the client's, as it sent it."""
    out = {k: v for k, v in passthrough_metadata(body).items() if k != "stream"}
    out["model"] = breq.model
    if applied is None:
        return out
    new_system = _system_text(breq.messages)
    if breq.messages is not req.messages and new_system != _system_text(req.messages) and new_system is not None:
        out["system"] = new_system
    if breq.tools is not req.tools and breq.tools and req.tools and isinstance(body.get("tools"), list):
        # the harness keeps the tools' order and may add some; server tools are not in the chat form
        rewritten = {old["function"]["name"]: new["function"] for old, new in zip(req.tools, breq.tools, strict=False)}
        forward = {name: fn["name"] for name, fn in rewritten.items() if fn["name"] != name}

        def tool(t: Any) -> Any:
            if not isinstance(t, dict) or t.get("type") not in (None, "custom") or t.get("name") not in rewritten:
                return t
            fn = rewritten[t["name"]]
            return {**t, "name": fn["name"], "input_schema": fn.get("parameters", t.get("input_schema")),
                    **({"description": fn["description"]} if fn.get("description") is not None else {})}

        added = [{"name": t["function"]["name"], "input_schema": t["function"].get("parameters") or {"type": "object"},
                  **({"description": t["function"]["description"]} if t["function"].get("description") else {})}
                 for t in breq.tools[len(req.tools):]]
        out["tools"] = [tool(t) for t in body["tools"]] + added
        if forward:
            out["messages"] = [_renamed_turn(m, forward) for m in body["messages"]]
    return out


def _renamed_turn(m: Any, forward: dict[str, str]) -> Any:
    if not isinstance(m, dict) or m.get("role") != "assistant" or not isinstance(m.get("content"), list):
        return m
    return {**m, "content": [{**b, "name": forward[b["name"]]} if isinstance(b, dict) and b.get("type") == "tool_use"
                             and b.get("name") in forward else b for b in m["content"]]}


def _restored_block(block: Any, applied: Applied | None) -> Any:
    if applied is not None and applied.tool_names and isinstance(block, dict) and block.get("type") == "tool_use" \
            and isinstance(block.get("name"), str):
        return {**block, "name": applied.client_tool_name(block["name"])}
    return block


def _relayed_message(body: dict[str, Any], mid: str, model: str, applied: Applied | None) -> dict[str, Any]:
    """The upstream's ``message`` as the client gets it: the gateway's id and the client's model and
    tool names."""
    out = {**body, "id": mid, "model": model}
    if isinstance(body.get("content"), list):
        out["content"] = [_restored_block(b, applied) for b in body["content"]]
    return out


def _relayed_event(ev: RelayedEvent, mid: str, model: str, applied: Applied | None) -> bytes:
    data = ev.data
    typ = str(data.get("type") or ev.event or "")
    if typ == "message_start" and isinstance(data.get("message"), dict):
        data = {**data, "message": _relayed_message(data["message"], mid, model, applied)}
    elif typ == "content_block_start":
        data = {**data, "content_block": _restored_block(data.get("content_block"), applied)}
    return _event(ev.event or typ, data)


def _event(typ: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + typ.encode() + b"\ndata: " + orjson.dumps({"type": typ, **payload}) + b"\n\n"


# --------------------------------------------------------------------------------- routes


def install(ctx: RouteContext) -> None:
    gw = ctx.gateway

    def fail(exc: BaseException) -> Response:
        status, body = anthropic_error(exc)
        gw.metrics.observe("/v1/messages", status, 0.0)
        return Response(orjson.dumps(body), status_code=status, media_type=JSON_MEDIA_TYPE)

    def check_version(request: Request) -> None:
        v = request.headers.get("anthropic-version")
        if v is not None and not _VERSION.match(v.strip()):
            raise _bad(f"anthropic-version: {v!r} is not a version date (YYYY-MM-DD).", "anthropic-version")

    async def record_later(call: Any) -> None:
        gw.record(call)

    @ctx.route("/v1/messages", "POST")
    async def messages(request: Request) -> Response:
        t0 = time.perf_counter()
        try:
            check_version(request)
            p = ctx.auth(request, Permission.WRITE)
            body = await read_json(request, gw.config.max_body_bytes)
            req, stream = parse_messages_request(body, passthrough=gw.passes_through("messages"))
            call = gw.begin_chat(p, req, body, request.headers)
            call.record.endpoint = "messages"
            mid = "msg_" + call.record.event_ids[0]
            relay = Passthrough("messages", lambda breq, applied: passthrough_body(body, req, breq, applied))
            if stream:
                first, it = await gw.open_stream(call, req, relay)
                gw.metrics.observe("/v1/messages", 200, time.perf_counter() - t0)
                out = (_relay(gw, call, req.model, mid, first, it) if call.passed_through
                       else _stream(gw, call, req.model, mid, first, it))
                return StreamingResponse(out, media_type="text/event-stream",
                                         headers={**call.headers, "cache-control": "no-cache"})
            result = await gw.run(call, req, relay)
        except Exception as exc:
            return fail(exc)
        gw.finish(call, result)
        later = None
        if gw.acks is not None:  # --ack-after-durable: the answer waits for its record's durability
            await gw.record_durably(call)
        else:
            later = BackgroundTask(record_later, call)
        payload = (_relayed_message(call.relayed, mid, req.model, call.applied) if call.relayed is not None
                   else message_object(mid, req.model, result))
        resp = Response(orjson.dumps(payload), media_type=JSON_MEDIA_TYPE, headers=call.headers, background=later)
        gw.metrics.observe("/v1/messages", 200, time.perf_counter() - t0)
        return resp

    @ctx.route("/v1/messages/count_tokens", "POST")
    async def count_tokens(request: Request) -> Response:
        try:
            check_version(request)
            p = ctx.auth(request, Permission.WRITE)
            body = await read_json(request, gw.config.max_body_bytes)
            relayed = gw.passes_through("messages")
            req, _ = parse_messages_request(body, count_only=True, passthrough=relayed)
            if relayed:  # the upstream counts with its own tokenizer, for the model the request is routed to
                route = gw.router.route(gw.router.resolve(req.model, p.tenant_id, None), "count_tokens")
                backend: Any = gw.backends[route.backend]
                n = await backend.count_tokens({**body, "model": route.version.upstream_model or backend.model})
                return Response(orjson.dumps({"input_tokens": n}), media_type=JSON_MEDIA_TYPE)
        except Exception as exc:
            return fail(exc)
        prompt = render_chatml(template_messages(req.messages, req.tools)).encode()
        byte_level = all(getattr(b, "kind", "") == "stub" for b in gw.backends.values())
        n = len(prompt) if byte_level else math.ceil(len(prompt) / 4)
        return Response(orjson.dumps({"input_tokens": n}), media_type=JSON_MEDIA_TYPE)


async def _stream(gw: Gateway, call: Call, model: str, mid: str, first: Any, it: Any) -> AsyncIterator[bytes]:
    """The Messages SSE body: ``message_start``, one content block at a time (text, then each tool
    call, each closed before the next opens), ``message_delta`` with the stop reason, ``message_stop``."""
    yield _event("message_start", {"message": {
        "id": mid, "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": None,
        "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}})
    index = -1
    open_kind: tuple[str, int] | None = None  # ("text", 0) or ("tool", backend tool index)
    seen_tools: set[int] = set()
    recorded = False

    def close() -> bytes:
        nonlocal open_kind
        open_kind = None
        return _event("content_block_stop", {"index": index})

    try:
        async with contextlib.aclosing(gw.deltas(call, first, it)) as pieces:
            async for d in pieces:
                if d.text:
                    if open_kind != ("text", 0):
                        if open_kind is not None:
                            yield close()
                        index += 1
                        open_kind = ("text", 0)
                        yield _event("content_block_start", {"index": index,
                                                             "content_block": {"type": "text", "text": ""}})
                    yield _event("content_block_delta", {"index": index,
                                                         "delta": {"type": "text_delta", "text": d.text}})
                for t in d.tool_calls or ():
                    if open_kind != ("tool", t.index):
                        if t.index in seen_tools:
                            continue  # a late piece of a closed block: the recorded answer has it
                        if open_kind is not None:
                            yield close()
                        index += 1
                        open_kind = ("tool", t.index)
                        seen_tools.add(t.index)
                        yield _event("content_block_start", {"index": index, "content_block": {
                            "type": "tool_use", "id": t.id or f"toolu_{mid}_{t.index}", "name": t.name or "",
                            "input": {}}})
                    if t.arguments:
                        yield _event("content_block_delta", {"index": index, "delta": {
                            "type": "input_json_delta", "partial_json": t.arguments}})
    except BackendError as exc:
        _, body = anthropic_error(exc)
        yield _event("error", {"error": body["error"]})
        return
    try:
        if open_kind is not None:
            yield close()
        result = call.record.result
        reason = _stop_reason(result)[0] if result is not None and result.choices else "end_turn"
        usage = result.usage if result is not None else None
        yield _event("message_delta", {"delta": {"stop_reason": reason, "stop_sequence": None},
                                       "usage": {"input_tokens": usage.prompt_tokens if usage else 0,
                                                 "output_tokens": usage.completion_tokens if usage else 0}})
        if gw.acks is not None:  # --ack-after-durable: the stream ends once its record is durable
            recorded = True
            await gw.record_durably(call)
        yield _event("message_stop", {})
    finally:
        if not recorded:
            gw.record(call)



async def _relay(gw: Gateway, call: Call, model: str, mid: str, first: Any, it: Any) -> AsyncIterator[bytes]:
    """A passed-through Messages stream: the upstream's events as they arrive (id, model and tool
    names as the client knows them); ``message_stop`` is held until the record is durable under
    ``--ack-after-durable``; an upstream failure mid-stream ends it with an ``error`` event."""
    recorded = False
    last: RelayedEvent | None = None
    try:
        async with contextlib.aclosing(gw.deltas(call, first, it)) as events:
            async for ev in events:
                if (ev.data.get("type") or ev.event) == "message_stop":
                    last = ev
                    continue
                yield _relayed_event(ev, mid, model, call.applied)
    except BackendError as exc:
        _, body = anthropic_error(exc)
        yield _event("error", {"error": body["error"]})  # deltas() recorded the call with its error
        return
    try:
        if gw.acks is not None:
            recorded = True
            await gw.record_durably(call)
        if last is not None:
            yield _relayed_event(last, mid, model, call.applied)
    finally:
        if not recorded:
            gw.record(call)
