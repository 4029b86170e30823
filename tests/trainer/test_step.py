"""The peft LoRA step on CPU: log-probs of recorded tokens, the reference with the adapter off, learning."""

from __future__ import annotations

from pathlib import Path

import torch

from molt_trainer.algos import AlgoSettings
from molt_trainer.data import assign_groups, build_samples, collate
from molt_trainer.policy import LoraSettings, PolicyModel
from molt_trainer.step import train_step

from .conftest import single


def _batch(rewards: dict[int, float]):  # type: ignore[no-untyped-def]
    trajs = [single([3, 4, 5], [tok, 1], r, logprobs=[-4.0, -4.0]) for tok, r in rewards.items() for _ in range(2)]
    samples, _ = build_samples(trajs)
    kept, index, rs = assign_groups(samples)
    return collate(kept, rs, index)


def test_token_logprobs_match_a_plain_forward(tiny_model_dir: Path) -> None:
    policy = PolicyModel.load(LoraSettings(rank=4), tiny_model_dir)
    b = collate(build_samples([single([3, 4, 5], [6, 7], 1.0), single([3], [8], 0.0)])[0])
    ours = policy.token_logprobs(b)
    with torch.no_grad():
        logits = policy.model(input_ids=b.input_ids[:1, :5]).logits[0]
        expect = torch.log_softmax(logits, -1)[[2, 3], [6, 7]]
    assert torch.allclose(ours[0, :2], expect, atol=1e-5)
    assert ours[1, 1] == 0  # padding is masked out
    # a fresh LoRA adapter is zero-initialised: the reference (adapter off) equals the policy
    assert torch.allclose(policy.ref_logprobs(b), ours.detach(), atol=1e-6)


def test_steps_raise_the_rewarded_completion_and_keep_the_base_as_reference(tiny_model_dir: Path) -> None:
    policy = PolicyModel.load(LoraSettings(rank=4, lr=5e-3, micro_batch=2), tiny_model_dir)
    batch = _batch({10: 1.0, 11: 0.0})  # two groups of one prompt: token 10 rewarded, 11 not
    before = policy.token_logprobs(batch).detach()
    ref0 = policy.ref_logprobs(batch)
    settings = AlgoSettings(advantage="grpo", policy_loss="vanilla", kl_coef=0.01)
    for _ in range(5):
        m = train_step(policy, batch, settings)
    after = policy.token_logprobs(batch).detach()
    assert after[0, 0] > before[0, 0] and after[2, 0] < before[2, 0]
    assert torch.allclose(policy.ref_logprobs(batch), ref0, atol=1e-6)  # the base model never moves
    assert m["actor/kl"] > 0 and m["perf/tokens"] == batch.num_tokens and m["actor/grad_norm"] > 0
    assert policy.steps == 5


def test_bypass_and_rloo_and_stale_is_weights_run(tiny_model_dir: Path, tmp_path: Path) -> None:
    policy = PolicyModel.load(LoraSettings(rank=4), tiny_model_dir)
    batch = _batch({10: 1.0, 11: 0.0})
    batch.stale[:] = torch.tensor([True, False, True, False])
    for s in (AlgoSettings(advantage="rloo", policy_loss="bypass_mode"),
              AlgoSettings(advantage="reinforce_plus_plus", policy_loss="vanilla", gamma=0.9)):
        m = train_step(policy, batch, s)
        assert torch.isfinite(torch.tensor(m["actor/pg_loss"]))
    out = policy.save_adapter(tmp_path / "adapter")
    assert (out / "adapter_config.json").exists() and (out / "adapter_model.safetensors").exists()
