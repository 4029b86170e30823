"""The scheduler ``molt serve --evolve-every`` runs: a cycle for every agent at a fixed period, never
taking the serving stack down."""

from __future__ import annotations

import logging
import threading

from molt.backends.base import BaseBackend
from molt.control.plane import ControlPlane
from molt.control.versions import AgentConfig, ModelPart
from molt.errors import InterventionError
from molt.store import Store

__all__ = ["run_scheduled"]

log = logging.getLogger("molt.control")


def run_scheduled(store: Store, stop: threading.Event, every_s: float, *, plane: ControlPlane | None = None,
                  backend: BaseBackend | None = None) -> None:
    """Run a cycle for every agent every ``every_s`` seconds until ``stop`` is set (``molt serve``).

    A failing cycle is logged and the loop goes on: the plane never takes the serving stack down.
    """
    if plane is None:
        if backend is None:
            raise InterventionError("run_scheduled needs a plane or a backend to replay candidates with.")
        plane = ControlPlane(store, backend, base_parts=AgentConfig(model=ModelPart(base=backend.model)))
    while not stop.wait(every_s):
        try:
            for r in plane.run_all(stop=stop):
                log.info("evolve %s/%s: %s (%s)", r.record.tenant_id, r.record.agent_id, r.choice, r.record.reason)
        except Exception:
            log.exception("Control-plane cycle failed; retrying in %.0f s.", every_s)
