"""A recording proxy: an MCP server that fronts an existing one, unchanged, and records its traffic.

The proxy forwards ``tools/*``, ``resources/*`` and ``prompts/*`` to the upstream server (a command
over stdio, or a streamable-HTTP URL) and records every call with :class:`MoltMiddleware`. Point an
MCP client at the proxy instead of the server::

    python -m molt_mcp.proxy -- python my_server.py --its-args

serves the proxy on stdio (so it drops in wherever the server's command was configured), spooling
events under ``$MOLT_HOME`` (or ``--home``: MCP clients start servers with a bare environment) until
``molt spool deliver`` puts them in the store.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.server import Server

from .middleware import MoltMiddleware

__all__ = ["main", "recording_proxy"]


def recording_proxy(
    upstream: StdioServerParameters | str | Any,
    recorder: Any = None,
    *,
    name: str | None = None,
    **options: Any,
) -> Server[Any]:
    """A low-level MCP :class:`~mcp.server.Server` that forwards to ``upstream`` and records each call.

    Args:
        upstream: the server to front: ``StdioServerParameters`` (a command), a streamable-HTTP URL,
            or an in-process ``Server``/``MCPServer`` — anything :class:`mcp.Client` connects to.
        recorder: the :class:`molt.capture.Recorder` (default: the process default Recorder).
        name: the proxy's server name (default ``molt-proxy``); also ``server_name`` in events
            unless ``options`` sets it.
        options: passed to :class:`MoltMiddleware` (``tenant_id``, ``strict``, …).

    The upstream connection opens with the proxy's lifespan (once per client connection).
    """

    @asynccontextmanager
    async def lifespan(_server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        async with Client(upstream) as client:
            yield {"upstream": client}

    def up(ctx: Any) -> Client:
        return ctx.lifespan_context["upstream"]  # type: ignore[no-any-return]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return await up(ctx).list_tools(cursor=getattr(params, "cursor", None))

    async def call_tool(ctx: Any, params: Any) -> Any:
        return await up(ctx).call_tool(params.name, params.arguments)

    async def list_resources(ctx: Any, params: Any) -> Any:
        return await up(ctx).list_resources(cursor=getattr(params, "cursor", None))

    async def list_resource_templates(ctx: Any, params: Any) -> Any:
        return await up(ctx).list_resource_templates(cursor=getattr(params, "cursor", None))

    async def read_resource(ctx: Any, params: Any) -> Any:
        return await up(ctx).read_resource(str(params.uri))

    async def list_prompts(ctx: Any, params: Any) -> Any:
        return await up(ctx).list_prompts(cursor=getattr(params, "cursor", None))

    async def get_prompt(ctx: Any, params: Any) -> Any:
        return await up(ctx).get_prompt(params.name, params.arguments)

    server: Server[Any] = Server(
        name or "molt-proxy",
        lifespan=lifespan,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )
    options.setdefault("server_name", name or _upstream_name(upstream))
    server.middleware.append(MoltMiddleware(recorder, **options))
    return server


def _upstream_name(upstream: Any) -> str:
    if isinstance(upstream, str):
        return upstream
    if isinstance(upstream, StdioServerParameters):
        return " ".join([upstream.command, *upstream.args])[:200]
    return str(getattr(upstream, "name", None) or type(upstream).__name__)


def main(argv: list[str] | None = None) -> None:
    """``python -m molt_mcp.proxy [--tenant T] -- COMMAND [ARGS…]``: serve a recording proxy on stdio."""
    import anyio
    from mcp.server.stdio import stdio_server

    parser = argparse.ArgumentParser(prog="python -m molt_mcp.proxy", description=__doc__.splitlines()[0])
    parser.add_argument("--tenant", help="tenant id put on every event")
    parser.add_argument("--agent", help="agent id put on every event (the name the control plane evolves)")
    parser.add_argument("--home", help="Molt's data directory (default $MOLT_HOME or ~/.molt): MCP clients "
                                       "launch servers without the user's environment, so name it here")
    parser.add_argument("--url", help="front a streamable-HTTP server at this URL instead of a command")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the upstream server's command line")
    args = parser.parse_args(argv)
    cmd = [a for a in args.command if a != "--"]
    if not cmd and not args.url:
        parser.error("give the upstream server's command after --, or --url")
    if args.home:
        import os

        os.environ["MOLT_HOME"] = args.home  # the default Recorder spools under it
    upstream: StdioServerParameters | str = args.url or StdioServerParameters(command=cmd[0], args=cmd[1:])
    server = recording_proxy(upstream, tenant_id=args.tenant, agent_id=args.agent)

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":  # pragma: no cover - exercised through a subprocess in the tests
    main(sys.argv[1:])
