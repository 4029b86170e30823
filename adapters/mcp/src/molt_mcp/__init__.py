"""Molt for MCP: server middleware that records every ``tools/call``, ``resources/read`` and
``prompts/get`` of an MCP server, and a recording proxy that fronts an existing server unchanged.

::

    from mcp.server.mcpserver import MCPServer
    from molt_mcp import MoltMiddleware

    server = MCPServer("orders", middleware=[MoltMiddleware(recorder)])
"""

from __future__ import annotations

from molt.capture.adapt import require_framework

require_framework("molt-mcp", "mcp", "2.0", 'pip install "mcp>=2.0"')

from .middleware import RECORDED_METHODS, MoltMiddleware  # noqa: E402

__all__ = ["RECORDED_METHODS", "MoltMiddleware", "__version__", "recording_proxy"]

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # Imported on first use, not here: `python -m molt_mcp.proxy` would otherwise find the module already
    # imported by this package and warn (runpy's RuntimeWarning) on every proxy start.
    if name == "recording_proxy":
        from .proxy import recording_proxy

        return recording_proxy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
