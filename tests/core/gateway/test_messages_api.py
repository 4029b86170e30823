"""``POST /v1/messages`` (and ``/v1/messages/count_tokens``) with the real ``anthropic`` SDK: answers its
own parsers accept, streamed and not, recorded as the chat path records (one trajectory per run, tool
calls, token ids), rewardable by the message id; ``x-api-key`` / ``anthropic-version`` read; bad input
answered in Anthropic's error shape with nothing stored."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from molt.atdp import EventKind, OutcomeStatus

from .conftest import Served

anthropic = pytest.importorskip("anthropic", reason="anthropic is in requirements/main.txt")

W = {"x-api-key": "sk-acme-writer", "anthropic-version": "2023-06-01"}
TOOL = {"name": "get_weather", "description": "Current weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def _client(served: Served, key: str = "sk-acme-writer") -> Any:
    return anthropic.Anthropic(base_url=served.url, api_key=key, max_retries=0)


def test_create_is_answered_recorded_and_rewardable_by_its_id(served: Served) -> None:
    raw = _client(served).messages.with_raw_response.create(
        model="stub", max_tokens=200, system=[{"type": "text", "text": "Be brief."}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "claude"}]}])
    r = raw.parse()
    assert [b.type for b in r.content] == ["text"] and r.content[0].text == "echo: hello claude"
    assert r.stop_reason == "end_turn" and r.id == "msg_" + raw.headers["x-molt-event-id"]
    tid = raw.headers["x-molt-trajectory"]
    [ev] = served.events(tid)
    assert ev.kind == EventKind.MODEL_CALL and ev.name == "messages" and ev.metadata.tenant_id == "acme"
    assert [(m.role, m.content) for m in ev.observation.messages] == [("system", "Be brief."),
                                                                      ("user", "hello claude")]
    assert bytes(ev.action.tokens.completion_ids).decode() == r.content[0].text
    assert r.usage.input_tokens == len(ev.action.tokens.prompt_ids)
    count = _client(served).messages.count_tokens(model="stub", system="Be brief.",
                                                  messages=[{"role": "user", "content": "hello claude"}])
    assert count.input_tokens == r.usage.input_tokens  # the stub tokenizes bytes: the count is exact
    rew = httpx.post(served.url + "/v1/molt/rewards/call", headers={"authorization": "Bearer sk-acme-writer"},
                     json={"call_id": r.id, "value": 1.0})
    assert rew.status_code == 200 and rew.json()["event_ids"] == [ev.event_id]
    assert served.store.verify(tid).ok


def test_a_tool_loop_resending_its_history_is_one_trajectory(served: Served) -> None:
    client = _client(served)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Paris"}]
    first = client.messages.with_raw_response.create(model="stub", max_tokens=200, tools=[TOOL], messages=messages)
    r1 = first.parse()
    [use] = r1.content
    assert r1.stop_reason == "tool_use" and use.type == "tool_use" and use.input == {"city": "Paris"}
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r1.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                               "content": [{"type": "text", "text": "sunny, 21 C"}]}]}]
    second = client.messages.with_raw_response.create(model="stub", max_tokens=200, tools=[TOOL], messages=messages)
    assert second.parse().content[0].text == "The tool returned: sunny, 21 C"
    tid = first.headers["x-molt-trajectory"]
    assert second.headers["x-molt-trajectory"] == tid
    m1, tool, m2 = served.events(tid)
    assert (m1.kind, tool.kind, m2.kind) == (EventKind.MODEL_CALL, EventKind.TOOL_CALL, EventKind.MODEL_CALL)
    assert tool.action.tool_name == "get_weather" and tool.action.arguments == {"city": "Paris"}
    assert tool.outcome.output == "sunny, 21 C" and m2.parent_id == tool.event_id
    assert served.store.verify(tid).ok


def test_streaming_text_and_tools_parse_with_the_sdks_stream_helper(served: Served) -> None:
    client = _client(served)
    with client.messages.stream(model="stub", max_tokens=200,
                                messages=[{"role": "user", "content": "one two three"}]) as stream:
        kinds = [e.type for e in stream]
        text = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and kinds.count("content_block_delta") == 4
    assert text.content[0].text == "echo: one two three" and text.stop_reason == "end_turn"
    assert text.usage.input_tokens > 0 and text.usage.output_tokens == len("echo: one two three")
    with client.messages.stream(model="stub", max_tokens=200, tools=[TOOL],
                                messages=[{"role": "user", "content": "Paris"}]) as stream:
        tools = stream.get_final_message()
    [use] = tools.content
    assert use.type == "tool_use" and use.name == "get_weather" and use.input == {"city": "Paris"}
    assert tools.stop_reason == "tool_use"
    served.flush()
    recorded = [served.store.trajectory(t).events[0] for t in served.store.trajectory_ids()]
    assert sorted(e.action.text or "" for e in recorded) == ["", "echo: one two three"]
    assert all(e.name == "messages" and e.action.tokens is not None for e in recorded)


def test_a_backend_dying_mid_stream_sends_an_error_event_and_is_recorded(served: Served) -> None:
    raw = httpx.post(served.url + "/v1/messages", headers=W, timeout=30, json={
        "model": "stub", "max_tokens": 100, "stream": True,
        "messages": [{"role": "user", "content": "a b c d e f [[stub:die_after=2]]"}]})
    assert raw.status_code == 200
    kinds = [line[7:] for line in raw.text.splitlines() if line.startswith("event: ")]
    assert kinds[-1] == "error" and "message_stop" not in kinds
    with pytest.raises(anthropic.APIStatusError):  # the SDK's stream reader raises on it
        with _client(served).messages.stream(model="stub", max_tokens=100, messages=[
                {"role": "user", "content": "a b c d e f [[stub:die_after=2]]"}]) as stream:
            stream.get_final_message()
    [ev] = served.events(raw.headers["x-molt-trajectory"])
    assert ev.outcome.status == OutcomeStatus.ERROR


def test_keys_and_version_headers_errors_in_anthropics_shape(served: Served) -> None:
    with pytest.raises(anthropic.AuthenticationError) as err:
        _client(served, "sk-wrong").messages.create(model="stub", max_tokens=10,
                                                    messages=[{"role": "user", "content": "hi"}])
    assert err.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                         "message": err.value.body["error"]["message"]}}
    with pytest.raises(anthropic.NotFoundError) as nf:
        _client(served).messages.create(model="nope", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert nf.value.body["error"]["type"] == "not_found_error"
    bad_version = httpx.post(served.url + "/v1/messages", headers={**W, "anthropic-version": "latest"},
                             json={"model": "stub", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
    assert bad_version.status_code == 400 and bad_version.json()["type"] == "error"
    bearer = httpx.post(served.url + "/v1/messages", headers={"authorization": "Bearer sk-acme-writer"},
                        json={"model": "stub", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
    assert bearer.status_code == 200 and bearer.json()["content"][0]["text"] == "echo: hi"


@pytest.mark.parametrize("body", [
    {"messages": [{"role": "user", "content": [{"type": "video", "url": "x"}]}]},  # unknown block type
    {"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]},
    {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "x"}]}]},
    {"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
    {"messages": [{"role": "tool", "content": "hi"}]},
    {"messages": []},
    {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "web_search_20250305", "name": "w"}]},
    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0},
])
def test_bad_input_is_answered_in_anthropics_shape_and_nothing_is_stored(served: Served,
                                                                         body: dict[str, Any]) -> None:
    with pytest.raises(anthropic.BadRequestError) as err:
        _client(served).messages.create(**{"model": "stub", "max_tokens": 10, **body})
    assert err.value.status_code == 400
    e = err.value.body
    assert e["type"] == "error" and e["error"]["type"] == "invalid_request_error" and e["error"]["message"]
    served.flush()
    assert served.store.trajectory_ids() == []


def test_a_malformed_later_turn_stores_nothing_half_way(served: Served) -> None:
    """An unknown block in a turn that continues a conversation: Anthropic's error shape, and the
    trajectory holds only the calls that were served."""
    client = _client(served)
    first = client.messages.with_raw_response.create(model="stub", max_tokens=50,
                                                     messages=[{"role": "user", "content": "hi"}])
    tid = first.headers["x-molt-trajectory"]
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": first.parse().content[0].text}]
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(model="stub", max_tokens=50, messages=[
            *history, {"role": "user", "content": [{"type": "text", "text": "more"}, {"type": "hologram"}]}])
    assert err.value.body["type"] == "error" and err.value.body["error"]["type"] == "invalid_request_error"
    served.flush()
    assert len(served.events(tid)) == 1
    ok = client.messages.with_raw_response.create(model="stub", max_tokens=50,
                                                  messages=[*history, {"role": "user", "content": "more"}])
    assert ok.headers["x-molt-trajectory"] == tid and len(served.events(tid)) == 2
