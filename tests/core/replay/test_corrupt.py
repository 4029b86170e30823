"""Corrupt or partial trajectories are refused with a clear error, and the store does not change."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from molt.atdp import Event, EventKind, ToolCall
from molt.atdp.chain import GENESIS, seal
from molt.capture import SealedRow, SinkBatch, index_fields
from molt.errors import ReplayError
from molt.replay import ReplayAgent, evaluate_candidate, load_trajectory, record_episode, replay_episode
from molt.store.tables import open_all

from .conftest import ORDER_QUESTIONS, FactStub, live_tools


def _snapshot(store: Any) -> dict[str, tuple[int, int]]:
    return {n: (t.version, t.count_rows()) for n, t in sorted(open_all(store).items())}


def _write(store: Any, events: list[Event], mutate: Callable[[list[SealedRow]], list[SealedRow]]) -> None:
    rows, prev = [], GENESIS
    for seq, ev in enumerate(events):
        s = seal(ev, seq, prev)
        rows.append(SealedRow(index_fields(ev, seq), s.envelope, s.payload, s.salt, s.digest, s.prev_hash, s.hash))
        prev = s.hash
    store.write_batch(SinkBatch(events=mutate(rows)))


def _recorded(question: str) -> list[Event]:
    events, _, _ = asyncio.run(record_episode("test-support", question, ReplayAgent(FactStub()), live_tools()))
    return events


def _edit_payload(rows: list[SealedRow]) -> list[SealedRow]:
    r = rows[2]
    rows[2] = r._replace(payload=r.payload.replace(b"shipped", b"lost!!!"))
    return rows


def _drop_middle(rows: list[SealedRow]) -> list[SealedRow]:
    return rows[:1] + rows[2:]


def _unknown_tool(events: list[Event]) -> list[Event]:
    i = next(i for i, e in enumerate(events) if e.kind == EventKind.TOOL_CALL)
    events[i] = events[i].model_copy(update={"action": ToolCall(tool_name="drop_database", arguments={})})
    return events


def _no_outcome(events: list[Event]) -> list[Event]:
    i = next(i for i, e in enumerate(events) if e.kind == EventKind.TOOL_CALL)
    events[i] = events[i].model_copy(update={"outcome": None})
    return events


CASES = {
    "broken chain (edited payload)": (lambda e: e, _edit_payload, "hash chain does not verify", 2),
    "missing event": (lambda e: e, _drop_middle, "missing or reordered", 2),
    "unknown tool": (_unknown_tool, lambda r: r, "unknown tool 'drop_database'", 2),
    "partial (tool call without outcome)": (_no_outcome, lambda r: r, "no recorded outcome", 2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_corrupt_trajectory_gives_clear_error_and_store_is_unchanged(store: Any, case: str) -> None:
    edit_events, edit_rows, phrase, bad_index = CASES[case]
    events = edit_events(_recorded(ORDER_QUESTIONS[0]))
    tid = events[0].trajectory_id
    _write(store, events, edit_rows)
    before = _snapshot(store)
    with pytest.raises(ReplayError) as info:
        load_trajectory(store, tid)
    err = info.value
    assert err.trajectory_id == tid and tid in str(err)
    assert phrase in str(err)
    assert err.event_id == events[bad_index].event_id and events[bad_index].event_id in str(err)
    # a window containing it reports it as invalid evidence; nothing but replay_results is written
    ev = asyncio.run(evaluate_candidate(store, [tid], "test-support", ReplayAgent(FactStub()), save=False))
    assert ev.invalid == 1 and ev.evidence[0]["status"] == "invalid" and tid in ev.evidence[0]["error"]
    assert _snapshot(store) == before


def test_replay_never_writes_to_the_store(store: Any) -> None:
    from molt.replay import save_trajectory

    events = _recorded(ORDER_QUESTIONS[1])
    save_trajectory(store, events)
    before = _snapshot(store)
    traj = load_trajectory(store, events[0].trajectory_id)
    res = asyncio.run(replay_episode(traj, "test-support", ReplayAgent(FactStub())))
    assert res.same_actions
    assert _snapshot(store) == before


def test_unknown_trajectory(store: Any) -> None:
    with pytest.raises(ReplayError, match="not in the store"):
        load_trajectory(store, "no-such-trajectory")
