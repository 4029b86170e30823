"""Molt for the Claude Agent SDK: hooks that record prompts, tool calls, tool failures, sub-agents and
stops as ATDP events.

::

    from claude_agent_sdk import ClaudeAgentOptions, query
    from molt_claude_agent import MoltClaudeHooks

    options = MoltClaudeHooks(recorder).attach(ClaudeAgentOptions())
"""

from __future__ import annotations

from molt.capture.adapt import require_framework

require_framework("molt-claude-agent", "claude-agent-sdk", "0.1.0", 'pip install "claude-agent-sdk>=0.1.0"')

from .hooks import HOOK_EVENTS, MoltClaudeHooks  # noqa: E402

__all__ = ["HOOK_EVENTS", "MoltClaudeHooks", "__version__"]

__version__ = "0.1.0"
