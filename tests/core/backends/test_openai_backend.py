"""The openai backend against a real OpenAI-compatible server (the stub server) on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from molt.backends import ChatRequest, CompletionRequest, Delta, OpenAIBackend, StreamEnd, stub_asgi_app
from molt.errors import BackendStreamError, BackendTimeout, BackendUnavailable, InvalidRequest
from molt.gateway.loopback import ServerThread, free_port


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with ServerThread(stub_asgi_app()) as srv:
        yield srv.url + "/v1"


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_chat_stream_complete_models_health(upstream: str) -> None:
    async def go() -> None:
        b = OpenAIBackend(base_url=upstream, model="stub", api_key="k")
        try:
            r = await b.chat(ChatRequest(model="stub", messages=[{"role": "user", "content": "up"}], logprobs=True))
            assert r.choices[0].text == "echo: up" and r.usage is not None and r.usage.completion_tokens == 8
            assert r.choices[0].token_ids is None  # an upstream does not expose token ids
            assert [lp.token for lp in r.choices[0].logprobs or []][:2] == ["e", "c"]
            req = ChatRequest(model="stub", messages=[{"role": "user", "content": "a b"}])
            items = [x async for x in b.stream_chat(req)]
            assert "".join(i.text or "" for i in items if isinstance(i, Delta)) == "echo: a b"
            assert isinstance(items[-1], StreamEnd) and items[-1].usage is not None
            c = await b.complete(CompletionRequest(model="stub", prompt="p"))
            assert c.choices[0].text == "echo: p"
            assert await b.models() == ["stub"] and await b.health()
        finally:
            await b.aclose()

    _run(go())


def test_upstream_errors_map_to_backend_errors(upstream: str) -> None:
    async def go() -> None:
        b = OpenAIBackend(base_url=upstream, model="stub", timeout_s=0.3)
        try:
            with pytest.raises(BackendTimeout):
                await b.chat(ChatRequest(model="stub", messages=[{"role": "user", "content": "[[stub:sleep=1]]"}]))
            with pytest.raises(BackendUnavailable):
                await b.chat(ChatRequest(model="stub", messages=[{"role": "user", "content": "[[stub:fail]]"}]))
            with pytest.raises(InvalidRequest):
                await b.chat(ChatRequest(model="stub", messages=[]))
            with pytest.raises(BackendStreamError):
                async for _ in b.stream_chat(ChatRequest(model="stub", messages=[
                        {"role": "user", "content": "[[stub:die_after=1]] a b c"}])):
                    pass
        finally:
            await b.aclose()
        down = OpenAIBackend(base_url=f"http://127.0.0.1:{free_port()}/v1")
        try:
            with pytest.raises(BackendUnavailable, match="unreachable"):
                await down.chat(ChatRequest(model="x", messages=[{"role": "user", "content": "x"}]))
            assert not await down.health()
        finally:
            await down.aclose()

    _run(go())
