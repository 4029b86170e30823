"""The trainer's advantages and losses are verl's: the same calls on the same tensors give the same values."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import verl.trainer.ppo.core_algos as core_algos
from verl.trainer.config.algorithm import AlgoConfig, RolloutCorrectionConfig
from verl.workers.config.actor import ActorConfig, PolicyLossConfig

from molt.errors import RegistryError
from molt_trainer import algos
from molt_trainer.algos import ADVANTAGES, POLICY_LOSSES, AlgoSettings


def _tensors(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.float32)
    rewards = torch.zeros(4, 4)
    rewards[0, 2], rewards[1, 1], rewards[2, 3], rewards[3, 0] = 1.0, 0.0, 1.0, 0.5
    old = -torch.rand(4, 4, generator=g) * mask
    new = (old + 0.3 * torch.randn(4, 4, generator=g)) * mask
    adv = torch.randn(4, 4, generator=g) * mask
    return {"mask": mask, "rewards": rewards, "old": old, "new": new, "adv": adv}


INDEX = np.array(["a", "a", "b", "b"], dtype=object)


@pytest.mark.parametrize("name", ["grpo", "rloo", "reinforce_plus_plus"])
def test_advantages_equal_direct_verl_calls(name: str) -> None:
    t = _tensors()
    s = AlgoSettings(advantage=name, gamma=0.9)
    ours, ours_ret = algos.compute_advantages(s, t["rewards"].clone(), t["mask"], INDEX)
    fn = core_algos.get_adv_estimator_fn(name)
    theirs, theirs_ret = fn(token_level_rewards=t["rewards"].clone(), response_mask=t["mask"], index=INDEX,
                            norm_adv_by_std_in_grpo=True, config=AlgoConfig(gamma=0.9, adv_estimator=name))
    assert torch.equal(ours, theirs) and torch.equal(ours_ret, theirs_ret)
    assert ADVANTAGES.get(name)() is fn


def _actor(mode: str, **rc: object) -> ActorConfig:
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, clip_ratio=0.2,
                       clip_ratio_low=0.2, clip_ratio_high=0.2,
                       policy_loss=PolicyLossConfig(loss_mode=mode, rollout_correction=RolloutCorrectionConfig(**rc)))


def test_vanilla_ppo_clip_equals_direct_verl_call() -> None:
    t = _tensors(1)
    ours, om = algos.compute_policy_loss(AlgoSettings(policy_loss="vanilla"), t["old"], t["new"], t["adv"], t["mask"])
    fn = core_algos.get_policy_loss_fn("vanilla")
    theirs, tm = fn(old_log_prob=t["old"], log_prob=t["new"], advantages=t["adv"], response_mask=t["mask"],
                    loss_agg_mode="token-mean", config=_actor("vanilla"))
    assert torch.equal(ours, theirs) and om == tm
    # with importance weights (stale samples)
    w = torch.full_like(t["old"], 0.5)
    ours_w, _ = algos.compute_policy_loss(AlgoSettings(), t["old"], t["new"], t["adv"], t["mask"], w)
    theirs_w, _ = fn(old_log_prob=t["old"], log_prob=t["new"], advantages=t["adv"], response_mask=t["mask"],
                     loss_agg_mode="token-mean", config=_actor("vanilla"), rollout_is_weights=w)
    assert torch.equal(ours_w, theirs_w) and torch.allclose(ours_w, 0.5 * ours)


@pytest.mark.parametrize("loss_type", ["reinforce", "ppo_clip"])
def test_bypass_mode_equals_direct_verl_call(loss_type: str) -> None:
    t = _tensors(2)
    s = AlgoSettings(policy_loss="bypass_mode", bypass_loss_type=loss_type, loss_agg_mode="seq-mean-token-mean")
    new = t["new"].clone().requires_grad_(True)
    ours, om = algos.compute_policy_loss(s, t["old"], new, t["adv"], t["mask"])
    theirs, tm = core_algos.get_policy_loss_fn("bypass_mode")(
        old_log_prob=t["old"], log_prob=t["new"], advantages=t["adv"], response_mask=t["mask"],
        loss_agg_mode="seq-mean-token-mean",
        config=_actor("bypass_mode", rollout_is="token", rollout_is_threshold=2.0, bypass_mode=True,
                      loss_type=loss_type))
    assert torch.equal(ours.detach(), theirs) and om.keys() == tm.keys()
    ours.backward()
    assert new.grad is not None and new.grad.abs().sum() > 0


@pytest.mark.parametrize("kind", ["kl", "mse", "low_var_kl", "abs"])
def test_kl_penalty_and_agg_loss_are_verls(kind: str) -> None:
    t = _tensors(3)
    ours = algos.kl_penalty(t["new"], t["old"], kind)
    assert torch.equal(ours, core_algos.kl_penalty(t["new"], t["old"], kind))
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
        assert torch.equal(algos.agg_loss(ours, t["mask"], mode),
                           core_algos.agg_loss(loss_mat=ours, loss_mask=t["mask"], loss_agg_mode=mode))


def test_registry_names_and_unknown_name() -> None:
    assert {"grpo", "rloo", "reinforce_plus_plus"} <= set(ADVANTAGES.names())
    assert {"vanilla", "bypass_mode"} <= set(POLICY_LOSSES.names())
    with pytest.raises(RegistryError, match="registered advantage estimators: grpo"):
        AlgoSettings(advantage="nope")
