"""A smoke run of the foundation: capture → spool → LanceDB store → read back → verify.

``python -m molt.smoke`` (or ``molt smoke``) records a few small trajectories through the
:class:`~molt.capture.Recorder` into the store under ``$MOLT_HOME`` (a temporary one unless
``MOLT_HOME`` is set), appends a late reward, reads everything back and verifies the hash chains.
Exits non-zero if anything does not round-trip.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from molt.atdp import (
    Event,
    EventKind,
    Generation,
    Observation,
    Outcome,
    RewardAnnotation,
    RewardSource,
    ToolCall,
    UserMessage,
)
from molt.capture import Recorder
from molt.store import Store

__all__ = ["run_smoke", "smoke_command"]


def run_smoke(home: Path, trajectories: int = 3) -> dict[str, int]:
    """Record, read back and verify ``trajectories`` small trajectories under ``home``."""
    store = Store.open(home / "store", auto_compact=False)
    sent: dict[str, list[Event]] = {}
    with Recorder(store, spool_dir=home / "spool") as rec:
        for i in range(trajectories):
            tid = rec.new_trajectory()
            md = {"tenant_id": "smoke", "agent_id": "support-bot", "task": "order-status"}
            user = Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata=md,
                         action=UserMessage(content=f"Where is order A-{i}?"))
            call = Event(trajectory_id=tid, parent_id=user.event_id, kind=EventKind.MODEL_CALL, metadata=md,
                         action=Generation(model="smollm2-135m", tool_calls=[
                             {"id": "c1", "name": "lookup_order", "arguments": {"order_id": f"A-{i}"}}]))
            tool = Event(trajectory_id=tid, parent_id=call.event_id, kind=EventKind.TOOL_CALL, metadata=md,
                         action=ToolCall(tool_name="lookup_order", call_id="c1", arguments={"order_id": f"A-{i}"}),
                         outcome=Outcome(output={"state": "shipped"}))
            answer = Event(trajectory_id=tid, parent_id=tool.event_id, kind=EventKind.MODEL_CALL, metadata=md,
                           observation=Observation(text="state: shipped"),
                           action=Generation(model="smollm2-135m", text=f"Order A-{i} has shipped."))
            sent[tid] = [user, call, tool, answer]
            for ev in sent[tid]:
                rec.record(ev)
            rec.reward(RewardAnnotation(trajectory_id=tid, value=1.0, source=RewardSource.TEST_RESULT,
                                        reason="answer matched the order state", tenant_id="smoke"))
        if not rec.flush(timeout=30, deliver=True):
            raise SystemExit("smoke: the Recorder did not deliver within 30 s")
    failures = 0
    for tid, events in sent.items():
        traj = store.trajectory(tid)
        got = [e.model_dump(exclude={"seq"}) for e in traj.events]
        want = [e.model_dump(exclude={"seq"}) for e in events]
        if got != want or [e.seq for e in traj.events] != list(range(len(events))):
            failures += 1
        if len(traj.rewards) != 1 or not store.verify(tid).ok:
            failures += 1
    store.close()
    return {"trajectories": len(sent), "events": sum(len(v) for v in sent.values()), "failures": failures}


def smoke_command() -> None:
    """Record a few trajectories, read them back and verify them (exit 1 on any mismatch)."""
    t0 = time.perf_counter()
    if os.environ.get("MOLT_HOME"):
        home = Path(os.environ["MOLT_HOME"]).expanduser()
        result = run_smoke(home)
    else:
        with tempfile.TemporaryDirectory(prefix="molt-smoke-") as tmp:
            home = Path(tmp)
            result = run_smoke(home)
    ok = result["failures"] == 0
    print(f"smoke: recorded {result['events']} events in {result['trajectories']} trajectories, "
          f"read back and verified in {time.perf_counter() - t0:.2f}s under {home}: "
          f"{'OK' if ok else 'FAILED'}")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    smoke_command()
    sys.exit(0)
