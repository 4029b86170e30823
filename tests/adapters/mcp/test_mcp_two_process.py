"""The README's two-process setup, as written: a real ``molt serve`` and a real MCP server process (stdio,
launched by the MCP client), the agent's model calls through the gateway and each ``tools/call`` naming
the gateway's trajectory in ``_meta``.

The middleware records through :class:`molt.capture.handover.GatewayRecorder`, so the gateway is each
trajectory's one writer: every chain verifies (``molt verify``), each run is one trajectory of one tenant
and one agent, and the MCP server's tool calls are in the record the plane reads. (With a Recorder of the
server's own, as the README said before, the two processes continued one chain each and none verified.)
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from molt.gateway.loopback import free_port, wait_healthy

RUNS = 6
TENANT, AGENT = "acme", "kb"

README = Path(__file__).resolve().parents[3] / "adapters" / "mcp" / "README.md"
_BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
#: The README's two blocks, as written: the server (a process of its own) and the agent.
SERVER_BLOCK = next(b for b in _BLOCKS if b.startswith("# kb_server.py"))
AGENT_BLOCK = next(b for b in _BLOCKS if b.startswith("# the agent:"))

TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look something up.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]


@pytest.fixture
def molt_serve(tmp_path: Path):
    port = free_port("127.0.0.1")
    home = tmp_path / "molt"
    env = {**os.environ, "MOLT_HOME": str(home)}
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "molt.cli", "serve", "--backend", "stub", "--port", str(port),
                             "--evolve-every", "0"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout_s=300, detail=lambda: (tmp_path / "serve.log").read_text()[-3000:])
        yield url, home, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        log.close()


async def _agent(url: str, server_py: Path) -> list[str]:
    """RUNS runs of an agent: model calls through the gateway, tool calls through the MCP server with
    the gateway's trajectory id in ``_meta``; the trajectory ids the gateway answered with."""
    from openai import AsyncOpenAI

    llm = AsyncOpenAI(base_url=url + "/v1", api_key="sk-local", max_retries=0,
                      default_headers={"X-Molt-Agent": AGENT, "X-Molt-Tenant": TENANT})
    params = StdioServerParameters(command=sys.executable, args=[str(server_py)], env=dict(os.environ))
    tids = []
    async with Client(params) as mcp:
        for i in range(RUNS):
            messages: list[dict] = [{"role": "user", "content":
                                     f'Where is parcel {i}? [[stub:call=lookup {{"query": "parcel {i}"}}]]'}]
            tid = None
            for _ in range(3):
                raw = await llm.chat.completions.with_raw_response.create(model="stub", messages=messages, tools=TOOLS)
                tid = tid or raw.headers["x-molt-trajectory"]
                assert raw.headers["x-molt-trajectory"] == tid  # the gateway continues its own trajectory
                reply = raw.parse().choices[0].message
                if not reply.tool_calls:
                    break
                messages.append(reply.model_dump(exclude_none=True))
                for call in reply.tool_calls:
                    res = await mcp.call_tool(call.function.name, json.loads(call.function.arguments),
                                              meta={"io.molt/trajectory": tid})
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": res.content[0].text})
            assert reply.content and "parcel" in reply.content, reply
            tids.append(tid)
    return tids


def test_two_processes_one_writer_every_chain_verifies(molt_serve, tmp_path: Path) -> None:
    url, home, proc = molt_serve
    hostport = url.removeprefix("http://")
    server_py = tmp_path / "kb_server.py"
    server_py.write_text(SERVER_BLOCK.replace("127.0.0.1:8000", hostport))
    tids = asyncio.run(_agent(url, server_py))
    assert len(set(tids)) == RUNS
    # the README's agent, as written, once (its own run: one more trajectory)
    agent_py = tmp_path / "agent.py"
    agent_py.write_text(AGENT_BLOCK.replace("127.0.0.1:8000", hostport))
    out = subprocess.run([sys.executable, str(agent_py)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ))
    assert out.returncode == 0 and "parcel 7" in out.stdout, out.stdout + out.stderr[-3000:]

    from molt.store import Store

    # the MCP server flushed before it exited; the gateway stores what it accepted a moment later
    deadline = time.monotonic() + 60
    while True:
        with Store.open(home / "store", auto_compact=False) as s:
            by_tid = {t: s.trajectory(t).events for t in s.trajectory_ids()}
        mcp_calls = {t: [e for e in evs if e.provenance.integration == "molt-mcp"] for t, evs in by_tid.items()}
        if (len(by_tid) == RUNS + 1 and all(mcp_calls.values())) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert set(tids) < set(by_tid) and len(by_tid) == RUNS + 1, sorted(by_tid)
    proc.terminate()
    proc.wait(timeout=60)

    for t in by_tid:
        evs = by_tid[t]
        # the server's tool call is in the gateway's trajectory: one record, one tenant, one agent
        assert [e.name for e in mcp_calls[t]] == ["lookup"], [(e.kind, e.name, e.provenance.integration) for e in evs]
        assert mcp_calls[t][0].outcome.output is not None
        assert {e.metadata.tenant_id for e in evs} == {TENANT}
        assert {e.metadata.agent_id for e in evs} == {AGENT}
        assert sum(e.kind == "model_call" for e in evs) == 2

    out = subprocess.run([sys.executable, "-m", "molt.cli", "verify"], capture_output=True, text=True,
                         env={**os.environ, "MOLT_HOME": str(home), "COLUMNS": "200"}, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    # the in-test runs and the README agent's own: every trajectory the store holds verifies
    assert f"{RUNS + 1} of {RUNS + 1} trajectories verify" in out.stdout, out.stdout
