"""Replay: cassettes, step and episode replay, verifiers and counterfactual evaluation.

Names are re-exported lazily, so ``import molt`` (for ``@molt.replayable``) stays light: the store,
backends and harness load only when a replay runs.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AGENTS": "decorator",
    "Cassette": "cassette",
    "CassetteMiss": "cassette",
    "ReplayedCall": "policy",
    "EpisodeResult": "episode",
    "Evaluation": "evaluate",
    "LiveTools": "cassette",
    "ModelClient": "episode",
    "Normalization": "cassette",
    "Overrides": "policy",
    "ReplayMemo": "evaluate",
    "ReplayAgent": "policy",
    "ReplayableAgent": "decorator",
    "Reply": "episode",
    "StepResult": "step",
    "AGENT_VERIFIERS": "verifiers",
    "TASK_VERIFIERS": "verifiers",
    "ToolBox": "episode",
    "ToolFailed": "episode",
    "VERIFIERS": "verifiers",
    "Verdict": "verifiers",
    "Verifier": "verifiers",
    "VerifyContext": "verifiers",
    "build_verifier": "verifiers",
    "evaluate_candidate": "evaluate",
    "load_results": "evaluate",
    "load_trajectories": "load",
    "load_trajectory": "load",
    "loop_shape": "generic",
    "parse_overrides": "policy",
    "record_episode": "recording",
    "replay_episode": "episode",
    "replay_recording": "generic",
    "replay_step": "step",
    "replay_steps": "step",
    "replayable": "decorator",
    "save_trajectories": "recording",
    "save_trajectory": "recording",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'molt.replay' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"molt.replay.{mod}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
