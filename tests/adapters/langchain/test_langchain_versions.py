"""The live policy version applied where a LangChain agent runs (no gateway): the chat-model wrapper
applies the registry's live version at every model call, maps renamed tools back, stamps the version
into provenance, and keeps the agent working when the registry is unreachable.

The efficacy test evolves a real LangGraph agent on SmolLM2-135M through this path: a memory the
control plane's way inserts (a memory row plus a version naming it, promoted) changes its answers on
fresh traffic, with no restart.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip("langgraph", reason="the agent is a LangGraph agent (pip install molt-langchain[test])")

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent

from molt.atdp import EventKind, ToolCall
from molt.capture import MemorySink, Recorder
from molt.control.versions import AgentConfig, ModelPart, VersionRegistry
from molt.harness import HarnessSpec, ToolRewrite
from molt.replay import load_trajectory
from molt.store import Store
from molt_langchain import MoltCallbackHandler

ROOT = Path(__file__).resolve().parents[3]
TENANT, AGENT = "harbour", "ferry-desk"


class EchoingModel(BaseChatModel):
    """Calls the first tool it is offered (by the name it is offered), then answers with the system
    prompt it saw; remembers every call's messages and tools."""

    seen: ClassVar[list[tuple[list[BaseMessage], list[dict[str, Any]]]]] = []

    @property
    def _llm_type(self) -> str:
        return "echoing"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=list(tools), **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        tools = kwargs.get("tools") or []
        self.seen.append((list(messages), tools))
        if tools and not any(isinstance(m, ToolMessage) for m in messages):
            name = tools[0]["function"]["name"]
            msg = AIMessage(content="", tool_calls=[{"id": "c1", "name": name, "args": {"port": "Oslo"}}])
        else:
            system = next((str(m.content) for m in messages if isinstance(m, SystemMessage)), "")
            msg = AIMessage(content=f"answer [{system}]")
        return ChatResult(generations=[ChatGeneration(message=msg)])


@tool
def timetable(port: str) -> str:
    """Departures from a port."""
    return f"departures from {port}: 07:40, 12:10"



@pytest.fixture()
def recorded(tmp_path: Path) -> Iterator[tuple[Recorder, MemorySink]]:
    sink = MemorySink()
    # raw capture: what the adapter maps, value by value (governance would redact some of it)
    rec = Recorder(sink, spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0, pipeline=None)
    yield rec, sink
    rec.close(timeout=5)


def _base(reg: VersionRegistry) -> Any:
    return reg.ensure_base(TENANT, AGENT, AgentConfig(model=ModelPart(base="echoing")))


def _wait_for(handler: MoltCallbackHandler, version_id: str) -> None:
    deadline = time.monotonic() + 10
    while handler.version_id != version_id and time.monotonic() < deadline:
        time.sleep(0.05)
    assert handler.version_id == version_id


def test_wrapper_applies_the_live_version_and_maps_a_renamed_tool_back(
        registry: VersionRegistry, recorded: tuple[Recorder, MemorySink]) -> None:
    rec, sink = recorded
    base = _base(registry)
    parts = base.parts.model_copy(update={"harness": HarnessSpec(system_prompt="Always name the port.",
                                                                 memories=("Pets travel free.",))})
    rewrite = ToolRewrite(description="Departures by port name.", rename="departures")
    v2 = registry.create(TENANT, AGENT, parts.with_tools({"timetable": rewrite}), parent=base.version_id)
    handler = MoltCallbackHandler(rec, tenant_id=TENANT, agent_id=AGENT, versions=registry, strict=True)
    model = EchoingModel()
    EchoingModel.seen = []
    agent = create_react_agent(handler.wrap(model), [timetable], prompt="You are the ferry desk.")
    try:
        before = agent.invoke({"messages": [HumanMessage("When is the next ferry?")]}, {"callbacks": [handler]})
        assert before["messages"][-1].content == "answer [You are the ferry desk.]"
        registry.promote(v2.version_id, actor="test")
        _wait_for(handler, v2.version_id)
        after = agent.invoke({"messages": [HumanMessage("When is the next ferry?")]}, {"callbacks": [handler]})
        assert handler.flush(deliver=True)
    finally:
        handler.close()
    # the model saw the version: the harness's system prompt, memory and renamed, re-described tool ...
    msgs, tools = EchoingModel.seen[-2]
    assert isinstance(msgs[0], SystemMessage) and "Always name the port." in str(msgs[0].content)
    assert "Pets travel free." in str(msgs[0].content)
    assert [t["function"]["name"] for t in tools] == ["departures"]
    assert tools[0]["function"]["description"] == "Departures by port name."
    # ... its call of "departures" reached the agent's own "timetable" tool, whose answer came back
    assert any(isinstance(m, ToolMessage) and "07:40" in str(m.content) for m in after["messages"])
    assert "Always name the port." in after["messages"][-1].content
    # and the agent itself never changed: its tool and prompt are its own
    assert timetable.name == "timetable" and before["messages"][0].content == "When is the next ferry?"
    events = [e for t in {e.trajectory_id for e in _all(sink)} for e in sink.trajectory_events(t)]
    by_version = {e.provenance.policy_version for e in events if e.kind == EventKind.MODEL_CALL}
    assert by_version == {base.version_id, v2.version_id}
    tools_after = [e for e in events if e.kind == EventKind.TOOL_CALL and e.provenance.policy_version == v2.version_id]
    assert tools_after and isinstance(tools_after[0].action, ToolCall)
    assert tools_after[0].action.tool_name == "timetable"
    assert all(e.provenance.harness_fingerprint for e in events if e.provenance.policy_version == v2.version_id)


