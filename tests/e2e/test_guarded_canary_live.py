"""The canary is the experiment, live on SmolLM2-135M, through public interfaces only (issue 43): an
unmodified agent — the generic OpenAI tool-calling loop of ``test_generic_agent`` — asks
``molt serve --backend local`` about a fact it cannot know (an archery range's lane fee, a domain used
nowhere else in the repo). A judge's verdict and the user's correction reach half of its failures, sent
after the window; the other half get nothing. The plane runs as a user runs it, ``molt evolve run
--json`` against the same MOLT_HOME (it replays with the model ``molt serve`` serves); the test reads
what happened from that JSON, ``molt versions ls --json`` and the gateway's response headers. Nothing
from ``molt`` is imported on the assertions' path (the fixture locating the model aside).

Thin evidence: the agent fails every judged request — far beyond the tolerated half — but the plane
must not promote a memory on eight replays. Its first cycle tries the memory on a *guarded* canary
(never promoted directly); the canary's sequential test on the live outcomes the judge rewards promotes
it; a fresh window, in wordings the window never used, succeeds at least 25 points more often than the
first.

    pytest tests/e2e/test_guarded_canary_live.py -s
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_generic_agent import Agent  # noqa: E402  (the generic loop: one agent loop in the repo)

AGENT = "quarrystone-desk"
SYSTEM = ("You are the assistant of Quarrystone Archery Range. Answer the customer's question in one short "
          "sentence.")
#: The user's correction (governed like every client text: it names the fee, not the range).
FACT = "The lane rental at the archery range costs 23 euros per hour."
FEE = "23"
TOOLS = [{"type": "function", "function": {
    "name": "lane_status", "description": "Whether a lane (e.g. L-4) is free now.",
    "parameters": {"type": "object", "properties": {"lane": {"type": "string"}}, "required": ["lane"]}}}]
#: The window's wordings (the canary's traffic asks them again) and the fresh window's, never seen before.
ASK = ["How much is the lane rental at Quarrystone Archery Range?",
       "What does the lane rental cost at Quarrystone Archery Range?",
       "What is the price of the lane rental at Quarrystone Archery Range?",
       "How much does the lane rental at Quarrystone Archery Range cost per hour?"]
FRESH = ["What is the hourly price of the lane rental at Quarrystone Archery Range?",
         "How much do I pay for the lane rental at Quarrystone Archery Range?",
         "Quarrystone Archery Range: how much is the lane rental?",
         "Tell me what the lane rental at Quarrystone Archery Range costs.",
         "I want to rent a lane at Quarrystone Archery Range. How much is the lane rental?",
         "What is the lane rental fee at Quarrystone Archery Range?"]
#: The plane's settings for this deployment: a canary of half the sessions (not 10 %) so the live
#: experiment fits a CI job, bounded at 30 canary runs and 30 minutes; eight replays per candidate.
PLANE = ["replay_sample=8", "guarded_weight=0.5", "guarded_max_requests=30", "guarded_max_s=1800"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def model_dir() -> Path:
    from molt.backends.model import ensure_policy_model

    return ensure_policy_model(Path(os.environ.get("MOLT_TEST_MODEL_HOME", ROOT / ".molt" / "test-models")))


@pytest.fixture
def served(tmp_path: Path, model_dir: Path, molt_serving: Any) -> Iterator[tuple[str, dict[str, str]]]:
    """``molt serve --backend local`` with its plane off (``molt evolve run`` is the plane here); the
    environment every ``molt`` command of the test runs in."""
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    (home / "models" / model_dir.name).symlink_to(model_dir)
    port = _free_port()
    env = {**os.environ, "MOLT_HOME": str(home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "molt.cli", "serve", "--backend", "local", "--port", str(port),
                             "--evolve-every", "0", "--no-console", "--log-level", "warning",
                             # a shared CI box can be slow: a generation is never cut off mid-test
                             "--backend-timeout", "600"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        with molt_serving(proc, url, tmp_path / "serve.log", start_timeout_s=240):
            yield url, env
    finally:
        log.close()
        print("molt serve log (tail):", (tmp_path / "serve.log").read_text(errors="replace")[-1500:], sep="\n")


def _run(env: dict[str, str], *args: str) -> str:
    """A ``molt`` command's output (failing with it when the command fails)."""
    out = subprocess.run([sys.executable, "-m", "molt.cli", *args], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, (args, out.stdout[-2000:], out.stderr[-3000:])
    return out.stdout


def _molt(env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    """A ``molt`` command's JSON lines."""
    return [orjson.loads(line) for line in _run(env, *args).splitlines() if line.startswith("{")]


def _evolve(env: dict[str, str]) -> dict[str, Any]:
    got = _molt(env, "evolve", "run", "--tenant", "default", "--agent", AGENT, "--json",
                *[x for p in PLANE for x in ("--plane-setting", p)])
    assert len(got) == 1, got
    return got[0]


def _recorded(http: httpx.Client, timeout: float = 120.0) -> None:
    """Wait until the gateway's recorder has delivered everything it was given to the store (the
    responses and the rewards are recorded off the request path)."""
    deadline = time.monotonic() + timeout
    while True:
        rec = http.get("/health").json().get("recorder") or {}
        if rec and rec["delivered"] + rec["dropped"] >= rec["enqueued"] and not rec["pending_in_queue"]:
            assert not rec["dropped"], rec
            return
        assert time.monotonic() < deadline, rec
        time.sleep(0.5)


def _judge(http: httpx.Client, tid: str, ok: bool, correction: str | None = None) -> None:
    http.post("/v1/molt/rewards/trajectory", json={"trajectory_id": tid, "value": float(ok), "source": "judge",
                                                   "reason": None if ok else "the lane fee is wrong"}
              ).raise_for_status()
    if correction is not None:
        http.post("/v1/molt/rewards/trajectory", json={"trajectory_id": tid, "value": 0.0,
                                                       "source": "user_correction", "reason": correction}
                  ).raise_for_status()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_first_cycle_canaries_a_memory_that_live_outcomes_promote(served: tuple[str, dict[str, str]]) -> None:
    url, env = served
    agent = Agent(url + "/v1", agent=AGENT, system=SYSTEM, tools=TOOLS, temperature=0.0,
                  functions={"lane_status": lambda lane="": f'{{"lane": "{lane}", "free": true}}'})
    http = httpx.Client(base_url=url, timeout=60)
    t0 = time.monotonic()

    # The first window: sixteen asks (each its own session: no session id is sent); a judge's verdict and
    # the user's correction for half the failures — each wording's first and third ask —, sent once the
    # window is over.
    first: list[bool] = []
    late: list[str] = []
    for i in range(16):
        answer, tid, _ = agent.ask(ASK[i % len(ASK)])
        first.append(FEE in answer)
        if not first[-1] and (i // len(ASK)) % 2 == 0:
            late.append(tid)
    for tid in late:
        _judge(http, tid, False, FACT)
    _recorded(http)
    print(f"\nfirst window {sum(first)}/{len(first)}, {len(late)} failures judged late, at "
          f"{time.monotonic() - t0:.0f} s")
    assert len(late) >= 6, first

    # The plane's first cycle: the agent-level evidence, and the memory tried on a guarded canary.
    rec = _evolve(env)
    print(f"cycle 1 at {time.monotonic() - t0:.0f} s: {rec['choice']}: {rec['reason']}")
    assert rec["signals"]["evidence"]["agent"]["significant"], rec["signals"]["evidence"]
    assert rec["choice"] == "memory_insert" and rec["applied_version"], (rec["reason"], rec["rejected"])
    assert rec["reason"].startswith("guarded canary") and rec["signals"]["guard"]["version"] == rec["applied_version"]
    canary = rec["applied_version"]
    chosen = next(c for c in rec["candidates"] if c["candidate_id"] == rec["chosen_candidate"])
    print(f"the memory, in its {chosen['payload']['form']} form: {chosen['payload']['text']!r}")
    versions = {v["version_id"]: v for v in _molt(env, "versions", "ls", "--tenant", "default", "--agent", AGENT,
                                                   "--json")}
    assert versions[canary]["status"] == "canary", versions

    # Live outcomes: the gateway routes half the sessions to the canary; the judge rewards each answer at
    # once. Batches of 24 (each cycle of the plane is dearer than a few asks), a cycle after each, until
    # the sequential test decides (bounded: 30 canary runs, then it is withdrawn).
    time.sleep(4)  # the gateway follows the registry within VERSION_POLL_S (3 s)
    decided: dict[str, Any] | None = None
    served_by: dict[str, list[bool]] = {}
    for _ in range(2):
        for i in range(24):
            answer, tid, version = agent.ask(ASK[i % len(ASK)])
            served_by.setdefault(version, []).append(FEE in answer)
            _judge(http, tid, FEE in answer)
        _recorded(http)
        nxt = _evolve(env)
        state = nxt["signals"].get("canary") or {}
        print(f"cycle at {time.monotonic() - t0:.0f} s: {nxt['choice']}: {state.get('why')} "
              f"(served: { {v: f'{sum(o)}/{len(o)}' for v, o in served_by.items()} })")
        if nxt["choice"] in ("promote", "rollback"):
            decided = nxt
            break
        assert state.get("decision") == "continue", nxt["reason"]
    assert decided is not None and decided["choice"] == "promote", (decided or nxt)["reason"]
    state = decided["signals"]["canary"]
    assert state["decision"] == "promote" and state["ratio"] >= state["threshold"] and state["wins"] > state["losses"]
    assert state["exposure"]["runs"] <= state["exposure"]["max_runs"], state
    live = [v for v in _molt(env, "versions", "ls", "--tenant", "default", "--agent", AGENT, "--json")
            if v["status"] == "live"]
    assert [v["version_id"] for v in live] == [canary], live
    # The decision log names the test, its level and the canary's sequential state, as an operator reads it.
    said = _run(env, "evolve", "log", "--tenant", "default", "--agent", AGENT, "--limit", "1")
    assert f"canary {canary} sequential state: {state['wins']} pairs won, {state['losses']} lost" in said, said
    assert f"against the threshold {state['threshold']:g}" in said and "canary runs" in said, said

    # A fresh window, in wordings never asked before, served by the promoted version.
    time.sleep(4)
    fresh: list[bool] = []
    for q in FRESH:
        answer, _, version = agent.ask(q)
        assert version == canary, version
        fresh.append(FEE in answer)
    a, b = sum(first) / len(first), sum(fresh) / len(fresh)
    print(f"guarded canary live (SmolLM2-135M, public interfaces): first window {sum(first)}/{len(first)} -> "
          f"fresh {sum(fresh)}/{len(fresh)}; canary {state['wins']} pairs won, {state['losses']} lost, ratio "
          f"{state['ratio']:.1f} >= {state['threshold']:g}; {time.monotonic() - t0:.0f} s")
    assert b >= a + 0.25, (first, fresh)
