"""The stub backend: deterministic answers with no model, for tests, demos and overhead benchmarks.

Without a script it behaves like a tiny agent-friendly model:

- tools offered and the last message is the user's → it calls the first tool (or the one
  ``tool_choice`` names), filling required string arguments with the user's text;
- the last message is a tool result → it answers ``"The tool returned: <result>"``;
- otherwise → ``"echo: <last user message>"``.

With ``script=[...]`` it plays the given replies in order (then repeats the last one). A reply is a
string, or ``{"text": …}``, or ``{"tool_calls": [{"name": …, "arguments": {…}}]}``.

It tokenizes bytes: prompt and completion token ids are the UTF-8 bytes of the ChatML prompt and of
the answer, with deterministic log-probabilities, so token capture can be tested end to end.

Directives in the last user message inject faults (tests of the gateway's error handling):
``[[stub:sleep=2.5]]`` waits before answering, ``[[stub:fail]]`` raises ``BackendUnavailable``,
``[[stub:die_after=3]]`` dies after 3 streamed chunks (a non-streamed call fails),
``[[stub:chunk_delay=0.2]]`` waits that long between streamed chunks. And one scripts a tool call whatever
the client appends to its turns (coding agents add reminders after tool results):
``[[stub:call=Read {"file_path": "/tmp/notes.txt"}]]`` calls that offered tool until a tool result
follows the message holding the directive, then answers ``"The tool returned: <result>"``.

Example::

    backend = StubBackend(script=[{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                                  "It is sunny in Paris."])
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, ClassVar

import orjson

from molt.backends.base import (
    BackendCapabilities,
    BaseBackend,
    ChatRequest,
    Choice,
    CompletionRequest,
    Delta,
    Result,
    StreamEnd,
    StreamItem,
    TokenCounts,
    TokenLogprob,
    ToolCallDelta,
    ToolCallOut,
)
from molt.backends.chat_format import render_chatml, template_messages, text_content
from molt.errors import BackendStreamError, BackendUnavailable, InvalidRequest, MoltError

__all__ = ["StubBackend", "serve_stub", "stub_asgi_app"]

_DIRECTIVE = re.compile(r"\[\[stub:([a-z_]+)(?:=([^\]]*))?\]\]")
_PIECE = re.compile(r"\S+\s*|\s+")
TOKENIZER = "bytes"


def _byte_logprob(b: int) -> float:
    return -((b * 7919) % 13 + 1) / 16.0


def _byte_token(b: int) -> str:
    return chr(b) if b < 128 else f"bytes:\\x{b:02x}"


# One shared (never mutated) entry per byte value: building a result costs a list of references.
_LOGPROB = [TokenLogprob(token=_byte_token(b), logprob=_byte_logprob(b), token_id=b) for b in range(256)]


def _logprobs(ids: list[int]) -> list[TokenLogprob]:
    return [_LOGPROB[b] for b in ids]


class StubBackend(BaseBackend):
    """Deterministic scripted or echo answers (see the module docstring)."""

    kind: ClassVar[str] = "stub"
    capabilities = BackendCapabilities(token_ids=True, logprobs=True, streaming=True, tools=True, lora=True)

    def __init__(self, name: str | None = None, *, model: str = "stub", script: list[Any] | None = None,
                 latency_s: float = 0.0):
        super().__init__(name, model=model)
        self.script = list(script or [])
        self.latency_s = latency_s
        self.adapters: dict[str, str] = {}
        self.calls = 0
        self.healthy = True

    # ------------------------------------------------------------------ the answer

    def _answer(self, req: ChatRequest) -> tuple[str | None, list[ToolCallOut] | None, str]:
        """(content, tool calls, the raw completion text the "model" produced)."""
        self.calls += 1
        if self.script:
            reply = self.script[min(self.calls - 1, len(self.script) - 1)]
            return self._scripted(reply)
        scripted = self._call_directive(req)
        if scripted is not None:
            return scripted
        last = req.messages[-1]
        role = last.get("role")
        if role == "tool":
            text = "The tool returned: " + text_content(last.get("content"))
            return text, None, text
        user_text = _DIRECTIVE.sub("", text_content(last.get("content"))).strip()
        if req.tools and req.tool_choice != "none" and role == "user":
            fn = req.tools[0]["function"]
            if isinstance(req.tool_choice, dict):
                wanted = req.tool_choice["function"]["name"]
                fn = next(t["function"] for t in req.tools if t["function"]["name"] == wanted)
            call = ToolCallOut(id=_call_id(fn["name"], user_text), name=fn["name"],
                               arguments=orjson.dumps(_fill_args(fn.get("parameters"), user_text)).decode())
            return None, [call], _calls_text([call])
        text = "echo: " + user_text
        return text, None, text

    def _call_directive(self, req: ChatRequest) -> tuple[str | None, list[ToolCallOut] | None, str] | None:
        """The ``[[stub:call=NAME {json args}]]`` directive of the latest message holding one: that tool
        call until a tool result follows the message, then the answer to the latest result (whatever
        messages a client appends after it)."""
        for i in range(len(req.messages) - 1, -1, -1):
            found = [m.group(2) for m in _DIRECTIVE.finditer(text_content(req.messages[i].get("content")))
                     if m.group(1) == "call" and m.group(2)]
            if found:
                break
        else:
            return None
        results = [m for m in req.messages[i + 1:] if m.get("role") == "tool"]
        if results:
            text = "The tool returned: " + text_content(results[-1].get("content"))
            return text, None, text
        name, _, args = found[-1].strip().partition(" ")
        if name not in {t["function"]["name"] for t in req.tools or ()}:
            return None
        call = ToolCallOut(id=_call_id(name, args), name=name, arguments=args.strip() or "{}")
        return None, [call], _calls_text([call])

    def _scripted(self, reply: Any) -> tuple[str | None, list[ToolCallOut] | None, str]:
        if isinstance(reply, str):
            return reply, None, reply
        if "tool_calls" in reply:
            calls = []
            for i, c in enumerate(reply["tool_calls"]):
                args = c.get("arguments", {})
                args_s = args if isinstance(args, str) else orjson.dumps(args).decode()
                calls.append(ToolCallOut(id=c.get("id") or _call_id(c["name"], f"{self.calls}:{i}"),
                                         name=c["name"], arguments=args_s))
            text = reply.get("text")
            return text, calls, (text or "") + _calls_text(calls)
        return reply.get("text", ""), None, reply.get("text", "")

    async def _directives(self, req_text: str) -> dict[str, str]:
        found = {m.group(1): m.group(2) or "" for m in _DIRECTIVE.finditer(req_text)}
        delay = self.latency_s + (float(found["sleep"]) if "sleep" in found else 0.0)
        if delay:
            await asyncio.sleep(delay)
        if "fail" in found or not self.healthy:
            raise BackendUnavailable(f"The stub backend {self.name!r} was told to fail.", backend=self.name)
        return found

    # ------------------------------------------------------------------ chat

    def _prepare(self, req: ChatRequest) -> tuple[list[int], list[Choice]]:
        prompt = render_chatml(template_messages(req.messages, req.tools))
        prompt_ids = list(prompt.encode())
        content, calls, raw = self._answer(req)
        finish = "tool_calls" if calls else "stop"
        if req.stop and content and not calls:
            cut = min((i for i in (content.find(s) for s in req.stop) if i >= 0), default=-1)
            if cut >= 0:
                content = raw = content[:cut]
        ids = list(raw.encode())
        if req.max_tokens is not None and len(ids) > req.max_tokens:
            ids = ids[:req.max_tokens]
            raw = bytes(ids).decode(errors="ignore")
            content, calls, finish = raw, None, "length"
        choices = [Choice(index=i, text=content, tool_calls=calls, finish_reason=finish, token_ids=ids,
                          logprobs=_logprobs(ids)) for i in range(req.n)]
        return prompt_ids, choices

    async def chat(self, request: ChatRequest) -> Result:
        """Answer at once (after any ``latency_s`` or ``sleep`` directive)."""
        found = await self._directives(text_content(request.messages[-1].get("content")))
        if "die_after" in found:
            raise BackendUnavailable(f"The stub backend {self.name!r} died.", backend=self.name)
        prompt_ids, choices = self._prepare(request)
        n_out = sum(len(c.token_ids or ()) for c in choices)
        return Result(choices=choices, model=request.model, prompt_ids=prompt_ids, tokenizer=TOKENIZER,
                      usage=TokenCounts(prompt_tokens=len(prompt_ids), completion_tokens=n_out))

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        """Answer word by word; tool calls come as one delta each."""
        found = await self._directives(text_content(request.messages[-1].get("content")))
        die_after = int(found["die_after"]) if found.get("die_after") else None
        chunk_delay = float(found["chunk_delay"]) if found.get("chunk_delay") else 0.0
        prompt_ids, choices = self._prepare(request)
        sent = 0
        for c in choices:
            pieces: list[Delta] = []
            if c.text:
                for m in _PIECE.finditer(c.text):
                    ids = list(m.group(0).encode())
                    pieces.append(Delta(index=c.index, text=m.group(0), token_ids=ids, logprobs=_logprobs(ids)))
            if c.tool_calls:
                ids = list(_calls_text(c.tool_calls).encode())
                calls = [ToolCallDelta(index=i, id=t.id, name=t.name, arguments=t.arguments)
                         for i, t in enumerate(c.tool_calls)]
                pieces.append(Delta(index=c.index, tool_calls=calls, token_ids=ids, logprobs=_logprobs(ids)))
            pieces.append(Delta(index=c.index, finish_reason=c.finish_reason))
            for p in pieces:
                if die_after is not None and sent >= die_after:
                    raise BackendStreamError(f"The stub backend {self.name!r} died mid-stream after "
                                             f"{sent} chunks.", backend=self.name)
                sent += 1
                yield p
                await asyncio.sleep(chunk_delay)
        n_out = sum(len(c.token_ids or ()) for c in choices)
        yield StreamEnd(model=request.model, prompt_ids=prompt_ids, tokenizer=TOKENIZER,
                        usage=TokenCounts(prompt_tokens=len(prompt_ids), completion_tokens=n_out))

    # ------------------------------------------------------------------ completions

    async def complete(self, request: CompletionRequest) -> Result:
        """Echo the prompt's last line."""
        prompt = request.prompt if isinstance(request.prompt, str) else bytes(
            b for b in request.prompt if b < 256).decode(errors="replace")
        await self._directives(prompt)
        prompt_ids = list(prompt.encode()) if isinstance(request.prompt, str) else list(request.prompt)
        text = "echo: " + prompt.strip().splitlines()[-1] if prompt.strip() else "echo:"
        ids = list(text.encode())
        finish = "stop"
        if request.max_tokens is not None and len(ids) > request.max_tokens:
            ids, finish = ids[:request.max_tokens], "length"
            text = bytes(ids).decode(errors="ignore")
        choices = [Choice(index=i, text=text, finish_reason=finish, token_ids=ids, logprobs=_logprobs(ids))
                   for i in range(request.n)]
        return Result(choices=choices, model=request.model, prompt_ids=prompt_ids, tokenizer=TOKENIZER,
                      usage=TokenCounts(prompt_tokens=len(prompt_ids), completion_tokens=len(ids) * request.n))

    # ------------------------------------------------------------------ adapters, health

    async def models(self) -> list[str]:
        """The base model and the "loaded" adapters."""
        return [self.model, *self.adapters]

    async def health(self) -> bool:
        """Whatever ``healthy`` was set to (tests flip it)."""
        return self.healthy

    async def load_adapter(self, name: str, path: str) -> None:
        """Remember the adapter (the stub has no weights); it is then served as model ``name``."""
        self.adapters[name] = path


