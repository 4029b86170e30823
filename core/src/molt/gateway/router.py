"""Session-affine routing over several backends and policy versions.

A **routing table** names policy versions (a version = which backends serve it, under which upstream
model name, with which LoRA adapter and harness) and, per public model name, a history of
**generations**: from time ``since`` on, new sessions split between versions by ``weights`` (a canary
is a small weight). Routing is a pure function of the session key and the table:

1. the session's start time picks the generation (the latest whose ``since`` is not after it), so
   a session stays on the version it started on when weights change or a version is added;
2. weighted rendezvous hashing over that generation's versions picks the version (a session key
   lands on a version with probability ``w_v / Σw``, and changing one weight moves only the sessions
   that must move);
3. rendezvous hashing over the version's healthy backends picks the backend (a backend that goes
   down moves only its own sessions; when it comes back they return).

The start time of a session key that is a UUIDv7 (Molt's trajectory and session ids, ``new_id()``)
is read from the key itself, so replicas that share the table agree without sharing any state.
For other keys it is the time this router first saw the key (kept in a bounded LRU), so replicas
agree on everything except sessions that straddle a table change and move between replicas.

Example::

    table = RoutingTable.single("smollm2", VersionSpec(version="smollm2@base", backends=("vllm-0",)))
    router = Router(table)
    decision = router.route("smollm2", session_key="0193…")      # → Route(version=…, backend="vllm-0")
    router.add_version("smollm2", VersionSpec(version="smollm2@lora-7", backends=("vllm-0",),
                                              upstream_model="lora-7", lora_adapter="/ckpt/7"), weight=0.1)
"""

from __future__ import annotations

import hashlib
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

from molt.errors import BackendUnavailable, ModelNotFound
from molt.gateway.sessions import IdleLRU
from molt.harness import HarnessSpec

__all__ = ["Route", "Router", "RoutingTable", "TrafficSplit", "VersionSpec", "choose", "scope_key", "session_start",
           "version_key"]

_DATA = ConfigDict(extra="forbid", frozen=True)
_MAX_GENERATIONS = 64


class VersionSpec(BaseModel):
    """A policy version as the gateway serves it.

    ``version`` is the policy version id recorded in provenance. ``backends`` are the backend
    instances that serve it; ``upstream_model`` is the model name sent to them (a LoRA adapter's
    served name, or ``None`` for the backend's base model). ``lora_adapter`` and ``model_checkpoint``
    are recorded in provenance; ``harness`` is applied to requests (``None``: no harness edits).
    A composite policy version of the control plane also names its ``tenant_id`` and its memory and
    skill snapshot (``memory_ids``, ``skill_ids``), which a retrieving harness applier reads.
    """

    model_config = _DATA

    version: str = Field(min_length=1, max_length=200)
    backends: tuple[str, ...] = Field(min_length=1)
    upstream_model: str | None = None
    lora_adapter: str | None = None
    model_checkpoint: str | None = None
    harness: HarnessSpec | None = None
    tenant_id: str | None = None
    memory_ids: tuple[str, ...] = ()
    skill_ids: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _plain_id(self) -> VersionSpec:
        if "#" in self.version:
            raise ValueError(f"A version id may not contain '#' (it separates a tenant's namespace); got "
                             f"{self.version!r}.")
        return self

    @property
    def key(self) -> str:
        """The version's key in the routing table (:func:`version_key`)."""
        return version_key(self.version, self.tenant_id)


class TrafficSplit(BaseModel):
    """From ``since`` (Unix seconds) on, new sessions of a model split between versions by ``weights``
    (one *generation* of a model's routing: sessions keep the split they started under)."""

    model_config = _DATA

    since: float = 0.0
    weights: dict[str, float]

    @model_validator(mode="after")
    def _valid(self) -> TrafficSplit:
        for v, w in self.weights.items():
            if not (math.isfinite(w) and w >= 0):
                raise ValueError(f"weight of version {v!r} must be a finite number ≥ 0, got {w}.")
        if self.weights and not any(w > 0 for w in self.weights.values()):
            raise ValueError("at least one version needs a weight > 0.")
        return self