def _all(sink: MemorySink) -> list[Any]:
    return [e for t in {r.x["trajectory_id"] for r in sink.events.values()} for e in sink.trajectory_events(t)]


def test_unreachable_registry_never_breaks_the_agent(registry: VersionRegistry, switchable: Any,
                                                     recorded: tuple[Recorder, MemorySink]) -> None:
    rec, _ = recorded
    base = _base(registry)
    v2 = registry.create(TENANT, AGENT, base.parts.model_copy(
        update={"harness": HarnessSpec(system_prompt="Be brief.")}), parent=base.version_id)
    registry.promote(v2.version_id, actor="test")

    source = switchable
    handler = MoltCallbackHandler(rec, tenant_id=TENANT, agent_id=AGENT, versions=source, version_poll_s=0.05)
    agent = create_react_agent(handler.wrap(EchoingModel()), [timetable])
    try:
        source.down = True
        time.sleep(0.3)  # several failed polls
        assert handler.live is not None and handler.live.errors >= 2
        out = agent.invoke({"messages": [HumanMessage("Next ferry?")]}, {"callbacks": [handler]})
    finally:
        handler.close()
    assert out["messages"][-1].content == "answer [Be brief.]"  # the last version read still applies


def test_without_versions_the_wrapper_changes_nothing(recorded: tuple[Recorder, MemorySink]) -> None:
    rec, _ = recorded
    handler = MoltCallbackHandler(rec)
    EchoingModel.seen = []
    out = create_react_agent(handler.wrap(EchoingModel()), [timetable], prompt="Own prompt.").invoke(
        {"messages": [HumanMessage("Next ferry?")]}, {"callbacks": [handler]})
    assert out["messages"][-1].content == "answer [Own prompt.]"
    assert [t["function"]["name"] for t in EchoingModel.seen[0][1]] == ["timetable"]


class _DeskLike:
    """A replay backend that behaves as ``EchoingModel``: calls the first tool it is offered (by its
    offered name, port "Oslo"), then answers with the system prompt it saw; remembers what it was offered."""

    @staticmethod
    def make() -> Any:
        from molt.backends import StubBackend
        from molt.backends.base import ToolCallOut

        class Backend(StubBackend):
            offered: ClassVar[list[list[dict[str, Any]]]] = []

            def _answer(self, req: Any) -> Any:
                self.offered.append(list(req.tools or []))
                if req.tools and not any(m.get("role") == "tool" for m in req.messages):
                    name = req.tools[0]["function"]["name"]
                    call = ToolCallOut(id="r1", name=name, arguments='{"port": "Oslo"}')
                    return None, [call], name
                system = req.messages[0]["content"] if req.messages[0].get("role") == "system" else ""
                return f"answer [{system}]", None, system

        return Backend()


