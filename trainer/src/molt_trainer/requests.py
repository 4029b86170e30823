"""Training runs asked for by the control plane: one weight-update request → one adapter.

:class:`RequestTrainer` is the ``train`` callable of :class:`molt.control.weights.WeightLoop` (the
plane's weight-update hook; ``molt serve --train`` wires them). For a request it

1. starts from the weights the agent serves now: the base model with the live version's adapter
   loaded, or a fresh LoRA when it has none (so an adapter trained on top of an adapter continues it);
2. builds samples from the request's trajectories — the agent's recorded token-level traffic on the
   failing task, grouped by task for GRPO's group-relative advantages (:mod:`molt_trainer.data`) — and
   its anchors (successes on other tasks, a quarter of the batch at most), put in the failing task's
   group so that they keep a positive advantage and what the agent does right is reinforced too;
3. takes ``steps`` optimiser steps (:func:`molt_trainer.step.train_step`) on one batch of the newest
   ``max_samples`` samples, reused across steps like verl's PPO epochs. Before each step the serving
   latency is checked (:class:`SloGate`): while the gateway's p99 is over the SLO the run waits, so a
   training run never starves serving;
4. saves the adapter and registers it in ``policy_versions`` (:class:`~molt_trainer.publish.Publisher`
   with the request, the trajectories and the metrics) and returns a :class:`TrainedAdapter`. Loading
   it into the serving engine is the hook's (it checks the files first).

A step that raises or a loss that is not finite aborts the run before anything is saved: the error
goes back to the plane, which logs the cycle as a no-op with it. Weights are reset for the next request.

The trainer only imports ``molt.store`` data types (never ``molt.control``): the request is read by its
attributes (``request_id``, ``tenant_id``, ``agent_id``, ``task``, ``model.adapter_path``,
``trajectories``, ``anchors``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from molt_trainer.algos import AlgoSettings
from molt_trainer.data import DataStats, assign_groups, build_samples, collate
from molt_trainer.policy import LoraSettings, PolicyModel
from molt_trainer.publish import Publisher
from molt_trainer.step import train_step

__all__ = ["RequestTrainer", "RunSettings", "SloGate", "TrainedAdapter", "gateway_trainer"]

log = logging.getLogger("molt.trainer.requests")


class RunSettings(BaseModel):
    """One request's run.

    - ``algo`` / ``lora``: the algorithm and the adapter (default LoRA r=8, lr 4e-3: a run is a few steps).
    - ``steps``: optimiser steps (default 4); ``max_samples``: newest samples per run (default 64).
    A run needs samples with at least two different rewards (GRPO learns from the difference between
    them); without that the request is refused as "no contrast yet".
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    algo: AlgoSettings = AlgoSettings(advantage="grpo", policy_loss="vanilla")
    lora: LoraSettings = LoraSettings(rank=8, lr=4e-3, micro_batch=16)
    steps: int = Field(default=4, ge=1)
    max_samples: int = Field(default=64, ge=2)
    max_tokens: int = Field(default=2048, ge=2)


@dataclass
class TrainedAdapter:
    """What a run produced: the adapter's version id and directory, and how it went."""

    version: str
    path: Path
    run_id: str
    steps: int
    samples: int
    metrics: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    paused_s: float = 0.0


@dataclass
class SloGate:
    """Serving comes first: :meth:`wait` returns once the serving p99 is within the SLO.

    ``probe()`` gives the p99 (ms) since its last call, or ``None`` without traffic. The SLO is
    ``slo_ms`` when given (the gateway's p99 budget), else ``factor`` × the p99 seen while no training
    ran (the first readings) — a serving machine's own latency without training is the budget it can
    keep, whatever the hardware. ``max_wait_s`` bounds one wait (then the step runs: a run must finish);
    each wait is counted.
    """

    probe: Callable[[], float | None] | None = None
    slo_ms: float | None = None
    factor: float = 2.0
    check_s: float = 1.0
    max_wait_s: float = 120.0
    baseline_ms: float | None = None
    last_p99_ms: float | None = None
    counters: Counter[str] = field(default_factory=Counter)

    def budget_ms(self) -> float | None:
        """The p99 above which training waits (``None`` until there is a reading to base it on)."""
        if self.slo_ms is not None:
            return self.slo_ms
        return None if self.baseline_ms is None else self.factor * self.baseline_ms

    def observe_idle(self) -> None:
        """A reading taken while no training runs: it sets the automatic budget."""
        if self.probe is None:
            return
        p = self.probe()
        if p is not None:
            self.baseline_ms = p if self.baseline_ms is None else 0.8 * self.baseline_ms + 0.2 * p

    def wait(self, stop: threading.Event | None = None) -> float:
        """Block while serving is over budget; returns the seconds waited."""
        if self.probe is None:
            return 0.0
        t0 = time.monotonic()
        stop = stop or threading.Event()
        while True:
            p = self.probe()
            if p is not None:
                self.last_p99_ms = p
            budget = self.budget_ms()
            if p is None or budget is None or p <= budget:
                break
            self.counters["paused"] += 1
            if time.monotonic() - t0 >= self.max_wait_s:
                self.counters["pause_timeouts"] += 1
                log.warning("trainer: serving p99 %.0f ms still over the %.0f ms budget after %.0f s; stepping",
                            p, budget, self.max_wait_s)
                break
            if stop.wait(self.check_s):
                break
        waited = time.monotonic() - t0
        self.counters["paused_ms"] += int(waited * 1000)
        return waited


