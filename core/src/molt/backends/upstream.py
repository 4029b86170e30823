"""What every HTTP upstream backend shares: the pooled transport (:mod:`molt.backends.http`), the
mapping of upstream failures onto Molt's backend errors, and **passthrough** — a request in a client
API that the upstream speaks itself (``"messages"``: the Anthropic Messages API, ``"responses"``: the
OpenAI Responses API) is relayed in its own wire format rather than translated to chat.

A relayed answer comes back as the upstream sent it (:class:`Relayed`, or one :class:`RelayedEvent`
per server-sent event) together with what it means as chat-path items (a :class:`Result`, or the
stream items of each event), so the gateway records it exactly as it records a chat completion.

Failures: a refused or broken connection or a 5xx is ``BackendUnavailable`` (the gateway answers
502 and may fail over), a timeout ``BackendTimeout`` (504), a stream cut short
``BackendStreamError``, and the upstream's own 400 / 404 / 413 / 422 / 429 an
:class:`~molt.errors.UpstreamRejected` carrying its status and body (a route of the same API relays
that body as it is).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx
import orjson

from molt.backends.base import BaseBackend, Result, StreamItem
from molt.backends.http import HTTPPool, iter_lines
from molt.errors import BackendError, BackendStreamError, BackendTimeout, BackendUnavailable, UpstreamRejected

__all__ = ["PASSTHROUGH_APIS", "Relayed", "RelayedEvent", "UpstreamBackend"]

#: The client APIs a backend can pass through, and the upstream path each is sent to.
PASSTHROUGH_APIS = {"messages": "/messages", "responses": "/responses"}
#: Upstream statuses that are the request's fault, relayed to the client as they are.
_REJECTED = frozenset({400, 404, 413, 422, 429})


@dataclass(slots=True)
class Relayed:
    """A non-streamed passthrough answer: the upstream's JSON as it sent it, and what it means."""

    body: dict[str, Any]
    result: Result


@dataclass(slots=True)
class RelayedEvent:
    """One server-sent event of a streamed passthrough answer (``event`` is its ``event:`` name, if any)
    and the stream items it means for the record (none for most events)."""

    event: str | None
    data: dict[str, Any]
    items: list[StreamItem] = field(default_factory=list)


class UpstreamBackend(BaseBackend):
    """A model API over HTTP. Subclasses name their wire format (:attr:`api`: ``"openai"`` or
    ``"anthropic"``, the shape of its error bodies) and implement the backend protocol on top of
    :meth:`_post` and :meth:`_events`; a passthrough API adds a parser for its answers
    (:meth:`_relayed_result`, :meth:`_relay_parser`).

    Args:
        base_url: the upstream's API root, including ``/v1``.
        headers: sent with every request (authorization, version headers).
        model: the default model name (used when a policy version names none).
        timeout_s: total time allowed for one non-streamed call; streamed, the time to the response head
            (the gateway bounds the wait for each chunk).
        connect_timeout_s: time allowed to connect (default 5 s).
        max_connections: pooled connections to the upstream (default 256).
    """

    api: ClassVar[str] = "openai"

    def __init__(self, name: str | None, *, base_url: str, headers: dict[str, str], model: str | None,
                 timeout_s: float = 120.0, connect_timeout_s: float = 5.0, max_connections: int = 256):
        super().__init__(name, model=model or "default")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._pool = HTTPPool(self.base_url, headers, max_connections=max_connections)
        # httpx for the occasional calls (models, health, adapters); the pool for inference.
        self._client = httpx.AsyncClient(
            base_url=self.base_url, headers={"content-type": "application/json", **headers},
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
        body: Any = None
        try:
            body = orjson.loads(content)
            detail = body["error"]["message"]  # the OpenAI and the Anthropic error shapes both have it
        except Exception:
            detail = content[:300].decode(errors="replace")
        msg = f"The upstream {self.base_url} answered {status}: {detail}"
        if status in _REJECTED:
            raise UpstreamRejected(msg, status=status, body=body if isinstance(body, dict) else None, api=self.api)
        if status in (408, 504):
            raise BackendTimeout(msg, backend=self.name)
        raise BackendUnavailable(msg, backend=self.name)

    async def _events(self, path: str, body: dict[str, Any]) -> AsyncIterator[tuple[str | None, bytes]]:
        """The server-sent events of a streamed answer as ``(event name, data)``, data not yet parsed.
        Only connecting and the response head are timed here; the gateway bounds the wait for each
        event. The caller decides whether the stream ended where it should."""
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
            event: str | None = None
            async for line in iter_lines(pieces):
                if line.startswith(b"event:"):
                    event = line[6:].strip().decode(errors="replace")
                elif line.startswith(b"data:"):
                    yield event, line[5:].strip()
                    event = None
        except (OSError, asyncio.IncompleteReadError) as exc:
            raise BackendStreamError(f"The upstream {self.base_url} connection broke mid-stream: {exc!r}.",
                                     backend=self.name) from exc
        finally:
            await cm.__aexit__(None, None, None)

    def _json(self, data: bytes) -> Any:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise BackendStreamError(f"The upstream {self.base_url} sent a malformed event.",
                                     backend=self.name) from exc

    # ------------------------------------------------------------------ passthrough

    def _path(self, api: str) -> str:
        if api not in self.passthrough:
            raise BackendError(f"The {self.kind} backend {self.name!r} does not pass {api!r} requests through "
                               f"(it passes: {', '.join(sorted(self.passthrough)) or 'none'}).", backend=self.name)
        return PASSTHROUGH_APIS[api]

    async def relay(self, api: str, body: dict[str, Any]) -> Relayed:
        """Send ``body`` (a request of client API ``api``, harness already applied) as it is."""
        out = await self._post(self._path(api), body)
        return Relayed(out, self._relayed_result(api, out))

    async def relay_stream(self, api: str, body: dict[str, Any]) -> AsyncIterator[RelayedEvent]:
        """Send ``body`` with ``stream: true``; each upstream event as it arrives. A stream that ends
        before its API's last event, or with an error event, raises ``BackendStreamError``."""
        path = self._path(api)
        parse = self._relay_parser(api)
        ended = False
        async for event, data in self._events(path, {**body, "stream": True}):
            if ended:
                continue
            payload = self._json(data)
            if not isinstance(payload, dict):
                raise BackendStreamError(f"The upstream {self.base_url} sent an event that is not an object.",
                                         backend=self.name)
            items, ended = parse(event, payload)
            yield RelayedEvent(event, payload, items)
        if not ended:
            raise BackendStreamError(f"The upstream {self.base_url} closed the {api} stream before its end.",
                                     backend=self.name)

    def _relayed_result(self, api: str, body: dict[str, Any]) -> Result:
        """What a passthrough answer means (subclasses of each API implement it)."""
        raise NotImplementedError

    def _relay_parser(self, api: str) -> Callable[[str | None, dict[str, Any]], tuple[list[StreamItem], bool]]:
        """A fresh parser of one passthrough stream: ``(event, data) -> (items, whether it was the last
        event)``; an upstream error event raises ``BackendStreamError``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ lifecycle

    async def aclose(self) -> None:
        """Close the connection pools."""
        await self._pool.aclose()
        await self._client.aclose()
