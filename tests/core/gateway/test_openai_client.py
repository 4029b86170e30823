"""The stub-backend path through the gateway with the real OpenAI Python client: plain, streaming,
tools, n, stop, logprobs, completions, models, health and metrics — and what gets recorded."""

from __future__ import annotations

import httpx
import pytest

from molt.atdp import EventKind, OutcomeStatus

from .conftest import WEATHER_TOOL, Served


def test_plain_chat_is_answered_and_recorded_with_tokens(served: Served) -> None:
    client = served.client()
    raw = client.chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": "hello gateway"}], temperature=0.2, logprobs=True)
    r = raw.parse()
    assert r.choices[0].message.content == "echo: hello gateway"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None and r.usage.completion_tokens == len("echo: hello gateway")
    assert [t.token for t in r.choices[0].logprobs.content][:4] == ["e", "c", "h", "o"]
    tid = raw.headers["x-molt-trajectory"]
    assert r.id == "chatcmpl-" + raw.headers["x-molt-event-id"]
    assert raw.headers["x-molt-policy-version"] == "stub@base"

    [ev] = served.events(tid)
    assert ev.kind == EventKind.MODEL_CALL and ev.event_id == raw.headers["x-molt-event-id"]
    assert ev.metadata.tenant_id == "acme" and ev.metadata.model == "stub"
    assert ev.provenance.policy_version == "stub@base" and ev.provenance.integration == "gateway"
    assert ev.observation.messages[0].content == "hello gateway"
    gen = ev.action
    assert gen.text == "echo: hello gateway" and gen.sampling == {"temperature": 0.2}
    # The stub tokenizes bytes: the recorded tokens decode to exactly what was served.
    assert bytes(gen.tokens.completion_ids).decode() == r.choices[0].message.content
    assert gen.tokens.completion_logprobs == [t.logprob for t in r.choices[0].logprobs.content]
    assert gen.tokens.policy_version == "stub@base" and gen.tokens.tokenizer == "bytes"
    assert bytes(gen.tokens.prompt_ids).decode().endswith("<|im_start|>assistant\n")
    assert ev.metadata.usage.output_tokens == r.usage.completion_tokens
    assert served.store.verify(tid).ok


def test_streaming_chat_matches_the_plain_answer_and_is_recorded(served: Served) -> None:
    client = served.client()
    stream = client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "one two three"}],
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: one two three"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 4
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len(text)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    tid = stream.response.headers["x-molt-trajectory"]
    [ev] = served.events(tid)
    assert ev.action.text == text and bytes(ev.action.tokens.completion_ids).decode() == text
    assert ev.outcome.status == OutcomeStatus.OK


def test_tool_loop_links_calls_and_tool_results_into_one_trajectory(served: Served) -> None:
    client = served.client()
    messages = [{"role": "user", "content": "Paris"}]
    first = client.chat.completions.with_raw_response.create(model="stub", messages=messages, tools=[WEATHER_TOOL])
    r1 = first.parse()
    call = r1.choices[0].message.tool_calls[0]
    assert r1.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather" and call.function.arguments == '{"city":"Paris"}'
    messages += [r1.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
    second = client.chat.completions.with_raw_response.create(model="stub", messages=messages, tools=[WEATHER_TOOL])
    assert second.parse().choices[0].message.content == "The tool returned: sunny, 21 C"
    tid = first.headers["x-molt-trajectory"]
    assert second.headers["x-molt-trajectory"] == tid  # no session header: linked by the conversation

    events = served.events(tid)
    assert [e.kind for e in events] == [EventKind.MODEL_CALL, EventKind.TOOL_CALL, EventKind.MODEL_CALL]
    m1, tool, m2 = events
    assert m1.action.tool_calls[0].name == "get_weather" and m1.action.tool_calls[0].arguments == {"city": "Paris"}
    assert tool.action.tool_name == "get_weather" and tool.action.call_id == call.id
    assert tool.action.arguments == {"city": "Paris"} and tool.outcome.output == "sunny, 21 C"
    assert tool.parent_id == m1.event_id and m2.parent_id == tool.event_id
    assert m1.observation.data == {"tools": [WEATHER_TOOL]}
    assert served.store.verify(tid).ok


def test_streamed_tool_calls_reach_the_client_whole(served: Served) -> None:
    stream = served.client().chat.completions.create(
        model="stub", messages=[{"role": "user", "content": "Rome"}], tools=[WEATHER_TOOL], stream=True)
    calls: dict[int, dict[str, str]] = {}
    for chunk in stream:
        for tc in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            slot = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            slot["name"] += tc.function.name or ""
            slot["arguments"] += tc.function.arguments or ""
    assert calls == {0: {"name": "get_weather", "arguments": '{"city":"Rome"}'}}


def test_n_stop_and_max_tokens(served: Served) -> None:
    client = served.client()
    raw = client.chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": "alpha beta"}], n=3)
    r = raw.parse()
    assert [c.index for c in r.choices] == [0, 1, 2]
    ids = raw.headers["x-molt-event-ids"].split(",")
    assert len(ids) == 3 and ids[0] == raw.headers["x-molt-event-id"]
    events = served.events(raw.headers["x-molt-trajectory"])
    assert sorted(e.event_id for e in events) == sorted(ids)
    assert {e.metadata.tags["choice"] for e in events} == {"0", "1", "2"}

    r = client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "alpha beta"}],
                                       stop=[" beta"])
    assert r.choices[0].message.content == "echo: alpha"
    r = client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "alpha beta"}],
                                       max_tokens=4)
    assert r.choices[0].message.content == "echo" and r.choices[0].finish_reason == "length"


