"""A small keep-alive HTTP/1.1 client for the hot path to upstream model servers.

The gateway's budget for its own overhead is about a millisecond, and a general-purpose client
(httpx) spends a large share of that on each request. Upstream calls need little:
POST a JSON body to one origin and read the answer whole or piece by piece (an SSE stream). So this
pool does only that, on asyncio streams (TLS included), reusing idle connections. The message framing
itself is :mod:`h11`'s (RFC 9112): ``Transfer-Encoding: chunked`` beats ``Content-Length`` (§6.3), a
response carrying both is read as chunked and its connection is not reused (it is a smuggling
signature), and malformed chunk sizes, bodies cut short and oversized heads are protocol errors.

A reused connection that the server closed while idle fails before any byte of the answer arrives;
the request is then retried once on a fresh connection (what browsers and urllib3 do). Timeouts are
the caller's (``asyncio.timeout``). Errors are ``OSError`` subclasses (:class:`HTTPProtocolError` for
an answer that is not valid HTTP/1.1); the backends map them onto Molt's backend errors.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11

__all__ = ["HTTPPool", "HTTPProtocolError", "Response", "iter_lines"]

#: A response head (status line and headers) still incomplete beyond this many bytes is refused. The
#: bound is h11's and applies between reads, so a head that arrives whole may be up to one read longer.
MAX_HEAD_BYTES = 64 * 1024
_READ = 64 * 1024


class HTTPProtocolError(OSError):
    """The server's answer is not valid HTTP/1.1 (or the connection ended inside it)."""


@dataclass(slots=True)
class Response:
    """A complete answer."""

    status: int
    headers: dict[str, str]
    body: bytes


