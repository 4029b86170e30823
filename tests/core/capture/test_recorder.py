"""The Recorder: off-thread, bounded, fail-open for the agent, fail-closed for training."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from molt.atdp import Event, EventKind, UserMessage
from molt.atdp.chain import verify_chain
from molt.capture import MemorySink, Recorder, SinkBatch
from molt.errors import CaptureError, PayloadTooLarge


class FlakySink(MemorySink):
    """Fails the first ``failures`` writes, then works."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def write_batch(self, batch: SinkBatch) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("store unreachable")
        super().write_batch(batch)


class BlockingSink(MemorySink):
    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def write_batch(self, batch: SinkBatch) -> None:
        self.gate.wait(30)
        super().write_batch(batch)


def _ev(tid: str, text: str = "hi", **kw: Any) -> Event:
    return Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, action=UserMessage(content=text), **kw)


def test_events_are_sealed_in_order_per_trajectory(molt_home) -> None:  # type: ignore[no-untyped-def]
    sink = MemorySink()
    with Recorder(sink, spool_dir=molt_home / "spool") as rec:
        a, b = rec.new_trajectory(), rec.new_trajectory()
        for i in range(50):
            rec.record(_ev(a, f"a{i}"))
            rec.record(_ev(b, f"b{i}"))
        assert rec.flush(deliver=True)
    for tid, p in ((a, "a"), (b, "b")):
        evs = sink.trajectory_events(tid)
        assert [e.seq for e in evs] == list(range(50))
        assert [e.action.content for e in evs] == [f"{p}{i}" for i in range(50)]  # type: ignore[union-attr]


def test_a_sink_outage_loses_nothing(molt_home) -> None:  # type: ignore[no-untyped-def]
    sink = FlakySink(failures=3)
    rec = Recorder(sink, spool_dir=molt_home / "spool", retry_max_s=0.05)
    tid = rec.new_trajectory()
    for i in range(100):
        rec.record(_ev(tid, str(i)))
    assert rec.flush(timeout=30, deliver=True)
    assert len(sink.events) == 100 and rec.stats.sink_errors == 3
    rec.close()


def test_no_sink_keeps_events_in_the_spool_for_the_next_recorder(molt_home) -> None:  # type: ignore[no-untyped-def]
    rec = Recorder(None, spool_dir=molt_home / "spool")
    tid = rec.new_trajectory()
    for i in range(20):
        rec.record(_ev(tid, str(i)))
    assert rec.flush()
    rec.close(timeout=1)
    sink = MemorySink()
    rec2 = Recorder(sink, spool_dir=molt_home / "spool")
    rec2.record(_ev(tid, "after restart"))  # continues the chain from the spooled head
    assert rec2.flush(deliver=True)
    evs = sink.trajectory_events(tid)
    assert [e.seq for e in evs] == list(range(21))
    rec2.close()


def test_full_queue_drops_and_counts_but_never_blocks(molt_home) -> None:  # type: ignore[no-untyped-def]
    rec = Recorder(MemorySink(), spool_dir=molt_home / "spool", max_queue=5)
    gate = threading.Event()
    real = rec._write_batch
    rec._write_batch = lambda items: (gate.wait(60), real(items))[1]  # type: ignore[method-assign]  # a stuck disk
    tid = rec.new_trajectory()
    results: list[bool] = []
    caller = threading.Thread(target=lambda: results.extend(rec.record(_ev(tid)) for _ in range(10_000)))
    caller.start()
    caller.join(timeout=60)
    assert not caller.is_alive(), "record() blocked on a stuck writer"
    assert results.count(True) <= 5 + rec.batch_size and results.count(False) > 9_000
    assert rec.stats.dropped_queue_full == results.count(False)
    gate.set()
    assert rec.flush(deliver=True)
    rec.close()


def test_oversized_events_are_quarantined_not_raised(molt_home) -> None:  # type: ignore[no-untyped-def]
    sink = MemorySink()
    rec = Recorder(sink, spool_dir=molt_home / "spool", max_record_bytes=2048)
    tid = rec.new_trajectory()
    assert rec.record(_ev(tid, "x" * 10_000)) is True  # the agent is never told no
    rec.record(_ev(tid, "small"))
    assert rec.flush(deliver=True)
    assert rec.stats.quarantined == 1
    assert len(sink.quarantine) == 1 and "cap" in sink.quarantine[0]["reason"]
    evs = sink.trajectory_events(tid)
    assert [e.action.content for e in evs] == ["small"] and evs[0].seq == 0  # type: ignore[union-attr]
    rec.close()


