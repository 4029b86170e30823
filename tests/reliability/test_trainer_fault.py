"""Fault injection on the online trainer: a crash in the middle of an update step while the gateway
keeps serving (issue 10, item 3: "trainer crash mid-step").

The real path end to end: agent calls through the gateway (stub backend, tenant keys) recorded by a
Recorder through the governance pipeline, rewards posted to the feedback API, the governance
training queue as the trainer's source, :class:`~molt_trainer.service.OnlineTrainer` on a tiny
random Llama (byte vocabulary, so the stub's token ids fit), each adapter published back through the
gateway's admin API. Faults are injected by wrapping the policy's forward pass (raise in the second
micro-batch, after the first one's gradients accumulated) and its adapter save (raise after the
optimiser step: "disk full"). A crash that kills the trainer outright is a ``BaseException`` raised
in the same place: it escapes every handler, the thread dies with its claimed samples in memory, and
a new trainer is started on the same store and adapter directory (what a restart of the process sees);
and the real thing: a trainer process (``children/trainer_child.py``) SIGKILLed mid-step.
"""

from __future__ import annotations

import contextlib
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_doc import KEYS

pytest.importorskip("molt_trainer.service", reason="needs molt-trainer (torch, peft, verl)")

from molt.backends import StubBackend
from molt.capture import Recorder
from molt.cli import run
from molt.gateway import Gateway, GatewayConfig, create_app
from molt.governance import GovernancePipeline, GovernancePolicy, GovernedSink, Principal, TrainingQueue
from molt.governance.access import KeyRing, Role
from molt.serve import Stack
from molt.status import StatusReporter
from molt.store import Store
from molt_trainer.algos import AlgoSettings
from molt_trainer.policy import LoraSettings, PolicyModel
from molt_trainer.publish import GatewayTarget, Publisher, policy_versions
from molt_trainer.service import GovernedSource, OnlineTrainer, TrainerSettings

POLICY = {"name": "trainer-fault", "tenants": {"acme": {"training": {"opt_in": True, "require_consent": False}}}}
W = {"authorization": "Bearer sk-acme-writer"}
AGENT = {"authorization": "Bearer sk-globex-writer"}  # another tenant's agent: served, never trained on
PROMPTS = ["add two", "name a colour", "say hi", "count to three"]
SETTINGS = TrainerSettings(algo=AlgoSettings(), lora=LoraSettings(rank=2, micro_batch=4), min_samples=8, max_batch=8,
                           poll_s=0.05, throttle_s=0.05)


class Parrot(StubBackend):
    """The stub backend answering "you said …": its "echo: …" reads to the redactor as a speaker's
    name (PERSON), and a redacted call's token trace is dropped, leaving nothing to train on."""

    def _answer(self, req: Any) -> tuple[str | None, list[Any] | None, str]:
        content, _, _ = super()._answer(req)
        text = "you said " + (content or "").removeprefix("echo: ")
        return text, None, text


class Killed(BaseException):
    """A crash no handler catches (the process dying): the trainer's thread ends where it stands."""


@pytest.fixture(scope="module")
def byte_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama over the stub backend's byte vocabulary (256 ids, ChatML prompts fit)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True)
    out = tmp_path_factory.mktemp("byte-llama")
    LlamaForCausalLM(cfg).save_pretrained(str(out))
    return out


