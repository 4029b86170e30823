"""Upstream passthrough of either kind: a Molt gateway in front of a real HTTP upstream that speaks the
Anthropic Messages API (``AnthropicBackend``, ``molt serve --backend anthropic``) or the Responses API
(``OpenAIBackend(passthrough=("responses",))``, ``molt serve --passthrough responses``), the real
``anthropic`` / ``openai`` SDKs as clients.

The upstream is a second Molt gateway over the stub backend, served over loopback HTTP: it records what
reached it, so each test sees both sides — that the request arrived in its own API (the upstream's
record is a ``messages`` / ``responses`` call, not a translated chat completion) with the harness
applied, and that the front gateway recorded the call (verified chain, governance before keeping,
reward by the id the client got). Streams come through event by event; upstream errors arrive in the
API's own shape."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from molt.atdp import EventKind, OutcomeStatus
from molt.backends import AnthropicBackend, OpenAIBackend
from molt.capture import Recorder
from molt.gateway import Gateway, GatewayConfig, create_app
from molt.gateway.loopback import ServerThread, wait_healthy
from molt.governance import GovernancePipeline
from molt.governance.access import KeyRing
from molt.store import Store

from .conftest import KEYS, Served

anthropic = pytest.importorskip("anthropic", reason="anthropic is in requirements/main.txt")

OPERATOR = {"authorization": "Bearer sk-operator"}
A_TOOL = {"name": "get_weather", "description": "Current weather in a city.",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
R_TOOL = {"type": "function", "name": "get_weather", "description": "Current weather in a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
HARNESS = {"version": "stub@edited", "backends": ["up"],
           "harness": {"system_prompt": "Always cite the weather service.",
                       "memories": ["Oslo answers are in Celsius."],
                       "tool_rewrites": {"get_weather": {"rename": "weather_lookup"}}}}


def _anthropic(served: Served, key: str = "sk-acme-writer") -> Any:
    return anthropic.Anthropic(base_url=served.url, api_key=key, max_retries=0)


def _front(serve: Callable[..., Served], kind: str) -> tuple[Served, Served]:
    upstream = serve(keys=False)
    backend = (AnthropicBackend("up", base_url=upstream.base_url, model="stub") if kind == "messages"
               else OpenAIBackend("up", base_url=upstream.base_url, model="stub", passthrough=("responses",)))
    return serve([backend]), upstream


def _only(served: Served) -> Any:
    served.flush()
    [tid] = served.store.trajectory_ids()
    return served.store.trajectory(tid).events


def _harness(front: Served) -> None:
    r = httpx.post(front.url + "/v1/molt/admin/versions", headers=OPERATOR,
                   json={"model": "stub", "spec": HARNESS, "weight": 1.0, "weights": {"stub@base": 0.0}})
    assert r.status_code == 200, r.text


# --------------------------------------------------------------------------------- Anthropic upstream


def test_messages_pass_through_to_an_anthropic_upstream_and_are_recorded(serve: Callable[..., Served]) -> None:
    front, upstream = _front(serve, "messages")
    client = _anthropic(front)
    raw = client.messages.with_raw_response.create(
        model="stub", max_tokens=100,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "hello upstream"}], metadata={"session_id": "for-the-front"})
    m = raw.parse()
    assert m.content[0].text == "echo: hello upstream" and m.stop_reason == "end_turn"
    assert m.id == "msg_" + raw.headers["x-molt-event-id"] and m.model == "stub"
    # the session named in metadata is the front's; that key is the gateway's own and does not go upstream
    [up] = _only(upstream)
    assert up.name == "messages" and up.session_id != "for-the-front"
    [ev] = front.events(raw.headers["x-molt-trajectory"])
    assert ev.session_id == "for-the-front"
    assert ev.name == "messages" and ev.kind == EventKind.MODEL_CALL and ev.action.text == "echo: hello upstream"
    assert [(x.role, x.content) for x in ev.observation.messages] == [("system", "Be brief."),
                                                                      ("user", "hello upstream")]
    assert ev.metadata.usage.output_tokens == len("echo: hello upstream") and ev.metadata.tenant_id == "acme"
    assert front.store.verify(ev.trajectory_id).ok
    # count_tokens is the upstream's own count
    ask = {"model": "stub", "system": "Be brief.", "messages": [{"role": "user", "content": "count me"}]}
    direct = anthropic.Anthropic(base_url=upstream.url, api_key="x").messages.count_tokens(**ask)
    assert client.messages.count_tokens(**ask).input_tokens == direct.input_tokens > 0
    rew = httpx.post(front.url + "/v1/molt/rewards/call", headers=OPERATOR | {"authorization": "Bearer sk-acme-writer"},
                     json={"call_id": m.id, "value": 1.0})
    assert rew.status_code == 200 and rew.json()["event_ids"] == [ev.event_id]


def test_a_streamed_tool_loop_passes_event_by_event_with_the_harness_applied(serve: Callable[..., Served]) -> None:
    front, upstream = _front(serve, "messages")
    _harness(front)
    client = _anthropic(front)
    ask = [{"role": "user", "content": "Oslo"}]
    with client.messages.stream(model="stub", max_tokens=100, system="Answer with the weather.", tools=[A_TOOL],
                                messages=ask) as stream:
        kinds = [e.type for e in stream]
        first = stream.get_final_message()
    [call] = [b for b in first.content if b.type == "tool_use"]
    assert call.name == "get_weather" and call.input == {"city": "Oslo"}  # the client's own tool name
    # the upstream's own event sequence, as a direct client of it sees it
    direct = anthropic.Anthropic(base_url=upstream.url, api_key="x", max_retries=0)
    with direct.messages.stream(model="stub", max_tokens=100, tools=[{**A_TOOL, "name": "weather_lookup"}],
                                messages=ask) as stream:
        assert kinds == [e.type for e in stream]
    follow = [*ask, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "-3 C"}]}]
    second = client.messages.create(model="stub", max_tokens=100, system="Answer with the weather.", tools=[A_TOOL],
                                    messages=follow)
    assert second.content[0].text == "The tool returned: -3 C"
    upstream.flush()
    seen = [e for t in upstream.store.trajectory_ids() for e in upstream.store.trajectory(t).events
            if e.kind == EventKind.MODEL_CALL]
    relayed = [e for e in seen if "cite the weather" in (e.observation.messages[0].content or "")]
    assert len(relayed) == 2 and all(e.name == "messages" for e in relayed)
    system = relayed[0].observation.messages[0].content
    assert "Answer with the weather." in system and "Oslo answers are in Celsius." in system
    assert relayed[0].observation.data["tools"][0]["function"]["name"] == "weather_lookup"
    # the history's call went upstream under the name the model knows
    assert relayed[1].observation.messages[2].tool_calls[0].name == "weather_lookup"
    front.flush()
    [tid] = front.store.trajectory_ids()
    m1, tool, m2 = front.store.trajectory(tid).events
    assert (m1.kind, tool.kind, m2.kind) == (EventKind.MODEL_CALL, EventKind.TOOL_CALL, EventKind.MODEL_CALL)
    assert m1.action.tool_calls[0].name == "get_weather" and tool.outcome.output == "-3 C"
    assert m1.provenance.policy_version == "stub@edited" and m1.provenance.harness_fingerprint
    assert front.store.verify(tid).ok


def test_upstream_errors_are_relayed_in_anthropics_shape(serve: Callable[..., Served]) -> None:
    front, upstream = _front(serve, "messages")
    spec = {"version": "stub@gone", "backends": ["up"], "upstream_model": "no-such-model"}
    r = httpx.post(front.url + "/v1/molt/admin/versions", headers=OPERATOR,
                   json={"model": "stub", "spec": spec, "weight": 1.0, "weights": {"stub@base": 0.0}})
    assert r.status_code == 200, r.text
    direct = httpx.post(upstream.url + "/v1/messages", json={"model": "no-such-model", "max_tokens": 5,
                                                            "messages": [{"role": "user", "content": "hi"}]})
    for stream in (False, True):
        with pytest.raises(anthropic.NotFoundError) as err:
            _anthropic(front).messages.create(model="stub", max_tokens=5, stream=stream,
                                              messages=[{"role": "user", "content": "hi"}])
        assert err.value.body == direct.json() and direct.json()["error"]["type"] == "not_found_error"
    upstream.gateway.backends["stub"]  # the upstream is up; now take it away
    bare = serve([AnthropicBackend("up", base_url="http://127.0.0.1:9/v1", model="stub")])
    with pytest.raises(anthropic.APIStatusError) as down:
        _anthropic(bare).messages.create(model="stub", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert down.value.status_code == 502 and down.value.body["type"] == "error"


@pytest.mark.parametrize("kind", ["messages", "responses"])
def test_an_upstream_dying_mid_stream_ends_the_relayed_stream_in_the_apis_shape(serve: Callable[..., Served],
                                                                                kind: str) -> None:
    front, _ = _front(serve, kind)
    text = "a b c d e f [[stub:die_after=2]]"
    if kind == "messages":
        raw = httpx.post(front.url + "/v1/messages", headers={"x-api-key": "sk-acme-writer"}, timeout=30, json={
            "model": "stub", "max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": text}]})
        kinds = [line[7:] for line in raw.text.splitlines() if line.startswith("event: ")]
        assert kinds[0] == "message_start" and "content_block_delta" in kinds
        assert kinds[-1] == "error" and "message_stop" not in kinds
    else:
        raw = httpx.post(front.base_url + "/responses", headers={"authorization": "Bearer sk-acme-writer"},
                         timeout=30, json={"model": "stub", "input": text, "stream": True})
        kinds = [line[7:] for line in raw.text.splitlines() if line.startswith("event: ")]
        assert kinds[:2] == ["response.created", "response.in_progress"] and "response.output_text.delta" in kinds
        assert kinds[-1] == "response.failed" and "response.completed" not in kinds
    [ev] = front.events(raw.headers["x-molt-trajectory"])
    assert ev.outcome.status == OutcomeStatus.ERROR and ev.name == kind and (ev.action.text or "").startswith("echo")


def test_ack_after_durable_holds_the_last_relayed_event_until_the_record_is_kept(
        serve: Callable[..., Served]) -> None:
    """Under ``--ack-after-durable`` a relayed stream's last event (``message_stop``,
    ``response.completed``) waits for the record; the SDKs still read whole answers."""
    upstream = serve(keys=False)
    front = serve([AnthropicBackend("up", base_url=upstream.base_url, model="stub")], ack_after_durable=True)
    with _anthropic(front).messages.stream(model="stub", max_tokens=50,
                                           messages=[{"role": "user", "content": "durably"}]) as s:
        assert s.get_final_message().content[0].text == "echo: durably"
        tid = s.response.headers["x-molt-trajectory"]
    rfront = serve([OpenAIBackend("up", base_url=upstream.base_url, model="stub", passthrough=("responses",))],
                   ack_after_durable=True)
    with rfront.client().responses.stream(model="stub", input="durably too") as rs:
        assert rs.get_final_response().output_text == "echo: durably too"
    assert [e.action.text for e in front.events(tid)] == ["echo: durably"]
    rfront.flush()
    assert [e.action.text for t in rfront.store.trajectory_ids()
            for e in rfront.store.trajectory(t).events] == ["echo: durably too"]


def test_chat_completions_are_translated_for_an_anthropic_upstream(serve: Callable[..., Served]) -> None:
    front, upstream = _front(serve, "messages")
    client = front.client()
    r = client.chat.completions.create(model="stub", messages=[{"role": "system", "content": "Be brief."},
                                                               {"role": "user", "content": "Paris"}],
                                       tools=[{"type": "function", "function": {
                                           "name": "get_weather", "parameters": A_TOOL["input_schema"]}}])
    [call] = r.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and call.function.arguments == '{"city":"Paris"}'
    chunks = list(client.chat.completions.create(model="stub", stream=True,
                                                 messages=[{"role": "user", "content": "one two"}]))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: one two"
    resp = client.responses.create(model="stub", input="via responses")
    assert resp.output_text == "echo: via responses"
    upstream.flush()
    names = sorted(e.name for t in upstream.store.trajectory_ids() for e in upstream.store.trajectory(t).events)
    assert names == ["messages", "messages", "messages"]  # each reached the upstream as a Messages request


def test_governance_redacts_a_passed_through_call_before_it_is_kept(serve: Callable[..., Served],
                                                                    tmp_path: Path) -> None:
    upstream = serve(keys=False)
    store = Store.open(tmp_path / "governed", auto_compact=False)
    rec = Recorder(store, spool_dir=tmp_path / "governed-spool", fsync="never", pipeline=GovernancePipeline())
    gw = Gateway([AnthropicBackend("up", base_url=upstream.base_url, model="stub")], recorder=rec, store=store,
                 keyring=KeyRing.from_mapping(KEYS), config=GatewayConfig(health_interval_s=0))
    try:
        with ServerThread(create_app(gw)) as srv:
            front = Served(srv.url, gw, rec, store)
            secret = "reach me at jane.doe@example.com"
            m = _anthropic(front).messages.create(model="stub", max_tokens=100,
                                                  messages=[{"role": "user", "content": secret}])
            assert m.content[0].text == "echo: " + secret  # served as asked: governance is about keeping
            [ev] = _only(front)
            kept = ev.model_dump_json()
            assert "jane.doe@example.com" not in kept and ev.name == "messages"
            assert "jane.doe@example.com" in _only(upstream)[0].model_dump_json()  # the raw upstream saw it
    finally:
        rec.close()
        store.close()


# --------------------------------------------------------------------------------- Responses upstream


def test_responses_pass_through_natively_with_state_per_tenant(serve: Callable[..., Served]) -> None:
    front, upstream = _front(serve, "responses")
    client = front.client()
    raw = client.responses.with_raw_response.create(model="stub", input="Paris", tools=[R_TOOL],
                                                    instructions="Answer with the weather.")
    r1 = raw.parse()
    assert r1.id == "resp_" + raw.headers["x-molt-event-id"] and r1.model == "stub"
    [call] = r1.output
    assert call.type == "function_call" and call.name == "get_weather" and call.arguments == '{"city":"Paris"}'
    r2 = client.responses.create(model="stub", previous_response_id=r1.id, tools=[R_TOOL],
                                 instructions="Answer with the weather.",
                                 input=[{"type": "function_call_output", "call_id": call.call_id, "output": "21 C"}])
    assert r2.output_text == "The tool returned: 21 C" and r2.previous_response_id == r1.id
    # both reached the upstream as Responses requests, the second continuing the upstream's own response
    upstream.flush()
    [utid] = upstream.store.trajectory_ids()
    ups = upstream.store.trajectory(utid).events
    assert [e.name for e in ups if e.kind == EventKind.MODEL_CALL] == ["responses", "responses"]
    # one trajectory at the front, as on the chat path
    tid = raw.headers["x-molt-trajectory"]
    m1, tool, m2 = front.events(tid)
    assert (m1.name, tool.kind, m2.name) == ("responses", EventKind.TOOL_CALL, "responses")
    assert tool.action.call_id == call.call_id and tool.outcome.output == "21 C"
    assert front.store.verify(tid).ok
    # another tenant cannot continue it, and is told what an unknown id is told
    with pytest.raises(openai.BadRequestError) as err:
        front.client("sk-globex-writer").responses.create(model="stub", input="x", previous_response_id=r1.id)
    assert err.value.body["code"] == "previous_response_not_found"  # type: ignore[index]
    upstream.flush()
    assert len(upstream.store.trajectory(utid).events) == len(ups)  # nothing reached the upstream


def test_a_streamed_response_passes_event_by_event_with_the_harness_applied(serve: Callable[..., Served]) -> None:
    front, upstream = _front(serve, "responses")
    _harness(front)
    client = front.client()
    with client.responses.stream(model="stub", input="Oslo", tools=[R_TOOL]) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    [call] = final.output
    assert call.name == "get_weather" and final.id.startswith("resp_")
    direct = openai.OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0)
    with direct.responses.stream(model="stub", input="Oslo", tools=[{**R_TOOL, "name": "weather_lookup"}]) as s2:
        assert kinds == [e.type for e in s2]
    with client.responses.stream(model="stub", input="one two three") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "echo: one two three" and len(deltas) == 4
    upstream.flush()
    relayed = [e for t in upstream.store.trajectory_ids() for e in upstream.store.trajectory(t).events
               if e.kind == EventKind.MODEL_CALL and "cite the weather" in (e.observation.messages[0].content or "")]
    assert len(relayed) == 2 and all(e.name == "responses" for e in relayed)
    assert "Oslo answers are in Celsius." in relayed[0].observation.messages[0].content
    assert relayed[0].observation.data["tools"][0]["function"]["name"] == "weather_lookup"
    front.flush()
    recorded = sorted((e.action.text or "", [c.name for c in e.action.tool_calls or ()])
                      for t in front.store.trajectory_ids() for e in front.store.trajectory(t).events)
    assert recorded == [("", ["get_weather"]), ("echo: one two three", [])]


def test_responses_upstream_errors_are_relayed_in_openais_shape(serve: Callable[..., Served]) -> None:
    front, upstream = _front(serve, "responses")
    spec = {"version": "stub@gone", "backends": ["up"], "upstream_model": "no-such-model"}
    r = httpx.post(front.url + "/v1/molt/admin/versions", headers=OPERATOR,
                   json={"model": "stub", "spec": spec, "weight": 1.0, "weights": {"stub@base": 0.0}})
    assert r.status_code == 200, r.text
    direct = httpx.post(upstream.base_url + "/responses", json={"model": "no-such-model", "input": "hi"})
    for stream in (False, True):
        with pytest.raises(openai.NotFoundError) as err:
            front.client().responses.create(model="stub", input="hi", stream=stream)
        assert err.value.body == direct.json()["error"] and direct.status_code == 404
    front.flush()
    events = [e for t in front.store.trajectory_ids() for e in front.store.trajectory(t).events]
    assert len(events) == 2 and all(e.outcome.status == OutcomeStatus.ERROR for e in events)


# --------------------------------------------------------------------------------- OTel and bad input


def test_every_route_exports_the_same_genai_spans_passed_through_or_not(serve: Callable[..., Served]) -> None:
    """The OTel GenAI spans of the recorded calls (``molt export --format otlp``): a chat completion, a
    Responses call and a Messages call through an Anthropic upstream — the last passed through —
    carry the same ``gen_ai.*`` attributes."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from molt.interop.otlp import export_otlp

    front, _ = _front(serve, "messages")
    front.client().chat.completions.create(model="stub", messages=[{"role": "user", "content": "via chat"}])
    front.client().responses.create(model="stub", input="via responses")
    _anthropic(front).messages.create(model="stub", max_tokens=50,
                                      messages=[{"role": "user", "content": "via messages"}])
    front.flush()
    mem = InMemorySpanExporter()
    sent, failed = export_otlp(front.store, exporter=mem)
    assert (sent, failed) == (3, 0)
    spans = {s.attributes["molt.event"].split('"name":"')[1].split('"')[0]: s for s in mem.get_finished_spans()}
    assert sorted(spans) == ["chat.completions", "messages", "responses"]
    genai = {route: {k: v for k, v in s.attributes.items() if k.startswith("gen_ai.")} for route, s in spans.items()}
    keys = {route: sorted(a) for route, a in genai.items()}
    assert keys["messages"] == keys["responses"] == keys["chat.completions"]
    assert {"gen_ai.operation.name", "gen_ai.request.model", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
            "gen_ai.response.finish_reasons", "gen_ai.output.messages"} <= set(keys["messages"])
    for route, a in genai.items():
        assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "stub"
        assert f"echo: via {route.split('.')[0]}" in a["gen_ai.output.messages"]
        assert spans[route].kind == spans["chat.completions"].kind and spans[route].status.status_code.name == "OK"


