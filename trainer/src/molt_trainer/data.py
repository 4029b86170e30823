"""Recorded trajectories → training samples → padded tensors.

The gateway records every model call with the exact prompt token ids, the sampled completion ids, the
sampling policy's log-probability of each sampled token and the policy version that sampled them
(:class:`molt.atdp.TokenTrace`). A training sample is one such call, taken as recorded:

1. **Tokens.** ``prompt_ids + completion_ids`` exactly as served — never re-tokenized text. The loss
   mask covers the completion only: tool results, user turns and the system prompt live in the
   prompt (the next call's prompt carries them) and are never trained on.
2. **Credit assignment.** A call's reward is its own reward where one is known (inline on the event,
   or a late :class:`~molt.atdp.RewardAnnotation` pointing at it); otherwise the trajectory's final
   reward (annotations on the trajectory, inline rewards of non-model events), discounted by
   ``gamma ** (turns after this one)``.
3. **Groups.** Samples with the same prompt (by default the exact prompt token ids; or the recorded
   ``metadata.task``) form a group for group-relative advantages. Groups of one have no baseline:
   they are pooled into one batch-level group, and a lone leftover is centred on a running mean of
   past rewards (or dropped while there is none), instead of getting a raw-score advantage.
4. **Staleness.** Each sample's policy version is compared with the trainer's current one; samples
   more than ``max_lag`` versions old are dropped (``mode="drop"``) or kept with truncated
   importance weights from their recorded log-probabilities (``mode="is"``).

Bad input is skipped, logged once per trajectory and counted in :class:`DataStats`: calls without
token ids (framework adapters record text only), without log-probabilities, with empty completions,
trajectories with NaN/inf rewards or no reward at all.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from molt.atdp.models import EventKind, Generation
from molt.store.query import Trajectory

__all__ = ["Batch", "DataStats", "Sample", "Staleness", "assign_groups", "build_samples", "collate"]

log = logging.getLogger("molt.trainer.data")


@dataclass(slots=True)
class Sample:
    """One recorded model call, ready to train on."""

    prompt_ids: list[int]
    completion_ids: list[int]
    rollout_logprobs: list[float]
    reward: float
    trajectory_id: str
    event_id: str
    turn: int
    turns: int
    group: str
    policy_version: str | None = None
    task: str | None = None
    stale: bool = False

    @property
    def num_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return len(self.prompt_ids) + len(self.completion_ids)


@dataclass
class DataStats:
    """What :func:`build_samples` took and skipped (``skipped`` is keyed by reason)."""

    trajectories: int = 0
    samples: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    def as_metrics(self) -> dict[str, float]:
        """Flat ``data/...`` metrics."""
        out = {"data/trajectories": float(self.trajectories), "data/samples": float(self.samples)}
        out.update({f"data/skipped_{k}": float(v) for k, v in sorted(self.skipped.items())})
        return out


@dataclass
class Staleness:
    """Staleness control by policy version.

    ``versions`` maps policy version ids to their step (the base model is step 0; the trainer adds
    each version it publishes). A sample is stale when ``current - step > max_lag``. ``mode="drop"``
    drops stale samples; ``mode="is"`` keeps them and the loss weights them by truncated importance
    ratios computed from their recorded log-probabilities. Versions the trainer does not know
    (``unknown``) are kept as fresh or dropped.
    """

    versions: dict[str, int] = field(default_factory=dict)
    current: int = 0
    max_lag: int = 2
    mode: Literal["drop", "is"] = "drop"
    unknown: Literal["keep", "drop"] = "keep"

    def advance(self, version: str) -> None:
        """Record a newly published version as the current one."""
        self.current += 1
        self.versions[version] = self.current

    def lag(self, version: str | None) -> int | None:
        """Versions between ``version`` and the current one (``None``: unknown version)."""
        if version is None or version not in self.versions:
            return None
        return self.current - self.versions[version]


def _prompt_key(ids: Sequence[int]) -> str:
    return hashlib.blake2b(np.asarray(ids, dtype=np.int64).tobytes(), digest_size=12).hexdigest()


def _finite(x: float | None) -> bool:
    return x is None or math.isfinite(x)


def _trajectory_samples(traj: Trajectory, *, gamma: float, group_by: str, stats: DataStats,
                        staleness: Staleness | None) -> list[Sample]:
    calls = [e for e in traj.events if e.kind == EventKind.MODEL_CALL and isinstance(e.action, Generation)]
    if not calls:
        stats.skipped["no_model_calls"] += 1
        return []
    call_ids = {e.event_id for e in calls}
    inline = [e.reward for e in traj.events]
    late = [a.value for a in traj.rewards]
    if not all(_finite(x) for x in inline + late):
        stats.skipped["nonfinite_reward"] += 1
        log.warning("trainer: skipping trajectory %s: a reward is NaN or infinite", traj.trajectory_id)
        return []
    per_call: dict[str, float] = {}
    final: float | None = None
    for e in traj.events:
        if e.reward is None:
            continue
        if e.event_id in call_ids:
            per_call[e.event_id] = per_call.get(e.event_id, 0.0) + e.reward
        else:
            final = (final or 0.0) + e.reward
    for a in traj.rewards:
        if a.event_id in call_ids:
            per_call[a.event_id] = per_call.get(a.event_id, 0.0) + a.value
        else:
            final = (final or 0.0) + a.value
    if final is None and not per_call:
        stats.skipped["unrewarded"] += 1
        return []

    out: list[Sample] = []
    turns = len(calls)
    for k, e in enumerate(calls):
        assert isinstance(e.action, Generation)
        tokens = e.action.tokens
        if tokens is None or not tokens.prompt_ids:
            stats.skipped["no_token_ids"] += 1
            log.info("trainer: skipping call %s of trajectory %s: no token ids were recorded (text-only "
                     "capture, e.g. a framework adapter); serve through the gateway to train on it",
                     e.event_id, traj.trajectory_id)
            continue
        if not tokens.completion_ids:
            stats.skipped["empty_completion"] += 1
            continue
        if tokens.completion_logprobs is None:
            stats.skipped["no_logprobs"] += 1
            log.info("trainer: skipping call %s: no sampling log-probabilities were recorded", e.event_id)
            continue
        if not all(math.isfinite(x) for x in tokens.completion_logprobs):
            stats.skipped["nonfinite_logprob"] += 1
            continue
        if e.event_id in per_call:
            reward = per_call[e.event_id]
        elif final is not None:
            reward = final * gamma ** (turns - 1 - k)
        else:
            stats.skipped["unrewarded_call"] += 1
            continue
        version = tokens.policy_version or e.provenance.policy_version
        stale = False
        if staleness is not None:
            lag = staleness.lag(version)
            if lag is None:
                if staleness.unknown == "drop":
                    stats.skipped["unknown_policy_version"] += 1
                    continue
            elif lag > staleness.max_lag:
                if staleness.mode == "drop":
                    stats.skipped["stale"] += 1
                    continue
                stale = True
        task = e.metadata.task
        group = f"task:{task}:{k}" if group_by == "task" and task else f"prompt:{_prompt_key(tokens.prompt_ids)}"
        out.append(Sample(prompt_ids=list(tokens.prompt_ids), completion_ids=list(tokens.completion_ids),
                          rollout_logprobs=list(tokens.completion_logprobs), reward=float(reward),
                          trajectory_id=traj.trajectory_id, event_id=e.event_id, turn=k, turns=turns, group=group,
                          policy_version=version, task=task, stale=stale))
    return out


def build_samples(trajectories: Iterable[Trajectory], *, gamma: float = 1.0, group_by: Literal["prompt", "task"] =
                  "prompt", staleness: Staleness | None = None, max_tokens: int | None = None,
                  stats: DataStats | None = None) -> tuple[list[Sample], DataStats]:
    """Samples from recorded trajectories (see the module docstring), and what was skipped.

    Example::

        samples, stats = build_samples(queue.eligible_trajectories(), gamma=0.9)
    """
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must be in (0, 1], got {gamma}.")
    stats = stats or DataStats()
    out: list[Sample] = []
    for traj in trajectories:
        stats.trajectories += 1
        for s in _trajectory_samples(traj, gamma=gamma, group_by=group_by, stats=stats, staleness=staleness):
            if max_tokens is not None and s.num_tokens > max_tokens:
                stats.skipped["too_long"] += 1
                continue
            out.append(s)
    stats.samples += len(out)
    return out, stats


class RunningMean:
    """An exponential moving average of rewards: the baseline of a lone sample."""

    def __init__(self, decay: float = 0.9):
        self.decay = decay
        self.value: float | None = None

    def update(self, xs: Sequence[float]) -> None:
        """Fold in a batch's rewards."""
        for x in xs:
            self.value = x if self.value is None else self.decay * self.value + (1 - self.decay) * x


