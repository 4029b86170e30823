"""An MCP server's tool description evolved by the control plane, end to end: an agent Molt did not write
(no ``@molt.replayable``, no ``metadata.task``) calls its model through the Molt gateway and its tools
through a real MCP server wrapped in :class:`molt_mcp.MoltMiddleware`. The server's own schema says
nothing about the station code's format, so the model passes the station's number without its ``ST-`` prefix,
the server rejects it and the users correct the answers. The real :class:`ControlPlane` clusters those
failures without labels, proposes a parameter-description edit from the server's error message,
replays it from the recordings (the server's own function as the replay's live tool), promotes it, and
the server's ``tools/list`` shows the edited schema: fresh requests then succeed, and the MCP events
carry the promoted version in ``provenance.policy_version``.

What this test shows is wiring, not efficacy: the model is a scripted fixture that reads its tool
schema by one rule (it keeps the code's prefix when the parameter's description shows one, as in
``'ST-217'``). Whether a real model reads an edited description the same way is not shown here:
SmolLM2-135M, the model this repo's efficacy tests run, makes no tool call at all in a tool-calling
loop (checked under many prompts), so a tool description cannot change what it does.

The gateway applies the same version to the agent's model requests too (as it does for every base-URL
agent), so a second client — one that calls its model directly, as an MCP host application does — sees
only what ``tools/list`` shows: its before → after is what fails if the edit never reaches ``tools/list``.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from molt.atdp import EventKind
from molt.backends import StubBackend
from molt.backends.base import ChatRequest, ToolCallOut
from molt.backends.chat_format import text_content
from molt.capture import Recorder
from molt.control.plane import ControlPlane, PlaneSettings
from molt.control.versions import AgentConfig, ModelPart
from molt.gateway import Gateway, create_app
from molt.gateway.binding import GatewayBinding
from molt.replay import AGENTS, LiveTools
from molt.store import Store
from molt_mcp import MoltMiddleware

TENANT, AGENT, MODEL = "default", "wheelhouse-bikes", "scripted"
#: The bike-share's stations: code → bikes there. A domain used nowhere else in the repo.
STATIONS = {f"ST-{200 + 7 * i}": (3 * i + 2) % 11 for i in range(40)}
BEFORE = [f"How many bikes are at station {c} right now?" for c in list(STATIONS)[:8]]
AFTER = [f"Are there bikes left at station {c}?" for c in list(STATIONS)[20:28]]
#: Requests nobody complains about (no tool needed): the rest of the window, the failures' base rate.
OTHER = ["What are your opening hours?", "Can I take a bike on the train?", "Do you rent child seats?",
         "Is there a day pass?", "Can two people share one account?", "Do the bikes have lights?",
         "Where do I report a flat tyre?", "Can I pause my membership?"]
SERVICE_ANSWER = "Our service desk answers that at any station's help point."
_CODE = re.compile(r"\b([A-Z]{2})-(\d+)\b")
_EXAMPLE = re.compile(r"'([A-Z]{2})-\d+'")


def station_status(station: str) -> str:
    """The server's tool logic (the MCP tool wraps it; replay calls it as its live tool)."""
    if station not in STATIONS:
        raise ToolError(f"ValueError: station {station!r} is not a station code: pass the code with its prefix, "
                        f"e.g. 'ST-217'")
    return f"{station}: {STATIONS[station]} bikes"


def build_server(mw: MoltMiddleware) -> MCPServer:
    server = MCPServer("wheelhouse", middleware=[mw])
    server.tool(description="Station status.")(station_status)  # the vague schema: what is a 'station'?
    return server


def decide(messages: list[dict[str, Any]],
           tools: list[dict[str, Any]] | None) -> tuple[str | None, dict[str, Any] | None]:
    """The scripted model: ``(answer, None)`` or ``(None, station_status arguments)``. It reads the
    ``station`` parameter's description: when it shows a code's prefix ('ST-217'), it passes the code as
    the user wrote it, else the station's number alone (what "station" means to it without a schema)."""
    question = next((text_content(m.get("content")) for m in messages if m.get("role") == "user"), "")
    results = [text_content(m.get("content")) for m in messages if m.get("role") == "tool"]
    m = _CODE.search(question)
    if m is None:
        return SERVICE_ANSWER, None
    if results:
        last = results[-1]
        if last.lower().startswith("error") or "not a station code" in last:
            return "Sorry, I could not check that station.", None
        got = re.search(r"(\d+) bikes", last)
        return (f"Station {m.group(0)} has {got.group(1)} bikes." if got else "Sorry, no answer."), None
    fn = next((t["function"] for t in tools or [] if t.get("function", {}).get("name") == "station_status"), None)
    if fn is None:
        return "I cannot check stations.", None
    desc = str(((fn.get("parameters") or {}).get("properties") or {}).get("station", {}).get("description") or "")
    shown = _EXAMPLE.search(desc)
    return None, {"station": m.group(0) if shown and shown.group(1) == m.group(1) else m.group(2)}


