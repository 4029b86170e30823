"""Child process for the crash tests: records events forever, printing acknowledged ids.

Usage: python crash_writer.py HOME SEED. Each line on stdout is a JSON list of event ids that the
Recorder has acknowledged (durable in the spool) — the parent SIGKILLs this process at a random point
and checks that every printed id is in the store exactly once after a restart.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import orjson

from molt.atdp import Event, EventKind, Outcome, ToolCall
from molt.capture import Recorder
from molt.store import Store


def main() -> None:
    home, seed = Path(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    store = Store.open(home / "store", compact_every=8)  # compaction runs during the kill window too
    rec = Recorder(store, spool_dir=home / "spool", batch_size=256)
    tids = [rec.new_trajectory() for _ in range(20)]
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    while True:
        batch = []
        for _ in range(rng.randint(1, 120)):
            ev = Event(trajectory_id=rng.choice(tids), kind=EventKind.TOOL_CALL,
                       action=ToolCall(tool_name="lookup", arguments={"n": rng.random()}),
                       outcome=Outcome(output={"ok": True}), metadata={"tenant_id": "crash"})
            rec.record(ev)
            batch.append(ev.event_id)
        if not rec.flush(timeout=30):
            raise SystemExit("flush timed out")
        out.write(orjson.dumps(batch).decode() + "\n")
        out.flush()


if __name__ == "__main__":
    main()
