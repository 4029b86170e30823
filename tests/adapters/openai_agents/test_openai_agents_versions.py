"""The live policy version applied where an Agents SDK agent runs: the Model wrapper edits the
instructions and function tools of each call, a renamed tool's call runs the agent's own tool, the
version is in provenance, and an unreachable registry never breaks the agent."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from agents import Agent, FunctionTool, ModelResponse, RunConfig, Runner, Usage, function_tool, set_trace_processors
from agents.models.interface import Model
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from molt.atdp import EventKind
from molt.capture import MemorySink, Recorder
from molt.control.versions import AgentConfig, ModelPart, VersionRegistry
from molt.harness import HarnessSpec, ToolRewrite
from molt_openai_agents import MoltTracingProcessor

TENANT, AGENT = "glasshouse", "plant-desk"


class EchoModel(Model):
    """Calls the first function tool it is offered (by that name), then answers with its instructions."""

    seen: ClassVar[list[tuple[str | None, list[Any]]]] = []

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: list[Any],
                           output_schema: Any, handoffs: Any, tracing: Any, **kwargs: Any) -> ModelResponse:
        EchoModel.seen.append((system_instructions, list(tools)))
        fns = [t for t in tools if isinstance(t, FunctionTool)]
        kinds = [i.get("type") if isinstance(i, dict) else getattr(i, "type", None) for i in input or []]
        answered = isinstance(input, list) and "function_call_output" in kinds
        if fns and not answered:
            item: Any = ResponseFunctionToolCall(type="function_call", call_id="c1", name=fns[0].name,
                                                 arguments='{"plant": "fern"}', id="fc1", status="completed")
        else:
            item = ResponseOutputMessage(id="m1", type="message", role="assistant", status="completed", content=[
                ResponseOutputText(type="output_text", text=f"answer [{system_instructions}]", annotations=[])])
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool
def watering(plant: str) -> str:
    """Watering schedule."""
    return f"water the {plant} every 3 days"



@pytest.fixture()
def recorded(tmp_path: Path) -> Iterator[tuple[Recorder, MemorySink]]:
    sink = MemorySink()
    rec = Recorder(sink, spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0)
    yield rec, sink
    set_trace_processors([])
    rec.close(timeout=5)


def _run(agent: Agent[Any], text: str) -> Any:
    return asyncio.run(Runner.run(agent, text, run_config=RunConfig(tracing_disabled=False)))


def test_model_wrapper_applies_instructions_and_tools_and_maps_names_back(
        registry: VersionRegistry, recorded: tuple[Recorder, MemorySink]) -> None:
    rec, sink = recorded
    base = registry.ensure_base(TENANT, AGENT, AgentConfig(model=ModelPart(base="echo")))
    parts = base.parts.model_copy(update={"harness": HarnessSpec(memories=("Ferns like shade.",))})
    v2 = registry.create(TENANT, AGENT, parts.with_tools(
        {"watering": ToolRewrite(description="Days between waterings, by plant.", rename="water_days")}),
        parent=base.version_id)
    registry.promote(v2.version_id, actor="control-plane")
    proc = MoltTracingProcessor(rec, tenant_id=TENANT, agent_id=AGENT, versions=registry, strict=True)
    set_trace_processors([proc])
    EchoModel.seen = []
    agent = Agent(name="plants", instructions="You help with plants.", tools=[watering], model=proc.wrap(EchoModel()))
    try:
        result = _run(agent, "How often do I water a fern?")
        assert proc.flush(deliver=True)
    finally:
        proc.close()
    instructions, tools = EchoModel.seen[0]
    assert instructions is not None and instructions.startswith("You help with plants.")
    assert "Ferns like shade." in instructions
    assert [(t.name, t.description) for t in tools] == [("water_days", "Days between waterings, by plant.")]
    assert "Ferns like shade." in result.final_output  # the second call saw the version too
    assert watering.name == "watering"  # the agent's own tool is untouched ...
    outputs = [i for i in result.new_items if getattr(i, "type", "") == "tool_call_output_item"]
    assert outputs and "every 3 days" in str(outputs[0].output)  # ... and it ran for "water_days"
    events = [e for t in {r.x["trajectory_id"] for r in sink.events.values()} for e in sink.trajectory_events(t)]
    tools_run = [e for e in events if e.kind == EventKind.TOOL_CALL]  # (a custom Model reports no generation span)
    assert [e.action.tool_name for e in tools_run] == ["watering"]  # type: ignore[union-attr]
    assert events and {e.provenance.policy_version for e in events} == {v2.version_id}


def test_unreachable_registry_never_breaks_the_agent(registry: VersionRegistry,
                                                     recorded: tuple[Recorder, MemorySink]) -> None:
    rec, _ = recorded

    class Down:
        def live(self, tenant_id: str, agent_id: str) -> Any:
            raise ConnectionError("the store is unreachable")

    proc = MoltTracingProcessor(rec, tenant_id=TENANT, agent_id=AGENT, versions=Down(), version_poll_s=0.05)
    EchoModel.seen = []
    agent = Agent(name="plants", instructions="Own.", tools=[watering], model=proc.wrap(EchoModel()))
    try:
        time.sleep(0.2)
        result = _run(agent, "Fern?")
    finally:
        proc.close()
    assert proc.live is not None and proc.live.errors >= 2
    assert result.final_output == "answer [Own.]" and EchoModel.seen[0][1][0].name == "watering"
