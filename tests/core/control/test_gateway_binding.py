"""The gateway serves each tenant's live composite version: harness, tool rewrites, memories and skills
applied to the request, the version stamped into provenance; rollback switches the next requests."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from molt.backends import StubBackend
from molt.capture import Recorder
from molt.control.memory import MemoryStore, RetrievalHarness
from molt.control.versions import AgentConfig, ModelPart, VersionRegistry
from molt.gateway import Gateway, create_app
from molt.gateway.binding import GatewayBinding
from molt.governance.access import KeyRing
from molt.harness import ToolRewrite
from molt.store import Store

KEYS = {"sk-acme": ("acme", "agent_writer"), "sk-globex": ("globex", "agent_writer")}


class Seen(StubBackend):
    """The stub model, keeping every request it was sent."""

    def __init__(self) -> None:
        super().__init__("stub-0", model="smollm2")
        self.requests: list[Any] = []

    def _answer(self, req: Any) -> Any:
        self.requests.append(req)
        return super()._answer(req)


TOOL = {"type": "function", "function": {
    "name": "lookup_order", "description": "Look up an order.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}}


async def _chat(client: httpx.AsyncClient, key: str, text: str) -> httpx.Response:
    r = await client.post("/v1/chat/completions", headers={"authorization": f"Bearer {key}", "x-molt-agent": "support"},
                          json={"model": "smollm2", "messages": [{"role": "user", "content": text}], "tools": [TOOL]})
    assert r.status_code == 200, r.text
    return r


def _system(req: Any) -> str:
    m = req.messages[0]
    return m["content"] if m.get("role") == "system" else ""


def test_live_version_applied_and_rollback_switches(tmp_path: Path) -> None:
    asyncio.run(_scenario(tmp_path))


async def _scenario(tmp_path: Path) -> None:
    with Store.open(tmp_path / "store") as store:
        reg = VersionRegistry(store)
        mem = MemoryStore(store)
        refund = mem.add_memory("acme", "Acme's refund window is 45 days from delivery.", agent_id="support")
        mem.add_memory("acme", "The Lisbon warehouse closes on Sundays.", agent_id="support")
        other = mem.add_memory("globex", "Globex refunds take 90 days.", agent_id="support")
        base = reg.ensure_base("acme", "support", AgentConfig(model=ModelPart(base="smollm2")))
        v2 = reg.create("acme", "support", base.parts.with_system_prompt("Always be brief.")
                        .with_memories([refund.memory_id, other.memory_id])
                        .with_tools({"lookup_order": ToolRewrite(description="Look up an order by its A- id.")}),
                        parent=base.version_id)
        reg.ensure_base("globex", "support", AgentConfig(model=ModelPart(base="smollm2")))

        backend = Seen()
        rec = Recorder(store, spool_dir=tmp_path / "spool", fsync="never")
        gw = Gateway([backend], recorder=rec, store=store, keyring=KeyRing.from_mapping(KEYS),
                     harness=RetrievalHarness(mem))
        binding = GatewayBinding(gw, reg, model="smollm2")
        binding.sync()
        reg.promote(v2.version_id, actor="test")            # the listener rebinds the gateway
        app = create_app(gw, manage_lifecycle=False)
        await gw.start()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
                r = await _chat(client, "sk-acme", "How long is the refund window?")
                assert r.headers["x-molt-policy-version"] == v2.version_id
                sent = backend.requests[-1]
                system = _system(sent)
                assert "Always be brief." in system and "45 days" in system
                assert "Globex" not in system                   # another tenant's memory id is never served
                assert sent.tools[0]["function"]["description"] == "Look up an order by its A- id."
                tid = r.headers["x-molt-trajectory"]

                r = await _chat(client, "sk-globex", "How long is the refund window?")
                assert r.headers["x-molt-policy-version"].startswith("support@globex:")
                assert "45 days" not in _system(backend.requests[-1])

                back = reg.rollback("acme", "support", actor="test", reason="regression")
                assert back.version_id == base.version_id and back.parts_bytes == base.parts_bytes
                r = await _chat(client, "sk-acme", "How long is the refund window?")
                assert r.headers["x-molt-policy-version"] == base.version_id
                assert "45 days" not in _system(backend.requests[-1])
                assert backend.requests[-1].tools[0]["function"]["description"] == "Look up an order."
                models = (await client.get("/v1/models", headers={"authorization": "Bearer sk-globex"})).json()
                ids = [m["id"] for m in models["data"]]
                assert "smollm2" in ids and not any("#" in i or "@acme" in i for i in ids)
        finally:
            await gw.aclose()
            rec.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                events = store.trajectory(tid).events
                break
            except KeyError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
        assert {e.provenance.policy_version for e in events if e.kind == "model_call"} == {v2.version_id}


@pytest.mark.parametrize("weight", [0.3])
def test_canary_split_and_abort(tmp_path: Path, weight: float) -> None:
    with Store.open(tmp_path / "store") as store:
        reg = VersionRegistry(store)
        base = reg.ensure_base("acme", "support", AgentConfig(model=ModelPart(base="smollm2")))
        v2 = reg.create("acme", "support", base.parts.with_system_prompt("v2"), parent=base.version_id)
        gw = Gateway([Seen()], store=store)
        binding = GatewayBinding(gw, reg, model="smollm2")
        binding.sync()
        reg.canary(v2.version_id, weight, actor="test")
        key = gw.router.scoped_model("smollm2", "acme", "support")
        assert key == "smollm2#acme/support"
        picks = [gw.router.route(key, f"session-{i}").version.version for i in range(2000)]
        share = picks.count(v2.version_id) / len(picks)
        assert 0.2 < share < 0.4
        reg.abort(v2.version_id, actor="test", reason="canary delta negative")
        picks = {gw.router.route(key, f"session-{i}").version.version for i in range(200)}
        assert picks == {base.version_id}
