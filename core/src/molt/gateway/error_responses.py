"""The gateway's HTTP errors, made in one place: every error leaves as an OpenAI-style JSON object
``{"error": {"message", "type", "param", "code"}}`` with the status its exception class maps to
(:func:`classify`), and a 404 on a path that is a route once ``/v1`` is put in front says so."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from molt.errors import (
    AuthenticationError,
    BackendError,
    GatewayError,
    GovernanceError,
    InvalidRequest,
    MoltError,
    NotFound,
    PermissionDenied,
    UpstreamRejected,
)

if TYPE_CHECKING:
    from molt.gateway.service import Gateway

__all__ = ["JSON_MEDIA_TYPE", "classify", "error_body", "install_error_handlers", "route_template"]

log = logging.getLogger("molt.gateway")

JSON_MEDIA_TYPE = "application/json"


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error object."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def classify(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """The HTTP status and OpenAI-style body an exception leaves the gateway as."""
    if isinstance(exc, AuthenticationError):
        return 401, error_body(exc.message, "invalid_request_error", "invalid_api_key")
    if isinstance(exc, PermissionDenied):
        return 403, error_body(exc.message, "permission_error", "permission_denied")
    if isinstance(exc, UpstreamRejected) and exc.api == "openai" and isinstance(exc.body, dict) \
            and isinstance(exc.body.get("error"), dict):
        return exc.status, exc.body  # an OpenAI-compatible upstream's own error, relayed as it is
    if isinstance(exc, GatewayError):
        kind = "not_found_error" if exc.status == 404 else "invalid_request_error"
        return exc.status, error_body(exc.message, kind, exc.code, exc.param)
    if isinstance(exc, BackendError):
        return exc.status, error_body(exc.message, "server_error", exc.code)
    if isinstance(exc, NotFound):
        return 404, error_body(exc.message, "not_found_error", "not_found")
    if isinstance(exc, GovernanceError | ValueError):
        return 400, error_body(str(exc), "invalid_request_error", "invalid_value")
    if isinstance(exc, MoltError):
        return 500, error_body(exc.message, "server_error", "molt_error")
    return 500, error_body("The gateway failed while serving this request; see its log.", "server_error",
                           "internal_error")


def route_template(request: Request) -> str:
    """The route a request matched, as its template (``/v1/molt/trajectories/{trajectory_id}/end``), or
    ``unmatched``: what metrics label a request by (a raw path carries ids)."""
    for r in request.app.router.routes:
        match, _ = r.matches(request.scope)
        if match != Match.NONE:
            return str(getattr(r, "path", "unmatched"))
    return "unmatched"


def _is_route(request: Request, path: str) -> bool:
    """Whether ``path`` is one of the app's routes (any method)."""
    scope = {**request.scope, "path": path}
    return any(route.matches(scope)[0] != Match.NONE for route in request.app.routes)


def install_error_handlers(app: FastAPI) -> None:
    """Every error leaves as an OpenAI-style JSON object with the right status (the one place)."""

    def respond(request: Request, exc: BaseException) -> Response:
        status, body = classify(exc)
        if status >= 500 and not isinstance(exc, BackendError):
            log.error("Unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        gw: Gateway | None = getattr(request.app.state, "gateway", None)
        if gw is not None:
            gw.metrics.observe(route_template(request), status, 0.0)
        return Response(orjson.dumps(body), status_code=status, media_type=JSON_MEDIA_TYPE)

    async def molt_error(request: Request, exc: Exception) -> Response:
        return respond(request, exc)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        msg = f"{request.method} {request.url.path} is not an endpoint of this gateway." if exc.status_code in (
            404, 405) else str(exc.detail)
        path = request.url.path
        if exc.status_code == 404 and not path.startswith("/v1/") and _is_route(request, "/v1" + path):
            # the commonest wiring mistake: a client's base URL given without /v1
            msg += f" Did you mean /v1{path}? The client's base URL ends in /v1 (http://host:port/v1)."
        return Response(orjson.dumps(error_body(msg, "invalid_request_error", code)), status_code=exc.status_code,
                        media_type=JSON_MEDIA_TYPE)

    async def validation_error(request: Request, exc: Exception) -> Response:
        return respond(request, InvalidRequest(f"The request is invalid: {exc}"))

    app.add_exception_handler(MoltError, molt_error)
    app.add_exception_handler(ValueError, molt_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, molt_error)
