"""A small keep-alive HTTP/1.1 client for the hot path to upstream model servers.

The gateway's budget for its own overhead is about a millisecond, and a general-purpose client
(httpx) spends a large share of that on each request. Upstream calls need little: POST a JSON body
to one origin and read the answer whole or piece by piece (an SSE stream). So this pool does only
that, reusing idle connections (TLS included), each connection an :class:`asyncio.Protocol` that
feeds what arrives straight into the parser: no stream buffer between the socket and the parser.

The message framing is llhttp's (Node.js's HTTP/1.1 parser, compiled, through :mod:`httptools`, which
the gateway's server already uses): malformed chunk sizes, bodies cut short, duplicate or conflicting
``Content-Length`` s and bad status lines are protocol errors. What RFC 9112 leaves to the recipient is
decided here: ``Transfer-Encoding: chunked`` beats ``Content-Length`` (§6.3) and such a connection is
not reused (a smuggling signature); a transfer coding other than ``chunked`` is refused (this client
decodes no other); a response head larger than :data:`MAX_HEAD_BYTES` is refused; a body without
either header runs to the connection's end.

A reused connection that the server closed while idle fails before any byte of the answer arrives;
the request is then retried once on a fresh connection (what browsers and urllib3 do). Timeouts are
the caller's (``asyncio.timeout``). Errors are ``OSError`` subclasses (:class:`HTTPProtocolError` for
an answer that is not valid HTTP/1.1); the backends map them onto Molt's backend errors.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

__all__ = ["MAX_HEAD_BYTES", "HTTPPool", "HTTPProtocolError", "Response", "iter_lines"]

#: A response head (status line and headers) larger than this is refused.
MAX_HEAD_BYTES = 64 * 1024
#: A streamed answer's unread body past which the connection stops reading (TCP flow control takes
#: over), and the level below which it reads again.
_HIGH_WATER = 1 << 20
_LOW_WATER = 1 << 18
#: RFC 9110 §5.1 field names are tokens; §5.5 field values hold no control characters but HTAB.
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_BAD_TARGET = re.compile(rb"[\x00-\x20\x7f]")


class HTTPProtocolError(OSError):
    """The server's answer is not valid HTTP/1.1 (or the connection ended inside it)."""


class _SecondAnswer(Exception):
    """Bytes of another answer after the whole of this one (raised to stop the parser there)."""


def _invalid(why: str) -> HTTPProtocolError:
    return HTTPProtocolError(f"The server's answer is not valid HTTP/1.1: {why}.")


@dataclass(slots=True)
class Response:
    """A complete answer."""

    status: int
    headers: dict[str, str]
    body: bytes


