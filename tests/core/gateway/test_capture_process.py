"""Recording in a separate capture process (how ``molt serve`` runs): the same events as in-process
capture, rewards, and a dead capture process that does not take the gateway down."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from molt.atdp import EventKind, OutcomeStatus
from molt.backends import StubBackend
from molt.errors import BackendStreamError
from molt.gateway import Gateway, GatewayConfig, create_app
from molt.gateway.capture import CallRecord, Capture
from molt.gateway.capture_process import CaptureProcess, call_from_wire, call_to_wire
from molt.gateway.loopback import ServerThread
from molt.governance.access import KeyRing
from molt.store import Store

from .conftest import KEYS, WEATHER_TOOL

W = {"authorization": "Bearer sk-acme-writer"}


def test_wire_roundtrip_builds_the_same_events(served: Any) -> None:
    captured: list[CallRecord] = []
    gw = served.gateway
    real = gw.capture.submit
    gw.capture.submit = lambda rec: (captured.append(rec), real(rec))[1]
    client = served.client()
    msgs = [{"role": "user", "content": "Lyon"}]
    r = client.chat.completions.create(model="stub", messages=msgs, tools=[WEATHER_TOOL], logprobs=True)
    msgs += [r.choices[0].message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": r.choices[0].message.tool_calls[0].id, "content": "rain"}]
    client.chat.completions.create(model="stub", messages=msgs, tools=[WEATHER_TOOL], n=2)
    captured[-1].error, captured[-1].status = BackendStreamError("boom"), OutcomeStatus.ERROR
    cap = Capture(recorder=None)
    for rec in captured:
        direct = [e.model_dump() for e in cap.events(rec)]
        via_wire = [e.model_dump() for e in cap.events(call_from_wire(call_to_wire(rec)))]
        assert via_wire == direct


def test_gateway_with_a_capture_process(tmp_path: Path) -> None:
    proc = CaptureProcess(tmp_path / "store", tmp_path / "spool", fsync="never")
    gw = Gateway([StubBackend()], recorder=proc, keyring=KeyRing.from_mapping(KEYS),
                 config=GatewayConfig(health_interval_s=0))
    try:
        with ServerThread(create_app(gw)) as srv:
            import openai

            client = openai.OpenAI(base_url=srv.url + "/v1", api_key="sk-acme-writer", max_retries=0)
            msgs: list[dict[str, Any]] = [{"role": "user", "content": "Nice"}]
            first = client.chat.completions.with_raw_response.create(model="stub", messages=msgs, tools=[WEATHER_TOOL])
            m = first.parse().choices[0].message
            msgs += [m.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": m.tool_calls[0].id,
                                                       "content": "sunny"}]
            client.chat.completions.create(model="stub", messages=msgs, tools=[WEATHER_TOOL])
            tid = first.headers["x-molt-trajectory"]
            r = httpx.post(srv.url + "/v1/molt/rewards/last-call", headers=W,
                           json={"trajectory_id": tid, "value": 1.0, "discount": 0.9})
            assert r.status_code == 200, r.text
            assert proc.flush(timeout=30, deliver=True)
            stats = httpx.get(srv.url + "/health", headers=W).json()["recorder"]
            assert stats["delivered"] >= 5 and stats["dropped"] == 0

            store = Store.open(tmp_path / "store", auto_compact=False)
            traj = store.trajectory(tid)
            assert [e.kind for e in traj.events] == [EventKind.MODEL_CALL, EventKind.TOOL_CALL, EventKind.MODEL_CALL]
            assert traj.events[0].action.tokens is not None and traj.events[0].metadata.tenant_id == "acme"
            assert sorted(a.value for a in traj.rewards) == pytest.approx([0.9, 1.0])
            assert store.verify(tid).ok
            store.close()

            # The capture process dies: recording is lost from then on, serving is not.
            os.kill(proc._proc.pid, signal.SIGKILL)
            proc._proc.wait(10)
            r2 = client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "after"}])
            assert r2.choices[0].message.content == "echo: after"
            assert not proc.alive and proc.stats.dropped_queue_full >= 1
    finally:
        proc.close(timeout=5)
