"""Episode replay, cassettes and counterfactual evaluation with the deterministic stub policy."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from molt.harness import ToolRewrite
from molt.replay import (
    LiveTools,
    Overrides,
    ReplayAgent,
    evaluate_candidate,
    load_results,
    load_trajectory,
    replay_episode,
    replay_steps,
    replayable,
)

from .conftest import FACT, ORDER_QUESTIONS, REFUND_QUESTIONS, UNRELATED, FactStub, kb_search, record_window


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_no_override_replay_reproduces_recorded_actions(store: Any, stub_policy: ReplayAgent) -> None:
    ids = run(record_window(store, stub_policy, [REFUND_QUESTIONS[0], ORDER_QUESTIONS[0]]))
    for tid in ids:
        traj = load_trajectory(store, tid)
        res = run(replay_episode(traj, "test-support", ReplayAgent(FactStub())))
        assert res.status == "ok" and res.same_actions, res.as_dict()
        assert [a.render() for a in res.actions] == [a.render() for a in res.recorded]
        assert res.answer == res.recorded_answer
        assert res.replayed_reward == res.recorded_reward
        assert not res.misses
        steps = run(replay_steps(traj, ReplayAgent(FactStub())))
        assert steps and all(s.same_as_recorded for s in steps)


def test_missing_fact_memory_fixes_it_unrelated_memory_does_not(store: Any, stub_policy: ReplayAgent) -> None:
    ids = run(record_window(store, stub_policy, REFUND_QUESTIONS + ORDER_QUESTIONS))
    traj = load_trajectory(store, ids[0])
    assert traj.total_reward == 0.0

    fixed = run(replay_episode(traj, "test-support", ReplayAgent(FactStub(), Overrides(memories=(FACT,)))))
    assert fixed.status == "ok" and fixed.replayed_reward == 1.0 and "45 days" in fixed.answer
    unrelated = run(replay_episode(traj, "test-support", ReplayAgent(FactStub(), Overrides(memories=(UNRELATED,)))))
    assert unrelated.status == "ok" and unrelated.replayed_reward == 0.0 and unrelated.same_actions

    good = run(evaluate_candidate(store, ids, "test-support", ReplayAgent(FactStub(), Overrides(memories=(FACT,))),
                                  candidate_id="cand-memory", tenant_id="acme"))
    assert good.scored == 12 and good.unknown == 0
    assert good.baseline_success_rate == pytest.approx(4 / 12)
    assert good.candidate_success_rate == 1.0
    assert good.success_delta == pytest.approx(8 / 12)
    lo, hi = good.success_delta_ci
    assert 0.0 < lo < good.success_delta < hi <= 1.0
    assert good.reward_delta_ci[0] > 0
    assert good.cost["model_calls"] > 0

    unrelated_policy = ReplayAgent(FactStub(), Overrides(memories=(UNRELATED,)))
    bad = run(evaluate_candidate(store, ids, "test-support", unrelated_policy, candidate_id="cand-unrelated"))
    assert bad.success_delta == 0.0
    lo, hi = bad.success_delta_ci
    assert lo < 0 < hi

    rows = load_results(store, candidate_id="cand-memory")
    assert len(rows) == 13 and rows[-1]["kind"] == "summary"
    assert {r["trajectory_id"] for r in rows if r["kind"] == "trajectory"} == set(ids)
    assert rows[-1]["record"]["success_delta"] == pytest.approx(8 / 12)


def test_cache_miss_is_reported_never_invented(store: Any, stub_policy: ReplayAgent) -> None:
    ids = run(record_window(store, stub_policy, [ORDER_QUESTIONS[0]]))
    traj = load_trajectory(store, ids[0])
    # A tool-schema rewrite makes the policy call the tool with arguments the recording never saw.
    rewrite = Overrides(tool_rewrites={"search_kb": ToolRewrite(parameters={
        "type": "object", "properties": {"query": {"type": "string"}, "lang": {"type": "string", "enum": ["en"]}},
        "required": ["query", "lang"]})})
    res = run(replay_episode(traj, "test-support", ReplayAgent(FactStub(), rewrite)))
    assert res.status == "unknown" and res.replayed_reward is None
    assert len(res.misses) == 1 and res.misses[0].resolution == "unknown"
    assert "left the recording" in res.error and "search_kb" in res.error

    calls: list[dict[str, Any]] = []
    live = LiveTools()
    live.register("search_kb", lambda **kw: calls.append(kw) or kb_search(kw["query"]))
    res = run(replay_episode(traj, "test-support", ReplayAgent(FactStub(), rewrite), live=live))
    assert res.status == "ok" and res.replayed_reward == 1.0
    assert [m.resolution for m in res.misses] == ["live"] and calls == [{"query": ORDER_QUESTIONS[0], "lang": "en"}]

    ev = run(evaluate_candidate(store, ids, "test-support", ReplayAgent(FactStub(), rewrite), save=False))
    assert ev.unknown == 1 and ev.scored == 0 and ev.success_delta is None
    assert "left the recording" in ev.evidence[0]["misses"][0]


@replayable(name="test-openai-sdk")
async def openai_sdk_agent(input: str, model: Any, tools: Any) -> Any:
    """An agent written against the OpenAI SDK: the replay's client answers in process."""
    client = model.openai()
    messages: list[dict[str, Any]] = [{"role": "user", "content": input}]
    kb = {"type": "function", "function": {"name": "search_kb", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
    for _ in range(3):
        resp = await client.chat.completions.create(model="policy", messages=messages, tools=[kb], temperature=0)
        msg = resp.choices[0].message
        messages.append(msg.model_dump(exclude_none=True))
        if not msg.tool_calls:
            await client.close()
            return msg.content
        for c in msg.tool_calls:
            out = tools.call(c.function.name, **json.loads(c.function.arguments))
            messages.append({"role": "tool", "tool_call_id": c.id, "content": json.dumps(out)})
    return None


def test_openai_sdk_agent_records_and_replays(store: Any) -> None:
    from molt.replay import record_episode, save_trajectory

    from .conftest import live_tools

    events, _, answer = run(record_episode("test-openai-sdk", ORDER_QUESTIONS[2], ReplayAgent(FactStub()),
                                           live_tools(), verifier="contains:shipped"))
    assert "shipped" in answer
    save_trajectory(store, events)
    res = run(replay_episode(load_trajectory(store, events[0].trajectory_id), "test-openai-sdk",
                             ReplayAgent(FactStub()), verifier="contains:shipped"))
    assert res.status == "ok" and res.same_actions and res.answer == answer and res.replayed_reward == 1.0


def test_step_replay_compares_with_the_late_correction(store: Any, stub_policy: ReplayAgent) -> None:
    from molt.atdp import EventKind, RewardAnnotation, RewardSource
    from molt.replay import replay_step

    ids = run(record_window(store, stub_policy, [REFUND_QUESTIONS[0]]))
    traj = load_trajectory(store, ids[0])
    first_call = next(e for e in traj.events if e.kind == EventKind.MODEL_CALL)
    store.append_rewards([RewardAnnotation(trajectory_id=ids[0], event_id=first_call.event_id, value=-1.0,
                                           source=RewardSource.USER_CORRECTION, reason="45 days")])
    traj = load_trajectory(store, ids[0])
    as_recorded = run(replay_step(traj, first_call.event_id, ReplayAgent(FactStub())))
    assert as_recorded.same_as_recorded and as_recorded.corrected == "45 days"
    assert as_recorded.matches_correction is False
    with_fact = run(replay_step(traj, first_call.event_id, ReplayAgent(FactStub(), Overrides(memories=(FACT,)))))
    assert not with_fact.same_as_recorded and with_fact.matches_correction is True
    assert with_fact.replayed.text == FACT and with_fact.recorded.tool_calls[0][0] == "search_kb"


def test_task_verifier_registry_is_used_when_none_is_named(store: Any, stub_policy: ReplayAgent) -> None:
    from molt.replay import TASK_VERIFIERS, build_verifier

    ids = run(record_window(store, stub_policy, [ORDER_QUESTIONS[0]]))
    traj = load_trajectory(store, ids[0])
    TASK_VERIFIERS.register("support", build_verifier("contains:delivered"))
    try:
        res = run(replay_episode(traj, "test-support", ReplayAgent(FactStub()), verifier=None))
        assert res.replayed_reward == 1.0  # the agent's own verifier ("shipped") wins over the task's
        from molt.replay.decorator import ReplayableAgent

        from .conftest import support_agent

        bare = ReplayableAgent(fn=support_agent.fn, name="bare-support")
        res = run(replay_episode(traj, bare, ReplayAgent(FactStub())))
        assert res.verdict is not None and "delivered" in res.verdict.detail and res.replayed_reward == 0.0
    finally:
        TASK_VERIFIERS.unregister("support")
