"""Generic replay: an agent Molt did not write, captured by a real gateway, re-driven from its recording
alone (no ``@molt.replayable``); bad recordings are refused or unknown with the reason, never a success."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from molt.atdp import EventKind
from molt.backends import StubBackend
from molt.capture import Recorder
from molt.errors import ReplayError
from molt.gateway import Gateway, GatewayConfig, create_app
from molt.gateway.loopback import ServerThread
from molt.replay import LiveTools, Normalization, Overrides, ReplayAgent, evaluate_candidate, load_trajectory
from molt.replay.generic import checkable_facts, first_wrong_call, loop_shape, replay_recording, states_fact
from molt.store import Store

from .conftest import FactStub

TOOLS = [{"type": "function", "function": {
    "name": "find_slip", "description": "Find a berth slip by its code.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]
FACT = "The harbour's overnight mooring fee is 42 euros."
CORRECTION = FACT
#: The plane's normalisation (molt.control.plane): business ids are matched, only time keys ignored.
PLANE_NORMALIZATION = Normalization(ignore_key_pattern=r"(_at|_ts)$|timestamp")


class Harbour:
    """A gateway over a model that reads its context (``FactStub``), recording into a real store."""

    def __init__(self, tmp: Path):
        self.store = Store.open(tmp / "store", auto_compact=False)
        self.recorder = Recorder(self.store, spool_dir=tmp / "spool", fsync="never")
        gw = Gateway([FactStub()], recorder=self.recorder, store=self.store, config=GatewayConfig(health_interval_s=0))
        self.server = ServerThread(create_app(gw)).__enter__()

    def ask(self, question: str | list[str], *, agent: str = "harbour-desk",
            tool: Callable[[dict[str, Any]], str] | None = None, edit_history: bool = False,
            remind: bool = False) -> str:
        """The generic agent loop (it knows only the base URL): ask, run the tools asked for, ask again;
        a list of questions is one conversation, a user turn each (``remind``: the agent adds a system
        reminder before each later turn, as some agents do)."""
        tool = tool or (lambda args: f"no slip matches {args.get('query', '')!r}")
        questions = [question] if isinstance(question, str) else list(question)
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You are the harbour desk."}]
        tid = ""
        for i, q in enumerate(questions):
            if i and remind:
                messages.append({"role": "system", "content": "Reminder: be polite."})
            messages.append({"role": "user", "content": q})
            tid = self._turn(messages, agent, tool, edit_history)
        return tid

    def _turn(self, messages: list[dict[str, Any]], agent: str, tool: Callable[[dict[str, Any]], str],
              edit_history: bool) -> str:
        headers = {"X-Molt-Agent": agent}
        with httpx.Client(base_url=self.server.url + "/v1", timeout=30) as http:
            for _ in range(4):
                body = {"model": "stub", "messages": messages, "tools": TOOLS, "temperature": 0}
                r = http.post("/chat/completions", json=body, headers=headers)
                r.raise_for_status()
                tid = r.headers["x-molt-trajectory"]
                if edit_history:  # its history no longer links the calls: it names its trajectory
                    headers["X-Molt-Trajectory"] = tid
                msg = r.json()["choices"][0]["message"]
                messages.append({k: v for k, v in msg.items() if v is not None})
                if not msg.get("tool_calls"):
                    return tid
                for c in msg["tool_calls"]:
                    out = tool(orjson.loads(c["function"]["arguments"]))
                    messages.append({"role": "tool", "tool_call_id": c["id"], "content": out})
                if edit_history:  # an agent that rewrites its history between calls (not a plain loop)
                    messages[0] = {"role": "system", "content": "You are the harbour desk. Be brief."}
        raise AssertionError("the agent did not answer")

    def correct(self, tid: str, reason: str | None, value: float = 0.0, source: str = "user_correction") -> None:
        with httpx.Client(base_url=self.server.url, timeout=30) as http:
            r = http.post("/v1/molt/rewards/trajectory",
                          json={"trajectory_id": tid, "value": value, "source": source, "reason": reason})
            r.raise_for_status()

    def load(self, tid: str) -> Any:
        assert self.recorder.flush(timeout=30, deliver=True)
        return load_trajectory(self.store, tid)

    def close(self) -> None:
        self.server.__exit__()
        self.recorder.close()
        self.store.close()


@pytest.fixture
def harbour(tmp_path: Path) -> Iterator[Harbour]:
    h = Harbour(tmp_path)
    yield h
    h.close()


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_gateway_trajectory_is_re_driven_from_its_recording(harbour: Harbour) -> None:
    tid = harbour.ask("How much is the overnight mooring fee at the harbour?")
    harbour.correct(tid, CORRECTION)
    traj = harbour.load(tid)
    shape = loop_shape(traj)
    assert shape.faithful and len(shape.calls) == 2, shape.why
    assert not any(e.kind == EventKind.USER_MESSAGE for e in traj.events)  # the gateway records model calls only

    # As recorded: the same tool call is answered from the cassette and the same answer keeps the
    # recorded outcome (a failure the user corrected).
    same = _run(replay_recording(traj, ReplayAgent(FactStub()), tenant_id="default"))
    assert same.status == "ok" and same.mode == "episode" and same.same_actions and not same.misses
    assert same.replayed_reward == 0.0 and same.verdict.detail.startswith("recorded answer")

    # Under a memory candidate the model answers from the memory; the user's correction judges it.
    fixed = _run(replay_recording(traj, ReplayAgent(FactStub(), Overrides(memories=(FACT,))), tenant_id="default"))
    assert fixed.status == "ok" and fixed.answer == FACT and not fixed.same_actions
    assert fixed.replayed_reward == 1.0 and fixed.verdict.detail == "correction: states 42"

    # An unrelated memory does not help, and the correction says so.
    unrelated = Overrides(memories=("Slips are cleaned on Mondays.",))
    other = _run(replay_recording(traj, ReplayAgent(FactStub(), unrelated), tenant_id="default"))
    assert other.status == "ok" and other.replayed_reward == 0.0


def test_evaluate_candidate_without_a_registered_agent(harbour: Harbour) -> None:
    ids = [harbour.ask(f"What is the overnight mooring fee? (boat {i})") for i in range(3)]
    for tid in ids:
        harbour.correct(tid, CORRECTION)
    harbour.load(ids[-1])
    ev = _run(evaluate_candidate(harbour.store, ids, None, ReplayAgent(FactStub(), Overrides(memories=(FACT,))),
                                 candidate_id="mem-fee", tenant_id="default", normalization=PLANE_NORMALIZATION))
    assert (ev.sampled, ev.scored, ev.unknown, ev.invalid) == (3, 3, 0, 0)
    assert ev.baseline_success_rate == 0.0 and ev.candidate_success_rate == 1.0 and ev.success_delta_ci[0] > 0
    assert {e["mode"] for e in ev.evidence} == {"episode"}


def test_a_tool_call_that_leaves_the_recording_is_unknown_unless_a_live_tool_answers(harbour: Harbour) -> None:
    tid = harbour.ask("Find slip B-12 for me")
    harbour.correct(tid, "Slip B-12 is on pier 3.")
    traj = harbour.load(tid)
    # Exact, then the declared normalisation (whitespace) answers from the recording; another business
    # id (B-13) is a different request: it left the recording.
    spaced_call = {"name": "find_slip", "arguments": {"query": "  Find slip B-12 for me"}}
    spaced = StubBackend(script=[{"tool_calls": [spaced_call]}, "Slip B-12 is on pier 3."])
    hit = _run(replay_recording(traj, ReplayAgent(spaced), normalization=PLANE_NORMALIZATION))
    assert hit.status == "ok" and hit.replayed_reward == 1.0 and not hit.misses

    def other_id() -> StubBackend:
        return StubBackend(script=[{"tool_calls": [{"name": "find_slip", "arguments": {"query": "Find slip B-13"}}]},
                                   "Slip B-13 is on pier 3."])

    miss = _run(replay_recording(traj, ReplayAgent(other_id()), normalization=PLANE_NORMALIZATION))
    assert miss.status == "unknown" and miss.replayed_reward is None and "left the recording" in miss.error
    assert [m.resolution for m in miss.misses] == ["unknown"]
    ev = _run(evaluate_candidate(harbour.store, [tid], None, ReplayAgent(other_id()), save=False))
    assert (ev.unknown, ev.scored, ev.candidate_success_rate) == (1, 0, None)  # counted, never a success

    live = LiveTools()
    live.register("find_slip", lambda query: "pier 3")
    answered = _run(replay_recording(traj, ReplayAgent(other_id()), live=live, normalization=PLANE_NORMALIZATION))
    assert answered.status == "ok" and [m.resolution for m in answered.misses] == ["live"]


def test_an_agent_that_edits_its_history_falls_back_to_step_replay(harbour: Harbour) -> None:
    tid = harbour.ask("How much is the overnight mooring fee?", edit_history=True)
    harbour.correct(tid, CORRECTION)
    traj = harbour.load(tid)
    shape = loop_shape(traj)
    assert not shape.faithful and "does not extend the messages" in shape.why
    assert first_wrong_call(traj) is shape.calls[-1]  # the corrected answer
    res = _run(replay_recording(traj, ReplayAgent(FactStub(), Overrides(memories=(FACT,)))))
    assert res.mode.startswith("step (") and res.status == "ok" and res.replayed_reward == 1.0


def test_judge_model_decides_when_no_verifier_or_checkable_correction(harbour: Harbour) -> None:
    tid = harbour.ask("Can I moor overnight at the harbour?")
    harbour.correct(tid, "Yes, overnight mooring is allowed at the visitor pontoon.")
    traj = harbour.load(tid)
    policy = ReplayAgent(FactStub(), Overrides(memories=("Overnight mooring is allowed at the visitor pontoon.",)))
    judged = _run(replay_recording(traj, policy, judge=StubBackend(script=["PASS"])))
    assert judged.status == "ok" and judged.replayed_reward == 1.0 and judged.verdict.detail.startswith("judge")
    failed = _run(replay_recording(traj, policy, judge=StubBackend(script=["FAIL"])))
    assert failed.replayed_reward == 0.0
    # A verifier, when the trajectory has one, comes first.
    verified = _run(replay_recording(traj, policy, verifier="contains:visitor pontoon",
                                     judge=StubBackend(script=["FAIL"])))
    assert verified.replayed_reward == 1.0 and verified.verdict.detail.startswith("verifier")


def test_later_user_turns_are_re_driven_from_the_recording(harbour: Harbour) -> None:
    """A conversation of two user turns: the fact is missing from the answer to the second. Replay
    re-drives both turns — the second opened by the candidate's own first answer and the user's recorded
    message — and judges the conversation's answers (the first turn alone would never show the fix)."""
    tid = harbour.ask(["Hi, can you help me?", "How much is the overnight mooring fee at the harbour?"])
    harbour.correct(tid, CORRECTION)
    traj = harbour.load(tid)
    shape = loop_shape(traj)
    assert shape.faithful and shape.why == "plain tool-calling loop over 2 user turns", shape.why
    assert len(shape.calls) == 4 and [[m["content"] for m in t] for t in shape.later_turns] == [
        ["How much is the overnight mooring fee at the harbour?"]]

    same = _run(replay_recording(traj, ReplayAgent(FactStub()), tenant_id="default"))
    assert same.status == "ok" and same.same_actions and same.replayed_reward == 0.0
    assert same.verdict.detail.startswith("recorded answer") and len(same.actions) == 6  # 4 model calls, 2 tools

    fixed = _run(replay_recording(traj, ReplayAgent(FactStub(), Overrides(memories=(FACT,))), tenant_id="default"))
    assert fixed.status == "ok" and fixed.mode == "episode" and not fixed.misses, fixed.error
    first, second = fixed.answer.split("\n\n")
    assert first.startswith("The tool returned") and second == FACT  # turn 1 as recorded, turn 2 fixed
    assert fixed.replayed_reward == 1.0 and fixed.verdict.detail == "correction: states 42"
    # the second turn's request carried the candidate's first answer, then the user's recorded message
    asked = [m for m in fixed.actions if m.text == FACT]
    assert asked, fixed.actions


