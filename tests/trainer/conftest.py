"""Fixtures for trainer tests: recorded trajectories built in memory, and a tiny random causal LM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from molt.atdp import Event, EventKind, Generation, Metadata, RewardAnnotation, RewardSource, TokenTrace, ToolCall
from molt.atdp.ids import new_id
from molt.store.query import Trajectory


def call(tid: str, prompt: list[int], completion: list[int], *, logprobs: list[float] | None = None,
         reward: float | None = None, version: str | None = "m@base", task: str | None = None,
         tokens: bool = True) -> Event:
    """A recorded model-call event with a token trace."""
    lps = logprobs if logprobs is not None else [-0.5] * len(completion)
    trace = TokenTrace(prompt_ids=prompt, completion_ids=completion, completion_logprobs=lps,
                       policy_version=version, tokenizer="tiny") if tokens else None
    return Event(trajectory_id=tid, kind=EventKind.MODEL_CALL, reward=reward, metadata=Metadata(task=task),
                 action=Generation(text="x", tokens=trace))


def traj(events: list[Event], *, final: float | None = None, tid: str | None = None) -> Trajectory:
    """A trajectory as the store returns it, with an optional late trajectory-level reward."""
    tid = tid or events[0].trajectory_id
    rewards = [] if final is None else [RewardAnnotation(trajectory_id=tid, value=final, source=RewardSource.VERIFIER)]
    return Trajectory(trajectory_id=tid, events=events, rewards=rewards)


def single(prompt: list[int], completion: list[int], reward: float, **kw: Any) -> Trajectory:
    """A one-call trajectory rewarded at the end."""
    tid = new_id()
    return traj([call(tid, prompt, completion, **kw)], final=reward)


def tool_event(tid: str) -> Event:
    return Event(trajectory_id=tid, kind=EventKind.TOOL_CALL, action=ToolCall(tool_name="lookup", arguments={}))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama (vocab 64, 2 layers) saved as a transformers directory: fast LoRA steps."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True)
    out = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(cfg).save_pretrained(str(out))
    return out


from ..core.backends.conftest import policy_model_dir  # noqa: E402,F401  (the converted SmolLM2, shared)