@pytest.mark.parametrize("kind", ["messages", "responses"])
def test_bad_input_in_each_apis_shape_nothing_stored_half_way(serve: Callable[..., Served], kind: str) -> None:
    """What the record needs (a tool result's call id, an item's shape) is checked by the gateway before
    anything is relayed: its error, nothing recorded on either side. A block or item type the gateway
    does not read is the upstream's to judge: the upstream's own error comes back as it sent it, and
    the front records the failed call whole (its error with it)."""
    front, upstream = _front(serve, kind)
    if kind == "messages":
        for content in ([{"type": "tool_result"}], [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]):
            with pytest.raises(anthropic.BadRequestError) as err:
                _anthropic(front).messages.create(model="stub", max_tokens=5,
                                                  messages=[{"role": "user", "content": content}])
            assert err.value.body["type"] == "error" and err.value.body["error"]["type"] == "invalid_request_error"
    else:
        for items in ([{"type": "function_call", "name": "f"}], [{"role": "wizard", "content": "hi"}]):
            with pytest.raises(openai.BadRequestError) as oerr:
                front.client().responses.create(model="stub", input=items)
            assert oerr.value.body["type"] == "invalid_request_error" and oerr.value.body["param"]  # type: ignore[index]
    front.flush()
    upstream.flush()
    assert front.store.trajectory_ids() == [] and upstream.store.trajectory_ids() == []
    if kind == "messages":
        unknown = {"model": "stub", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "video"}]}]}
        direct = httpx.post(upstream.url + "/v1/messages", json=unknown)
        with pytest.raises(anthropic.BadRequestError) as err:
            _anthropic(front).messages.create(**unknown)
        assert err.value.body == direct.json() and direct.json()["type"] == "error"
    else:
        unknown = {"model": "stub", "input": [{"type": "computer_call_output", "call_id": "c"},
                                              {"role": "user", "content": "hi"}]}
        direct = httpx.post(upstream.base_url + "/responses", json=unknown)
        with pytest.raises(openai.BadRequestError) as oerr:
            front.client().responses.create(**unknown)
        assert oerr.value.body == direct.json()["error"] and direct.status_code == 400
    [failed] = _only(front)
    assert failed.outcome.status == OutcomeStatus.ERROR and failed.name == kind
    assert upstream.store.trajectory_ids() == []  # the upstream refused it: nothing there


