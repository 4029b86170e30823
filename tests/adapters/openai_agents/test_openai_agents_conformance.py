"""molt-openai-agents passes the adapter conformance suite: the real Agents SDK, a loopback model."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Runner, set_trace_processors

from molt.capture import Recorder
from molt.testing import AdapterCapabilities, AdapterConformanceSuite, Script
from molt_openai_agents import MoltTracingProcessor

from ..openai_stub import stub_server
from .scripted import run_config, worker

_URL: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def stub() -> Iterator[Any]:
    set_trace_processors([])  # no exporter to OpenAI's backend, ever
    with stub_server() as srv:
        _URL[:] = [srv.url]
        yield srv


def _request(script: Script) -> str:
    return f"help {script.marker}" + (" huge" if script.huge_output else "")


class TestOpenAIAgentsConformance(AdapterConformanceSuite):
    adapter = "molt-openai-agents"
    framework = "openai-agents"
    framework_dist = "openai-agents"
    # Approvals: the SDK reports tool approvals (needs_approval) through RunResult.interruptions, not
    # through traces. Retrieval: its file search is a hosted tool that leaves no local span.
    capabilities = AdapterCapabilities(streaming=True, async_=True, approvals=False, retrieval=False, interventions=True)

    def make_capture(self, recorder: Recorder, *, strict: bool) -> MoltTracingProcessor:
        proc = MoltTracingProcessor(recorder, strict=strict)
        set_trace_processors([proc])
        return proc

    def make_versioned_capture(self, recorder: Recorder, *, versions: Any) -> MoltTracingProcessor:
        proc = MoltTracingProcessor(recorder, tenant_id="conformance", agent_id="worker", versions=versions)
        set_trace_processors([proc])
        return proc

    def detach(self, handle: Any) -> None:
        set_trace_processors([])

    def run_scripted_agent(self, handle: Any, script: Script) -> str:
        result = Runner.run_sync(worker(_URL[0], handle), _request(script), run_config=run_config(script.marker))
        return str(result.final_output)

    async def arun_scripted_agent(self, handle: Any, script: Script) -> str:
        result = await Runner.run(worker(_URL[0]), _request(script), run_config=run_config(script.marker))
        return str(result.final_output)

    def run_scripted_stream(self, handle: Any, script: Script) -> list[Any]:
        async def go() -> list[Any]:
            result = Runner.run_streamed(worker(_URL[0]), _request(script), run_config=run_config(script.marker))
            got = []
            async for ev in result.stream_events():
                got.append(ev.type)
                if len(got) >= (script.stop_after or 1):
                    result.cancel()
                    break
            return got

        return asyncio.run(go())
