"""Real coding-agent CLIs as unmodified agents against ``molt serve``: Claude Code (``claude -p`` with
``ANTHROPIC_BASE_URL``, the Messages API) and Codex CLI (``codex exec`` with a custom model provider,
the Responses API), installed from npm by ``scripts/install_cli_agents.sh`` (scripts/setup.sh runs it).

The backend is the stub, scripted to call one of the CLI's own tools (``[[stub:call=…]]``) and then
answer with the tool's result; the CLI really runs the tool. Each run lands one verified trajectory —
model call, the tool call with its output, model call — named as an agent by fingerprint (no header),
and a memory promoted for that agent reaches the system prompt of its next request. Both CLIs would
reach their vendors (telemetry, update checks, auth): the environment below turns that off, and the
tests pass with no network at all."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from molt.atdp import EventKind
from molt.gateway.loopback import wait_healthy

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(os.environ.get("MOLT_CLI_AGENTS", ROOT / ".cli-agents")) / "node_modules" / ".bin"
MEMORY = "The notes file is the single source of truth for secret words."
SECRET = "the secret word is molt-42"


def _cli(name: str) -> Path:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the Claude Code and Codex CLI tests need it (npm, node 18+)")
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{path} is missing: run scripts/install_cli_agents.sh (scripts/setup.sh runs it)")
    return path


@dataclass
class Serve:
    url: str
    home: Path

    def trajectories(self, n: int, timeout: float = 60.0) -> list[list[object]]:
        """The stored trajectories once there are ``n`` whose last event is a model call (recorded by
        molt serve's capture process a moment after each response)."""
        from molt.store import Store

        deadline = time.monotonic() + timeout
        while True:
            store = Store.open(self.home / "store", auto_compact=False)
            try:
                runs = [store.trajectory(t).events for t in store.trajectory_ids()]
                ok = [r for r in runs if r and r[-1].kind == EventKind.MODEL_CALL and len(r) >= 3]
                if len(ok) >= n or time.monotonic() > deadline:
                    assert all(store.verify(t).ok for t in store.trajectory_ids())
                    return sorted(runs, key=lambda r: r[0].timestamp)
            finally:
                store.close()
            time.sleep(0.5)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = tmp_path / "molt"
    env = {**os.environ, "MOLT_HOME": str(home)}
    proc = subprocess.Popen([sys.executable, "-c", "from molt.cli import main; main()", "serve", "--backend", "stub",
                             "--port", str(port),
                             # the memory check reads the exact prompt the backend saw from the token trace,
                             # which the default governance drops when it redacts a generation (a path here)
                             "--no-governance"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout_s=60)
        yield Serve(url, home)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _promote_memory(serve: Serve, agent: str) -> None:
    """A version of the agent with a memory, as the control plane promotes one: routed under the agent's
    own key (``stub#default/<agent>``), all of its new sessions."""
    spec = {"version": f"stub@{agent}-mem", "backends": ["stub"], "tenant_id": "default",
            "harness": {"memories": [MEMORY]}}
    r = httpx.post(serve.url + "/v1/molt/admin/versions", timeout=30,
                   json={"model": f"stub#default/{agent}", "spec": spec, "weight": 1.0})
    assert r.status_code == 200, r.text


def _check_run(events: list[object], tool: str) -> str:
    kinds = [e.kind for e in events]  # type: ignore[attr-defined]
    assert kinds == [EventKind.MODEL_CALL, EventKind.TOOL_CALL, EventKind.MODEL_CALL], kinds
    first, call, last = events
    assert call.action.tool_name == tool and SECRET in str(call.outcome.output)  # type: ignore[attr-defined]
    assert SECRET in (last.action.text or "")  # type: ignore[attr-defined]
    agent = first.metadata.agent_id  # type: ignore[attr-defined]
    assert agent and agent.startswith("fp-") and last.metadata.agent_id == agent  # type: ignore[attr-defined]
    return str(agent)


def _prompt_of(event: object) -> str:
    return bytes(event.action.tokens.prompt_ids).decode()  # type: ignore[attr-defined]


def test_claude_code_runs_as_an_unmodified_agent(serve: Serve, tmp_path: Path) -> None:
    claude = _cli("claude")
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text(SECRET + "\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "CLAUDE_CONFIG_DIR": str(tmp_path / ".claude"),
           "ANTHROPIC_BASE_URL": serve.url, "ANTHROPIC_API_KEY": "sk-any", "ANTHROPIC_MODEL": "stub",
           "ANTHROPIC_DEFAULT_HAIKU_MODEL": "stub", "ANTHROPIC_SMALL_FAST_MODEL": "stub",
           # no telemetry, error reports, update checks or other vendor traffic
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
           "DISABLE_AUTOUPDATER": "1"}
    ask = f'Read the notes. [[stub:call=Read {{"file_path": "{work / "notes.txt"}"}}]]'

    def run() -> None:
        out = subprocess.run([str(claude), "-p", ask, "--output-format", "json"], cwd=work, env=env,
                             capture_output=True, text=True, timeout=180)
        assert out.returncode == 0 and SECRET in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]

    run()
    [events] = serve.trajectories(1)
    agent = _check_run(events, "Read")
    assert events[0].name == "messages"  # type: ignore[attr-defined]
    _promote_memory(serve, agent)
    run()
    runs = serve.trajectories(2)
    assert len(runs) == 2 and _check_run(runs[1], "Read") == agent
    assert MEMORY in _prompt_of(runs[1][0]) and MEMORY not in _prompt_of(runs[0][0])


def test_codex_cli_runs_as_an_unmodified_agent(serve: Serve, tmp_path: Path) -> None:
    codex = _cli("codex")
    work, home = tmp_path / "work", tmp_path / "codex-home"
    work.mkdir()
    home.mkdir()
    (work / "notes.txt").write_text(SECRET + "\n")
    # a custom model provider speaking the Responses API to molt serve; no update checks, no analytics
    (home / "config.toml").write_text(f"""model = "stub"
model_provider = "molt"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.molt]
name = "Molt"
base_url = "{serve.url}/v1"
env_key = "MOLT_API_KEY"
wire_api = "responses"
""")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CODEX_HOME": str(home), "MOLT_API_KEY": "sk-any"}
    ask = 'Read the notes. [[stub:call=exec_command {"cmd": "cat notes.txt"}]]'

    def run() -> None:
        out = subprocess.run([str(codex), "exec", "--skip-git-repo-check", ask], cwd=work, env=env,
                             capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
        assert out.returncode == 0 and SECRET in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]

    run()
    [events] = serve.trajectories(1)
    agent = _check_run(events, "exec_command")
    assert events[0].name == "responses"  # type: ignore[attr-defined]
    _promote_memory(serve, agent)
    run()
    runs = serve.trajectories(2)
    assert len(runs) == 2 and _check_run(runs[1], "exec_command") == agent
    assert MEMORY in _prompt_of(runs[1][0]) and MEMORY not in _prompt_of(runs[0][0])
