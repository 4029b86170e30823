"""An agent Molt did not write, evolved live: a generic OpenAI tool-calling loop that knows only a base URL
(as Hermes Agent does) is served by SmolLM2-135M through ``molt serve --backend local``. Its users correct
the answers that miss a company-policy fact; the control plane — with the agent registered nowhere —
clusters those failures, replays a memory candidate from the recordings alone (generic replay, the served
model as the replay backend), and promotes it; fresh traffic then succeeds where it failed.

The domain (a self-storage company's late fee) is used nowhere else in the repo. The figures this test
prints are the README's "generic agent" row:

    pytest tests/e2e/test_generic_agent.py -s
"""

from __future__ import annotations

import os
import socket
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
AGENT = "cedarbox-desk"
SYSTEM = ("You are the customer assistant of Cedarbox Storage, a self-storage company. Answer the customer's "
          "question in one or two sentences.")
TOOLS = [{"type": "function", "function": {
    "name": "unit_status", "description": "Look up a storage unit by its unit number (e.g. U-104): size, "
                                         "occupant since, paid-up-to date.",
    "parameters": {"type": "object", "properties": {"unit": {"type": "string"}}, "required": ["unit"]}}}]
#: What the users tell the agent when it gets the fee wrong (their correction), and what they check.
#: The users' correction. Governed like every client text (the default policy redacts organisation names,
#: in the requests as in the corrections), so it names the fee, not the company.
FACT = "The late fee for an overdue storage unit is 17 dollars."
FEE = "17"
#: The traffic before the fix (the users correct these) and the fresh traffic after it: different wordings.
BEFORE = ["How much is the late fee at Cedarbox Storage?",
          "What late fee does Cedarbox Storage charge when unit rent is overdue?",
          "My Cedarbox unit rent is overdue. How much is the late fee?",
          "What is the Cedarbox Storage late fee?",
          "Tell me the late fee for a Cedarbox Storage unit.",
          "How large is the late fee on a Cedarbox storage unit?"]
AFTER = ["What's the late fee at Cedarbox Storage?",
         "If I pay my Cedarbox Storage rent late, what is the late fee?",
         "Cedarbox Storage late fee: how much is it?",
         "Could you tell me the Cedarbox late fee amount?",
         "How much will Cedarbox Storage charge me as a late fee?",
         "What is the late fee Cedarbox Storage charges on overdue rent?",
         "My payment to Cedarbox Storage is late; what late fee applies?",
         "Does Cedarbox Storage have a late fee, and how much is it?"]