def test_strict_mode_raises_typed_errors(molt_home) -> None:  # type: ignore[no-untyped-def]
    rec = Recorder(MemorySink(), spool_dir=molt_home / "spool", strict=True, max_record_bytes=2048)
    with pytest.raises(PayloadTooLarge):
        rec.record(_ev("t", "x" * 10_000))
    rec.close()
    with pytest.raises(CaptureError):
        rec.record(_ev("t"))  # closed


def test_duplicate_records_are_stored_once(molt_home) -> None:  # type: ignore[no-untyped-def]
    sink = MemorySink()
    rec = Recorder(sink, spool_dir=molt_home / "spool")
    tid = rec.new_trajectory()
    ev = _ev(tid)
    for _ in range(3):
        rec.record(ev)  # a retrying client
    rec.record(_ev(tid, "next"))
    assert rec.flush(deliver=True)
    assert [e.seq for e in sink.trajectory_events(tid)] == [0, 1]
    assert rec.stats.duplicates == 2
    rec.close()


def test_dedupe_window_is_bounded_by_dedupe_ids(molt_home) -> None:  # type: ignore[no-untyped-def]
    """The ids kept to drop retries are the newest ``dedupe_ids``: memory stops growing there, and a
    retry of a recent event is still dropped."""
    sink = MemorySink()
    rec = Recorder(sink, spool_dir=molt_home / "spool", dedupe_ids=1000)
    tid = rec.new_trajectory()
    events = [_ev(tid, f"e{i}") for i in range(1500)]
    for ev in events:
        rec.record(ev)
    assert rec.flush(deliver=True)
    assert len(rec._recent) == 1000
    rec.record(events[-10])  # retried
    assert rec.flush(deliver=True)
    assert rec.stats.duplicates == 1 and len(sink.trajectory_events(tid)) == 1500
    rec.close()
    with pytest.raises(ValueError, match="dedupe_ids"):
        Recorder(sink, spool_dir=molt_home / "spool2", dedupe_ids=10)


def _past_the_head_bound(sink: MemorySink, molt_home: Path) -> tuple[Recorder, list[str]]:
    """A Recorder that remembers 100 chain heads, after a first event of 150 trajectories each."""
    rec = Recorder(sink, spool_dir=molt_home / "spool", chain_heads=100)
    tids = [rec.new_trajectory() for _ in range(150)]
    for tid in tids:
        rec.record(_ev(tid, "first"))
    assert rec.flush(deliver=True)
    return rec, tids


def test_chain_heads_are_bounded_and_a_forgotten_trajectory_continues_its_chain(molt_home) -> None:  # type: ignore[no-untyped-def]
    """The Recorder remembers the chain heads of the ``chain_heads`` most recently written trajectories
    (memory stops growing there); one it forgot gets its head from the sink at its next event, so its
    chain goes on unbroken."""
    sink = MemorySink()
    rec, tids = _past_the_head_bound(sink, molt_home)
    assert len(rec._heads) == 100 and tids[0] not in rec._heads and tids[-1] in rec._heads
    rec.record(_ev(tids[0], "second"))
    assert rec.flush(deliver=True)
    rec.close()
    sealed = sink.sealed_events(tids[0])
    assert [s.seq for s in sealed] == [0, 1] and sealed[1].prev_hash == sealed[0].hash
    assert verify_chain(tids[0], sealed).ok
    with pytest.raises(ValueError, match="chain_heads"):
        Recorder(sink, spool_dir=molt_home / "spool2", chain_heads=10)