class RoutingTable(BaseModel):
    """Versions by id, and each public model's generations (oldest first)."""

    model_config = _DATA

    versions: dict[str, VersionSpec]
    models: dict[str, tuple[TrafficSplit, ...]]

    @model_validator(mode="after")
    def _consistent(self) -> RoutingTable:
        for vid, spec in self.versions.items():
            if spec.key != vid:
                raise ValueError(f"versions[{vid!r}] is version {spec.version!r} of tenant {spec.tenant_id!r}, "
                                 f"whose key is {spec.key!r}; the key and the id must match.")
        for model, gens in self.models.items():
            if not gens:
                raise ValueError(f"model {model!r} has no generation; give it at least one version.")
            if model in self.versions:
                raise ValueError(f"{model!r} is both a model and a version id; use distinct names.")
            for g in gens:
                unknown = set(g.weights) - set(self.versions)
                if unknown:
                    raise ValueError(f"model {model!r} weights name unknown versions {sorted(unknown)}.")
            if any(b.since < a.since for a, b in itertools.pairwise(gens)):
                raise ValueError(f"model {model!r} generations must be ordered by 'since'.")
        return self

    @classmethod
    def single(cls, model: str, version: VersionSpec) -> RoutingTable:
        """A table serving one model with one version."""
        return cls(versions={version.key: version}, models={model: (TrafficSplit(weights={version.key: 1.0}),)})

    def current_weights(self, model: str) -> dict[str, float]:
        """The weights new sessions of ``model`` get now."""
        return dict(self.models[model][-1].weights)

    def backends(self) -> set[str]:
        """Every backend name the table uses."""
        return {b for v in self.versions.values() for b in v.backends}


@dataclass(frozen=True, slots=True)
class Route:
    """Where a request goes: the policy version and the backend instance."""

    version: VersionSpec
    backend: str
    failover: bool = False


def _u64(*parts: str) -> int:
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(p.encode())
        h.update(b"\x00")
    return int.from_bytes(h.digest(), "big")


def _unit(*parts: str) -> float:
    """A deterministic uniform number in (0, 1) from the parts."""
    return (_u64(*parts) + 0.5) / 2.0**64


def scope_key(model: str, tenant_id: str, agent_id: str | None = None) -> str:
    """The routing key of ``model`` for one tenant (and agent): ``model#tenant[/agent]``."""
    return f"{model}#{tenant_id}" + (f"/{agent_id}" if agent_id else "")


def version_key(version: str, tenant_id: str | None) -> str:
    """The routing table's key of a version: its id when it is shared, ``id#tenant`` when it is one
    tenant's. Version ids live in a namespace per tenant (two tenants may each have a ``v2``; one
    cannot take or probe the other's id); a version id never holds ``#``, so keys never collide."""
    return version if tenant_id is None else f"{version}#{tenant_id}"


def key_tenant(key: str) -> str | None:
    """The tenant a routing key (``model#tenant[/agent]``) or version key (``id#tenant``) belongs to
    (``None``: shared)."""
    _, sep, rest = key.partition("#")
    return rest.partition("/")[0] if sep else None


def session_start(key: str) -> float | None:
    """The creation time (Unix seconds) embedded in a UUIDv7 key, or ``None`` for other keys."""
    if len(key) != 36 or key[14] != "7" or key[8] != "-":
        return None
    try:
        return int(key[:8] + key[9:13], 16) / 1000.0
    except ValueError:
        return None


def _generation(gens: tuple[TrafficSplit, ...], started_at: float) -> TrafficSplit:
    chosen = gens[0]
    for g in gens:
        if g.since <= started_at:
            chosen = g
        else:
            break
    return chosen


