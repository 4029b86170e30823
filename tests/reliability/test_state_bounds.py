"""Handler state stays bounded in a long-lived process: runs whose end never comes (a callback the
framework dropped, a thread that died) are evicted, not held forever. The RSS of a loaded gateway over
a long soak is measured in ``bench/reliability/run.py``."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from molt.capture import MemorySink, Recorder


def test_orphaned_langchain_runs_are_evicted_and_counted(tmp_path: Path) -> None:
    pytest.importorskip("molt_langchain")
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    from molt_langchain import MoltCallbackHandler

    sink = MemorySink()
    rec = Recorder(sink, spool_dir=tmp_path / "spool")
    handler = MoltCallbackHandler(rec, tenant_id="acme")
    handler._mapper.spans._max_open = 500  # the default is 50,000; the mechanism is the same
    for _ in range(3000):  # runs that start and never end
        handler.on_chain_start({"name": "agent"}, {"input": "x" * 200}, run_id=uuid.uuid4())
    assert handler.flush(timeout=60)
    st = handler.stats
    assert st.open_spans <= 500 and st.evicted_spans == 2500
    model = FakeListChatModel(responses=["still works"])  # capture goes on normally afterwards
    assert model.invoke("hi", config={"callbacks": [handler]}).content == "still works"
    assert handler.flush(timeout=60, deliver=True)
    assert any(b"still works" in (r.payload or b"") for r in sink.events.values())
    rec.close()
