"""OTLP ingest routes (``POST /v1/traces``): a home-grown stack that emits OpenTelemetry GenAI spans joins by
pointing its OTLP/HTTP trace exporter at the gateway; the key's tenant is stamped on every event of the
export (:mod:`molt.capture.otlp_app` serves the routes)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from molt.errors import MoltError
from molt.gateway.error_responses import classify
from molt.gateway.routes.context import RouteContext, json_response
from molt.governance.access import Permission

__all__ = ["install"]


def install(ctx: RouteContext) -> None:
    """Installs nothing when the gateway has no recorder to take the events."""
    gw = ctx.gateway
    if gw.recorder is None or not hasattr(gw.recorder, "record"):
        return
    from molt.capture.otlp import OtlpIngest
    from molt.capture.otlp_app import otlp_routes

    async def otlp_tenant(request: Request) -> str | Response:
        try:
            return ctx.auth(request, Permission.WRITE).tenant_id
        except MoltError as exc:  # the same OpenAI-style error (all four fields) as every other endpoint
            status, body = classify(exc)
            return json_response(body, status=status)

    from molt.gateway.joins import CallJoins

    # events an adapter hands over (GatewayRecorder) join the trajectory of the calls this gateway served
    ingest = OtlpIngest(gw.recorder, namespace=gw.namespace, join=CallJoins(gw.sessions).join)
    ctx.app.router.routes.extend(otlp_routes(ingest, authenticate=otlp_tenant))
