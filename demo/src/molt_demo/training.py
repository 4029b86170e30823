"""``molt demo --train``: the control plane's weight-update hook, training for real.

When the plane decides that only new weights close a failure cluster, it calls the hook with the
candidate. For ``molt-math`` (served by SmolLM2 on the gateway's local backend) :class:`WeightTrainer`:

1. reads the agent's newest rewarded trajectories from the store — the token ids and log-probs the
   gateway recorded when it served them (:func:`molt_trainer.data.build_samples`);
2. takes ``steps`` optimiser steps on them (:func:`molt_trainer.step.train_step`: verl's GRPO
   advantages and PPO-clip loss, a peft LoRA on the base model), the batch reused across steps like
   verl's PPO epochs;
3. publishes the adapter (:class:`molt_trainer.publish.Publisher` → :class:`~molt_trainer.publish.BackendTarget`:
   saved, hot-loaded into the serving backend, registered with its data watermark) and returns its
   :class:`~molt.control.versions.ModelPart`; the plane canaries a version with it and promotes it if
   the canary does not do worse.

The adapter is shared: the weights serve every tenant, so a second tenant asking for the same base
model gets the adapter already trained (the cluster recurs across tenants, which is why the plane chose
weights). When the recorded rewards hold no contrast yet (every sample failed: nothing to learn from)
the hook raises :class:`~molt.errors.InterventionError`: the plane logs a no-op and asks again next
cycle, on more traffic. ``budget`` adapters are trained in a run at most; later requests, and requests
for agents served by the scripted desk model (no weights to train), are recorded as requested, as
without a trainer. ``molt_trainer`` is imported on first use, so the quick demo does not need it.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from pathlib import Path
from typing import Any

import orjson

from molt.atdp.ids import new_id
from molt.control.versions import ModelPart
from molt.errors import InterventionError
from molt.lineage import Lineage, lineage_from_store
from molt.store import Filter

__all__ = ["WeightTrainer"]

log = logging.getLogger("molt_demo")


class WeightTrainer:
    """The plane's ``trainer`` hook for the demo (see the module docstring).

    Args:
        store: the demo's store (recorded trajectories; published versions are registered there).
        backend: the serving :class:`molt.backends.LocalBackend` adapters are hot-loaded into (the
            plane replays ``agent`` on it too, so replays see the adapter as well).
        model_dir: the policy model directory the backend serves.
        out_dir: where adapter directories are written.
        agent: the agent whose weights this trainer can change (default ``molt-math``).
        model: the public model name the versions are named after.
        steps: optimiser steps per adapter (default 4). ``max_trajectories``: newest trajectories
            trained on (default 32). ``lr``: LoRA learning rate (default 4e-3). ``budget``: adapters
            per run (default 2: when the first adapter leaves failures, the plane asks again under the new
            model part and the second step of the online loop trains on the adapter's own traffic).
    """

    def __init__(self, store: Any, backend: Any, model_dir: Path, out_dir: Path, *, agent: str, model: str,
                 steps: int = 4, max_trajectories: int = 32, lr: float = 4e-3, budget: int = 2):
        self.store = store
        self.backend = backend
        self.model_dir = Path(model_dir)
        self.out_dir = Path(out_dir)
        self.agent = agent
        self.model = model
        self.steps = steps
        self.max_trajectories = max_trajectories
        self.lr = lr
        self.budget = budget
        self.requests: list[dict[str, Any]] = []
        self._published: dict[bytes, ModelPart] = {}
        self._policy: Any = None
        self._publisher: Any = None
        self._trained_on: tuple[Any, ...] = ()  # the lineage of every sample the policy learned from

    def __call__(self, tenant: str, agent: str, cand: Any) -> str | ModelPart:
        """The hook: a published adapter's model part, or a request id when nothing is trained."""
        entry: dict[str, Any] = {"request": "train-" + new_id()[-8:], "tenant": tenant, "agent": agent,
                                 "task": cand.payload.get("task"), "trajectories": len(cand.source_trajectories)}
        self.requests.append(entry)
        if agent != self.agent:
            entry["outcome"] = "requested"
            return str(entry["request"])
        live = cand.payload.get("model") or {"base": self.model}
        key = orjson.dumps(live, option=orjson.OPT_SORT_KEYS)
        if key in self._published:
            part = self._published[key]
            entry.update(outcome="shared", adapter=part.adapter)
            return part
        if sum(1 for r in self.requests if r.get("outcome") == "trained") >= self.budget:
            entry["outcome"] = "budget"
            return str(entry["request"])
        # The plane calls the hook from inside its event loop; training and the backend's adapter load
        # (which runs its own loop) go to a worker thread.
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="molt-demo-trainer") as pool:
            try:
                got = pool.submit(self._train, entry).result()
            except Exception as exc:  # the plane logs a failed apply as a no-op; the demo goes on
                log.exception("Training %s failed.", self.agent)
                entry.update(outcome="failed", error=f"{type(exc).__name__}: {exc}")
                raise InterventionError(f"Training {self.agent} failed: {exc}.") from exc
        if got is None:
            entry["outcome"] = "deferred"
            raise InterventionError(f"Not training {self.agent} yet: {entry['error']}; the plane asks again next "
                                    f"cycle, on more traffic.")
        version, path = got
        part = ModelPart(base=str(live.get("base") or self.model), adapter=version, adapter_path=str(path))
        self._published[key] = part
        entry.update(outcome="trained", adapter=version)
        return part

    def _train(self, entry: dict[str, Any]) -> tuple[str, Path] | None:
        from molt_trainer.algos import AlgoSettings
        from molt_trainer.data import assign_groups, build_samples, collate
        from molt_trainer.policy import LoraSettings, PolicyModel
        from molt_trainer.publish import BackendTarget, Publisher
        from molt_trainer.step import train_step

        t0 = time.perf_counter()
        ids = sorted(self.store.trajectory_ids(Filter(agent_id=self.agent)))[-self.max_trajectories:]
        trajs = [self.store.trajectory(t) for t in ids]  # UUIDv7 ids: sorted is oldest first
        samples, stats = build_samples(trajs, group_by="task")
        kept, index, rewards = assign_groups(samples)
        entry.update(samples=len(kept), skipped=dict(stats.skipped),
                     reward_before=sum(s.reward for s in kept) / len(kept) if kept else None)
        if len(kept) < 2 or len(set(rewards)) < 2:
            entry["error"] = f"{len(kept)} recorded samples, all rewarded {sorted(set(rewards))} (no contrast)"
            return None
        if self._policy is None:
            self._policy = PolicyModel.load(LoraSettings(rank=8, lr=self.lr, micro_batch=16), self.model_dir)
            self._publisher = Publisher(model=self.model, out_dir=self.out_dir, store=self.store, agent_id=self.agent,
                                        targets=[BackendTarget(self.backend)])
        algo = AlgoSettings(advantage="grpo", policy_loss="vanilla")
        batch = collate(kept, rewards, index, pad_id=self._policy.pad_id)
        metrics: dict[str, float] = {}
        for _ in range(self.steps):
            metrics = train_step(self._policy, batch, algo)
        n = len(self._publisher.published) + 1
        wm = {"trajectories": sorted({s.trajectory_id for s in kept}), "samples": len(kept)}
        # the policy continues across rounds: its adapter learned from every round's samples, of these tenants
        lineage = Lineage.merge([*self._trained_on, *lineage_from_store(self.store, wm["trajectories"])])
        result = self._publisher.publish(self._policy, step=n, watermark=wm, metrics=metrics,
                                         config={"algo": algo.model_dump(), "lora": self._policy.settings.model_dump(),
                                                 "steps": self.steps},
                                         lineage=lineage,
                                         share_with=sorted({x.tenant_id for x in lineage if x.tenant_id}))
        self._trained_on = lineage
        entry.update(steps=self.steps, seconds=round(time.perf_counter() - t0, 1), adapter_path=str(result.path),
                     grad_norm=metrics.get("actor/grad_norm"))
        if not result.live:
            raise RuntimeError(f"publishing {result.version} failed: {result.failed}")
        return result.version, result.path