class Served:
    """The gateway app on a loopback port (the trainer publishes to it over HTTP, as in ``molt serve``)."""

    def __init__(self, app: Any):
        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                                    access_log=False))
        self.thread = threading.Thread(target=self.server.run, name="fault-uvicorn", daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "the gateway did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    store = Store.open(tmp_path / "store", auto_compact=False)
    policy = GovernancePolicy.model_validate(POLICY)
    rec = Recorder(GovernedSink(store), spool_dir=tmp_path / "spool", pipeline=GovernancePipeline(policy))
    gw = Gateway([Parrot()], recorder=rec, store=store, keyring=KeyRing.from_mapping(KEYS),
                 config=GatewayConfig(health_interval_s=0))
    with Served(create_app(gw)) as srv:
        yield {"store": store, "policy": policy, "rec": rec, "gw": gw, "url": srv.url, "tmp": tmp_path}
    rec.close()
    store.close()


def _ask(url: str, prompt: str, headers: dict[str, str] = AGENT) -> tuple[str, str]:
    r = httpx.post(url + "/v1/chat/completions", headers=headers, timeout=60, json={
        "model": "stub", "messages": [{"role": "user", "content": prompt}], "logprobs": True})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"], r.headers["x-molt-trajectory"]


def _round(w: dict[str, Any]) -> list[str]:
    """Each prompt twice, one answer rewarded 1 and the other 0 (a GRPO group of two); durable after."""
    tids = []
    for p in PROMPTS:
        for reward in (1.0, 0.0):
            _, tid = _ask(w["url"], p, W)
            r = httpx.post(w["url"] + "/v1/molt/rewards/trajectory", headers=W, timeout=60,
                           json={"trajectory_id": tid, "value": reward})
            assert r.status_code == 200, r.text
            tids.append(tid)
    assert w["rec"].flush(timeout=60, deliver=True)
    return tids


def _trainer(w: dict[str, Any], model_dir: Path, *, out: str = "adapters", targets: bool = True,
             store: bool = True, loads: list[str] | None = None) -> OnlineTrainer:
    target = GatewayTarget(w["url"], "sk-platform-operator", "stub", weight=0.1)  # loading an adapter is the operator's
    if loads is not None:
        inner = target.load

        def load(version: str, path: Path, previous: list[str]) -> None:
            inner(version, path, previous)
            loads.append(version)

        target.load = load  # type: ignore[method-assign]
    pub = Publisher(model="stub", out_dir=w["tmp"] / out, targets=[target] if targets else [],
                    store=w["store"] if store else None, tenant_id="acme", retries=1)
    queue = TrainingQueue(w["store"], w["policy"], Principal("acme", Role.TRAINER))
    return OnlineTrainer(PolicyModel.load(SETTINGS.lora, model_dir), pub, GovernedSource(queue), SETTINGS,
                         base_version="stub")


def _inject(trainer: OnlineTrainer, forward: dict[int, BaseException], save: dict[int, BaseException]) -> None:
    """Raise on the n-th forward pass / adapter save of ``trainer``'s policy (1-based, counted over its life)."""
    policy, n = trainer.policy, {"fwd": 0, "save": 0}
    fwd, sav = policy.token_logprobs, policy.save_adapter

    def wrap(kind: str, plan: dict[int, BaseException], real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*a: Any) -> Any:
            n[kind] += 1
            if n[kind] in plan:
                raise plan[n[kind]]
            return real(*a)
        return call

    policy.token_logprobs = wrap("fwd", forward, fwd)  # type: ignore[method-assign]
    policy.save_adapter = wrap("save", save, sav)  # type: ignore[method-assign]


def _adapters(w: dict[str, Any]) -> set[str]:
    # the version ids (acme's adapters are acme's versions: keyed ``<id>#acme`` in the table)
    return {sp.version for sp in w["gw"].router.table.versions.values() if "@lora-" in sp.version}


def _lora(policy: PolicyModel) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in policy.model.named_parameters() if v.requires_grad}


