"""Admin routes: the routing table, canary weights, policy versions, LoRA adapters and a health check now.

Every admin route reads its caller's :class:`~molt.gateway.admin_scope.AdminScope`: the platform operator
changes what all tenants share, a tenant's admin only its own agents' versions and canaries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from molt.errors import InvalidRequest, LineageError, ModelNotFound
from molt.gateway.admin_scope import AdminScope
from molt.gateway.router import VersionSpec, scope_key
from molt.gateway.routes.context import RouteContext, json_response
from molt.harness import HarnessSpec

__all__ = ["AdapterBody", "VersionBody", "WeightsBody", "install"]


class AdapterBody(BaseModel):
    """Load a LoRA adapter into the backends of ``base_version`` (default: the model's current
    heaviest version) and route ``weight`` of the model's new sessions to it.

    ``tenants`` names whose adapter it is: one tenant's (trained on its data), or the tenants of a shared
    adapter (trained only on tenants whose policies opt into sharing). It is then registered as a version
    of each of those tenants — at weight 0 its tenants' agent versions route to it (the control plane's
    way); with a weight, that share of each tenant's own sessions of the model (``model#tenant``) goes to
    it, never the shared key's —, no other tenant can name it, and the gateway never serves it to another
    tenant's request; the name cannot be loaded again for other tenants. A tenant's adapter is loaded
    only when its manifest (:mod:`molt.lineage`, written with it by the trainer) matches its files and
    serves each of those tenants, and its lineage names no other tenant's trajectories. Without ``tenants`` it is the
    operator's shared adapter.
    """

    model_config = ConfigDict(extra="forbid")

    model: str
    version: str = Field(min_length=1, max_length=200)
    path: str = Field(min_length=1)
    weight: float = Field(default=0.1, ge=0.0)
    weights: dict[str, float] | None = None
    base_version: str | None = None
    harness: HarnessSpec | None = None
    tenants: list[str] | None = Field(default=None, min_length=1)


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


def _check_manifest(path: str, tenants: frozenset[str] | None, store: Any) -> None:
    """Refuse (400) to load a tenant's adapter whose manifest (:func:`molt.lineage.load_manifest`) is
    missing, does not match its files, was edited, does not serve each of ``tenants``, or names another
    tenant's trajectories (checked against the gateway's store); and refuse to load as everyone's an
    adapter whose manifest says it is a tenant's. An operator's adapter without a manifest loads as a
    shared one, as before manifests existed."""
    from molt.lineage import MANIFEST_FILE, load_manifest, read_manifest

    try:
        if tenants is None:
            if (Path(path) / MANIFEST_FILE).is_file() and (m := read_manifest(path)).tenant_id is not None:
                raise InvalidRequest(f"The adapter at {path} is tenant {m.tenant_id!r}'s (its manifest says so); "
                                     f"load it for its tenants ('tenants').", param="tenants")
            return
        for tenant in sorted(tenants):
            load_manifest(path, tenant=tenant, store=store)
    except LineageError as exc:
        raise InvalidRequest(f"{exc.message} ({exc.reason})", param="path") from exc


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
        owners = frozenset(body.tenants) if body.tenants is not None else None
        if body.version in gw.adapter_tenants and gw.adapter_tenants[body.version] != owners:
            raise InvalidRequest(f"The adapter name {body.version!r} is loaded for other tenants; choose another "
                                 f"name.", param="version")
        _check_manifest(body.path, owners, gw.store)
        for name in targets:
            await gw.backends[name].load_adapter(body.version, body.path)

        def spec(tenant: str | None) -> VersionSpec:
            return VersionSpec(version=body.version, backends=tuple(targets), upstream_model=body.version,
                               lora_adapter=body.path, model_checkpoint=base.model_checkpoint or base.upstream_model,
                               harness=body.harness if body.harness is not None else base.harness, tenant_id=tenant)

        gw.adapter_tenants[body.version] = owners
        if owners is None:
            gw.router.add_version(body.model, spec(None), weight=body.weight, weights=body.weights)
        elif body.weight == 0 and not body.weights:  # the tenants' agent versions route to it (the plane's way)
            for tenant in sorted(owners):
                gw.router.add_version(body.model, spec(tenant), weight=0.0)
        else:  # a canary of each tenant's own traffic of the model, never of the shared key's
            for tenant in sorted(owners):
                key = scope_key(body.model, tenant)
                t = gw.router.table
                start = t.current_weights(key) if key in t.models else {
                    k: w for k, w in t.current_weights(body.model).items() if t.versions[k].tenant_id in (None, tenant)}
                gw.router.add_version(key, spec(tenant), weight=body.weight, weights={**start, **(body.weights or {})})
        return json_response(table_json(scope))

    @ctx.route("/v1/molt/admin/health", "POST")
    async def check_health(request: Request) -> Response:
        admin(request)
        return json_response({"backends": await gw.check_health()})
