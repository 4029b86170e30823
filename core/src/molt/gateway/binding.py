"""Binding a policy-version registry to the gateway: each tenant's agent is served its own live version (and
canaries) under the routing key ``<model>#<tenant>/<agent>``.

:meth:`GatewayBinding.sync` reads the registry and rebinds every agent whose versions or weights
changed: the live version at ``1 − Σ canary weights`` and each canary at its weight. A promotion or
a new canary starts a new routing generation (sessions already running keep their version); a
rollback or an aborted canary moves every session at once. The gateway then applies the version's
harness, tool rewrites, memories and skills (through :class:`molt.control.memory.RetrievalHarness`)
and stamps the version id into each event's provenance.

Example::

    binding = GatewayBinding(gateway, registry, model="smollm2")
    binding.sync()                       # at start, and after any change (the registry calls it)
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from molt.gateway.router import Router, VersionSpec, scope_key

__all__ = ["GatewayBinding", "version_spec"]

log = logging.getLogger("molt.control")


def version_spec(v: Any, backends: tuple[str, ...]) -> VersionSpec:
    """The gateway's view of composite version ``v`` (a :class:`molt.control.versions.AgentVersion`:
    ``version_id``, ``tenant_id`` and ``parts`` with ``model``, ``memory_ids``, ``skill_ids`` and
    ``effective_harness()``) served by ``backends``."""
    p = v.parts
    return VersionSpec(version=v.version_id, backends=backends, upstream_model=p.model.adapter,
                       lora_adapter=p.model.adapter_path, harness=p.effective_harness(), tenant_id=v.tenant_id,
                       memory_ids=p.memory_ids, skill_ids=p.skill_ids)


class GatewayBinding:
    """Keeps a gateway's router in step with the registry (see the module docstring).

    Args:
        gateway: a :class:`molt.gateway.Gateway` (or a :class:`~molt.gateway.router.Router`).
        registry: the version registry (:class:`molt.control.versions.VersionRegistry`, or anything
            with ``agents()``, ``live()``, ``canaries()`` and a ``listeners`` list; the gateway never
            imports the control plane).
        model: the public model name the agents call.
        backends: backend names that serve the versions (default: every backend of the gateway's
            current table).
    """

    def __init__(self, gateway: Any, registry: Any, *, model: str,
                 backends: tuple[str, ...] | None = None):
        self.router: Router = gateway.router if hasattr(gateway, "router") else gateway
        self.registry = registry
        self.model = model
        self.backends = backends or tuple(sorted(self.router.table.backends()))
        self._bound: dict[str, tuple[tuple[str, float], ...]] = {}
        self._lock = threading.Lock()
        registry.listeners.append(self._changed)

    def _changed(self, tenant_id: str, agent_id: str, action: str) -> None:
        try:
            self.sync(tenant_id, agent_id, immediate=action in ("rollback", "abort"))
        except Exception:  # the registry change stands; the next periodic sync retries
            log.exception("Rebinding %s/%s after %s failed.", tenant_id, agent_id, action)

    def sync(self, tenant_id: str | None = None, agent_id: str | None = None, *,
             immediate: bool = False) -> dict[str, dict[str, float]]:
        """Rebind agents whose versions changed; returns ``{routing key: weights}`` of what changed."""
        changed: dict[str, dict[str, float]] = {}
        with self._lock:
            for t, a in self.registry.agents(tenant_id):
                if agent_id is not None and a != agent_id:
                    continue
                live = self.registry.live(t, a)
                if live is None:
                    continue
                canaries = self.registry.canaries(t, a)
                weights = {c.version_id: float(c.canary_weight or 0.0) for c in canaries}
                weights[live.version_id] = max(0.0, 1.0 - sum(weights.values()))
                key = scope_key(self.model, t, a)
                state = tuple(sorted(weights.items()))
                if self._bound.get(key) == state:
                    continue
                specs = [version_spec(v, self.backends) for v in [live, *canaries]]
                self.router.bind(key, specs, weights, immediate=immediate or key not in self._bound)
                self._bound[key] = state
                changed[key] = weights
        return changed
