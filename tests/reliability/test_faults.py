"""Fault injection on the capture path: the store unavailable, slow or flaky under the gateway, the
spool's disk full. For each: the agent's answer is unchanged, the fault is counted (``/metrics``,
``Recorder.stats``, ``molt doctor``), and recovery drains what was spooled — once, with chains intact.

Covered elsewhere and reported by the benchmark rather than duplicated: a redactor that raises
(tests/core/governance/test_pipeline.py), the backend down, slow or failing over
(tests/core/gateway/test_errors.py). Added latency is measured in ``bench/reliability/run.py``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from faults import FaultySink, fill, small_tmpfs
from openapi_doc import KEYS
from starlette.testclient import TestClient

from molt.atdp import Event, EventKind, UserMessage
from molt.backends import StubBackend
from molt.capture import Recorder
from molt.gateway import Gateway, GatewayConfig, create_app
from molt.governance.access import KeyRing
from molt.store import Store

W = {"authorization": "Bearer sk-acme-writer"}
ADMIN = {"authorization": "Bearer sk-acme-admin"}


def _chat(c: TestClient, text: str, tid: str | None = None) -> dict[str, Any]:
    h = {**W, "x-molt-trajectory": tid} if tid else W
    r = c.post("/v1/chat/completions", headers=h, json={"model": "stub", "messages": [
        {"role": "user", "content": text}]})
    assert r.status_code == 200, r.text
    return {"content": r.json()["choices"][0]["message"]["content"], "tid": r.headers["x-molt-trajectory"],
            "eid": r.headers["x-molt-event-id"]}


def _metric(c: TestClient, name: str) -> float:
    text = c.get("/metrics", headers=ADMIN).text
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.mark.parametrize("fault", ["down", "slow", "flaky"])
def test_gateway_answers_unchanged_while_the_store_fails_and_the_spool_drains_after(
        tmp_path: Path, molt_home: Path, fault: str, capsys: Any) -> None:
    store = Store.open(tmp_path / "store", auto_compact=False)
    sink = FaultySink(store, down=fault == "down", delay_s=0.3 if fault == "slow" else 0.0,
                      fail_every=2 if fault == "flaky" else 0)
    rec = Recorder(sink, spool_dir=molt_home / "spool", retry_max_s=0.2)
    gw = Gateway([StubBackend()], recorder=rec, store=store, keyring=KeyRing.from_mapping(KEYS),
                 config=GatewayConfig(health_interval_s=0))
    with TestClient(create_app(gw)) as c:
        first = _chat(c, "hello 0")
        answers = [first] + [_chat(c, f"hello {i}", first["tid"]) for i in range(1, 12)]
        assert [a["content"] for a in answers] == [f"echo: hello {i}" for i in range(12)]  # what the agent sees
        assert rec.flush(timeout=30)  # durable in the spool whatever the store does
        if fault == "down":
            deadline = time.monotonic() + 30  # the delivery thread finds out on its own schedule
            while _metric(c, "molt_recorder_sink_errors") == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _metric(c, "molt_recorder_sink_errors") > 0
            assert _metric(c, "molt_recorder_delivered") == 0
            assert _metric(c, "molt_recorder_spool_pending_bytes") > 0
            from molt.cli import run

            assert run(["doctor", "--store", str(tmp_path / "store")]) == 0
            out = capsys.readouterr().out
            assert "spool" in out and "(absent)" not in out.split("spool", 1)[1].splitlines()[0]
            sink.down = False  # recovery
        assert rec.flush(timeout=60, deliver=True)
        if fault == "flaky":
            assert _metric(c, "molt_recorder_sink_errors") > 0  # the first write failed, the retry went through
    rec.close()
    ids = store._where("events", None, ["event_id"]).column("event_id").to_pylist()
    assert len(ids) == len(set(ids)), "a retried delivery stored an event twice"
    assert {a["eid"] for a in answers} <= set(ids)
    assert store.verify(first["tid"]).ok
    store.close()


def _events(rec: Recorder, tid: str, n: int, tag: str) -> list[str]:
    ids = []
    for i in range(n):
        ev = Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata={"tenant_id": "acme"},
                   action=UserMessage(content=f"{tag} {i} " + "x" * 400))
        assert rec.record(ev) is True  # the agent's call never fails, disk full or not
        ids.append(ev.event_id)
    return ids


def test_disk_full_under_the_spool_is_never_acknowledged_and_recovery_loses_nothing_acked(tmp_path: Path) -> None:
    with small_tmpfs("256k") as disk:
        if disk is None:
            pytest.skip("cannot mount a tmpfs here (needs root); the bench reports the quota-like fallback")
        rec = Recorder(None, spool_dir=disk / "spool")
        tid = rec.new_trajectory()
        acked: list[str] = []
        ok = []
        filler = fill(disk)
        for b in range(6):
            ids = _events(rec, tid, 40, f"full{b}")
            done = rec.flush(timeout=30)
            ok.append(done)
            if done:
                acked += ids
        assert not all(ok), "the disk is full, yet every batch was acknowledged"
        assert rec.stats.writer_errors > 0 and "disk full" in (rec.stats.last_error or "")
        filler.unlink()  # space is back
        ids = _events(rec, tid, 40, "after")
        assert rec.flush(timeout=30), "writes did not resume once the disk had space again"
        acked += ids
        rec.close()
        store = Store.open(tmp_path / "store", auto_compact=False)
        rec2 = Recorder(store, spool_dir=disk / "spool")
        assert rec2.flush(timeout=60, deliver=True)
        stored = store._where("events", None, ["event_id"]).column("event_id").to_pylist()
        assert len(stored) == len(set(stored))
        assert set(acked) <= set(stored), f"{len(set(acked) - set(stored))} acknowledged events were lost"
        assert store.verify(tid).ok
        rec2.close()
        store.close()


def test_a_full_spool_drops_and_counts_but_never_blocks_or_acknowledges(tmp_path: Path) -> None:
    rec = Recorder(None, spool_dir=tmp_path / "spool", max_spool_bytes=64 << 10, batch_size=16)
    tid = rec.new_trajectory()
    results = []
    for b in range(20):
        _events(rec, tid, 16, f"b{b}")
        results.append(rec.flush(timeout=30))
    assert results[0] and not results[-1]
    assert rec.stats.dropped_spool_full > 0 and rec.stats.acknowledged < 20 * 16
    rec.close()
