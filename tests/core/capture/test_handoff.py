"""The deliverer takes the rows the writer has just made durable instead of reading the spool back. What
it delivers must be exactly what the spool holds, since the spool is what a restart delivers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from molt.atdp import Event, EventKind, RewardAnnotation, UserMessage
from molt.capture import HookResult, MemorySink, Recorder, SealedRow, SinkBatch
from molt.capture.spool import FRAME_EVENT, FRAME_REWARD, Spool, SpoolPosition


class Batches(MemorySink):
    """Keeps every batch it was given; fails the first ``failures`` writes."""

    def __init__(self, failures: int = 0) -> None:
        super().__init__()
        self.failures = failures
        self.delivered: list[SinkBatch] = []

    def write_batch(self, batch: SinkBatch) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("store unreachable")
        self.delivered.append(batch)
        super().write_batch(batch)


class TupleHook:
    """Annotations with a tuple: the spool gives it back as a list, and so must the hand-over."""

    def process(self, event: Event) -> HookResult:
        return HookResult.accept(event, {"labels": ("a", "b"), "n": 1})


@pytest.mark.parametrize("failures", [0, 2])
def test_delivered_records_are_the_spooled_frames(molt_home: Path, monkeypatch: pytest.MonkeyPatch,
                                                  failures: int) -> None:
    reads: list[Any] = []
    read = Spool.read
    monkeypatch.setattr(Spool, "read", lambda self, *a, **k: (reads.append(a), read(self, *a, **k))[1])
    sink = Batches(failures)
    rec = Recorder(sink, spool_dir=molt_home / "spool", hook=TupleHook(), batch_size=64, retry_max_s=0.05)
    tids = [rec.new_trajectory() for _ in range(3)]
    for i in range(400):
        rec.record(Event(trajectory_id=tids[i % 3], kind=EventKind.USER_MESSAGE, action=UserMessage(content=str(i))))
        if i % 50 == 0:
            rec.reward(RewardAnnotation(trajectory_id=tids[0], value=i / 400, source="judge"))
            rec.record("not an event")  # type: ignore[arg-type]  # quarantined
        if i % 100 == 0:
            assert rec.flush(timeout=30, deliver=True)  # several deliveries, not one
    assert rec.flush(timeout=30, deliver=True)
    assert rec.close()

    spool = Spool(molt_home / "spool")
    frames, _ = spool.read(SpoolPosition(1, 0), spool.end(), max_frames=100_000)
    spool.close()
    got = [b for b in sink.delivered]
    assert [r for b in got for r in b.events] == [SealedRow.decode(body) for k, body in frames if k == FRAME_EVENT]
    assert [r for b in got for r in b.rewards] == [orjson.loads(body) for k, body in frames if k == FRAME_REWARD]
    assert [q for b in got for q in b.quarantine] == [
        orjson.loads(body) for k, body in frames if k not in (FRAME_EVENT, FRAME_REWARD)]
    assert len(frames) == 400 + 2 * 8 and sink.events[next(iter(sink.events))].x["annotations"]["labels"] == ["a", "b"]
    if failures:  # a failed write is retried from the spool
        assert reads
    else:  # most deliveries were handed over, not read back (a wake-up between append and hand-over reads)
        assert len(reads) < len(got) / 2, (len(reads), len(got))
