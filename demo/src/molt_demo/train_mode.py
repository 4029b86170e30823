"""What ``molt demo --train`` adds: SmolLM2 on a local backend as a second gateway backend, the ``molt-math``
agent with a plane of its own, the weight trainer (:mod:`molt_demo.training`), and the summary of what the
trained adapter served against the base model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from molt_demo.rounds import RoundStats
from molt_demo.traffic import MATH_TASK_KEY, MODEL, TENANT_KEYS

__all__ = ["TrainMode"]


@dataclass
class TrainMode:
    """What ``--train`` adds: SmolLM2 on a local backend, the ``molt-math`` agent, the weight trainer."""

    backend: Any
    trainer: Any
    agent: str
    model: str

    @classmethod
    def build(cls, store: Any, home: Path, model_dir: Path | None) -> TrainMode:
        from molt.backends import LocalBackend
        from molt.backends.model import ensure_policy_model
        from molt_demo.math_agent import MATH_AGENT, MATH_MAX_TOKENS, MATH_MODEL
        from molt_demo.training import WeightTrainer

        try:
            import molt_trainer  # noqa: F401
        except ImportError as exc:
            raise typer.BadParameter(f"--train needs molt-trainer ({exc}); install it with "
                                     f"pip install -e trainer", param_hint="--train") from None
        path = model_dir or ensure_policy_model()
        # One CPU thread: serving and training take turns on a small machine (the rounds never overlap them).
        backend = LocalBackend("smollm2-0", model_path=path, model=MATH_MODEL, threads=1,
                               max_new_tokens=MATH_MAX_TOKENS)
        trainer = WeightTrainer(store, backend, path, home / "adapters", agent=MATH_AGENT, model=MATH_MODEL)
        return cls(backend, trainer, MATH_AGENT, MATH_MODEL)

    def plane(self, store: Any, desk: Any, memories: Any) -> Any:
        """The plane that runs ``molt-math``'s cycles. PlaneSettings are plane-wide, so the math agent gets
        its own plane over the same store: a short window (three rounds), so failures from before the
        adapter age out; small replay samples (every replay is a SmolLM2 generation on the CPU); and six
        canary runs, so a canary is judged against at least three concurrent live runs (with two, a lucky
        base model aborted a good adapter)."""
        from molt.control.plane import ControlPlane, PlaneSettings
        from molt_desk.world import AGENT, LEGACY_AGENT

        settings = PlaneSettings(canary_weight=0.5, canary_min=6, window=24, replay_sample=8, regression_sample=6)
        return ControlPlane(store, {AGENT: desk, LEGACY_AGENT: desk, self.agent: self.backend}, memories=memories,
                            trainer=self.trainer, settings=settings)

    def gateway(self, registry: Any, math_registry: Any, recorder: Any, store: Any, keyring: Any,
                harness: Any) -> Any:
        """The gateway with both backends, each public model bound to its own backend's versions (and to
        the registry of the plane that changes them)."""
        from molt.control.versions import AgentConfig, ModelPart
        from molt.gateway import Gateway, GatewayConfig, RoutingTable, VersionSpec
        from molt.gateway.binding import GatewayBinding
        from molt.gateway.router import TrafficSplit
        from molt_desk.world import DeskModel

        for tenant in TENANT_KEYS:
            math_registry.ensure_base(tenant, self.agent, AgentConfig(model=ModelPart(base=self.model)), actor="demo")
        table = RoutingTable(
            versions={f"{MODEL}@base": VersionSpec(version=f"{MODEL}@base", backends=("desk-0",)),
                      f"{self.model}@base": VersionSpec(version=f"{self.model}@base", backends=(self.backend.name,))},
            models={MODEL: (TrafficSplit(weights={f"{MODEL}@base": 1.0}),),
                    self.model: (TrafficSplit(weights={f"{self.model}@base": 1.0}),)})
        gw = Gateway([DeskModel("desk-0", model=MODEL), self.backend], table, recorder=recorder, store=store,
                     keyring=keyring, harness=harness, config=GatewayConfig(health_interval_s=0, backend_timeout_s=300))
        GatewayBinding(gw, registry, model=MODEL, backends=("desk-0",)).sync()
        GatewayBinding(gw, math_registry, model=self.model, backends=(self.backend.name,)).sync()
        return gw

    def summary(self, store: Any, registry: Any, stats: list[RoundStats]) -> dict[str, Any]:
        """Math success served by the base model vs by an adapter (from the store), per round, and what
        the trainer did."""
        from molt.control.signals import episodes
        from molt.errors import MoltError

        adapter_of: dict[str, str | None] = {}
        served: dict[str, list[int]] = {"base": [0, 0], "adapter": [0, 0]}
        for tenant in TENANT_KEYS:
            for e in episodes(store, tenant, self.agent, limit=100_000):
                if e.success is None or e.policy_version is None:
                    continue
                if e.policy_version not in adapter_of:
                    try:
                        adapter_of[e.policy_version] = registry.get(e.policy_version).parts.model.adapter
                    except MoltError:  # served before the registry bound the agent: the base model
                        adapter_of[e.policy_version] = None
                k = served["adapter" if adapter_of[e.policy_version] else "base"]
                k[0] += bool(e.success)
                k[1] += 1
        per_round = []
        for rnd in sorted({s.round for s in stats}):
            ss = [s for s in stats if s.round == rnd]
            ok = sum(s.by_task.get(MATH_TASK_KEY, [0, 0])[0] for s in ss)
            n = sum(s.by_task.get(MATH_TASK_KEY, [0, 0])[1] for s in ss)
            per_round.append({"round": rnd, "n": n, "success_rate": ok / n if n else None,
                              "correct_sum_rate": sum(s.math_correct for s in ss) / n if n else None})
        return {"agent": self.agent, "model": self.model,
                "success_base": served["base"][0] / served["base"][1] if served["base"][1] else None,
                "n_base": served["base"][1],
                "success_adapter": served["adapter"][0] / served["adapter"][1] if served["adapter"][1] else None,
                "n_adapter": served["adapter"][1],
                "adapters": sorted({a for a in adapter_of.values() if a}), "rounds": per_round,
                "requests": self.trainer.requests}
