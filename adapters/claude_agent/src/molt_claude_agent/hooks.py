"""The object a Claude Agent SDK user attaches: :class:`MoltClaudeHooks`."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    HookContext,
    HookInput,
    HookJSONOutput,
    HookMatcher,
    ResultMessage,
)

from molt.capture.instrumentor import Instrumentor

from .mapping import HookMapper

__all__ = ["HOOK_EVENTS", "MoltClaudeHooks"]

#: The oldest claude-agent-sdk this adapter supports (checked at import and when the hooks are built).
FRAMEWORK_MIN = "0.1"

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


class MoltClaudeHooks(Instrumentor):
    """Claude Agent SDK hooks that record every prompt, tool call, tool failure, sub-agent and stop.

    Without ``versions=`` the hooks only observe: each returns ``{}`` (no decision), so the agent
    behaves exactly as without them. With ``versions=``, the ``UserPromptSubmit`` hook returns the live
    version of ``tenant_id``/``agent_id`` — its system prompt, memories (retrieved for the prompt) and
    skills, as the gateway's harness code renders them — as ``additionalContext``, which the SDK adds
    to the turn; that is as far as the SDK's hooks reach: the system prompt proper and the tool schemas
    are fixed in ``ClaudeAgentOptions`` when the session starts, so tool rewrites do not apply.

    A hook call costs the event loop a queue append; mapping and recording happen on Molt's
    dispatcher thread, and capture errors are counted in :attr:`stats`, never raised into the agent.

    Args:
        recorder: the :class:`~molt.capture.Recorder` (default: the process-wide one).
        **options: the :class:`~molt.capture.instrumentor.Instrumentor` options (``tenant_id``,
            ``agent_id``, ``task``, ``tags``, ``max_field_bytes``, ``blob_store``, ``strict``, ``versions``,
            ``harness``, ``version_poll_s``, ``capture``).

    Example::

        hooks = MoltClaudeHooks(recorder, tenant_id="acme", agent_id="coder")
        options = hooks.attach(ClaudeAgentOptions(allowed_tools=["Read"]))
        async for message in hooks.watch(query(prompt="Summarise README.md", options=options)):
            ...
    """

    integration = "molt-claude-agent"
    framework = "claude-agent-sdk"
    framework_dist = "claude-agent-sdk"
    framework_min = FRAMEWORK_MIN
    framework_below = "1"
    install = 'pip install "claude-agent-sdk>=0.1,<1"'
    version_hook = "UserPromptSubmit additionalContext (system prompt, memories, skills; no tool rewrites)"

    def __init__(self, recorder: Any = None, **options: Any):
        super().__init__(recorder, **options)
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
        answer: HookJSONOutput = {}
        try:
            data = dict(input_data)
            if self.live is not None and data.get("hook_event_name") == "UserPromptSubmit":
                answer = self._version_context(str(data.get("prompt") or ""))
            self.capture.submit(self._mapper.on_hook, data, tool_use_id, time.time_ns())
        except Exception as exc:  # never into the agent
            self.capture.fail(exc)
        return answer

    async def watch(self, messages: AsyncIterable[Any]) -> AsyncIterator[Any]:
        """The SDK's message stream, passed through unchanged, with how the run ended recorded.

        Hooks never hear of a run that fails — Claude Code not logged in, an API error, the CLI
        crashing — so without this its turn is never closed and its trajectory looks healthy. An error
        result (``ResultMessage.is_error``) or an exception from the stream ends the turn as an error;
        the exception is re-raised. One failure is one error turn: the SDK raises after yielding an error
        result (``ResultError``), which ends the turn the result already ended, not a second one; an
        exception alone ends the turn of the last session the stream named. An assistant message's
        ``msg_…`` id joins the run to the trajectory of the gateway that answered it, when the hooks
        record through that gateway (:class:`molt.capture.handover.GatewayRecorder`).
        ``async for message in hooks.watch(query(prompt=…, options=…))``.
        """
        session: str | None = None
        failed = False
        try:
            async for message in messages:
                session = getattr(message, "session_id", None) or session
                if isinstance(message, AssistantMessage) and message.message_id:
                    self._answered(session, message)
                if isinstance(message, ResultMessage) and message.is_error:
                    why = "; ".join(message.errors or []) or message.result or message.subtype
                    self._run_failed(message.session_id, f"the run failed ({message.subtype}): {why}")
                    failed = True
                yield message
        except Exception as exc:
            if not failed:
                self._run_failed(session, f"the run raised {type(exc).__name__}: {exc}")
            raise

    def _answered(self, session: str | None, message: Any) -> None:
        try:
            self.capture.submit(self._mapper.answered, session, str(message.message_id), message.model,
                                time.time_ns())
        except Exception as exc:  # never into the agent
            self.capture.fail(exc)

    def _run_failed(self, session: str | None, reason: str) -> None:
        try:
            self.capture.submit(self._mapper.run_failed, session, reason, time.time_ns())
        except Exception as exc:  # never into the agent
            self.capture.fail(exc)

    def _version_context(self, prompt: str) -> HookJSONOutput:
        """The live version rendered by the harness as the system text of this prompt, as context."""
        try:
            applied = self.apply_version([{"role": "user", "content": prompt}], None)
            first = applied.messages[0] if applied.messages else {}
            if applied.fingerprint is None or first.get("role") != "system" or not first.get("content"):
                return {}
            return {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                           "additionalContext": str(first["content"])}}
        except Exception as exc:  # never into the agent
            self.capture.fail(exc)
            return {}
