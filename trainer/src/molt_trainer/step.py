"""One online RL step on recorded production samples.

The textbook is GRPO / PPO as verl runs it (``verl.trainer.ppo.ray_trainer``: generate → old
log-probs → reference log-probs → advantages → clipped policy loss → update). Departures:

1. **No generation.** The rollouts are production traffic: prompt and completion token ids come from
   the recorded model calls, not from a sampler inside the trainer.
2. **The recorded log-probs are the old policy.** ``old_log_prob`` is what the serving engine
   recorded when it sampled (verl's "bypass mode"), so there is no separate old-log-prob pass; with
   one optimisation step per batch the PPO ratio is the importance ratio between the trainer and the
   serving engine.
3. **Stale samples are importance-weighted** (when staleness ``mode="is"``): truncated token-level
   weights ``min(exp(logp - logp_rollout), is_threshold)``, detached, passed to verl's loss as
   ``rollout_is_weights``; fresh samples get weight 1.
4. **The reference policy is the base model**: the same weights with the LoRA adapter disabled, for
   verl's ``kl_penalty`` added to the loss with ``kl_coef`` (``use_kl_loss`` style, not in-reward).
5. **Groups of one** are pooled or centred on a running mean before verl's estimator sees them
   (:func:`molt_trainer.data.assign_groups`).

Advantages, the policy loss, ``agg_loss`` and ``kl_penalty`` are verl's functions
(:mod:`molt_trainer.algos`).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from molt_trainer import algos
from molt_trainer.algos import AlgoSettings
from molt_trainer.data import Batch
from molt_trainer.policy import PolicyModel

__all__ = ["train_step"]


def train_step(policy: PolicyModel, batch: Batch, settings: AlgoSettings) -> dict[str, float]:
    """One optimiser step on ``batch``; returns metrics (``actor/*``, ``perf/*``)."""
    t0 = time.perf_counter()
    # Advantages once for the whole batch: group baselines need every member of a group.
    advantages, _ = algos.compute_advantages(settings, batch.token_level_rewards, batch.response_mask,
                                             batch.index)                     # (B, T), 0 off the mask
    mb = policy.settings.micro_batch
    total_tokens = float(batch.response_mask.sum())
    metrics: dict[str, Any] = {"actor/pg_loss": 0.0, "actor/kl": 0.0, "actor/ppo_kl": 0.0, "actor/pg_clipfrac": 0.0}
    for start in range(0, batch.size, mb):
        rows = slice(start, start + mb)
        micro = batch.select(rows)
        weight = float(micro.response_mask.sum()) / max(total_tokens, 1.0)    # token share of this micro-batch
        log_prob = policy.token_logprobs(micro)                                 # (b, T), grad through LoRA
        is_weights = _stale_weights(log_prob, micro, settings)                  # (b, T) or None
        pg_loss, pg_metrics = algos.compute_policy_loss(
            settings, old_log_prob=micro.rollout_logprobs, log_prob=log_prob, advantages=advantages[rows],
            response_mask=micro.response_mask, rollout_is_weights=is_weights)
        loss = pg_loss
        if settings.kl_coef > 0:
            ref = policy.ref_logprobs(micro)                                    # (b, T) base model, no grad
            kl_mat = algos.kl_penalty(log_prob, ref, settings.kl_penalty)      # (b, T)
            kl = algos.agg_loss(kl_mat, micro.response_mask, settings.loss_agg_mode)
            loss = loss + settings.kl_coef * kl
            metrics["actor/kl"] += float(kl.detach()) * weight
        (loss * weight).backward()
        metrics["actor/pg_loss"] += float(pg_loss.detach()) * weight
        for k in ("actor/ppo_kl", "actor/pg_clipfrac"):
            if k in pg_metrics:
                metrics[k] += float(pg_metrics[k]) * weight
    grad_norm = policy.clip_and_step()
    dt = time.perf_counter() - t0
    scores = batch.token_level_rewards.sum(-1)
    metrics.update({
        "actor/grad_norm": grad_norm,
        "critic/score_mean": float(scores.mean()),
        "critic/advantage_abs_mean": float((advantages.abs() * batch.response_mask).sum() / max(total_tokens, 1.0)),
        "perf/samples": float(batch.size),
        "perf/tokens": float(batch.num_tokens),
        "perf/completion_tokens": total_tokens,
        "perf/step_s": dt,
        "perf/tokens_per_s": batch.num_tokens / dt if dt > 0 else 0.0,
    })
    return metrics


def _stale_weights(log_prob: torch.Tensor, micro: Batch, settings: AlgoSettings) -> torch.Tensor | None:
    """Truncated token-level IS weights for stale rows, 1 elsewhere; ``None`` when none is stale."""
    if not bool(micro.stale.any()):
        return None
    with torch.no_grad():
        ratio = torch.exp(torch.clamp(log_prob - micro.rollout_logprobs, -20.0, 20.0)).clamp(max=settings.is_threshold)
    ones = torch.ones_like(ratio)
    return torch.where(micro.stale.unsqueeze(-1), ratio, ones) * micro.response_mask