class _Conn(asyncio.Protocol):
    """One connection: the parser's callbacks fill in the answer in flight, and the one task reading
    it waits on :meth:`_wait` until there is more (a head, body, the end, or an error)."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        # Chunked framing wins over a Content-Length beside it (RFC 9112 §6.3) and the connection is not
        # reused after it (see on_headers_complete); llhttp alone refuses such an answer, which is what
        # an httptools too old to relax that one check does.
        lenient = getattr(self.parser, "set_dangerous_leniencies", None)
        if lenient is not None:
            lenient(lenient_chunked_length=True)
        self.closed = False  # the transport is gone (or going)
        self.reusable = True  # False once anything makes the connection unfit for another request
        self.busy = False  # a request is in flight
        self.answered = False  # whether any byte of the current answer arrived
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False
        self._begin()

    def _begin(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head_bytes = 0  # bytes read while the head is incomplete (it may be buffered in the parser)
        self.head_size = 0  # the header lines' bytes
        self.head_done = False
        self.interim = False  # reading a 1xx answer, which a final one follows
        self.until_eof = False
        self.done = False
        self.pieces: collections.deque[bytes] = collections.deque()
        self.buffered = 0

    def start(self, data: bytes) -> None:
        """Send a request on this (idle) connection."""
        self._begin()
        self.busy = True
        self.answered = False
        assert self.transport is not None
        self.transport.write(data)

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None and not self.closed:
            self.closed = True
            with contextlib.suppress(RuntimeError):  # its event loop may be gone already
                self.transport.close()

    def usable(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether this idle connection can take another request (a connection opened on another
        event loop, a test's earlier ``asyncio.run``, cannot)."""
        return (self.loop is loop and self.reusable and not self.closed and self.transport is not None
                and not self.transport.is_closing())

    # ------------------------------------------------------------------ the transport's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.busy or self.error is not None:
            # bytes nobody asked for (or after a refused answer): the connection cannot be trusted
            self.close()
            return
        self.answered = True
        if not self.head_done:
            self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(_invalid("the server switched protocols"))
        except httptools.HttpParserError as exc:
            own = exc.__context__
            if isinstance(own, _SecondAnswer):
                self.close()  # the answer read is whole; the connection cannot be trusted with another request
            else:
                self._fail(own if isinstance(own, HTTPProtocolError) else _invalid(str(exc) or type(exc).__name__))
        else:
            if not self.head_done and self.head_bytes > MAX_HEAD_BYTES:
                self._fail(_invalid(f"its head is over {MAX_HEAD_BYTES} bytes"))
            elif self.buffered > _HIGH_WATER and not self.paused and self.transport is not None:
                self.paused = True
                self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        return None  # the transport closes; connection_lost ends the answer

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        if self.busy and not self.done and self.error is None:
            if self.head_done and self.until_eof:
                self.done = True  # a body delimited by the connection's end is complete
            elif not self.answered:
                self.error = HTTPProtocolError("The server closed the connection before answering.")
            else:
                self.error = _invalid("the connection ended inside the answer")
        self._wake()

    # ------------------------------------------------------------------ the parser's callbacks

    def on_message_begin(self) -> None:
        if self.done:
            raise _SecondAnswer

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_size += len(name) + len(value) + 4
        if self.head_size > MAX_HEAD_BYTES:
            raise _invalid(f"its head is over {MAX_HEAD_BYTES} bytes")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        if key == "transfer-encoding" and text.strip().lower() != "chunked":
            raise _invalid(f"transfer coding {text!r} (only chunked is read)")
        h = self.headers
        h[key] = f"{h[key]}, {text}" if key in h else text

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue, 103 Early Hints): the final one follows
            self.interim = True
            self.headers = {}
            return
        self.status = status
        self.head_done = True
        h = self.headers
        if "transfer-encoding" in h and "content-length" in h:
            self.reusable = False  # RFC 9112 §6.3: read as chunked, and the connection is not trusted again
        self.until_eof = ("transfer-encoding" not in h and "content-length" not in h
                          and status not in (204, 304))
        if self.until_eof:
            self.reusable = False

    def on_body(self, body: bytes) -> None:
        self.pieces.append(body)
        self.buffered += len(body)

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
            self.head_bytes = self.head_size = 0
            return
        self.done = True
        if not self.parser.should_keep_alive():
            self.reusable = False

    # ------------------------------------------------------------------ the reader's side

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        self.close()

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def _wait(self) -> None:
        w = self.waiter = self.loop.create_future()
        try:
            await w
        finally:
            self.waiter = None

    async def head(self) -> None:
        """Wait for the answer's status and headers."""
        while not self.head_done:
            if self.error is not None:
                raise self.error
            await self._wait()
        # an error found later in the same read (a bad chunk) surfaces when the body is read

    async def body(self) -> AsyncIterator[bytes]:
        """The answer's body pieces as they arrive."""
        pieces = self.pieces
        while True:
            while pieces:
                piece = pieces.popleft()
                self.buffered -= len(piece)
                if self.paused and self.buffered < _LOW_WATER and self.transport is not None:
                    self.paused = False
                    self.transport.resume_reading()
                yield piece
            if self.error is not None:
                raise self.error
            if self.done:
                return
            await self._wait()

    async def read_all(self) -> bytes:
        """The whole body (the common case: it arrived with the head, and nothing is awaited)."""
        while not self.done:
            if self.error is not None:
                raise self.error
            await self._wait()
        if self.error is not None:
            raise self.error
        data = b"".join(self.pieces)
        self.pieces.clear()
        return data

    def finish(self) -> bool:
        """After the whole answer: whether the connection can take another request."""
        self.busy = False
        return self.done and self.reusable and self.error is None and not self.closed


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
        head = b""
        #: Why the configured headers cannot be sent (raised by every request, before sending).
        self._unsendable: str | None = None
        for k, v in (("Host", host_header), ("Accept", "*/*"), *(headers or {}).items()):
            name, value = k.encode("latin-1"), v.encode("latin-1")
            if not _TOKEN.fullmatch(name):
                self._unsendable = f"the header name {k!r} is not a token"
            elif _BAD_VALUE.search(value):
                self._unsendable = f"the value of header {k!r} holds a control character (a line break?)"
            head += name + b": " + value.strip(b" \t") + b"\r\n"
        self._head = head
        self._idle: collections.deque[_Conn] = collections.deque()
        self._slots = asyncio.Semaphore(max_connections)
        self._closed = False

    # ------------------------------------------------------------------ connections

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Conn, self.host, self.port, ssl=self.ssl)
        return conn

    def _take_idle(self) -> _Conn | None:
        loop = asyncio.get_running_loop()
        while self._idle:
            c = self._idle.pop()
            if c.usable(loop):
                return c
            c.close()
        return None

    def _release(self, c: _Conn) -> None:
        if c.finish() and not self._closed:
            self._idle.append(c)
        else:
            c.close()

    def _request_bytes(self, method: str, path: str, body: bytes | None, content_type: str) -> bytes:
        if self._unsendable is not None:
            raise HTTPProtocolError(f"The request cannot be sent as HTTP/1.1: {self._unsendable}.")
        target = f"{self.prefix}{path}".encode("latin-1")
        ctype = content_type.encode("latin-1")
        if (not _TOKEN.fullmatch(method.encode("latin-1")) or _BAD_TARGET.search(target)
                or _BAD_VALUE.search(ctype)):
            raise HTTPProtocolError(f"The request cannot be sent as HTTP/1.1: {method} {target!r} ({content_type}).")
        data = b"%s %s HTTP/1.1\r\n%s" % (method.encode("latin-1"), target, self._head)
        if body is not None:
            return data + b"Content-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (ctype, len(body), body)
        return data + b"\r\n"

    async def _send(self, method: str, path: str, body: bytes | None, content_type: str) -> _Conn:
        """Send the request and read the status and headers (retrying once on a stale connection)."""
        data = self._request_bytes(method, path, body, content_type)
        for attempt in range(2):
            conn = self._take_idle() if attempt == 0 else None
            reused = conn is not None
            if conn is None:
                conn = await self._connect()
            try:
                conn.start(data)
                await conn.head()
                return conn
            except (OSError, RuntimeError):
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
            conn = await self._send(method, path, body, content_type)
            try:
                data = await conn.read_all()
            except BaseException:
                conn.close()
                raise
            self._release(conn)
            return Response(conn.status, conn.headers, data)

    @asynccontextmanager
    async def stream(self, method: str, path: str, body: bytes | None = None, *,
                     content_type: str = "application/json") -> AsyncIterator[tuple[int, dict[str, str],
                                                                                    AsyncIterator[bytes]]]:
        """Send a request; yields ``(status, headers, body pieces)`` to read the answer as it comes.
        The connection is reused only if the body was read to its end."""
        async with self._slots:
            conn = await self._send(method, path, body, content_type)
            try:
                yield conn.status, conn.headers, conn.body()
            finally:
                if conn.done and not conn.pieces:
                    self._release(conn)
                else:
                    conn.close()

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
