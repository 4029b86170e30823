"""Exit with the sink down: a process using the Recorder (or molt-langchain) whose remote sink accepts
connections and never answers still exits on its own — no ``close()``, no flush — with every
acknowledged event durable in its spool, delivered in full when a Recorder next opens that spool.

The time to exit is measured in ``bench/reliability/run.py`` (≤ 1 s there); here the timeout only
catches a hang.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import relharness


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["recorder", "langchain"])
def test_process_exits_with_an_unreachable_sink_and_the_next_start_delivers(tmp_path: Path, mode: str) -> None:
    if mode == "langchain":
        pytest.importorskip("molt_langchain")
    res = relharness.exit_trial(tmp_path / mode, mode, n=40, timeout=60)
    assert res.returncode == 0, "the process did not exit by itself (it was killed after 60 s)"
    if mode == "recorder":
        assert res.acked == 40
    assert res.missing == 0, f"{res.missing} of {res.expected} records were not in the spool"
    assert res.delivered == res.expected


class _HungSink:
    """A sink whose every call blocks until released (a remote that accepts and never answers)."""

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()
        self.calls = 0

    def write_batch(self, batch) -> None:  # type: ignore[no-untyped-def]
        self.calls += 1
        self.release.wait(60)

    def chain_head(self, trajectory_id: str) -> None:
        return None


class _RefusingSink(_HungSink):
    def write_batch(self, batch) -> None:  # type: ignore[no-untyped-def]
        self.calls += 1
        raise ConnectionRefusedError("store unreachable")


@pytest.mark.parametrize("sink_kind", ["hung", "refusing"])
def test_close_does_not_wait_out_its_timeout_on_a_sink_that_hangs_or_fails(tmp_path: Path, sink_kind: str) -> None:
    """close(timeout=10) returns once what was recorded is durable, instead of spending its whole
    timeout on delivery the sink cannot take (what it would deliver is in the spool for next time)."""
    import time

    from molt.atdp import Event, EventKind, UserMessage
    from molt.capture import Recorder

    sink = _HungSink() if sink_kind == "hung" else _RefusingSink()
    rec = Recorder(sink, spool_dir=tmp_path / "spool")
    tid = rec.new_trajectory()
    for i in range(20):
        rec.record(Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, action=UserMessage(content=f"m{i}")))
    assert rec.flush(timeout=30)
    deadline = time.monotonic() + 30
    while sink.calls == 0 and time.monotonic() < deadline:  # the deliverer has reached the sink
        time.sleep(0.01)
    t0 = time.monotonic()
    delivered = rec.close(timeout=10)
    took = time.monotonic() - t0
    sink.release.set()
    assert not delivered
    # generous against a loaded machine; waiting the timeout out (the old behaviour) takes > 10 s
    assert took < 5, f"close() waited {took:.2f} s on a {sink_kind} sink"
    got: list[str] = []

    class _Collect(_HungSink):
        def write_batch(self, batch) -> None:  # type: ignore[no-untyped-def]
            got.extend(row.event_id for row in batch.events)

    rec2 = Recorder(_Collect(), spool_dir=tmp_path / "spool")  # nothing lost: the next start delivers all 20
    try:
        assert rec2.flush(timeout=30, deliver=True)
    finally:
        rec2.close()
    assert len(set(got)) == 20


def test_close_retries_a_sink_that_failed_and_has_recovered_since(tmp_path: Path) -> None:
    """A sink that was down and came back while the Recorder waits out its retry backoff: close() tries
    it again at once and delivers everything, instead of leaving it to a next start that may not come."""
    import time

    from molt.atdp import Event, EventKind, UserMessage
    from molt.capture import Recorder

    class _Recovering(_HungSink):
        def __init__(self) -> None:
            super().__init__()
            self.down = True
            self.got: list[str] = []

        def write_batch(self, batch) -> None:  # type: ignore[no-untyped-def]
            self.calls += 1
            if self.down:
                raise ConnectionRefusedError("store unreachable")
            self.got.extend(row.event_id for row in batch.events)

    sink = _Recovering()
    rec = Recorder(sink, spool_dir=tmp_path / "spool", retry_max_s=60.0)
    tid = rec.new_trajectory()
    for i in range(20):
        rec.record(Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, action=UserMessage(content=f"m{i}")))
    assert rec.flush(timeout=30)
    deadline = time.monotonic() + 30
    while sink.calls < 4 and time.monotonic() < deadline:  # failed 4 times: the next retry is ≥ 0.4 s away
        time.sleep(0.01)
    sink.down = False  # the store is back
    assert rec.close(timeout=10)
    assert len(set(sink.got)) == 20
