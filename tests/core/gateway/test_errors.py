"""The bad-input matrix: every failure is an OpenAI-style error object with the right status, the
events already captured survive a backend crash, and the gateway stays up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

import httpx
import openai
import pytest

from molt.atdp import EventKind, OutcomeStatus
from molt.backends import OpenAIBackend, StubBackend
from molt.gateway import RoutingTable, VersionSpec
from molt.gateway.loopback import free_port, wait_healthy

from .conftest import WEATHER_TOOL, Served

W = {"authorization": "Bearer sk-acme-writer"}


def _error(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def _post(served: Served, body: Any = None, *, content: bytes | None = None, headers: dict[str, str] | None = None,
          path: str = "/v1/chat/completions") -> httpx.Response:
    h = {**W, **(headers or {})}
    if content is not None:
        return httpx.post(served.url + path, content=content, headers={**h, "content-type": "application/json"})
    return httpx.post(served.url + path, json=body, headers=h)


def _alive(served: Served) -> None:
    r = served.client().chat.completions.create(model="stub", messages=[{"role": "user", "content": "still up"}])
    assert r.choices[0].message.content == "echo: still up"


def test_malformed_json_and_wrong_shapes_are_400(served: Served) -> None:
    e = _error(_post(served, content=b'{"model": "stub", "messages": [}'), 400)
    assert e["type"] == "invalid_request_error" and "not valid JSON" in e["message"]
    _error(_post(served, content=b""), 400)
    assert _error(_post(served, [1, 2]), 400)["param"] == "body"
    assert _error(_post(served, {"model": "stub"}), 400)["param"] == "messages"
    assert _error(_post(served, {"model": "stub", "messages": [{"role": "robot", "content": "x"}]}), 400)[
        "param"] == "messages[0].role"
    msgs = [{"role": "user", "content": "x"}]
    assert _error(_post(served, {"model": "stub", "messages": msgs, "temperature": 5}), 400)["param"] == "temperature"
    assert _error(_post(served, {"model": "stub", "messages": msgs, "n": 0}), 400)["param"] == "n"
    assert _error(_post(served, {"model": "stub", "messages": msgs, "stream": "yes"}), 400)["param"] == "stream"
    assert _error(_post(served, {"model": "stub", "prompt": {"a": 1}}, path="/v1/completions"), 400)[
        "param"] == "prompt"
    _alive(served)


@pytest.mark.parametrize(("tools", "param"), [
    ([{"type": "function", "function": {"name": "has space", "parameters": {"type": "object"}}}],
     "tools[0].function.name"),
    ([{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
     "tools[0].function.parameters"),
    ([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {},
                                                                    "required": ["x"]}}}],
     "tools[0].function.parameters"),
    ([{"type": "retrieval"}], "tools[0]"),
    ([WEATHER_TOOL, WEATHER_TOOL], "tools[1].function.name"),
    ({"not": "a list"}, "tools"),
])
def test_invalid_tool_schemas_are_400(served: Served, tools: Any, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        served.client().chat.completions.create(model="stub", messages=[{"role": "user", "content": "x"}],
                                                tools=tools)
    assert info.value.status_code == 400 and info.value.param == param
    e = _error(_post(served, {"model": "stub", "messages": [{"role": "user", "content": "x"}], "tools": tools}), 400)
    assert e["param"] == param
    with pytest.raises(openai.BadRequestError):
        served.client().chat.completions.create(model="stub", messages=[{"role": "user", "content": "x"}],
                                                tools=[WEATHER_TOOL],
                                                tool_choice={"type": "function", "function": {"name": "nope"}})


def test_unknown_model_is_404(served: Served) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        served.client().chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
    assert info.value.code == "model_not_found" and "served models: stub" in info.value.message
    with pytest.raises(openai.NotFoundError):
        served.client().models.retrieve("gpt-9")
    with pytest.raises(openai.NotFoundError):
        served.client().completions.create(model="gpt-9", prompt="x")


def test_oversized_bodies_are_413(serve: Any) -> None:
    served = serve(max_body_bytes=4096)
    big = {"model": "stub", "messages": [{"role": "user", "content": "x" * 10_000}]}
    e = _error(_post(served, big), 413)
    assert e["code"] == "request_too_large" and "4,096" in e["message"]

    def chunks() -> Any:  # no Content-Length: the cap applies while reading
        yield b'{"model": "stub", "messages": [{"role": "user", "content": "'
        for _ in range(20):
            yield b"y" * 1000
        yield b'"}]}'

    r = httpx.post(served.url + "/v1/chat/completions", content=chunks(),
                   headers={**W, "content-type": "application/json"})
    _error(r, 413)
    with pytest.raises(openai.APIStatusError) as info:
        served.client().chat.completions.create(model="stub", messages=big["messages"])
    assert info.value.status_code == 413
    _alive(served)


def test_backend_timeout_is_504_and_recorded(serve: Any) -> None:
    served = serve(backend_timeout_s=0.3)
    client = served.client()
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.with_raw_response.create(
            model="stub", messages=[{"role": "user", "content": "[[stub:sleep=2]] slow"}],
            extra_headers={"X-Molt-Session": "slow"})
    assert info.value.status_code == 504 and info.value.code == "backend_timeout"
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "[[stub:sleep=2]]"}],
                                       stream=True)
    assert info.value.status_code == 504
    tid = served.gateway.sessions.session("acme", "slow").trajectory_id
    [ev] = served.events(tid)
    assert ev.outcome.status == OutcomeStatus.TIMEOUT and ev.outcome.error.type == "BackendTimeout"
    _alive(served)


def test_backend_dying_mid_stream_sends_an_error_chunk_and_keeps_earlier_events(served: Served) -> None:
    client = served.client()
    hdr = {"X-Molt-Session": "crashy"}
    ok = client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "first"}],
                                        extra_headers=hdr)
    assert ok.choices[0].message.content == "echo: first"
    stream = client.chat.completions.create(
        model="stub", messages=[{"role": "user", "content": "[[stub:die_after=2]] a b c d e"}], stream=True,
        extra_headers=hdr)
    got = []
    with pytest.raises(openai.APIError) as info:
        for chunk in stream:
            got.append(chunk.choices[0].delta.content)
    assert got == ["echo: ", "a "] and "died mid-stream" in str(info.value)
    tid = stream.response.headers["x-molt-trajectory"]
    events = served.events(tid)
    assert [e.outcome.status for e in events] == [OutcomeStatus.OK, OutcomeStatus.ERROR]
    assert events[1].action.text == "echo: a " and events[1].outcome.error.type == "BackendStreamError"
    assert served.store.verify(tid).ok
    _alive(served)
    m = httpx.get(served.url + "/metrics", headers={"authorization": "Bearer sk-acme-admin"}).text
    assert "molt_gateway_stream_errors_total 1" in m


def test_backend_down_is_502_then_recovers(served: Served) -> None:
    stub = served.gateway.backends["stub"]
    assert isinstance(stub, StubBackend)
    stub.healthy = False
    for _ in range(2):  # the first call finds out, the second is refused by the router
        with pytest.raises(openai.APIStatusError) as info:
            served.client().chat.completions.create(model="stub", messages=[{"role": "user", "content": "x"}])
        assert info.value.status_code == 502 and info.value.code == "backend_unavailable"
    h = httpx.get(served.url + "/health", headers=W)
    assert h.status_code == 503 and h.json()["status"] == "degraded"
    stub.healthy = True
    r = httpx.post(served.url + "/v1/molt/admin/health", headers={"authorization": "Bearer sk-acme-admin"})
    assert r.json() == {"backends": {"stub": True}}
    _alive(served)


def test_failover_to_a_healthy_backend(serve: Any) -> None:
    a, b = StubBackend("a"), StubBackend("b")
    table = RoutingTable.single("stub", VersionSpec(version="stub@base", backends=("a", "b")))
    served = serve([a, b], table)
    client = served.client()
    # Find a session that lands on "a", then take "a" down: the call fails over to "b".
    for i in range(50):
        raw = client.chat.completions.with_raw_response.create(
            model="stub", messages=[{"role": "user", "content": "x"}], extra_headers={"X-Molt-Session": f"s{i}"})
        events = served.events(raw.headers["x-molt-trajectory"])
        if events[-1].metadata.tags["backend"] == "a":
            break
    a.healthy = False
    raw = client.chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": "y"}], extra_headers={"X-Molt-Session": f"s{i}"})
    assert raw.parse().choices[0].message.content == "echo: y"
    events = served.events(raw.headers["x-molt-trajectory"])
    assert events[-1].metadata.tags["backend"] == "b"
    assert served.gateway.router.health() == {"a": False, "b": True}


def test_a_killed_upstream_mid_stream(serve: Any, tmp_path: Any) -> None:
    """A real upstream process (the stub server behind the openai backend) is SIGKILLed while it
    streams: the client gets an error chunk, the earlier call's events are kept, the gateway stays up."""
    port = free_port()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    code = f"from molt.backends.stub import serve_stub; serve_stub(port={port})"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, timeout_s=30)
        upstream = OpenAIBackend("up", base_url=f"http://127.0.0.1:{port}/v1", model="stub")
        fallback = StubBackend("fallback")
        table = RoutingTable(versions={"v": VersionSpec(version="v", backends=("up",)),
                                       "alive": VersionSpec(version="alive", backends=("fallback",))},
                             models={"stub": ({"weights": {"v": 1.0}},), "other": ({"weights": {"alive": 1.0}},)})
        served = serve([upstream, fallback], table)
        client = served.client()
        hdr = {"X-Molt-Session": "upstream-crash"}
        first = client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "before"}],
                                               extra_headers=hdr)
        assert first.choices[0].message.content == "echo: before"
        stream = client.chat.completions.create(
            model="stub", messages=[{"role": "user", "content": "[[stub:chunk_delay=0.3]] a b c d e f g"}],
            stream=True, extra_headers=hdr)
        got = []
        with pytest.raises(openai.APIError):
            for chunk in stream:
                got.append(chunk.choices[0].delta.content)
                if len(got) == 2:
                    os.killpg(proc.pid, signal.SIGKILL)
        assert got[:2] == ["echo: ", "[[stub:chunk_delay=0.3]] "] or len(got) >= 2
        tid = stream.response.headers["x-molt-trajectory"]
        events = served.events(tid)
        assert events[0].outcome.status == OutcomeStatus.OK and events[0].action.text == "echo: before"
        assert events[1].outcome.status == OutcomeStatus.ERROR and events[1].kind == EventKind.MODEL_CALL
        with pytest.raises(openai.APIStatusError) as info:  # the upstream is gone: 502
            client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "after"}])
        assert info.value.status_code == 502
        r = client.chat.completions.create(model="other", messages=[{"role": "user", "content": "after"}])
        assert r.choices[0].message.content == "echo: after"  # the gateway is still up
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_auth_errors(served: Served) -> None:
    body = {"model": "stub", "messages": [{"role": "user", "content": "x"}]}
    e = _error(httpx.post(served.url + "/v1/chat/completions", json=body), 401)
    assert e["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        served.client("sk-wrong").chat.completions.create(**body)
    with pytest.raises(openai.PermissionDeniedError):
        served.client("sk-acme-reader").chat.completions.create(**body)
    for path in ("/health", "/metrics", "/v1/models", "/v1/molt/admin/routes"):
        _error(httpx.get(served.url + path), 401)
    _error(httpx.get(served.url + "/v1/molt/admin/routes", headers=W), 403)
    _error(httpx.get(served.url + "/metrics", headers=W), 403)
    assert httpx.get(served.url + "/v1/models", headers={"x-api-key": "sk-acme-reader"}).status_code == 200


def test_unknown_paths_and_methods(served: Served) -> None:
    e = _error(httpx.get(served.url + "/v1/nothing", headers=W), 404)
    assert e["code"] == "not_found"
    assert _error(httpx.get(served.url + "/v1/chat/completions", headers=W), 405)["code"] == "method_not_allowed"


def test_a_path_without_v1_names_the_v1_path(served: Served) -> None:
    """A base URL given without /v1 (the commonest wiring mistake) gets a 404 that names the fix."""
    e = _error(_post(served, {"model": "stub", "messages": [{"role": "user", "content": "x"}]},
                     path="/chat/completions"), 404)
    assert "did you mean /v1/chat/completions" in e["message"].lower()
    e = _error(httpx.get(served.url + "/models", headers=W), 404)
    assert "/v1/models" in e["message"]
    e = _error(httpx.get(served.url + "/nowhere", headers=W), 404)  # no /v1 route by that name: no guess
    assert "did you mean" not in e["message"].lower()