def test_a_later_turn_that_is_not_a_plain_loop_is_not_replayed(harbour: Harbour) -> None:
    tid = harbour.ask(["How much is the overnight mooring fee at the harbour?", "Thanks. And for a week?"],
                      remind=True)
    harbour.correct(tid, CORRECTION)
    traj = harbour.load(tid)
    shape = loop_shape(traj)
    assert shape.faithful and len(shape.calls) == 2 and not shape.later_turns
    assert "turn 2 is not replayed" in shape.why and "other than the user's next turn" in shape.why
    fixed = _run(replay_recording(traj, ReplayAgent(FactStub(), Overrides(memories=(FACT,))), tenant_id="default"))
    assert fixed.status == "ok" and fixed.answer == FACT and fixed.replayed_reward == 1.0


def test_an_agents_checker_judges_its_replays_without_a_task_label(harbour: Harbour) -> None:
    """No task in the traffic: a checker registered for the agent (AGENT_VERIFIERS) judges before the
    user's word, and sees which request it judges (the trajectory id)."""
    from molt.replay import AGENT_VERIFIERS
    from molt.replay.verifiers import CallableVerifier

    tid = harbour.ask("Can I moor overnight at the harbour?", agent="harbour-checked")
    harbour.correct(tid, CORRECTION)
    traj = harbour.load(tid)
    seen: list[str | None] = []

    def check(answer: Any, ctx: Any) -> bool:
        seen.append(ctx.trajectory_id)
        return "visitor pontoon" in str(answer)

    AGENT_VERIFIERS.register("harbour-checked", CallableVerifier(check))
    try:
        policy = ReplayAgent(FactStub(), Overrides(memories=("Overnight mooring is at the visitor pontoon.",)))
        res = _run(replay_recording(traj, policy))
    finally:
        AGENT_VERIFIERS.unregister("harbour-checked")
    assert res.replayed_reward == 1.0 and res.verdict.detail.startswith("verifier") and seen == [tid]


