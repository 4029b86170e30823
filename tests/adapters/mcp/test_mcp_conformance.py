"""molt-mcp passes the adapter conformance suite: as middleware on an in-process server, and as a
recording proxy in front of one."""

from __future__ import annotations

import asyncio
from typing import Any

from molt.capture import Recorder
from molt.testing import AdapterCapabilities, AdapterConformanceSuite, Script
from molt_mcp import MoltMiddleware, recording_proxy

from .scripted import build_server, run_agent

# No model calls: MCP sees tools, resources and prompts. No approvals (elicitation is a server-to-client
# request outside the middleware). Each request is a root: MCP has no call tree.
CAPS = AdapterCapabilities(
    model_calls=False,
    streaming=False,
    async_=True,
    approvals=False,
    retrieval=True,
    usage=False,
    single_root=False,
    tool_call_ids=False,
    interventions=True,
)


class _Handle:
    """What the suite attaches: the server to talk to, and the capture behind it."""

    def __init__(self, target: Any, middleware: MoltMiddleware):
        self.target = target
        self.capture = middleware.capture
        self.instrumentor = middleware


class TestMCPMiddlewareConformance(AdapterConformanceSuite):
    adapter = "molt-mcp"
    framework = "mcp"
    framework_dist = "mcp"
    capabilities = CAPS

    def make_capture(self, recorder: Recorder, *, strict: bool) -> _Handle:
        mw = MoltMiddleware(recorder, server_name="kb", strict=strict)
        return _Handle(build_server([mw]), mw)

    def make_versioned_capture(self, recorder: Recorder, *, versions: Any) -> _Handle:
        mw = MoltMiddleware(recorder, server_name="kb", tenant_id="conformance", agent_id="server", versions=versions)
        return _Handle(build_server([mw]), mw)

    def run_scripted_agent(self, handle: Any, script: Script) -> str:
        return asyncio.run(self.arun_scripted_agent(handle, script))

    async def arun_scripted_agent(self, handle: Any, script: Script) -> str:
        return await run_agent(handle.target if handle is not None else build_server(), script)


class TestMCPProxyConformance(TestMCPMiddlewareConformance):
    """The same story through :func:`recording_proxy` fronting the (unchanged) server."""

    def make_capture(self, recorder: Recorder, *, strict: bool) -> _Handle:
        proxy = recording_proxy(build_server(), recorder, strict=strict)
        return _Handle(proxy, proxy.middleware[-1])
