"""Admin routes: the routing table, canary weights, policy versions, LoRA adapters and a health check now.

Every admin route reads its caller's :class:`~molt.gateway.admin_scope.AdminScope`: the platform operator
changes what all tenants share, a tenant's admin only its own agents' versions and canaries."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from molt.errors import InvalidRequest, ModelNotFound
from molt.gateway.admin_scope import AdminScope
from molt.gateway.router import VersionSpec
from molt.gateway.routes.context import RouteContext, json_response
from molt.harness import HarnessSpec

__all__ = ["AdapterBody", "VersionBody", "WeightsBody", "install"]


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


def install(ctx: RouteContext) -> None:
    gw = ctx.gateway

    def admin(request: Request) -> AdminScope:
        return AdminScope.of(ctx.auth(request))

    def table_json(scope: AdminScope) -> dict[str, Any]:
        return scope.table_json(gw.router.table, gw.router.health())

    @ctx.route("/v1/molt/admin/routes", "GET")
    async def routes(request: Request) -> Response:
        return json_response(table_json(admin(request)))

    @ctx.route("/v1/molt/admin/models/{model_name}/weights", "PUT")
    async def set_weights(request: Request) -> Response:
        model_name = request.path_params["model_name"]
        scope = admin(request)
        scope.require_key(model_name)
        body = await ctx.read_model(request, WeightsBody)
        gw.router.set_weights(scope.weights_target(gw.router.table, model_name, body.weights), body.weights)
        return json_response(table_json(scope))

    @ctx.route("/v1/molt/admin/versions", "POST")
    async def add_version(request: Request) -> Response:
        scope = admin(request)
        body = await ctx.read_model(request, VersionBody)
        unknown = set(body.spec.backends) - set(gw.backends)
        if unknown:
            raise InvalidRequest(f"The version names unknown backends {sorted(unknown)}; backends: "
                                 f"{', '.join(sorted(gw.backends))}.", param="spec.backends")
        key, spec, weights = scope.version_target(gw.router.table, body.model, body.spec, body.weights)
        gw.router.add_version(key, spec, weight=body.weight, weights=weights)
        return json_response(table_json(scope))

    @ctx.route("/v1/molt/admin/versions/{version}", "DELETE")
    async def remove_version(request: Request) -> Response:
        scope = admin(request)
        gw.router.remove_version(scope.removable(gw.router.table, request.path_params["version"]))
        return json_response(table_json(scope))

    @ctx.route("/v1/molt/admin/adapters", "POST")
    async def load_adapter(request: Request) -> Response:
        scope = admin(request)
        # The adapter is read from the server's disk into backends every tenant shares.
        scope.require_operator("Loading a LoRA adapter into the serving backends")
        body = await ctx.read_model(request, AdapterBody)
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
        return json_response(table_json(scope))

    @ctx.route("/v1/molt/admin/health", "POST")
    async def check_health(request: Request) -> Response:
        admin(request)
        return json_response({"backends": await gw.check_health()})
