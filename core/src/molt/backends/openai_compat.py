"""The ``openai`` backend: any OpenAI-compatible upstream (a hosted model, another gateway, a local
server), over pooled keep-alive HTTP/1.1 connections (:mod:`molt.backends.http`).

It passes requests through and reads answers back; it cannot give token ids (the upstream does not
expose them) nor load adapters. Upstream failures map onto Molt's backend errors: a refused or
broken connection or a 5xx is ``BackendUnavailable`` (the gateway answers 502), a timeout is
``BackendTimeout`` (504), a stream cut short is ``BackendStreamError``, and the upstream's own 400 /
404 / 413 come back as the matching ``GatewayError``.

Example::

    backend = OpenAIBackend(base_url="https://api.example.com/v1", api_key=os.environ["UPSTREAM_KEY"],
                            model="gpt-x")
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import httpx
import orjson

from molt.backends import openai_wire as wire
from molt.backends.base import (
    BaseBackend,
    Capabilities,
    ChatRequest,
    CompletionRequest,
    Result,
    StreamItem,
)
from molt.backends.http import HTTPPool, iter_lines
from molt.errors import (
    BackendStreamError,
    BackendTimeout,
    BackendUnavailable,
    InvalidRequest,
    ModelNotFound,
    RequestTooLarge,
)

__all__ = ["OpenAIBackend"]


class OpenAIBackend(BaseBackend):
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
    capabilities = Capabilities(token_ids=False, logprobs=True, streaming=True, tools=True, lora=False)

    def __init__(self, name: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 model: str | None = None, timeout_s: float = 120.0, connect_timeout_s: float = 5.0,
                 max_connections: int = 256):
        base_url = base_url or os.environ.get("MOLT_UPSTREAM_BASE_URL")
        if not base_url:
            raise ValueError("The openai backend needs base_url (or $MOLT_UPSTREAM_BASE_URL), e.g. "
                             "'http://127.0.0.1:8001/v1'.")
        super().__init__(name, model=model or "default")
        self.base_url = base_url.rstrip("/")
        api_key = api_key if api_key is not None else os.environ.get("MOLT_UPSTREAM_API_KEY")
        headers = {"content-type": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self.timeout_s = timeout_s
        self._pool = HTTPPool(self.base_url, {k: v for k, v in headers.items() if k != "content-type"},
                             max_connections=max_connections)
        # httpx for the occasional calls (models, health, adapters); the pool for inference.
        self._client = httpx.AsyncClient(
            base_url=self.base_url, headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    # ------------------------------------------------------------------ transport

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            async with asyncio.timeout(self.timeout_s):
                resp = await self._pool.request("POST", path, orjson.dumps(body))
        except TimeoutError as exc:
            raise BackendTimeout(f"The upstream {self.base_url} did not answer within {self.timeout_s:g} s.",
                                 backend=self.name) from exc
        except (OSError, asyncio.IncompleteReadError) as exc:
            raise BackendUnavailable(f"The upstream {self.base_url} is unreachable: {exc!r}. Check that it "
                                     f"is running.", backend=self.name) from exc
        if resp.status >= 400:
            self._raise_for(resp.status, resp.body)
        try:
            out: dict[str, Any] = orjson.loads(resp.body)
        except orjson.JSONDecodeError as exc:
            raise BackendUnavailable(f"The upstream {self.base_url} answered with invalid JSON.",
                                     backend=self.name) from exc
        return out

    def _raise_for(self, status: int, content: bytes) -> None:
        try:
            detail = orjson.loads(content)["error"]["message"]
        except Exception:
            detail = content[:300].decode(errors="replace")
        msg = f"The upstream {self.base_url} answered {status}: {detail}"
        if status == 400 or status == 422:
            raise InvalidRequest(msg)
        if status == 404:
            raise ModelNotFound(msg)
        if status == 413:
            raise RequestTooLarge(msg)
        if status in (408, 504):
            raise BackendTimeout(msg, backend=self.name)
        raise BackendUnavailable(msg, backend=self.name)

    async def _stream(self, path: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """SSE chunks of a streamed answer. Only connecting and the response head are timed here;
        the gateway bounds the wait for each chunk."""
        cm = self._pool.stream("POST", path, orjson.dumps(body))
        try:
            async with asyncio.timeout(self.timeout_s):
                status, _, pieces = await cm.__aenter__()
        except TimeoutError as exc:
            raise BackendTimeout(f"The upstream {self.base_url} did not start answering within "
                                 f"{self.timeout_s:g} s.", backend=self.name) from exc
        except (OSError, asyncio.IncompleteReadError) as exc:
            raise BackendUnavailable(f"The upstream {self.base_url} is unreachable: {exc!r}.",
                                     backend=self.name) from exc
        try:
            if status >= 400:
                self._raise_for(status, b"".join([p async for p in pieces]))
            async for line in iter_lines(pieces):
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    return
                chunk = orjson.loads(data)
                if isinstance(chunk, dict) and "error" in chunk:
                    err = chunk["error"]
                    raise BackendStreamError(
                        f"The upstream {self.base_url} failed mid-stream: "
                        f"{err.get('message', err) if isinstance(err, dict) else err}", backend=self.name)
                yield chunk
            raise BackendStreamError(f"The upstream {self.base_url} closed the stream without [DONE].",
                                     backend=self.name)
        except (OSError, asyncio.IncompleteReadError) as exc:
            raise BackendStreamError(f"The upstream {self.base_url} connection broke mid-stream: {exc!r}.",
                                     backend=self.name) from exc
        except orjson.JSONDecodeError as exc:
            raise BackendStreamError(f"The upstream {self.base_url} sent a malformed chunk.",
                                     backend=self.name) from exc
        finally:
            await cm.__aexit__(None, None, None)

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

    async def aclose(self) -> None:
        """Close the connection pools."""
        await self._pool.aclose()
        await self._client.aclose()
