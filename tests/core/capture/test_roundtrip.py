"""10,000 events across 100 trajectories: record, read back in causal order, verify, append late
rewards, and show the stored records did not change by a single byte."""

from __future__ import annotations

import random

import pytest

from molt.atdp import RewardAnnotation, RewardSource
from molt.capture import Recorder


@pytest.mark.slow
def test_ten_thousand_events_round_trip_byte_identical(store, molt_home, event_factory) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(0)
    rec = Recorder(store, spool_dir=molt_home / "spool")
    tids = [rec.new_trajectory() for _ in range(100)]
    sent: dict[str, list] = {t: [] for t in tids}
    last: dict[str, str | None] = dict.fromkeys(tids)
    for _i in range(10_000):
        tid = rng.choice(tids)  # interleaved, as concurrent agents would produce them
        ev = event_factory(tid, len(sent[tid]), parent=last[tid])
        sent[tid].append(ev)
        last[tid] = ev.event_id
        assert rec.record(ev)
    assert rec.flush(timeout=120, deliver=True)
    assert store.count("events") == 10_000

    before = {}
    for tid in tids:
        traj = store.trajectory(tid)
        # causal order: seq 0..n-1, each event's parent is the previous one, content as sent
        assert [e.seq for e in traj.events] == list(range(len(sent[tid])))
        assert [e.model_copy(update={"seq": None}) for e in traj.events] == sent[tid]
        assert all(e.parent_id == (traj.events[k - 1].event_id if k else None) for k, e in enumerate(traj.events))
        assert store.verify(tid).ok
        before[tid] = store.sealed_events(tid)

    # late rewards: on the trajectory and on single events, appended through the Recorder
    for tid in tids:
        rec.reward(RewardAnnotation(trajectory_id=tid, value=1.0, source=RewardSource.TEST_RESULT))
        target = rng.choice(sent[tid])
        rec.reward(RewardAnnotation(trajectory_id=tid, event_id=target.event_id, value=-0.5,
                                    source=RewardSource.USER_CORRECTION, reason="wrong order id",
                                    dimensions={"helpfulness": 0.2}))
    assert rec.flush(timeout=60, deliver=True)
    store.compact()  # rewriting fragments must not change records either

    for tid in tids:
        after = store.sealed_events(tid)
        assert after == before[tid], "a stored event record or hash changed"
        traj = store.trajectory(tid)
        assert len(traj.rewards) == 2 and traj.total_reward == pytest.approx(0.5)
        assert store.verify(tid).ok
    assert rec.stats.dropped_queue_full == rec.stats.quarantined == 0
    rec.close()
