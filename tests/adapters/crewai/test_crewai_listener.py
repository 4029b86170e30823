"""molt-crewai beyond the conformance suite: memory, knowledge and human-feedback events (real CrewAI
event classes through the real bus), the framework check and the README quickstart."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "crewai", reason="CrewAI lives in .venv-crewai: .venv-crewai/bin/python -m pytest tests/adapters/crewai"
)

from crewai.events import crewai_event_bus
from crewai.events.types.crew_events import CrewKickoffCompletedEvent, CrewKickoffStartedEvent
from crewai.events.types.flow_events import HumanFeedbackReceivedEvent, HumanFeedbackRequestedEvent
from crewai.events.types.knowledge_events import (
    KnowledgeRetrievalCompletedEvent,
    KnowledgeRetrievalStartedEvent,
)
from crewai.events.types.memory_events import (
    MemoryQueryCompletedEvent,
    MemoryQueryStartedEvent,
    MemorySaveCompletedEvent,
    MemorySaveStartedEvent,
)

from molt.atdp import EventKind, OutcomeStatus
from molt.capture import MemorySink, Recorder
from molt_crewai import MoltEventListener

pytestmark = pytest.mark.crewai
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[MoltEventListener]:
    sink = MemorySink()
    # raw capture: what the adapter maps, value by value (governance would redact some of it)
    rec = Recorder(sink, spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0, pipeline=None)
    lst = MoltEventListener(rec, tenant_id="acme", strict=True)
    lst.sink_ = sink  # type: ignore[attr-defined]
    yield lst
    lst.close()
    rec.close()


def _events(lst: MoltEventListener) -> list[Any]:
    assert lst.flush(10, deliver=True)
    sink = lst.sink_  # type: ignore[attr-defined]
    tids = sorted({(r.x if hasattr(r, "x") else r["x"])["trajectory_id"] for r in sink.events.values()})
    return [e for t in tids for e in sink.trajectory_events(t)]


def test_memory_knowledge_and_feedback(listener: MoltEventListener) -> None:
    src = object()
    emit = crewai_event_bus.emit
    emit(src, CrewKickoffStartedEvent(crew_name="support", inputs={"q": "upsilon"}))
    emit(src, MemorySaveStartedEvent(value="the customer prefers email", source_type="short_term_memory"))
    emit(
        src,
        MemorySaveCompletedEvent(value="the customer prefers email", save_time_ms=1.0, source_type="short_term_memory"),
    )
    emit(src, MemoryQueryStartedEvent(query="preferences", limit=3, source_type="short_term_memory"))
    emit(
        src,
        MemoryQueryCompletedEvent(
            query="preferences", results=["prefers email"], limit=3, query_time_ms=2.0, source_type="short_term_memory"
        ),
    )
    emit(src, KnowledgeRetrievalStartedEvent())
    emit(src, KnowledgeRetrievalCompletedEvent(query="refund policy", retrieved_knowledge="30 days"))
    emit(
        src,
        HumanFeedbackRequestedEvent(
            flow_name="f",
            method_name="review",
            output="draft",
            message="OK to send?",
            emit=["approve", "reject"],
            request_id="r1",
        ),
    )
    emit(
        src,
        HumanFeedbackReceivedEvent(
            flow_name="f", method_name="review", feedback="no", outcome="reject", request_id="r1"
        ),
    )
    emit(src, CrewKickoffCompletedEvent(crew_name="support", output="sent"))
    evs = _events(listener)
    kinds = [e.kind for e in evs]
    assert kinds == [
        EventKind.MEMORY_WRITE,
        EventKind.MEMORY_READ,
        EventKind.RETRIEVAL,
        EventKind.HUMAN_APPROVAL,
        EventKind.HUMAN_APPROVAL,
        EventKind.AGENT_STEP,
    ]
    write, read, ret, ask, answer, root = evs
    assert write.action.content["value"] == "the customer prefers email"
    assert read.action.query == "preferences" and read.outcome.output == ["prefers email"]
    assert ret.action.query == "refund policy" and ret.observation.passages[0].text == "30 days"
    assert ask.outcome.status == OutcomeStatus.PENDING and ask.action.options == ["approve", "reject"]
    assert answer.outcome.status == OutcomeStatus.DENIED and answer.parent_id == ask.event_id
    assert all(e.parent_id == root.event_id for e in (write, read, ret, ask))
    assert {e.metadata.tenant_id for e in evs} == {"acme"} and listener.stats.open_spans == 0


def test_framework_version_is_checked_at_import() -> None:
    code = (
        "import importlib.metadata as m; v = m.version\n"
        "m.version = lambda d: '0.80.0' if d == 'crewai' else v(d)\n"
        "try:\n    import molt_crewai\n"
        "except Exception as e:\n    print(type(e).__name__, e, *getattr(e, '__notes__', []), sep='|')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert out.startswith("AdapterError|molt-crewai needs crewai>=1.15, but found 0.80.0.")

