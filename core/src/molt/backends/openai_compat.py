"""The ``openai`` backend: any OpenAI-compatible upstream (a hosted model, another gateway, a local
server), over pooled keep-alive HTTP/1.1 connections (:mod:`molt.backends.upstream`).

It passes requests through and reads answers back; it cannot give token ids (the upstream does not
expose them) nor load adapters. With ``passthrough=("responses",)`` (``molt serve --passthrough
responses``) the upstream serves the Responses API too, and the gateway relays ``/v1/responses``
requests to its ``/responses`` as they are (harness applied) instead of translating them to chat.
Upstream failures map onto Molt's backend errors (:class:`~molt.backends.upstream.UpstreamBackend`).

Example::

    backend = OpenAIBackend(base_url="https://api.example.com/v1", api_key=os.environ["UPSTREAM_KEY"],
                            model="gpt-x")
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, ClassVar

import httpx
import orjson

from molt.backends import openai_wire as wire
from molt.backends.base import (
    BackendCapabilities,
    ChatRequest,
    CompletionRequest,
    Result,
    StreamItem,
)
from molt.backends.upstream import UpstreamBackend
from molt.errors import BackendStreamError

__all__ = ["OpenAIBackend"]


class OpenAIBackend(UpstreamBackend):
    """An OpenAI-compatible upstream.

    Args:
        base_url: the upstream's API root, including ``/v1`` (default ``$MOLT_UPSTREAM_BASE_URL``).
        api_key: sent as ``Authorization: Bearer`` (default ``$MOLT_UPSTREAM_API_KEY``; none if unset).
        model: the default model name (used when a policy version names none).
        timeout_s: total time allowed for one non-streamed call, and between two streamed chunks
            (default 120 s).
        connect_timeout_s: time allowed to connect (default 5 s).
        max_connections: pooled connections to the upstream (default 256).
    """

    kind: ClassVar[str] = "openai"
    capabilities = BackendCapabilities(token_ids=False, logprobs=True, streaming=True, tools=True, lora=False)

    def __init__(self, name: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 model: str | None = None, timeout_s: float = 120.0, connect_timeout_s: float = 5.0,
                 max_connections: int = 256, passthrough: Iterable[str] = ()):
        base_url = base_url or os.environ.get("MOLT_UPSTREAM_BASE_URL")
        if not base_url:
            raise ValueError("The openai backend needs base_url (or $MOLT_UPSTREAM_BASE_URL), e.g. "
                             "'http://127.0.0.1:8001/v1'.")
        api_key = api_key if api_key is not None else os.environ.get("MOLT_UPSTREAM_API_KEY")
        super().__init__(name, base_url=base_url, headers={"authorization": f"Bearer {api_key}"} if api_key else {},
                         model=model, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s,
                         max_connections=max_connections)
        apis = frozenset(passthrough)
        if not apis <= {"responses"}:
            raise ValueError(f"The openai backend passes through only 'responses' (the Responses API), not "
                             f"{sorted(apis - {'responses'})}.")
        self.passthrough = apis

    async def _stream(self, path: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """SSE chunks of a streamed chat or completions answer, up to ``[DONE]``."""
        async for _, data in self._events(path, body):
            if data == b"[DONE]":
                return
            chunk = self._json(data)
            if isinstance(chunk, dict) and "error" in chunk:
                err = chunk["error"]
                raise BackendStreamError(
                    f"The upstream {self.base_url} failed mid-stream: "
                    f"{err.get('message', err) if isinstance(err, dict) else err}", backend=self.name)
            yield chunk
        raise BackendStreamError(f"The upstream {self.base_url} closed the stream without [DONE].",
                                 backend=self.name)

    # ------------------------------------------------------------------ the backend protocol

    async def chat(self, request: ChatRequest) -> Result:
        """Pass the request through to ``/chat/completions``."""
        return wire.parse_chat_response(await self._post("/chat/completions", wire.chat_request_body(request)))

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        """Pass the request through to ``/chat/completions`` with ``stream=true``."""
        async for chunk in self._stream("/chat/completions", wire.chat_request_body(request, stream=True)):
            for item in wire.parse_chat_chunk(chunk):
                yield item

    async def complete(self, request: CompletionRequest) -> Result:
        """Pass the request through to ``/completions``."""
        return wire.parse_completion_response(
            await self._post("/completions", wire.completion_request_body(request)))

    async def stream_complete(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        """Pass the request through to ``/completions`` with ``stream=true``."""
        async for chunk in self._stream("/completions", wire.completion_request_body(request, stream=True)):
            for item in wire.parse_completion_chunk(chunk):
                yield item

    def _relayed_result(self, api: str, body: dict[str, Any]) -> Result:
        return wire.parse_responses_response(body)

    def _relay_parser(self, api: str) -> Callable[[str | None, dict[str, Any]], tuple[list[StreamItem], bool]]:
        return wire.ResponsesStreamParser(f"The upstream {self.base_url}", self.name).feed

    async def models(self) -> list[str]:
        """The upstream's ``/models`` list (the configured model if it cannot be read)."""
        try:
            resp = await self._client.get("/models")
            return [m["id"] for m in orjson.loads(resp.content).get("data", [])]
        except Exception:
            return [self.model]

    async def health(self) -> bool:
        """Whether ``/models`` answers 200 within 2 s."""
        try:
            resp = await self._client.get("/models", timeout=2.0)
        except httpx.HTTPError:
            return False
        return resp.status_code == 200
