"""molt-claude-agent beyond the conformance suite: sub-agents, hooks without a start, a prompt that
interrupts an open turn, merging with the user's own hooks, the framework check and the README."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import ClaudeAgentOptions, HookMatcher

from molt.atdp import EventKind, OutcomeStatus
from molt.capture import MemorySink, Recorder
from molt.testing import Script
from molt_claude_agent import HOOK_EVENTS, MoltClaudeHooks

from .scripted import ScriptedCLI, run_query

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def hooks(tmp_path: Path) -> Any:
    # raw capture: what the adapter maps, value by value (governance would redact some of it)
    rec = Recorder(MemorySink(), spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0, pipeline=None)
    h = MoltClaudeHooks(rec, strict=True)
    yield h
    rec.close(timeout=5)


def _events(h: MoltClaudeHooks) -> list[Any]:
    assert h.flush(deliver=True)
    sink = h.capture.recorder.sink
    return [e for t in sorted({r.x["trajectory_id"] for r in sink.events.values()}) for e in sink.trajectory_events(t)]


def _fire(h: MoltClaudeHooks, event: str, **data: Any) -> None:
    data = {"session_id": "s1", "transcript_path": "/dev/null", "cwd": "/", "hook_event_name": event, **data}
    assert asyncio.run(h._on_hook(data, data.get("tool_use_id"), {"signal": None})) == {}


def test_subagents_nest_and_stop_cancels_open_work(hooks: MoltClaudeHooks) -> None:
    _fire(hooks, "UserPromptSubmit", prompt="review")
    _fire(hooks, "SubagentStart", agent_id="a1", agent_type="code-reviewer")
    _fire(hooks, "PreToolUse", tool_name="Read", tool_input={"path": "x"}, tool_use_id="t1", agent_id="a1")
    _fire(
        hooks,
        "PostToolUse",
        tool_name="Read",
        tool_input={"path": "x"},
        tool_use_id="t1",
        agent_id="a1",
        tool_response={"content": "ok"},
    )
    _fire(
        hooks,
        "SubagentStop",
        agent_id="a1",
        agent_type="code-reviewer",
        agent_transcript_path="/dev/null",
        stop_hook_active=False,
        last_assistant_message="lgtm",
    )
    _fire(hooks, "PreToolUse", tool_name="Bash", tool_input={"command": "sleep 9"}, tool_use_id="t2")
    _fire(hooks, "Stop", stop_hook_active=False, last_assistant_message="all good")
    evs = _events(hooks)
    by = {e.name: e for e in evs}
    assert [e.kind for e in evs].count(EventKind.AGENT_STEP) == 2
    assert by["Read"].parent_id == by["code-reviewer"].event_id
    assert by["code-reviewer"].parent_id == by["turn"].event_id and by["turn"].parent_id is None
    assert by["code-reviewer"].outcome.output == "lgtm"
    assert by["Bash"].outcome.status == OutcomeStatus.CANCELLED
    assert by["turn"].outcome.output == "all good" and by["turn"].action.inputs == "review"
    assert {e.session_id for e in evs} == {"s1"} and hooks.stats.open_spans == 0


def test_post_without_pre_and_interrupted_turn(hooks: MoltClaudeHooks) -> None:
    _fire(
        hooks,
        "PostToolUseFailure",
        tool_name="Bash",
        tool_input={},
        tool_use_id="t9",
        error="stopped",
        is_interrupt=True,
        duration_ms=25,
    )
    _fire(hooks, "UserPromptSubmit", prompt="again")
    _fire(hooks, "Stop", stop_hook_active=False)
    evs = _events(hooks)
    assert len({e.trajectory_id for e in evs}) == 2
    [bash] = [e for e in evs if e.name == "Bash"]
    assert bash.outcome.status == OutcomeStatus.INTERRUPTED and bash.outcome.error.message == "stopped"
    assert bash.metadata.latency_ms >= 25
    turns = [e for e in evs if e.name == "turn"]
    assert [t.outcome.status for t in turns] == [OutcomeStatus.INTERRUPTED, OutcomeStatus.OK]


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")

    __repr__ = __str__


def test_values_that_cannot_print_themselves_cost_their_text_not_the_event(hooks: MoltClaudeHooks) -> None:
    """A tool name, an error and an unknown hook name that are objects, not strings (strict mode
    turns a mapper exception into a failure)."""
    _fire(hooks, "UserPromptSubmit", prompt="go")
    _fire(hooks, "PostToolUseFailure", tool_name=_Unprintable(), tool_input={}, tool_use_id="t1", error=_Unprintable())
    assert asyncio.run(hooks._on_hook({"session_id": "s1", "hook_event_name": _Unprintable()}, None, None)) == {}
    _fire(hooks, "Stop", stop_hook_active=False)
    evs = _events(hooks)
    [tool] = [e for e in evs if e.kind == EventKind.TOOL_CALL]
    assert tool.name == "<unprintable _Unprintable>" and tool.outcome.error.message == "<unprintable _Unprintable>"
    assert hooks.stats.errors == 0


def test_attach_keeps_the_users_hooks(hooks: MoltClaudeHooks) -> None:
    seen: list[str] = []

    async def mine(data: Any, tool_use_id: Any, ctx: Any) -> dict[str, Any]:
        seen.append(data["hook_event_name"])
        return {}

    base = ClaudeAgentOptions(hooks={"PreToolUse": [HookMatcher(matcher="lookup", hooks=[mine])]})
    opts = hooks.attach(base)
    assert base.hooks is not None and len(base.hooks["PreToolUse"]) == 1  # the original is untouched
    assert set(opts.hooks or {}) == set(HOOK_EVENTS) and len(opts.hooks["PreToolUse"]) == 2  # type: ignore[index]
    assert asyncio.run(run_query(opts, Script(marker="gamma"))) == "done: gamma"
    assert seen == ["PreToolUse"]
    assert len(_events(hooks)) == 4  # turn, prompt, two tools


def test_hook_costs_the_event_loop_little(hooks: MoltClaudeHooks) -> None:
    data = {"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "x", "tool_input": {}, "tool_use_id": "t"}

    async def go() -> float:
        t0 = time.perf_counter()
        for i in range(2000):
            await hooks._on_hook({**data, "tool_use_id": f"t{i}"}, f"t{i}", None)
        return (time.perf_counter() - t0) / 2000

    # a guard against blocking the event loop (I/O in a hook), not a performance claim
    assert asyncio.run(go()) < 5e-3
    hooks.flush()


def test_framework_version_is_checked_at_import() -> None:
    code = (
        "import importlib.metadata as m; v = m.version\n"
        "m.version = lambda d: '0.0.1' if d == 'claude-agent-sdk' else v(d)\n"
        "try:\n    import molt_claude_agent\n"
        "except Exception as e:\n    print(type(e).__name__, e, *getattr(e, '__notes__', []), sep='|')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.startswith("AdapterError|molt-claude-agent needs claude-agent-sdk>=0.1.0, but found 0.0.1.")


def test_readme_quickstart_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import claude_agent_sdk

    from molt.store import Store

    real = claude_agent_sdk.query

    def scripted_query(*, prompt: str, options: Any) -> Any:  # the README's query(), minus the CLI
        return real(prompt=prompt, options=options, transport=ScriptedCLI(Script(marker="alpha")))

    monkeypatch.setattr(claude_agent_sdk, "query", scripted_query)
    readme = (ROOT / "adapters" / "claude_agent" / "README.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", readme, re.S).group(1)  # type: ignore[union-attr]
    assert len([line for line in snippet.splitlines() if line.strip()]) <= 15  # ruff adds blank lines
    ns: dict[str, Any] = {}
    exec(compile(snippet, "README.md", "exec"), ns)
    store = Store.open()
    try:
        assert store.count("events") == 4
    finally:
        store.close()
        ns["recorder"].close()


def test_a_failed_run_is_recorded_as_failed(hooks: MoltClaudeHooks) -> None:
    """Claude Code not logged in: the prompt hook fires, then the CLI ends with an error result and no
    Stop. Watched, the turn ends as an error (no healthy-looking trajectory, no orphaned prompt)."""
    from claude_agent_sdk import ResultMessage

    async def failing_run() -> Any:
        data = {"session_id": "s1", "transcript_path": "/dev/null", "cwd": "/", "hook_event_name": "UserPromptSubmit",
                "prompt": "help alpha"}
        await hooks._on_hook(data, None, {"signal": None})  # type: ignore[arg-type]
        yield ResultMessage(subtype="success", duration_ms=5, duration_api_ms=0, is_error=True, num_turns=0,
                            session_id="s1", result="Invalid API key · Please run /login")

    async def crashing_run() -> Any:
        yield ResultMessage(subtype="success", duration_ms=1, duration_api_ms=0, is_error=False, num_turns=0,
                            session_id="s2")
        raise RuntimeError("the CLI exited with 1")

    async def consume(stream: Any) -> list[Any]:
        return [m async for m in stream]

    assert len(asyncio.run(consume(hooks.watch(failing_run())))) == 1  # the stream passes through unchanged
    with pytest.raises(RuntimeError, match="exited with 1"):
        asyncio.run(consume(hooks.watch(crashing_run())))
    evs = _events(hooks)
    turns = [e for e in evs if e.kind == EventKind.AGENT_STEP and e.name == "turn"]
    assert len(turns) == 2 and all(t.outcome.status == OutcomeStatus.ERROR for t in turns)
    assert "Please run /login" in str(turns[0].outcome.error)
    assert "exited with 1" in str(turns[1].outcome.error)
    [prompt] = [e for e in evs if e.kind == EventKind.USER_MESSAGE]
    assert prompt.parent_id == turns[0].event_id  # the prompt's parent is recorded now


def test_an_error_result_then_the_sdks_raise_is_one_failed_turn(hooks: MoltClaudeHooks) -> None:
    """The SDK yields the error result and then raises (ResultError): one error trajectory, not two."""
    from claude_agent_sdk import ResultMessage

    async def not_logged_in() -> Any:
        data = {"session_id": "s9", "transcript_path": "/dev/null", "cwd": "/", "hook_event_name": "UserPromptSubmit",
                "prompt": "help alpha"}
        await hooks._on_hook(data, None, {"signal": None})  # type: ignore[arg-type]
        yield ResultMessage(subtype="success", duration_ms=5, duration_api_ms=0, is_error=True, num_turns=1,
                            session_id="s9", result="Not logged in · Please run /login")
        raise RuntimeError("Claude Code returned an error result: Not logged in")

    async def consume(stream: Any) -> list[Any]:
        return [m async for m in stream]

    with pytest.raises(RuntimeError, match="Not logged in"):
        asyncio.run(consume(hooks.watch(not_logged_in())))
    evs = _events(hooks)
    assert len({e.trajectory_id for e in evs}) == 1
    [turn] = [e for e in evs if e.kind == EventKind.AGENT_STEP and e.name == "turn"]
    assert turn.outcome.status == OutcomeStatus.ERROR and "Please run /login" in str(turn.outcome.error)
