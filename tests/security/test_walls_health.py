"""Issue 41, finding 4: ``/health`` tells the truth while capture drops records.

With the capture child's writes failing (a file-size limit, as ``ulimit -f`` sets), the gateway keeps
answering (fail open for the agent) — and now ``/health`` says ``degraded`` with the counts (HTTP 200;
503 under ``molt serve --strict-health``), ``/metrics`` counts the dropped records, and ``molt doctor``
shows the same state in the banner's words. On the previous code ``/health`` said ``ok``, ``dropped: 0``.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openapi_doc import KEYS
from relharness import free_port
from starlette.testclient import TestClient

from molt.backends import StubBackend
from molt.gateway import Gateway, GatewayConfig, create_app
from molt.gateway.capture_process import CaptureProcess
from molt.governance.access import KeyRing

LIMIT = 96 << 10  # bytes: a spool segment outgrows it after a few hundred calls
W = {"authorization": "Bearer sk-acme-writer"}
R = {"authorization": "Bearer sk-acme-reader"}


@contextlib.contextmanager
def _file_size_limit(limit: int) -> Iterator[None]:
    """RLIMIT_FSIZE for the processes started inside (they inherit it); this one's is restored after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def _chat(c: object, i: int) -> int:
    r = c.post("/v1/chat/completions", headers={**W, "x-molt-session": f"s{i % 20}"},  # type: ignore[attr-defined]
               json={"model": "stub", "messages": [{"role": "user", "content": f"request {i} " + "words " * 60}]})
    return int(r.status_code)


def _dropped(metrics: str) -> float:
    m = re.search(r"^molt_recorder_dropped_records (\S+)$", metrics, re.M)
    assert m, metrics
    return float(m.group(1))


def test_health_is_degraded_with_counts_while_the_capture_child_cannot_write(tmp_path: Path) -> None:
    with _file_size_limit(LIMIT):
        cap = CaptureProcess(tmp_path / "store", tmp_path / "spool", governance=None, fsync="never")
    gw = Gateway([StubBackend()], recorder=cap, keyring=KeyRing.from_mapping(KEYS),
                 config=GatewayConfig(health_interval_s=0))
    try:
        with TestClient(create_app(gw)) as c:
            assert c.get("/health", headers=R).json()["status"] == "ok"
            assert all(_chat(c, i) == 200 for i in range(300))  # the agent is served throughout
            cap.flush(timeout=30)
            r = c.get("/health", headers=R)
            body = r.json()
            assert r.status_code == 200 and body["status"] == "degraded", body  # 200: not --strict-health
            assert body["capture"]["dropped"] > 0 and body["recorder"]["dropped_write_failed"] > 0, body
            assert body["recorder"]["dropped"] == body["recorder"]["dropped_write_failed"]
            assert any("dropped" in why for why in body["capture"]["reasons"]), body
            metrics = c.get("/metrics", headers=R).text
            assert _dropped(metrics) == body["capture"]["dropped"]
            assert "molt_gateway_capture_degraded 1" in metrics
    finally:
        cap.close(timeout=30)


@pytest.mark.slow
def test_molt_serve_strict_health_and_doctor_agree_while_records_are_dropped(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    keys = home / "keys.toml"
    keys.write_text("\n".join(f'[[keys]]\nkey = "{k}"\ntenant = "{t}"\nrole = "{r}"\n' for k, (t, r) in KEYS.items()))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MOLT_HOME": str(home), "COLUMNS": "400"}
    limit = LIMIT

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    proc = subprocess.Popen([sys.executable, "-m", "molt.cli", "serve", "--backend", "stub", "--port", str(port),
                             "--keys", str(keys), "--strict-health", "--evolve-every", "0", "--no-console",
                             "--no-governance", "--log-level", "warning"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=limited, text=True)
    try:
        with httpx.Client(base_url=url, timeout=30) as c:
            deadline = time.monotonic() + 120
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if c.get("/health", headers=R).status_code == 200:
                        break
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-3000:]
                time.sleep(0.2)
            assert all(_chat(c, i) == 200 for i in range(300))
            deadline = time.monotonic() + 30
            while (r := c.get("/health", headers=R)).status_code != 503 and time.monotonic() < deadline:
                time.sleep(0.2)
            body = r.json()
            assert r.status_code == 503 and body["status"] == "degraded" and body["capture"]["dropped"] > 0, body
            assert _dropped(c.get("/metrics", headers=R).text) >= body["capture"]["dropped"]
            time.sleep(6)  # the status file is written every 5 s
            doctor = subprocess.run([sys.executable, "-m", "molt.cli", "doctor"], env=env,
                                    capture_output=True, text=True, timeout=120)
            assert "degraded: capture dropped records" in doctor.stdout, doctor.stdout[-3000:]
            assert "503 (--strict-health)" in doctor.stdout  # the banner's rule, as the banner printed it
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert "503 (--strict-health)" in err  # the banner
