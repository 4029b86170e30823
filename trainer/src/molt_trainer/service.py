"""The online trainer service: read eligible trajectories as a stream, decide when to train, train,
publish — sharing the machine with serving.

Each :meth:`OnlineTrainer.tick`:

1. reads trajectories active since the watermark (minus ``lateness_s``, so late rewards are joined)
   from the :class:`Source` — by default the governance training queue, i.e. only eligible,
   redacted trajectories; trajectories already trained on are skipped, unrewarded ones wait up to
   ``reward_timeout_s`` for a late reward;
2. builds samples (:mod:`molt_trainer.data`) and adds them to the pending pool;
3. trains only when the pool holds ``min_samples`` fresh samples **and** serving is within its
   latency SLO: when the serving p99 (from ``latency_probe``, e.g. the gateway's ``/metrics``) is over
   the budget the step is deferred (paused) and the service sleeps ``throttle_s``. The pause is on by
   default: the budget is ``latency_slo_ms`` when given (the gateway's p99 budget), else
   ``slo_factor`` × the p99 measured while the trainer was not training (what this machine serves
   at without training, whatever its hardware); ``pause_for_serving=False`` turns it off;
4. takes one step (:func:`molt_trainer.step.train_step`) on up to ``max_batch`` samples, publishes
   the adapter (:class:`molt_trainer.publish.Publisher`) and advances the staleness clock.

Between ticks the service waits for its next batch at the rate data arrives: the inflow of eligible
samples (an exponential moving average of samples per second read) gives the time until
``min_samples`` are pending, clamped to ``[poll_s, max_idle_s]`` — no busy polling of an empty queue.

A step is all or nothing. Samples are *claimed* when a step takes them and *acknowledged* when the
publisher registers the version trained on them (its ``policy_versions`` row lists their event
ids). A step that raises part-way — in the forward/backward pass, the optimiser, or saving the
adapter — is rolled back: the LoRA weights and optimiser state return to their snapshot, the
claimed samples go back to the pool, nothing is published, and :meth:`OnlineTrainer.run` counts the
failure and carries on. After a restart (a crash that killed the process), :meth:`OnlineTrainer.resume`
reads the acknowledgements back: acknowledged samples are never trained on again, claimed but
unacknowledged ones are read again from the source, the step count and the adapter continue.

:meth:`OnlineTrainer.metrics` reports training, data, publishing and scheduling counters (Prometheus
text with :meth:`OnlineTrainer.render_metrics`).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx
from pydantic import BaseModel, ConfigDict, Field

from molt.lineage import Lineage, lineage_from_store, read_manifest
from molt.store.query import Trajectory
from molt_trainer.algos import AlgoSettings
from molt_trainer.data import DataStats, RunningMean, Sample, Staleness, assign_groups, build_samples, collate
from molt_trainer.policy import LoraSettings, PolicyModel
from molt_trainer.publish import Publisher
from molt_trainer.step import train_step

__all__ = ["AgentSource", "GatewayLatencyProbe", "GovernedSource", "OnlineTrainer", "Source", "StoreSource",
           "TrainerSettings"]

log = logging.getLogger("molt.trainer")


class TrainerSettings(BaseModel):
    """What the service trains and when.

    - ``algo`` / ``lora``: :class:`~molt_trainer.algos.AlgoSettings`, :class:`~molt_trainer.policy.LoraSettings`.
    - ``min_samples``: fresh samples needed before a step (default 16; ≥ 1). ``max_batch``: samples per
      step at most (default 64), oldest first.
    - ``gamma``: per-turn discount of a final reward (default 1.0). ``group_by``: ``prompt`` | ``task``.
    - ``max_lag`` / ``staleness``: versions a sample may lag (default 2) and what to do past it
      (``drop`` | ``is``). ``max_tokens``: longer samples are skipped (default 2,048).
    - ``lateness_s``: how far before the watermark to re-read for late rewards (default 300 s);
      ``reward_timeout_s``: how long an unrewarded trajectory waits (default 3,600 s).
    - ``pause_for_serving``: pause training while serving is over its latency budget (default on);
      ``latency_slo_ms``: the budget, the serving p99 in ms (default ``None``: ``slo_factor`` (2.0) ×
      the p99 measured while not training); ``throttle_s``: sleep while paused (default 5 s).
    - ``poll_s`` / ``max_idle_s``: the shortest and longest wait for new data (default 2 s / 15 ×
      ``poll_s``); in between, the wait follows the inflow of samples.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    algo: AlgoSettings = AlgoSettings()
    lora: LoraSettings = LoraSettings()
    min_samples: int = Field(default=16, ge=1)
    max_batch: int = Field(default=64, ge=1)
    gamma: float = Field(default=1.0, gt=0.0, le=1.0)
    group_by: Literal["prompt", "task"] = "prompt"
    max_lag: int = Field(default=2, ge=0)
    staleness: Literal["drop", "is"] = "drop"
    max_tokens: int = Field(default=2048, ge=2)
    lateness_s: float = Field(default=300.0, ge=0.0)
    reward_timeout_s: float = Field(default=3600.0, ge=0.0)
    pause_for_serving: bool = True
    latency_slo_ms: float | None = Field(default=None, gt=0.0)
    slo_factor: float = Field(default=2.0, gt=1.0)
    throttle_s: float = Field(default=5.0, ge=0.0)
    poll_s: float = Field(default=2.0, gt=0.0)
    max_idle_s: float | None = Field(default=None, gt=0.0)


