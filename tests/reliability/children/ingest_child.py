"""Child process of the crash trials: records events (and late rewards) from several threads forever.

Usage: ``python ingest_child.py HOME SEED [TRAJECTORY_IDS_FILE]``. After each batch is acknowledged
(``Recorder.flush`` returned: the frames are durable in the spool) the ids of the batch are appended to
``HOME/acked.jsonl`` (one JSON list a line). The parent SIGKILLs this process at a random point, starts
it again on the same spool ("the next life", continuing the same trajectories) and finally checks that
every acknowledged id is in the store exactly once and every chain verifies.
"""

from __future__ import annotations

import os
import random
import sys
import threading
from pathlib import Path

import orjson

from molt.atdp import Event, EventKind, Generation, Outcome, RewardAnnotation, ToolCall, UserMessage
from molt.capture import Recorder
from molt.store import Store


def _event(rng: random.Random, tid: str) -> Event:
    md = {"tenant_id": "crash", "agent_id": "crash-bot"}
    k = rng.randrange(3)
    if k == 0:
        return Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata=md,
                     action=UserMessage(content="x" * rng.randint(1, 3000)))
    if k == 1:
        return Event(trajectory_id=tid, kind=EventKind.MODEL_CALL, metadata=md,
                     action=Generation(model="m", text="answer " * rng.randint(1, 200)))
    return Event(trajectory_id=tid, kind=EventKind.TOOL_CALL, metadata=md,
                 action=ToolCall(tool_name="lookup", arguments={"n": rng.random()}),
                 outcome=Outcome(output={"ok": True, "blob": "y" * rng.randint(0, 2000)}))


def main() -> None:
    home, seed = Path(sys.argv[1]), int(sys.argv[2])
    tid_file = home / "trajectories.json"
    store = Store.open(home / "store", compact_every=8)  # compaction runs inside the kill window too
    rec = Recorder(store, spool_dir=home / "spool", batch_size=256)
    if tid_file.exists():
        tids = orjson.loads(tid_file.read_bytes())
    else:
        tids = [rec.new_trajectory() for _ in range(12)]
        tmp = tid_file.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(tids))
        os.replace(tmp, tid_file)
    acked = open(home / "acked.jsonl", "ab", buffering=0)  # noqa: SIM115 - lives until the kill
    lock = threading.Lock()

    def writer(k: int) -> None:
        rng = random.Random(seed * 1000 + k)
        while True:
            ids: list[str] = []
            for _ in range(rng.randint(1, 60)):
                ev = _event(rng, rng.choice(tids))
                rec.record(ev)
                ids.append(ev.event_id)
            rewards: list[str] = []
            if rng.random() < 0.3:  # a late reward on a trajectory that already has events
                ann = RewardAnnotation(trajectory_id=rng.choice(tids), value=rng.random(), source="judge")
                rec.reward(ann)
                rewards.append(ann.annotation_id)
            if not rec.flush(timeout=60):
                os._exit(3)
            with lock:  # one write() a line: a killed process leaves whole lines (or none)
                acked.write(orjson.dumps({"events": ids, "rewards": rewards}) + b"\n")

    threads = [threading.Thread(target=writer, args=(k,), daemon=True) for k in range(3)]
    for t in threads:
        t.start()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
