"""``molt serve``: a real server process over the stub backend; the open-gateway warning."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import openai
import pytest

from molt.gateway.cli import is_loopback
from molt.gateway.loopback import free_port, wait_healthy


@pytest.mark.slow
def test_molt_serve_stub_records_into_the_store(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "MOLT_HOME": str(tmp_path), "PYTHONWARNINGS": "ignore"}
    # --no-governance: the answer is checked value by value (the redactor reads "echo" as a name); the
    # governed default is test_governance_default.py's
    proc = subprocess.Popen([sys.executable, "-m", "molt.cli", "serve", "--backend", "stub", "--port", str(port),
                             "--log-level", "warning", "--no-governance"], env=env, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, timeout_s=60)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(model="stub",
                                                               messages=[{"role": "user", "content": "via cli"}])
        assert raw.parse().choices[0].message.content == "echo: via cli"
        tid = raw.headers["x-molt-trajectory"]
        # An idle keep-alive connection outlives a client's own expiry (httpx: 5 s): with uvicorn's
        # default the server closed it at 5 s, racing a client that reused it just before.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            req = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
            sock.sendall(req)
            first = _response(sock)
            time.sleep(6)
            sock.sendall(req)
            second = _response(sock)
        assert first.startswith(b"HTTP/1.1 200") and second.startswith(b"HTTP/1.1 200"), (first, second)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert b"molt gateway: stub backend" in err
    from molt.store import Store

    store = Store.open(tmp_path / "store", auto_compact=False)
    try:
        [ev] = store.trajectory(tid).events
        assert ev.action.text == "echo: via cli" and ev.metadata.tenant_id == "default"
    finally:
        store.close()


def _response(sock: socket.socket) -> bytes:
    """One HTTP/1.1 response read off ``sock`` (b"" if the server closed the connection)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def test_open_gateway_beyond_loopback_warns(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    import uvicorn

    import molt.cli

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append(kw))
    assert molt.cli.run(["serve", "--backend", "stub", "--host", "0.0.0.0", "--no-record"]) == 0
    assert "WITHOUT API keys" in capsys.readouterr().err and calls[0]["host"] == "0.0.0.0"
    calls.clear()
    assert molt.cli.run(["serve", "--backend", "stub", "--no-record"]) == 0
    assert "WITHOUT API keys" not in capsys.readouterr().err and calls[0]["host"] == "127.0.0.1"


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1") and is_loopback("127.5.0.1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1") and not is_loopback("example.com")


def test_make_backend_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    from molt.backends import LocalBackend, OpenAIBackend, StubBackend, VLLMBackend
    from molt.errors import RegistryError
    from molt.gateway.cli import make_backend

    assert isinstance(make_backend("stub"), StubBackend)
    assert isinstance(make_backend("local"), LocalBackend)
    up = make_backend("openai", upstream_url="http://127.0.0.1:9/v1", model="m")
    assert isinstance(up, OpenAIBackend) and up.model == "m"
    remote = make_backend("vllm", upstream_url="http://127.0.0.1:9/v1")
    assert isinstance(remote, VLLMBackend) and remote.server is None
    supervised = make_backend("vllm", max_model_len=512)
    assert isinstance(supervised, VLLMBackend) and supervised.server is not None
    assert supervised.server.max_model_len == 512
    supervised.server.python = Path("/opt/vllm-env/bin/python")  # command() needs no vLLM env then
    cmd = supervised.server.command()
    assert cmd[:3] == ["/opt/vllm-env/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert "--enable-lora" in cmd and cmd[cmd.index("--max-model-len") + 1] == "512"
    with pytest.raises(RegistryError, match="registered backends"):
        make_backend("tgi")

    import molt.cli

    assert molt.cli.run(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--backend" in out and "--governance" in out and "--capture-process" in out


def test_shutdown_closes_the_parts_before_waiting_for_the_threads_they_hold() -> None:
    """A plane cycle blocked in a training run (the weight loop's hook) ends when the loop is closed, so
    molt serve's shutdown closes the parts first and then joins the threads, well within its per-thread wait."""
    import threading
    import time

    from molt.serve import Stack

    class Loop:  # the weight loop: a request waits until the run ends or the loop is closed
        def __init__(self) -> None:
            self.closed = threading.Event()

        def wait_for_run(self) -> None:
            self.closed.wait(120)

        def close(self) -> None:
            self.closed.set()

    stack = Stack()
    loop = Loop()
    stack.parts["weights"] = loop
    stack.spawn("control-plane", loop.wait_for_run)
    t0 = time.monotonic()
    stack.shutdown(timeout_s=60)
    assert time.monotonic() - t0 < 10 and not any(t.is_alive() for t in stack.threads)
