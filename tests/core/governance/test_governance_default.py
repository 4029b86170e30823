"""Governance by default: ``molt serve`` with no flags and the adapters' documented line
``Recorder(Store.open())`` keep no byte of planted PII under ``$MOLT_HOME``; the governance decisions
are stored with the events by the same one argument; training refuses ungoverned data unless told.

Troubleshooting: when a planted string is found, the message names the file; a hit in ``spool/`` means
the pipeline did not run before sealing, one in ``store/events.lance`` that it ran but missed the
type (see ``molt redact``), one in ``store/quarantine.lance`` that a record was quarantined unredacted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from molt.gateway.loopback import free_port, wait_healthy

EMAIL, CARD, PHONE, NAME = "jane.doe@example.com", "4111 1111 1111 1111", "(415) 555-0133", "Maria Garcia"
#: What must not be found, in any byte: the values as written and their bare forms.
PLANTED = [EMAIL, "jane.doe", CARD, CARD.replace(" ", ""), PHONE, "555-0133", "5550133", NAME, "Garcia"]
PROMPTS = [f"Hi, my name is {NAME} and my email is {EMAIL}.",
           f"Please charge my card {CARD} for the order.",
           f"Call me back at {PHONE} tomorrow, {NAME}."]


def planted_hits(root: Path) -> list[str]:
    """``file: string`` for every planted string found in the raw bytes of a file under ``root``."""
    hits = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            data = (Path(dirpath) / f).read_bytes()
            hits.extend(f"{Path(dirpath, f).relative_to(root)}: {s}" for s in PLANTED if s.encode() in data)
    return hits


@pytest.mark.slow
def test_molt_serve_with_no_flags_keeps_no_planted_pii_under_molt_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    port = free_port()
    env = {**os.environ, "MOLT_HOME": str(home), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen([sys.executable, "-m", "molt.cli", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    tids = []
    try:
        wait_healthy(url, proc, timeout_s=120)
        with httpx.Client(base_url=url, timeout=60) as client:
            for i, text in enumerate(PROMPTS):  # the stub backend echoes: the answers carry the PII too
                body: dict[str, Any] = {"model": "stub", "messages": [{"role": "user", "content": text}]}
                if i == 2:
                    body["stream"] = True
                r = client.post("/v1/chat/completions", json=body)
                assert r.status_code == 200, r.text
                tids.append(r.headers["x-molt-trajectory"])
            for _ in range(100):  # the status file molt doctor reads
                if list((home / "status").glob("molt-serve-*.json")):
                    break
                time.sleep(0.1)
            doctor = subprocess.run([sys.executable, "-m", "molt.cli", "doctor"], env=env, capture_output=True,
                                    text=True, timeout=120)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    banner = err.decode()
    assert proc.returncode == 0, banner[-3000:]
    assert "on, governance default" in banner and "every recorded event is in the store" in banner
    lines = doctor.stdout.splitlines()  # the serve process's policy, and the store's decisions
    assert any("governance" in line and "default" in line for line in lines), doctor.stdout
    assert any("governance" in line and "decisions" in line and "at least" not in line for line in lines)

    assert planted_hits(home) == []
    from molt.governance.records import ensure_governance_tables
    from molt.store import Store

    store = Store.open(home / "store", auto_compact=False)
    ensure_governance_tables(store)
    try:  # the calls were stored (redacted), each event with its decision: the scan was not of nothing
        events = [e for t in tids for e in store.trajectory(t).events]
        text = " ".join(e.model_dump_json() for e in events)
        for placeholder in ("<EMAIL_ADDRESS_1>", "<CREDIT_CARD_1>", "<PHONE_NUMBER_1>", "<PERSON_1>"):
            assert placeholder in text
        decided = set(store.table("governance").search().select(["event_id"]).limit(None).to_arrow()
                      .column("event_id").to_pylist())
        assert decided >= {e.event_id for e in events} and store.count("quarantine") == 0
    finally:
        store.close()


def _langchain_run(home: Path, monkeypatch: pytest.MonkeyPatch, **recorder_kwargs: Any) -> list[str]:
    """The adapter README's lines, verbatim but for ``recorder_kwargs``, over a LangChain chat model."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.prompts import ChatPromptTemplate

    from molt.capture import Recorder
    from molt.store import Store
    from molt_langchain import MoltCallbackHandler

    monkeypatch.setenv("MOLT_HOME", str(home))
    store = Store.open()
    recorder = Recorder(store, **recorder_kwargs)  # events land in $MOLT_HOME/store
    handler = MoltCallbackHandler(recorder)
    model = FakeListChatModel(responses=[f"Noted, {NAME}: I will write to {EMAIL} and call {PHONE}.",
                                         f"Card {CARD} charged."])
    chain = ChatPromptTemplate.from_messages([("human", "{q}")]) | model
    for q in PROMPTS[:2]:
        chain.invoke({"q": q}, {"callbacks": [handler]})
    assert handler.flush(30, deliver=True)
    assert recorder.close(timeout=30)
    tids = store.trajectory_ids()
    assert tids, "the adapter recorded nothing"
    store.close()
    return tids