def test_trajectories_announced_and_never_used_are_forgotten_past_the_bound(molt_home) -> None:  # type: ignore[no-untyped-def]
    """``new_trajectory()`` marks an id as a fresh chain (no lookup). Ids announced and never written
    must not pile up; one forgotten from that set still starts at seq 0 (the lookup finds nothing)."""
    sink = MemorySink()
    rec = Recorder(sink, spool_dir=molt_home / "spool", chain_heads=100)
    tids = [rec.new_trajectory() for _ in range(1000)]
    assert len(rec._fresh) == 100 and tids[0] not in rec._fresh and tids[-1] in rec._fresh
    rec.record(_ev(tids[0], "late first event"))
    rec.record(_ev(tids[-1], "first event"))
    assert rec.flush(deliver=True)
    rec.close()
    for tid in (tids[0], tids[-1]):
        sealed = sink.sealed_events(tid)
        assert [s.seq for s in sealed] == [0] and verify_chain(tid, sealed).ok


class LookupDownSink(MemorySink):
    """Answers chain-head lookups only while ``up``."""

    up = True

    def chain_head(self, trajectory_id: str) -> tuple[int, str] | None:
        if not self.up:
            raise ConnectionError("store unreachable")
        return super().chain_head(trajectory_id)


def test_a_forgotten_trajectory_is_not_restarted_at_genesis_while_its_head_cannot_be_looked_up(molt_home) -> None:  # type: ignore[no-untyped-def]
    """A trajectory whose head the Recorder forgot (or never knew: a new capture process after a
    recycle) gets an event while the sink cannot answer: sealing it at GENESIS would fork the chain
    (a second seq 0). It is quarantined whole instead, and the chain goes on once the sink answers."""
    sink = LookupDownSink()
    rec, tids = _past_the_head_bound(sink, molt_home)
    assert tids[0] not in rec._heads
    sink.up = False
    lost = _ev(tids[0], "during the outage")
    rec.record(lost)
    assert rec.flush(deliver=True)
    sink.up = True
    rec.record(_ev(tids[0], "after"))
    assert rec.flush(deliver=True)
    rec.close()
    sealed = sink.sealed_events(tids[0])
    assert [s.seq for s in sealed] == [0, 1] and verify_chain(tids[0], sealed).ok
    assert rec.stats.quarantined == 1
    (q,) = sink.quarantine
    assert q["event_id"] == lost.event_id and "could not be looked up" in q["reason"]
    assert Event.model_validate_json(q["record"]).action.content == "during the outage"  # nothing lost


def test_close_returns_quickly_when_the_sink_hangs(molt_home) -> None:  # type: ignore[no-untyped-def]
    sink = BlockingSink()
    rec = Recorder(sink, spool_dir=molt_home / "spool")
    tid = rec.new_trajectory()
    for i in range(10):
        rec.record(_ev(tid, str(i)))
    t0 = time.perf_counter()
    delivered = rec.close(timeout=1.0)
    assert time.perf_counter() - t0 < 5.0 and not delivered  # bounded by the timeout, not the 30 s hang
    sink.gate.set()
    # everything acknowledged is still in the spool for the next start
    sink2 = MemorySink()
    rec2 = Recorder(sink2, spool_dir=molt_home / "spool")
    assert rec2.flush(deliver=True, timeout=10)
    delivered_ids = {e.event_id for e in sink2.trajectory_events(tid)} | set(sink.events)
    assert len(delivered_ids) == 10
    rec2.close()


def test_garbage_is_quarantined(molt_home) -> None:  # type: ignore[no-untyped-def]
    sink = MemorySink()
    rec = Recorder(sink, spool_dir=molt_home / "spool")
    rec.record({"not": "an event"})  # type: ignore[arg-type]
    assert rec.flush(deliver=True)
    assert rec.stats.quarantined == 1 and "not an ATDP record" in sink.quarantine[0]["reason"]
    rec.close()


def test_bad_configuration_is_rejected(molt_home) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="max_queue"):
        Recorder(None, spool_dir=molt_home / "s1", max_queue=0)
    with pytest.raises(ValueError, match="batch_size"):
        Recorder(None, spool_dir=molt_home / "s2", batch_size=0)


def test_two_recorders_cannot_share_a_spool(molt_home) -> None:  # type: ignore[no-untyped-def]
    rec = Recorder(MemorySink(), spool_dir=molt_home / "spool")
    with pytest.raises(CaptureError, match="in use"):
        Recorder(MemorySink(), spool_dir=molt_home / "spool")
    rec.close()
    Recorder(MemorySink(), spool_dir=molt_home / "spool").close()  # free again after close
