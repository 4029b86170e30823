"""The live policy version applied by an MCP server's middleware: ``tools/list`` shows the version's
tool description (and name), a ``tools/call`` of the renamed tool reaches the server's own tool, the
events carry the version, and an unreachable registry never breaks the server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from molt.atdp import EventKind, ToolCall
from molt.capture import MemorySink, Recorder
from molt.control.versions import AgentConfig, ModelPart, VersionRegistry
from molt.harness import ToolRewrite
from molt_mcp import MoltMiddleware

TENANT, AGENT = "observatory", "sky-desk"
OWN_DESCRIPTION = "Get data."
EDITED = "Cloud cover (percent) over an observatory site, by the site's code (e.g. 'LP-3')."


def build(mw: MoltMiddleware) -> MCPServer:
    server = MCPServer("sky", middleware=[mw])

    @server.tool(description=OWN_DESCRIPTION)
    def get_data(site: str) -> str:
        return f"cloud cover at {site}: 12%"

    return server



@pytest.fixture()
def rec(tmp_path: Path) -> Iterator[tuple[Recorder, MemorySink]]:
    sink = MemorySink()
    r = Recorder(sink, spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0)
    yield r, sink
    r.close()


def _events(sink: MemorySink) -> list[Any]:
    tids = {r.x["trajectory_id"] for r in sink.events.values()}
    return [e for t in sorted(tids) for e in sink.trajectory_events(t)]


async def _session(server: MCPServer, call_as: str | None = None) -> tuple[dict[str, str], str | None]:
    async with Client(server) as c:
        listed = await c.list_tools()
        shown = {t.name: t.description or "" for t in listed.tools}
        text = None
        if call_as is not None:
            res = await c.call_tool(call_as, {"site": "LP-3"})
            assert not res.is_error, res
            text = res.content[0].text
        return shown, text


def test_tools_list_shows_the_live_version_and_a_renamed_call_maps_back(
        registry: VersionRegistry, rec: tuple[Recorder, MemorySink]) -> None:
    recorder, sink = rec
    base = registry.ensure_base(TENANT, AGENT, AgentConfig(model=ModelPart(base="any")))
    fixed = registry.create(TENANT, AGENT, base.parts.with_tools(
        {"get_data": ToolRewrite(description=EDITED, rename="cloud_cover")}), parent=base.version_id,
        note="tool description: which data, keyed by what")
    mw = MoltMiddleware(recorder, tenant_id=TENANT, agent_id=AGENT, versions=registry, strict=True)
    server = build(mw)
    try:
        before, _ = asyncio.run(_session(server, call_as="get_data"))
        assert before == {"get_data": OWN_DESCRIPTION}
        registry.promote(fixed.version_id, actor="control-plane")
        deadline = time.monotonic() + 10
        while mw.version_id != fixed.version_id and time.monotonic() < deadline:
            time.sleep(0.05)
        after, answer = asyncio.run(_session(server, call_as="cloud_cover"))
        assert mw.flush(10, deliver=True)
    finally:
        mw.close()
    assert after == {"cloud_cover": EDITED}  # what the client sees is the version's tool
    assert answer == "cloud cover at LP-3: 12%"  # ... and calling it by that name reached the server's own
    calls = [e for e in _events(sink) if e.kind == EventKind.TOOL_CALL]
    assert [(e.action.tool_name, e.provenance.policy_version) for e in calls if isinstance(e.action, ToolCall)] == [
        ("get_data", base.version_id), ("get_data", fixed.version_id)]
    assert calls[1].provenance.harness_fingerprint is not None


def test_an_unreachable_registry_keeps_the_last_version_and_never_breaks_the_server(
        registry: VersionRegistry, switchable: Any, rec: tuple[Recorder, MemorySink]) -> None:
    recorder, _ = rec
    base = registry.ensure_base(TENANT, AGENT, AgentConfig(model=ModelPart(base="any")))
    fixed = registry.create(TENANT, AGENT, base.parts.with_tools({"get_data": ToolRewrite(description=EDITED)}),
                            parent=base.version_id)
    registry.promote(fixed.version_id, actor="control-plane")

    source = switchable
    mw = MoltMiddleware(recorder, tenant_id=TENANT, agent_id=AGENT, versions=source, version_poll_s=0.05)
    try:
        source.down = True
        time.sleep(0.3)
        assert mw.live is not None and mw.live.errors >= 2
        shown, answer = asyncio.run(_session(build(mw), call_as="get_data"))
    finally:
        mw.close()
    assert shown == {"get_data": EDITED} and answer == "cloud cover at LP-3: 12%"


def test_without_versions_tools_list_is_untouched(rec: tuple[Recorder, MemorySink]) -> None:
    shown, _ = asyncio.run(_session(build(MoltMiddleware(rec[0]))))
    assert shown == {"get_data": OWN_DESCRIPTION}
