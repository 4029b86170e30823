"""The HTTP server protocol ``molt serve`` runs under uvicorn: uvicorn's own, plus a header read timeout.

uvicorn closes a connection left idle between requests (``timeout_keep_alive``), but once a request
has begun it waits for the rest of its headers for as long as the client likes: a client that sends
a header byte every few seconds (slowloris) holds a connection, and its file descriptor and buffers,
for ever, and a few hundred such clients exhaust the server. :class:`HeaderTimeoutProtocol` closes a
connection whose request headers are not complete :data:`HEADER_TIMEOUT_S` seconds after the
connection opened or the request's first byte arrived. The body and the response are not limited
by it (a long streamed answer is fine).

Example::

    uvicorn.run(app, http=HeaderTimeoutProtocol)
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["HEADER_TIMEOUT_S", "HeaderTimeoutProtocol", "header_timeout_protocol"]

#: Seconds a client has to send a request's headers (nginx's ``client_header_timeout`` is 60 s; an
#: agent's SDK sends its headers in one write, well under a second).
HEADER_TIMEOUT_S = 10.0

try:  # uvicorn's fast parser when it is installed (it is, with uvicorn[standard])
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Base
except ImportError:  # pragma: no cover - depends on the environment
    _Base = None  # type: ignore[assignment,misc]


class _HeaderTimer:
    """Arms a timer per request head; closes the transport when it fires."""

    header_timeout_s: float = HEADER_TIMEOUT_S
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    _header_timer: asyncio.TimerHandle | None = None
    #: Connections closed because their headers came too slowly (all connections of this class).
    closed_slow = 0

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _too_slow(self) -> None:
        self._header_timer = None
        type(self).closed_slow += 1
        if not self.transport.is_closing():
            self.transport.close()


if _Base is not None:

    class HeaderTimeoutProtocol(_HeaderTimer, _Base):  # type: ignore[misc]
        """uvicorn's httptools protocol with a header read timeout (see the module docstring)."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()  # a connection that never sends a request is closed too

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

else:  # pragma: no cover - depends on the environment
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutProtocol(_HeaderTimer, H11Protocol):  # type: ignore[no-redef,misc]
        """uvicorn's h11 protocol with a header read timeout (see the module docstring)."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE:
                self._arm()
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm()


def header_timeout_protocol(seconds: float) -> type[Any]:
    """:class:`HeaderTimeoutProtocol` with another timeout (tests use a short one)."""
    if seconds <= 0:
        raise ValueError(f"The header timeout must be positive, got {seconds}.")
    return type("HeaderTimeoutProtocol", (HeaderTimeoutProtocol,), {"header_timeout_s": float(seconds)})
