"""A harness that does I/O (memory retrieval) runs off the gateway's event loop, within a time budget,
and fails open: slow or broken retrieval never stalls or breaks the agent's call."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
from starlette.testclient import TestClient

from molt.backends import StubBackend
from molt.gateway import Gateway, GatewayConfig, create_app
from molt.harness import Applied

W = {"authorization": "Bearer sk-acme-writer"}


class _Harness:
    """Adds " +memory" to the last message, after waiting on a barrier (or sleeping, or raising)."""

    blocking = True

    def __init__(self, *, barrier: threading.Barrier | None = None, sleep_s: float = 0.0, fail: bool = False):
        self.barrier, self.sleep_s, self.fail = barrier, sleep_s, fail

    def apply(self, messages: list[dict[str, Any]], tools: Any, version: Any) -> Applied:
        if self.barrier is not None:
            self.barrier.wait()  # broken (raises) unless another request's harness runs at the same time
        time.sleep(self.sleep_s)
        if self.fail:
            raise ConnectionError("the memory store is unreachable")
        last = {**messages[-1], "content": messages[-1]["content"] + " +memory"}
        return Applied([*messages[:-1], last], tools, fingerprint="h-test")


def _gateway(harness: _Harness, **config: Any) -> Gateway:
    from molt.governance.access import KeyRing

    keys = KeyRing.from_mapping({"sk-acme-writer": ("acme", "agent_writer")})
    return Gateway([StubBackend()], harness=harness, keyring=keys, config=GatewayConfig(health_interval_s=0, **config))


def _ask(c: TestClient, text: str, stream: bool = False) -> str:
    r = c.post("/v1/chat/completions", headers=W,
               json={"model": "stub", "messages": [{"role": "user", "content": text}], "stream": stream})
    assert r.status_code == 200, r.text
    if stream:  # the content deltas of the server-sent events, joined
        chunks = [orjson.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        return "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks)
    return str(r.json()["choices"][0]["message"]["content"])


def test_a_blocking_harness_does_not_hold_the_event_loop() -> None:
    # Two requests' harnesses must be inside apply() at once to pass the barrier: on the event loop, the
    # first would block the loop at the barrier and the second could never start (the barrier breaks).
    gw = _gateway(_Harness(barrier=threading.Barrier(2, timeout=10)), harness_timeout_s=60)
    with TestClient(create_app(gw)) as c, ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda t: _ask(c, t), ["first", "second"]))
    assert sorted(answers) == ["echo: first +memory", "echo: second +memory"]
    assert gw.harness_fallbacks == 0


def test_a_harness_past_its_budget_or_raising_is_replaced_by_the_static_one() -> None:
    slow = _gateway(_Harness(sleep_s=3.0), harness_timeout_s=0.2)
    with TestClient(create_app(slow)) as c:
        assert _ask(c, "hello") == "echo: hello"  # answered without the memory, not after 3 s of waiting
        assert _ask(c, "again", stream=True) == "echo: again"
    assert slow.harness_fallbacks == 2
    broken = _gateway(_Harness(fail=True))
    with TestClient(create_app(broken)) as c:
        assert _ask(c, "hello") == "echo: hello"
    assert broken.harness_fallbacks == 1


def test_recorder_stats_are_asked_off_the_event_loop(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """/health and /metrics ask the recorder for its counters; a capture process answers behind the
    records queued before the question, seconds when it is busy. Here the counters only come once a chat
    completion has been answered: asked on the event loop, that completion could never be served."""
    from molt.capture import Recorder

    answered = threading.Event()

    class SlowStats(Recorder):
        waited_out = 0

        @property
        def stats(self) -> Any:
            if not answered.wait(10):
                SlowStats.waited_out += 1
            return super().stats

    from molt.governance.access import KeyRing

    rec = SlowStats(None, spool_dir=tmp_path / "spool", fsync="never")
    keys = KeyRing.from_mapping({"sk-acme-writer": ("acme", "agent_writer"), "sk-acme-reader": ("acme", "reader")})
    gw = Gateway([StubBackend()], recorder=rec, keyring=keys, config=GatewayConfig(health_interval_s=0))
    with TestClient(create_app(gw)) as c, ThreadPoolExecutor(2) as pool:
        for path in ("/health", "/metrics"):
            answered.clear()
            pending = pool.submit(c.get, path, headers={"authorization": "Bearer sk-acme-reader"})
            time.sleep(0.2)  # the counters are being asked for
            assert _ask(c, "hello") == "echo: hello"
            answered.set()
            r = pending.result()
            assert r.status_code == 200
            assert "recorder" in r.json() if path == "/health" else "molt_recorder_" in r.text
    assert SlowStats.waited_out == 0
    rec.close()


def test_the_lag_monitor_sees_a_handler_that_holds_the_event_loop() -> None:
    """A harness that is not marked blocking runs on the event loop: its 0.5 s sleep holds every other
    request for that long, and the gateway's lag monitor reports it (metrics and ``molt doctor``)."""
    from molt.gateway.metrics import gateway_status

    class OnTheLoop(_Harness):
        blocking = False

    gw = _gateway(OnTheLoop(sleep_s=0.5), harness_timeout_s=60)
    with TestClient(create_app(gw)) as c:
        assert _ask(c, "hello") == "echo: hello +memory"
        time.sleep(0.3)  # the monitor's next tick measures the stall
        lag = gw.metrics.loop_lag_max
        assert 0.4 <= lag < 5, lag
    assert gateway_status(gw)["state"]["gateway.event_loop_lag_max_s"] == round(lag, 4)
    assert f"molt_gateway_event_loop_lag_max_seconds {lag:.6f}" in gw.metrics.render()
    assert gw.metrics.loop_lag.total >= 3  # it ticks while nothing holds the loop too
