"""The ``anthropic`` backend: an Anthropic-compatible upstream (the Anthropic API, or a server that
speaks its Messages API), over the same pooled transport as the ``openai`` backend
(:mod:`molt.backends.upstream`).

``/v1/messages`` requests pass through (``passthrough = {"messages"}``): the gateway relays the
client's body to the upstream's ``/messages`` as it is, with the routed version's harness applied,
and relays the answer — streamed event by event — while recording what it means. Chat Completions
and Responses requests are translated: the chat request becomes a Messages request (system text,
content blocks, ``tool_use`` / ``tool_result`` blocks, tools and ``tool_choice``) and the answer comes
back as a chat result, so an OpenAI-speaking agent can use an Anthropic upstream through the gateway.
A translated request without ``max_tokens`` asks for ``max_tokens`` (default 4,096): the Messages
API requires one.

The key goes in ``x-api-key`` (default ``$MOLT_UPSTREAM_API_KEY``), with ``anthropic-version``.

Example::

    backend = AnthropicBackend(base_url="https://api.anthropic.com/v1", api_key=os.environ["UPSTREAM_KEY"],
                               model="claude-sonnet-4-5")
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

import httpx
import orjson

from molt.backends.base import (
    BackendCapabilities,
    ChatRequest,
    Choice,
    CompletionRequest,
    Delta,
    Result,
    StreamEnd,
    StreamItem,
    TokenCounts,
    ToolCallDelta,
    ToolCallOut,
)
from molt.backends.chat_format import text_content
from molt.backends.upstream import UpstreamBackend
from molt.errors import BackendStreamError, InvalidRequest

__all__ = ["ANTHROPIC_VERSION", "AnthropicBackend", "MessagesStreamParser", "messages_request_body",
           "parse_message"]

#: The ``anthropic-version`` header sent upstream.
ANTHROPIC_VERSION = "2023-06-01"
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length",
           "pause_turn": "stop", "refusal": "stop"}


# --------------------------------------------------------------------------------- chat → Messages


def _image_block(part: dict[str, Any]) -> dict[str, Any]:
    url = str((part.get("image_url") or {}).get("url", ""))
    if url.startswith("data:") and ";base64," in url:
        media, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _blocks(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    out = []
    for p in content:
        if isinstance(p, dict) and p.get("type") == "image_url":
            out.append(_image_block(p))
        elif isinstance(p, dict) and isinstance(p.get("text"), str):
            out.append({"type": "text", "text": p["text"]})
    return out


def _arguments(text: str) -> dict[str, Any]:
    try:
        args = orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return {"input": text}
    return args if isinstance(args, dict) else {"input": args}


def _tool_choice(choice: Any) -> dict[str, Any] | None:
    if choice in (None, "auto"):
        return None if choice is None else {"type": "auto"}
    if choice == "none":
        return {"type": "none"}
    if choice == "required":
        return {"type": "any"}
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        return {"type": "tool", "name": choice["function"].get("name")}
    raise InvalidRequest(f"tool_choice {choice!r} has no Anthropic Messages equivalent.", param="tool_choice")


def messages_request_body(req: ChatRequest, *, max_tokens: int = 4096) -> dict[str, Any]:
    """The Messages request a chat request means: system and developer messages as ``system``, tool
    calls as ``tool_use`` blocks, tool messages as ``tool_result`` blocks of the next user turn
    (consecutive turns of one role merged, as the API wants them alternating)."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})

    for m in req.messages:
        role = m.get("role")
        if role in ("system", "developer"):
            system.append(text_content(m.get("content")))
        elif role in ("tool", "function"):
            add("user", [{"type": "tool_result", "tool_use_id": str(m.get("tool_call_id") or ""),
                          "content": text_content(m.get("content"))}])
        elif role == "assistant":
            blocks = _blocks(m.get("content"))
            for c in m.get("tool_calls") or ():
                fn = c.get("function") or {}
                blocks.append({"type": "tool_use", "id": str(c.get("id") or ""), "name": str(fn.get("name") or ""),
                               "input": _arguments(str(fn.get("arguments") or "{}"))})
            add("assistant", blocks)
        else:
            add("user", _blocks(m.get("content")) or [{"type": "text", "text": ""}])
    body: dict[str, Any] = {"model": req.model, "max_tokens": req.max_tokens or max_tokens, "messages": turns}
    if system:
        body["system"] = "\n\n".join(s for s in system if s)
    if req.tools:
        body["tools"] = [{"name": fn.get("name"), "input_schema": fn.get("parameters") or {"type": "object"},
                          **({"description": fn["description"]} if fn.get("description") else {})}
                         for fn in (t.get("function") or {} for t in req.tools)]
    choice = _tool_choice(req.tool_choice)
    if choice is not None:
        body["tool_choice"] = choice
    if req.stop:
        body["stop_sequences"] = list(req.stop)
    for key in ("temperature", "top_p"):
        if getattr(req, key) is not None:
            body[key] = getattr(req, key)
    return body


