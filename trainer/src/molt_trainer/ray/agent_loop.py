"""A verl agent loop that replays recorded production calls instead of generating.

verl's PPO trainer on Ray asks an agent loop for each dataset row; this one returns the recorded
prompt ids, completion ids (all model-generated: mask 1), the serving engine's log-probs (verl's
``rollout_log_probs``, used by bypass mode / rollout correction) and the recorded reward. Importing
this module registers it as ``molt_replay`` (select it per row with ``agent_name``, as
:mod:`molt_trainer.ray.dataset` writes, or with ``actor_rollout_ref.rollout.agent.default_agent_loop``).
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from molt_trainer.ray.dataset import AGENT_NAME

__all__ = ["ReplayAgentLoop", "replay_output"]


def replay_output(extra_info: dict[str, Any], response_length: int | None = None) -> AgentLoopOutput:
    """The :class:`AgentLoopOutput` of one recorded call (``extra_info`` of a dataset row)."""
    ids = list(extra_info["response_ids"])
    lps = [float(x) for x in extra_info["response_logprobs"]]
    n = len(ids) if response_length is None else min(len(ids), response_length)
    return AgentLoopOutput(prompt_ids=list(extra_info["prompt_ids"]), response_ids=ids[:n], response_mask=[1] * n,
                           response_logprobs=lps[:n], reward_score=float(extra_info["reward"]), num_turns=2,
                           metrics=AgentLoopMetrics())


@register(AGENT_NAME)
class ReplayAgentLoop(AgentLoopBase):
    """Returns the recorded tokens, log-probs and reward of the row's model call."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        return replay_output(kwargs["extra_info"], self.rollout_config.response_length)
