"""Feedback endpoints (rewards on a call, a trajectory, a session's last call with discount; ending a
trajectory) and admin endpoints (versions, weights, LoRA adapters) through HTTP."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from molt.atdp import EventKind, OutcomeStatus, RewardSource
from molt.backends import StubBackend

from .conftest import Served

W = {"authorization": "Bearer sk-acme-writer"}
A = {"authorization": "Bearer sk-acme-admin"}
#: The platform operator: the shared model ``stub``'s versions, weights and adapters are its to change.
O = {"authorization": "Bearer sk-operator"}


def _chat(served: Served, text: str, session: str | None = None, key: str = "sk-acme-writer") -> Any:
    hdr = {"X-Molt-Session": session} if session else {}
    return served.client(key).chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": text}], extra_headers=hdr)


def test_reward_a_call_by_its_response_id(served: Served) -> None:
    raw = _chat(served, "rate me")
    r = httpx.post(served.url + "/v1/molt/rewards/call", headers=W,
                   json={"call_id": raw.parse().id, "value": 1.0, "reason": "helpful", "dimensions": {"tone": 0.5}})
    assert r.status_code == 200, r.text
    tid = raw.headers["x-molt-trajectory"]
    assert r.json()["trajectory_id"] == tid and r.json()["event_ids"] == [raw.headers["x-molt-event-id"]]
    served.flush()
    [ann] = served.store.rewards(tid)
    assert ann.event_id == raw.headers["x-molt-event-id"] and ann.value == 1.0 and ann.tenant_id == "acme"
    assert ann.source == RewardSource.USER_FEEDBACK and ann.dimensions == {"tone": 0.5}
    # Another tenant cannot reward it; unknown calls are 404.
    r = httpx.post(served.url + "/v1/molt/rewards/call", headers={"authorization": "Bearer sk-globex-writer"},
                   json={"call_id": raw.parse().id, "value": -1.0})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = httpx.post(served.url + "/v1/molt/rewards/call", headers=W, json={"call_id": "chatcmpl-nope", "value": 1})
    assert r.status_code == 404
    r = httpx.post(served.url + "/v1/molt/rewards/call", headers=W, json={"call_id": "x", "value": "high"})
    assert r.status_code == 400 and "value" in r.json()["error"]["message"]


def test_reward_the_last_call_of_a_session_with_discount(served: Served) -> None:
    raws = [_chat(served, f"turn {i}", session="sess-d") for i in range(3)]
    ids = [r.headers["x-molt-event-id"] for r in raws]
    r = httpx.post(served.url + "/v1/molt/rewards/last-call", headers=W,
                   json={"session_id": "sess-d", "value": 1.0, "discount": 0.5, "source": "test_result"})
    assert r.status_code == 200, r.text
    assert r.json()["event_ids"] == [ids[2], ids[1], ids[0]]
    served.flush()
    anns = {a.event_id: a for a in served.store.rewards(raws[0].headers["x-molt-trajectory"])}
    assert {k: a.value for k, a in anns.items()} == {ids[2]: 1.0, ids[1]: 0.5, ids[0]: 0.25}
    assert all(a.source == RewardSource.TEST_RESULT for a in anns.values())
    # Without a discount only the last call is rewarded; by trajectory id works too.
    r = httpx.post(served.url + "/v1/molt/rewards/last-call", headers=W,
                   json={"trajectory_id": raws[0].headers["x-molt-trajectory"], "value": -1.0})
    assert r.json()["event_ids"] == [ids[2]]
    r = httpx.post(served.url + "/v1/molt/rewards/last-call", headers=W, json={"value": 1.0})
    assert r.status_code == 400


def test_end_a_trajectory_then_the_session_starts_a_new_one(served: Served) -> None:
    a = _chat(served, "first", session="sess-e")
    tid = a.headers["x-molt-trajectory"]
    r = httpx.post(served.url + "/v1/molt/rewards/trajectory", headers=W, json={"trajectory_id": tid, "value": 0.5})
    assert r.status_code == 200
    r = httpx.post(served.url + "/v1/molt/sessions/sess-e/end", headers=W,
                   json={"status": "ok", "reward": 1.0, "reason": "task solved"})
    assert r.status_code == 200, r.text
    b = _chat(served, "second", session="sess-e")
    assert b.headers["x-molt-trajectory"] != tid
    events = served.events(tid)
    assert [e.kind for e in events] == [EventKind.MODEL_CALL, EventKind.AGENT_STEP]
    assert events[1].name == "trajectory.end" and events[1].parent_id == events[0].event_id
    assert events[1].outcome.status == OutcomeStatus.OK
    assert sorted(a.value for a in served.store.rewards(tid)) == [0.5, 1.0]
    summary = next(s for s in served.store.trajectories() if s.trajectory_id == tid)
    assert summary.outcome == "success" and summary.reward == 1.5
    r = httpx.post(served.url + f"/v1/molt/trajectories/{b.headers['x-molt-trajectory']}/end", headers=W)
    assert r.status_code == 200
    r = httpx.post(served.url + "/v1/molt/trajectories/unknown-tid/end", headers=W)
    assert r.status_code == 404


def test_rewards_for_calls_the_gateway_forgot_are_found_in_the_store(served: Served) -> None:
    raw = _chat(served, "remember me")
    served.flush()
    served.gateway.sessions.__init__(served.gateway.sessions._new_id)  # as after a restart
    r = httpx.post(served.url + "/v1/molt/rewards/call", headers=W, json={"call_id": raw.parse().id, "value": 1})
    assert r.status_code == 200 and r.json()["trajectory_id"] == raw.headers["x-molt-trajectory"]
    r = httpx.post(served.url + "/v1/molt/rewards/last-call", headers=W,
                   json={"trajectory_id": raw.headers["x-molt-trajectory"], "value": 1})
    assert r.json()["event_ids"] == [raw.headers["x-molt-event-id"]]


def test_admin_routes_weights_and_harness_versions(served: Served) -> None:
    r = httpx.get(served.url + "/v1/molt/admin/routes", headers=O)
    assert r.json()["current_weights"] == {"stub": {"stub@base": 1.0}}
    spec = {"version": "stub@h1", "backends": ["stub"],
            "harness": {"system_prompt": "Be brief.", "memories": ["The user likes tea."]}}
    r = httpx.post(served.url + "/v1/molt/admin/versions", headers=O,
                   json={"model": "stub", "spec": spec, "weight": 1.0, "weights": {"stub@base": 0.0}})
    assert r.status_code == 200, r.text
    raw = _chat(served, "hello")
    assert raw.headers["x-molt-policy-version"] == "stub@h1"
    [ev] = served.events(raw.headers["x-molt-trajectory"])
    assert ev.provenance.policy_version == "stub@h1" and ev.provenance.harness_fingerprint.startswith("h-")
    prompt = bytes(ev.action.tokens.prompt_ids).decode()  # what the model saw …
    assert "Be brief." in prompt and "- The user likes tea." in prompt
    assert [m.content for m in ev.observation.messages] == ["hello"]  # … and what the agent sent
    r = httpx.put(served.url + "/v1/molt/admin/models/stub/weights", headers=O, json={"weights": {"stub@base": 1}})
    assert r.json()["current_weights"]["stub"] == {"stub@base": 1.0}
    r = httpx.delete(served.url + "/v1/molt/admin/versions/stub@h1", headers=O)
    assert "stub@h1" not in r.json()["table"]["versions"]
    r = httpx.post(served.url + "/v1/molt/admin/versions", headers=O,
                   json={"model": "stub", "spec": {"version": "x", "backends": ["ghost"]}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "spec.backends"


def test_load_adapter_new_sessions_get_it_old_sessions_stay(served: Served) -> None:
    old = _chat(served, "before the adapter", session="old-session")
    assert old.headers["x-molt-policy-version"] == "stub@base"
    r = httpx.post(served.url + "/v1/molt/admin/adapters", headers=O,
                   json={"model": "stub", "version": "stub@lora-1", "path": "/ckpt/lora-1", "weight": 1.0,
                         "weights": {"stub@base": 0.0}})
    assert r.status_code == 200, r.text
    stub = served.gateway.backends["stub"]
    assert isinstance(stub, StubBackend) and stub.adapters == {"stub@lora-1": "/ckpt/lora-1"}
    new = _chat(served, "after", session="new-session")
    assert new.headers["x-molt-policy-version"] == "stub@lora-1"
    again = _chat(served, "still old", session="old-session")
    assert again.headers["x-molt-policy-version"] == "stub@base"
    [ev] = served.events(new.headers["x-molt-trajectory"])
    assert ev.provenance.lora_adapter == "/ckpt/lora-1" and ev.action.tokens.policy_version == "stub@lora-1"
    r = httpx.post(served.url + "/v1/molt/admin/adapters", headers=W,
                   json={"model": "stub", "version": "v", "path": "/p"})
    assert r.status_code == 403


def test_harness_tool_rename_is_invisible_to_the_agent(served: Served) -> None:
    from .conftest import WEATHER_TOOL

    spec = {"version": "stub@renamed", "backends": ["stub"],
            "harness": {"tool_rewrites": {"get_weather": {"rename": "weather_lookup",
                                                          "description": "Weather by city."}}}}
    httpx.post(served.url + "/v1/molt/admin/versions", headers=O,
               json={"model": "stub", "spec": spec, "weight": 1.0, "weights": {"stub@base": 0.0}})
    raw = served.client().chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": "Oslo"}], tools=[WEATHER_TOOL])
    call = raw.parse().choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"  # the agent sees its own name
    [ev] = served.events(raw.headers["x-molt-trajectory"])
    assert "weather_lookup" in bytes(ev.action.tokens.prompt_ids).decode()  # the model saw the rewrite
    assert "Weather by city." in bytes(ev.action.tokens.prompt_ids).decode()


@pytest.mark.parametrize("mode", ["append", "prepend", "replace"])
def test_harness_system_prompt_modes(mode: str) -> None:
    from molt.harness import HarnessSpec, StaticHarness

    msgs = [{"role": "system", "content": "Base."}, {"role": "user", "content": "q"}]
    spec = HarnessSpec(system_prompt="Edit.", system_prompt_mode=mode, skills=[{"name": "s", "instructions": "do"}])
    applied = StaticHarness(spec).apply(msgs, None, None)
    want = {"append": "Base.\n\nEdit.", "prepend": "Edit.\n\nBase.", "replace": "Edit."}[mode]
    assert applied.messages[0]["content"] == want + "\n\nSkills:\n## s\ndo"
    assert msgs[0]["content"] == "Base."  # inputs untouched
    assert applied.fingerprint == spec.fingerprint() and len(applied.fingerprint) == 18
    assert StaticHarness().apply(msgs, None, None).messages is msgs
