"""molt-mcp beyond the conformance suite: linking to a caller's trajectory, legacy sessions, the
proxy in front of a real stdio server, the ``python -m molt_mcp.proxy`` command, the framework check
and the README quickstart."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from molt.atdp import EventKind, OutcomeStatus, new_id
from molt.capture import MemorySink, Recorder
from molt.testing import Script
from molt_mcp import MoltMiddleware, recording_proxy

from .scripted import build_server, run_agent

ROOT = Path(__file__).resolve().parents[3]
SCRIPTED = Path(__file__).with_name("scripted.py")



def _events(capture: Any, rec: Any) -> list[Any]:
    assert capture.flush(10, deliver=True)
    sink = rec.sink_
    rows = list(sink.events.values())
    tids = sorted({(r.x if hasattr(r, "x") else r["x"])["trajectory_id"] for r in rows})
    return [e for t in tids for e in sink.trajectory_events(t)]


def test_meta_links_calls_into_the_callers_trajectory(rec: Any) -> None:
    mw = MoltMiddleware(rec, strict=True)
    server = build_server([mw])
    tid, parent = rec.new_trajectory(), new_id()

    async def go() -> None:
        async with Client(server) as c:
            await c.call_tool("lookup", {"query": "mu"}, meta={"io.molt/trajectory": tid, "io.molt/parent": parent})
            await c.call_tool(
                "lookup", {"query": "nu"}, meta={"traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"}
            )

    asyncio.run(go())
    evs = _events(mw, rec)
    linked = [e for e in evs if e.trajectory_id == tid]
    assert len(linked) == 1 and linked[0].parent_id == parent
    assert len({e.trajectory_id for e in evs}) == 2


def test_legacy_sessions_are_one_trajectory_each(rec: Any) -> None:
    mw = MoltMiddleware(rec, strict=True)
    server = build_server([mw])

    async def one(m: str) -> None:
        async with Client(server, mode="legacy") as c:
            await c.call_tool("lookup", {"query": m})
            await c.read_resource(f"kb://docs/{m}")

    async def both() -> None:
        await asyncio.gather(one("xi"), one("omicron"))

    asyncio.run(both())
    evs = _events(mw, rec)
    by_tid: dict[str, set[str]] = {}
    for e in evs:
        by_tid.setdefault(e.trajectory_id, set()).add("xi" if "xi" in e.model_dump_json() else "omicron")
    assert sorted(map(sorted, by_tid.values())) == [["omicron"], ["xi"]]
    [ret] = [e for e in evs if e.kind == EventKind.RETRIEVAL and "xi" in e.action.query]
    assert ret.observation.passages[0].doc_id == "kb://docs/xi"


def test_unknown_resource_is_an_error_outcome(rec: Any) -> None:
    mw = MoltMiddleware(rec, strict=True)
    server = build_server([mw])

    async def go() -> None:
        async with Client(server) as c:
            with pytest.raises(Exception, match=r"nknown resource|not found"):
                await c.read_resource("nope://missing")

    asyncio.run(go())
    [ev] = _events(mw, rec)
    assert ev.kind == EventKind.RETRIEVAL and ev.outcome.status == OutcomeStatus.ERROR


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")

    __repr__ = __str__


def test_a_request_of_the_wrong_shape_costs_its_text_not_the_event(rec: Any) -> None:
    """Params that are not a mapping and a request id that cannot print itself: the call is still
    recorded (strict mode turns a mapper exception into a failure)."""
    from mcp.server.context import ServerRequestContext

    mw = MoltMiddleware(rec, strict=True)

    async def go() -> None:
        for params, req_id in ((["not", "a", "mapping"], 7), ({"name": "lookup"}, _Unprintable())):
            ctx = ServerRequestContext(session=None, lifespan_context={}, protocol_version="2026-07-28",
                                       method="tools/call", params=params, request_id=req_id)

            async def ok(c: Any) -> Any:
                return {"content": [{"type": "text", "text": "done"}]}

            await mw(ctx, ok)

    asyncio.run(go())
    evs = _events(mw, rec)
    assert [e.kind for e in evs] == [EventKind.TOOL_CALL, EventKind.TOOL_CALL] and mw.stats.errors == 0
    assert evs[1].metadata.tags["mcp_request_id"] == "<unprintable _Unprintable>"


@pytest.mark.slow
def test_proxy_in_front_of_a_stdio_server(rec: Any) -> None:
    upstream = StdioServerParameters(command=sys.executable, args=[str(SCRIPTED)], env=dict(os.environ))
    proxy = recording_proxy(upstream, rec, tenant_id="acme", strict=True)
    assert asyncio.run(run_agent(proxy, Script(marker="pi"))) == "done: pi"
    evs = _events(proxy.middleware[-1], rec)
    assert [e.kind for e in evs] == [
        EventKind.TOOL_CALL,
        EventKind.TOOL_CALL,
        EventKind.RETRIEVAL,
        EventKind.AGENT_STEP,
    ]
    assert evs[1].outcome.status == OutcomeStatus.ERROR and "pi" in evs[1].outcome.error.message
    assert {e.metadata.tenant_id for e in evs} == {"acme"} and len({e.trajectory_id for e in evs}) == 1


@pytest.mark.slow
def test_proxy_command_spools_for_later_delivery(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # an MCP client launches the proxy without the user's environment: --home names MOLT_HOME
    env = {k: v for k, v in os.environ.items() if k != "MOLT_HOME"}
    cmd = StdioServerParameters(
        command=sys.executable,
        args=["-m", "molt_mcp.proxy", "--tenant", "acme", "--home", str(home), "--", sys.executable, str(SCRIPTED)],
        env=env,
    )
    assert asyncio.run(run_agent(cmd, Script(marker="rho"))) == "done: rho"
    sink = MemorySink()  # a later process with a sink delivers what the proxy spooled
    with Recorder(sink, spool_dir=home / "spool") as r:
        assert r.flush(10, deliver=True)
    rows = list(sink.events.values())
    assert len(rows) == 4
    tid = (rows[0].x if hasattr(rows[0], "x") else rows[0]["x"])["trajectory_id"]
    assert {e.metadata.tenant_id for e in sink.trajectory_events(tid)} == {"acme"}


def test_framework_version_is_checked_at_import() -> None:
    code = (
        "import importlib.metadata as m; v = m.version\n"
        "m.version = lambda d: '1.9.0' if d == 'mcp' else v(d)\n"
        "try:\n    import molt_mcp\n"
        "except Exception as e:\n    print(type(e).__name__, e, *getattr(e, '__notes__', []), sep='|')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.startswith("AdapterError|molt-mcp needs mcp>=2.0, but found 1.9.0.")



def test_the_proxy_command_starts_without_a_runtime_warning() -> None:
    proc = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "molt_mcp.proxy", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "RuntimeWarning" not in proc.stderr and "--home" in proc.stdout, proc.stderr
