"""The weight loop of ``molt serve --backend local --train`` on SmolLM2-135M, as a user runs it: one
``molt serve`` process (gateway, governance, store, control plane, trainer), an agent that only knows the
base URL, a client that rewards its calls through the reward endpoint, and the agent's checker given to
``molt serve --verifier`` so that the plane can judge the context fixes it replays.

The agent's consumers read the leading number of each reply to a sum; SmolLM2 opens most replies with
prose, a capability gap no prompt closes. The test shows the serve path, not that training learns (that is
``molt demo --train``'s test and bench/bench_trainer.py): the plane replays the context fix, sees it fail,
asks the in-process trainer for a weight update on that cluster's governed traffic, the adapter is loaded
through the gateway's admin API and canaried under the agent's routing key (fresh sessions are served by
it, said by ``X-Molt-Policy-Version``), the plane then promotes or aborts it on the canary's rewarded
traffic, and afterwards the gateway serves whichever version is live. No request fails meanwhile.

The same loop runs with the trainer as a service of its own (the ``service`` case): ``molt serve`` without
``--train`` queues the plane's weight update in the store, ``molt-trainer serve --plane-requests`` in
another process trains it and canaries the adapter for the agent, and the plane judges it the same way.

    pytest tests/e2e/test_serve_train.py -s
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENT = "sums-desk"
TASK = "arithmetic"
MODEL = "smollm2-135m-instruct"
_NUMBER = re.compile(r"^\s*-?\d+")
#: The agent's checker, written to a module that ``molt serve --verifier`` imports (as a user's would be).
CHECKS = '''
import re

def opens_with_number(answer):
    assert re.match(r"^\\s*-?\\d+", str(answer or "")), "the reply does not open with a number"
'''
#: The agent's other requests, which work (its anchors: a weight update must not forget them).
OTHER = ["Say hello.", "Name a colour.", "Name a fruit.", "Say thank you.", "Name an animal.", "Say goodbye."]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(params=["in-process", "service"])
def served(request: pytest.FixtureRequest, tmp_path: Path, model_dir: Path, molt_serving: Any
           ) -> Iterator[tuple[str, Path, str]]:
    """``molt serve --train`` (``in-process``), or ``molt serve`` beside ``molt-trainer serve
    --plane-requests`` in a process of its own (``service``): the plane's weight updates are queued in the
    store and the service trains them, as users deploy a trainer on a host of its own."""
    mode = request.param
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    (home / "models" / model_dir.name).symlink_to(model_dir)
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "sums_checks.py").write_text(CHECKS)
    policy = tmp_path / "governance.json"  # the tenant opted in to training (nothing is trained on otherwise)
    policy.write_text(orjson.dumps({"name": "serve-train", "tenants": {
        "default": {"training": {"opt_in": True, "require_consent": False}}}}).decode())
    port = _free_port()
    env = {**os.environ, "MOLT_HOME": str(home), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "checks"), os.environ.get("PYTHONPATH", "")])}
    # A smaller plane than production's (it would wait for 12 failures and replay 24 of them): the test is
    # about the serve path, and every request costs seconds of SmolLM2 on a loaded CI core.
    settings = {"window": 80, "replay_sample": 6, "regression_sample": 4, "canary_weight": 0.5, "canary_min": 6,
                "min_weight_cluster": 8}
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "molt.cli", "serve", "--backend", "local", "--port", str(port),
         *(["--train"] if mode == "in-process" else []), "--governance", str(policy), "--evolve-every", "10",
         "--no-console", "--log-level", "info",
         "--backend-timeout", "600", "--verifier", f"{TASK}=sums_checks:opens_with_number",
         *[a for k, v in settings.items() for a in ("--plane-setting", f"{k}={v}")]],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    service: subprocess.Popen[bytes] | None = None
    try:  # a loaded 2-core CI box took over 300 s to start it once
        with molt_serving(proc, url, tmp_path / "serve.log", start_timeout_s=600):
            if mode == "service":
                service = subprocess.Popen(
                    [str(Path(sys.executable).with_name("molt-trainer")), "serve", "--plane-requests",
                     "--gateway", url, "--model", MODEL, "--store", str(home / "store"), "--governance", str(policy),
                     "--model-path", str(model_dir), "--out", str(home / "adapters"), "--canary-weight", "0.5",
                     "--threads", "1"],  # two shared cores: the server keeps one
                    cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            yield url, home, mode
            if service is not None:  # stopped first: it loads adapters through the gateway
                assert service.poll() is None, "the trainer service exited"
                service.terminate()
                service.wait(60)  # a run in flight ends at its next step
    finally:
        if service is not None and service.poll() is None:
            service.kill()
        log.close()
        text = (tmp_path / "serve.log").read_text(errors="replace")
        print("molt serve log (plane and trainer lines):",
              *[ln for ln in text.splitlines() if "evolve " in ln or "trainer" in ln or "Weight" in ln][-30:], sep="\n")


class Client:
    """The agent (one chat call per request) and its consumer, who checks the reply and rewards the call."""

    def __init__(self, url: str):
        self.http = httpx.Client(base_url=url, timeout=600)
        self.statuses: list[int] = []

    def ask(self, question: str, task: str | None) -> tuple[bool, str]:
        headers = {"X-Molt-Agent": AGENT, **({"X-Molt-Task": task} if task else {})}
        r = self.http.post("/v1/chat/completions", headers=headers, json={
            "model": MODEL, "messages": [{"role": "user", "content": question}], "temperature": 1.0,
            "max_tokens": 4})
        self.statuses.append(r.status_code)
        r.raise_for_status()
        answer = r.json()["choices"][0]["message"]["content"] or ""
        ok = bool(_NUMBER.match(answer)) if task == TASK else bool(answer.strip())
        self.http.post("/v1/molt/rewards/trajectory", json={
            "trajectory_id": r.headers["x-molt-trajectory"], "value": float(ok), "source": "verifier",
            "reason": None if ok else "the reply does not open with a number"}).raise_for_status()
        return ok, r.headers.get("x-molt-policy-version", "")

    def round(self, n_math: int, start: int) -> list[tuple[bool, str, str]]:
        out = []
        for i in range(start, start + n_math):
            ok, v = self.ask(f"What is {i % 9 + 1} + {(i * 5) % 9 + 1}?", TASK)
            out.append((ok, v, TASK))
            if i % 2 == 0:
                ok, v = self.ask(OTHER[(i // 2) % len(OTHER)], "chat")
                out.append((ok, v, "chat"))
        return out


def _decisions(home: Path) -> list[Any]:
    from molt.control.log import DecisionLog
    from molt.store import Store

    with Store.open(home / "store", auto_compact=False) as store:
        return list(reversed(DecisionLog(store).list("default", AGENT, limit=None)))


def _trained_canary(home: Path, mode: str) -> tuple[str | None, bool]:
    """The canary version the trainer made for the agent (``None`` until then), and whether the last
    attempt failed (so the test gives the plane more traffic)."""
    from molt.control.weight_queue import WeightQueue
    from molt.store import Store

    decisions = _decisions(home)
    if mode == "in-process":
        update = next((d for d in decisions if d.choice == "weight_update" and d.applied_version), None)
        return (update.applied_version if update else None,
                not any(d.choice == "weight_update" for d in decisions))
    with Store.open(home / "store", auto_compact=False) as store:
        requests = WeightQueue(store).requests("default", AGENT)
    done = next((r.detail for r in requests if r.status == "done"), None)
    return done, not requests or requests[-1].status == "failed"


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a few minutes on a quiet machine; generous for a loaded one
def test_serve_train_canaries_and_judges_a_trained_adapter_for_the_agent(served: tuple[str, Path, str]) -> None:
    from molt.control.versions import VersionRegistry
    from molt.control.weights import training_run
    from molt.store import Store

    url, home, mode = served
    client = Client(url)
    t0 = time.monotonic()
    before = client.round(12, 0)
    print(f"\nbefore: {sum(ok for ok, _, t in before if t == TASK)}/12 sums open with a number "
          f"({time.monotonic() - t0:.0f} s)")

    # The plane (every 10 s) waits one cycle for the failures' evidence, replays the context fix with the
    # verifier, and asks the trainer; the adapter becomes a canary of this agent.
    # Traffic goes on meanwhile (a few more sums a minute), as it would: a sampled window with too few
    # failures for the evidence bar gets more, after three plane cycles without a request (the evidence, or
    # the failed run's reason, is in the decision log; waiting longer only idles the machine).
    canary = None
    deadline = time.monotonic() + 1200
    more, last = 12, time.monotonic()
    while canary is None:
        assert time.monotonic() < deadline, [(d.choice, d.reason) for d in _decisions(home)]
        time.sleep(5)
        canary, stalled = _trained_canary(home, mode)
        if canary is None and time.monotonic() - last > 30 and stalled:  # a run that failed: its reason says why
            before += client.round(2, more)
            more, last = more + 2, time.monotonic()
    update = next(d for d in _decisions(home) if d.choice == "weight_update")
    print(f"weight update ({mode} trainer) at {time.monotonic() - t0:.0f} s: {update.reason}")
    with Store.open(home / "store", auto_compact=False) as store:
        v = VersionRegistry(store).get(canary)
        model = v.parts.model
        assert v.agent_id == AGENT and v.status == "canary", v
        previous = v.parent_id
        assert model.adapter and model.adapter_path and Path(model.adapter_path, "adapter_config.json").exists()
        run = training_run(store, model.adapter)  # the decision → run → adapter link
        assert run is not None and run["parts"]["watermark"]["agent"] == AGENT, run
        assert run["parts"]["watermark"]["task"] == TASK and run["parts"]["watermark"]["samples"] >= 4, run
        assert run["tenant_id"] is None or run["tenant_id"] == "default", run
    # The context fix was replayed and judged by the verifier (not by a correction) before the weights.
    replayed = [c for d in _decisions(home) for c in [*d.candidates, *d.rejected]
                if c.get("kind") == "harness_edit" and (c.get("evidence") or {}).get("replay")]
    assert replayed, [(d.choice, d.reason) for d in _decisions(home)]

    # Fresh traffic: the canary serves part of the agent's sessions until the plane judges it.
    time.sleep(6)  # the gateway binding follows the registry (VERSION_POLL_S)
    after: list[tuple[bool, str, str]] = []
    outcome = None
    start = 100
    while outcome is None:
        assert time.monotonic() < deadline, [(d.choice, d.reason) for d in _decisions(home)]
        after += client.round(6, start)
        start += 6
        cycle = time.monotonic() + 12  # one plane cycle (10 s) and its run: the judgement, or more traffic
        while outcome is None and time.monotonic() < cycle:
            time.sleep(2)
            outcome = next((d for d in _decisions(home) if d.choice in ("promote", "rollback")
                            and canary in d.reason), None)
    on_canary = [(ok, t) for ok, v, t in after if v == canary]
    assert len(on_canary) >= 6, after  # served under the agent's routing key, by the adapter's version
    print(f"canary {canary}: {sum(ok for ok, t in on_canary if t == TASK)}/{sum(t == TASK for _, t in on_canary)} "
          f"sums open with a number on the canary vs {sum(ok for ok, v, t in after if t == TASK and v != canary)}/"
          f"{sum(t == TASK and v != canary for _, v, t in after)} on the live version; plane: {outcome.reason}")

    with Store.open(home / "store", auto_compact=False) as store:
        live = VersionRegistry(store).live("default", AGENT)
        assert live is not None
        assert live.version_id == (canary if outcome.choice == "promote" else previous), live
    time.sleep(6)
    final = client.round(2, 500)
    # The live version serves, or a canary the plane made from it after the judgement (a cycle right after
    # a promotion may replay a context fix against the new live version and canary it): never the judged
    # canary once aborted, nor a version from before the judgement.
    with Store.open(home / "store", auto_compact=False) as store:
        registry = VersionRegistry(store)
        served_by = {v: registry.get(v) for _, v, _ in final}
    newer = {v for v, pv in served_by.items() if v != live.version_id
             and not (pv.status == "canary" and pv.parent_id == live.version_id and v != canary)}
    assert not newer, (final, [(d.choice, d.reason) for d in _decisions(home)])
    assert set(client.statuses) == {200}
    print(f"serve --train end to end: {time.monotonic() - t0:.0f} s, {len(client.statuses)} requests, none failed")


def test_verifier_and_plane_setting_options_are_read_or_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """What ``--verifier`` / ``--agent-verifier`` / ``--plane-setting`` accept (no server started)."""
    import typer

    from molt.replay.verifiers import AGENT_VERIFIERS, TASK_VERIFIERS, VerifyContext
    from molt.serve import plane_settings, register_verifiers

    (tmp_path / "sums_checks.py").write_text(CHECKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        done = register_verifiers(["opt-sums=sums_checks:opens_with_number"], ["opt-desk=contains:45 days"])
        assert done == ["task opt-sums: sums_checks:opens_with_number", "agent opt-desk: contains:45 days"]
        ctx = VerifyContext(input="What is 3 + 4?")
        assert TASK_VERIFIERS.get("opt-sums").score("7", ctx).success
        assert not TASK_VERIFIERS.get("opt-sums").score("The answer is 7", ctx).success
        assert AGENT_VERIFIERS.get("opt-desk").score("within 45 days", ctx).success
    finally:
        TASK_VERIFIERS.unregister("opt-sums")
        AGENT_VERIFIERS.unregister("opt-desk")
    for bad in (["no-equals-sign"], ["x=sums_checks:missing_function"], ["x=nomodule_here:f"], ["x=plain"]):
        with pytest.raises(typer.BadParameter):
            register_verifiers(bad, [])
    assert plane_settings(["canary_min=6", "promote_directly=true", "alpha=0.05"]) == {
        "canary_min": 6, "promote_directly": True, "alpha": 0.05}
    with pytest.raises(typer.BadParameter):
        plane_settings(["canary_min"])
