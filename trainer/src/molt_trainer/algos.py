"""verl's RL algorithms behind Molt's registries, called for real.

Advantage estimators and policy losses are looked up by their verl names in
``verl.trainer.ppo.core_algos`` (``get_adv_estimator_fn``, ``get_policy_loss_fn``); ``agg_loss`` and
``kl_penalty`` are verl's too. The wrappers here only build the config objects verl expects
(``AlgoConfig``, ``ActorConfig``) from :class:`AlgoSettings`; no algorithm is re-implemented.

Registered names:

- advantages (:data:`ADVANTAGES`): ``grpo``, ``rloo``, ``reinforce_plus_plus`` (and any other verl
  estimator name through :func:`advantage_fn`);
- policy losses (:data:`POLICY_LOSSES`): ``vanilla`` (PPO-clip, ratio against the recorded rollout
  log-probs), ``bypass_mode`` (verl's rollout-correction loss: the recorded log-probs *are* the old
  policy; ``loss_type`` ``ppo_clip`` or ``reinforce`` with truncated IS weights).

Example::

    settings = AlgoSettings(advantage="grpo", policy_loss="vanilla")
    adv, _ = compute_advantages(settings, token_level_rewards, response_mask, index)
    loss, metrics = compute_policy_loss(settings, old_log_prob, log_prob, adv, response_mask)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from molt.registry import Registry

__all__ = [
    "ADVANTAGES",
    "POLICY_LOSSES",
    "AlgoSettings",
    "actor_config",
    "advantage_fn",
    "agg_loss",
    "algo_config",
    "compute_advantages",
    "compute_policy_loss",
    "kl_penalty",
    "policy_loss_fn",
]

LossAgg = Literal["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


def _core() -> Any:
    import verl.trainer.ppo.core_algos as core_algos  # heavy import (ray, tensordict): on first use

    return core_algos


def advantage_fn(name: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """verl's advantage estimator ``name`` (``core_algos.get_adv_estimator_fn``)."""
    return _core().get_adv_estimator_fn(name)  # type: ignore[no-any-return]


def policy_loss_fn(name: str) -> Callable[..., tuple[torch.Tensor, dict[str, Any]]]:
    """verl's policy loss ``name`` (``core_algos.get_policy_loss_fn``)."""
    return _core().get_policy_loss_fn(name)  # type: ignore[no-any-return]


#: Advantage estimators by verl name → a thunk returning verl's function.
ADVANTAGES: Registry[Callable[[], Callable[..., Any]]] = Registry("advantage estimator")
for _name in ("grpo", "rloo", "reinforce_plus_plus"):
    ADVANTAGES.register(_name, functools.partial(advantage_fn, _name))

#: PolicyModel losses by verl name → a thunk returning verl's function.
POLICY_LOSSES: Registry[Callable[[], Callable[..., Any]]] = Registry("policy loss")
for _name in ("vanilla", "bypass_mode"):
    POLICY_LOSSES.register(_name, functools.partial(policy_loss_fn, _name))


