"""Step replay: re-decide one recorded model call under a candidate policy and compare.

The recorded call's request (the client's messages and offered tools, before the harness) is sent
again through :class:`~molt.replay.policy.ReplayAgent` — harness overrides applied, the candidate's
model and sampling — and the new action is compared with the recorded one and, when the trajectory
knows it, with the *corrected* action: a user correction in a later ``FEEDBACK`` event, or a late
:class:`~molt.atdp.RewardAnnotation` of source ``user_correction`` / ``human_label`` pointing at the
call whose ``reason`` carries the right answer.

Example::

    result = await replay_step(traj, event_id, ReplayAgent(create_backend("stub")))
    assert result.same_as_recorded
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from molt.atdp.models import Event, EventKind, Generation, RewardSource
from molt.errors import ReplayError
from molt.replay.load import model_request, offered_tools
from molt.replay.policy import ReplayAgent, ReplayedCall
from molt.store import Trajectory

__all__ = ["StepAction", "StepResult", "action_of", "corrected_action", "replay_step", "replay_steps"]


@dataclass(frozen=True, slots=True)
class StepAction:
    """A model action in comparable form: text and ``(tool name, canonical arguments)`` pairs."""

    text: str | None
    tool_calls: tuple[tuple[str, str], ...] = ()

    def same(self, other: StepAction) -> bool:
        """Same tool calls (names and arguments) and, without tool calls, the same text."""
        if self.tool_calls or other.tool_calls:
            return self.tool_calls == other.tool_calls
        return (self.text or "").strip() == (other.text or "").strip()

    def render(self) -> str:
        """One line for diffs."""
        parts = [f"{n}({a})" for n, a in self.tool_calls]
        if self.text:
            parts.insert(0, self.text)
        return " | ".join(parts) or "∅"


def _canon(args: Any) -> str:
    if isinstance(args, str):
        try:
            args = orjson.loads(args) if args.strip() else {}
        except orjson.JSONDecodeError:
            return str(args)
    return orjson.dumps(args if args is not None else {}, option=orjson.OPT_SORT_KEYS).decode()


def action_of(x: Generation | ReplayedCall) -> StepAction:
    """The comparable :class:`StepAction` of a recorded generation or a replayed decision."""
    if isinstance(x, Generation):
        calls = tuple((c.name, _canon(c.arguments)) for c in x.tool_calls or [])
        return StepAction(x.text or None, calls)
    return StepAction(x.text or None, tuple((c["name"], _canon(c["arguments"])) for c in x.tool_calls))


def corrected_action(traj: Trajectory, ev: Event) -> str | None:
    """The corrected answer for model call ``ev``, when a correction is known (see the module doc)."""
    for r in traj.rewards:
        if r.event_id == ev.event_id and r.source in (RewardSource.USER_CORRECTION, RewardSource.HUMAN_LABEL) \
                and r.reason:
            return r.reason
    after = False
    for e in traj.events:
        if e is ev:
            after = True
            continue
        if after and e.kind == EventKind.FEEDBACK and e.action is not None and e.action.type == "feedback" \
                and e.action.correction and e.parent_id in (None, ev.event_id):
            return e.action.correction
        if after and e.kind == EventKind.MODEL_CALL:
            break  # a later call's feedback is about that call
    return None


@dataclass(frozen=True, slots=True)
class StepResult:
    """One re-decided model call.

    ``corrected`` is the known right answer (``None``: unknown); ``matches_correction`` whether the
    replayed text contains it (case-insensitive), ``None`` when no correction is known.
    """

    trajectory_id: str
    event_id: str
    seq: int | None
    recorded: StepAction
    replayed: StepAction
    corrected: str | None
    decision: ReplayedCall

    @property
    def same_as_recorded(self) -> bool:
        """The replayed action equals the recorded one."""
        return self.replayed.same(self.recorded)

    @property
    def matches_correction(self) -> bool | None:
        """Whether the replayed answer carries the correction."""
        if self.corrected is None:
            return None
        return self.corrected.strip().casefold() in (self.replayed.render()).casefold()


async def replay_step(traj: Trajectory, event_id: str, policy: ReplayAgent) -> StepResult:
    """Re-decide the model call ``event_id`` of ``traj`` under ``policy``."""
    ev = next((e for e in traj.events if e.event_id == event_id), None)
    if ev is None:
        raise ReplayError(f"Trajectory {traj.trajectory_id} has no event {event_id}.",
                          trajectory_id=traj.trajectory_id, event_id=event_id)
    if ev.kind != EventKind.MODEL_CALL or not isinstance(ev.action, Generation):
        raise ReplayError(f"Event {event_id} is a {ev.kind.value} event; step replay re-decides model calls only.",
                          trajectory_id=traj.trajectory_id, event_id=event_id)
    gen = ev.action
    sampling: dict[str, Any] = dict(gen.sampling or {})
    decision = await policy.decide(model_request(ev), offered_tools(ev), sampling)
    return StepResult(traj.trajectory_id, ev.event_id, ev.seq, action_of(gen), action_of(decision),
                      corrected_action(traj, ev), decision)


async def replay_steps(traj: Trajectory, policy: ReplayAgent) -> list[StepResult]:
    """Re-decide every model call of ``traj`` (each from its own recorded request)."""
    return [await replay_step(traj, e.event_id, policy) for e in traj.events
            if e.kind == EventKind.MODEL_CALL and isinstance(e.action, Generation)
            and e.observation is not None and e.observation.messages]
