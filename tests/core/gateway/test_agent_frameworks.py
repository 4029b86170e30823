"""Real agent frameworks run a tool-using task through the gateway with only their base URL changed,
and the trajectory is complete in the store: model call → tool result → model call, linked."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from molt.atdp import EventKind
from molt.backends import StubBackend

from .conftest import Served

SCRIPT = [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
          "It is sunny in Paris, 21 C."]


def _check_trajectory(served: Served, tool_output: str) -> None:
    served.flush()
    [tid] = served.store.trajectory_ids()
    events = served.store.trajectory(tid).events
    assert [e.kind for e in events] == [EventKind.MODEL_CALL, EventKind.TOOL_CALL, EventKind.MODEL_CALL]
    first, tool, last = events
    [call] = first.action.tool_calls
    assert call.name == "get_weather" and call.arguments == {"city": "Paris"}
    assert tool.action.tool_name == "get_weather" and tool.action.arguments == {"city": "Paris"}
    assert tool_output in str(tool.outcome.output)
    assert last.action.text == "It is sunny in Paris, 21 C."
    assert tool.parent_id == first.event_id and last.parent_id == tool.event_id
    assert all(e.action.tokens is not None for e in (first, last))  # token-level capture on the stub
    assert served.store.verify(tid).ok


def test_langchain_chat_openai_tool_loop(serve: Any) -> None:
    pytest.importorskip("langchain_openai", reason="langchain-openai is installed in the main environment")
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    served = serve([StubBackend(script=SCRIPT)])

    @tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return f"sunny in {city}, 21 C"

    llm = ChatOpenAI(model="stub", base_url=served.base_url, api_key="sk-acme-writer", max_retries=0)
    agent = llm.bind_tools([get_weather])
    messages: list[Any] = [HumanMessage("What is the weather in Paris?")]
    for _ in range(4):  # the usual agent loop: call tools until the model answers
        ai = agent.invoke(messages)
        messages.append(ai)
        if not ai.tool_calls:
            break
        for call in ai.tool_calls:
            messages.append(ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"]))
    assert messages[-1].content == "It is sunny in Paris, 21 C."
    _check_trajectory(served, "sunny in Paris, 21 C")


def test_openai_agents_sdk_runner(serve: Any) -> None:
    agents = pytest.importorskip("agents", reason="openai-agents is installed in the main environment")
    from openai import AsyncOpenAI

    served = serve([StubBackend(script=SCRIPT)])

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return f"sunny in {city}, 21 C"

    async def run() -> str:
        client = AsyncOpenAI(base_url=served.base_url, api_key="sk-acme-writer", max_retries=0)
        model = agents.OpenAIChatCompletionsModel(model="stub", openai_client=client)
        agent = agents.Agent(name="weather", instructions="Answer with the weather.", tools=[get_weather],
                             model=model)
        try:
            result = await agents.Runner.run(agent, "What is the weather in Paris?",
                                             run_config=agents.RunConfig(tracing_disabled=True))
            return str(result.final_output)
        finally:
            await client.close()

    assert asyncio.run(run()) == "It is sunny in Paris, 21 C."
    _check_trajectory(served, "sunny in Paris, 21 C")