class AlgoSettings(BaseModel):
    """The algorithm, by verl names, and its knobs.

    - ``advantage``: ``grpo`` | ``rloo`` | ``reinforce_plus_plus`` (default ``grpo``).
    - ``policy_loss``: ``vanilla`` (PPO-clip) | ``bypass_mode`` (default ``vanilla``).
    - ``bypass_loss_type``: in ``bypass_mode``, ``ppo_clip`` or ``reinforce`` (default ``reinforce``).
    - ``gamma``: discount for ``reinforce_plus_plus`` returns (default 1.0; 0–1).
    - ``norm_adv_by_std_in_grpo``: GRPO's std scaling (default True; False is Dr.GRPO).
    - ``clip_ratio``: PPO ε (default 0.2; 0.05–0.5). ``clip_ratio_c``: dual-clip bound (default 3.0, > 1).
    - ``loss_agg_mode``: verl's ``agg_loss`` mode (default ``token-mean``).
    - ``kl_coef``: weight of the KL penalty against the base model (default 0.0 = off; 0–1).
    - ``kl_penalty``: verl's estimator name: ``kl``/``k1``, ``abs``, ``mse``/``k2``, ``low_var_kl``/``k3``
      (default ``low_var_kl``).
    - ``is_threshold``: truncation of importance weights for stale samples and bypass mode (default 2.0).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    advantage: str = "grpo"
    policy_loss: str = "vanilla"
    bypass_loss_type: Literal["ppo_clip", "reinforce"] = "reinforce"
    gamma: float = Field(default=1.0, gt=0.0, le=1.0)
    norm_adv_by_std_in_grpo: bool = True
    clip_ratio: float = Field(default=0.2, gt=0.0, lt=1.0)
    clip_ratio_c: float = Field(default=3.0, gt=1.0)
    loss_agg_mode: LossAgg = "token-mean"
    kl_coef: float = Field(default=0.0, ge=0.0)
    kl_penalty: str = "low_var_kl"
    is_threshold: float = Field(default=2.0, gt=1.0)

    @model_validator(mode="after")
    def _known(self) -> AlgoSettings:
        ADVANTAGES.get(self.advantage)
        POLICY_LOSSES.get(self.policy_loss)
        return self


@functools.lru_cache(maxsize=32)
def algo_config(settings: AlgoSettings) -> Any:
    """verl's ``AlgoConfig`` for these settings."""
    from verl.trainer.config.algorithm import AlgoConfig

    return AlgoConfig(gamma=settings.gamma, adv_estimator=settings.advantage,
                      norm_adv_by_std_in_grpo=settings.norm_adv_by_std_in_grpo, kl_penalty=settings.kl_penalty)


@functools.lru_cache(maxsize=32)
def actor_config(settings: AlgoSettings) -> Any:
    """verl's ``ActorConfig`` (clip ratios, loss aggregation, rollout correction) for these settings."""
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.workers.config.actor import ActorConfig, PolicyLossConfig

    correction = RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold=settings.is_threshold,
                                         bypass_mode=settings.policy_loss == "bypass_mode",
                                         loss_type=settings.bypass_loss_type)
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, use_torch_compile=False,
                       clip_ratio=settings.clip_ratio, clip_ratio_low=settings.clip_ratio,
                       clip_ratio_high=settings.clip_ratio, clip_ratio_c=settings.clip_ratio_c,
                       loss_agg_mode=settings.loss_agg_mode,
                       policy_loss=PolicyLossConfig(loss_mode=settings.policy_loss, rollout_correction=correction))


def compute_advantages(settings: AlgoSettings, token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                       index: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages, returns)``, both (B, T), from verl's estimator ``settings.advantage``."""
    fn = ADVANTAGES.get(settings.advantage)()
    return fn(token_level_rewards=token_level_rewards, response_mask=response_mask, index=index,
              norm_adv_by_std_in_grpo=settings.norm_adv_by_std_in_grpo, config=algo_config(settings))


def compute_policy_loss(settings: AlgoSettings, old_log_prob: torch.Tensor, log_prob: torch.Tensor,
                        advantages: torch.Tensor, response_mask: torch.Tensor,
                        rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
    """``(loss, metrics)`` from verl's policy loss ``settings.policy_loss`` (tensors (B, T))."""
    fn = POLICY_LOSSES.get(settings.policy_loss)()
    return fn(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=response_mask,
              loss_agg_mode=settings.loss_agg_mode, config=actor_config(settings),
              rollout_is_weights=rollout_is_weights)


def agg_loss(loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str) -> torch.Tensor:
    """verl's ``agg_loss``: a (B, T) loss matrix to a scalar."""
    return _core().agg_loss(loss_mat=loss_mat, loss_mask=loss_mask, loss_agg_mode=loss_agg_mode)  # type: ignore[no-any-return]


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kind: str) -> torch.Tensor:
    """verl's ``kl_penalty``: a (B, T) KL estimate between the policy and the reference."""
    return _core().kl_penalty(log_prob, ref_log_prob, kind)  # type: ignore[no-any-return]
