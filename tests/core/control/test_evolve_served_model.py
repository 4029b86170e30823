"""`molt evolve run` beside `molt serve --backend stub` replays with the model the gateway serves — the
stub — and says so before any model loads, naming the model; with no `molt serve` recorded it says which
model it falls back to and why."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest

pytestmark = pytest.mark.slow


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _molt(args: list[str], env: dict[str, str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "molt.cli", *args], env=env, capture_output=True, text=True,
                          timeout=300, **kw)  # type: ignore[call-overload]


def test_evolve_run_replays_with_the_served_stub(tmp_path: Path) -> None:
    env = {**os.environ, "MOLT_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    env.pop("MOLT_KEYS", None)
    port = _port()
    serve = subprocess.Popen([sys.executable, "-m", "molt.cli", "serve", "--backend", "stub", "--port", str(port),
                              "--evolve-every", "0", "--no-console"], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        status = tmp_path / "status"
        while True:
            files = list(status.glob("molt-serve-*.json")) if status.is_dir() else []
            if files and "backend.kind" in (orjson.loads(files[0].read_bytes()).get("state") or {}):
                break
            assert serve.poll() is None, serve.stderr.read() if serve.stderr else ""
            assert time.monotonic() < deadline, "molt serve did not write its status file"
            time.sleep(0.3)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            for i in range(3):
                r = c.post("/v1/chat/completions", headers={"x-molt-agent": "helpdesk"},
                           json={"model": "stub", "messages": [{"role": "user", "content": f"hello {i}"}]})
                assert r.status_code == 200, r.text
        deadline = time.monotonic() + 60
        while True:
            got = _molt(["evolve", "run", "--agent", "helpdesk"], env)
            if got.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(1)  # the capture child delivers the traffic to the store in the background
        assert got.returncode == 0, got.stderr
        first = got.stderr.strip().splitlines()[0]
        assert first.startswith("replay model: stub on the stub backend") and "molt serve" in first, got.stderr
        assert "running" in first and "SmolLM2" not in got.stderr and "local" not in first
        assert "default/helpdesk" in got.stdout
    finally:
        serve.terminate()
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()


def test_without_molt_serve_it_says_which_model_and_why(tmp_path: Path) -> None:
    env = {**os.environ, "MOLT_HOME": str(tmp_path)}
    (tmp_path / "store").mkdir()
    got = _molt(["evolve", "run", "--agent", "nobody", "--model", "not-a-model-dir"], env)
    line = got.stderr.strip().splitlines()[0]
    assert line.startswith("replay model: not-a-model-dir on the local backend — no `molt serve` has recorded")
