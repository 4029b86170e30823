"""The conformance story for MCP: a server with ``lookup``/``explode`` tools, a ``kb://`` resource and a
prompt, and a client "agent" that calls them in turn. Also runnable as a stdio server
(``python scripted.py``) for the proxy tests."""

from __future__ import annotations

import json
from typing import Any

from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, TextContent

from molt.testing import FAIL_TOOL, HUGE_TEXT_CHARS, OK_TOOL, Script, huge_blob


def build_server(middleware: list[Any] | None = None) -> MCPServer:
    """The scripted MCP server."""
    server = MCPServer("kb", middleware=middleware or [])

    @server.tool(name=OK_TOOL)
    def lookup(query: str) -> Any:
        """Look something up."""
        if query.endswith(" huge"):
            data = huge_blob().split(",", 1)[1]
            return [
                TextContent(type="text", text=f"result for {query} " + "lorem ipsum " * (HUGE_TEXT_CHARS // 12)),
                ImageContent(type="image", data=data, mime_type="image/png"),
            ]
        return f"result for {query}"

    @server.tool(name=FAIL_TOOL)
    def explode(reason: str) -> str:
        """Always fails."""
        raise ToolError(f"explode failed for {reason}")

    @server.resource("kb://docs/{topic}")
    def doc(topic: str) -> str:
        """Passages about a topic."""
        return json.dumps([f"passage one about {topic}", f"passage two about {topic}"])

    @server.prompt()
    def answer(topic: str) -> str:
        """The answer prompt."""
        return f"Answer about {topic} from the passages."

    return server


async def run_agent(target: Any, script: Script) -> str:
    """A client session that plays the story against ``target`` (a server object or transport)."""
    m = script.marker
    async with Client(target) as client:
        ok = await client.call_tool(OK_TOOL, {"query": m + (" huge" if script.huge_output else "")})
        bad = await client.call_tool(FAIL_TOOL, {"reason": m})
        assert not ok.is_error and bad.is_error
        await client.read_resource(f"kb://docs/{m}")
        await client.get_prompt("answer", {"topic": m})
    return f"done: {m}"


if __name__ == "__main__":
    build_server().run("stdio")
