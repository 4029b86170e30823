"""RFC 9112 message framing of the hot-path HTTP/1.1 client (:mod:`molt.backends.http`) against a raw
TCP server that answers scripted bytes, and the backend errors a malformed answer becomes.

Every client call runs under a short ``asyncio.timeout`` while the faulty server keeps its socket open,
so a client that waited for bytes that never come fails the test instead of hanging it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from molt.backends import ChatRequest, OpenAIBackend
from molt.backends.http import MAX_HEAD_BYTES, HTTPPool, HTTPProtocolError
from molt.errors import BackendStreamError, BackendUnavailable

_CHAT = orjson.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}]})


class _Server:
    """Answers each request on a connection with the next scripted response. ``None`` reads the next
    request and closes without answering (a keep-alive connection gone stale); ``"close"`` closes at
    once. The socket stays open after the script ends, so a client waiting for more would hang."""

    def __init__(self, script: Callable[[int], list[bytes | str | None]]):
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answers = self.script(self.connections)
        try:
            for answer in answers:
                if answer == "close":
                    break
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                self.requests.append(head + await reader.readexactly(length))
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
            else:
                await asyncio.sleep(30)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def __aenter__(self) -> str:
        self._srv = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._srv.sockets[0].getsockname()[1]}/v1"

    async def __aexit__(self, *exc: Any) -> None:
        self._srv.close()


def _ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def _chunked(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def _run(script: Callable[[int], list[bytes | str | None]], client: Callable[[str], Any]) -> Any:
    async def go() -> Any:
        server = _Server(script)
        async with server as url:
            async with asyncio.timeout(5):
                return server, await client(url)
    return asyncio.run(go())


async def _two_posts(url: str) -> list[bytes]:
    pool = HTTPPool(url)
    try:
        return [(await pool.request("POST", "/x", b"{}")).body for _ in range(2)]
    finally:
        await pool.aclose()


def test_keep_alive_reuses_one_connection() -> None:
    server, bodies = _run(lambda n: [_ok(b"one"), _ok(b"two")], _two_posts)
    assert bodies == [b"one", b"two"] and server.connections == 1
    assert server.requests[0].startswith(b"POST /v1/x HTTP/1.1\r\n") and server.requests[0].endswith(b"\r\n\r\n{}")


def test_chunked_beats_content_length_and_the_connection_is_not_reused() -> None:
    """RFC 9112 §6.3 rule 3: Transfer-Encoding overrides Content-Length; such a message is a smuggling
    signature, so the connection is closed after it. Content-Length 3 would have read ``5\\r\\n``."""
    both = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(b"hello")
    server, bodies = _run(lambda n: [both, _ok(b"next")] if n == 1 else [_ok(b"fresh")], _two_posts)
    assert bodies == [b"hello", b"fresh"]
    assert server.connections == 2  # the second request did not ride the suspect connection


def test_chunked_body_with_extensions_and_trailers() -> None:
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n"
    server, bodies = _run(lambda n: [answer, answer], _two_posts)
    assert bodies == [b"abcde", b"abcde"] and server.connections == 1


def test_a_stale_keep_alive_connection_is_retried_once_on_a_fresh_one() -> None:
    server, bodies = _run(lambda n: [_ok(b"one"), None] if n == 1 else [_ok(b"two")], _two_posts)
    assert bodies == [b"one", b"two"] and server.connections == 2


def test_interim_answers_are_skipped() -> None:
    """1xx answers (100 Continue, 103 Early Hints) come before the final one and carry no body."""
    answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + _ok(b"one")
    server, bodies = _run(lambda n: [answer, _ok(b"two")], _two_posts)
    assert bodies == [b"one", b"two"] and server.connections == 1


def test_a_body_without_length_runs_to_the_connection_end_and_is_not_reused() -> None:
    server, bodies = _run(lambda n: [b"HTTP/1.1 200 OK\r\n\r\nto the end", "close"] if n == 1 else [_ok(b"two")],
                          _two_posts)
    assert bodies == [b"to the end", b"two"] and server.connections == 2


def test_bytes_after_the_answer_are_not_read_as_part_of_it() -> None:
    """A second answer to one request (response splitting) is not appended to the first, and the
    connection is not reused."""
    server, bodies = _run(lambda n: [_ok(b"one") + _ok(b"evil")] if n == 1 else [_ok(b"two")], _two_posts)
    assert bodies == [b"one", b"two"] and server.connections == 2


def test_connection_close_is_honoured() -> None:
    server, bodies = _run(lambda n: [_ok(b"one", b"Connection: close\r\n")] if n == 1 else [_ok(b"two")], _two_posts)
    assert bodies == [b"one", b"two"] and server.connections == 2


def test_a_large_stream_read_slowly_arrives_whole() -> None:
    """The connection stops reading while the caller is behind (flow control) and resumes as it reads."""
    piece = b"x" * 65536
    answer = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
              + b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for _ in range(64)) + b"0\r\n\r\n")

    async def read_slowly(url: str) -> int:
        pool = HTTPPool(url)
        try:
            async with pool.stream("POST", "/x", b"{}") as (status, _, pieces):
                assert status == 200
                total = 0
                async for p in pieces:
                    total += len(p)
                    await asyncio.sleep(0.001)
                return total
        finally:
            await pool.aclose()

    assert _run(lambda n: [answer], read_slowly)[1] == 64 * 65536


_BAD = {
    "bad chunk size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    "negative chunk size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n",
    "chunk longer than its size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\n",
    "truncated Content-Length body": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b",
    "truncated chunked body": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n64\r\nonly ten b",
    # bounded whether it arrives whole or piece by piece
    "oversize headers": b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (4 * MAX_HEAD_BYTES) + b"\r\nContent-Length: 0\r\n\r\n",
    "conflicting Content-Lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\nhello",
    "unknown transfer coding": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    "not HTTP": b"SMTP ready\r\n\r\n",
    "closed inside the head": b"HTTP/1.1 200 OK\r\nContent-Len",
}
# Truncations end the connection (that is what makes them truncations); the others leave it open.
_CLOSES = {"truncated Content-Length body", "truncated chunked body", "closed inside the head"}


@pytest.mark.parametrize("case", sorted(_BAD))
def test_malformed_answers_are_protocol_errors_not_hangs(case: str) -> None:
    def script(n: int) -> list[bytes | str | None]:
        return [_BAD[case], "close"] if case in _CLOSES else [_BAD[case]]

    async def one(url: str) -> None:
        pool = HTTPPool(url)
        try:
            await pool.request("POST", "/x", b"{}")
        finally:
            await pool.aclose()

    with pytest.raises(HTTPProtocolError, match=r"not valid HTTP/1\.1"):
        _run(script, one)


@pytest.mark.parametrize("case", ["bad chunk size", "truncated chunked body", "oversize headers"])
def test_malformed_answers_become_backend_errors(case: str) -> None:
    """What the gateway sees: a BackendUnavailable (or BackendStreamError mid-stream) naming the upstream."""
    def script(n: int) -> list[bytes | str | None]:
        return [_BAD[case], "close"] if case in _CLOSES else [_BAD[case]]

    async def chat(url: str) -> None:
        b = OpenAIBackend(base_url=url, model="m", timeout_s=30)
        try:
            await b.chat(ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}]))
        finally:
            await b.aclose()

    with pytest.raises(BackendUnavailable, match=r"not valid HTTP/1\.1"):
        _run(script, chat)

    stream_answer = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + b"%x\r\ndata: {}\n\n\r\n" % len(b"data: {}\n\n") + b"zz\r\n")

    async def stream(url: str) -> None:
        b = OpenAIBackend(base_url=url, model="m", timeout_s=30)
        try:
            async for _ in b.stream_chat(ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])):
                pass
        finally:
            await b.aclose()

    with pytest.raises(BackendStreamError, match=r"not valid HTTP/1\.1"):
        _run(lambda n: [stream_answer], stream)


def test_a_well_framed_answer_through_the_backend() -> None:
    chunked = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    half = len(_CHAT) // 2
    chunked += b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (half, _CHAT[:half], len(_CHAT) - half, _CHAT[half:])

    async def chat(url: str) -> str | None:
        b = OpenAIBackend(base_url=url, model="m")
        try:
            r = await b.chat(ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}]))
            return r.choices[0].text
        finally:
            await b.aclose()

    assert _run(lambda n: [chunked], chat)[1] == "hello"


def test_a_header_that_would_split_the_request_is_refused_before_sending() -> None:
    """A configured header value with a line break (an API key pasted with a newline) would inject a
    header; the pool refuses to write it, and nothing reaches the server."""
    async def one(url: str) -> None:
        pool = HTTPPool(url, {"authorization": "Bearer k\r\nX-Injected: 1"})
        try:
            await pool.request("POST", "/x", b"{}")
        finally:
            await pool.aclose()

    server = _Server(lambda n: [_ok(b"never")])

    async def go() -> None:
        async with server as url:
            async with asyncio.timeout(5):
                with pytest.raises(HTTPProtocolError, match="cannot be sent"):
                    await one(url)

    asyncio.run(go())
    assert server.requests == []
