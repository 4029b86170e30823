"""The object a Claude Agent SDK user attaches: :class:`MoltClaudeHooks`."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, HookContext, HookInput, HookJSONOutput, HookMatcher

from molt.capture.adapt import Capture, CaptureStats, distribution_version

from .mapping import HookMapper

__all__ = ["HOOK_EVENTS", "MoltClaudeHooks"]

#: The SDK hook events Molt subscribes to.
HOOK_EVENTS = (
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "SubagentStart",
    "SubagentStop",
    "Stop",
)


class MoltClaudeHooks:
    """Claude Agent SDK hooks that record every prompt, tool call, tool failure, sub-agent and stop.

    The hooks only observe: each returns ``{}`` (no decision), so the agent behaves exactly as without
    them. A hook call costs the event loop a queue append; mapping and recording happen on Molt's
    dispatcher thread, and capture errors are counted in :attr:`stats`, never raised into the agent.

    Args:
        recorder: the :class:`~molt.capture.Recorder` (default: the process-wide one).
        strict: raise the first capture error from :meth:`flush` (tests).
        **capture_options: :class:`~molt.capture.adapt.Capture` options (``tenant_id``, ``agent_id``,
            ``task``, ``tags``, ``max_field_bytes``, ``blob_store``, …).

    Example::

        options = MoltClaudeHooks(recorder).attach(ClaudeAgentOptions(allowed_tools=["Read"]))
        async for message in query(prompt="Summarise README.md", options=options):
            ...
    """

    def __init__(self, recorder: Any = None, *, strict: bool = False, **capture_options: Any):
        self.capture = Capture(
            recorder,
            integration="molt-claude-agent",
            framework="claude-agent-sdk",
            framework_version=distribution_version("claude-agent-sdk"),
            strict=strict,
            **capture_options,
        )
        self._mapper = HookMapper(self.capture)

    def hooks(self) -> dict[Any, list[HookMatcher]]:
        """``ClaudeAgentOptions.hooks`` entries: one matcher (all tools) per event in :data:`HOOK_EVENTS`."""
        return {name: [HookMatcher(matcher=None, hooks=[self._on_hook])] for name in HOOK_EVENTS}

    def attach(self, options: ClaudeAgentOptions | None = None) -> ClaudeAgentOptions:
        """A copy of ``options`` with Molt's hooks added after any hooks already there."""
        options = options if options is not None else ClaudeAgentOptions()
        merged: dict[Any, list[HookMatcher]] = {k: list(v) for k, v in (options.hooks or {}).items()}
        for name, matchers in self.hooks().items():
            merged.setdefault(name, []).extend(matchers)
        return dataclasses.replace(options, hooks=merged)

    async def _on_hook(self, input_data: HookInput, tool_use_id: str | None, context: HookContext) -> HookJSONOutput:
        try:
            self.capture.submit(self._mapper.on_hook, dict(input_data), tool_use_id, time.time_ns())
        except Exception as exc:  # never into the agent
            self.capture.fail(exc)
        return {}

    def flush(self, timeout: float | None = 10.0, *, deliver: bool = False) -> bool:
        """Wait until every hook so far is recorded (see :meth:`Capture.flush`); False on timeout."""
        return self.capture.flush(timeout, deliver=deliver)

    @property
    def stats(self) -> CaptureStats:
        """Capture counters (events, drops, errors, open spans)."""
        return self.capture.stats
