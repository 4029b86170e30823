"""The OpenAI-compatible FastAPI app.

=======================================  ==========================================  ============
endpoint                                 what                                        permission
=======================================  ==========================================  ============
POST /v1/chat/completions                chat, streaming, tools, n, logprobs         write
POST /v1/completions                     text or token-id prompts                    write
GET  /v1/models, /v1/models/{id}         public models and policy versions           any key
GET  /health                             liveness and backend health                 any key
GET  /metrics                            Prometheus text format                      read
POST /v1/molt/rewards/call               reward one call                             write
POST /v1/molt/rewards/trajectory         reward a trajectory                         write
POST /v1/molt/rewards/last-call          reward a session's last call (discounted)   write
POST /v1/molt/trajectories/{id}/end      end a trajectory (optional final reward)    write
POST /v1/molt/sessions/{id}/end          end a session's current trajectory          write
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
(:func:`_install_error_handlers`).

Example::

    app = create_app(Gateway([StubBackend()], recorder=recorder))
    uvicorn.run(app, host="127.0.0.1", port=8000)
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from molt.backends import openai_wire as wire
from molt.errors import (
    AuthenticationError,
    BackendError,
    GatewayError,
    GovernanceError,
    InvalidRequest,
    ModelNotFound,
    MoltError,
    NotFound,
    PermissionDenied,
    RequestTooLarge,
)
from molt.gateway.admin_scope import AdminScope
from molt.gateway.feedback import CallReward, EndTrajectory, Feedback, LastCallReward, TrajectoryReward
from molt.gateway.router import VersionSpec
from molt.gateway.service import Gateway
from molt.governance.access import Action, Principal
from molt.harness import HarnessSpec

__all__ = ["create_app", "error_body"]

log = logging.getLogger("molt.gateway")

M = TypeVar("M", bound=BaseModel)
Handler = Callable[[Request], Awaitable[Response]]
_JSON = "application/json"


# ------------------------------------------------------------------------------------------ errors


def _is_route(request: Request, path: str) -> bool:
    """Whether ``path`` is one of the app's routes (any method)."""
    scope = {**request.scope, "path": path}
    return any(route.matches(scope)[0] != Match.NONE for route in request.app.routes)


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error object."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _classify(exc: BaseException) -> tuple[int, dict[str, Any]]:
    if isinstance(exc, AuthenticationError):
        return 401, error_body(exc.message, "invalid_request_error", "invalid_api_key")
    if isinstance(exc, PermissionDenied):
        return 403, error_body(exc.message, "permission_error", "permission_denied")
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


def _install_error_handlers(app: FastAPI) -> None:
    """Every error leaves as an OpenAI-style JSON object with the right status (the one place)."""

    def respond(request: Request, exc: BaseException) -> Response:
        status, body = _classify(exc)
        if status >= 500 and not isinstance(exc, BackendError):
            log.error("Unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        gw: Gateway | None = getattr(request.app.state, "gateway", None)
        if gw is not None:
            gw.metrics.observe(route_template(request), status, 0.0)
        return Response(orjson.dumps(body), status_code=status, media_type=_JSON)

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
                        media_type=_JSON)

    async def validation_error(request: Request, exc: Exception) -> Response:
        return respond(request, InvalidRequest(f"The request is invalid: {exc}"))

    app.add_exception_handler(MoltError, molt_error)
    app.add_exception_handler(ValueError, molt_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, molt_error)


# ------------------------------------------------------------------------------------------ bodies


async def _read_json(request: Request, limit: int) -> Any:
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


async def _read_model(request: Request, gw: Gateway, model: type[M]) -> M:
    body = await _read_json(request, gw.config.max_body_bytes)
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        errs = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())
        raise InvalidRequest(f"The request is invalid: {errs}.") from None


def _json(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type=_JSON, headers=headers)


class AdapterBody(BaseModel):
    """Load a LoRA adapter into the backends of ``base_version`` (default: the model's current
    heaviest version) and route ``weight`` of the model's new sessions to it."""

    model_config = ConfigDict(extra="forbid")

    model: str
    version: str = Field(min_length=1, max_length=200)
    path: str = Field(min_length=1)
    weight: float = Field(default=0.1, ge=0.0)
    weights: dict[str, float] | None = None
    base_version: str | None = None
    harness: HarnessSpec | None = None


