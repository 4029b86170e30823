"""A small keep-alive HTTP/1.1 client for the hot path to upstream model servers.

The gateway's budget for its own overhead is about a millisecond, and a general-purpose client
(httpx) spends more than that per request on a busy two-core machine. Upstream calls need little:
POST a JSON body to one origin, read a ``Content-Length`` or chunked body, or read an SSE stream line
by line. So this pool does only that, on asyncio streams (TLS included), reusing idle connections.

A reused connection that the server closed while idle fails before any byte of the answer arrives;
the request is then retried once on a fresh connection (what browsers and urllib3 do). Timeouts are
the caller's (``asyncio.timeout``). Errors are ``OSError`` / ``asyncio.IncompleteReadError``
subclasses, or :class:`HTTPProtocolError`; the backends map them onto Molt's backend errors.
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

__all__ = ["HTTPPool", "HTTPProtocolError", "Response"]


class HTTPProtocolError(OSError):
    """The server's answer is not valid HTTP/1.1."""


@dataclass(slots=True)
class Response:
    """A complete answer."""

    status: int
    headers: dict[str, str]
    body: bytes


class _Conn:
    __slots__ = ("loop", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.loop = asyncio.get_running_loop()

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # its event loop may be gone already
            self.writer.close()


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
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._head = f"Host: {host_header}\r\nAccept: */*\r\n{extra}".encode("latin-1")
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

    def _release(self, c: _Conn, reusable: bool) -> None:
        if reusable and not self._closed and not c.writer.is_closing():
            self._idle.append(c)
        else:
            c.close()

    def _request_bytes(self, method: str, path: str, body: bytes | None, content_type: str) -> bytes:
        head = f"{method} {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1") + self._head
        if body is not None:
            head += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n".encode("latin-1")
        return head + b"\r\n" + (body or b"")

    async def _send(self, method: str, path: str, body: bytes | None,
                    content_type: str) -> tuple[_Conn, int, dict[str, str]]:
        """Send the request and read the status and headers (retrying once on a stale connection)."""
        data = self._request_bytes(method, path, body, content_type)
        for attempt in range(2):
            conn = self._take_idle() if attempt == 0 else None
            reused = conn is not None
            if conn is None:
                conn = await self._connect()
            try:
                conn.writer.write(data)
                status, headers = await _read_head(conn.reader)
                return conn, status, headers
            except (OSError, RuntimeError, asyncio.IncompleteReadError, HTTPProtocolError):
                conn.close()
                if not reused:
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
                data, reusable = await _read_body(conn.reader, headers, method)
            except BaseException:
                conn.close()
                raise
            self._release(conn, reusable)
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
                async for piece in _iter_body(conn.reader, headers):
                    yield piece
                state["done"] = True

            try:
                yield status, headers, pieces()
            finally:
                self._release(conn, state["done"] and headers.get("connection", "").lower() != "close")

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


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")  # one read for the status line and headers
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                raise HTTPProtocolError("The server closed the connection before answering.") from None
            raise HTTPProtocolError("The server closed the connection inside the headers.") from None
        except asyncio.LimitOverrunError:
            raise HTTPProtocolError("The server's response headers are too large.") from None
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise HTTPProtocolError(f"Not an HTTP status line: {lines[0][:80]!r}.")
        status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if status >= 200 or status == 101:
            return status, headers
        # 1xx interim answers (100 Continue) are skipped.


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str], method: str) -> tuple[bytes, bool]:
    keep = headers.get("connection", "").lower() != "close"
    if method == "HEAD":
        return b"", keep
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"])), keep
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return b"".join([p async for p in _chunks(reader)]), keep
    return await reader.read(), False  # delimited by the end of the connection


async def _iter_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> AsyncIterator[bytes]:
    if "content-length" in headers:
        left = int(headers["content-length"])
        while left > 0:
            piece = await reader.read(min(left, 65536))
            if not piece:
                raise asyncio.IncompleteReadError(b"", left)
            left -= len(piece)
            yield piece
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        async for piece in _chunks(reader):
            yield piece
    else:
        while True:
            piece = await reader.read(65536)
            if not piece:
                return
            yield piece


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while True:
        line = await reader.readline()
        if not line:
            raise asyncio.IncompleteReadError(b"", None)
        size = int(line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return
        yield await reader.readexactly(size)
        await reader.readexactly(2)