class ScriptedModel(StubBackend):
    """:func:`decide` as a backend (served by the gateway, and the plane's replay backend)."""

    def _answer(self, req: ChatRequest) -> tuple[str | None, list[ToolCallOut] | None, str]:
        self.calls += 1
        text, args = decide(req.messages, req.tools)
        if args is None:
            return text, None, text or ""
        call = ToolCallOut(id=f"call_{self.calls}", name="station_status", arguments=orjson.dumps(args).decode())
        return None, [call], f"<tool_call>station_status {call.arguments}</tool_call>"


def openai_tools(listed: Any) -> list[dict[str, Any]]:
    """MCP tools as the OpenAI tools an agent offers its model."""
    return [{"type": "function", "function": {"name": t.name, "description": t.description or "",
                                              "parameters": t.input_schema}} for t in listed.tools]


def result_text(res: Any) -> str:
    return "".join(getattr(c, "text", "") for c in res.content)


async def ask_through_gateway(http: httpx.AsyncClient, mcp: Client, question: str) -> tuple[str, str]:
    """The agent's loop: its model through the gateway (base URL only), its tools from the MCP server;
    each ``tools/call`` names the gateway's trajectory in ``_meta`` so both join one trajectory.
    Returns ``(answer, trajectory id)``."""
    tools = openai_tools(await mcp.list_tools())
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are the Wheelhouse bike-share assistant."},
                                      {"role": "user", "content": question}]
    tid = ""
    for _ in range(4):
        r = await http.post("/v1/chat/completions", headers={"x-molt-agent": AGENT},
                            json={"model": MODEL, "messages": messages, "tools": tools})
        assert r.status_code == 200, r.text
        tid = r.headers["x-molt-trajectory"]
        msg = r.json()["choices"][0]["message"]
        messages.append({k: v for k, v in msg.items() if v is not None})
        if not msg.get("tool_calls"):
            return msg.get("content") or "", tid
        for c in msg["tool_calls"]:
            meta: Any = {"io.molt/trajectory": tid}
            res = await mcp.call_tool(c["function"]["name"], orjson.loads(c["function"]["arguments"]), meta=meta)
            text = result_text(res)
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": f"Error: {text}" if res.is_error
                             else text})
    return "", tid


async def ask_directly(mcp: Client, question: str) -> str:
    """An MCP host that calls its model itself (no gateway): it sees only what ``tools/list`` shows."""
    tools = openai_tools(await mcp.list_tools())
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    for _ in range(4):
        text, args = decide(messages, tools)
        if args is None:
            return text or ""
        res = await mcp.call_tool("station_status", args)
        messages.append({"role": "tool", "content": ("Error: " if res.is_error else "") + result_text(res)})
    return ""


def right(question: str, answer: str) -> bool:
    code = _CODE.search(question)
    return code is not None and f"has {STATIONS[code.group(0)]} bikes" in answer


def test_plane_edits_an_mcp_tool_description_live(tmp_path: Path) -> None:
    asyncio.run(_scenario(tmp_path))