def test_checkable_facts() -> None:
    assert checkable_facts("The fee is 42 euros, due by 18:30 on 2026-05-01.") == ["42", "18:30", "2026-05-01"]
    assert checkable_facts("Slip B-12, pier 3.") == ["B-12", "3"]
    assert checkable_facts("Mooring is allowed.") == [] and checkable_facts("It costs $17.") == ["17"]
    assert states_fact("The fee is $17.", "17") and states_fact("slip b-12", "B-12")
    assert not states_fact("It is 170.", "17")
    # A redacted correction: the placeholders stand for values, not facts an answer could state.
    assert checkable_facts("<PERSON_1> has 2 bikes at dock <ADDRESS_12>.") == ["2"]


# ---------------------------------------------------------------------------------------- bad input


def _rewrite(store: Store, tid: str, edit: Callable[[list[Any]], list[Any]]) -> str:
    """A copy of trajectory ``tid`` under a new id with its events edited, sealed into a fresh chain."""
    from molt.atdp.ids import new_id
    from molt.replay import save_trajectory

    new = new_id()
    events = [e.model_copy(update={"trajectory_id": new}) for e in store.trajectory(tid).events]
    save_trajectory(store, edit(events), [r.model_copy(update={"trajectory_id": new}) for r in store.rewards(tid)])
    return new


