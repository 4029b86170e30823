"""``molt serve`` (molt.serve): the stack's wiring, its keys, and a clean SIGINT shutdown.

Troubleshooting: if the SIGINT test loses events, look at the order in ``serve_command``'s
``finally`` (stop background parts, then close the capture process, then the store); if it hangs,
a background thread is not watching ``Stack.stop``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from molt.gateway.loopback import free_port


def _serve_in_process(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> tuple[int, Any]:
    """Run ``molt serve`` with uvicorn.run replaced: returns (exit status, the app it would serve)."""
    import uvicorn

    import molt.cli

    apps: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: apps.append(app))
    rc = molt.cli.run(["serve", "--backend", "stub", "--evolve-every", "0", *args])
    return rc, apps[0] if apps else None


def test_fresh_home_gets_one_console_admin_key_printed_once(monkeypatch: pytest.MonkeyPatch, molt_home: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from starlette.testclient import TestClient

    rc, app = _serve_in_process(monkeypatch, ["--no-record"])
    assert rc == 0
    err = capsys.readouterr().err
    [key] = re.findall(r"console admin key \(shown once\): (\S+)", err)
    assert "/console" in err and "control plane" in err
    keyfile = molt_home / "console-keys.toml"
    assert key not in keyfile.read_text() and oct(keyfile.stat().st_mode & 0o777) == "0o600"
    client = TestClient(app)
    r = client.get("/console/trajectories", headers={"authorization": f"Bearer {key}"})
    assert r.status_code == 200 and 'id="tenant">default<' in r.text
    assert client.get("/console/trajectories", follow_redirects=False).status_code == 303
    # a second start keeps the key and does not print it again
    rc, _ = _serve_in_process(monkeypatch, ["--no-record"])
    assert rc == 0 and "shown once" not in capsys.readouterr().err


def test_tenant_keys_open_the_console_and_no_console_key_is_made(monkeypatch: pytest.MonkeyPatch, molt_home: Path,
                                                                 tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    keys = tmp_path / "keys.toml"
    keys.write_text('[[keys]]\nkey = "sk-t-reader"\ntenant = "acme"\nrole = "reader"\n')
    rc, app = _serve_in_process(monkeypatch, ["--no-record", "--keys", str(keys)])
    assert rc == 0 and not (molt_home / "console-keys.toml").exists()
    r = TestClient(app).get("/console/versions", headers={"authorization": "Bearer sk-t-reader"})
    assert r.status_code == 200 and 'id="tenant">acme<' in r.text


def test_console_rollback_and_other_processes_changes_reach_the_gateway(monkeypatch: pytest.MonkeyPatch,
                                                                         molt_home: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from starlette.testclient import TestClient

    import molt.serve
    from molt.control.versions import AgentConfig, ModelPart, VersionRegistry
    from molt.store import Store

    store = Store.open(molt_home / "store", auto_compact=False)
    reg = VersionRegistry(store)
    base = reg.ensure_base("default", "support", AgentConfig(model=ModelPart(base="stub")))
    v2 = reg.create("default", "support", base.parts.with_system_prompt("Answer in one line."),
                    parent=base.version_id, note="harness edit")
    reg.promote(v2.version_id, actor="test")
    store.close()
    monkeypatch.setattr(molt.serve, "VERSION_POLL_S", 0.05)
    seen: list[str] = []

    def scenario(app: Any, **kw: Any) -> None:  # runs while `molt serve` is up (in place of uvicorn.run)
        err = capsys.readouterr().err
        [key] = re.findall(r"console admin key \(shown once\): (\S+)", err)
        assert "live versions bound to the gateway (1 agents)" in err
        with TestClient(app) as client:
            def served_version() -> str:
                r = client.post("/v1/chat/completions", headers={"x-molt-agent": "support"},
                                json={"model": "stub", "messages": [{"role": "user", "content": "hi"}]})
                assert r.status_code == 200
                return str(r.headers["x-molt-policy-version"])

            seen.append(served_version())
            r = client.post("/console/versions/rollback", data={"agent_id": "support"},
                            headers={"authorization": f"Bearer {key}"})
            assert r.status_code == 200 and r.json()["live"]["version_id"] == base.version_id
            seen.append(served_version())  # the next call, without a restart
            # a promotion by another process (its own store handles) reaches new sessions too
            other = Store.open(molt_home / "store", auto_compact=False)
            try:
                VersionRegistry(other).promote(v2.version_id, actor="another process")
            finally:
                other.close()
            for _ in range(600):  # bounded wait for the version-sync thread
                if served_version() == v2.version_id:
                    break
                time.sleep(0.05)
            seen.append(served_version())

    import uvicorn

    import molt.cli

    monkeypatch.setattr(uvicorn, "run", scenario)
    assert molt.cli.run(["serve", "--backend", "stub", "--evolve-every", "0", "--no-record"]) == 0
    assert seen == [v2.version_id, base.version_id, v2.version_id]


def test_serve_help_keeps_the_gateway_options_and_adds_the_stack_ones(capsys: pytest.CaptureFixture[str]) -> None:
    import molt.cli

    assert molt.cli.run(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    for opt in ("--backend", "--governance", "--capture-process", "--keys", "--evolve-every", "--train", "--vllm",
                "--console"):
        assert opt in out, opt


def test_the_control_plane_runs_on_its_schedule_and_stops_with_the_server(monkeypatch: pytest.MonkeyPatch,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    import threading

    import molt.control.scheduler
    from molt.backends import StubBackend

    calls: list[dict[str, Any]] = []

    def fake_run_scheduled(store: Any, stop: threading.Event, every_s: float, *, plane: Any = None) -> None:
        calls.append({"store": store, "every_s": every_s, "plane": plane})
        stop.wait(60)
        calls[-1]["stopped"] = stop.is_set()

    monkeypatch.setattr(molt.control.scheduler, "run_scheduled", fake_run_scheduled)
    import uvicorn

    import molt.cli

    started = threading.Event()

    def fake_uvicorn_run(app: Any, **kw: Any) -> None:  # "serve" until the plane's thread is running
        for _ in range(600):
            if calls:
                break
            started.wait(0.1)

    served: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: (served.append(app), fake_uvicorn_run(app)))
    assert molt.cli.run(["serve", "--backend", "stub", "--no-record", "--evolve-every", "7"]) == 0
    [call] = calls
    plane = call["plane"]
    assert call["every_s"] == 7 and isinstance(plane.backend, StubBackend) and call["stopped"]
    assert plane.backend is not served[0].state.gateway.backends["stub"]  # its own, for its own event loop
    # one version registry for the plane and the console: a rollback in one is seen by the other's listeners
    [console] = [r.app for r in served[0].routes if getattr(r, "path", "") == "/console"]
    assert plane.registry is console.state.console.control("versions")
    assert "every 7 s" in capsys.readouterr().err


def test_train_and_vllm_are_wired_without_starting_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """--train attaches the weight loop to the control plane (its weight-update hook), with a trainer that
    loads nothing until a run, and an operator key of its own for loading adapters through the admin API."""
    import threading

    import molt.control.scheduler
    from molt.backends import VLLMBackend
    from molt.control.weights import WeightLoop
    from molt_trainer.requests import RequestTrainer

    planes: list[Any] = []

    def fake_run_scheduled(store: Any, stop: threading.Event, every_s: float, *, plane: Any = None) -> None:
        planes.append(plane)

    monkeypatch.setattr(molt.control.scheduler, "run_scheduled", fake_run_scheduled)
    keys = tmp_path / "keys.toml"
    keys.write_text('[[keys]]\nkey = "sk-t-admin"\ntenant = "acme"\nrole = "admin"\n'
                    '[[keys]]\nkey = "sk-t-op"\ntenant = "platform"\nrole = "operator"\n')
    rc, app = _serve_in_process(monkeypatch, ["--no-record", "--keys", str(keys), "--train", "--vllm",
                                              "--evolve-every", "3600"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "weight updates the plane decides" in err and "supervised at http://127.0.0.1:" in err
    for _ in range(600):
        if planes:
            break
        threading.Event().wait(0.1)
    [plane] = planes
    assert isinstance(plane.trainer, WeightLoop) and isinstance(plane.trainer.train, RequestTrainer)
    assert plane.trainer.train.status()["state"]["trainer.runs"] == 0 and plane.trainer.runs == []
    gw = app.state.gateway
    [backend] = gw.backends.values()
    assert isinstance(backend, VLLMBackend) and backend.server is not None
    # the loop loads adapters through the admin API with a key of its own, the platform operator's
    assert len(gw.keyring) == 3 and gw.keyring.tenants() == {"acme", "platform"}
    # its state in /metrics for the operator (runs, serving budget, pauses), not for a tenant's admin
    from starlette.testclient import TestClient

    client = TestClient(app)
    text = client.get("/metrics", headers={"authorization": "Bearer sk-t-op"}).text
    for gauge in ("molt_trainer_runs 0", "molt_trainer_slo_pauses 0", "molt_weights_published 0",
                  "molt_weights_failed_runs 0"):
        assert gauge in text, gauge
    assert "molt_trainer_runs" not in client.get("/metrics", headers={"authorization": "Bearer sk-t-admin"}).text


def _start_serve(home: Path, *args: str) -> tuple[subprocess.Popen[bytes], str, dict[str, str]]:
    """``molt serve`` in its own process group; returns once it answers ``/health``."""
    port = free_port()
    env = {**os.environ, "MOLT_HOME": str(home), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen([sys.executable, "-m", "molt.cli", "serve", "--backend", "stub", "--port", str(port),
                             "--evolve-every", "0", "--log-level", "warning", *args], env=env,
                            stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(url + "/health", headers={"authorization": "Bearer sk-e2e-acme-admin"}).status_code == 200:
                return proc, url, env
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("molt serve did not answer /health: " + proc.communicate()[1].decode())
        time.sleep(0.2)


@pytest.mark.slow
def test_molt_serve_end_to_end_governed_capture_in_the_browser(tmp_path: Path, browser: Any) -> None:
    """A real `molt serve` process: a governed call of tenant acme shows its redaction in acme's
    console and is a 404 for globex's reader."""
    import yaml

    keys = tmp_path / "keys.toml"
    keys.write_text("".join(f'[[keys]]\nkey = "sk-e2e-{t}-{r}"\ntenant = "{t}"\nrole = "{r}"\n'
                            for t, r in (("acme", "admin"), ("acme", "agent_writer"), ("globex", "reader"))))
    policy = tmp_path / "governance.yaml"
    policy.write_text(yaml.safe_dump({"name": "e2e", "unknown_tenants": "quarantine",
                                      "tenants": {"acme": {"training": {"opt_in": True}}, "globex": {}}}))
    proc, url, _ = _start_serve(tmp_path / "home", "--keys", str(keys), "--governance", str(policy))
    try:
        r = httpx.post(url + "/v1/chat/completions", timeout=30,
                       headers={"authorization": "Bearer sk-e2e-acme-agent_writer", "x-molt-agent": "support"},
                       json={"model": "stub", "messages": [{"role": "user", "content": "I am jane.doe@example.com"}]})
        assert r.status_code == 200
        tid = r.headers["x-molt-trajectory"]
        ctx = browser.new_context()
        page = ctx.new_page()
        page.set_default_timeout(30_000)
        page.goto(url + "/")
        page.fill("#api_key", "sk-e2e-acme-admin")
        page.click("#login")
        page.wait_for_url("**/console/trajectories")
        for _ in range(100):  # recording happens after the response, in the capture process
            if page.locator(f"tr[data-trajectory='{tid}']").count():
                break
            page.wait_for_timeout(200)
            page.reload()
        page.click(f"tr[data-trajectory='{tid}'] a")
        page.wait_for_selector("mark.redacted")
        assert "<EMAIL_ADDRESS_1>" in page.locator("#tree").inner_text()
        assert "jane.doe@example.com" not in page.content()
        ctx.close()
        ctx = browser.new_context()
        page = ctx.new_page()
        page.goto(url + "/console/login")
        page.fill("#api_key", "sk-e2e-globex-reader")
        page.click("#login")
        page.wait_for_url("**/console/trajectories")
        assert tid not in page.content()
        resp = page.goto(f"{url}/console/trajectories/{tid}")
        assert resp is not None and resp.status == 404
        ctx.close()
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=120)
    assert proc.returncode == 0


