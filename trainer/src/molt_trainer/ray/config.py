"""The ``verl.trainer.main_ppo`` configuration for the Ray scale-out path, composed and validated on CPU.

The job trains a LoRA adapter with GRPO on recorded trajectories (``molt_trainer.ray.dataset`` rows,
replayed by ``molt_trainer.ray.agent_loop``), with the recorded log-probs as the old policy (rollout
correction in bypass mode). The produced adapter (``trainer.default_local_dir``/.../lora_adapter) goes
through the same publish step as the CPU trainer (:class:`molt_trainer.publish.Publisher` targets).

GPU command (one node, ``N`` GPUs)::

    python -m molt_trainer.ray.export --out data/molt.parquet      # rows from the training queue
    python -m verl.trainer.main_ppo $(molt-trainer ray-config --data data/molt.parquet --gpus N)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["compose", "main_ppo_overrides", "validate"]


def main_ppo_overrides(data: str, model_path: str, *, n_gpus: int = 1, batch_size: int = 64, lora_rank: int = 8,
                       response_length: int = 512, prompt_length: int = 1024, advantage: str = "grpo",
                       out_dir: str = "checkpoints/molt") -> list[str]:
    """Hydra overrides of verl's ``ppo_trainer`` config for a replay run."""
    return [
        f"data.train_files={data}", f"data.val_files={data}", f"data.train_batch_size={batch_size}",
        f"data.max_prompt_length={prompt_length}", f"data.max_response_length={response_length}",
        "data.return_raw_chat=True",
        f"algorithm.adv_estimator={advantage}", "algorithm.use_kl_in_reward=False",
        "algorithm.rollout_correction.bypass_mode=True", "algorithm.rollout_correction.rollout_is=token",
        f"actor_rollout_ref.model.path={model_path}", f"actor_rollout_ref.model.lora_rank={lora_rank}",
        f"actor_rollout_ref.model.lora_alpha={2 * lora_rank}",
        "actor_rollout_ref.model.target_modules=[q_proj,k_proj,v_proj,o_proj]",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={batch_size}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl", "actor_rollout_ref.rollout.n=1",
        "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.agent.default_agent_loop=molt_replay",

        f"trainer.n_gpus_per_node={n_gpus}", "trainer.nnodes=1", "trainer.logger=[console]",
        "trainer.total_epochs=1", "trainer.save_freq=-1", "trainer.test_freq=-1", "trainer.val_before_train=False",
        f"trainer.default_local_dir={out_dir}", "trainer.project_name=molt", "trainer.experiment_name=replay",
    ]


def compose(overrides: list[str]) -> Any:
    """verl's ``ppo_trainer`` config with ``overrides`` applied (hydra compose; no Ray, no GPU)."""
    import verl.trainer.config as cfg_pkg
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    config_dir = str(Path(cfg_pkg.__file__).parent)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def validate(cfg: Any) -> None:
    """verl's own ``validate_config`` on a composed config (batch sizes against GPUs, micro-batches, the
    actor, the algorithm's rollout correction). Its last check, the LoRA rank against the ranks vLLM
    allows, imports vLLM's rollout, which exists only where vLLM is installed (the GPU environment):
    here it runs with the rollout named ``hf`` (that check skipped) and the rank is checked against the
    ranks vLLM accepts (verl's own fallback list when vLLM is absent)."""
    import copy
    from typing import get_args

    from omegaconf import open_dict
    from verl.utils.config import validate_config

    c = copy.deepcopy(cfg)
    with open_dict(c):
        c.actor_rollout_ref.rollout.name = "hf"
    validate_config(c, use_reference_policy=bool(c.actor_rollout_ref.actor.use_kl_loss), use_critic=False)
    try:
        from vllm.config.lora import MaxLoRARanks  # type: ignore[import-not-found]

        allowed = set(get_args(MaxLoRARanks))
    except Exception:
        allowed = {1, 8, 16, 32, 64, 128, 256, 320, 512}
    rank = int(cfg.actor_rollout_ref.model.lora_rank)
    if rank > 0 and rank not in allowed:
        raise ValueError(f"LoRA rank {rank} is not one vLLM serves ({sorted(allowed)}).")
