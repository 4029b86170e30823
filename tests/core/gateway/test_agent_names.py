"""Every agent has a name without a header: the agent its key is bound to, else a stable fingerprint of
its system prompt and tool set (labelled with its user agent and first words), which an operator can
rename; `molt agents ls` lists them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from molt.backends import StubBackend
from molt.capture import Recorder
from molt.gateway import Gateway, GatewayConfig, create_app
from molt.gateway.agents import RELOAD_S, AgentDirectory, fingerprint
from molt.gateway.loopback import ServerThread
from molt.governance.access import KeyRing
from molt.store import Store

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def _prompt(day: int) -> list[dict[str, Any]]:
    return [{"role": "system", "content": f"You are Coder, a coding agent.\nToday is 2026-12-{day:02d}; cwd /w/{day}"},
            {"role": "user", "content": "fix the bug"}]


def test_the_fingerprint_is_stable_across_dates_and_tells_tool_sets_apart() -> None:
    assert fingerprint(_prompt(1), TOOLS) == fingerprint(_prompt(17), list(reversed(TOOLS)))
    assert fingerprint(_prompt(1), TOOLS) != fingerprint(_prompt(1), TOOLS[:1])
    assert fingerprint(_prompt(1), TOOLS) != fingerprint([{"role": "system", "content": "You are Reviewer."}], TOOLS)
    assert fingerprint([{"role": "user", "content": "hi"}], None) is None  # nothing identifies it


def test_headerless_calls_are_named_listed_and_renamed(tmp_path: Path, monkeypatch: Any) -> None:
    store = Store.open(tmp_path / "store", auto_compact=False)
    rec = Recorder(store, spool_dir=tmp_path / "spool", fsync="never", pipeline=None)
    ring = KeyRing.from_mapping({"sk-a": ("acme", "agent_writer")})
    ring.add(tenant="acme", role="agent_writer", key="sk-bound", agent="billing-bot")
    now = [0.0]  # the directory's clock: the names file is re-read once RELOAD_S has passed on it
    gw = Gateway([StubBackend()], recorder=rec, store=store, keyring=ring,
                 agents=AgentDirectory(tmp_path, clock=lambda: now[0]),
                 config=GatewayConfig(health_interval_s=0))

    def call(key: str, day: int, user_agent: str = "Coder/1.2.3 (linux)") -> tuple[str, str]:
        r = httpx.post(srv.url + "/v1/chat/completions", timeout=30,
                       headers={"authorization": f"Bearer {key}", "user-agent": user_agent},
                       json={"model": "stub", "messages": _prompt(day), "tools": TOOLS, "tool_choice": "none"})
        assert r.status_code == 200, r.text
        return r.headers["x-molt-trajectory"], r.headers["x-molt-event-id"]

    try:
        with ServerThread(create_app(gw)) as srv:
            first = call("sk-a", 1)
            second = call("sk-a", 2)  # another day, the same agent
            bound = call("sk-bound", 3)
            monkeypatch.setenv("MOLT_HOME", str(tmp_path))
            from molt.cli import _mount, app

            _mount(["agents"])
            listing = CliRunner().invoke(app, ["agents", "ls", "--tenant", "acme"])
            assert listing.exit_code == 0, listing.output
            fp = fingerprint(_prompt(1), TOOLS)
            assert fp is not None and fp in listing.output
            assert "Coder · You are Coder, a coding agent. Today is" in listing.output
            renamed = CliRunner().invoke(app, ["agents", "rename", fp, "coder", "--tenant", "acme"])
            assert renamed.exit_code == 0, renamed.output
            now[0] += RELOAD_S
            after = call("sk-a", 4)
        assert rec.flush(timeout=30, deliver=True)
        agents = [store.trajectory(t).events[0].metadata.agent_id for t, _ in (first, second, bound, after)]
        assert agents == [fp, fp, "billing-bot", "coder"]
        assert "coder" in CliRunner().invoke(app, ["agents", "ls"]).output
    finally:
        rec.close()
        store.close()