@pytest.mark.slow
def test_sigint_flushes_every_acknowledged_event_and_the_store_verifies(tmp_path: Path) -> None:
    # raw capture: every answer is checked value by value (the redactor reads "echo" as a name)
    proc, url, env = _start_serve(tmp_path, "--no-governance")
    acked: dict[str, str] = {}
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            for i in range(30):
                r = client.post("/v1/chat/completions", json={"model": "stub", "messages": [
                    {"role": "user", "content": f"call {i}"}]})
                assert r.status_code == 200
                acked[r.headers["x-molt-trajectory"]] = f"echo: call {i}"
            rewarded = next(iter(acked))
            r = client.post("/v1/molt/rewards/trajectory", json={"trajectory_id": rewarded, "value": 1.0})
            assert r.status_code == 200
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends: the whole process group
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = err.decode()
    assert proc.returncode == 0, text
    assert "every recorded event is in the store" in text
    from molt.store import Store

    store = Store.open(tmp_path / "store", auto_compact=False)
    try:
        for tid, answer in acked.items():
            [ev] = store.trajectory(tid).events
            assert ev.action.text == answer
        assert [a.value for a in store.rewards(rewarded)] == [1.0]
    finally:
        store.close()
    verify = subprocess.run([sys.executable, "-m", "molt.cli", "verify"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"{len(acked)} of {len(acked)} trajectories verify" in verify.stdout
