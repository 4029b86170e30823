"""Chat messages in the shapes the vendors write them, read into ATDP :class:`~molt.atdp.Message` lists.

One reader for every importer: OpenAI-style dicts (``role``/``content``/``tool_calls``), LangChain's
serialized messages (``{"lc": 1, "kwargs": {"type": "human", …}}`` or ``{"type": "human",
"content": …}``), and the GenAI semantic conventions' typed parts (``{"role", "parts": [...]}``).
Anything else is not a message list (``None``): the caller keeps it as data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import ValidationError

from molt.atdp.models import Message, ToolCallRequest

__all__ = ["as_messages", "tool_calls_of"]

_ROLES = {"human": "user", "user": "user", "ai": "assistant", "assistant": "assistant", "system": "system",
          "developer": "developer", "tool": "tool", "function": "tool", "HumanMessage": "user",
          "AIMessage": "assistant", "SystemMessage": "system", "ToolMessage": "tool", "AIMessageChunk": "assistant"}


def _args(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return orjson.loads(v)
        except orjson.JSONDecodeError:
            return v
    return v


def tool_calls_of(msg: Mapping[str, Any]) -> list[ToolCallRequest]:
    """The tool calls an assistant message asked for (OpenAI, LangChain or GenAI-parts form)."""
    out: list[ToolCallRequest] = []
    calls = msg.get("tool_calls") or (msg.get("additional_kwargs") or {}).get("tool_calls") or []
    for tc in calls if isinstance(calls, list) else []:
        if not isinstance(tc, Mapping):
            continue
        fn: Mapping[str, Any] = tc["function"] if isinstance(tc.get("function"), Mapping) else tc
        name = fn.get("name")
        if name:
            args = _args(fn.get("arguments", fn.get("args")))  # OpenAI's JSON text, LangChain's args dict
            out.append(ToolCallRequest(id=tc.get("id"), name=str(name), arguments=args))
    for part in msg.get("parts") or []:
        if isinstance(part, Mapping) and part.get("type") == "tool_call" and part.get("name"):
            out.append(ToolCallRequest(id=part.get("id"), name=str(part["name"]),
                                       arguments=_args(part.get("arguments"))))
    return out


def _one(raw: Any) -> Message | None:
    if not isinstance(raw, Mapping):
        return None
    if raw.get("lc") == 1 and isinstance(raw.get("kwargs"), Mapping):  # LangChain serialized
        kind = (raw.get("id") or [""])[-1]
        raw = {**raw["kwargs"], "type": raw["kwargs"].get("type") or kind}
    role = _ROLES.get(str(raw.get("role") or raw.get("type") or ""))
    if role is None:
        return None
    content, call_id = raw.get("content"), None
    if "parts" in raw and content is None:  # GenAI conventions
        texts, response = [], None
        for p in raw.get("parts") or []:
            if not isinstance(p, Mapping):
                continue
            if p.get("type") == "text":
                texts.append(str(p.get("content", "")))
            elif p.get("type") == "tool_call_response":
                response, call_id = p.get("response"), p.get("id")
        if response is not None:
            role = "tool"
            content = response if isinstance(response, str) else orjson.dumps(response).decode()
        else:
            content = "".join(texts) if texts else None
    if content is not None and not isinstance(content, str | list):
        content = orjson.dumps(content).decode()
    calls = tool_calls_of(raw) if role == "assistant" else []
    try:
        return Message(role=role, content=content, name=raw.get("name") if isinstance(raw.get("name"), str) else None,
                       tool_call_id=raw.get("tool_call_id") or (call_id if "parts" in raw and role == "tool" else None),
                       tool_calls=calls or None)
    except ValidationError:
        return None


def as_messages(raw: Any) -> list[Message] | None:
    """``raw`` as a message list, or ``None`` when it is not one (every item must read as a message).

    Accepts a list of messages, a list holding one such list (LangChain's batched ``messages``), a
    mapping with ``messages``, or a JSON string of any of these.
    """
    if isinstance(raw, str) and raw[:1] in ("[", "{"):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
    if isinstance(raw, Mapping) and "messages" in raw:
        raw = raw["messages"]
    if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], list):
        raw = raw[0]
    if not isinstance(raw, list) or not raw:
        return None
    out = []
    for item in raw:
        m = _one(item)
        if m is None:
            return None
        out.append(m)
    return out
