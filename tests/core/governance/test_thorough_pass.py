"""Nothing becomes learning material before the thorough redaction pass has seen it.

Names the fast (capture) pass misses are planted in captured events, a memory, a skill and a dataset
export; the training queue, the memory store and the export hold none of them, because each runs the
thorough pass (the fast detectors plus spaCy's small English NER, molt.governance.redaction.profiles)
first. The planted names are ones the fast pass leaves in (asserted first, so the test keeps meaning
something if the fast pass learns them).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from molt.atdp import Event, EventKind, ToolCall, UserMessage
from molt.capture import Recorder
from molt.control.memory import MemoryStore
from molt.errors import GovernanceError
from molt.governance import GovernancePipeline, GovernancePolicy, GovernedSink, Principal, Role, TrainingQueue
from molt.governance.redaction import Redactor
from molt.governance.redaction.profiles import redactor_for_profile
from molt.governance.thorough import ThoroughPass, ThoroughWorker, default_pass
from molt.interop.hf import export_dataset
from molt.store import Store

PLANTED = [
    "Peregrine Ashdown approved the refund.",
    "Peregrine Ashdown from accounting says the payment bounced.",
]
NAME = "Ashdown"
POLICY = {"defaults": {"training": {"opt_in": True, "require_consent": False, "quality": {"min_events": 2}}}}


def test_the_planted_names_are_ones_the_fast_pass_misses_and_the_thorough_pass_finds() -> None:
    fast, thorough = Redactor(), redactor_for_profile("thorough")
    for text in PLANTED:
        assert NAME in fast.redact(text)[0]
        assert NAME not in thorough.redact(text)[0]
    # over text the fast pass redacted, a value it finds is numbered after the placeholders there
    red = thorough.redact("Hi, I am <PERSON_1>. Peregrine Ashdown approved the refund.")[0]
    assert "<PERSON_1>" in red and "<PERSON_2>" in red and NAME not in red


@pytest.fixture
def captured(store: Store, molt_home: Path) -> Store:
    pipe = GovernancePipeline(GovernancePolicy.model_validate(POLICY))
    with Recorder(GovernedSink(store), spool_dir=molt_home / "spool", pipeline=pipe) as rec:
        for i, text in enumerate(PLANTED):
            tid = f"t{i}"
            rec.record(Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata={"tenant_id": "acme"},
                             action=UserMessage(content="Hi, I am Ana Lima.")))
            rec.record(Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata={"tenant_id": "acme"},
                             action=UserMessage(content=text)))
            rec.record(Event(trajectory_id=tid, kind=EventKind.TOOL_CALL, metadata={"tenant_id": "acme"},
                             action=ToolCall(tool_name="crm.note", arguments={"note": text})))
        assert rec.flush(deliver=True)
    # stored as the fast pass left it: the planted name is in the store
    assert NAME in "".join(e.model_dump_json() for e in store.trajectory("t0").events if e is not None)
    return store


def test_the_training_queue_hands_out_nothing_the_thorough_pass_would_redact(captured: Store) -> None:
    got = TrainingQueue(captured, GovernancePolicy.model_validate(POLICY),
                        Principal(tenant_id="acme", role=Role.TRAINER)).eligible_trajectories()
    assert len(got) == len(PLANTED)
    for traj in got:
        text = "".join(e.model_dump_json() for e in traj.events)
        assert NAME not in text and "Ana Lima" not in text


def test_a_dataset_export_holds_nothing_the_thorough_pass_would_redact(captured: Store, tmp_path: Path) -> None:
    out = tmp_path / "ds.parquet"
    assert export_dataset(captured, out, clean=default_pass().clean_many) == len(PLANTED)
    assert NAME not in str(pq.read_table(out).to_pylist())


def test_memories_and_skills_are_stored_after_the_thorough_pass(store: Store) -> None:
    mem = MemoryStore(store)
    m = mem.add_memory("acme", PLANTED[0], agent_id="a")
    sk = mem.add_skill("acme", "refunds", "a refund question", PLANTED[1], agent_id="a")
    assert NAME not in m.text and NAME not in sk.instructions


def test_training_fails_closed_when_the_thorough_pass_cannot_run(captured: Store) -> None:
    class Broken(ThoroughPass):
        @property
        def redactor(self) -> Redactor:
            raise GovernanceError("the thorough redaction pass cannot run: no spaCy pipeline")

    verdicts = TrainingQueue(captured, GovernancePolicy.model_validate(POLICY),
                             Principal(tenant_id="acme", role=Role.TRAINER), thorough=Broken()).evaluate()
    assert verdicts and all(not v.eligible and t is None for v, t in verdicts)
    assert all(any("thorough pass" in r for r in v.reasons) for v, _ in verdicts)


def test_the_worker_runs_the_pass_off_the_caller_and_reports_its_backlog(captured: Store) -> None:
    events = [e for t in ("t0", "t1") for e in captured.trajectory(t).events if e is not None]
    thorough = ThoroughPass()
    worker = ThoroughWorker(thorough)
    worker.submit(events)
    assert worker.drain(timeout=120) and worker.backlog == 0 and worker.errors == 0
    assert thorough.passed == len(events) and worker.rate > 0
    before = thorough.passed
    cleaned = thorough.clean_many(events)  # a reader finds them passed: no second run
    assert thorough.passed == before and all(NAME not in e.model_dump_json() for e in cleaned)
    worker.close()
