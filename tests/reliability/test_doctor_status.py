"""Faults counted by a running process are visible in ``molt doctor`` (issue 10, item 3).

A running gateway (or ``molt serve`` as shipped) writes its fault counters and backlog to
``$MOLT_HOME/status/<component>-<pid>.json``; ``molt doctor`` shows each process, whether it is still
running, each non-zero fault counter, and the spool backlog. Faults are injected into the real
thing: the store under a gateway's Recorder goes down; the store's writes fail under ``molt serve``.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from faults import FaultySink
from openapi_doc import KEYS
from starlette.testclient import TestClient

from molt.backends import StubBackend
from molt.capture import Recorder
from molt.cli import run
from molt.gateway import Gateway, GatewayConfig, create_app
from molt.gateway.metrics import gateway_status
from molt.governance.access import KeyRing
from molt.status import StatusReporter, read_status
from molt.store import Store

W = {"authorization": "Bearer sk-acme-writer"}


def _doctor(store: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """``molt doctor``'s rows from the status files on: item → value (whitespace squeezed)."""
    capsys.readouterr()
    assert run(["doctor", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    rows: dict[str, str] = {}
    key = ""
    for line in out.split("MOLT_HOME", 1)[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) != 2:
            continue
        if cells[0]:
            key = re.sub(r"\s+", " ", cells[0])
            rows[key] = cells[1]
        elif key:  # a folded value continues on the next line
            rows[key] = (rows[key] + " " + cells[1]).strip()
    return rows


def _chat(c: TestClient, text: str) -> str:
    r = c.post("/v1/chat/completions", headers=W,
               json={"model": "stub", "messages": [{"role": "user", "content": text}]})
    assert r.status_code == 200, r.text
    return str(r.json()["choices"][0]["message"]["content"])


def _wait(cond: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_doctor_shows_the_store_outage_of_a_running_gateway_and_its_recovery(
        tmp_path: Path, molt_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store.open(tmp_path / "store", auto_compact=False)
    sink = FaultySink(store, down=True)
    rec = Recorder(sink, spool_dir=molt_home / "spool", retry_max_s=0.2)
    gw = Gateway([StubBackend()], recorder=rec, store=store, keyring=KeyRing.from_mapping(KEYS),
                 config=GatewayConfig(health_interval_s=0))
    reporter = StatusReporter(molt_home, "molt-serve", {"gateway": lambda: gateway_status(gw)}, interval_s=0.05)
    with TestClient(create_app(gw)) as c:
        reporter.start()
        assert [_chat(c, f"hello {i}") for i in range(5)] == [f"echo: hello {i}" for i in range(5)]
        assert rec.flush(timeout=30)
        _wait(lambda: rec.stats.sink_errors > 0, "the Recorder to find the store down")
        reporter.write()
        rows = _doctor(tmp_path / "store", capsys)
        assert rows["process molt-serve"].startswith(f"pid {os.getpid()}, running")
        assert int(rows["recorder.sink_errors"].replace(",", "")) > 0
        assert "faults" not in rows  # not "none counted"
        backlog = int(rows["spool backlog"].split(" bytes")[0].replace(",", ""))
        assert backlog > 0
        assert "unreachable" in rows["last error"]
        # the gateway's lag monitor reports, judged ("2 ms — good: under 250 ms …")
        assert re.match(r"[\d,.]+ ms — (good|high|bad)", rows["event loop lag, max"]), rows["event loop lag, max"]

        sink.down = False  # recovery: the spool drains, the backlog goes to zero, the count stays
        assert rec.flush(timeout=60, deliver=True)
        reporter.write()
        rows = _doctor(tmp_path / "store", capsys)
        assert rows["spool backlog"].startswith("0 bytes")
        assert int(rows["recorder.sink_errors"].replace(",", "")) > 0
    reporter.close()
    rec.close()
    store.close()
    rows = _doctor(tmp_path / "store", capsys)
    assert ", stopped, " in rows["process molt-serve"]


def test_doctor_shows_none_counted_for_a_healthy_gateway_and_no_process_without_status(
        tmp_path: Path, molt_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _doctor(tmp_path / "store", capsys)
    assert rows["processes"].startswith("none reporting")
    store = Store.open(tmp_path / "store", auto_compact=False)
    rec = Recorder(store, spool_dir=molt_home / "spool")
    gw = Gateway([StubBackend()], recorder=rec, store=store, keyring=KeyRing.from_mapping(KEYS),
                 config=GatewayConfig(health_interval_s=0))
    reporter = StatusReporter(molt_home, "molt-serve", {"gateway": lambda: gateway_status(gw)}, interval_s=60)
    with TestClient(create_app(gw)) as c:
        reporter.start()
        _chat(c, "hello")
        assert rec.flush(timeout=30, deliver=True)
        reporter.write()
        rows = _doctor(tmp_path / "store", capsys)
        assert rows["faults"] == "none counted" and rows["spool backlog"].startswith("0 bytes")
        [st] = read_status(molt_home)
        assert st["running"] and st["state"]["recorder.delivered"] > 0 and not any(st["faults"].values())
    reporter.close()
    rec.close()
    store.close()


def test_a_process_that_died_without_a_last_report_is_flagged_and_its_file_replaced_on_the_next_start(
        molt_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = molt_home / "status"
    status.mkdir()
    dead = 2**22 + 12345  # above the default pid_max of 2**22: no such process
    (status / f"molt-serve-{dead}.json").write_bytes(orjson.dumps({
        "component": "molt-serve", "pid": dead, "started_at": "2026-01-01T00:00:00+00:00",
        "updated_at": "2026-01-01T00:00:05+00:00", "interval_s": 5.0, "stopped": False,
        "faults": {"trainer.crashes": 3}, "state": {}}))
    (status / "junk-1.json").write_text("{not json")
    rows = _doctor(tmp_path / "store", capsys)
    assert "not running (ended without a last report" in rows["process molt-serve"]
    assert rows["trainer.crashes"] == "3"
    assert "unreadable status file" in rows["process junk-1"]
    StatusReporter(molt_home, "molt-serve", {}).start().close()
    assert not (status / f"molt-serve-{dead}.json").exists()


def test_a_source_that_raises_is_reported_and_the_others_still_written(molt_home: Path) -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("boom")

    rep = StatusReporter(molt_home, "probe", {"bad": broken, "ok": lambda: {"faults": {"x.errors": 2}}})
    st = orjson.loads(rep.write().read_bytes())
    assert st["faults"] == {"bad.status_error": 1, "x.errors": 2} and "boom" in st["state"]["bad.status_error"]


def test_molt_serve_writes_its_faults_for_doctor_while_it_runs_and_a_last_report_when_it_stops(
        monkeypatch: pytest.MonkeyPatch, molt_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``molt serve`` as shipped (in-process Recorder): the store's writes fail while it serves."""
    import uvicorn

    import molt.cli
    import molt.serve
    from molt.store.lance import Store as LanceStore

    monkeypatch.setattr(molt.serve, "STATUS_INTERVAL_S", 0.05)
    real_write = LanceStore.write_batch
    seen: dict[str, Any] = {}

    def failing(self: Any, batch: Any) -> None:
        raise OSError(5, "injected: the store's disk failed")

    def scenario(app: Any, **kw: Any) -> None:
        monkeypatch.setattr(LanceStore, "write_batch", failing)
        with TestClient(app) as client:
            r = client.post("/v1/chat/completions", json={"model": "stub", "messages": [
                {"role": "user", "content": "hi"}]})
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "echo: hi"

            def counted() -> bool:
                st = read_status(molt_home)
                return bool(st) and st[0]["faults"].get("recorder.sink_errors", 0) > 0
            _wait(counted, "molt serve to report the store's write failures")
            seen["during"] = _doctor(molt_home / "store", capsys)
            monkeypatch.setattr(LanceStore, "write_batch", real_write)  # recovery: the spool drains

            def drained() -> bool:
                st = read_status(molt_home)[0]
                return bool(st["state"]["recorder.delivered"]) and not st["state"]["recorder.spool_pending_bytes"]
            _wait(drained, "the spool to drain once the store is back")

    monkeypatch.setattr(uvicorn, "run", scenario)
    assert molt.cli.run(["serve", "--backend", "stub", "--evolve-every", "0", "--no-capture-process"]) == 0
    during = seen["during"]
    assert during["process molt-serve"].startswith(f"pid {os.getpid()}, running")
    assert int(during["recorder.sink_errors"].replace(",", "")) > 0
    after = _doctor(molt_home / "store", capsys)
    assert ", stopped, " in after["process molt-serve"] and after["spool backlog"].startswith("0 bytes")


def test_a_background_part_of_molt_serve_that_dies_is_counted(molt_home: Path) -> None:
    from molt.serve import Stack

    stack = Stack()

    def plane() -> None:
        raise RuntimeError("the control plane fell over")

    stack.spawn("control-plane", plane)
    stack.shutdown(timeout_s=30)
    rep = StatusReporter(molt_home, "molt-serve", {"stack": stack.fault_status})
    assert orjson.loads(rep.write().read_bytes())["faults"] == {"control-plane.stopped_with_error": 1}


def test_writes_from_the_reporter_thread_and_a_caller_at_once_never_fail(molt_home: Path) -> None:
    """The thread and an explicit ``write()`` share one aside file; two writers at once once renamed it
    away from under each other (``FileNotFoundError`` in the caller)."""
    reporter = StatusReporter(molt_home, "molt-race", {"x": lambda: {"state": {"n": "x" * 20_000}}})
    errors: list[BaseException] = []

    def hammer() -> None:
        for _ in range(200):
            try:
                reporter.write()
            except BaseException as exc:  # the test reports any failure
                errors.append(exc)

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert orjson.loads(reporter.path.read_bytes())["component"] == "molt-race"
