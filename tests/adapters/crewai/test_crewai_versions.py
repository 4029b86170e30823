"""The live policy version applied where a CrewAI crew runs: a ``before_llm_call`` hook puts the
version's memories into the system message the model receives (checked on the loopback model's
requests), once per call even though CrewAI keeps its message list across iterations; the version is
in provenance; an unreachable registry never breaks the crew."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "crewai", reason="CrewAI lives in .venv-crewai: .venv-crewai/bin/python -m pytest tests/adapters/crewai"
)

from molt.capture import MemorySink, Recorder
from molt.control.versions import AgentConfig, ModelPart, VersionRegistry
from molt.harness import HarnessSpec
from molt_crewai import MoltEventListener

from ..openai_stub import stub_server
from .scripted import answer, crew

pytestmark = pytest.mark.crewai
TENANT, AGENT = "apiary", "hive-desk"
MEMORY = "Hive 4 was requeened in May."


@pytest.fixture(scope="module")
def stub() -> Iterator[Any]:
    with stub_server() as srv:
        yield srv



def _systems(requests: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content")) for r in requests for m in r.get("messages", [])[:1] if m.get("role") == "system"]


def test_before_llm_call_applies_the_live_version(stub: Any, registry: VersionRegistry, tmp_path: Path) -> None:
    base = registry.ensure_base(TENANT, AGENT, AgentConfig(model=ModelPart(base="stub")))
    fixed = registry.create(TENANT, AGENT, base.parts.model_copy(update={"harness": HarnessSpec(memories=(MEMORY,))}),
                            parent=base.version_id)
    registry.promote(fixed.version_id, actor="control-plane")
    sink = MemorySink()
    rec = Recorder(sink, spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0)
    listener = MoltEventListener(rec, tenant_id=TENANT, agent_id=AGENT, versions=registry)
    stub.requests.clear()
    try:
        out = answer(crew(stub.url, "kappa").kickoff())
        assert listener.flush(10, deliver=True)
    finally:
        listener.close()
        rec.close(timeout=5)
    assert out.endswith("kappa")
    systems = _systems(stub.requests)
    assert len(systems) >= 2 and all(s.count(MEMORY) == 1 for s in systems)  # every call, never twice
    events = [e for t in {r.x["trajectory_id"] for r in sink.events.values()} for e in sink.trajectory_events(t)]
    assert fixed.version_id in {e.provenance.policy_version for e in events}


def test_unreachable_registry_never_breaks_the_crew(stub: Any, tmp_path: Path) -> None:
    class Down:
        def live(self, tenant_id: str, agent_id: str) -> Any:
            raise ConnectionError("the store is unreachable")

    rec = Recorder(MemorySink(), spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0)
    listener = MoltEventListener(rec, tenant_id=TENANT, agent_id=AGENT, versions=Down())
    stub.requests.clear()
    try:
        out = answer(crew(stub.url, "lambda").kickoff())
    finally:
        listener.close()
        rec.close(timeout=5)
    assert out.endswith("lambda") and not any(MEMORY in s for s in _systems(stub.requests))