def _call_id(name: str, seed: str) -> str:
    return "call_" + hashlib.blake2b(f"{name}\x00{seed}".encode(), digest_size=12).hexdigest()


def _calls_text(calls: list[ToolCallOut]) -> str:
    return "".join(f'<tool_call>\n{{"name": "{c.name}", "arguments": {c.arguments}}}\n</tool_call>'
                   for c in calls)


def _fill_args(schema: Any, text: str) -> dict[str, Any]:
    if not isinstance(schema, dict):
        return {}
    props = schema.get("properties") or {}
    names = schema.get("required") or list(props)
    defaults = {"integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}
    out: dict[str, Any] = {}
    for name in names:
        prop = props.get(name) or {}
        if prop.get("enum"):
            out[name] = prop["enum"][0]
        else:
            out[name] = defaults.get(prop.get("type", "string"), text)
    return out


# ----------------------------------------------------------------------------------- stub server


def stub_asgi_app(backend: StubBackend | None = None) -> Callable[..., Awaitable[None]]:
    """A bare ASGI OpenAI-compatible server over a stub backend (no auth, no recording, no FastAPI).

    It is the upstream the benchmark measures the gateway (and LiteLLM) against, and the fake
    upstream of the ``openai`` backend's tests. Run it with ``uvicorn.run(stub_asgi_app(), …)``.
    """
    from molt.backends import openai_wire as wire

    stub = backend or StubBackend()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        path, method = scope["path"], scope["method"]
        if method == "GET":
            if path in ("/health", "/v1/health"):
                return await _json(send, 200, {"status": "ok"})
            if path == "/v1/models":
                return await _json(send, 200, {"object": "list", "data": [
                    {"id": m, "object": "model", "created": 0, "owned_by": "stub"} for m in await stub.models()]})
            return await _json(send, 404, _err("Not found.", "not_found"))
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        try:
            payload = orjson.loads(body)
            now = int(time.time())
            if path == "/v1/chat/completions":
                req, stream = wire.parse_chat_request(payload)
                if stream:
                    return await _sse(send, _chat_stream(stub, req, now))
                res = await stub.chat(req)
                return await _json(send, 200, wire.chat_response(res, id="chatcmpl-stub", created=now,
                                                                 model=req.model, logprobs=req.logprobs))
            if path == "/v1/completions":
                creq, stream = wire.parse_completion_request(payload)
                res = await stub.complete(creq)
                return await _json(send, 200, wire.completion_response(
                    res, id="cmpl-stub", created=now, model=creq.model, logprobs=creq.logprobs is not None))
            return await _json(send, 404, _err("Not found.", "not_found"))
        except orjson.JSONDecodeError:
            return await _json(send, 400, _err("The body is not valid JSON.", "invalid_request_error"))
        except InvalidRequest as exc:
            return await _json(send, 400, _err(exc.message, "invalid_request_error"))
        except MoltError as exc:
            return await _json(send, getattr(exc, "status", 500), _err(exc.message, "backend_error"))

    return app


def _err(message: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": code, "param": None, "code": code}}


async def _json(send: Any, status: int, obj: Any) -> None:
    body = orjson.dumps(obj)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _chat_stream(stub: StubBackend, req: ChatRequest, now: int) -> AsyncIterator[bytes]:
    from molt.backends import openai_wire as wire

    first: set[int] = set()
    async for item in stub.stream_chat(req):
        if isinstance(item, StreamEnd):
            yield orjson.dumps(wire.chat_chunk(id="chatcmpl-stub", created=now, model=req.model, usage=item.usage))
        else:
            is_first = item.index not in first
            first.add(item.index)
            yield orjson.dumps(wire.chat_chunk(id="chatcmpl-stub", created=now, model=req.model, delta=item,
                                               first=is_first, logprobs=req.logprobs))


async def _sse(send: Any, chunks: AsyncIterator[bytes]) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
    try:
        async for c in chunks:
            await send({"type": "http.response.body", "body": b"data: " + c + b"\n\n", "more_body": True})
    except MoltError as exc:
        err = orjson.dumps(_err(exc.message, "backend_error"))
        await send({"type": "http.response.body", "body": b"data: " + err + b"\n\n", "more_body": True})
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


def serve_stub(host: str = "127.0.0.1", port: int = 8001, *, log_level: str = "warning") -> None:
    """Serve :func:`stub_asgi_app` with uvicorn (``python -m molt.backends.stub --port 8001``)."""
    import uvicorn

    uvicorn.run(stub_asgi_app(), host=host, port=port, log_level=log_level, access_log=False)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="A stub OpenAI-compatible server (no model).")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8001)
    args = ap.parse_args()
    serve_stub(args.host, args.port)
