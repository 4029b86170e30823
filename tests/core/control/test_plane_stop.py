"""A scheduled control plane stops when its server stops: ``molt serve``'s shutdown sets the stop event
while a cycle replays with the served model (minutes with a real model on a CPU), and the cycle is
cancelled at its next await instead of holding the server's exit."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from molt.backends.base import ChatRequest, Result
from molt.control.plane import ControlPlane
from molt.control.scheduler import run_scheduled
from molt.replay import save_trajectories
from molt.store import Store
from molt_desk.scenarios import Traffic, base_parts, record_traffic
from molt_desk.world import AGENT, FACTS, DeskModel, World


class SlowDesk(DeskModel):
    """The desk model, answering each replayed call after ``delay_s`` (a real model's pace)."""

    def __init__(self, delay_s: float):
        super().__init__()
        self.delay_s = delay_s
        self.calls = threading.Event()

    async def chat(self, request: ChatRequest) -> Result:
        self.calls.set()
        await asyncio.sleep(self.delay_s)
        return await super().chat(request)


def _record(store: Store, plane: ControlPlane) -> None:
    f = FACTS["refund window"]
    items = [Traffic("acme", AGENT, f"{f.questions[i % 3]} (ticket {i})", "kb_question", f.text) for i in range(8)]
    items += [Traffic("acme", AGENT, f"Where is order A-{1000 + i}? (ticket {i})", "status") for i in range(12)]
    save_trajectories(store, asyncio.run(record_traffic(items, plane.registry, plane, World(), DeskModel())))


def test_a_stop_during_a_replaying_cycle_ends_the_schedule_without_waiting_for_the_cycle(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        slow = SlowDesk(delay_s=30.0)   # one replayed call outlasts the whole test's budget below
        plane = ControlPlane(store, slow, live_tools=World().live_tools(), base_parts=base_parts())
        plane.registry.ensure_base("acme", AGENT, base_parts())
        _record(store, plane)
        stop = threading.Event()
        runner = threading.Thread(target=run_scheduled, args=(store, stop, 0.05), kwargs={"plane": plane})
        runner.start()
        assert slow.calls.wait(60), "the cycle never reached its replay"
        t0 = time.monotonic()
        stop.set()
        runner.join(10)
        assert not runner.is_alive(), "the schedule waited for the replaying cycle"
        assert time.monotonic() - t0 < 10
        # The cancelled cycle applied and logged nothing: the live version is the base one.
        live = plane.registry.live("acme", AGENT)
        assert live is not None and live.parent_id is None
        assert plane.log.list("acme", AGENT, limit=None) == []