def test_adapter_recording_replays_like_a_gateway_one(tmp_path: Path) -> None:
    """The plane's replay of a LangChain agent captured by the adapter (no gateway): the recording holds
    the tools the model was offered (as the gateway records them), so a candidate's tool rewrite and
    memory apply to them, the renamed call is answered from the cassette, and the correction judges."""
    from molt.atdp import RewardAnnotation
    from molt.replay import Overrides, ReplayAgent
    from molt.replay.generic import loop_shape, replay_recording
    from molt.replay.load import offered_tools

    with Store.open(tmp_path / "store", auto_compact=False) as store:
        rec = Recorder(store, spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0, pipeline=None)
        handler = MoltCallbackHandler(rec, tenant_id=TENANT, agent_id=AGENT)
        agent = create_react_agent(handler.wrap(EchoingModel()), [timetable], prompt="You are the ferry desk.")
        try:
            agent.invoke({"messages": [HumanMessage("When is the next ferry?")]}, {"callbacks": [handler]})
            assert handler.flush(deliver=True)
            tid = store.table("events").search().where("seq = 0").limit(1).to_arrow().to_pylist()[0]["trajectory_id"]
            rec.reward(RewardAnnotation(trajectory_id=tid, value=0.0, source="user_correction",
                                        reason="The next ferry leaves at 07:40."))
            assert rec.flush(timeout=30, deliver=True)
        finally:
            handler.close()
            rec.close(timeout=5)
        traj = load_trajectory(store, tid)
        shape = loop_shape(traj)
        assert shape.faithful and len(shape.calls) == 2, shape.why
        assert [t["function"]["name"] for t in offered_tools(shape.calls[0]) or []] == ["timetable"]

        backend = _DeskLike.make()
        as_recorded = asyncio.run(replay_recording(traj, ReplayAgent(backend), tenant_id=TENANT))
        assert as_recorded.status == "ok" and as_recorded.same_actions and as_recorded.replayed_reward == 0.0

        backend.offered.clear()
        rename = ToolRewrite(description="Departures by port name.", rename="departures")
        cand = Overrides(memories=("The next ferry leaves at 07:40.",), tool_rewrites={"timetable": rename})
        fixed = asyncio.run(replay_recording(traj, ReplayAgent(backend, cand), tenant_id=TENANT))
    # the model was offered the candidate's tool (renamed, re-described) ...
    assert [(t["function"]["name"], t["function"]["description"]) for t in backend.offered[0]] == [
        ("departures", "Departures by port name.")]
    # ... its call of "departures" was mapped back and answered from the recording, and the memory
    # made the answer state what the user said
    assert fixed.status == "ok" and fixed.mode == "episode" and not fixed.misses, fixed.error
    assert fixed.actions[1].tool_calls[0][0] == "tool:timetable"
    assert fixed.replayed_reward == 1.0 and fixed.verdict.detail == "correction: states 07:40"


# ---------------------------------------------------------------------- efficacy on SmolLM2-135M

#: What the users tell the agent when it misses the fact (their correction): one checkable fact, the
#: pier number, which is also what the live check looks for.
FACT = "Nordhavn Ferries' lost-property desk is at Pier 19."
QUESTIONS = [
    "Where is the Nordhavn Ferries lost-property desk?",
    "I left my bag on a Nordhavn ferry. Where do I pick it up?",
    "Which pier has the Nordhavn lost-property office?",
    "Where can I collect items I forgot on a Nordhavn ferry?",
    "Nordhavn Ferries: where is lost property?",
    "Where do I find the lost and found for Nordhavn Ferries?",
    "Nordhavn ferry lost property: which pier do I go to?",
]
#: Other requests the agent serves in the same window (nobody complains about them): as many as the
#: questions, so 7 failures beside 7 others clear the evidence bar split over the regions of the request
#: tree that may hold them (Fisher 1/C(14,7) = 0.0003; 6 beside 6 is 0.0011, above 0.01 / (3 x 5)).
OTHER = ["Write a two-line poem about the sea.", "Translate 'good morning' into French.",
         "Give me a synonym for 'happy'.", "Name a fruit that is yellow.",
         "What is the capital of Norway?", "Spell the word 'harbour' backwards.",
         "How many days are in a leap year?"]
SYSTEM = "You are the Nordhavn Ferries customer assistant. Answer in one or two sentences."


class LocalChat(BaseChatModel):
    """The agent's own model: Molt's in-process local backend (SmolLM2-135M), greedy. Its sampling
    parameters are model fields reported in ``_identifying_params``, as a provider's chat model
    (``ChatOpenAI(temperature=0, max_tokens=28)``) reports them: LangChain hands them to callbacks, so
    the recording says how the agent sampled and replay samples the same way."""

    backend: Any
    temperature: float = 0.0
    max_tokens: int = 28

    @property
    def _llm_type(self) -> str:
        return "molt-local"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.backend.model, "temperature": self.temperature, "max_tokens": self.max_tokens}

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        from langchain_core.messages import convert_to_openai_messages

        from molt.backends.base import ChatRequest

        req = ChatRequest(model=self.backend.model, messages=convert_to_openai_messages(messages),
                          temperature=self.temperature, max_tokens=self.max_tokens)
        text = asyncio.run(self.backend.chat(req)).choices[0].text
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


