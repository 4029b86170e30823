"""The gateway's session state stays bounded under endless traffic (issue 10, item 4): runs that never
end are forgotten after ``session_idle_s``, a long trajectory keeps only its newest call ids in memory,
and nothing is lost by either (the store has every call)."""

from __future__ import annotations

import itertools

import httpx
import pytest

from molt.gateway import sessions as sessions_mod
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
    assert s.trajectory("acme", orphan) is None and s.owner(orphan) is None
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
            sizes.append(max(len(m) for m in (s._answers, s._by_tid, s._owner, s._by_session, s._by_event)))
    assert all(n <= 301 for n in sizes), sizes  # 30 s of 10 runs a second
    assert all(n >= 299 for n in sizes)  # levelled off from the first sample on (float clock: ±1)


def test_without_an_idle_window_only_the_size_bound_holds() -> None:
    clock = Clock()
    s = Sessions(_ids(), max_entries=100, idle_s=None, clock=clock)
    for i in range(500):
        clock.t += 100
        _turn(s, f"run-{i}", "0")
    assert len(s._by_session) == 100 and s.session("acme", "run-499") is not None


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