def assign_groups(samples: list[Sample], baseline: RunningMean | None = None,
                  stats: DataStats | None = None) -> tuple[list[Sample], np.ndarray, list[float]]:
    """Group ids for verl's ``index`` argument, with the groups-of-one fallback.

    Returns ``(samples, index, rewards)``: samples in singleton groups share one pooled group; a lone
    leftover keeps its own group with its reward centred on ``baseline`` (verl gives a group of one
    mean 0 and std 1, so its advantage is exactly the centred reward), or is dropped when there is no
    baseline yet. ``rewards`` are the scalar rewards to place on each sample's last token.
    """
    sizes = Counter(s.group for s in samples)
    singles = [s for s in samples if sizes[s.group] == 1]
    kept: list[Sample] = []
    index: list[str] = []
    rewards: list[float] = []
    for s in samples:
        if sizes[s.group] > 1:
            kept.append(s)
            index.append(s.group)
            rewards.append(s.reward)
        elif len(singles) > 1:
            kept.append(s)
            index.append("pooled-singletons")
            rewards.append(s.reward)
        elif baseline is not None and baseline.value is not None:
            kept.append(s)
            index.append(s.group)
            rewards.append(s.reward - baseline.value)
        elif stats is not None:
            stats.skipped["lone_sample_no_baseline"] += 1
    if baseline is not None:
        baseline.update([s.reward for s in samples])
    return kept, np.array(index, dtype=object), rewards