def test_the_documented_adapter_line_keeps_no_planted_pii(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    governed = tmp_path / "governed"
    tids = _langchain_run(governed, monkeypatch)
    assert planted_hits(governed) == []
    from molt.governance.records import ensure_governance_tables
    from molt.store import Store

    store = Store.open(governed / "store", auto_compact=False)
    ensure_governance_tables(store)
    try:
        events = [e for t in tids for e in store.trajectory(t).events]
        assert "<EMAIL_ADDRESS_1>" in " ".join(e.model_dump_json() for e in events)
        # the same one argument stored every event's decision (no GovernedSink to remember)
        assert store.count("governance") == len(events) and store.count("quarantine") == 0
        assert {e.metadata.tenant_id for e in events} == {"default"}  # named no tenant: the anonymous one
    finally:
        store.close()
    # the control: the same scan finds every planted value when governance is explicitly off
    raw = tmp_path / "raw"
    _langchain_run(raw, monkeypatch, pipeline=None)
    found = {h.split(": ", 1)[1] for h in planted_hits(raw)}
    assert {EMAIL, CARD, PHONE, NAME} <= found
    import molt.cli  # molt doctor says how much of a store was recorded without governance

    assert molt.cli.run(["doctor"]) == 0  # MOLT_HOME is the raw one
    out = capsys.readouterr().out
    assert "0 decisions" in out and "at least" in out


def test_molt_serve_train_without_governance_refuses_and_says_how_to_opt_in(
        molt_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import uvicorn

    import molt.cli

    served: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append(app))
    assert molt.cli.run(["serve", "--no-governance", "--train", "--evolve-every", "0"]) == 2
    err = capsys.readouterr().err
    assert "training was not started" in err and "--train-on-ungoverned-data" in err
    assert "Drop --no-governance" in err and not served
    assert not (molt_home / "store").exists()  # refused before anything started or was recorded


def test_molt_serve_without_governance_says_so_loudly(molt_home: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import uvicorn

    import molt.cli

    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    assert molt.cli.run(["serve", "--no-governance", "--evolve-every", "0", "--no-capture-process"]) == 0
    err = capsys.readouterr().err
    assert "governance is OFF" in err and "governance OFF (--no-governance): PII is stored" in err
    import orjson

    [status] = (molt_home / "status").glob("molt-serve-*.json")
    assert orjson.loads(status.read_bytes())["state"]["governance"].startswith("OFF")
    assert molt.cli.run(["doctor"]) == 0
    assert "OFF (--no-governance)" in capsys.readouterr().out


def test_trajectories_import_governs_an_ungoverned_export(tmp_path: Path, molt_home: Path) -> None:
    """An export of raw events imports with no planted byte; chains verify; nothing is lost silently."""
    from molt.atdp import Event, EventKind, UserMessage
    from molt.capture import Recorder
    from molt.capture.importer import import_parquet
    from molt.governance.records import ensure_governance_tables
    from molt.store import Store

    src = Store.open(tmp_path / "src" / "store", auto_compact=False)
    with Recorder(src, spool_dir=tmp_path / "src" / "spool", pipeline=None) as rec:  # raw capture, on purpose
        for text in [*PROMPTS, "where is order A-17?"]:
            rec.record(Event(trajectory_id="t-1", kind=EventKind.USER_MESSAGE, metadata={"tenant_id": "acme"},
                             action=UserMessage(content=text)))
        assert rec.flush(deliver=True)
    path = tmp_path / "raw.parquet"
    assert src.export_parquet(path) == 4
    src.close()

    dst = Store.open(tmp_path / "dst" / "store", auto_compact=False)
    report = import_parquet(dst, path)
    assert (report.imported, report.erased) == (4, 3)
    assert dst.verify("t-1").ok  # erased payloads keep the chain
    events = dst.trajectory("t-1").events
    assert events[3].action.content == "where is order A-17?"  # type: ignore[union-attr]
    ensure_governance_tables(dst)
    assert dst.count("governance") == 4 and dst.count("quarantine") == 3
    dst.close()
    assert planted_hits(tmp_path / "dst") == []
    assert (import_parquet(Store.open(tmp_path / "dst" / "store", auto_compact=False), path).duplicates == 4)
    raw = Store.open(tmp_path / "raw-dst" / "store", auto_compact=False)
    assert import_parquet(raw, path, pipeline=None).erased == 0  # explicitly off: stored as exported
    raw.close()
    assert {EMAIL, CARD, NAME} <= {h.split(": ", 1)[1] for h in planted_hits(tmp_path / "raw-dst")}


def test_otlp_ingest_into_the_documented_recorder_keeps_no_planted_pii(molt_home: Path) -> None:
    """OTLP spans (the in-process span processor, as the OTLP endpoint maps them) through the default
    Recorder: the planted values are redacted before the spool."""
    import json

    from opentelemetry.sdk.trace import TracerProvider

    from molt.capture import Recorder
    from molt.capture.otlp import MoltSpanProcessor
    from molt.store import Store

    store = Store.open()
    recorder = Recorder(store)
    proc = MoltSpanProcessor(recorder, strict=True)
    provider = TracerProvider()
    provider.add_span_processor(proc)
    tracer = provider.get_tracer("acme.orchestrator", "2.1.0")
    with tracer.start_as_current_span("chat gpt-x") as chat:
        chat.set_attributes({
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-x",
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": p}]}
                                                 for p in PROMPTS]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                {"type": "text", "content": f"Done, {NAME}."}]}])})
    assert proc.force_flush() and proc.flush(deliver=True)
    provider.shutdown()
    assert recorder.close(timeout=30)
    assert store.count() == 1 and store.count("quarantine") == 0
    store.close()
    assert planted_hits(molt_home) == []