@pytest.mark.slow
@pytest.mark.timeout(1800)  # about a minute on a quiet machine; generous for a loaded one
def test_plane_fixes_a_langchain_agent_through_the_adapter_on_smollm2(tmp_path: Path) -> None:
    """No gateway, no registration: the users correct the answers that miss the fact, the control plane
    replays a memory candidate on the adapter's recordings (generic replay, SmolLM2 as the replay
    backend) and promotes it; the adapter applies the new version at its next poll and fresh traffic
    gets the fact, the version in provenance."""
    from molt.atdp import RewardAnnotation
    from molt.backends import LocalBackend
    from molt.backends.model import ensure_policy_model
    from molt.control.memory import MemoryStore, RetrievalHarness
    from molt.control.plane import ControlPlane, PlaneSettings
    from molt.replay import AGENTS

    home = Path(os.environ.get("MOLT_TEST_MODEL_HOME", ROOT / ".molt" / "test-models"))
    backend = LocalBackend(model_path=ensure_policy_model(home), threads=2)
    asyncio.run(backend.start())
    # raw capture: what the adapter maps, value by value (governance would redact some of it)
    with Store.open(tmp_path / "store", auto_compact=False) as store:
        rec = Recorder(store, spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0, pipeline=None)
        registry, memories = VersionRegistry(store), MemoryStore(store)
        parts = AgentConfig(model=ModelPart(base=backend.model))
        base = registry.ensure_base(TENANT, AGENT, parts)
        handler = MoltCallbackHandler(rec, tenant_id=TENANT, agent_id=AGENT, versions=registry,
                                      harness=RetrievalHarness(memories), version_poll_s=1.0)
        agent = create_react_agent(handler.wrap(LocalChat(backend=backend)), [], prompt=SYSTEM)

        def ask(questions: list[str]) -> list[bool]:
            return ["19" in str(agent.invoke({"messages": [HumanMessage(q)]}, {"callbacks": [handler]})
                                ["messages"][-1].content) for q in questions]

        def trajectories() -> list[str]:
            assert handler.flush(deliver=True)
            store.table("events").checkout_latest()
            rows = store.table("events").search().where("seq = 0").select(["trajectory_id", "ts"]).limit(None)
            return [r["trajectory_id"] for r in sorted(rows.to_arrow().to_pylist(), key=lambda r: r["ts"])]

        try:
            before = ask(QUESTIONS)
            ask(OTHER)
            tids = trajectories()
            assert len(tids) == len(QUESTIONS) + len(OTHER)
            for tid, ok in zip(tids, before, strict=False):  # the users' word, late
                rec.reward(RewardAnnotation(trajectory_id=tid, value=1.0, source="user_feedback") if ok else
                           RewardAnnotation(trajectory_id=tid, value=0.0, source="user_correction", reason=FACT))
            assert rec.flush(timeout=60, deliver=True)

            assert AGENT not in AGENTS  # nothing registered the agent
            plane = ControlPlane(store, backend, base_parts=parts,
                                 settings=PlaneSettings(promote_directly=True, replay_sample=4))
            result = plane.run_cycle(TENANT, AGENT)
            r = result.record
            assert result.choice == "memory_insert", (r.reason, r.actions, r.rejected, r.candidates)
            chosen = next(c for c in r.candidates if c["kind"] == "memory_insert")
            replay = chosen["evidence"]["replay"]
            assert replay["mode"] == "generic replay from the recording" and replay["success_delta"] > 0
            fixed = result.version
            assert fixed is not None and fixed.status == "live"
            _wait_for(handler, fixed.version_id)
            after = ask(QUESTIONS)
            later = [t for t in trajectories() if t not in tids]
            old = [load_trajectory(store, t) for t in tids]
            new = [load_trajectory(store, t) for t in later]
        finally:
            handler.close()
            rec.close(timeout=5)
            asyncio.run(backend.aclose())
    print(f"\nSmolLM2-135M LangChain agent, adapter path, evolved by the plane: {sum(before)}/{len(QUESTIONS)} "
          f"before, {sum(after)}/{len(QUESTIONS)} after; replay {replay['baseline_success_rate']:.2f} -> "
          f"{replay['candidate_success_rate']:.2f} ({replay['scored']} scored, {replay['unknown']} unknown)")
    assert sum(after) >= sum(before) + len(QUESTIONS) // 2, (before, after)
    gens = [e for t in old for e in t.events if e.kind == EventKind.MODEL_CALL]
    assert {e.provenance.policy_version for e in gens} == {base.version_id}
    # the recording says how the agent sampled, so replay sampled the same way
    assert all(e.action.sampling == {"temperature": 0.0, "max_tokens": 28} for e in gens)
    assert len(new) == len(QUESTIONS)
    assert {e.provenance.policy_version for t in new for e in t.events if e.kind == EventKind.MODEL_CALL} == {
        fixed.version_id}
