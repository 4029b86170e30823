"""Cassette matching, verifiers, override parsing, statistics and the public surface."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import pytest

from molt.atdp import Event, EventKind, MemoryRead, Observation, Outcome, Passage, RetrievalQuery, ToolCall
from molt.errors import RegistryError, ReplayError
from molt.replay import Cassette, CassetteMiss, LiveTools, Normalization, VerifyContext, build_verifier, parse_overrides
from molt.stats import bootstrap_ci, newcombe_diff, wilson


def _cassette(**kw: Any) -> Cassette:
    tid = "t-1"
    evs = [
        Event(trajectory_id=tid, kind=EventKind.TOOL_CALL, action=ToolCall(
            tool_name="lookup", arguments={"order": "A-17", "request_id": "r-1", "opts": {"b": 1, "a": 2}}),
            outcome=Outcome(output={"state": "shipped"})),
        Event(trajectory_id=tid, kind=EventKind.TOOL_CALL, action=ToolCall(tool_name="poll", arguments={"job": 1}),
              outcome=Outcome(output="running")),
        Event(trajectory_id=tid, kind=EventKind.TOOL_CALL, action=ToolCall(tool_name="poll", arguments={"job": 1}),
              outcome=Outcome(output="done")),
        Event(trajectory_id=tid, kind=EventKind.RETRIEVAL, action=RetrievalQuery(query="refunds", index="kb"),
              observation=Observation(passages=[Passage(text="Refunds take 45 days.", doc_id="d1")])),
        Event(trajectory_id=tid, kind=EventKind.MEMORY_READ, action=MemoryRead(key="user.city"),
              outcome=Outcome(output="Paris")),
    ]
    return Cassette.from_events(evs, trajectory_id=tid, **kw)


def test_exact_then_normalised_match_and_ordered_recordings() -> None:
    c = _cassette()
    assert len(c) == 5
    hit = c.tool("lookup", {"opts": {"a": 2, "b": 1}, "request_id": "r-1", "order": "A-17"})  # key order
    assert hit.match == "exact" and hit.outcome.output == {"state": "shipped"}
    hit = c.tool("lookup", {"order": "  A-17 ", "request_id": "r-999", "opts": {"a": 2, "b": 1}})  # ids, spaces
    assert hit.match == "normalized" and hit.outcome.output == {"state": "shipped"}
    assert [c.tool("poll", {"job": 1}).outcome.output for _ in range(3)] == ["running", "done", "done"]
    assert c.retrieve("refunds", "kb").passages[0].text == "Refunds take 45 days."
    assert c.memory("user.city").outcome.output == "Paris"
    assert not c.misses


def test_miss_is_reported_then_unknown_or_live() -> None:
    c = _cassette()
    with pytest.raises(CassetteMiss) as info:
        c.tool("lookup", {"order": "B-2"})
    assert "left the recording" in str(info.value) and info.value.trajectory_id == "t-1"
    assert c.misses[0].resolution == "unknown" and c.misses[0].nearest is not None
    live = LiveTools()
    live.register("lookup", lambda order: {"state": "pending", "order": order})
    c = _cassette(live=live)
    hit = c.tool("lookup", {"order": "B-2"})
    assert hit.match == "live" and hit.outcome.output == {"state": "pending", "order": "B-2"}
    assert [m.resolution for m in c.misses] == ["live"]
    live.register("boom", lambda: 1 / 0)
    assert c.tool("boom", {}).outcome.status.value == "error"


def test_strict_normalisation_can_be_declared() -> None:
    c = _cassette(normalization=Normalization(ignore_keys=frozenset(), ignore_key_pattern=None,
                                              collapse_whitespace=False))
    with pytest.raises(CassetteMiss):
        c.tool("lookup", {"order": "A-17", "request_id": "r-2", "opts": {"a": 2, "b": 1}})


def test_verifiers() -> None:
    ctx = VerifyContext(input="q")

    def score(spec: Any, answer: Any) -> float:
        return asyncio.run(build_verifier(spec).ascore(answer, ctx)).reward

    assert score("exact:Yes", " yes ") == 1.0 and score("exact:Yes", "yes!") == 0.0
    assert score("contains:45 days", "It is 45 DAYS.") == 1.0
    assert score({"kind": "regex", "pattern": r"^\d+$"}, "42") == 1.0 and score("regex:^\\d+$", "x") == 0.0
    schema = {"type": "object", "properties": {"days": {"type": "integer"}}, "required": ["days"]}
    assert score({"kind": "json_schema", "schema": schema}, 'Answer: {"days": 45}') == 1.0
    assert score({"kind": "json_schema", "schema": schema}, {"days": "45"}) == 0.0

    def test_answer(answer: str) -> None:
        assert answer.endswith(".")

    assert score(test_answer, "ok.") == 1.0 and score(test_answer, "ok") == 0.0
    assert score(lambda a, c: 0.75, "x") == 0.75
    with pytest.raises(RegistryError, match="registered verifiers"):
        build_verifier({"kind": "nope"})


def test_judge_verifier_through_a_backend() -> None:
    from molt.backends import StubBackend
    from molt.replay.verifiers import JudgeVerifier

    judge = JudgeVerifier(StubBackend(script=["PASS"]), "states the window")
    assert asyncio.run(judge.ascore("45 days", VerifyContext(input="q"))).success
    judge = JudgeVerifier(StubBackend(script=["FAIL"]), "states the window")
    assert not asyncio.run(judge.ascore("no idea", VerifyContext(input="q"))).success


def test_parse_overrides() -> None:
    o = parse_overrides(["memory=Refunds take 45 days.", "memory=Office closes at 6.", "temperature=0",
                         "skill=refunds:Check the policy first.", "tool.search_kb.description=Search it.",
                         "system_prompt=Be brief.", "max_tokens=16"])
    assert o.memories == ("Refunds take 45 days.", "Office closes at 6.") and o.temperature == 0.0
    assert o.skills[0].name == "refunds" and o.tool_rewrites["search_kb"].description == "Search it."
    assert o.harness.fingerprint().startswith("h-") and o.fingerprint().startswith("cand-")
    assert parse_overrides([]).is_empty
    with pytest.raises(ValueError, match="known keys"):
        parse_overrides(["colour=blue"])


def test_intervals() -> None:
    lo, hi = wilson(8, 10)
    assert 0.44 < lo < 0.8 < hi < 0.98
    lo, hi = newcombe_diff(12, 12, 4, 12)
    assert lo == pytest.approx(0.2992, abs=1e-3) and hi == pytest.approx(0.8619, abs=1e-3)
    lo, hi = newcombe_diff(5, 10, 5, 10)
    assert lo < 0 < hi
    lo, hi = bootstrap_ci([1.0] * 8 + [0.0] * 4)
    assert 0.3 < lo < 2 / 3 < hi <= 1.0


def test_public_surface_is_sorted_and_lazy() -> None:
    import molt
    import molt.replay as r

    assert list(r.__all__) == sorted(r.__all__)
    for name in r.__all__:
        assert getattr(r, name) is not None
    assert molt.replayable is r.replayable
    with pytest.raises(AttributeError):
        importlib.import_module("molt.replay").nope  # noqa: B018


def test_replay_step_rejects_non_model_events(store: Any) -> None:
    from molt.replay import ReplayAgent, load_trajectory, replay_step

    from .conftest import ORDER_QUESTIONS, FactStub, record_window

    ids = asyncio.run(record_window(store, ReplayAgent(FactStub()), [ORDER_QUESTIONS[0]]))
    traj = load_trajectory(store, ids[0])
    with pytest.raises(ReplayError, match="model calls only"):
        asyncio.run(replay_step(traj, traj.events[0].event_id, ReplayAgent(FactStub())))


def test_model_override_must_be_served() -> None:
    from molt.backends import StubBackend
    from molt.replay import Overrides, ReplayAgent

    backend = StubBackend()
    asyncio.run(backend.load_adapter("lora-v2", "/adapters/v2"))
    d = asyncio.run(ReplayAgent(backend, Overrides(model="lora-v2")).decide([{"role": "user", "content": "hi"}]))
    assert d.text == "echo: hi"
    with pytest.raises(ReplayError, match="does not serve"):
        asyncio.run(ReplayAgent(backend, Overrides(model="lora-v9")).decide([{"role": "user", "content": "hi"}]))
