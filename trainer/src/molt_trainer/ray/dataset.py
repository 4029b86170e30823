"""Recorded trajectories → dataset rows in verl's RL parquet format.

verl's ``RLHFDataset`` reads rows with ``data_source``, ``prompt`` (chat messages), ``ability``,
``reward_model`` and ``extra_info``; ``agent_name`` picks the agent loop per row. Each recorded model
call becomes one row whose ``extra_info`` carries the exact recorded tokens, log-probs and reward,
which :class:`molt_trainer.ray.agent_loop.ReplayAgentLoop` returns instead of generating.

Example::

    samples, _ = build_samples(queue.eligible_trajectories())
    write_parquet(rows_from_samples(samples, trajectories), "molt.parquet")
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from molt.atdp.models import EventKind
from molt.store.query import Trajectory
from molt_trainer.data import Sample

__all__ = ["AGENT_NAME", "rows_from_samples", "write_parquet"]

#: The agent loop name the rows ask for (registered by ``molt_trainer.ray.agent_loop``).
AGENT_NAME = "molt_replay"


def _messages(trajectories: Iterable[Trajectory]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for t in trajectories:
        for e in t.events:
            if e.kind == EventKind.MODEL_CALL and e.observation is not None and e.observation.messages:
                out[e.event_id] = [{"role": m.role, "content": m.content if isinstance(m.content, str) else ""}
                                   for m in e.observation.messages]
    return out


def rows_from_samples(samples: Sequence[Sample], trajectories: Iterable[Trajectory] = ()) -> list[dict[str, Any]]:
    """One verl dataset row per sample (the chat messages come from the recorded observation)."""
    msgs = _messages(trajectories)
    rows = []
    for i, s in enumerate(samples):
        rows.append({
            "data_source": "molt",
            "prompt": msgs.get(s.event_id) or [{"role": "user", "content": ""}],
            "ability": "agent",
            "reward_model": {"style": "recorded", "ground_truth": ""},
            "agent_name": AGENT_NAME,
            "extra_info": {"index": i, "trajectory_id": s.trajectory_id, "event_id": s.event_id,
                           "group": s.group, "policy_version": s.policy_version or "",
                           "prompt_ids": list(s.prompt_ids), "response_ids": list(s.completion_ids),
                           "response_logprobs": list(s.rollout_logprobs), "reward": float(s.reward)},
        })
    return rows


def write_parquet(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write rows as a parquet file verl's ``data.train_files`` can read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), str(out))
    return out