class Source(Protocol):
    """Where trajectories come from: those active since ``since`` (``None``: all)."""

    def read(self, since: datetime | None) -> list[Trajectory]:
        """Trajectories with events at or after ``since``, late rewards joined."""


class GovernedSource:
    """The governance training queue: eligible, redacted trajectories only (the default read path)."""

    def __init__(self, queue: Any):
        self.queue = queue

    def read(self, since: datetime | None) -> list[Trajectory]:
        return list(self.queue.eligible_trajectories(since=since))


class StoreSource:
    """Trajectories straight from a store, filtered by ``eligible`` (default: all).

    For development and tests without a governance policy; production uses :class:`GovernedSource`.
    """

    def __init__(self, store: Any, eligible: Callable[[Trajectory], bool] | None = None, *, tenant: str | None = None):
        self.store = store
        self.eligible = eligible or (lambda t: True)
        self.tenant = tenant

    def read(self, since: datetime | None) -> list[Trajectory]:
        from molt.store import Filter

        where = Filter() if since is None else Filter().since("ts", since)
        if self.tenant is not None:
            where = where.where(tenant_id=self.tenant)
        out = []
        for tid in self.store.trajectory_ids(where):
            t = self.store.trajectory(tid)
            if self.eligible(t):
                out.append(t)
        out.sort(key=lambda t: t.events[0].timestamp if t.events else datetime.min.replace(tzinfo=UTC))
        return out


class AgentSource:
    """The trajectories of one agent (``agent_id`` of their first event) from another :class:`Source`."""

    def __init__(self, source: Source, agent_id: str):
        self.source = source
        self.agent_id = agent_id

    def read(self, since: datetime | None) -> list[Trajectory]:
        return [t for t in self.source.read(since) if t.events and t.events[0].metadata.agent_id == self.agent_id]


class GatewayLatencyProbe:
    """Serving p99 latency (ms) since the previous call, from the gateway's Prometheus ``/metrics``
    (``molt_gateway_request_duration_seconds`` buckets, differenced between scrapes)."""

    _LINE = re.compile(r'^molt_gateway_request_duration_seconds_bucket\{endpoint="([^"]*)",le="([^"]+)"\} (\d+)')

    def __init__(self, url: str, key: str | None = None, endpoint: str = "/v1/chat/completions"):
        self.url = url.rstrip("/") + "/metrics"
        self.headers = {"authorization": f"Bearer {key}"} if key else {}
        self.endpoint = endpoint
        self._prev: dict[float, int] = {}

    def __call__(self) -> float | None:
        try:
            text = httpx.get(self.url, headers=self.headers, timeout=5.0).text
        except httpx.HTTPError:
            return None
        now: dict[float, int] = {}
        for line in text.splitlines():
            m = self._LINE.match(line)
            if m and m.group(1) == self.endpoint:
                now[float("inf") if m.group(2) == "+Inf" else float(m.group(2))] = int(m.group(3))
        delta = {le: c - self._prev.get(le, 0) for le, c in now.items()}
        self._prev = now
        total = max(delta.values(), default=0)
        if total <= 0:
            return None
        for le in sorted(delta):
            if delta[le] >= 0.99 * total:
                return le * 1000.0
        return None


