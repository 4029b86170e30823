"""What every route module needs from the app it is installed on: the gateway, authentication, plain
Starlette route registration, and bounded JSON request bodies."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from molt.errors import InvalidRequest, RequestTooLarge
from molt.gateway.error_responses import JSON_MEDIA_TYPE
from molt.gateway.service import Gateway
from molt.governance.access import Permission, Principal

__all__ = ["Handler", "RouteContext", "json_response", "read_json"]

M = TypeVar("M", bound=BaseModel)
Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class RouteContext:
    """The app and gateway a route module installs its routes on."""

    app: FastAPI
    gateway: Gateway

    def auth(self, request: Request, action: Permission | None = None) -> Principal:
        """The caller's principal (from ``Authorization: Bearer`` or ``x-api-key``; ``X-Molt-Tenant`` where
        the key allows it: :meth:`Gateway.authenticate`), holding ``action``."""
        h = request.headers
        p = self.gateway.authenticate(h.get("authorization"), h.get("x-api-key"), h.get("x-molt-tenant"))
        if action is not None:
            p.require(action)
        return p

    def route(self, path: str, method: str) -> Callable[[Handler], Handler]:
        """A plain Starlette route: these handlers read the request themselves, so FastAPI's
        dependency solving would only add latency."""
        def register(fn: Handler) -> Handler:
            self.app.add_route(path, fn, methods=[method])
            return fn
        return register

    async def read_model(self, request: Request, model: type[M]) -> M:
        """The request body validated as ``model`` (400 naming each invalid field)."""
        body = await read_json(request, self.gateway.config.max_body_bytes)
        try:
            return model.model_validate(body)
        except ValidationError as exc:
            errs = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())
            raise InvalidRequest(f"The request is invalid: {errs}.") from None


async def read_json(request: Request, limit: int) -> Any:
    """The request body as JSON, refusing bodies over ``limit`` bytes (413) and bad JSON (400)."""
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise InvalidRequest("The Content-Length header is not a number.")
        if int(length) > limit:
            raise RequestTooLarge(f"The request body has {int(length):,} bytes; this gateway takes at most "
                                  f"{limit:,}. Send less context or raise --max-body-bytes.")
        body = await request.body()
    else:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestTooLarge(f"The request body is over {limit:,} bytes, the most this gateway takes.")
            chunks.append(chunk)
        body = b"".join(chunks)
    if not body:
        raise InvalidRequest("The request body is empty; send a JSON object.")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc}.") from None


def json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type=JSON_MEDIA_TYPE, headers=headers)
