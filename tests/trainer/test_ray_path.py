"""The verl-on-Ray scale-out path, on CPU: dataset rows, the replay agent loop, the main_ppo config."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from molt_trainer.data import build_samples
from molt_trainer.ray.config import compose, main_ppo_overrides
from molt_trainer.ray.dataset import AGENT_NAME, rows_from_samples, write_parquet

from .conftest import single


def test_rows_are_in_verls_parquet_format_with_the_recorded_tokens(tmp_path: Path) -> None:
    trajs = [single([1, 2, 3], [4, 5], 1.0, logprobs=[-0.1, -0.2]), single([1, 2], [6], 0.0)]
    samples, _ = build_samples(trajs)
    path = write_parquet(rows_from_samples(samples, trajs), tmp_path / "d.parquet")
    rows = pq.read_table(path).to_pylist()
    assert {"data_source", "prompt", "ability", "reward_model", "extra_info", "agent_name"} <= set(rows[0])
    assert rows[0]["agent_name"] == AGENT_NAME
    info = rows[0]["extra_info"]
    assert (info["prompt_ids"], info["response_ids"], info["response_logprobs"], info["reward"]) == (
        [1, 2, 3], [4, 5], pytest.approx([-0.1, -0.2]), 1.0)


def test_replay_agent_loop_is_registered_and_returns_the_recorded_call() -> None:
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    from molt_trainer.ray.agent_loop import ReplayAgentLoop, replay_output

    assert _agent_loop_registry[AGENT_NAME]["_target_"].endswith(ReplayAgentLoop.__qualname__)
    out = replay_output({"prompt_ids": [1, 2], "response_ids": [3, 4, 5], "response_logprobs": [-1, -2, -3],
                         "reward": 0.5}, response_length=2)
    assert out.prompt_ids == [1, 2] and out.response_ids == [3, 4] and out.response_mask == [1, 1]
    assert out.response_logprobs == [-1.0, -2.0] and out.reward_score == 0.5
    d = out.as_dict()
    assert d["rollout_log_probs"].tolist() == [-1.0, -2.0]


def test_main_ppo_config_composes_and_validates(tmp_path: Path) -> None:
    from verl.trainer.config.algorithm import AlgoConfig
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config.actor import ActorConfig

    cfg = compose(main_ppo_overrides(str(tmp_path / "d.parquet"), "/models/smollm2", n_gpus=4, batch_size=64))
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.actor_rollout_ref.model.lora_rank == 8
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == AGENT_NAME
    assert cfg.algorithm.rollout_correction.bypass_mode is True
    # verl.utils.config.validate_config imports the vLLM rollout (GPU environment); the typed configs it
    # builds for the actor and the algorithm validate here, on CPU.
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert isinstance(actor, ActorConfig) and actor.use_kl_loss and actor.ppo_mini_batch_size == 64
    actor.validate(n_gpus=4, train_batch_size=cfg.data.train_batch_size)
    algo = omega_conf_to_dataclass(cfg.algorithm, AlgoConfig)
    assert algo.adv_estimator == "grpo" and algo.rollout_correction.bypass_mode


def test_verl_main_ppo_imports() -> None:
    import verl.trainer.main_ppo as main_ppo

    assert callable(main_ppo.main)
