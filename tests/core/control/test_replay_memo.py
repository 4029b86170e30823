"""The plane replays a trajectory under a policy once while nothing that decides the replay changed
(``molt.replay.evaluate.ReplayMemo``): cycle after cycle over the same window costs no model call and
decides the same, and a late reward on one run makes the next cycle replay that run again, not the rest."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from molt.atdp.models import RewardAnnotation
from molt.backends.base import ChatRequest
from molt.control.plane import ControlPlane, PlaneSettings
from molt.replay import ReplayMemo, save_trajectories
from molt.store import Store
from molt_desk.scenarios import Traffic, base_parts, record_traffic
from molt_desk.world import AGENT, FACTS, ORDERS, DeskModel, World


class CountingDesk(DeskModel):
    """The desk model, counting the chat calls the plane's replays make."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def chat(self, request: ChatRequest) -> Any:
        self.calls += 1
        return await super().chat(request)


def _confirmations(rec: Any) -> list[dict[str, Any]]:
    return [c["evidence"]["confirmation"] for c in rec.candidates + rec.rejected
            if c.get("kind") == "memory_insert" and "confirmation" in (c.get("evidence") or {})
            and c["payload"]["form"] == "prose"]  # the form that fixes it on the desk model


def test_a_window_seen_before_is_not_replayed_again_and_a_late_reward_is(tmp_path: Path) -> None:
    # Five refund asks the agent cannot answer beside a flaky order service: the cluster is screened and
    # its memory replayed on the failures and on the cluster's region (test_confirmation), so a cycle
    # pays model calls for every candidate it weighs.
    world = World(flaky=0.5)
    refund, ids = FACTS["refund window"], sorted(ORDERS)
    items = [Traffic("acme", AGENT, f"{refund.questions[i % 3]} (ticket r{i})", "kb_question", refund.text)
             for i in range(5)]
    items += [Traffic("acme", AGENT, f"Where is order {ids[i % len(ids)]}? (ticket s{i})", "status")
              for i in range(12)]
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        desk = CountingDesk()
        # The strict bar (no guarded canary): the window stays a no-op, so each cycle weighs it again.
        plane = ControlPlane(store, desk, live_tools=world.live_tools(), base_parts=base_parts(),
                             settings=PlaneSettings(promote_directly=True, guarded=False))
        plane.registry.ensure_base("acme", AGENT, base_parts())
        recorded = asyncio.run(record_traffic(items, plane.registry, plane, world, DeskModel()))
        save_trajectories(store, recorded)

        first = plane.run_cycle("acme", AGENT)
        first_calls = desk.calls
        assert first_calls > 0 and first.choice == "noop", first.record.reason
        conf = _confirmations(first.record)
        assert conf and conf[0]["pairs"] >= 5, first.record.rejected

        # The same window again: every replay is one the plane already has.
        desk.calls = 0
        second = plane.run_cycle("acme", AGENT)
        assert desk.calls == 0, desk.calls
        assert second.choice == first.choice and _confirmations(second.record) == conf
        assert plane.replays.hits > 0

        # A late reward on one refund ask changes how its replay is judged: that run is replayed again
        # (under each policy that had replayed it), the others are not.
        refund_run = recorded[0][0][0].trajectory_id  # items[0]: the first refund ask
        store.append_rewards([RewardAnnotation(trajectory_id=refund_run, value=0.0,
                                               source="user_feedback", reason="still wrong", tenant_id="acme")])
        desk.calls = 0
        plane.run_cycle("acme", AGENT)
        assert 0 < desk.calls < first_calls, (desk.calls, first_calls)


def test_memo_keeps_what_it_may_and_no_more() -> None:
    memo = ReplayMemo(max_entries=2)

    class R:
        def __init__(self, status: str) -> None:
            self.status = status

    memo.put(("a",), R("ok"))  # type: ignore[arg-type]
    memo.put(("err",), R("error"))  # type: ignore[arg-type]  # a replay that raised is tried again next time
    assert memo.get(("err",)) is None and len(memo) == 1
    memo.put(("b",), R("unknown"))  # type: ignore[arg-type]
    assert memo.get(("a",)) is not None  # now the most recently used
    memo.put(("c",), R("ok"))  # type: ignore[arg-type]
    assert memo.get(("b",)) is None and memo.get(("a",)) is not None and memo.get(("c",)) is not None
    with pytest.raises(ValueError, match="at least 1"):
        ReplayMemo(max_entries=0)
