"""kill -9 in the middle of ingest: every acknowledged event is in the store after restart, once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pyarrow.compute as pc
import pytest

from molt.atdp import Event, EventKind, UserMessage
from molt.capture import Recorder
from molt.store import Store

WRITER = Path(__file__).with_name("crash_writer.py")


def _run_and_kill(home: Path, seed: int, kill_after_s: float) -> list[str]:
    proc = subprocess.Popen([sys.executable, str(WRITER), str(home), str(seed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked: list[str] = []
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.strip() == "ready", proc.stderr.read() if proc.stderr else first

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith("["):
                acked.extend(orjson.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(kill_after_s)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    reader.join(timeout=30)
    return acked


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(4))
def test_sigkill_mid_ingest_loses_nothing_and_duplicates_nothing(tmp_path: Path, trial: int) -> None:
    rng = random.Random(trial)
    home = tmp_path / "home"
    acked = _run_and_kill(home, seed=trial, kill_after_s=rng.uniform(1.5, 4.0))
    assert len(acked) > 100, "the writer acknowledged too little before the kill to test anything"

    # restart: a new Recorder on the same spool drains what the dead one left
    store = Store.open(home / "store", auto_compact=False)
    rec = Recorder(store, spool_dir=home / "spool")
    assert rec.flush(timeout=60, deliver=True)
    ids = store._where("events", None, ["event_id", "trajectory_id"])
    stored = ids.column("event_id").to_pylist()
    assert len(stored) == len(set(stored)), "an event is in the store twice"
    missing = set(acked) - set(stored)
    assert not missing, f"{len(missing)} acknowledged events were lost"

    # the chains of the interrupted trajectories continue after the restart and still verify
    tids = pc.unique(ids.column("trajectory_id")).to_pylist()
    for tid in tids:
        rec.record(Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, action=UserMessage(content="again")))
    assert rec.flush(timeout=60, deliver=True)
    for tid in tids:
        report = store.verify(tid)
        assert report.ok, report.problems[:3]
    rec.close()
    store.close()
