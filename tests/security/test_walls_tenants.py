"""Issue 41, finding 1: a request's ``model`` resolves only inside the caller's tenant.

An attacker holding tenant acme's keys (every role) names globex's policy version id (predictable:
``<agent>@<tenant>:v<n>``), globex's routing key, or a version id globex uses: each is the same 404 as
a name that does not exist, no list or error shows globex's models, and globex's memories never reach
acme's prompt. Version ids live in a namespace per tenant: no "is taken" across tenants, and a
squatted id never captures the other tenant's traffic. The harness refuses a foreign version even if
routing were wrong (defence in depth).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import openapi_doc
import pytest
from openapi_doc import KEYS
from starlette.testclient import TestClient

from molt.backends import StubBackend
from molt.capture import Recorder
from molt.control.memory import MemoryStore, RetrievalHarness
from molt.control.versions import AgentConfig, ModelPart, VersionRegistry
from molt.gateway import Gateway, GatewayConfig, create_app
from molt.gateway.binding import GatewayBinding, version_spec
from molt.governance.access import KeyRing
from molt.store import Store

SECRET = "W-8812"
ACME_KEYS = [k for k, (t, _) in KEYS.items() if t == "acme"] + ["sk-platform-operator"]
_WRITERS = {"sk-acme-admin", "sk-acme-writer", "sk-platform-operator"}


class Seen(StubBackend):
    """The stub model, keeping every request it was sent (what reached the model's prompt)."""

    def __init__(self) -> None:
        super().__init__("stub", model="stub")
        self.requests: list[Any] = []

    def _answer(self, req: Any) -> Any:
        self.requests.append(req)
        return super()._answer(req)


def _h(key: str, **extra: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", **extra}


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Two tenants each with a ``support`` agent bound by the control plane's registry; globex's live
    version carries a memory with a secret."""
    store = Store.open(tmp_path / "store", auto_compact=False)
    reg = VersionRegistry(store)
    mem = MemoryStore(store)
    secret = mem.add_memory("globex", f"Globex internal: the VIP warranty override code is {SECRET}.",
                            agent_id="support")
    reg.ensure_base("acme", "support", AgentConfig(model=ModelPart(base="stub")))
    gbase = reg.ensure_base("globex", "support", AgentConfig(model=ModelPart(base="stub")))
    g2 = reg.create("globex", "support", gbase.parts.with_memories([secret.memory_id]), parent=gbase.version_id)
    backend = Seen()
    rec = Recorder(store, spool_dir=tmp_path / "spool", fsync="never")
    gw = Gateway([backend], recorder=rec, store=store, keyring=KeyRing.from_mapping(KEYS),
                 harness=RetrievalHarness(mem), config=GatewayConfig(health_interval_s=0))
    GatewayBinding(gw, reg, model="stub").sync()
    reg.promote(g2.version_id, actor="test")
    with TestClient(create_app(gw)) as client:
        yield {"client": client, "gw": gw, "backend": backend, "reg": reg, "g2": g2.version_id}
    rec.close()
    store.close()


def _chat(c: TestClient, key: str, model: str, endpoint: str = "chat", **headers: str) -> Any:
    if endpoint == "chat":
        body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "What is the VIP warranty "
                                                                                        "override code?"}]}
        return c.post("/v1/chat/completions", headers=_h(key, **headers), json=body)
    return c.post("/v1/completions", headers=_h(key, **headers), json={"model": model, "prompt": "override code?"})


def _same_404(a: Any, b: Any, name_a: str, name_b: str) -> None:
    """Both 404, the same OpenAI-style body but for the name the caller sent."""
    assert a.status_code == b.status_code == 404, (a.text, b.text)
    assert openapi_doc.is_openai_error(a.json())
    assert a.text.replace(f"'{name_a}'", "NAME") == b.text.replace(f"'{name_b}'", "NAME"), (a.text, b.text)


def _leaked(text: str) -> list[str]:
    return [w for w in ("globex", SECRET) if w in text]


def test_another_tenants_version_id_and_routing_key_are_the_same_404_as_unknown_names(plane: dict[str, Any]) -> None:
    c, backend, g2 = plane["client"], plane["backend"], plane["g2"]
    # the positive control: globex's own agent is served its memory (what an intruder would read)
    assert _chat(c, "sk-globex-writer", "stub", **{"x-molt-agent": "support"}).headers[
        "x-molt-policy-version"] == g2
    assert SECRET in backend.requests[-1].messages[0]["content"]
    assert _chat(c, "sk-globex-writer", g2).status_code == 200  # a tenant names its own version id
    assert SECRET in backend.requests[-1].messages[0]["content"]
    seen_before = len(backend.requests)
    probes = [(g2, "support@nobody:v2"), ("stub#globex/support", "stub#nobody/support"),
              ("stub#globex", "stub#nobody"), (g2.replace("v2", "v1"), "support@nobody:v1")]
    for key in ACME_KEYS:
        for endpoint in ("chat", "completions"):
            for foreign, unknown in probes:
                a = _chat(c, key, foreign, endpoint, **{"x-molt-agent": "support"})
                b = _chat(c, key, unknown, endpoint, **{"x-molt-agent": "support"})
                if key not in _WRITERS:
                    assert a.status_code == b.status_code == 403  # the role may not call the model at all
                    continue
                _same_404(a, b, foreign, unknown)
                assert not _leaked(a.text.replace(foreign, "")), a.text  # it lists only the caller's models
        for foreign, unknown in probes:
            a = c.get(f"/v1/models/{quote(foreign, safe='')}", headers=_h(key))
            b = c.get(f"/v1/models/{quote(unknown, safe='')}", headers=_h(key))
            _same_404(a, b, foreign, unknown)
        listed = c.get("/v1/models", headers=_h(key))
        assert listed.status_code == 200 and not _leaked(listed.text), listed.text
    assert len(backend.requests) == seen_before  # no foreign request reached the model
    assert plane["gw"].harness_refusals == 0


def test_version_ids_live_in_a_namespace_per_tenant(plane: dict[str, Any]) -> None:
    c, gw, reg = plane["client"], plane["gw"], plane["reg"]
    squat = "support@globex:v3"  # the id globex's plane gives its next version
    r = c.post("/v1/molt/admin/versions", headers=_h("sk-acme-admin"),
               json={"model": "stub", "spec": {"version": squat, "backends": ["stub"]}, "weight": 1.0})
    assert r.status_code == 200, r.text  # acme's own id, in acme's namespace
    # globex registers an id acme holds: no "is taken" (no existence oracle across tenants)
    taken = c.post("/v1/molt/admin/versions", headers=_h("sk-globex-admin"),
                   json={"model": "stub", "spec": {"version": squat, "backends": ["stub"]}, "weight": 0.0})
    free = c.post("/v1/molt/admin/versions", headers=_h("sk-globex-admin"),
                  json={"model": "stub", "spec": {"version": "never-used-anywhere", "backends": ["stub"]},
                        "weight": 0.0})
    assert taken.status_code == free.status_code == 200, (taken.text, free.text)
    # globex's plane makes and promotes its v3: globex's agent is served globex's v3, never acme's squat
    live = reg.live("globex", "support")
    g3 = reg.create("globex", "support", live.parts.with_system_prompt("Globex v3 prompt."),
                    parent=live.version_id)
    assert g3.version_id == squat
    reg.promote(squat, actor="test")
    r = _chat(c, "sk-globex-writer", "stub", **{"x-molt-agent": "support"})
    assert r.headers["x-molt-policy-version"] == squat
    assert "Globex v3 prompt." in plane["backend"].requests[-1].messages[0]["content"]
    # acme's key naming that id gets acme's own version (without globex's prompt or memory)
    r = _chat(c, "sk-acme-writer", squat)
    assert r.status_code == 200 and "Globex" not in str(plane["backend"].requests[-1].messages)
    # the admin views and deletes of each tenant see only its own namespace
    for key, other in (("sk-acme-admin", "globex"), ("sk-globex-admin", "acme")):
        routes = c.get("/v1/molt/admin/routes", headers=_h(key)).json()
        assert f"#{other}" not in str(routes) and f'"tenant_id": "{other}"' not in str(routes)
    gone = c.delete(f"/v1/molt/admin/versions/{plane['g2']}", headers=_h("sk-acme-admin"))
    nope = c.delete("/v1/molt/admin/versions/support@nobody:v2", headers=_h("sk-acme-admin"))
    assert gone.status_code == nope.status_code == 404
    assert gone.text.replace(f"'{plane['g2']}'", "N") == nope.text.replace("'support@nobody:v2'", "N")
    assert c.put("/v1/molt/admin/models/stub%23globex/weights", headers=_h("sk-acme-admin"),
                 json={"weights": {squat: 1.0}}).status_code == 403
    assert _chat(c, "sk-globex-writer", "stub", **{"x-molt-agent": "support"}).headers[
        "x-molt-policy-version"] == squat
    assert gw.harness_refusals == 0


def test_the_harness_refuses_a_foreign_version_even_when_routing_is_wrong(plane: dict[str, Any]) -> None:
    c, gw, reg, backend = plane["client"], plane["gw"], plane["reg"], plane["backend"]
    # a routing fault: globex's live version bound under acme's agent key
    foreign = version_spec(reg.get(plane["g2"]), ("stub",))
    gw.router.bind("stub#acme/support", [foreign], {foreign.version: 1.0}, immediate=True)
    before = len(backend.requests)
    r = _chat(c, "sk-acme-writer", "stub", **{"x-molt-agent": "support"})
    unknown = _chat(c, "sk-acme-writer", "no-such-model", **{"x-molt-agent": "support"})
    _same_404(r, unknown, "stub", "no-such-model")
    assert gw.harness_refusals == 1 and len(backend.requests) == before
    assert SECRET not in r.text