class RequestTrainer:
    """The ``train`` callable of :class:`molt.control.weights.WeightLoop` (see the module docstring).

    Args:
        publisher: saves adapters and registers them (targets empty: the hook loads them).
        settings: :class:`RunSettings`. ``model_path``: the served model's directory (default SmolLM2).
        gate: the :class:`SloGate` checked before each step (default: none).
        device: where the policy trains (default: CUDA when available, else CPU).
    """

    def __init__(self, publisher: Publisher, settings: RunSettings | None = None, *,
                 model_path: str | Path | None = None, gate: SloGate | None = None, device: str | None = None):
        self.publisher = publisher
        self.settings = settings or RunSettings()
        self.model_path = model_path
        self.gate = gate or SloGate()
        self.device = device
        self.counters: Counter[str] = Counter()
        self.history: list[dict[str, Any]] = []
        self._policy: PolicyModel | None = None
        self._fresh: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def policy(self) -> PolicyModel:
        if self._policy is None:
            self._policy = PolicyModel.load(self.settings.lora, self.model_path, device=self.device)
            self._fresh = self._policy.snapshot()
        return self._policy

    def close(self) -> None:
        """Stop training: the run in flight is abandoned before its next step (nothing is published), and
        every later request fails at once. A serving process stopping calls this through its weight loop."""
        self._stop.set()

    def busy(self) -> bool:
        """Whether a run is training now."""
        return self._lock.locked()

    def __call__(self, request: Any) -> TrainedAdapter:
        with self._lock:  # one run at a time: the policy's weights are shared state
            try:
                return self._train(request)
            except Exception:
                self.counters["failed_runs"] += 1
                raise

    def _train(self, request: Any) -> TrainedAdapter:
        if self._stop.is_set():
            raise RuntimeError(f"the trainer is closed; {request.request_id} was not trained")
        s = self.settings
        t0 = time.perf_counter()
        stats = DataStats()
        trajs = [*request.trajectories, *request.anchors]
        samples, _ = build_samples(request.trajectories, group_by="task", max_tokens=s.max_tokens, stats=stats)
        anchors, _ = build_samples(request.anchors, group_by="task", max_tokens=s.max_tokens, stats=stats)
        # Anchors join the failing task's group: a group of successes alone has no advantage under GRPO
        # (reward minus its own mean is 0), while beside the failing traffic each keeps a positive one, so
        # what the agent already does right is reinforced in the same step that changes the failing task.
        main = Counter(x.group for x in samples).most_common(1)
        for a in anchors:
            a.group = main[0][0] if main else a.group
        samples = samples[-(s.max_samples - min(len(anchors), s.max_samples // 4)):] + anchors[: s.max_samples // 4]
        kept, index, rewards = assign_groups(samples, None, stats)
        if len(kept) < 2 or len(set(rewards)) < 2:
            raise ValueError(f"{len(kept)} trainable samples from {len(trajs)} trajectories, rewards "
                             f"{sorted(set(rewards))[:4]}: no contrast to learn from yet "
                             f"(skipped: {dict(stats.skipped)})")
        policy = self.policy()
        assert self._fresh is not None
        policy.restore(self._fresh)
        start = getattr(request.model, "adapter_path", None)
        if start and Path(start, "adapter_model.safetensors").exists():
            policy.load_adapter_weights(start)
        batch = collate(kept, rewards, index, pad_id=policy.pad_id).to(policy.device)
        steps = s.steps
        metrics: dict[str, float] = {}
        paused = 0.0
        for _ in range(steps):
            paused += self.gate.wait(self._stop)
            if self._stop.is_set():
                raise RuntimeError(f"the trainer was closed during {request.request_id}; the run is abandoned, "
                                   "nothing published")
            metrics = train_step(policy, batch, s.algo)
            loss = metrics.get("actor/pg_loss", 0.0)
            if not math.isfinite(loss) or not math.isfinite(metrics.get("actor/grad_norm", 0.0)):
                raise FloatingPointError(f"the loss is not finite ({loss}); the run is aborted, nothing saved")
        # Version names count on from what this publisher registered (a restart continues the numbering).
        step = (len(self.publisher.registered()) if self.publisher.store is not None else len(self.history)) + 1
        wm = {"request": request.request_id, "tenant": request.tenant_id, "agent": request.agent_id,
              "task": request.task, "trajectories": sorted({x.trajectory_id for x in kept}), "samples": len(kept),
              "events": sorted({x.event_id for x in kept})}
        result = self.publisher.publish(policy, step=step, watermark=wm, metrics=metrics,
                                        config={"algo": s.algo.model_dump(), "lora": s.lora.model_dump(),
                                                "steps": steps, "from": start},
                                        lineage=self._lineage(request, kept, start), tenant_id=request.tenant_id,
                                        share_with=list(getattr(request, "share_with", None) or ()),
                                        request_id=request.request_id)
        if result.failed:
            raise RuntimeError(f"publishing {result.version} failed: {result.failed}")
        out = TrainedAdapter(version=result.version, path=result.path, run_id=request.request_id, steps=steps,
                             samples=len(kept), metrics=metrics, seconds=time.perf_counter() - t0, paused_s=paused)
        self.counters["runs"] += 1
        self.counters["steps"] += steps
        self.history.append({"request": request.request_id, "adapter": result.version, "steps": steps,
                             "samples": len(kept), "seconds": round(out.seconds, 2), "paused_s": round(paused, 2),
                             "reward_mean": sum(rewards) / len(rewards)})
        log.info("trainer: %s → %s (%d steps on %d samples, %.1f s, %.1f s paused for serving)",
                 request.request_id, result.version, steps, len(kept), out.seconds, paused)
        return out

    def _lineage(self, request: Any, kept: list[Any], start: str | None) -> list[Any]:
        """Whose data the adapter learned from: the trajectories of the samples trained on, and (when
        the run continued the live adapter) everything that adapter's manifest says it learned from."""
        from molt.lineage import lineage_of, read_manifest

        used = {x.trajectory_id for x in kept}
        out = list(lineage_of((t for t in [*request.trajectories, *request.anchors] if t.trajectory_id in used),
                              default_tenant=request.tenant_id))
        if start:
            out.extend(read_manifest(start).lineage)  # refuses a start adapter whose manifest was edited
        return out

    def status(self) -> dict[str, dict[str, Any]]:
        """Counters for ``molt doctor`` and ``/metrics`` (a :data:`molt.status.StatusSource`)."""
        g = self.gate
        return {"faults": {"trainer.failed_runs": self.counters["failed_runs"]},
                "state": {"trainer.runs": self.counters["runs"], "trainer.steps": self.counters["steps"],
                          "trainer.slo_budget_ms": round(g.budget_ms() or 0.0, 1),
                          "trainer.serving_p99_ms": round(g.last_p99_ms or 0.0, 1),
                          "trainer.slo_pauses": g.counters["paused"], "trainer.slo_paused_ms": g.counters["paused_ms"]}}


def gateway_trainer(store: Any, *, gateway_url: str, admin_key: str | None, model: str,
                    model_path: str | Path | None, out_dir: str | Path, slo_ms: float | None,
                    threads: int | None = None) -> RequestTrainer:
    """The trainer ``molt serve --train`` and ``molt-trainer serve --plane-requests`` run: adapters saved
    under ``out_dir`` and registered in ``store`` (loading them is the weight loop's), each step waiting
    while the gateway's p99 is over ``slo_ms`` (``None``: twice the p99 seen while not training), on
    ``threads`` torch CPU threads (``None``: torch's choice)."""
    from molt_trainer.service import GatewayLatencyProbe

    publisher = Publisher(model=model, out_dir=Path(out_dir), store=store, prefix="lora")
    gate = SloGate(probe=GatewayLatencyProbe(gateway_url, admin_key), slo_ms=slo_ms)
    run = RunSettings()
    if threads is not None:
        run = run.model_copy(update={"lora": run.lora.model_copy(update={"threads": threads})})
    return RequestTrainer(publisher, run, model_path=model_path, gate=gate)
