"""The README's quickstart run as written with the real SDK and the Claude Code it bundles, on a machine
with no Claude login: the run fails, and it is stored as one trajectory with the error — not two.

Claude Code is kept from any vendor traffic (no telemetry, no update checks) and from any login this
machine may have (a fresh ``HOME`` and ``CLAUDE_CONFIG_DIR``, no ``ANTHROPIC_*`` keys). The no-login path
that succeeds (Claude Code pointed at ``molt serve``'s Messages API) is the README's second block, run by
``tests/test_readme.py``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from molt.atdp import EventKind, OutcomeStatus
from molt.capture import Recorder
from molt.store import Store


def _bundled_cli() -> Path:
    sdk = pytest.importorskip("claude_agent_sdk", reason="claude-agent-sdk is installed in the main environment")
    cli = Path(sdk.__file__).parent / "_bundled" / "claude"
    if not cli.exists():
        pytest.skip(f"this claude-agent-sdk build bundles no Claude Code ({cli})")
    return cli


def test_a_run_without_a_claude_login_is_one_error_trajectory(tmp_path: Path, monkeypatch: Any) -> None:
    _bundled_cli()
    from claude_agent_sdk import ClaudeAgentOptions, query

    from molt_claude_agent import MoltClaudeHooks

    for k in [k for k in os.environ if k.startswith(("ANTHROPIC_", "CLAUDE_"))]:
        monkeypatch.delenv(k)
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "CLAUDE_CONFIG_DIR": str(home / ".claude"),
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1"}
    store = Store.open(tmp_path / "store", auto_compact=False)
    recorder = Recorder(store, spool_dir=tmp_path / "spool")
    hooks = MoltClaudeHooks(recorder, tenant_id="acme", agent_id="coder")
    options = hooks.attach(ClaudeAgentOptions(allowed_tools=["Read"], env=env, cwd=str(tmp_path)))

    async def main() -> list[str]:
        seen = []
        async for message in hooks.watch(query(prompt="help alpha", options=options)):
            seen.append(type(message).__name__)
        return seen

    try:
        try:
            seen = asyncio.run(asyncio.wait_for(main(), 180))
        except Exception as exc:  # the SDK raises after the error result: the README's loop sees that too
            seen = [type(exc).__name__]
        assert hooks.flush(30, deliver=True)
        tids = store.trajectory_ids()
        assert len(tids) == 1, f"{len(tids)} trajectories for one failed run ({seen})"
        evs = store.trajectory(tids[0]).events
        [turn] = [e for e in evs if e.kind == EventKind.AGENT_STEP and e.name == "turn"]
        assert turn.outcome.status == OutcomeStatus.ERROR, turn.outcome
        assert turn.metadata.tenant_id == "acme" and turn.metadata.agent_id == "coder"
        assert store.verify(tids[0]).ok
    finally:
        hooks.close()
        recorder.close()
        store.close()