# --------------------------------------------------------------------------------- Messages → chat


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _usage(u: Any) -> TokenCounts | None:
    if not isinstance(u, dict):
        return None
    return TokenCounts(prompt_tokens=int(u.get("input_tokens") or 0),
                       completion_tokens=int(u.get("output_tokens") or 0))


def parse_message(body: dict[str, Any]) -> Result:
    """A :class:`Result` from an Anthropic ``message`` object: its text blocks as the text, its
    ``tool_use`` blocks as tool calls (thinking blocks carry no answer)."""
    text: list[str] = []
    calls: list[ToolCallOut] = []
    for b in body.get("content") or []:
        if not isinstance(b, dict):
            continue
        if b.get("type") == "text":
            text.append(str(b.get("text", "")))
        elif b.get("type") == "tool_use":
            calls.append(ToolCallOut(id=str(b.get("id") or ""), name=str(b.get("name") or ""),
                                     arguments=orjson.dumps(b.get("input") or {}).decode()))
    finish = "tool_calls" if calls else _FINISH.get(str(body.get("stop_reason")), "stop")
    return Result(choices=[Choice(index=0, text="".join(text) if text else None, tool_calls=calls or None,
                                  finish_reason=finish)],
                  model=str(body.get("model", "")), usage=_usage(body.get("usage")))


class MessagesStreamParser:
    """Stream items from a Messages API event stream, one event at a time: text deltas, tool calls
    (opened by ``content_block_start``, arguments by ``input_json_delta``), and the end
    (``message_stop``) with the stop reason and usage. An ``error`` event raises
    :class:`~molt.errors.BackendStreamError`. ``who`` names the upstream in messages."""

    def __init__(self, who: str, backend: str | None = None):
        self.who, self.backend = who, backend
        self._tools: dict[int, int] = {}  # content block index → tool-call index
        self._model = ""
        self._input = 0
        self._output = 0
        self._finish = "stop"

    def feed(self, event: str | None, data: dict[str, Any]) -> tuple[list[StreamItem], bool]:
        """``(items, whether this was the stream's last event)`` for one event."""
        typ = data.get("type") or event
        if typ == "content_block_delta":
            d = _obj(data.get("delta"))
            if d.get("type") == "text_delta" and isinstance(d.get("text"), str):
                return [Delta(text=d["text"])], False
            k = self._tools.get(int(data.get("index", -1)))
            if d.get("type") == "input_json_delta" and k is not None and d.get("partial_json"):
                return [Delta(tool_calls=[ToolCallDelta(index=k, arguments=str(d["partial_json"]))])], False
            return [], False
        if typ == "content_block_start":
            b = _obj(data.get("content_block"))
            if b.get("type") == "tool_use":
                k = self._tools[int(data.get("index", len(self._tools)))] = len(self._tools)
                given = b.get("input")
                args = orjson.dumps(given).decode() if given else ""
                return [Delta(tool_calls=[ToolCallDelta(index=k, id=str(b.get("id") or ""),
                                                        name=str(b.get("name") or ""), arguments=args)])], False
            if b.get("type") == "text" and b.get("text"):
                return [Delta(text=str(b["text"]))], False
            return [], False
        if typ == "message_start":
            msg = _obj(data.get("message"))
            self._model = str(msg.get("model", ""))
            u = _usage(msg.get("usage"))
            if u is not None:
                self._input, self._output = u.prompt_tokens, u.completion_tokens
            return [], False
        if typ == "message_delta":
            d = _obj(data.get("delta"))
            if d.get("stop_reason"):
                self._finish = _FINISH.get(str(d["stop_reason"]), "stop")
            counts = _obj(data.get("usage"))
            self._output = int(counts.get("output_tokens") or self._output)
            self._input = int(counts.get("input_tokens") or self._input)
            return [], False
        if typ == "message_stop":
            finish = "tool_calls" if self._tools else self._finish
            return [Delta(finish_reason=finish),
                    StreamEnd(model=self._model, usage=TokenCounts(self._input, self._output))], True
        if typ == "error":
            err = _obj(data.get("error")) or data
            raise BackendStreamError(f"{self.who} failed mid-stream: {err.get('message', err)}", backend=self.backend)
        return [], False


