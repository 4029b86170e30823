"""molt-crewai passes the adapter conformance suite: real CrewAI crews on a loopback model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip(
    "crewai", reason="CrewAI lives in .venv-crewai: .venv-crewai/bin/python -m pytest tests/adapters/crewai"
)

from molt.capture import Recorder
from molt.testing import AdapterCapabilities, AdapterConformanceSuite, Script
from molt_crewai import MoltEventListener

from ..openai_stub import stub_server
from .scripted import answer, crew

pytestmark = pytest.mark.crewai
_URL: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def stub() -> Iterator[Any]:
    with stub_server() as srv:
        _URL[:] = [srv.url]
        yield srv


class TestCrewAIConformance(AdapterConformanceSuite):
    adapter = "molt-crewai"
    framework = "crewai"
    framework_dist = "crewai"
    # Retrieval: CrewAI knowledge needs an embedder (a model download); its events are mapped and
    # covered by test_crewai_listener.py. Approvals: human feedback belongs to Flows, ditto.
    # Streaming: not exercised (CrewAI streams through its own CrewStreamingOutput).
    capabilities = AdapterCapabilities(streaming=False, async_=True, approvals=False, retrieval=False, interventions=True)

    def make_capture(self, recorder: Recorder, *, strict: bool) -> MoltEventListener:
        return MoltEventListener(recorder, strict=strict)

    def make_versioned_capture(self, recorder: Recorder, *, versions: Any) -> MoltEventListener:
        return MoltEventListener(recorder, tenant_id="conformance", agent_id="crew", versions=versions)

    def detach(self, handle: Any) -> None:
        handle.flush(10)
        handle.close()

    def run_scripted_agent(self, handle: Any, script: Script) -> str:
        out = answer(crew(_URL[0], script.marker, huge=script.huge_output).kickoff())
        if handle is not None:
            handle.flush(10)  # the bus runs handlers on its own loop: let them see the whole kickoff
        return out

    async def arun_scripted_agent(self, handle: Any, script: Script) -> str:
        return answer(await crew(_URL[0], script.marker).kickoff_async())
