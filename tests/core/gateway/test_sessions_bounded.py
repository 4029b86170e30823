"""The gateway's session state stays bounded under endless traffic (issue 10, item 4): runs that never
end are forgotten after ``session_idle_s``, a long trajectory keeps only its newest call ids in memory,
and nothing is lost by either (the store has every call)."""

from __future__ import annotations

import itertools

import httpx
import pytest

from molt.gateway import sessions as sessions_mod
from molt.gateway.router import Router, RoutingTable, VersionSpec
from molt.gateway.sessions import Sessions

from .conftest import Served

W = {"authorization": "Bearer sk-acme-writer"}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _ids() -> object:
    n = itertools.count()
    return lambda: f"t{next(n)}"


def _turn(s: Sessions, session: str, text: str) -> str:
    res = s.resolve("acme", [{"role": "user", "content": text}], session_id=session)
    s.register(res, [{"role": "assistant", "content": "ok"}], [f"e-{session}-{text}"])
    return res.state.trajectory_id


def test_orphaned_runs_are_forgotten_after_the_idle_window() -> None:
    clock = Clock()
    s = Sessions(_ids(), max_entries=1_000_000, idle_s=60, clock=clock)
    first = _turn(s, "busy", "0")
    orphan = _turn(s, "orphan", "0")
    for i in range(1, 40):  # "busy" keeps talking every 10 s, "orphan" never comes back
        clock.t += 10
        assert _turn(s, "busy", str(i)) == first
    assert s.session("acme", "busy") is not None and s.session("acme", "orphan") is None
    assert s.trajectory("acme", orphan) is None
    assert s.by_event("acme", "e-orphan-0") is None
    # Coming back after the window starts a new trajectory of the same session (its events keep the id).
    clock.t += 61
    assert _turn(s, "orphan", "1") != orphan


def test_state_under_endless_orphaned_runs_levels_off() -> None:
    """A new run every 0.1 s that never ends: every map levels off at about rate × window entries."""
    clock = Clock()
    s = Sessions(_ids(), max_entries=1_000_000, idle_s=30, clock=clock)
    sizes = []
    for i in range(3000):
        clock.t += 0.1
        _turn(s, f"run-{i}", "0")
        if i % 500 == 499:
            sizes.append(max(len(m) for m in (s._answers, s._by_tid, s._by_session, s._by_event)))
    assert all(n <= 301 for n in sizes), sizes  # 30 s of 10 runs a second
    assert all(n >= 299 for n in sizes)  # levelled off from the first sample on (float clock: ±1)


def test_without_an_idle_window_only_the_size_bound_holds() -> None:
    clock = Clock()
    s = Sessions(_ids(), max_entries=100, idle_s=None, clock=clock)
    for i in range(500):
        clock.t += 100
        _turn(s, f"run-{i}", "0")
    assert len(s._by_session) == 100 and s.session("acme", "run-499") is not None


def test_the_routers_first_seen_times_follow_the_same_window() -> None:
    """Plain session keys (not UUIDv7) get a first-seen time that pins them to a routing generation:
    the router forgets an idle one like the gateway forgets its session, so endless new runs level off
    at rate × window instead of growing to the size bound; a busy key keeps its time, and its version."""
    wall, idle = Clock(), Clock()
    wall.t = 1000.0
    router = Router(RoutingTable.single("m", VersionSpec(version="base", backends=("b0",))), max_sessions=1_000_000,
                    idle_s=30, clock=wall, idle_clock=idle)
    assert router.route("m", "busy").version.version == "base"
    wall.t += 1
    router.add_version("m", VersionSpec(version="canary", backends=("b0",)), weight=1.0, weights={"base": 0.0})
    sizes = []
    for i in range(3000):  # a new run every 0.1 s that never comes back; "busy" routed every 10 s
        idle.t += 0.1
        wall.t += 0.1
        router.started_at(f"run-{i}")
        if i % 100 == 0:
            assert router.route("m", "busy").version.version == "base"  # still pinned to its generation
        if i % 500 == 499:
            sizes.append(len(router._first_seen))
    assert all(300 <= n <= 302 for n in sizes), sizes  # 30 s of 10 runs a second, plus "busy"
    assert router.started_at("busy") == 1000.0
    idle.t += 31  # "busy" goes quiet past the window: when it comes back it is a new session
    wall.t += 31
    assert router.route("m", "busy").version.version == "canary" and router.started_at("busy") == wall.t


def test_the_gateway_gives_its_router_the_session_window(served: Served) -> None:
    cfg = served.gateway.config
    assert served.gateway.router._first_seen.idle_s == cfg.session_idle_s is not None
    assert served.gateway.router._first_seen.limit == cfg.max_sessions


def test_a_long_trajectory_keeps_its_newest_calls_and_rewards_reach_all(served: Served,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions_mod, "MAX_CALLS_KEPT", 3)
    client = served.client()
    raws = [client.chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": f"turn {i}"}], extra_headers={"X-Molt-Session": "long"})
        for i in range(7)]
    ids = [r.headers["x-molt-event-id"] for r in raws]
    st = served.gateway.sessions.session("acme", "long")
    assert st is not None and list(st.calls) == ids[-3:] and st.n_calls == 7 and st.calls_truncated
    served.flush()
    r = httpx.post(served.url + "/v1/molt/rewards/last-call", headers=W,
                   json={"session_id": "long", "value": 1.0, "discount": 0.5})
    assert r.status_code == 200, r.text
    assert r.json()["event_ids"] == ids[::-1]  # every call, from the store, newest first
    tid = raws[0].headers["x-molt-trajectory"]
    r = httpx.post(served.url + "/v1/molt/rewards/last-call", headers=W,
                   json={"trajectory_id": tid, "value": 1.0, "discount": 0.5})
    assert r.json()["event_ids"] == ids[::-1]


@pytest.mark.parametrize("capture_process", [False, True])
def test_the_recorder_remembers_chain_heads_of_as_many_trajectories_as_the_gateway_sessions(
        tmp_path, capture_process: bool) -> None:  # type: ignore[no-untyped-def]
    """A trajectory the gateway forgot gets no more calls, so the Recorder (in-process or the capture
    child) needs its chain head no longer: both bounds are ``max_sessions``."""
    from molt.backends import StubBackend
    from molt.gateway import GatewayConfig
    from molt.gateway.cli import build_gateway

    gw, recorder, store = build_gateway(StubBackend(), home=tmp_path, capture_process=capture_process,
                                        config=GatewayConfig(max_sessions=500))
    try:
        assert gw.config.max_sessions == 500
        if capture_process:
            assert b'"chain_heads":500' in recorder._proc.args[-1].encode()
        else:
            assert recorder._max_heads == 500
    finally:
        recorder.close()
        store.close()