class VersionBody(BaseModel):
    """Register a policy version (e.g. a harness edit on the same weights) with a canary weight."""

    model_config = ConfigDict(extra="forbid")

    model: str
    spec: VersionSpec
    weight: float = Field(default=0.1, ge=0.0)
    weights: dict[str, float] | None = None


class WeightsBody(BaseModel):
    """The weights new sessions of a model get from now on."""

    model_config = ConfigDict(extra="forbid")

    weights: dict[str, float]


# ------------------------------------------------------------------------------------------ the app


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
    feedback = Feedback(gateway)
    _install_error_handlers(app)
    gw = gateway

    def auth(request: Request, action: Action | None = None) -> Principal:
        h = request.headers
        p = gw.authenticate(h.get("authorization"), h.get("x-api-key"))
        if action is not None:
            p.require(action)
        return p

    def route(path: str, method: str) -> Callable[[Handler], Handler]:
        """A plain Starlette route: these handlers read the request themselves, so FastAPI's
        dependency solving would only add latency."""
        def register(fn: Handler) -> Handler:
            app.add_route(path, fn, methods=[method])
            return fn
        return register

    async def record_later(call: Any) -> None:  # async: runs on the loop after the response, no thread hop
        gw.record(call)

    # ---------------------------------------------------------------- inference

    async def infer(request: Request, path: str, parse: Callable[[Any], Any], begin: Callable[..., Any],
                    render: Callable[[Any, Any, Any], Any]) -> Response:
        """The shared path of both inference endpoints: auth, parse, route, run or stream, record after
        the response."""
        t0 = time.perf_counter()
        p = auth(request, Action.WRITE)
        body = await _read_json(request, gw.config.max_body_bytes)
        req, stream = parse(body)
        call = begin(p, req, body, request.headers)
        if stream:
            first, it = await gw.open_stream(call, req)
            gw.metrics.observe(path, 200, time.perf_counter() - t0)
            return StreamingResponse(gw.sse(call, first, it), media_type="text/event-stream",
                                     headers={**call.headers, "cache-control": "no-cache"})
        result = await gw.run(call, req)
        payload = render(result, call, req)
        gw.finish(call, result)
        resp = Response(orjson.dumps(payload), media_type=_JSON, headers=call.headers,
                        background=BackgroundTask(record_later, call))
        gw.metrics.observe(path, 200, time.perf_counter() - t0)
        return resp

    @route("/v1/chat/completions", "POST")
    async def chat_completions(request: Request) -> Response:
        return await infer(
            request, "/v1/chat/completions", wire.parse_chat_request, gw.begin_chat,
            lambda result, call, req: wire.chat_response(
                result, id="chatcmpl-" + call.record.event_ids[0], created=int(call.record.started),
                model=req.model, logprobs=req.logprobs))

    @route("/v1/completions", "POST")
    async def completions(request: Request) -> Response:
        return await infer(
            request, "/v1/completions", wire.parse_completion_request, gw.begin_completion,
            lambda result, call, req: wire.completion_response(
                result, id="cmpl-" + call.record.event_ids[0], created=int(call.record.started),
                model=req.model, logprobs=req.logprobs is not None))

    @route("/v1/models", "GET")
    async def models(request: Request) -> Response:
        p = auth(request)
        data = [{"id": m, "object": "model", "created": int(gw.started_at), "owned_by": "molt"}
                for m in gw.router.models(p.tenant_id)]
        return _json({"object": "list", "data": data})

    @route("/v1/models/{model_id:path}", "GET")
    async def model(request: Request) -> Response:
        model_id = request.path_params["model_id"]
        p = auth(request)
        if model_id not in gw.router.models(p.tenant_id):
            raise ModelNotFound(f"The model {model_id!r} does not exist here.", param="model")
        return _json({"id": model_id, "object": "model", "created": int(gw.started_at), "owned_by": "molt"})

    # ---------------------------------------------------------------- operations

    async def _recorder_stats() -> Any:
        """The recorder's counters, or None. A capture process answers behind the records queued
        before the question (seconds when it is busy): asked on a worker thread, so the event loop
        keeps serving (``stats`` is a property: even ``hasattr`` on the instance would ask)."""
        if gw.recorder is None or not hasattr(type(gw.recorder), "stats"):
            return None
        return await run_in_threadpool(lambda: gw.recorder.stats)

    @route("/health", "GET")
    async def health(request: Request) -> Response:
        auth(request)
        backends = gw.router.health()
        ok = any(backends.values())
        out: dict[str, Any] = {"status": "ok" if ok else "degraded", "backends": backends}
        if (s := await _recorder_stats()) is not None:
            out["recorder"] = {"enqueued": s.enqueued, "acknowledged": s.acknowledged, "delivered": s.delivered,
                               "dropped": s.dropped_queue_full + s.dropped_spool_full}
        return _json(out, 200 if ok else 503)

    @route("/metrics", "GET")
    async def metrics(request: Request) -> Response:
        reader = AdminScope(auth(request, Action.READ))
        gauges: list[tuple[str, str, dict[str, str], float]] = [
            ("molt_gateway_backend_up", "Whether a backend passes its health check.", {"backend": b}, float(ok))
            for b, ok in gw.router.health().items()]
        if (s := await _recorder_stats()) is not None:
            for k, v in s.as_dict().items():
                if isinstance(v, int):
                    gauges.append(("molt_recorder_" + k, f"Recorder counter {k}.", {}, float(v)))
        if isinstance(recycled := getattr(gw.recorder, "recycled", None), int):  # a CaptureProcess
            gauges.append(("molt_capture_recycled", "Capture processes replaced by a fresh one (after "
                           "recycle_after records).", {}, float(recycled)))
        if gw.capture is not None:
            gauges.append(("molt_gateway_capture_failures", "Calls whose events could not be built.", {},
                           float(gw.capture.failed)))
        if gw.store is not None and hasattr(gw.store, "cache_bytes"):  # LanceDB caches of this process
            # asked on a worker thread like the recorder's counters: a call into LanceDB, which weighs
            # its caches' entries (the loop must not wait on it)
            held = await run_in_threadpool(gw.store.cache_bytes)
            gauges.append(("molt_store_cache_bytes", "Bytes held by the gateway process's LanceDB caches "
                           "(index + metadata; bounded).", {}, float(held)))
        if reader.operator:  # platform state (training runs, pauses for serving): the operator's to see
            for source in gw.status_sources:
                for part in source().values():
                    for k, v in part.items():
                        if isinstance(v, int | float) and not isinstance(v, bool):
                            gauges.append(("molt_" + k.replace(".", "_"), f"molt serve status {k}.", {}, float(v)))
        versions = gw.router.table.versions
        text = gw.metrics.render(gauges, version_visible=lambda v: reader.sees_version(versions.get(v)))
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    # ---------------------------------------------------------------- feedback

    @route("/v1/molt/rewards/call", "POST")
    async def reward_call(request: Request) -> Response:
        p = auth(request, Action.WRITE)
        return _json(feedback.reward_call(p, await _read_model(request, gw, CallReward)))

    @route("/v1/molt/rewards/trajectory", "POST")
    async def reward_trajectory(request: Request) -> Response:
        p = auth(request, Action.WRITE)
        return _json(feedback.reward_trajectory(p, await _read_model(request, gw, TrajectoryReward)))

    @route("/v1/molt/rewards/last-call", "POST")
    async def reward_last_call(request: Request) -> Response:
        p = auth(request, Action.WRITE)
        return _json(feedback.reward_last_call(p, await _read_model(request, gw, LastCallReward)))

    @route("/v1/molt/trajectories/{trajectory_id}/end", "POST")
    async def end_trajectory(request: Request) -> Response:
        trajectory_id = request.path_params["trajectory_id"]
        p = auth(request, Action.WRITE)
        body = await _read_model(request, gw, EndTrajectory) if await request.body() else EndTrajectory()
        return _json(feedback.end_trajectory(p, trajectory_id, body))

    @route("/v1/molt/sessions/{session_id}/end", "POST")
    async def end_session(request: Request) -> Response:
        session_id = request.path_params["session_id"]
        p = auth(request, Action.WRITE)
        body = await _read_model(request, gw, EndTrajectory) if await request.body() else EndTrajectory()
        return _json(feedback.end_session(p, session_id, body))

    # ---------------------------------------------------------------- admin

    # Every admin route reads its caller's AdminScope: the platform operator changes what all tenants
    # share, a tenant's admin only its own agents' versions and canaries.

    def admin(request: Request) -> AdminScope:
        return AdminScope.of(auth(request))

    def table_json(scope: AdminScope) -> dict[str, Any]:
        return scope.table_json(gw.router.table, gw.router.health())

    @route("/v1/molt/admin/routes", "GET")
    async def routes(request: Request) -> Response:
        return _json(table_json(admin(request)))

    @route("/v1/molt/admin/models/{model_name}/weights", "PUT")
    async def set_weights(request: Request) -> Response:
        model_name = request.path_params["model_name"]
        scope = admin(request)
        scope.require_key(model_name)
        body = await _read_model(request, gw, WeightsBody)
        gw.router.set_weights(scope.weights_target(gw.router.table, model_name, body.weights), body.weights)
        return _json(table_json(scope))

    @route("/v1/molt/admin/versions", "POST")
    async def add_version(request: Request) -> Response:
        scope = admin(request)
        body = await _read_model(request, gw, VersionBody)
        unknown = set(body.spec.backends) - set(gw.backends)
        if unknown:
            raise InvalidRequest(f"The version names unknown backends {sorted(unknown)}; backends: "
                                 f"{', '.join(sorted(gw.backends))}.", param="spec.backends")
        key, spec, weights = scope.version_target(gw.router.table, body.model, body.spec, body.weights)
        gw.router.add_version(key, spec, weight=body.weight, weights=weights)
        return _json(table_json(scope))

    @route("/v1/molt/admin/versions/{version}", "DELETE")
    async def remove_version(request: Request) -> Response:
        scope = admin(request)
        gw.router.remove_version(scope.removable(gw.router.table, request.path_params["version"]))
        return _json(table_json(scope))

    @route("/v1/molt/admin/adapters", "POST")
    async def load_adapter(request: Request) -> Response:
        scope = admin(request)
        # The adapter is read from the server's disk into backends every tenant shares.
        scope.require_operator("Loading a LoRA adapter into the serving backends")
        body = await _read_model(request, gw, AdapterBody)
        t = gw.router.table
        if body.model not in t.models:
            raise ModelNotFound(f"The model {body.model!r} does not exist here.", param="model")
        base_id = body.base_version or max(t.current_weights(body.model).items(), key=lambda kv: kv[1])[0]
        base = t.versions.get(base_id)
        if base is None:
            raise ModelNotFound(f"No version {base_id!r}.", param="base_version")
        targets = [b for b in base.backends if gw.backends[b].capabilities.lora]
        if not targets:
            raise InvalidRequest(f"No backend of version {base_id!r} can load LoRA adapters "
                                 f"({', '.join(base.backends)}); serve it with the vllm or local backend.",
                                 param="base_version")
        for name in targets:
            await gw.backends[name].load_adapter(body.version, body.path)
        spec = VersionSpec(version=body.version, backends=tuple(targets), upstream_model=body.version,
                           lora_adapter=body.path, model_checkpoint=base.model_checkpoint or base.upstream_model,
                           harness=body.harness if body.harness is not None else base.harness)
        gw.router.add_version(body.model, spec, weight=body.weight, weights=body.weights)
        return _json(table_json(scope))

    @route("/v1/molt/admin/health", "POST")
    async def check_health(request: Request) -> Response:
        admin(request)
        return _json({"backends": await gw.check_health()})

    # ---------------------------------------------------------------- OTLP ingest

    if gw.recorder is not None and hasattr(gw.recorder, "record"):
        # A home-grown stack that emits OpenTelemetry GenAI spans joins by pointing its OTLP/HTTP trace
        # exporter at the gateway; the key's tenant is stamped on every event of the export.
        from molt.capture.otlp import OtlpIngest
        from molt.capture.otlp_app import otlp_routes

        async def otlp_tenant(request: Request) -> str | Response:
            try:
                return auth(request, Action.WRITE).tenant_id
            except MoltError as exc:  # the same OpenAI-style error (all four fields) as every other endpoint
                status, body = _classify(exc)
                return _json(body, status=status)

        app.router.routes.extend(otlp_routes(OtlpIngest(gw.recorder, namespace=gw.namespace),
                                             authenticate=otlp_tenant))

    return app
