"""molt-langchain passes the adapter conformance suite, with LangGraph driving the scripted agent."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

pytest.importorskip("langgraph", reason="the LangGraph story needs langgraph (pip install molt-langchain[test])")

from langchain_core.messages import HumanMessage
from langgraph.types import Command

from molt.capture import Recorder
from molt.testing import AdapterCapabilities, AdapterConformanceSuite, Script
from molt_langchain import MoltCallbackHandler

from .scripted import ScriptedChatModel, answer, build_graph, config, request

GRAPH = build_graph()


class TestLangChainConformance(AdapterConformanceSuite):
    adapter = "molt-langchain"
    framework = "langchain"
    framework_dist = "langchain-core"
    capabilities = AdapterCapabilities(streaming=True, async_=True, approvals=True, retrieval=True, interventions=True)

    def make_capture(self, recorder: Recorder, *, strict: bool) -> MoltCallbackHandler:
        return MoltCallbackHandler(recorder, strict=strict)

    def make_versioned_capture(self, recorder: Recorder, *, versions: Any) -> MoltCallbackHandler:
        return MoltCallbackHandler(recorder, tenant_id="conformance", agent_id="agent", versions=versions)

    def run_scripted_agent(self, handle: Any, script: Script) -> str:
        cfg = config(handle)
        graph = build_graph(model=handle.wrap(ScriptedChatModel())) if getattr(handle, "live", None) else GRAPH
        first = graph.invoke({"messages": [HumanMessage(request(script.marker, script.huge_output))]}, cfg)
        assert first.get("__interrupt__"), "the graph did not pause for approval"
        return answer(graph.invoke(Command(resume="approve"), cfg))

    async def arun_scripted_agent(self, handle: Any, script: Script) -> str:
        cfg = config(handle)
        await GRAPH.ainvoke({"messages": [HumanMessage(request(script.marker))]}, cfg)
        return answer(await GRAPH.ainvoke(Command(resume="approve"), cfg))

    def run_scripted_stream(self, handle: Any, script: Script) -> list[Any]:
        stream = GRAPH.stream(
            {"messages": [HumanMessage(request(script.marker))]}, config(handle), stream_mode="messages"
        )
        got = list(itertools.islice(stream, script.stop_after))
        stream.close()
        return got
