"""The OpenAI-compatible FastAPI app.

=======================================  ==========================================  ============
endpoint                                 what                                        permission
=======================================  ==========================================  ============
POST /v1/chat/completions                chat, streaming, tools, n, logprobs         write
POST /v1/completions                     text or token-id prompts                    write
POST /v1/responses                       the Responses API (items, tools, stream)    write
POST /v1/messages[/count_tokens]         the Anthropic Messages API                  write
GET  /v1/models, /v1/models/{id}         public models and policy versions           any key
GET  /health                             liveness and backend health                 any key
GET  /metrics                            Prometheus text format                      read
POST /v1/molt/rewards/call               reward one call                             write
POST /v1/molt/rewards/trajectory         reward a trajectory                         write
POST /v1/molt/rewards/last-call          reward a session's last call (discounted)   write
POST /v1/molt/trajectories/{id}/end      end a trajectory (optional final reward)    write
POST /v1/molt/sessions/{id}/end          end a session's current trajectory          write
GET  /openapi.json                       the OpenAPI 3.1 document (feedback bodies)  none
GET  /v1/molt/admin/routes               the routing table (a tenant admin: its part)   admin
PUT  /v1/molt/admin/models/{m}/weights   canary weights for new sessions             admin¹
POST /v1/molt/admin/versions             register a policy version                   admin¹
DELETE /v1/molt/admin/versions/{v}       remove a version (rollback)                 admin¹
POST /v1/molt/admin/adapters             hot-load a LoRA adapter as a new version    operate
POST /v1/molt/admin/health               check the backends now                      admin
=======================================  ==========================================  ============

¹ A tenant's admin acts on its own tenant's routing keys (``model#tenant[/agent]``) and versions; the
shared part (public models, their weights and base versions) needs the platform operator's
``operate`` (:mod:`molt.gateway.admin_scope`).

Every endpoint takes ``Authorization: Bearer <key>`` when the gateway has a key ring. Errors are
OpenAI-style JSON objects ``{"error": {"message", "type", "param", "code"}}``, made in one place
(:mod:`molt.gateway.error_responses`).

The routes live in :mod:`molt.gateway.routes`, one module per idea; :func:`create_app` composes them.

Example::

    app = create_app(Gateway([StubBackend()], recorder=recorder))
    uvicorn.run(app, host="127.0.0.1", port=8000)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from molt.gateway.error_responses import error_body, install_error_handlers, route_template
from molt.gateway.routes import admin, feedback, inference, messages, operations, otlp, responses
from molt.gateway.routes.admin import AdapterBody, VersionBody, WeightsBody
from molt.gateway.routes.context import RouteContext
from molt.gateway.service import Gateway

# The request bodies and the error helpers are public names of this module too (the OpenAPI document and
# embedders import them from here).
__all__ = ["AdapterBody", "VersionBody", "WeightsBody", "create_app", "error_body", "route_template"]

#: The route modules, installed in this order (the order Starlette matches in).
ROUTE_MODULES = (inference, responses, messages, operations, feedback, admin, otlp)


def create_app(gateway: Gateway, *, manage_lifecycle: bool = True) -> FastAPI:
    """The FastAPI app serving ``gateway``. With ``manage_lifecycle`` the app starts the gateway's
    backends on startup and closes them on shutdown."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if manage_lifecycle:
            await gateway.start()
        try:
            yield
        finally:
            if manage_lifecycle:
                await gateway.aclose()

    # FastAPI's own OpenTelemetry hooks would look at the environment on every request; Molt records
    # its own events and metrics.
    app = FastAPI(title="Molt gateway", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None, telemetry={"tracing": False, "metrics": False, "logs": False})
    app.state.gateway = gateway
    install_error_handlers(app)
    ctx = RouteContext(app, gateway)
    for module in ROUTE_MODULES:
        module.install(ctx)
    return app