class OnlineTrainer:
    """The online RL loop over a :class:`Source`, a :class:`Policy` and a :class:`Publisher`.

    With ``resume`` (the default) a trainer whose publisher has a store continues where the last one
    stopped (see :meth:`resume`); ``resume=False`` starts from step 0 whatever is registered."""

    def __init__(self, policy: PolicyModel, publisher: Publisher, source: Source, settings: TrainerSettings | None = None,
                 *, base_version: str | None = None, latency_probe: Callable[[], float | None] | None = None,
                 resume: bool = True):
        self.policy = policy
        self.publisher = publisher
        self.source = source
        self.settings = settings or TrainerSettings()
        s = self.settings
        self.staleness = Staleness(versions={base_version: 0} if base_version else {}, max_lag=s.max_lag,
                                   mode=s.staleness)
        self.latency_probe = latency_probe
        self.baseline = RunningMean()
        self.watermark: datetime | None = None
        self.pending: list[Sample] = []
        self._seen: OrderedDict[str, None] = OrderedDict()
        self.data_stats = DataStats()
        self.counters: Counter[str] = Counter()
        self.history: list[dict[str, float]] = []
        self.last_p99_ms: float | None = None
        self.idle_p99_ms: float | None = None  # serving p99 while this trainer was not training
        self.inflow_per_s: float | None = None  # eligible samples read per second (moving average)
        self.next_wait_s: float = self.settings.poll_s
        self._trained_since_probe = False
        self._last_poll: float | None = None
        self.step = 0
        self._acked: set[str] = set()  # event ids trained on in an earlier life (see resume)
        #: whose data the policy's weights learned from so far (the lineage each published manifest states)
        self.trained_on: tuple[Lineage, ...] = ()
        if resume:
            self.resume()

    # ------------------------------------------------------------------ restart

    def resume(self) -> int:
        """Continue from the versions this trainer's publisher registered before (a restart): their
        samples are acknowledged (never trained on again), the step count and staleness clock
        continue, and the policy starts from the last registered adapter. Returns the samples
        acknowledged; 0 on a first start or without a store."""
        done = self.publisher.registered()
        for v in done:
            wm = v["parts"].get("watermark") or {}
            self._acked.update(wm.get("events") or ())
            if v["parts"].get("live_on") or not self.publisher.targets:
                self.staleness.advance(v["version_id"])
                self.publisher.published.append(v["version_id"])
        if not done:
            return 0
        last = done[-1]["parts"]
        self.step = int(last.get("step") or 0)
        adapter = last.get("lora_adapter")
        if adapter and Path(adapter, "adapter_model.safetensors").exists():
            self.trained_on = read_manifest(adapter).lineage  # continuing it continues its lineage
            self.policy.load_adapter_weights(adapter)
        self.counters["resumed_versions"] = len(done)
        log.info("trainer: resumed after step %d (%d versions registered, %d samples acknowledged, adapter %s)",
                 self.step, len(done), len(self._acked), adapter)
        return len(self._acked)

    # ------------------------------------------------------------------ reading

    def poll(self) -> int:
        """Read new trajectories into the pending pool; returns the samples added."""
        since = None if self.watermark is None else self.watermark - timedelta(seconds=self.settings.lateness_s)
        now = datetime.now(UTC)
        fresh: list[Trajectory] = []
        for t in self.source.read(since):
            if t.trajectory_id in self._seen or not t.events:
                continue
            rewarded = t.rewards or any(e.reward is not None for e in t.events)
            last = max(e.timestamp for e in t.events)
            if not rewarded and (now - last).total_seconds() < self.settings.reward_timeout_s:
                continue  # wait for a late reward
            fresh.append(t)
        samples, _ = build_samples(fresh, gamma=self.settings.gamma, group_by=self.settings.group_by,
                                   staleness=self.staleness, max_tokens=self.settings.max_tokens,
                                   stats=self.data_stats)
        for t in fresh:
            self._seen[t.trajectory_id] = None
            last = max(e.timestamp for e in t.events)
            self.watermark = last if self.watermark is None else max(self.watermark, last)
        while len(self._seen) > 1_000_000:
            self._seen.popitem(last=False)
        if self._acked:
            kept = [x for x in samples if x.event_id not in self._acked]
            self.counters["skipped_acknowledged"] += len(samples) - len(kept)
            samples = kept
        self.pending.extend(samples)
        tick_at = time.monotonic()
        if self._last_poll is not None and tick_at > self._last_poll:
            rate = len(samples) / (tick_at - self._last_poll)
            self.inflow_per_s = rate if self.inflow_per_s is None else 0.7 * self.inflow_per_s + 0.3 * rate
        self._last_poll = tick_at
        return len(samples)

    def idle_wait_s(self) -> float:
        """How long to wait for the next batch: the time the inflow needs to bring ``min_samples``,
        within ``[poll_s, max_idle_s]`` (the longest when nothing arrives)."""
        s = self.settings
        longest = s.max_idle_s or 15 * s.poll_s
        missing = max(0, s.min_samples - len(self.pending))
        if not missing or self.inflow_per_s is None:
            return s.poll_s
        if self.inflow_per_s <= 0.0:
            return longest
        # A quiet queue's moving average decays towards 0, so the wait grows: a back-off that the next
        # arrivals undo at once.
        return min(longest, max(s.poll_s, missing / self.inflow_per_s))

    # ------------------------------------------------------------------ scheduling

    def slo_budget_ms(self) -> float | None:
        """The serving p99 above which training pauses (``None``: no budget yet, or the pause is off)."""
        s = self.settings
        if not s.pause_for_serving:
            return None
        if s.latency_slo_ms is not None:
            return s.latency_slo_ms
        return None if self.idle_p99_ms is None else s.slo_factor * self.idle_p99_ms

    def serving_ok(self) -> bool:
        """Whether serving latency is within the budget (no probe, no reading or no budget: yes). A
        reading taken when no step ran since the previous one updates the not-training p99."""
        if self.latency_probe is None or not self.settings.pause_for_serving:
            return True
        p99 = self.latency_probe()
        if p99 is not None:
            self.last_p99_ms = p99
            if not self._trained_since_probe:
                self.idle_p99_ms = p99 if self.idle_p99_ms is None else 0.8 * self.idle_p99_ms + 0.2 * p99
        self._trained_since_probe = False
        budget = self.slo_budget_ms()
        return p99 is None or budget is None or p99 <= budget

    def ready(self) -> bool:
        """Enough fresh samples for a step."""
        return len(self.pending) >= self.settings.min_samples

    # ------------------------------------------------------------------ one step

    def _lineage_with(self, trajectories: Sequence[str]) -> tuple[Lineage, ...]:
        store = self.publisher.store
        new = (lineage_from_store(store, trajectories) if store is not None
               else (Lineage.of(self.publisher.tenant_id, trajectories),))
        return Lineage.merge([*self.trained_on, *new])

    def train(self) -> dict[str, float] | None:
        """One step on the pending samples and publish; ``None`` when nothing was trainable.

        All or nothing: when the step or saving the adapter raises, the policy is rolled back, the
        samples return to the pool, ``step_failures`` is counted and the error re-raised."""
        s = self.settings
        take, self.pending = self.pending[: s.max_batch], self.pending[s.max_batch:]
        kept, index, rewards = assign_groups(take, self.baseline, self.data_stats)
        if not kept:
            self.counters["empty_batches"] += 1
            log.info("trainer: no trainable sample in a batch of %d (groups of one without a baseline)", len(take))
            return None
        snap = self.policy.snapshot()
        try:
            batch = collate(kept, rewards, index, pad_id=self.policy.pad_id).to(self.policy.device)
            metrics = train_step(self.policy, batch, s.algo)
            # The acknowledgement: what the version was trained on, every claimed sample included.
            trained = sorted({x.trajectory_id for x in take})
            wm: dict[str, Any] = {"watermark": self.watermark.isoformat() if self.watermark else None,
                                  "trajectories": trained, "samples": len(kept),
                                  "events": sorted({x.event_id for x in take})}
            lineage = self._lineage_with(trained)
            owner = self.publisher.tenant_id
            # a trainer serving every tenant states whose data its one adapter holds: shared with exactly them
            shared = sorted({x.tenant_id for x in lineage if x.tenant_id}) if owner is None else []
            result = self.publisher.publish(self.policy, step=self.step + 1, watermark=wm, metrics=metrics,
                                            config={"algo": s.algo.model_dump(), "lora": s.lora.model_dump()},
                                            lineage=lineage, share_with=shared)
        except Exception:
            self.policy.restore(snap)
            self.pending = take + self.pending
            self.counters["step_failures"] += 1
            raise
        self.step += 1
        self.trained_on = lineage
        self._trained_since_probe = True
        self._acked.update(wm["events"])
        if result.live or not self.publisher.targets:
            self.staleness.advance(result.version)
        metrics.update({"step": float(self.step), "publish/serve_s": result.serve_s, "publish/save_s": result.save_s,
                        "publish/ok": float(result.ok), "reward/mean": float(sum(x.reward for x in kept) / len(kept))})
        self.history.append(metrics)
        self.counters["steps"] += 1
        log.info("trainer: step %d on %d samples (%d tokens, %.0f tok/s), published %s live on %s in %.2fs",
                 self.step, len(kept), batch.num_tokens, metrics["perf/tokens_per_s"], result.version,
                 ",".join(result.live) or "nothing", result.serve_s)
        return metrics

    def tick(self) -> dict[str, float] | None:
        """Poll, then train if ready and serving allows; returns the step's metrics if one ran."""
        self.poll()
        if not self.ready():
            if self.latency_probe is not None:
                self.serving_ok()  # a reading while not training: the automatic budget follows serving
            return None
        if not self.serving_ok():
            self.counters["paused_for_slo"] += 1
            log.info("trainer: %d samples ready but serving p99 %.0f ms is over the %.0f ms SLO; pausing",
                     len(self.pending), self.last_p99_ms or -1, self.settings.latency_slo_ms or -1)
            return None
        return self.train()

    def run(self, stop: threading.Event, max_steps: int | None = None) -> None:
        """Tick until ``stop`` is set (or ``max_steps`` steps ran), sleeping when idle or paused.

        A tick that raises (the source unreadable, a step that failed and was rolled back) is logged
        and counted as a ``crash``; the loop sleeps ``throttle_s`` and tries again, so serving never
        loses its trainer to one bad step."""
        while not stop.is_set():
            before = self.counters["paused_for_slo"]
            try:
                m = self.tick()
            except Exception:
                self.counters["crashes"] += 1
                log.exception("trainer: a tick failed (%d so far); rolled back, retrying in %.0f s",
                              self.counters["crashes"], self.settings.throttle_s)
                stop.wait(self.settings.throttle_s)
                continue
            if max_steps is not None and self.step >= max_steps:
                return
            if m is None:
                paused = self.counters["paused_for_slo"] > before
                self.next_wait_s = self.settings.throttle_s if paused else self.idle_wait_s()
                stop.wait(self.next_wait_s)

    # ------------------------------------------------------------------ metrics

    def metrics(self) -> dict[str, float]:
        """Counters and the last step's metrics, flat."""
        out: dict[str, float] = {"trainer/steps": float(self.step), "trainer/pending_samples": float(len(self.pending))}
        out.update({f"trainer/{k}": float(v) for k, v in self.counters.items()})
        out.update({f"trainer/{k}": float(v) for k, v in self.publisher.counters.items()})
        out.update(self.data_stats.as_metrics())
        if self.last_p99_ms is not None:
            out["serving/p99_ms"] = self.last_p99_ms
        budget = self.slo_budget_ms()
        if budget is not None:
            out["serving/slo_budget_ms"] = budget
        out["trainer/inflow_samples_per_s"] = self.inflow_per_s or 0.0
        out["trainer/next_wait_s"] = self.next_wait_s
        if self.history:
            out.update({f"last/{k}": v for k, v in self.history[-1].items()})
        return out

    def fault_status(self) -> dict[str, dict[str, Any]]:
        """Fault counters and backlog for ``molt doctor`` (a :data:`molt.status.StatusSource`)."""
        return {"faults": {"trainer.crashes": self.counters["crashes"],
                           "trainer.step_failures": self.counters["step_failures"],
                           "trainer.publish_failures": self.publisher.counters["publish_failures"]},
                "state": {"trainer.steps": self.step, "trainer.pending_samples": len(self.pending),
                          "trainer.paused_for_slo": self.counters["paused_for_slo"],
                          "trainer.slo_budget_ms": round(self.slo_budget_ms() or 0.0, 1),
                          "trainer.serving_p99_ms": round(self.last_p99_ms or 0.0, 1),
                          "trainer.inflow_samples_per_s": round(self.inflow_per_s or 0.0, 3),
                          "trainer.next_wait_s": round(self.next_wait_s, 2)}}

    def render_metrics(self) -> str:
        """The metrics in Prometheus text format (``molt_trainer_*`` gauges)."""
        lines = []
        for k, v in sorted(self.metrics().items()):
            name = "molt_trainer_" + re.sub(r"[^a-zA-Z0-9_]", "_", k)
            lines.append(f"{name} {v}")
        return "\n".join(lines) + "\n"


def default_policy(settings: TrainerSettings, model_path: str | None = None) -> PolicyModel:
    """The LoRA policy for ``settings`` on ``model_path`` (default: the SmolLM2 policy)."""
    return PolicyModel.load(settings.lora, model_path)


def samples_summary(samples: Sequence[Sample]) -> dict[str, Any]:
    """Counts of a list of samples (for logs)."""
    return {"samples": len(samples), "groups": len({s.group for s in samples})}
