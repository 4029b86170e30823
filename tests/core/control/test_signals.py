"""Signals over a window: rates per task and version, tool-failure clusters, canary deltas, drift,
cost per success — and the failure clustering the diagnosis builds on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from molt.control.diagnose import cluster_failures
from molt.control.signals import Episode, ToolUse, _error_in, arg_pattern, compute_signals

T0 = datetime(2026, 11, 30, tzinfo=UTC)


def ep(i: int, *, task: str = "status", ok: bool | None = True, version: str = "v1", tools: list[ToolUse] | None = None,
       corrections: list[str] | None = None, verdict: str | None = None, question: str = "Where is order A-1?",
       calls: int = 2) -> Episode:
    return Episode(trajectory_id=f"t{i}", tenant_id="acme", agent_id="desk", task=task, policy_version=version,
                   started_at=T0 + timedelta(seconds=i), success=ok, reward=None if ok is None else float(ok),
                   question=question, answer="x", tools=tools or [], corrections=corrections or [], verdict=verdict,
                   model_calls=calls)


def test_arg_pattern_and_error_text() -> None:
    assert arg_pattern({"order_id": "1003"}) == "order_id=9999"
    assert arg_pattern({"order_id": "A-1003", "amount": 4}) == "amount:int,order_id=A-9999"
    assert _error_in('{"error": "ValidationError: order_id must keep the A- prefix"}') == (
        "ValidationError", "order_id must keep the A- prefix")
    assert _error_in({"state": "shipped"}) is None and _error_in("Order A-1 is shipped.") is None
    assert _error_in("Error: something broke") == ("ToolError", "something broke")


def test_rates_failures_canary_cost_and_drift() -> None:
    bad = ToolUse("lookup_order", {"order_id": "1003"}, False, "ValidationError", "keep the prefix")
    good = ToolUse("lookup_order", {"order_id": "A-1003"}, True)
    eps = ([ep(i, tools=[good]) for i in range(10)]
           + [ep(10 + i, ok=False, tools=[bad]) for i in range(6)]
           + [ep(16 + i, version="v2", tools=[good], task="refund", question="Please refund order A-2 now")
              for i in range(4)]
           + [ep(20, ok=None)])
    s = compute_signals(eps, live_version="v1")
    assert s.window == 21 and s.rewarded == 20 and s.successes == 14
    assert s.success_rate == pytest.approx(14 / 20)
    lo, hi = s.success_ci
    assert lo < 0.7 < hi
    assert s.by_task["status"]["success_rate"] == pytest.approx(10 / 16)
    assert s.by_version["v2"]["success_rate"] == 1.0
    assert s.canary["v2"]["delta"] == pytest.approx(1.0 - 10 / 16)
    [tf] = s.tool_failures
    assert (tf["tool"], tf["error_type"], tf["argument_pattern"], tf["count"]) == (
        "lookup_order", "ValidationError", "order_id=9999", 6)
    assert s.process_reward == pytest.approx(14 / 20)
    assert s.cost_per_success["model_calls"] == pytest.approx(2 * 21 / 14)
    assert s.drift["task_mix_tv"] is not None and s.drift["task_mix_tv"] > 0.3
    assert compute_signals([]).success_rate is None


def test_clusters_by_task_and_signature() -> None:
    bad = ToolUse("lookup_order", {"order_id": "1"}, False, "ValidationError", "keep the prefix")
    eps = ([ep(i, ok=False, tools=[bad]) for i in range(5)]
           + [ep(5 + i, ok=False, task="kb", corrections=["The window is 45 days."],
                 verdict="assertion failed: wrong answer") for i in range(4)]
           + [ep(9 + i, ok=False, task="status_json", verdict="assertion failed: format: not JSON") for i in range(3)]
           + [ep(12 + i) for i in range(5)])
    cl = {(c.task, c.signature): c for c in cluster_failures(eps)}
    fmt = ("status_json", "format:be json")  # clustered on what the verdict requires
    assert set(cl) == {("status", "tool:lookup_order:ValidationError"), ("kb", "answer"), fmt}
    assert cl[("status", "tool:lookup_order:ValidationError")].size == 5
    assert cl[("kb", "answer")].summary()["corrections"] == 4
    assert cl[fmt].kind == "format"