def _wait(cond: Callable[[], bool], what: str, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_trainer_crash_mid_step_rolls_back_serving_is_untouched_and_a_restart_loses_and_repeats_nothing(
        world: dict[str, Any], byte_model_dir: Path, molt_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    w = world
    expected = {p: _ask(w["url"], p)[0] for p in PROMPTS}  # what the agent gets before any training
    round1 = _round(w)

    # A reference trainer that never fails, on the same data: what a clean first step produces.
    ref = _trainer(w, byte_model_dir, out="ref", targets=False, store=False)
    assert ref.tick() is not None and ref.step == 1
    clean = _lora(ref.policy)

    # Trainer A: its first step fails in the second micro-batch (gradients of the first accumulated),
    # then after the optimiser step while saving the adapter; the third try goes through.
    loads: list[str] = []
    a = _trainer(w, byte_model_dir, loads=loads)
    _inject(a, forward={2: RuntimeError("injected: crash in the backward pass")},
            save={1: OSError(28, "injected: no space left on device")})
    stop = threading.Event()

    def life() -> None:
        with contextlib.suppress(Killed):  # the process is gone: no handler of the trainer ran
            a.run(stop)

    thread = threading.Thread(target=life, name="trainer-a", daemon=True)
    thread.start()
    answers: list[tuple[str, str]] = []
    deadline = time.monotonic() + 300  # generous: a tiny model's step takes well under a second
    while a.step < 1:  # the agent keeps calling while the trainer fails and retries
        assert thread.is_alive(), "the trainer loop died of a rolled-back step"
        assert time.monotonic() < deadline, f"no step completed after the faults: {a.metrics()}"
        p = PROMPTS[len(answers) % len(PROMPTS)]
        answers.append((p, _ask(w["url"], p)[0]))
        time.sleep(0.01)
    m = a.metrics()
    assert m["trainer/step_failures"] == 2 and m["trainer/crashes"] == 2  # counted
    assert "molt_trainer_trainer_crashes 2" in a.render_metrics()  # and exported
    stack = Stack()  # and visible in `molt doctor`, through molt serve's status wiring
    stack.parts["trainer"] = a
    StatusReporter(molt_home, "molt-serve", {"stack": stack.fault_status}).write()
    capsys.readouterr()
    assert run(["doctor", "--store", str(w["tmp"] / "store")]) == 0
    shown = capsys.readouterr().out
    assert re.search(r"trainer\.crashes\s+│\s+2\b", shown) and re.search(r"trainer\.step_failures\s+│\s+2\b", shown)
    # (d) nothing half-applied: the version that went live is exactly the clean step's adapter
    assert loads == ["stub@lora-1"]
    for k, v in _lora(a.policy).items():
        assert torch.allclose(v, clean[k], atol=1e-6), f"{k} differs from a clean step's update"
    assert _adapters(w) == {"stub@lora-1"}

    # Trainer A is killed in the middle of its second step (new traffic claimed, nothing acknowledged).
    _inject(a, forward={2: Killed()}, save={})  # counted afresh: the 2nd micro-batch of step 2
    round2 = _round(w)
    thread.join(300)
    assert not thread.is_alive() and a.step == 1
    stop.set()
    assert _adapters(w) == {"stub@lora-1"}

    # Restart: a new trainer on the same store and adapter directory.
    b = _trainer(w, byte_model_dir, loads=loads)
    assert b.step == 1 and b.counters["resumed_versions"] == 1
    for k, v in _lora(b.policy).items():  # continues from the live adapter, not from scratch
        assert torch.allclose(v, clean[k], atol=1e-6)
    assert b.tick() is not None and b.step == 2 and loads == ["stub@lora-1", "stub@lora-2"]
    assert b.counters["skipped_acknowledged"] == 8  # round 1 read again and skipped
    assert b.tick() is None  # nothing left

    # (c) every eligible call trained on exactly once, across the crash and the restart
    versions = policy_versions(w["store"])
    assert [v["version_id"] for v in versions] == ["stub@lora-1", "stub@lora-2"]
    trained = [e for v in versions for e in v["parts"]["watermark"]["events"]]
    assert len(trained) == len(set(trained)) == 16
    by_version = [set(v["parts"]["watermark"]["trajectories"]) for v in versions]
    assert by_version == [set(round1), set(round2)]

    # (a) the agent's results never changed and no call failed (every _ask asserted a 200)
    assert answers and all(text == expected[p] for p, text in answers)
    assert {p: _ask(w["url"], p)[0] for p in PROMPTS} == expected


CHILD = Path(__file__).parent / "children" / "trainer_child.py"


def test_a_trainer_process_sigkilled_mid_step_restarts_without_losing_or_repeating_a_sample(
        world: dict[str, Any], byte_model_dir: Path) -> None:
    """The trainer in its own process (as ``molt-trainer`` runs it), SIGKILLed in its second step's
    backward pass; the gateway's process keeps writing the store it reads."""
    import queue as queue_mod

    w = world
    expected = {p: _ask(w["url"], p)[0] for p in PROMPTS}
    round1 = _round(w)
    err = (w["tmp"] / "child.err").open("wb")
    child = subprocess.Popen([sys.executable, str(CHILD), str(w["tmp"] / "store"), w["url"], str(byte_model_dir),
                              str(w["tmp"] / "adapters")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=err, text=True)
    lines: queue_mod.Queue[str] = queue_mod.Queue()
    threading.Thread(target=lambda: [lines.put(x.strip()) for x in child.stdout or ()], daemon=True).start()
    try:
        assert lines.get(timeout=600) == "step 1", (w["tmp"] / "child.err").read_text()[-2000:]
        assert _adapters(w) == {"stub@lora-1"}
        round2 = _round(w)  # written by this process after the child opened the store
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.wait(600) == -signal.SIGKILL, (w["tmp"] / "child.err").read_text()[-2000:]
    finally:
        if child.poll() is None:
            child.kill()
        err.close()
    assert lines.empty(), f"the child went on after its fault: {lines.get()}"
    assert _adapters(w) == {"stub@lora-1"}  # the killed step published nothing
    assert {p: _ask(w["url"], p)[0] for p in PROMPTS} == expected

    b = _trainer(w, byte_model_dir)  # the restart
    assert b.step == 1 and b.counters["resumed_versions"] == 1
    assert b.tick() is not None and b.step == 2 and b.tick() is None
    assert _adapters(w) == {"stub@lora-1", "stub@lora-2"}
    versions = policy_versions(w["store"])
    assert [v["version_id"] for v in versions] == ["stub@lora-1", "stub@lora-2"]
    trained = [e for v in versions for e in v["parts"]["watermark"]["events"]]
    assert len(trained) == len(set(trained)) == 16
    assert [set(v["parts"]["watermark"]["trajectories"]) for v in versions] == [set(round1), set(round2)]
