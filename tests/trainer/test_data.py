"""Samples from recorded trajectories: masks, credit assignment, groups, staleness, bad input."""

from __future__ import annotations

import logging

import pytest
import torch

from molt.atdp.ids import new_id
from molt_trainer.data import RunningMean, Staleness, assign_groups, build_samples, collate

from .conftest import call, single, tool_event, traj


def test_tokens_are_taken_as_recorded_and_only_completions_are_masked_in() -> None:
    t = single([5, 6, 7], [8, 9], 1.0, logprobs=[-0.1, -0.2])
    [s], stats = build_samples([t])
    assert (s.prompt_ids, s.completion_ids, s.rollout_logprobs, s.reward) == ([5, 6, 7], [8, 9], [-0.1, -0.2], 1.0)
    b = collate([s, *build_samples([single([5], [3, 4, 6], 0.0)])[0]])
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 3, 4, 6, 0]]
    assert b.response_mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    # positions point at the logits that predict each completion token (shifted by one)
    assert b.positions[0, :2].tolist() == [2, 3] and b.positions[1].tolist() == [0, 1, 2]
    assert b.token_level_rewards.tolist() == [[0, 1.0, 0], [0, 0, 0.0]]
    assert b.rollout_logprobs[0].tolist() == pytest.approx([-0.1, -0.2, 0.0])
    assert stats.samples == 1


def test_multi_turn_credit_per_turn_reward_else_discounted_final() -> None:
    tid = new_id()
    c0 = call(tid, [1, 2], [3])
    c1 = call(tid, [1, 2, 3, 40, 41], [4], reward=0.25)  # tool tokens 40, 41 sit in the next prompt
    c2 = call(tid, [1, 2, 3, 40, 41, 4, 42], [5])
    t = traj([c0, tool_event(tid), c1, tool_event(tid), c2], final=1.0)
    samples, _ = build_samples([t], gamma=0.5)
    assert [s.reward for s in samples] == [0.25, 0.25, 1.0]  # 1.0 * 0.5**2, own reward, 1.0 * 0.5**0
    assert [s.turn for s in samples] == [0, 1, 2]
    b = collate(samples)
    # the tool tokens are prompt of the next call: never in the loss mask
    assert b.response_mask.sum().item() == 3


def test_bad_input_is_skipped_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    good = single([1], [2], 1.0)
    no_tokens = single([1], [2], 1.0, tokens=False)
    unrewarded = traj([call(new_id(), [1], [2])])
    nan = single([1], [2], 1.0)
    nan = nan.model_copy(update={"rewards": [nan.rewards[0].model_copy(update={"value": float("nan")})]})
    empty = single([1], [], 1.0, logprobs=[])
    with caplog.at_level(logging.INFO, logger="molt.trainer.data"):
        samples, stats = build_samples([good, no_tokens, unrewarded, nan, empty])
    assert len(samples) == 1
    assert stats.skipped == {"no_token_ids": 1, "unrewarded": 1, "nonfinite_reward": 1, "empty_completion": 1}
    assert "no token ids were recorded" in caplog.text and "NaN or infinite" in caplog.text
    assert stats.as_metrics()["data/skipped_no_token_ids"] == 1.0


def test_groups_by_prompt_and_singleton_fallback() -> None:
    a = [single([1, 2], [3], r) for r in (1.0, 0.0)]
    lone = [single([9], [3], 1.0), single([8], [3], 0.0)]
    samples, _ = build_samples(a + lone)
    kept, index, rewards = assign_groups(samples)
    assert len(kept) == 4
    assert index[0] == index[1] != index[2] and index[2] == index[3] == "pooled-singletons"
    # one lone sample: dropped without a baseline, centred on the running mean with one
    [s], stats = build_samples([single([7], [3], 1.0)])
    kept, _, _ = assign_groups([s], RunningMean(), stats)
    assert kept == [] and stats.skipped["lone_sample_no_baseline"] == 1
    base = RunningMean()
    base.update([0.5])
    kept, _, rewards = assign_groups([s], base)
    assert rewards == [0.5]
    # group by recorded task instead of prompt tokens
    t1, t2 = single([1], [3], 1.0, task="t"), single([2], [3], 0.0, task="t")
    samples, _ = build_samples([t1, t2], group_by="task")
    assert samples[0].group == samples[1].group


def test_staleness_drop_and_importance_weight() -> None:
    st = Staleness(versions={"m@base": 0}, max_lag=1)
    st.advance("m@v1")
    st.advance("m@v2")
    old, new = single([1], [2], 1.0, version="m@base"), single([1], [2], 0.0, version="m@v2")
    samples, stats = build_samples([old, new], staleness=st)
    assert len(samples) == 1 and stats.skipped["stale"] == 1
    st.mode = "is"
    samples, _ = build_samples([old, new], staleness=st)
    assert [s.stale for s in samples] == [True, False]
    assert collate(samples).stale.tolist() == [True, False]
    st.unknown = "drop"
    _, stats = build_samples([single([1], [2], 1.0, version="other")], staleness=st)
    assert stats.skipped["unknown_policy_version"] == 1


def test_collate_select_microbatch() -> None:
    samples, _ = build_samples([single([1, 2], [3, 4], 1.0), single([1], [3], 0.0)])
    b = collate(samples)
    m = b.select(slice(1, 2))
    assert m.size == 1 and m.num_tokens == 2 and torch.equal(m.input_ids, b.input_ids[1:2])
