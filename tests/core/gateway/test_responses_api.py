"""``POST /v1/responses`` with the real ``openai`` SDK and the OpenAI Agents SDK on its default model
(the Responses API): answers the SDKs' own parsers accept, streamed and not, recorded as the chat path
records (one trajectory per run, tool calls, token ids, the version's harness), rewardable by the
response id; bad input answered in the API's error shape with nothing stored."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai
import pytest

from molt.atdp import EventKind, OutcomeStatus
from molt.backends import StubBackend

from .conftest import Served

W = {"authorization": "Bearer sk-acme-writer"}
OPERATOR = {"authorization": "Bearer sk-operator"}
TOOL = {"type": "function", "name": "get_weather", "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
SCRIPT = [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}, "It is sunny in Paris, 21 C."]


def test_create_is_answered_recorded_with_tokens_and_rewardable_by_its_id(served: Served) -> None:
    raw = served.client().responses.with_raw_response.create(model="stub", input="hello responses",
                                                             instructions="Be brief.", temperature=0.3)
    r = raw.parse()
    assert r.output_text == "echo: hello responses" and r.status == "completed"
    assert r.id == "resp_" + raw.headers["x-molt-event-id"] and r.instructions == "Be brief."
    assert r.usage is not None and r.usage.output_tokens == len("echo: hello responses")
    tid = raw.headers["x-molt-trajectory"]
    [ev] = served.events(tid)
    assert ev.kind == EventKind.MODEL_CALL and ev.name == "responses" and ev.metadata.tenant_id == "acme"
    assert [(m.role, m.content) for m in ev.observation.messages] == [("system", "Be brief."),
                                                                      ("user", "hello responses")]
    assert ev.action.sampling == {"temperature": 0.3}
    assert bytes(ev.action.tokens.completion_ids).decode() == r.output_text  # the stub's byte tokens
    assert served.store.verify(tid).ok
    rew = httpx.post(served.url + "/v1/molt/rewards/call", headers=W, json={"call_id": r.id, "value": 1.0})
    assert rew.status_code == 200 and rew.json()["event_ids"] == [ev.event_id]


def test_previous_response_id_continues_one_trajectory_through_a_tool_call(served: Served) -> None:
    client = served.client()
    first = client.responses.with_raw_response.create(model="stub", input="Paris", tools=[TOOL])
    r1 = first.parse()
    [call] = r1.output
    assert call.type == "function_call" and call.name == "get_weather" and call.arguments == '{"city":"Paris"}'
    second = client.responses.with_raw_response.create(
        model="stub", previous_response_id=r1.id, tools=[TOOL],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}])
    assert second.parse().output_text == "The tool returned: sunny, 21 C"
    assert second.parse().previous_response_id == r1.id
    tid = first.headers["x-molt-trajectory"]
    assert second.headers["x-molt-trajectory"] == tid
    m1, tool, m2 = served.events(tid)
    assert (m1.kind, tool.kind, m2.kind) == (EventKind.MODEL_CALL, EventKind.TOOL_CALL, EventKind.MODEL_CALL)
    assert tool.action.tool_name == "get_weather" and tool.action.call_id == call.call_id
    assert tool.outcome.output == "sunny, 21 C" and tool.parent_id == m1.event_id and m2.parent_id == tool.event_id
    # the stored conversation reached the model: its prompt holds the first turn's question and tool call
    assert "Paris" in bytes(m2.action.tokens.prompt_ids).decode()
    # store: false keeps nothing to continue from
    r3 = client.responses.create(model="stub", input="forget me", store=False)
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="stub", input="more", previous_response_id=r3.id)
    assert err.value.body["code"] == "previous_response_not_found"  # type: ignore[index]


def test_streaming_events_parse_and_match_the_plain_answer(served: Served) -> None:
    client = served.client()
    with client.responses.stream(model="stub", input="one two three") as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert kinds.count("response.output_text.delta") == 4 and "response.output_text.done" in kinds
    assert final.output_text == "echo: one two three" and final.usage is not None
    events = [e for e in client.responses.create(model="stub", input="Paris", tools=[TOOL], stream=True)]
    done = next(e for e in events if e.type == "response.completed").response
    [call] = done.output
    assert call.type == "function_call" and call.arguments == '{"city":"Paris"}'
    assert [e.type for e in events if "function_call_arguments" in e.type] == [
        "response.function_call_arguments.delta", "response.function_call_arguments.done"]
    served.flush()
    recorded = [served.store.trajectory(t).events[0] for t in served.store.trajectory_ids()]
    assert sorted(e.action.text or "" for e in recorded) == ["", "echo: one two three"]
    assert [c.name for e in recorded for c in e.action.tool_calls or ()] == ["get_weather"]


def test_a_backend_dying_mid_stream_ends_with_response_failed_and_is_recorded(served: Served) -> None:
    raw = httpx.post(served.base_url + "/responses", headers=W, timeout=30,
                     json={"model": "stub", "input": "a b c d e f [[stub:die_after=2]]", "stream": True})
    assert raw.status_code == 200
    kinds = [line[7:] for line in raw.text.splitlines() if line.startswith("event: ")]
    assert kinds[-1] == "response.failed" and "response.completed" not in kinds
    [ev] = served.events(raw.headers["x-molt-trajectory"])
    assert ev.outcome.status == OutcomeStatus.ERROR


def test_the_versions_harness_applies_as_on_chat(served: Served) -> None:
    spec = {"version": "stub@edited", "backends": ["stub"],
            "harness": {"system_prompt": "Always cite the weather service.",
                        "tool_rewrites": {"get_weather": {"rename": "weather_lookup"}}}}
    r = httpx.post(served.url + "/v1/molt/admin/versions", headers=OPERATOR,
                   json={"model": "stub", "spec": spec, "weight": 1.0, "weights": {"stub@base": 0.0}})
    assert r.status_code == 200, r.text
    raw = served.client().responses.with_raw_response.create(model="stub", input="Oslo", tools=[TOOL])
    assert raw.headers["x-molt-policy-version"] == "stub@edited"
    [call] = raw.parse().output
    assert call.name == "get_weather"  # the agent sees its own tool name
    [ev] = served.events(raw.headers["x-molt-trajectory"])
    prompt = bytes(ev.action.tokens.prompt_ids).decode()
    assert "Always cite the weather service." in prompt and "weather_lookup" in prompt
    assert ev.provenance.harness_fingerprint


def test_openai_agents_sdk_default_model_runs_over_the_responses_api(serve: Any, monkeypatch: Any,
                                                                    request: Any) -> None:
    agents = pytest.importorskip("agents", reason="openai-agents is installed in the main environment")
    served = serve([StubBackend(script=SCRIPT * 2)])
    # Only the environment: the SDK's default client, its default (Responses) model, no set_default_openai_api.
    monkeypatch.setenv("OPENAI_BASE_URL", served.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-acme-writer")
    monkeypatch.setenv("OPENAI_DEFAULT_MODEL", "stub")
    # tracing off for this test only: the provider is process-wide, and the adapters' tests need it on
    agents.set_tracing_disabled(True)
    request.addfinalizer(lambda: agents.set_tracing_disabled(False))
    # the SDK caches its default client and provider: fresh ones read the environment set above
    monkeypatch.setattr(agents.models._openai_shared, "_default_openai_client", None, raising=False)

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return f"sunny in {city}, 21 C"

    agent = agents.Agent(name="weather", instructions="Answer with the weather.", tools=[get_weather])

    async def run() -> tuple[str, str]:
        plain = await agents.Runner.run(agent, "What is the weather in Paris?")
        streamed = agents.Runner.run_streamed(agent, "And in Paris again?")
        async for _ in streamed.stream_events():
            pass
        return str(plain.final_output), str(streamed.final_output)

    assert asyncio.run(run()) == ("It is sunny in Paris, 21 C.", "It is sunny in Paris, 21 C.")
    served.flush()
    tids = served.store.trajectory_ids()
    assert len(tids) == 2  # one trajectory per run
    for tid in tids:
        events = served.store.trajectory(tid).events
        assert [e.kind for e in events] == [EventKind.MODEL_CALL, EventKind.TOOL_CALL, EventKind.MODEL_CALL]
        assert events[1].action.tool_name == "get_weather" and events[1].action.arguments == {"city": "Paris"}
        assert all(e.name == "responses" for e in (events[0], events[2]))
        assert served.store.verify(tid).ok


@pytest.mark.parametrize("body, param", [
    ({"model": "stub", "input": [{"type": "computer_call_output", "call_id": "c"}]}, "input[0].type"),
    ({"model": "stub", "input": [{"role": "user", "content": [{"type": "input_audio", "data": "x"}]}]},
     "input[0].content[0].type"),
    ({"model": "stub", "input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id"),
    ({"model": "stub", "input": [{"role": "wizard", "content": "hi"}]}, "input[0].role"),
    ({"model": "stub", "input": "hi", "tools": [{"type": "frobnicate"}]}, "tools[0].type"),
    ({"model": "stub", "input": "hi", "tools": [{"type": "function", "parameters": {}}]}, "tools[0].name"),
    ({"model": "stub", "input": 42}, "input"),
    ({"model": "stub"}, "input"),
])
def test_bad_input_is_answered_in_the_apis_shape_and_nothing_is_stored(served: Served, body: dict[str, Any],
                                                                        param: str) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        served.client().responses.create(**body)
    assert err.value.status_code == 400
    e = err.value.body
    assert isinstance(e, dict) and e["type"] == "invalid_request_error" and e["param"] == param and e["message"]
    served.flush()
    assert served.store.trajectory_ids() == []


def test_another_tenants_previous_response_is_not_found_and_nothing_is_stored(served: Served) -> None:
    mine = served.client().responses.create(model="stub", input="acme's secret")
    served.flush()
    before = served.store.trajectory_ids()
    globex = served.client("sk-globex-writer")
    with pytest.raises(openai.BadRequestError) as err:
        globex.responses.create(model="stub", input="what did they say?", previous_response_id=mine.id)
    with pytest.raises(openai.BadRequestError) as unknown:
        globex.responses.create(model="stub", input="x", previous_response_id="resp_never")
    # the same answer as for an id that never existed: no oracle for another tenant's ids
    assert err.value.body["code"] == unknown.value.body["code"] == "previous_response_not_found"  # type: ignore[index]
    served.flush()
    assert served.store.trajectory_ids() == before


def test_a_malformed_continuation_stores_nothing_half_way(served: Served) -> None:
    """A bad item in a turn that continues a stored response: the API's error, no event, and the stored
    conversation as it was — the next good turn continues the first one, not the refused one."""
    client = served.client()
    first = client.responses.with_raw_response.create(model="stub", input="remember: blue")
    r1 = first.parse()
    tid = first.headers["x-molt-trajectory"]
    [before] = served.events(tid)
    for bad in ([{"type": "function_call_output", "output": "no call id"}],
                [{"role": "user", "content": "fine"}, {"role": "user", "content": [{"type": "input_video"}]}]):
        with pytest.raises(openai.BadRequestError) as err:
            client.responses.create(model="stub", previous_response_id=r1.id, input=bad)
        assert err.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    served.flush()
    assert [e.event_id for e in served.events(tid)] == [before.event_id]
    again = client.responses.with_raw_response.create(model="stub", previous_response_id=r1.id, input="and now?")
    assert again.headers["x-molt-trajectory"] == tid
    _, ev = served.events(tid)
    prompt = bytes(ev.action.tokens.prompt_ids).decode()
    assert "remember: blue" in prompt and "fine" not in prompt and "no call id" not in prompt