def test_bad_recordings_are_refused_with_the_reason_and_never_count_as_success(harbour: Harbour) -> None:
    tid = harbour.ask("How much is the overnight mooring fee at the harbour?")
    harbour.correct(tid, CORRECTION)
    harbour.load(tid)
    store = harbour.store

    def no_outcome(events: list[Any]) -> list[Any]:
        i = next(i for i, e in enumerate(events) if e.kind == EventKind.TOOL_CALL)
        events[i] = events[i].model_copy(update={"outcome": None})
        return events

    def foreign(events: list[Any]) -> list[Any]:
        return [e.model_copy(update={"metadata": e.metadata.model_copy(update={"tenant_id": "globex"})})
                for e in events]

    partial = _rewrite(store, tid, no_outcome)
    other_tenant = _rewrite(store, tid, foreign)
    erased = _rewrite(store, tid, lambda e: e)
    from molt.store import Filter

    # Erasure (molt.governance.erasure) drops a payload and its salt and keeps the digest in the chain.
    store.table("events").update(where=str(Filter(trajectory_id=erased, seq=1)),
                                 values={"payload": None, "payload_salt": None})

    good = ReplayAgent(FactStub(), Overrides(memories=(FACT,)))  # would fix every one of them
    ev = _run(evaluate_candidate(store, [partial, other_tenant, erased], None, good, tenant_id="default", save=False))
    assert (ev.invalid, ev.scored, ev.candidate_success_rate, ev.success_delta) == (3, 0, None, None)
    reasons = {e["trajectory_id"]: e["error"] for e in ev.evidence}
    assert all(e["status"] == "invalid" for e in ev.evidence)
    assert "no recorded outcome" in reasons[partial]
    assert "belongs to tenant globex, not default" in reasons[other_tenant]
    assert "was erased" in reasons[erased]
    with pytest.raises(ReplayError, match="belongs to tenant globex"):
        _run(replay_recording(load_trajectory(store, other_tenant), good, tenant_id="default"))
    # The registered-agent path refuses another tenant's trajectory too.
    from molt.replay.generic import check_tenant

    with pytest.raises(ReplayError, match="refused"):
        check_tenant(load_trajectory(store, other_tenant), "default")


