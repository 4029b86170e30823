"""The stub backend, the OpenAI wire format, chat formatting, and the backend registry."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import pytest

from molt.backends import (
    BACKENDS,
    ChatRequest,
    CompletionRequest,
    Delta,
    StreamEnd,
    StubBackend,
    ToolCallOut,
    create_backend,
)
from molt.backends import openai_wire as wire
from molt.backends.chat_format import parse_tool_calls, template_messages
from molt.errors import BackendStreamError, BackendUnavailable, InvalidRequest, RegistryError

TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"order_id": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["order_id", "n"]}}}


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _collect(backend: StubBackend, req: ChatRequest) -> list[Any]:
    async def go() -> list[Any]:
        return [x async for x in backend.stream_chat(req)]

    return _run(go())


def test_registry_and_public_api() -> None:
    assert BACKENDS.names() == ["anthropic", "local", "openai", "stub", "vllm"]
    assert isinstance(create_backend("stub", "s1"), StubBackend)
    with pytest.raises(RegistryError, match="registered backends: anthropic, local, openai, stub, vllm"):
        create_backend("tgi")
    for module in ("molt.backends", "molt.harness", "molt.gateway"):
        mod = importlib.import_module(module)
        assert list(mod.__all__) == sorted(mod.__all__) and all(hasattr(mod, n) for n in mod.__all__)


def test_stub_echo_tools_and_token_bytes() -> None:
    stub = StubBackend()
    r = _run(stub.chat(ChatRequest(model="stub", messages=[{"role": "user", "content": "hi there"}], n=2)))
    assert [c.text for c in r.choices] == ["echo: hi there"] * 2
    assert bytes(r.choices[0].token_ids or []).decode() == "echo: hi there"
    assert r.usage is not None and r.usage.completion_tokens == 2 * len("echo: hi there")
    r = _run(stub.chat(ChatRequest(model="stub", messages=[{"role": "user", "content": "A-17"}], tools=[TOOL])))
    [call] = r.choices[0].tool_calls or []
    assert call.name == "lookup" and call.arguments == '{"order_id":"A-17","n":1}'
    assert r.choices[0].finish_reason == "tool_calls" and r.choices[0].text is None
    msgs = [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": "lookup", "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "shipped"}]
    r = _run(stub.chat(ChatRequest(model="stub", messages=msgs, tools=[TOOL])))
    assert r.choices[0].text == "The tool returned: shipped"


def test_stub_script_and_stream() -> None:
    stub = StubBackend(script=["first answer", {"tool_calls": [{"name": "lookup", "arguments": {"order_id": "1"}}]}])
    items = _collect(stub, ChatRequest(model="stub", messages=[{"role": "user", "content": "x"}]))
    deltas = [i for i in items if isinstance(i, Delta)]
    assert "".join(d.text or "" for d in deltas) == "first answer" and deltas[-1].finish_reason == "stop"
    assert isinstance(items[-1], StreamEnd) and items[-1].prompt_ids
    items = _collect(stub, ChatRequest(model="stub", messages=[{"role": "user", "content": "x"}]))
    calls = [t for i in items if isinstance(i, Delta) for t in i.tool_calls or []]
    assert [(c.name, c.arguments) for c in calls] == [("lookup", '{"order_id":"1"}')]


def test_stub_directives() -> None:
    stub = StubBackend()
    with pytest.raises(BackendUnavailable):
        _run(stub.chat(ChatRequest(model="stub", messages=[{"role": "user", "content": "[[stub:fail]]"}])))
    with pytest.raises(BackendStreamError):
        _collect(stub, ChatRequest(model="stub", messages=[{"role": "user", "content": "[[stub:die_after=1]] a b"}]))
    r = _run(stub.complete(CompletionRequest(model="stub", prompt="line one\nline two", max_tokens=7)))
    assert r.choices[0].text == "echo: l" and r.choices[0].finish_reason == "length"


def test_wire_roundtrip() -> None:
    stub = StubBackend()
    req, stream = wire.parse_chat_request({"model": "stub", "messages": [{"role": "user", "content": "a"}],
                                           "tools": [TOOL], "n": 2, "logprobs": True, "top_logprobs": 2,
                                           "presence_penalty": 0.1, "stream": True})
    assert stream and req.n == 2 and req.extra == {"presence_penalty": 0.1}
    result = _run(stub.chat(req))
    body = wire.chat_response(result, id="x", created=1, model="stub", logprobs=True)
    back = wire.parse_chat_response(body)
    assert [(c.text, c.finish_reason) for c in back.choices] == [(c.text, "tool_calls") for c in result.choices]
    assert back.choices[0].tool_calls == result.choices[0].tool_calls
    got = [lp.logprob for lp in back.choices[0].logprobs or []]
    assert got == [lp.logprob for lp in result.choices[0].logprobs or []]
    upstream = wire.chat_request_body(req, stream=True)
    assert upstream["presence_penalty"] == 0.1 and upstream["stream_options"] == {"include_usage": True}
    chunk = wire.chat_chunk(id="x", created=1, model="stub", delta=Delta(index=0, text="hi"), first=True)
    assert wire.parse_chat_chunk(chunk)[0].text == "hi"  # type: ignore[union-attr]
    with pytest.raises(InvalidRequest) as info:
        wire.parse_chat_request({"model": "stub", "messages": [], "tools": []})
    assert info.value.param == "messages"


@pytest.mark.parametrize(("text", "content", "calls"), [
    ('<tool_call>\n{"name": "lookup", "arguments": {"order_id": "7"}}\n</tool_call>', None,
     [("lookup", '{"order_id":"7"}')]),
    ('Let me check. <tool_call>{"name": "lookup", "arguments": {}}</tool_call>', "Let me check.", [("lookup", "{}")]),
    ('<tool_call>{"name": "lookup", "arguments": {"a": 1}}', None, [("lookup", '{"a":1}')]),  # cut at EOS
    ('{"name": "lookup", "arguments": {"a": 1}}', None, [("lookup", '{"a":1}')]),
    ('{"name": "other", "arguments": {}}', '{"name": "other", "arguments": {}}', None),
    ("<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", None),
    ("plain text", "plain text", None),
])
def test_parse_tool_calls(text: str, content: str | None, calls: list[tuple[str, str]] | None) -> None:
    got_content, got_calls = parse_tool_calls(text, {"lookup"})
    assert got_content == content
    assert ([(c.name, c.arguments) for c in got_calls] if got_calls else None) == calls
    assert all(isinstance(c, ToolCallOut) and c.id.startswith("call_") for c in got_calls or [])


def test_template_messages_render_tools_in_the_hermes_convention() -> None:
    msgs = [{"role": "system", "content": "Sys."}, {"role": "user", "content": [{"type": "text", "text": "q"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "lookup", "arguments": '{"order_id": "1"}'}}]},
            {"role": "tool", "tool_call_id": "c", "content": "ok"}]
    out = template_messages(msgs, [TOOL])
    assert out[0]["content"].startswith("Sys.\n\nYou may call") and '"name":"lookup"' in out[0]["content"]
    assert out[1] == {"role": "user", "content": "q"}
    assert out[2]["content"] == '<tool_call>\n{"name":"lookup","arguments":{"order_id":"1"}}\n</tool_call>'
    assert out[3]["content"] == "<tool_response>\nok\n</tool_response>"
    assert template_messages(msgs, [TOOL], native_tools=True)[0] == {"role": "system", "content": "Sys."}
