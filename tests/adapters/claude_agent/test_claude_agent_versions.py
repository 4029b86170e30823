"""What the Claude Agent SDK's hooks let Molt apply: the live version's system prompt, memories and
skills as the ``UserPromptSubmit`` hook's ``additionalContext`` (tool schemas are fixed when the
session starts); the version is in provenance; an unreachable registry never breaks the agent."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from molt.atdp import EventKind
from molt.capture import MemorySink, Recorder
from molt.control.versions import AgentConfig, ModelPart, VersionRegistry
from molt.harness import HarnessSpec
from molt_claude_agent import MoltClaudeHooks

TENANT, AGENT = "vineyard", "cellar-desk"
MEMORY = "Barrel 12 holds the 2024 syrah."



def _prompt(hooks: MoltClaudeHooks, text: str, session: str = "s-1") -> Any:
    data = {"hook_event_name": "UserPromptSubmit", "session_id": session, "transcript_path": "/tmp/t",
            "cwd": "/tmp", "prompt": text}
    return asyncio.run(hooks._on_hook(data, None, {"signal": None}))  # type: ignore[arg-type,typeddict-item]


def test_user_prompt_hook_adds_the_live_version_as_context(registry: VersionRegistry, tmp_path: Path) -> None:
    base = registry.ensure_base(TENANT, AGENT, AgentConfig(model=ModelPart(base="claude")))
    fixed = registry.create(TENANT, AGENT, base.parts.model_copy(
        update={"harness": HarnessSpec(system_prompt="Name the barrel.", memories=(MEMORY,))}), parent=base.version_id)
    sink = MemorySink()
    rec = Recorder(sink, spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0)
    hooks = MoltClaudeHooks(rec, tenant_id=TENANT, agent_id=AGENT, versions=registry, strict=True)
    try:
        assert _prompt(hooks, "Where is the syrah?") == {}  # the base version carries no harness
        registry.promote(fixed.version_id, actor="control-plane")
        assert hooks.live is not None and hooks.live.refresh()
        out = _prompt(hooks, "Where is the syrah?", "s-2")
        assert hooks.flush(deliver=True)
    finally:
        hooks.close()
        rec.close(timeout=5)
    ctx = out["hookSpecificOutput"]
    assert ctx["hookEventName"] == "UserPromptSubmit"
    assert "Name the barrel." in ctx["additionalContext"] and MEMORY in ctx["additionalContext"]
    events = [e for t in {r.x["trajectory_id"] for r in sink.events.values()} for e in sink.trajectory_events(t)]
    prompts = sorted((e for e in events if e.kind == EventKind.USER_MESSAGE), key=lambda e: e.timestamp)
    assert [e.provenance.policy_version for e in prompts] == [base.version_id, fixed.version_id]


def test_unreachable_registry_answers_no_decision(tmp_path: Path) -> None:
    class Down:
        def live(self, tenant_id: str, agent_id: str) -> Any:
            raise ConnectionError("the store is unreachable")

    rec = Recorder(MemorySink(), spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0)
    hooks = MoltClaudeHooks(rec, tenant_id=TENANT, agent_id=AGENT, versions=Down())
    try:
        assert _prompt(hooks, "Where is the syrah?") == {}
    finally:
        hooks.close()
        rec.close(timeout=5)
