"""Block non-loopback network access for the duration of a block, and record what was attempted."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["block_network", "is_loopback"]


def is_loopback(host: Any) -> bool:
    """True for ``localhost``, 127.0.0.0/8, ``::1`` and the unspecified address."""
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if host is None or host in ("", "localhost", "localhost.localdomain"):
        return True
    try:
        ip = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified


def _target_allowed(address: Any) -> bool:
    if isinstance(address, str | bytes):  # AF_UNIX path
        return True
    if isinstance(address, tuple) and address:
        return is_loopback(address[0])
    return True


@contextmanager
def block_network() -> Iterator[list[str]]:
    """Refuse every connection and name lookup that is not loopback; yields the list of attempts.

    Connections raise ``ConnectionRefusedError`` and lookups ``socket.gaierror``, as a machine without
    network would, so a framework that retries in the background keeps running; the test then asserts
    the list is empty.
    """
    attempts: list[str] = []
    orig_connect = socket.socket.connect
    orig_connect_ex = socket.socket.connect_ex
    orig_getaddrinfo = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> None:
        if not _target_allowed(address):
            attempts.append(f"connect {address!r}")
            raise ConnectionRefusedError(f"network blocked by the Molt conformance suite: {address!r}")
        return orig_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if not _target_allowed(address):
            attempts.append(f"connect_ex {address!r}")
            return 111  # ECONNREFUSED
        return orig_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_loopback(host):
            attempts.append(f"getaddrinfo {host!r}")
            raise socket.gaierror(socket.EAI_NONAME, "network blocked by the Molt conformance suite")
        return orig_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = getaddrinfo
    try:
        yield attempts
    finally:
        socket.socket.connect = orig_connect  # type: ignore[method-assign]
        socket.socket.connect_ex = orig_connect_ex  # type: ignore[method-assign]
        socket.getaddrinfo = orig_getaddrinfo