def _ranked_versions(table: RoutingTable, gen: TrafficSplit, key: str) -> list[str]:
    """The generation's versions, best first, by weighted rendezvous score ``-w / ln(u)``."""
    scored = []
    for vid, w in gen.weights.items():
        if w > 0 and vid in table.versions:
            scored.append((-w / math.log(_unit(key, vid)), vid))
    scored.sort(reverse=True)
    return [vid for _, vid in scored]


def _pick_backend(spec: VersionSpec, key: str, healthy: Callable[[str], bool]) -> str | None:
    alive = [b for b in spec.backends if healthy(b)]
    if not alive:
        return None
    return max(alive, key=lambda b: _u64(key, spec.version, b))


def choose(table: RoutingTable, model: str, key: str, started_at: float,
           healthy: Iterable[str] | None = None) -> Route:
    """The pure routing function (see the module docstring).

    ``model`` is a key of the table: a routing key, or a version key (which pins the version; a
    caller's name becomes such a key through :meth:`Router.resolve`, inside its tenant). ``healthy`` is the set
    of backends that can take requests (``None``: all). Raises ``ModelNotFound`` for an unknown name
    and ``BackendUnavailable`` when no backend of any eligible version is healthy.
    """
    alive = None if healthy is None else set(healthy)

    def ok(b: str) -> bool:
        return alive is None or b in alive

    if model in table.versions:
        spec = table.versions[model]
        backend = _pick_backend(spec, key, ok)
        if backend is None:
            raise BackendUnavailable(f"No healthy backend serves version {model!r} (backends: "
                                     f"{', '.join(spec.backends)}).")
        return Route(spec, backend)
    gens = table.models.get(model)
    if gens is None:
        known = ", ".join(sorted(m for m in table.models if "#" not in m)) or "none"
        raise ModelNotFound(f"The model {model!r} does not exist here; served models: {known}.", param="model")
    ranked = _ranked_versions(table, _generation(gens, started_at), key)
    for i, vid in enumerate(ranked):
        backend = _pick_backend(table.versions[vid], key, ok)
        if backend is not None:
            return Route(table.versions[vid], backend, failover=i > 0)
    # Every version of the session's generation is down: fall over to the current generation.
    for vid in _ranked_versions(table, gens[-1], key):
        backend = _pick_backend(table.versions[vid], key, ok)
        if backend is not None:
            return Route(table.versions[vid], backend, failover=True)
    raise BackendUnavailable(f"No healthy backend serves model {model!r}; check the backends' health.")


