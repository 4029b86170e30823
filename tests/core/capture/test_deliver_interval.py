"""``deliver_interval_s`` gathers sink writes (fewer, larger LanceDB appends), and never delays an
explicit ``flush(deliver=True)`` or ``close()``; a ``flush(deliver=True)`` that returns has the
delivery counted in ``stats``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from molt.atdp import Event, EventKind, UserMessage
from molt.capture import Recorder


class _Counting:
    def __init__(self) -> None:
        self.writes = 0
        self.ids: list[str] = []

    def write_batch(self, batch: Any) -> None:
        if batch.events:
            self.writes += 1
            self.ids.extend(r.event_id for r in batch.events)

    def chain_head(self, trajectory_id: str) -> None:
        return None


def _trickle(rec: Recorder, n: int) -> None:
    """``n`` events, each made durable on its own (one spool batch each), over about half a second."""
    tid = rec.new_trajectory()
    for i in range(n):
        rec.record(Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, action=UserMessage(content=f"m{i}")))
        assert rec.flush(timeout=30)
        time.sleep(0.01)


@pytest.mark.parametrize("interval", [0.0, 60.0])
def test_sink_writes_are_gathered_over_the_interval(tmp_path: Path, interval: float) -> None:
    sink = _Counting()
    rec = Recorder(sink, spool_dir=tmp_path / "spool", deliver_interval_s=interval)
    try:
        _trickle(rec, 40)
        time.sleep(0.2)
        if interval:
            assert sink.writes <= 1  # the first batch went at once; the rest wait for the interval
        else:
            assert sink.writes >= 5  # delivered as spooled: many small writes
        assert rec.flush(timeout=20, deliver=True)  # an explicit delivery does not wait for the interval
        assert len(set(sink.ids)) == 40
    finally:
        rec.close(timeout=10)


def test_close_delivers_without_waiting_for_the_interval(tmp_path: Path) -> None:
    sink = _Counting()
    rec = Recorder(sink, spool_dir=tmp_path / "spool", deliver_interval_s=60.0)
    _trickle(rec, 10)
    assert rec.close(timeout=20)
    assert len(set(sink.ids)) == 10


def test_a_bad_interval_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="deliver_interval_s"):
        Recorder(None, spool_dir=tmp_path / "spool", deliver_interval_s=-1)


def test_flush_deliver_returns_with_the_delivery_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``flush(deliver=True)`` returning True means ``stats.delivered`` already counts the delivery,
    even when the deliverer is between moving the spool's cursor and counting (held open here)."""
    from molt.capture.spool import Spool

    commit = Spool.commit

    def slow_commit(self: Spool, position: Any) -> None:
        commit(self, position)
        time.sleep(0.3)  # the window a thread switch can fall into, made wide

    monkeypatch.setattr(Spool, "commit", slow_commit)
    sink = _Counting()
    rec = Recorder(sink, spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0)
    try:
        tid = rec.new_trajectory()
        for i in range(16):
            rec.record(Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, action=UserMessage(content=f"m{i}")))
        assert rec.flush(timeout=30, deliver=True)
        assert rec.stats.delivered == 16 == len(sink.ids)
    finally:
        rec.close()