def test_completions_plain_and_streamed(served: Served) -> None:
    client = served.client()
    r = client.completions.create(model="stub", prompt="Say it back", logprobs=1)
    assert r.choices[0].text == "echo: Say it back"
    assert r.choices[0].logprobs.tokens[:2] == ["e", "c"]
    text = "".join(c.choices[0].text for c in client.completions.create(model="stub", prompt="again", stream=True)
                   if c.choices)
    assert text == "echo: again"
    raw = client.completions.with_raw_response.create(model="stub", prompt=[72, 105])
    [ev] = served.events(raw.headers["x-molt-trajectory"])
    assert ev.name == "completions" and ev.action.tokens.prompt_ids == [72, 105]
    assert ev.observation.data == {"prompt_token_ids": [72, 105]}


def test_models_health_and_metrics(served: Served) -> None:
    client = served.client()
    assert [m.id for m in client.models.list()] == ["stub", "stub@base"]
    assert client.models.retrieve("stub").id == "stub"
    client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "x"}])
    h = httpx.get(served.url + "/health", headers={"authorization": "Bearer sk-acme-reader"})
    assert h.status_code == 200 and h.json()["status"] == "ok" and h.json()["backends"] == {"stub": True}
    m = httpx.get(served.url + "/metrics", headers={"authorization": "Bearer sk-acme-reader"})
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    assert 'molt_gateway_requests_total{endpoint="/v1/chat/completions",status="200"} 1' in m.text
    assert 'molt_gateway_backend_up{backend="stub"} 1' in m.text
    assert "molt_recorder_enqueued" in m.text
    assert "# TYPE molt_gateway_request_duration_seconds histogram" in m.text
    # the gateway process's LanceDB caches (bounded; a soak subtracts them from its RSS)
    cached = [float(line.split()[1]) for line in m.text.splitlines() if line.startswith("molt_store_cache_bytes ")]
    assert len(cached) == 1 and 0 < cached[0] <= served.store.cache_bytes() * 2, cached


def test_session_header_groups_calls_and_user_field_is_a_fallback(served: Served) -> None:
    client = served.client()
    a = client.chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": "one"}], extra_headers={"X-Molt-Session": "s-1"})
    b = client.chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": "unrelated"}], extra_headers={"X-Molt-Session": "s-1"})
    assert a.headers["x-molt-trajectory"] == b.headers["x-molt-trajectory"]
    assert a.headers["x-molt-session"] == "s-1"
    c = client.chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": "one"}], user="s-2")
    d = client.chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": "two"}], user="s-2")
    assert c.headers["x-molt-trajectory"] == d.headers["x-molt-trajectory"] != a.headers["x-molt-trajectory"]
    events = served.events(a.headers["x-molt-trajectory"])
    assert [e.session_id for e in events] == ["s-1", "s-1"]
    assert events[1].parent_id == events[0].event_id
    t = client.chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": "x"}], extra_headers={"X-Molt-Trajectory": "traj-given"})
    # keys of two tenants: a client-chosen id names the tenant's own namespaced trajectory
    assert t.headers["x-molt-trajectory"] == served.gateway.namespace.namespaced("acme", "traj-given")


def test_tenants_are_isolated_in_linking(served: Served) -> None:
    """The same conversation from two tenants never links across them."""
    msgs = [{"role": "user", "content": "hi"}]
    r = served.client("sk-acme-writer").chat.completions.create(model="stub", messages=msgs)
    msgs += [{"role": "assistant", "content": r.choices[0].message.content}, {"role": "user", "content": "more"}]
    a = served.client("sk-acme-writer").chat.completions.with_raw_response.create(model="stub", messages=msgs)
    g = served.client("sk-globex-writer").chat.completions.with_raw_response.create(model="stub", messages=msgs)
    assert a.headers["x-molt-trajectory"] != g.headers["x-molt-trajectory"]
    [ev] = served.events(g.headers["x-molt-trajectory"])
    assert ev.metadata.tenant_id == "globex" and ev.parent_id is None


@pytest.mark.parametrize("stream", [False, True])
def test_async_client_concurrent_calls(served: Served, stream: bool) -> None:
    import asyncio

    import openai

    async def run() -> list[str]:
        client = openai.AsyncOpenAI(base_url=served.base_url, api_key="sk-acme-writer", max_retries=0)

        async def one(i: int) -> str:
            msgs = [{"role": "user", "content": f"n{i}"}]
            if stream:
                s = await client.chat.completions.create(model="stub", messages=msgs, stream=True)
                return "".join([c.choices[0].delta.content or "" async for c in s if c.choices])
            r = await client.chat.completions.create(model="stub", messages=msgs)
            return r.choices[0].message.content or ""

        try:
            return await asyncio.gather(*(one(i) for i in range(16)))
        finally:
            await client.close()

    assert asyncio.run(run()) == [f"echo: n{i}" for i in range(16)]
    served.flush()
    assert served.recorder.stats.delivered >= 16
