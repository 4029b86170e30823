"""The OTLP/HTTP trace endpoint as an ASGI app: ``POST /v1/traces`` → :class:`~molt.capture.otlp.OtlpIngest`.

Serve it on its own (``uvicorn``), or add its route to another Starlette/FastAPI app::

    from molt.capture.otlp import OtlpIngest
    from molt.capture.otlp_app import create_app, otlp_routes

    app = create_app(OtlpIngest(recorder))           # standalone: http://host:port/v1/traces
    gateway.router.routes.extend(otlp_routes(ingest, authenticate=...))  # or inside an existing app

Exporters then need only ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://host:port/v1/traces``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from molt.capture.otlp import MAX_BODY_BYTES, OtlpIngest

__all__ = ["Authenticate", "create_app", "otlp_routes"]

#: ``await authenticate(request)``: the caller's tenant id (``None``: no tenant), or a Response to
#: answer instead (a 401, say) when the caller may not export.
Authenticate = Callable[[Request], Awaitable["str | Response | None"]]


def otlp_routes(
    ingest: OtlpIngest,
    *,
    path: str = "/v1/traces",
    max_body_bytes: int = MAX_BODY_BYTES,
    authenticate: Authenticate | None = None,
) -> list[Route]:
    """The ``POST`` route serving OTLP/HTTP trace exports into ``ingest`` (protobuf or JSON).

    ``authenticate`` (optional) runs first: it names the caller's tenant, stamped on every event of
    the export, or returns the Response to send instead.
    """

    async def export(request: Request) -> Response:
        tenant: str | None = None
        if authenticate is not None:
            verdict = await authenticate(request)
            if isinstance(verdict, Response):
                return verdict
            tenant = verdict
        if int(request.headers.get("content-length") or 0) > max_body_bytes:
            return Response(status_code=413, content=b"request body too large")
        body = await request.body()
        # Decoding and mapping are CPU work: keep them off the event loop.
        status, content, ctype = await run_in_threadpool(
            ingest.handle_http,
            body,
            request.headers.get("content-type"),
            request.headers.get("content-encoding"),
            max_body_bytes=max_body_bytes,
            tenant_id=tenant,
            # the agent of spans that name none, as the gateway's model calls read it
            agent_id=request.headers.get("x-molt-agent") or None,
        )
        return Response(status_code=status, content=content, media_type=ctype)

    return [Route(path, export, methods=["POST"], name="otlp_traces")]


def create_app(ingest: OtlpIngest | None = None, *, recorder: Any = None, **route_options: Any) -> Starlette:
    """A Starlette app with only the OTLP trace route (``ingest`` defaults to one over ``recorder``)."""
    return Starlette(routes=otlp_routes(ingest or OtlpIngest(recorder), **route_options))