class _Conn:
    """One connection and its h11 state machine."""

    __slots__ = ("answered", "h11", "loop", "reader", "reusable", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.loop = asyncio.get_running_loop()
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.reusable = True  # False once the answer's framing makes the connection suspect
        self.answered = False  # whether any byte of an answer arrived on this connection

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # its event loop may be gone already
            self.writer.close()

    async def next_event(self) -> h11.Event:
        """The next h11 event of the answer, reading from the socket as needed."""
        h = self.h11
        while True:
            try:
                event = h.next_event()
            except h11.RemoteProtocolError as exc:
                raise HTTPProtocolError(f"The server's answer is not valid HTTP/1.1: {exc}.") from None
            if event is not h11.NEED_DATA:
                return event  # type: ignore[return-value]
            data = await self.reader.read(_READ)
            if data:
                self.answered = True
            try:
                h.receive_data(data)  # b"" tells h11 the server closed the connection
            except h11.RemoteProtocolError as exc:
                raise HTTPProtocolError(f"The server's answer is not valid HTTP/1.1: {exc}.") from None

    def finish(self) -> bool:
        """After the whole answer: ready the connection for the next request; whether it can take one."""
        h = self.h11
        if not self.reusable or h.our_state is not h11.DONE or h.their_state is not h11.DONE:
            return False
        h.start_next_cycle()
        self.answered = False
        return True


class HTTPPool:
    """Pooled keep-alive connections to the origin of ``base_url`` (``http`` or ``https``).

    Args:
        base_url: scheme, host, port and path prefix (``http://127.0.0.1:8001/v1``).
        headers: sent with every request (authorization, …).
        max_connections: open connections allowed at once (default 256); callers beyond wait.
    """

    def __init__(self, base_url: str, headers: dict[str, str] | None = None, *, max_connections: int = 256):
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"{base_url!r} is not an http(s) URL.")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.ssl: ssl.SSLContext | None = ssl.create_default_context() if u.scheme == "https" else None
        self.prefix = u.path.rstrip("/")
        host_header = self.host if u.port is None else f"{self.host}:{self.port}"
        self._headers: list[tuple[bytes, bytes]] = [
            (k.encode("latin-1"), v.encode("latin-1"))
            for k, v in (("Host", host_header), ("Accept", "*/*"), *(headers or {}).items())]
        self._idle: collections.deque[_Conn] = collections.deque()
        self._slots = asyncio.Semaphore(max_connections)
        self._closed = False

    # ------------------------------------------------------------------ connections

    async def _connect(self) -> _Conn:
        reader, writer = await asyncio.open_connection(self.host, self.port, ssl=self.ssl, limit=1 << 20)
        return _Conn(reader, writer)

    def _take_idle(self) -> _Conn | None:
        loop = asyncio.get_running_loop()
        while self._idle:
            c = self._idle.pop()
            # A connection opened on another event loop (a test's earlier asyncio.run) is unusable.
            if c.loop is loop and not c.reader.at_eof() and not c.writer.is_closing():
                return c
            c.close()
        return None

    def _release(self, c: _Conn, complete: bool) -> None:
        if complete and not self._closed and not c.writer.is_closing() and c.finish():
            self._idle.append(c)
        else:
            c.close()

    def _request_bytes(self, conn: _Conn, method: str, path: str, body: bytes | None,
                       content_type: str) -> bytes:
        headers = self._headers
        if body is not None:
            headers = [*headers, (b"Content-Type", content_type.encode("latin-1")),
                       (b"Content-Length", b"%d" % len(body))]
        h = conn.h11
        try:
            data = h.send(h11.Request(method=method.encode("latin-1"),
                                      target=f"{self.prefix}{path}".encode("latin-1"), headers=headers))
            if body:
                data += h.send(h11.Data(data=body))
            return data + h.send(h11.EndOfMessage())
        except h11.LocalProtocolError as exc:  # a header value with a line break, say (a bad API key)
            raise HTTPProtocolError(f"The request cannot be sent as HTTP/1.1: {exc}.") from None

    async def _send(self, method: str, path: str, body: bytes | None,
                    content_type: str) -> tuple[_Conn, int, dict[str, str]]:
        """Send the request and read the status and headers (retrying once on a stale connection)."""
        for attempt in range(2):
            conn = self._take_idle() if attempt == 0 else None
            reused = conn is not None
            if conn is None:
                conn = await self._connect()
            try:
                conn.writer.write(self._request_bytes(conn, method, path, body, content_type))
                status, headers = await _read_head(conn)
                return conn, status, headers
            except (OSError, RuntimeError, asyncio.IncompleteReadError):
                conn.close()
                # A stale keep-alive connection fails before the answer's first byte; anything
                # later (or on a fresh connection) is the server's fault and is not retried.
                if not reused or conn.answered:
                    raise
            except BaseException:
                conn.close()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------------ requests

    async def request(self, method: str, path: str, body: bytes | None = None, *,
                      content_type: str = "application/json") -> Response:
        """Send a request and read the whole answer."""
        async with self._slots:
            conn, status, headers = await self._send(method, path, body, content_type)
            try:
                data = b"".join([piece async for piece in _iter_body(conn)])
            except BaseException:
                conn.close()
                raise
            self._release(conn, True)
            return Response(status, headers, data)

    @asynccontextmanager
    async def stream(self, method: str, path: str, body: bytes | None = None, *,
                     content_type: str = "application/json") -> AsyncIterator[tuple[int, dict[str, str],
                                                                                    AsyncIterator[bytes]]]:
        """Send a request; yields ``(status, headers, body pieces)`` to read the answer as it comes.
        The connection is reused only if the body was read to its end."""
        async with self._slots:
            conn, status, headers = await self._send(method, path, body, content_type)
            state = {"done": False}

            async def pieces() -> AsyncIterator[bytes]:
                async for piece in _iter_body(conn):
                    yield piece
                state["done"] = True

            try:
                yield status, headers, pieces()
            finally:
                self._release(conn, state["done"])

    async def aclose(self) -> None:
        """Close idle connections (and refuse to keep new ones)."""
        self._closed = True
        while self._idle:
            self._idle.pop().close()


async def iter_lines(pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Split body pieces into lines (without the line ending)."""
    buf = b""
    async for piece in pieces:
        buf += piece
        while True:
            i = buf.find(b"\n")
            if i < 0:
                break
            line, buf = buf[:i], buf[i + 1:]
            yield line.rstrip(b"\r")
    if buf:
        yield buf


async def _read_head(conn: _Conn) -> tuple[int, dict[str, str]]:
    while True:
        event = await conn.next_event()
        if isinstance(event, h11.Response):
            break
        if isinstance(event, h11.ConnectionClosed):
            raise HTTPProtocolError("The server closed the connection before answering.")
        # h11.InformationalResponse: 1xx interim answers (100 Continue) are skipped.
    headers: dict[str, str] = {}
    for name, value in event.headers:
        key = name.decode("latin-1")
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    if "transfer-encoding" in headers and "content-length" in headers:
        conn.reusable = False  # RFC 9112 §6.3: chunked was read, the connection is not trusted again
    return event.status_code, headers


async def _iter_body(conn: _Conn) -> AsyncIterator[bytes]:
    """The answer's body pieces, framed by h11 (chunked, Content-Length or the connection's end)."""
    while True:
        event = await conn.next_event()
        if isinstance(event, h11.Data):
            if event.data:
                yield bytes(event.data)
        elif isinstance(event, h11.EndOfMessage):
            return
        else:  # pragma: no cover - h11 raises on a body cut short before any other event
            raise HTTPProtocolError(f"Unexpected {type(event).__name__} inside the server's answer.")