#: Other requests the agent serves in the same window (nobody complains about them): seven, so the six
#: failures clear the evidence bar split over the request tree's regions that may hold them (Fisher
#: 1/C(13,6) = 0.0006 <= 0.01 / (3 x 5); beside five others it is 0.0022).
OTHER = ["Write a two-line poem about the sea.", "Translate 'good morning' into French.",
         "Give me a synonym for 'happy'.", "What colour do you get by mixing blue and yellow?",
         "Name a fruit that is yellow.", "How many legs does a spider have?", "What is the opposite of 'cold'?"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Agent:
    """The generic tool-calling loop: it knows the base URL, its system prompt and its tools, nothing else
    (the X-Molt-Agent header names it, as a ``default_headers`` option of any OpenAI client would).

    The defaults are this test's storage company; ``bench/bench_evolve.py`` runs the same loop in other
    domains (its own name, system prompt, tool schemas and tool functions)."""

    def __init__(self, base_url: str, *, agent: str = AGENT, system: str = SYSTEM,
                 tools: list[dict[str, Any]] | None = None, functions: dict[str, Any] | None = None,
                 max_tokens: int = 20, temperature: float = 0.0, headers: dict[str, str] | None = None):
        import openai

        self.client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=300,
                                    default_headers={"X-Molt-Agent": agent, **(headers or {})})
        self.system, self.tools = system, TOOLS if tools is None else tools
        self.functions = functions if functions is not None else {"unit_status": self.unit_status}
        self.max_tokens, self.temperature = max_tokens, temperature

    def unit_status(self, unit: str = "") -> str:
        return orjson.dumps({"unit": unit, "size": "5x10", "paid_up_to": "2026-11-30"}).decode()

    def ask(self, question: str) -> tuple[str, str, str]:
        """``(answer, trajectory id, policy version)`` — the last two read from the gateway's headers by
        this test, not by the agent."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.system},
                                          {"role": "user", "content": question}]
        for _ in range(4):
            raw = self.client.chat.completions.with_raw_response.create(
                model="smollm2-135m-instruct", messages=messages, tools=self.tools, temperature=self.temperature,
                max_tokens=self.max_tokens)
            msg = raw.parse().choices[0].message
            tid, version = raw.headers["x-molt-trajectory"], raw.headers.get("x-molt-policy-version", "")
            messages.append(msg.model_dump(exclude_none=True))
            if not msg.tool_calls:
                return msg.content or "", tid, version
            for c in msg.tool_calls:
                try:
                    args = orjson.loads(c.function.arguments or "{}")
                    fn = self.functions.get(c.function.name)
                    out = fn(**args) if fn is not None else "unknown tool"
                except Exception as exc:  # the agent reports a tool failure to the model, as agents do
                    out = f"Error: {type(exc).__name__}: {exc}"
                messages.append({"role": "tool", "tool_call_id": c.id, "content": out})
        return "", tid, version


@pytest.fixture(scope="module")
def model_dir() -> Path:
    from molt.backends.model import ensure_policy_model

    return ensure_policy_model(Path(os.environ.get("MOLT_TEST_MODEL_HOME", ROOT / ".molt" / "test-models")))


@pytest.fixture
def served(tmp_path: Path, model_dir: Path, molt_serving: Any) -> Iterator[tuple[str, Path]]:
    """``molt serve --backend local`` (SmolLM2-135M) in its own process; its plane off: this test runs the
    plane's cycle itself, at a moment it chooses, against the same store."""
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    (home / "models" / model_dir.name).symlink_to(model_dir)
    port = _free_port()
    env = {**os.environ, "MOLT_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "molt.cli", "serve", "--backend", "local", "--port", str(port),
                             "--evolve-every", "0", "--no-console", "--log-level", "warning",
                             # a shared CI box can be slow: a generation is never cut off mid-test
                             "--backend-timeout", "600"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        with molt_serving(proc, url, tmp_path / "serve.log", start_timeout_s=240):
            yield url, home
    finally:
        log.close()
        print("molt serve log (tail):", (tmp_path / "serve.log").read_text(errors="replace")[-2000:], sep="\n")


def _rewarded(store: Any, ids: list[str], timeout: float = 120.0) -> None:
    """Wait until the capture process has stored every trajectory and its reward (recorded off the
    request path)."""
    from molt.store import Filter

    deadline = time.monotonic() + timeout
    where = str(Filter().among("trajectory_id", ids))
    while True:
        for name in ("events", "rewards"):
            store.table(name).checkout_latest()
        got = {r["trajectory_id"] for r in store.table("rewards").search().where(where).select(["trajectory_id"])
               .limit(None).to_arrow().to_pylist()}
        if got >= set(ids):
            return
        assert time.monotonic() < deadline, f"rewards of {set(ids) - got} never reached the store"
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a few minutes on a quiet machine; generous for a loaded one
def test_plane_fixes_a_missing_fact_of_an_unregistered_agent_live(served: tuple[str, Path], model_dir: Path) -> None:
    import asyncio

    from molt.backends import LocalBackend
    from molt.control.plane import ControlPlane, PlaneSettings
    from molt.control.versions import AgentConfig, ModelPart
    from molt.replay import AGENTS
    from molt.serve import VERSION_POLL_S
    from molt.store import Store

    url, home = served
    agent = Agent(url + "/v1")
    t0 = time.monotonic()
    http = httpx.Client(base_url=url, timeout=60)

    # Before: the users ask about the fee, the agent does not know it, they correct it.
    before, ids = [], []
    for q in BEFORE:
        answer, tid, _ = agent.ask(q)
        ok = FEE in answer
        before.append(ok)
        ids.append(tid)
        body = ({"trajectory_id": tid, "value": 1.0, "source": "user_feedback"} if ok else
                {"trajectory_id": tid, "value": 0.0, "source": "user_correction", "reason": FACT})
        http.post("/v1/molt/rewards/trajectory", json=body).raise_for_status()
    for q in OTHER:
        agent.ask(q)
    print(f"\ntraffic before the fix: {time.monotonic() - t0:.0f} s")

    # The plane, in its own process as `molt evolve` would be, replaying with the served model.
    assert AGENT not in AGENTS  # nothing registered the agent
    with Store.open(home / "store", auto_compact=False) as store:
        _rewarded(store, ids)
        backend = LocalBackend(model_path=model_dir, threads=1)
        # Four replays per candidate are enough evidence for a missing fact (4/4 vs 0/4: 95% CI low +0.31).
        plane = ControlPlane(store, backend, base_parts=AgentConfig(model=ModelPart(base=backend.model)),
                             settings=PlaneSettings(promote_directly=True, replay_sample=4))
        result = plane.run_cycle("default", AGENT)
        rec = result.record
        assert result.choice == "memory_insert", (rec.reason, rec.actions, rec.rejected, rec.candidates)
        chosen = next(c for c in rec.candidates if c["kind"] == "memory_insert")
        replay = chosen["evidence"]["replay"]
        assert replay["mode"] == "generic replay from the recording"
        assert chosen["payload"]["text"] == FACT and replay["success_delta"] > 0
        version = result.version
        assert version is not None and version.status == "live" and version.parts.memory_ids
        asyncio.run(backend.aclose())
    print(f"plane cycle done at {time.monotonic() - t0:.0f} s: {rec.reason}")

    # The gateway follows the registry (changes made by another process within VERSION_POLL_S), then
    # fresh traffic, every request of it served by the new version.
    time.sleep(VERSION_POLL_S + 2)
    after, versions = [], set()
    for q in AFTER:
        answer, _, served_version = agent.ask(q)
        versions.add(served_version)
        after.append(FEE in answer)
    assert versions == {version.version_id}, versions
    b, a = sum(before) / len(before), sum(after) / len(after)
    print(f"\ngeneric agent (SmolLM2-135M, molt serve --backend local, no registration): success {sum(before)}/"
          f"{len(before)} before -> {sum(after)}/{len(after)} after on fresh traffic; replay "
          f"{replay['baseline_success_rate']:.2f} -> {replay['candidate_success_rate']:.2f} on the cluster "
          f"({replay['scored']} scored, {replay['unknown']} unknown)")
    assert a >= b + 0.5, (before, after)
