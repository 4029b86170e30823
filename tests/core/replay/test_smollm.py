"""Replay with the real SmolLM2 policy (the ``local`` backend) at temperature 0 reproduces the recording."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from molt.replay import (
    LiveTools,
    Overrides,
    ReplayAgent,
    load_trajectory,
    record_episode,
    replay_episode,
    replay_steps,
    replayable,
    save_trajectory,
)


@replayable(name="test-smol")
async def smol_agent(input: str, model: Any, tools: Any) -> Any:
    """Look the topic up, then let the model answer in a few tokens."""
    facts = tools.call("lookup", topic=input)
    reply = await model.achat([{"role": "system", "content": f"Facts: {facts}"}, {"role": "user", "content": input}],
                              temperature=0, max_tokens=6)
    return reply.text


@pytest.mark.slow
def test_smollm2_temperature_zero_replay_is_exact(store: Any, policy_model_dir: Path) -> None:
    from molt.backends import LocalBackend

    backend = LocalBackend(model_path=policy_model_dir, threads=1)  # one thread: the CI box is shared
    live = LiveTools()
    live.register("lookup", lambda topic: "Paris is the capital of France.")

    async def go() -> tuple[Any, Any, Any]:
        events, rewards, answer = await record_episode("test-smol", "What is the capital of France?",
                                                       ReplayAgent(backend), live, verifier="contains:Paris")
        save_trajectory(store, events, rewards)
        traj = load_trajectory(store, events[0].trajectory_id)
        episode = await replay_episode(traj, "test-smol", ReplayAgent(backend), verifier="contains:Paris")
        steps = await replay_steps(traj, ReplayAgent(backend))
        other = await replay_steps(traj, ReplayAgent(backend, Overrides(system_prompt="Answer in French.",
                                                                         system_prompt_mode="replace")))
        return answer, episode, (steps, other)

    answer, episode, (steps, other) = asyncio.run(go())
    assert answer and episode.status == "ok" and episode.same_actions and not episode.misses
    assert episode.answer == answer and episode.replayed_reward == episode.recorded_reward
    assert len(steps) == 1 and steps[0].same_as_recorded and steps[0].replayed.text == answer
    assert other[0].decision.harness_fingerprint is not None  # the override reached the model through the harness