# ---------------------------------------------------------------------------------------- the plane


@pytest.mark.slow  # the plane loads the MiniLM embedder and the redactor's lexicon
def test_plane_fixes_an_unregistered_agent_through_generic_replay(harbour: Harbour) -> None:
    from molt.control.plane import ControlPlane, PlaneSettings
    from molt.control.versions import AgentConfig, ModelPart
    from molt.replay import AGENTS

    # 6 failures beside 6 successes: the smallest balanced window whose cluster clears the evidence bar's
    # three Bonferroni-split tests (Fisher 1/C(12,6) = 0.0011 < 0.01/3; with 5 beside 5 it is 0.0040)
    fee = [harbour.ask(f"How much is the overnight mooring fee at the harbour? (boat {i})") for i in range(6)]
    for tid in fee:
        harbour.correct(tid, CORRECTION)
    for q in ("Is the fuel dock open on Sundays?", "Where can I empty my holding tank?",
              "Do you sell ice at the chandlery?", "Can I rent a kayak here?", "Is there wifi on the pontoons?",
              "Where is the harbour master's office?"):
        harbour.ask(q)
    harbour.load(fee[-1])
    assert "harbour-desk" not in AGENTS
    plane = ControlPlane(harbour.store, FactStub(), base_parts=AgentConfig(model=ModelPart(base="stub")),
                         settings=PlaneSettings(promote_directly=True))
    result = plane.run_cycle("default", "harbour-desk")
    rec = result.record
    assert result.choice == "memory_insert", (rec.reason, rec.actions, rec.rejected)
    chosen = next(c for c in rec.candidates if c["kind"] == "memory_insert")
    replay = chosen["evidence"]["replay"]
    assert replay["mode"] == "generic replay from the recording"
    assert (replay["baseline_success_rate"], replay["candidate_success_rate"]) == (0.0, 1.0)
    assert result.version is not None and result.version.status == "live"