def _recording_upstream() -> tuple[Any, list[dict[str, Any]]]:
    """A bare upstream that takes any Messages / Responses body, keeps it, and answers one text."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    got: list[dict[str, Any]] = []

    async def messages(request: Request) -> JSONResponse:
        got.append(await request.json())
        return JSONResponse({"id": "msg_up", "type": "message", "role": "assistant", "model": got[-1]["model"],
                             "content": [{"type": "text", "text": "read it"}], "stop_reason": "end_turn",
                             "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 2}})

    async def responses(request: Request) -> JSONResponse:
        got.append(await request.json())
        return JSONResponse({"id": "resp_up", "object": "response", "created_at": 0, "status": "completed",
                             "model": got[-1]["model"], "output": [{
                                 "type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                                 "content": [{"type": "output_text", "text": "read it", "annotations": []}]}],
                             "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}})

    return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"]),
                             Route("/v1/responses", responses, methods=["POST"])]), got


def test_what_the_gateway_does_not_read_goes_upstream_as_sent(serve: Callable[..., Served]) -> None:
    """Blocks, items and server tools the chat form has no place for (a document, a web search
    tool, a file input) reach a passthrough upstream unchanged, and the call is recorded with what
    the gateway does read."""
    app, got = _recording_upstream()
    with ServerThread(app) as up:
        front = serve([AnthropicBackend("up", base_url=up.url + "/v1", model="stub")])
        doc = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "The manual."},
               "cache_control": {"type": "ephemeral"}}
        search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}
        m = _anthropic(front).messages.create(model="stub", max_tokens=20, tools=[search, A_TOOL],
                                              metadata={"user_id": "u-1", "agent_id": "reader"},  # type: ignore[typeddict-unknown-key]
                                              messages=[{"role": "user", "content": [doc, {"type": "text",
                                                                                             "text": "summarise"}]}])
        assert m.content[0].text == "read it" and m.id.startswith("msg_") and m.id != "msg_up"
        assert got[-1]["messages"][0]["content"][0] == doc and got[-1]["tools"] == [search, A_TOOL]
        assert got[-1]["metadata"] == {"user_id": "u-1"}  # Anthropic's own key; the agent was the gateway's
        [ev] = _only(front)
        assert ev.metadata.agent_id == "reader"
        assert ev.observation.messages[-1].content == "summarise" and ev.action.text == "read it"
        assert [t["function"]["name"] for t in ev.observation.data["tools"]] == ["get_weather"]
        rfront = serve([OpenAIBackend("up", base_url=up.url + "/v1", model="stub", passthrough=("responses",))])
        item = {"role": "user", "content": [{"type": "input_file", "file_id": "file-1"},
                                            {"type": "input_text", "text": "and this one"}]}
        r = rfront.client().responses.create(model="stub", input=[item], tools=[{"type": "web_search"}])
        assert r.output_text == "read it" and r.id != "resp_up"
        assert got[-1]["input"] == [item] and got[-1]["tools"] == [{"type": "web_search"}]


@pytest.mark.slow
def test_molt_serve_passes_either_api_through_to_another_molt_serve(tmp_path: Path) -> None:
    """The command line: ``molt serve --backend anthropic --upstream-url …`` and ``molt serve --backend
    openai --passthrough responses --upstream-url …``, each in front of a third ``molt serve``."""
    import os
    import signal
    import subprocess
    import sys

    from molt.gateway.loopback import free_port

    up, a, r = free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{up}/v1"
    serve_args = {up: ["--backend", "stub", "--no-record"],
                  a: ["--backend", "anthropic", "--upstream-url", upstream, "--model", "stub", "--no-governance"],
                  r: ["--backend", "openai", "--passthrough", "responses", "--upstream-url", upstream,
                      "--model", "stub", "--no-governance"]}
    procs = {port: subprocess.Popen([sys.executable, "-m", "molt.cli", "serve", "--port", str(port), "--log-level",
                                     "warning", *extra],
                                    env={**os.environ, "MOLT_HOME": str(tmp_path / str(port)),
                                         "PYTHONWARNINGS": "ignore"},
                                    stderr=subprocess.PIPE, start_new_session=True)
             for port, extra in serve_args.items()}
    try:
        for port, proc in procs.items():
            wait_healthy(f"http://127.0.0.1:{port}", proc, timeout_s=90)
        client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{a}", api_key="unused", max_retries=0)
        ask = [{"role": "user", "content": "via cli"}]
        with client.messages.stream(model="stub", max_tokens=50, messages=ask) as s:
            assert s.get_final_message().content[0].text == "echo: via cli"
        raw = openai.OpenAI(base_url=f"http://127.0.0.1:{r}/v1", api_key="unused", max_retries=0) \
            .responses.with_raw_response.create(model="stub", input="via cli too")
        assert raw.parse().output_text == "echo: via cli too"
    finally:
        for proc in procs.values():
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs.values():
            proc.communicate(timeout=30)
    for port, name in ((a, "messages"), (r, "responses")):
        store = Store.open(tmp_path / str(port) / "store", auto_compact=False)
        try:
            [tid] = store.trajectory_ids()
            [ev] = store.trajectory(tid).events
            assert ev.name == name and (ev.action.text or "").startswith("echo: via cli")
        finally:
            store.close()


@pytest.mark.slow
def test_claude_code_and_codex_run_through_passthrough_fronts(tmp_path: Path) -> None:
    """The coding-agent CLIs, unmodified, through a gateway that passes their API through to another
    ``molt serve``: Claude Code (``--backend anthropic``) and Codex CLI (``--passthrough responses``)
    each land one verified trajectory with the tool they ran, at the front and at the upstream."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from molt.gateway.loopback import free_port

    from .test_cli_agents import SECRET, _cli

    claude, codex = _cli("claude"), _cli("codex")
    up, a, r = free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{up}/v1"
    serve_args = {up: ["--backend", "stub"],
                  a: ["--backend", "anthropic", "--upstream-url", upstream, "--model", "stub"],
                  r: ["--backend", "openai", "--passthrough", "responses", "--upstream-url", upstream,
                      "--model", "stub"]}
    procs = [subprocess.Popen([sys.executable, "-m", "molt.cli", "serve", "--port", str(port), "--log-level", "warning",
                               "--no-governance", *extra], env={**os.environ, "MOLT_HOME": str(tmp_path / str(port))},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
             for port, extra in serve_args.items()]
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text(SECRET + "\n")
    (tmp_path / "codex").mkdir()
    (tmp_path / "codex" / "config.toml").write_text(
        f'model = "stub"\nmodel_provider = "molt"\ncheck_for_update_on_startup = false\n\n'
        f'[analytics]\nenabled = false\n\n'
        f'[model_providers.molt]\nname = "Molt"\nbase_url = "http://127.0.0.1:{r}/v1"\nenv_key = "MOLT_API_KEY"\n'
        f'wire_api = "responses"\n')
    runs = [([str(claude), "-p", f'Read the notes. [[stub:call=Read {{"file_path": "{work / "notes.txt"}"}}]]',
              "--output-format", "json"],
             {"HOME": str(tmp_path / "home"), "CLAUDE_CONFIG_DIR": str(tmp_path / ".claude"),
              "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{a}", "ANTHROPIC_API_KEY": "sk-any", "ANTHROPIC_MODEL": "stub",
              "ANTHROPIC_DEFAULT_HAIKU_MODEL": "stub", "ANTHROPIC_SMALL_FAST_MODEL": "stub",
              "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
              "DISABLE_AUTOUPDATER": "1"}),
            ([str(codex), "exec", "--skip-git-repo-check",
              'Read the notes. [[stub:call=exec_command {"cmd": "cat notes.txt"}]]'],
             {"HOME": str(tmp_path), "CODEX_HOME": str(tmp_path / "codex"), "MOLT_API_KEY": "sk-any"})]
    try:
        for port, proc in zip(serve_args, procs, strict=True):
            wait_healthy(f"http://127.0.0.1:{port}", proc, timeout_s=90)
        for cmd, env in runs:
            out = subprocess.run(cmd, cwd=work, env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True,
                                 timeout=180, stdin=subprocess.DEVNULL)
            assert out.returncode == 0 and SECRET in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
        time.sleep(2)  # each gateway's capture process records a moment after the answer
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            p.wait(timeout=30)
    seen: dict[int, list[tuple[str, str]]] = {}
    for port in serve_args:
        store = Store.open(tmp_path / str(port) / "store", auto_compact=False)
        try:
            for tid in store.trajectory_ids():
                assert store.verify(tid).ok
                seen.setdefault(port, []).append(tuple(e.name for e in store.trajectory(tid).events))  # type: ignore[arg-type]
        finally:
            store.close()
    assert seen[a] == [("messages", "Read", "messages")]
    assert seen[r] == [("responses", "exec_command", "responses")]
    assert sorted(seen[up]) == sorted([*seen[a], *seen[r]])  # each arrived upstream in its own API


def test_a_previous_response_the_upstream_never_saw_goes_as_its_conversation() -> None:
    """A stored response served by the chat path (no upstream id: routing moved the conversation to a
    passthrough backend) is sent upstream as its conversation, in input items, before the new input."""
    from molt.gateway.routes.responses import ResponseStore, parse_responses_request, passthrough_body

    store = ResponseStore()
    store.put("acme", "resp_1", None, [
        {"role": "user", "content": "Paris"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]}])
    store.put("acme", "resp_2", None, [{"role": "user", "content": "hi"}], upstream_id="resp_up_2")
    body = {"model": "stub", "previous_response_id": "resp_1", "tools": [R_TOOL],
            "input": [{"type": "function_call_output", "call_id": "c1", "output": "21 C"}]}
    rr = parse_responses_request(body, store, "acme", passthrough=True)
    out = passthrough_body(body, rr, rr.chat, None)
    assert "previous_response_id" not in out and out["input"] == [
        {"role": "user", "content": "Paris"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "21 C"}]
    kept = {**body, "previous_response_id": "resp_2", "input": "more"}
    rr = parse_responses_request(kept, store, "acme", passthrough=True)
    assert passthrough_body(kept, rr, rr.chat, None)["previous_response_id"] == "resp_up_2"