# --------------------------------------------------------------------------------- the backend


class AnthropicBackend(UpstreamBackend):
    """An Anthropic-compatible upstream.

    Args:
        base_url: the upstream's API root, including ``/v1`` (default ``$MOLT_UPSTREAM_BASE_URL``).
        api_key: sent as ``x-api-key`` (default ``$MOLT_UPSTREAM_API_KEY``; none if unset).
        model: the default model name (used when a policy version names none).
        max_tokens: asked for by a translated request that sets none (default 4,096).
        timeout_s, connect_timeout_s, max_connections: as for the ``openai`` backend.
    """

    kind: ClassVar[str] = "anthropic"
    api: ClassVar[str] = "anthropic"
    capabilities = BackendCapabilities(token_ids=False, logprobs=False, streaming=True, tools=True, lora=False)
    passthrough = frozenset({"messages"})

    def __init__(self, name: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 model: str | None = None, max_tokens: int = 4096, timeout_s: float = 120.0,
                 connect_timeout_s: float = 5.0, max_connections: int = 256):
        base_url = base_url or os.environ.get("MOLT_UPSTREAM_BASE_URL")
        if not base_url:
            raise ValueError("The anthropic backend needs base_url (or $MOLT_UPSTREAM_BASE_URL), e.g. "
                             "'https://api.anthropic.com/v1'.")
        api_key = api_key if api_key is not None else os.environ.get("MOLT_UPSTREAM_API_KEY")
        headers = {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": api_key} if api_key else {})}
        super().__init__(name, base_url=base_url, headers=headers, model=model, timeout_s=timeout_s,
                         connect_timeout_s=connect_timeout_s, max_connections=max_connections)
        self.max_tokens = max_tokens

    async def chat(self, request: ChatRequest) -> Result:
        """Translate the chat request to ``/messages`` and its answer back."""
        return (await self.relay("messages", messages_request_body(request, max_tokens=self.max_tokens))).result

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        """Translate the chat request to ``/messages`` with ``stream: true``; its events as stream items."""
        async for event in self.relay_stream("messages", messages_request_body(request, max_tokens=self.max_tokens)):
            for item in event.items:
                yield item

    async def complete(self, request: CompletionRequest) -> Result:
        """The Messages API has no text completions."""
        raise InvalidRequest(f"The anthropic backend {self.name!r} serves chat and messages requests; the Messages "
                             "API has no legacy completions (use /v1/chat/completions).", param="prompt")

    async def stream_complete(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        """See :meth:`complete`."""
        await self.complete(request)
        yield StreamEnd(model=request.model)  # pragma: no cover (complete raises)

    async def count_tokens(self, body: dict[str, Any]) -> int:
        """The upstream's own count of a Messages request's input tokens (``/messages/count_tokens``)."""
        out = await self._post("/messages/count_tokens", body)
        return int(out.get("input_tokens") or 0)

    def _relayed_result(self, api: str, body: dict[str, Any]) -> Result:
        return parse_message(body)

    def _relay_parser(self, api: str) -> Callable[[str | None, dict[str, Any]], tuple[list[StreamItem], bool]]:
        return MessagesStreamParser(f"The upstream {self.base_url}", self.name).feed

    async def health(self) -> bool:
        """Whether ``/models`` answers 200 within 2 s."""
        try:
            resp = await self._client.get("/models", timeout=2.0)
        except httpx.HTTPError:
            return False
        return resp.status_code == 200