class Router:
    """Holds the routing table (swapped atomically on change), backend health, and first-seen times.

    Args:
        table: the initial routing table.
        max_sessions: first-seen times kept for non-UUIDv7 session keys (default 1,000,000).
        idle_s: …each forgotten when the key has not been routed for this long (default ``None``:
            only ``max_sessions`` bounds them; the gateway passes its ``session_idle_s``). A key that
            comes back after that counts as a new session, as it does for the gateway's sessions.
        clock: the wall-clock time source of first-seen times (tests pass a fake one).
        idle_clock: the monotonic time source of ``idle_s``.
    """

    def __init__(self, table: RoutingTable, *, max_sessions: int = 1_000_000, idle_s: float | None = None,
                 clock: Callable[[], float] | None = None, idle_clock: Callable[[], float] = time.monotonic):
        self._table = table
        self._health: dict[str, bool] = {b: True for b in table.backends()}
        self._first_seen: IdleLRU[str, float] = IdleLRU(max_sessions, idle_s, idle_clock)
        self._clock = clock or time.time
        self._lock = threading.Lock()

    @property
    def table(self) -> RoutingTable:
        """The current table (immutable; changes replace it)."""
        return self._table

    # ------------------------------------------------------------------ routing

    def started_at(self, key: str) -> float:
        """A session key's start time: from the key when it is a UUIDv7, else first seen here."""
        t = session_start(key)
        if t is not None:
            return t
        seen = self._first_seen.get(key)
        if seen is None:
            seen = self._clock()
            self._first_seen.put(key, seen)
        return seen

    def route(self, model: str, session_key: str, *, exclude: Iterable[str] = ()) -> Route:
        """The version and backend for a request of ``session_key`` to table key ``model`` (no tenant
        wall: callers on behalf of a tenant use :meth:`route_for`)."""
        excluded = set(exclude)
        healthy = [b for b, ok in self._health.items() if ok and b not in excluded]
        return choose(self._table, model, session_key, self.started_at(session_key), healthy)

    def resolve(self, model: str, tenant_id: str, agent_id: str | None = None) -> str:
        """The table key that ``model`` names for ``tenant_id``'s agent ``agent_id`` — the one place a
        request's ``model`` is read, so every route resolves it alike.

        ``model`` may be a public model name (the most specific of ``model#tenant/agent``,
        ``model#tenant`` and ``model`` the table has: the control plane binds each tenant's agent to
        its own versions under such keys), a routing key of the caller's tenant, or a version id of
        the caller's tenant or a shared one. Anything else — another tenant's version id or routing
        key included — raises the same :class:`ModelNotFound`, which lists only the caller's models.
        """
        t = self._table
        if "#" in model:
            if key_tenant(model) == tenant_id and model in t.models:
                return model
        elif (own := version_key(model, tenant_id)) in t.versions:
            return own
        elif (spec := t.versions.get(model)) is not None and spec.tenant_id is None:
            return model
        elif model in t.models:
            if agent_id is not None and (k := scope_key(model, tenant_id, agent_id)) in t.models:
                return k
            if (k := scope_key(model, tenant_id)) in t.models:
                return k
            return model
        raise self.not_found(model, tenant_id)

    def not_found(self, model: str, tenant_id: str | None) -> ModelNotFound:
        """The one answer to a name ``tenant_id`` may not use: unknown and another tenant's alike."""
        return ModelNotFound(f"The model {model!r} does not exist here; served models: "
                             f"{', '.join(self.models(tenant_id)) or 'none'}.", param="model")

    def route_for(self, model: str, tenant_id: str, agent_id: str | None, session_key: str, *,
                  exclude: Iterable[str] = ()) -> Route:
        """:meth:`route` of what ``model`` names inside ``tenant_id`` (:meth:`resolve`)."""
        return self.route(self.resolve(model, tenant_id, agent_id), session_key, exclude=exclude)

    def scoped_model(self, model: str, tenant_id: str | None, agent_id: str | None) -> str:
        """The routing key of public model ``model`` for ``tenant_id``'s agent (see :meth:`resolve`)."""
        if tenant_id is None:
            return model
        try:
            return self.resolve(model, tenant_id, agent_id)
        except ModelNotFound:
            return model

    def bind(self, key: str, specs: Iterable[VersionSpec], weights: Mapping[str, float], *,
             immediate: bool = False) -> RoutingTable:
        """Serve routing key ``key`` with ``specs`` at ``weights``. A new generation starts now
        (sessions already started keep their version) unless ``immediate``: then every session
        moves at once (a rollback). Versions no key uses any more are dropped."""
        with self._lock:
            t = self._table
            specs = list(specs)
            weights = _in_namespace(t, weights, key_tenant(key), specs)
            versions = {**t.versions, **{sp.key: sp for sp in specs}}
            if immediate:
                models = {**t.models, key: (TrafficSplit(since=0.0, weights=dict(weights)),)}
                used = {v for gens in models.values() for g in gens for v in g.weights}
                self._table = RoutingTable(versions={k: v for k, v in versions.items() if k in used}, models=models)
                for sp in specs:
                    for b in sp.backends:
                        self._health.setdefault(b, True)
            else:
                self._commit(t, versions, key, weights)
            return self._table

    def models(self, tenant_id: str | None = None) -> list[str]:
        """Public model names, then the version ids ``tenant_id`` may name (shared ones and its own).
        Tenant-scoped routing keys are never listed, nor another tenant's versions."""
        t = self._table
        return (sorted(m for m in t.models if "#" not in m)
                + sorted({sp.version for sp in t.versions.values() if sp.tenant_id in (None, tenant_id)}))

    # ------------------------------------------------------------------ health

    def set_health(self, backend: str, healthy: bool) -> None:
        """Mark a backend (un)healthy (health checks and failed requests call this)."""
        self._health[backend] = healthy

    def health(self) -> dict[str, bool]:
        """Backend → healthy."""
        return dict(self._health)

    # ------------------------------------------------------------------ changes

    def replace(self, table: RoutingTable) -> None:
        """Swap in a new table."""
        with self._lock:
            self._table = table
            for b in table.backends():
                self._health.setdefault(b, True)

    def add_version(self, model: str, spec: VersionSpec, *, weight: float,
                    weights: Mapping[str, float] | None = None) -> RoutingTable:
        """Register ``spec`` and start a generation of ``model`` in which it has ``weight`` (the other
        versions keep theirs unless ``weights`` overrides them). Sessions already started keep their
        version."""
        with self._lock:
            t = self._table
            if spec.version in t.models or spec.key in t.models:
                raise ValueError(f"{spec.version!r} is a model name; choose another version id.")
            versions = {**t.versions, spec.key: spec}
            named = _in_namespace(t, weights or {}, key_tenant(model) or spec.tenant_id, [spec])
            new_weights = {**(t.current_weights(model) if model in t.models else {}), **named, spec.key: weight}
            self._commit(t, versions, model, new_weights)
            return self._table

    def set_weights(self, model: str, weights: Mapping[str, float]) -> RoutingTable:
        """Start a generation of ``model`` with ``weights`` (versions left out get weight 0)."""
        with self._lock:
            t = self._table
            if model not in t.models:
                raise ModelNotFound(f"The model {model!r} does not exist here.", param="model")
            self._commit(t, dict(t.versions), model, _in_namespace(t, weights, key_tenant(model)))
            return self._table

    def remove_version(self, version: str) -> RoutingTable:
        """Drop a version by its table key (a rollback): its sessions move to the other versions of
        their generation."""
        with self._lock:
            t = self._table
            if version not in t.versions:
                raise ModelNotFound(f"No version {version!r}.", param="version")
            versions = {k: v for k, v in t.versions.items() if k != version}
            models = {}
            for m, gens in t.models.items():
                # A generation left without weight is dropped: its sessions fall back to the one before.
                left = [(g.since, {k: w for k, w in g.weights.items() if k != version}) for g in gens]
                kept = tuple(TrafficSplit(since=since, weights=w) for since, w in left
                             if any(x > 0 for x in w.values()))
                if kept:
                    models[m] = kept
            self._table = RoutingTable(versions=versions, models=models)
            return self._table

    def _commit(self, t: RoutingTable, versions: dict[str, VersionSpec], model: str,
                weights: dict[str, float]) -> None:
        now = self._clock()
        gens = t.models.get(model, ())
        if gens and gens[-1].since > now:
            now = gens[-1].since
        gens = (*gens, TrafficSplit(since=now, weights=weights))[-_MAX_GENERATIONS:]
        self._table = RoutingTable(versions=versions, models={**t.models, model: gens})
        for spec in versions.values():
            for b in spec.backends:
                self._health.setdefault(b, True)


def _in_namespace(t: RoutingTable, weights: Mapping[str, float], tenant: str | None,
                  specs: Iterable[VersionSpec] = ()) -> dict[str, float]:
    """``weights`` keyed by table keys: a name is a version of ``specs``, else ``tenant``'s own
    version of that id, else a table key as given (a shared version, or a key the operator names)."""
    specs = sorted(specs, key=lambda sp: sp.tenant_id == tenant)  # the key's own tenant's spec wins a tie
    given = {sp.version: sp.key for sp in specs}
    out: dict[str, float] = {}
    for name, w in weights.items():
        if name in given:
            out[given[name]] = w
        elif tenant is not None and (own := version_key(name, tenant)) in t.versions:
            out[own] = w
        else:
            out[name] = w
    return out
