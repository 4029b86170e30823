"""Read-side models of the store: trajectories and summaries.

:func:`select_summaries` is the one filter-and-sort of trajectory listings: the store's own
(:meth:`molt.store.Store.trajectories`) and a tenant's (:meth:`molt.store.scoped.TenantView.trajectories`)
differ only in which rows they feed it.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from molt.atdp.models import Event, RewardAnnotation

__all__ = ["OUTCOMES", "SUMMARY_COLUMNS", "Trajectory", "TrajectorySummary", "check_outcome", "select_summaries",
           "summarize"]

#: The event columns a trajectory summary is made of.
SUMMARY_COLUMNS: tuple[str, ...] = ("trajectory_id", "seq", "ts", "tenant_id", "agent_id", "task", "status",
                                    "reward", "kind")
#: A trajectory's outcome: ``success`` (total reward > 0), ``failure`` (rewarded, total ≤ 0), ``error``
#: (unrewarded, an event ended in error) or ``unrewarded``.
OUTCOMES: tuple[str, ...] = ("success", "failure", "error", "unrewarded")


class Trajectory(BaseModel):
    """A trajectory as read back: events in causal (``seq``) order and the late rewards on it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trajectory_id: str
    events: list[Event]
    rewards: list[RewardAnnotation]

    @property
    def total_reward(self) -> float | None:
        """Inline rewards plus late annotations; ``None`` when nothing was rewarded."""
        values = [e.reward for e in self.events if e.reward is not None] + [r.value for r in self.rewards]
        return sum(values) if values else None

    def children(self, event_id: str | None) -> list[Event]:
        """Events whose causal parent is ``event_id`` (``None``: the roots), in ``seq`` order."""
        return [e for e in self.events if e.parent_id == event_id]


class TrajectorySummary(BaseModel):
    """One line per trajectory for listings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trajectory_id: str
    tenant_id: str | None
    agent_id: str | None
    task: str | None
    events: int
    first_ts: datetime
    last_ts: datetime
    errors: int
    reward: float | None
    outcome: Literal["success", "failure", "error", "unrewarded"]


def summarize(events: pa.Table, rewards: pa.Table) -> list[TrajectorySummary]:
    """Group event rows (trajectory_id, seq, ts, tenant_id, agent_id, task, status, reward) and
    reward rows (trajectory_id, value) into summaries."""
    late: dict[str, float] = defaultdict(float)
    if rewards.num_rows:
        for tid, v in zip(rewards.column("trajectory_id").to_pylist(),
                          rewards.column("value").to_pylist(), strict=True):
            late[tid] += v
    g = events.group_by("trajectory_id").aggregate([
        ("seq", "count"), ("ts", "min"), ("ts", "max"), ("tenant_id", "max"), ("agent_id", "max"),
        ("task", "max"), ("reward", "sum"), ("reward", "count"),
    ])
    errors: dict[str, int] = defaultdict(int)
    for tid, status in zip(events.column("trajectory_id").to_pylist(),
                           events.column("status").to_pylist(), strict=True):
        if status == "error":
            errors[tid] += 1
    out = []
    for row in g.to_pylist():
        tid = row["trajectory_id"]
        inline = row["reward_sum"] if row["reward_count"] else None
        total = None
        if inline is not None or tid in late:
            total = (inline or 0.0) + late.get(tid, 0.0)
        if total is not None:
            outcome = "success" if total > 0 else "failure"
        elif errors[tid]:
            outcome = "error"
        else:
            outcome = "unrewarded"
        out.append(TrajectorySummary(
            trajectory_id=tid, tenant_id=row["tenant_id_max"], agent_id=row["agent_id_max"],
            task=row["task_max"], events=row["seq_count"], first_ts=row["ts_min"], last_ts=row["ts_max"],
            errors=errors[tid], reward=total, outcome=outcome,
        ))
    return out


def check_outcome(outcome: str | None) -> None:
    """Raise ``ValueError`` unless ``outcome`` is ``None`` or one of :data:`OUTCOMES`."""
    if outcome is not None and outcome not in OUTCOMES:
        raise ValueError(f"outcome must be success, failure, error or unrewarded, not {outcome!r}.")


def select_summaries(events: pa.Table, rewards: pa.Table, *, since: datetime | None = None,
                     until: datetime | None = None, outcome: str | None = None,
                     limit: int | None = 100) -> list[TrajectorySummary]:
    """Summaries of ``events`` (:data:`SUMMARY_COLUMNS`) and ``rewards`` (trajectory_id, value) that
    were active at or after ``since`` and began before ``until``, with ``outcome``; newest first (by
    last event), at most ``limit``."""
    check_outcome(outcome)
    if events.num_rows == 0:
        return []
    out = summarize(events, rewards)
    if since is not None:
        out = [s for s in out if s.last_ts >= since.astimezone(UTC)]
    if until is not None:
        out = [s for s in out if s.first_ts < until.astimezone(UTC)]
    if outcome is not None:
        out = [s for s in out if s.outcome == outcome]
    out.sort(key=lambda s: s.last_ts, reverse=True)
    return out[:limit] if limit is not None else out
