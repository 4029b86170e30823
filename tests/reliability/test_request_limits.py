"""Issue 27 item 7: request limits. A huge console form is refused with 413 (not a 500, not read into
memory); a client that sends its request headers slowly is disconnected by the server.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_doc import KEYS
from starlette.testclient import TestClient


def test_a_50_mb_console_login_form_is_413(tmp_path: Path) -> None:
    from molt.console import create_console_app
    from molt.governance.access import KeyRing
    from molt.store import Store

    store = Store.open(tmp_path / "store", auto_compact=False)
    try:
        app = create_console_app(store, KeyRing.from_mapping(KEYS), base="")
        big = b"api_key=" + b"x" * (50 << 20)
        form = {"content-type": "application/x-www-form-urlencoded"}
        with TestClient(app) as c:
            r = c.post("/login", content=big, headers=form)
            assert r.status_code == 413, r.status_code
            # without a Content-Length (chunked), the body is cut off as it arrives
            r = c.post("/login", content=iter([big[i:i + (1 << 20)] for i in range(0, len(big), 1 << 20)]),
                       headers=form)
            assert r.status_code == 413, r.status_code
            r = c.post("/logout", content=big, headers=form)
            assert r.status_code == 413
            ok = c.post("/login", data={"api_key": "sk-acme-reader"}, follow_redirects=False)
            assert ok.status_code == 303  # a form of normal size still logs in
    finally:
        store.close()


@pytest.fixture
def slow_header_server() -> Iterator[tuple[str, int]]:
    """The gateway app under uvicorn with the header timeout ``molt serve`` uses, set to 1 s."""
    import uvicorn

    from molt.backends import StubBackend
    from molt.gateway import Gateway, GatewayConfig, create_app
    from molt.gateway.http import header_timeout_protocol

    app = create_app(Gateway([StubBackend()], config=GatewayConfig(health_interval_s=0)))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", http=header_timeout_protocol(1.0),
                            timeout_keep_alive=75)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield "127.0.0.1", port
    server.should_exit = True
    thread.join(10)


def _closed_by_peer(s: socket.socket) -> bool:
    try:
        return s.recv(1024) == b""
    except (BlockingIOError, TimeoutError):
        return False
    except OSError:  # reset
        return True


def test_slow_headers_are_cut_off_and_normal_requests_still_served(slow_header_server: tuple[str, int]) -> None:
    host, port = slow_header_server
    conns = []
    for _ in range(50):
        s = socket.create_connection((host, port), timeout=5)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        conns.append(s)
    idle = socket.create_connection((host, port), timeout=5)  # connects and never sends a byte
    start = time.monotonic()
    open_conns: list[Any] = list(conns)
    while open_conns and time.monotonic() - start < 6:
        for s in list(open_conns):
            try:
                s.sendall(b"X-Slow: 1\r\n")  # a header line every 0.25 s, never the blank line
            except OSError:
                open_conns.remove(s)
        time.sleep(0.25)
    elapsed = time.monotonic() - start
    for s in [*conns, idle]:
        s.settimeout(3)
        assert _closed_by_peer(s) or s in [c for c in conns if c not in open_conns]
        s.close()
    assert not open_conns and elapsed < 5, (len(open_conns), elapsed)  # closed after ~1 s, not held
    r = httpx.get(f"http://{host}:{port}/health", timeout=10)
    assert r.status_code == 200
    # a kept-alive connection's next request gets the header clock again, and fast clients are unaffected
    with httpx.Client(base_url=f"http://{host}:{port}", timeout=10) as c:
        for _ in range(3):
            assert c.get("/v1/models").status_code == 200
            time.sleep(1.2)  # idle between requests: the keep-alive timeout's business, not the header one's
