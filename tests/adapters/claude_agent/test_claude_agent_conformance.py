"""molt-claude-agent passes the adapter conformance suite: the real Claude Agent SDK (``query()``, its
control protocol and hook dispatch) against a scripted CLI behind the SDK's ``Transport`` interface."""

from __future__ import annotations

import asyncio
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions

from molt.capture import Recorder
from molt.testing import AdapterCapabilities, AdapterConformanceSuite, Script
from molt_claude_agent import MoltClaudeHooks

from .scripted import run_query


class TestClaudeAgentConformance(AdapterConformanceSuite):
    adapter = "molt-claude-agent"
    framework = "claude-agent-sdk"
    framework_dist = "claude-agent-sdk"
    # Hooks see prompts, tools and stops, not the model calls between them (those are in the message
    # stream the caller reads), so no model-call, usage or call-id-in-generation checks. Retrieval and
    # approvals have no hook of their own (file search is a tool; approvals go through can_use_tool).
    capabilities = AdapterCapabilities(model_calls=False, usage=False, async_=True, approvals=False, retrieval=False,
                                interventions=True)

    def make_capture(self, recorder: Recorder, *, strict: bool) -> MoltClaudeHooks:
        return MoltClaudeHooks(recorder, strict=strict)

    def make_versioned_capture(self, recorder: Recorder, *, versions: Any) -> MoltClaudeHooks:
        return MoltClaudeHooks(recorder, tenant_id="conformance", agent_id="agent", versions=versions)

    def _options(self, handle: Any) -> ClaudeAgentOptions:
        return handle.attach(ClaudeAgentOptions()) if handle is not None else ClaudeAgentOptions()

    def run_scripted_agent(self, handle: Any, script: Script) -> str:
        return asyncio.run(run_query(self._options(handle), script))

    async def arun_scripted_agent(self, handle: Any, script: Script) -> str:
        return await run_query(self._options(handle), script)
