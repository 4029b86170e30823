"""What a key may see and change in the routing table: the platform operator everything, a tenant's
admin only its own agents' versions and canaries.

The routing table is shared: public models (``stub``), their base versions and the backends behind
them serve every tenant. Changing them is the platform operator's (role ``operator``, action
``operate``). A tenant's admin manages routing keys scoped to its tenant (``model#tenant`` and
``model#tenant/agent``, see :func:`~molt.gateway.router.scope_key`) and versions whose ``tenant_id``
is its tenant; it sees the shared part and its own, never another tenant's. Every admin route of
:mod:`molt.gateway.app` goes through :class:`AdminScope`, so the rule lives here once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from molt.errors import InvalidRequest, ModelNotFound, PermissionDenied
from molt.gateway.router import RoutingTable, VersionSpec, scope_key, version_key
from molt.governance.access import Permission, Principal

__all__ = ["AdminScope"]


def _key_tenant_matches(key: str, tenant: str) -> bool:
    """Whether routing key ``key`` is ``model#tenant`` or ``model#tenant/agent``."""
    _, sep, rest = key.partition("#")
    return bool(sep) and (rest == tenant or rest.startswith(tenant + "/"))


@dataclass(frozen=True)
class AdminScope:
    """One caller's reach over the routing table."""

    principal: Principal

    @classmethod
    def of(cls, p: Principal) -> AdminScope:
        """The scope of ``p``; raises :class:`PermissionDenied` unless it is an admin or the operator."""
        if not (p.can(Permission.ADMIN) or p.can(Permission.OPERATE)):
            raise PermissionDenied(f"The role {p.role.value!r} may not use the admin API; use an admin key of "
                                   f"the tenant (its own agents' versions) or the platform operator's key.")
        return cls(p)

    @property
    def operator(self) -> bool:
        """Whether the caller may change what every tenant shares."""
        return self.principal.can(Permission.OPERATE)

    @property
    def tenant(self) -> str:
        return self.principal.tenant_id

    def require_operator(self, what: str) -> None:
        """Raise :class:`PermissionDenied` unless the caller is the platform operator."""
        if not self.operator:
            raise PermissionDenied(
                f"{what} is shared serving configuration, which belongs to the platform operator; a tenant "
                f"admin manages its own agents' versions (POST /v1/molt/admin/versions) and their weights "
                f"(PUT /v1/molt/admin/models/<model>#{self.tenant}/weights). Use the operator's key.")

    # ------------------------------------------------------------------ reading

    def sees_version(self, spec: VersionSpec | None) -> bool:
        """Whether the caller may see a version (shared, or its tenant's)."""
        return self.operator or (spec is not None and spec.tenant_id in (None, self.tenant))

    def sees_key(self, key: str) -> bool:
        """Whether the caller may see a routing key (a public model, or one scoped to its tenant)."""
        return self.operator or "#" not in key or _key_tenant_matches(key, self.tenant)

    def table_json(self, t: RoutingTable, health: Mapping[str, bool]) -> dict[str, Any]:
        """The routing table as the caller may see it: the operator all of it, by table key
        (``id#tenant`` for a tenant's version); a tenant admin the shared part and its own, by the
        version ids of its namespace."""
        names = {k: (k if self.operator else sp.version) for k, sp in t.versions.items() if self.sees_version(sp)}
        versions = {names[k]: t.versions[k].model_dump(mode="json") for k in names}
        models = {m: [{"since": g.since, "weights": {names[v]: w for v, w in g.weights.items() if v in names}}
                      for g in gens] for m, gens in t.models.items() if self.sees_key(m)}
        return {"table": {"versions": versions, "models": models}, "health": dict(health),
                "current_weights": {m: gens[-1]["weights"] for m, gens in models.items()}}

    # ------------------------------------------------------------------ changing

    def lookup(self, t: RoutingTable, version: str) -> str | None:
        """The table key version id ``version`` names for the caller: its tenant's own version of that
        id, else a shared one (the operator may also name any key); ``None`` when it names nothing the
        caller may see — another tenant's version exactly as one that does not exist."""
        if (own := version_key(version, self.tenant)) in t.versions:
            return own
        spec = t.versions.get(version)
        if spec is not None and (self.operator or spec.tenant_id is None):
            return version
        return None

    def _check_weights(self, t: RoutingTable, weights: Mapping[str, float], param: str) -> None:
        for v in weights:
            if self.lookup(t, v) is None:
                raise ModelNotFound(f"No version {v!r} of tenant {self.tenant!r} or shared.", param=param)

    def require_key(self, model: str) -> None:
        """Raise unless the caller may set the weights of routing key ``model`` (checked before the
        body is read, so a refused caller learns nothing from validation errors)."""
        if not self.operator and not _key_tenant_matches(model, self.tenant):
            self.require_operator(f"The weights of {model!r}")

    def weights_target(self, t: RoutingTable, model: str, weights: Mapping[str, float]) -> str:
        """The routing key whose weights the caller may set (``model`` itself), or raise."""
        self.require_key(model)
        if not self.operator:
            self._check_weights(t, weights, "weights")
        return model

    def version_target(self, t: RoutingTable, model: str, spec: VersionSpec,
                       weights: Mapping[str, float] | None) -> tuple[str, VersionSpec, dict[str, float] | None]:
        """(routing key, version, weights of the other versions) for registering ``spec``.

        A tenant admin's version is its tenant's (``tenant_id`` set) and is routed under the tenant's
        key of the model (``model#tenant``, unless it names its own agent's key); that key starts from
        the public model's current weights, so a canary weight splits traffic as it does for the
        operator."""
        if self.operator:
            return model, spec, dict(weights) if weights is not None else None
        if spec.tenant_id not in (None, self.tenant):
            raise PermissionDenied(f"A key of tenant {self.tenant!r} cannot register a version of tenant "
                                   f"{spec.tenant_id!r}; use a key of that tenant.")
        # Version ids live in the tenant's namespace: only a shared version's id or a public model's
        # name is taken (both visible to every tenant); another tenant's ids are neither seen nor taken.
        shared = t.versions.get(spec.version)
        if (shared is not None and shared.tenant_id is None) or spec.version in t.models:
            raise InvalidRequest(f"The version id {spec.version!r} is taken by a shared version or model; "
                                 f"choose another id.", param="spec.version")
        # the weights a version serves: the backend's own model, or one a visible version already serves
        # (an adapter another tenant's version loaded is not this tenant's to serve)
        served = {v.upstream_model for v in t.versions.values() if self.sees_version(v)}
        if spec.upstream_model is not None and spec.upstream_model not in served:
            raise ModelNotFound(f"No served model {spec.upstream_model!r} of tenant {self.tenant!r} or shared.",
                                param="spec.upstream_model")
        public = model.partition("#")[0]
        if "#" in model:
            if not _key_tenant_matches(model, self.tenant):
                self.require_operator(f"Routing of {model!r}")
            key = model
        else:
            key = scope_key(model, self.tenant)
        if public not in t.models:
            raise ModelNotFound(f"The model {public!r} does not exist here.", param="model")
        self._check_weights(t, weights or {}, "weights")
        seed = None if key in t.models else t.current_weights(public)
        merged = {**(seed or {}), **(weights or {})} if seed is not None or weights is not None else None
        return key, spec.model_copy(update={"tenant_id": self.tenant}), merged

    def removable(self, t: RoutingTable, version: str) -> str:
        """The table key of ``version`` if the caller may remove it, else raise (another tenant's is as
        unknown as a version that does not exist)."""
        key = self.lookup(t, version)
        if key is None:
            if self.operator:
                return version  # the router's own 404
            raise ModelNotFound(f"No version {version!r} of tenant {self.tenant!r}.", param="version")
        if t.versions[key].tenant_id is None:
            self.require_operator(f"The shared version {version!r}")
        return key