@dataclass
class Batch:
    """Samples as right-padded tensors. ``T`` is the longest completion, ``L`` the longest sequence.

    ``positions[i, t]`` is where completion token ``t`` of sample ``i`` sits in the shifted
    log-probability matrix ``logp[:, :-1]`` of ``input_ids`` (position of the token minus one).
    """

    input_ids: torch.Tensor          # (B, L) prompt + completion, right-padded
    attention_mask: torch.Tensor     # (B, L)
    positions: torch.Tensor          # (B, T) index into the (B, L-1) next-token log-probs
    response_mask: torch.Tensor      # (B, T) 1 on sampled completion tokens, 0 on padding
    rollout_logprobs: torch.Tensor   # (B, T) the sampling policy's recorded log-probs
    token_level_rewards: torch.Tensor  # (B, T) the sample's reward on its last completion token
    index: np.ndarray                # (B,) group ids
    stale: torch.Tensor              # (B,) bool: older than the staleness limit (IS-weighted)
    num_tokens: int = 0              # real (unpadded) tokens in the batch

    @property
    def size(self) -> int:
        """Samples in the batch."""
        return int(self.input_ids.shape[0])

    def select(self, rows: slice) -> Batch:
        """A micro-batch (rows of every tensor)."""
        mask = self.attention_mask[rows]
        return Batch(self.input_ids[rows], mask, self.positions[rows], self.response_mask[rows],
                     self.rollout_logprobs[rows], self.token_level_rewards[rows], self.index[rows],
                     self.stale[rows], int(mask.sum()))

    def to(self, device: str | torch.device) -> Batch:
        """The batch on ``device`` (the policy's); itself when it is there already."""
        if self.input_ids.device == torch.device(device):
            return self
        return Batch(self.input_ids.to(device), self.attention_mask.to(device), self.positions.to(device),
                     self.response_mask.to(device), self.rollout_logprobs.to(device),
                     self.token_level_rewards.to(device), self.index, self.stale.to(device), self.num_tokens)


def collate(samples: Sequence[Sample], rewards: Sequence[float] | None = None, index: np.ndarray | None = None,
            *, pad_id: int = 0) -> Batch:
    """Pad samples into a :class:`Batch` (rewards and group index default to the samples' own)."""
    if not samples:
        raise ValueError("collate needs at least one sample.")
    rewards = [s.reward for s in samples] if rewards is None else list(rewards)
    index = np.array([s.group for s in samples], dtype=object) if index is None else index
    b = len(samples)
    seq_len = max(s.num_tokens for s in samples)
    resp_len = max(len(s.completion_ids) for s in samples)
    input_ids = torch.full((b, seq_len), pad_id, dtype=torch.long)
    attn = torch.zeros((b, seq_len), dtype=torch.long)
    positions = torch.zeros((b, resp_len), dtype=torch.long)
    resp_mask = torch.zeros((b, resp_len), dtype=torch.float32)
    old = torch.zeros((b, resp_len), dtype=torch.float32)
    tlr = torch.zeros((b, resp_len), dtype=torch.float32)
    for i, s in enumerate(samples):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        input_ids[i, : p + c] = torch.tensor(s.prompt_ids + s.completion_ids)
        attn[i, : p + c] = 1
        positions[i, :c] = torch.arange(p - 1, p - 1 + c)
        resp_mask[i, :c] = 1.0
        old[i, :c] = torch.tensor(s.rollout_logprobs)
        tlr[i, c - 1] = rewards[i]
    return Batch(input_ids, attn, positions, resp_mask, old, tlr, index,
                 torch.tensor([s.stale for s in samples]), int(attn.sum()))


def summary(samples: Sequence[Sample]) -> dict[str, Any]:
    """Counts for logs: samples, groups, tokens, mean reward."""
    return {"samples": len(samples), "groups": len({s.group for s in samples}),
            "tokens": sum(s.num_tokens for s in samples),
            "mean_reward": float(np.mean([s.reward for s in samples])) if samples else float("nan")}