async def _scenario(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with Store.open(tmp_path / "store", auto_compact=False) as store:
        backend = ScriptedModel("scripted", model=MODEL)
        live = LiveTools()
        live.register("station_status", station_status)
        plane = ControlPlane(store, backend, live_tools=live, base_parts=AgentConfig(model=ModelPart(base=MODEL)),
                             settings=PlaneSettings(promote_directly=True, replay_sample=8, regression_sample=8))
        registry = plane.registry
        base = registry.ensure_base(TENANT, AGENT, AgentConfig(model=ModelPart(base=MODEL)))
        rec = Recorder(store, spool_dir=tmp_path / "spool", fsync="never")
        gw = Gateway([backend], recorder=rec, store=store)
        GatewayBinding(gw, registry, model=MODEL).sync()
        # One Recorder for the gateway and the middleware: events of one trajectory are chained in one
        # writer (two writers of one trajectory would each start their own chain).
        mw = MoltMiddleware(rec, server_name="wheelhouse", tenant_id=TENANT, agent_id=AGENT, versions=registry,
                            strict=True)
        server = build_server(mw)
        await gw.start()
        try:
            async with (httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(gw, manage_lifecycle=False)),
                                          base_url="http://gw") as http,
                        Client(server) as mcp):
                # Before: every station question fails (the server refuses the bare number); users correct.
                shown_before = (await mcp.list_tools()).tools[0]
                before, failed = [], []
                for q in BEFORE:
                    answer, tid = await ask_through_gateway(http, mcp, q)
                    before.append(right(q, answer))
                    code = _CODE.search(q)
                    assert code is not None
                    failed.append(tid)
                    body = {"trajectory_id": tid, "value": 0.0, "source": "user_correction",
                            "reason": f"Station {code.group(0)} has {STATIONS[code.group(0)]} bikes."}
                    (await http.post("/v1/molt/rewards/trajectory", json=body)).raise_for_status()
                for q in OTHER:
                    answer, tid = await ask_through_gateway(http, mcp, q)
                    body = {"trajectory_id": tid, "value": 1.0, "source": "user_feedback"}
                    (await http.post("/v1/molt/rewards/trajectory", json=body)).raise_for_status()
                direct_before = [right(q, await ask_directly(mcp, q)) for q in AFTER]
                assert mw.flush(10, deliver=True) and rec.flush(10, deliver=True)

                # The plane's cycle (in a worker thread: it runs its own event loop for the replays).
                assert AGENT not in AGENTS  # nothing registered the agent
                t_before = time.monotonic() - t0
                result = await asyncio.to_thread(plane.run_cycle, TENANT, AGENT)
                r = result.record
                assert result.choice == "tool_schema_edit", (r.reason, r.actions, r.rejected, r.candidates)
                chosen = next(c for c in r.candidates if c["kind"] == "tool_schema_edit")
                replay = chosen["evidence"]["replay"]
                assert replay["mode"] == "generic replay from the recording", replay
                version = result.version
                assert version is not None and version.status == "live"
                # The middleware follows the registry: a promotion through this registry object wakes its
                # poller at once (the poller runs on its own thread, so "at once" is a moment later).
                deadline = time.monotonic() + 10
                while mw.version_id != version.version_id and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                assert mw.version_id == version.version_id
                t_cycle = time.monotonic() - t0 - t_before

                # After: tools/list shows the plane's edit; fresh requests succeed through both clients.
                shown_after = (await mcp.list_tools()).tools[0]
                after, fresh = [], []
                for q in AFTER:
                    answer, tid = await ask_through_gateway(http, mcp, q)
                    after.append(right(q, answer))
                    fresh.append(tid)
                direct_after = [right(q, await ask_directly(mcp, q)) for q in AFTER]
                assert mw.flush(10, deliver=True) and rec.flush(10, deliver=True)
        finally:
            await gw.aclose()
            mw.close()
            rec.close()

        station_before = shown_before.input_schema["properties"]["station"]
        station_after = shown_after.input_schema["properties"]["station"]
        assert "ST-" not in str(station_before.get("description", ""))
        assert "ST-217" in station_after["description"], station_after  # the server's error, now in its schema
        assert shown_before.name == shown_after.name == "station_status"
        assert shown_after.input_schema["required"] == ["station"]  # the server's schema, only the note added

        # The MCP tool calls joined the gateway's trajectories and carry the version that served them.
        def mcp_calls(tids: list[str]) -> list[Any]:
            return [e for t in tids for e in store.trajectory(t).events
                    if e.kind == EventKind.TOOL_CALL and e.metadata is not None
                    and (e.metadata.tags or {}).get("mcp_server") == "wheelhouse"]

        old, new = mcp_calls(failed), mcp_calls(fresh)
        assert len(old) == len(BEFORE) and len(new) == len(AFTER)
        assert {e.provenance.policy_version for e in old} == {base.version_id}
        assert {e.provenance.policy_version for e in new} == {version.version_id}
        assert all(e.outcome.status == "error" for e in old) and all(e.outcome.status == "ok" for e in new)

    print(f"\nMCP tool edit by the plane (scripted model, wiring only): through the gateway "
          f"{sum(before)}/{len(before)} -> {sum(after)}/{len(after)}; a direct client reading tools/list "
          f"{sum(direct_before)}/{len(direct_before)} -> {sum(direct_after)}/{len(direct_after)} on fresh "
          f"requests; replay {replay['baseline_success_rate']:.2f} -> {replay['candidate_success_rate']:.2f}; "
          f"version {version.version_id}; {time.monotonic() - t0:.1f} s (traffic before {t_before:.1f} s, "
          f"plane cycle {t_cycle:.1f} s)")
    assert not any(before) and all(after)
    assert not any(direct_before) and all(direct_after)
