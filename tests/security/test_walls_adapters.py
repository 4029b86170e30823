"""Issue 47: a tenant's LoRA adapter is never reachable from another tenant's request.

acme's adapter is loaded through the admin API for acme only (``tenants: ["acme"]``, as the weight loop
loads what it trained on acme's data) and served by acme's agent version; globex has its own. From
globex's keys: the adapter's name and acme's version are the same 404 as a name that does not exist, no
listing shows them, globex's agent is served its own adapter, and even a version that routes globex's
traffic onto acme's adapter (an operator's shared version naming it: a routing fault) is refused before
the model is called. The adapter's name cannot be loaded again for another tenant, and a tenant's
adapter takes no weight on the shared model key. The tenants of a shared adapter (policies that opt into
sharing) are each served it; a third tenant is not.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openapi_doc import KEYS
from starlette.testclient import TestClient

from molt.backends import StubBackend
from molt.capture import Recorder
from molt.control.versions import AgentConfig, ModelPart, VersionRegistry
from molt.gateway import Gateway, GatewayConfig, create_app
from molt.gateway.binding import GatewayBinding
from molt.gateway.router import VersionSpec
from molt.governance.access import KeyRing
from molt.lineage import write_manifest
from molt.store import Store

OPERATOR = {"authorization": "Bearer sk-platform-operator"}
ACME_LORA, GLOBEX_LORA = "stub@lora-1", "stub@lora-2"


class Served(StubBackend):
    """The stub model, keeping the model name (base or adapter) of every request it was sent."""

    def __init__(self) -> None:
        super().__init__("stub", model="stub")
        self.served: list[str] = []

    def _answer(self, req: Any) -> Any:
        self.served.append(req.model)
        return super()._answer(req)


def _adapter(root: Path, name: str, tenant: str | None, share_with: tuple[str, ...] = ()) -> str:
    """An adapter directory (the stub serves no weights: one file stands for them) with the manifest the
    trainer writes beside an adapter (:func:`molt.lineage.write_manifest`)."""
    d = root / name.replace("@", "_")
    d.mkdir(parents=True)
    (d / "adapter_model.safetensors").write_bytes(name.encode())
    write_manifest(d, tenant_id=tenant, adapter=name, base_model="stub", share_with=share_with)
    return str(d)


def _h(key: str, **extra: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", **extra}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[dict[str, Any]]:
    store = Store.open(tmp_path / "store", auto_compact=False)
    reg = VersionRegistry(store)
    backend = Served()
    rec = Recorder(store, spool_dir=tmp_path / "spool", fsync="never")
    gw = Gateway([backend], recorder=rec, store=store, keyring=KeyRing.from_mapping(KEYS),
                 config=GatewayConfig(health_interval_s=0))
    binding = GatewayBinding(gw, reg, model="stub")
    with TestClient(create_app(gw)) as client:
        for tenant, name in (("acme", ACME_LORA), ("globex", GLOBEX_LORA)):
            path = _adapter(tmp_path, name, tenant)
            r = client.post("/v1/molt/admin/adapters", headers=OPERATOR, json={
                "model": "stub", "version": name, "path": path, "weight": 0.0, "tenants": [tenant]})
            assert r.status_code == 200, r.text
            base = reg.ensure_base(tenant, "support", AgentConfig(model=ModelPart(base="stub")))
            v = reg.create(tenant, "support", base.parts.with_model(
                ModelPart(base="stub", adapter=name, adapter_path=path)), parent=base.version_id)
            reg.promote(v.version_id, actor="test")
        binding.sync()
        yield {"client": client, "gw": gw, "backend": backend, "reg": reg, "root": tmp_path}
    rec.close()
    store.close()


def _chat(c: TestClient, key: str, model: str, **headers: str) -> Any:
    return c.post("/v1/chat/completions", headers=_h(key, **headers),
                  json={"model": model, "messages": [{"role": "user", "content": "hello"}]})


def test_a_tenants_adapter_serves_its_requests_and_no_other_tenants(served: dict[str, Any]) -> None:
    c, gw, backend, reg = served["client"], served["gw"], served["backend"], served["reg"]
    acme_v = reg.live("acme", "support").version_id
    # positive controls: each tenant's agent is served its own adapter
    assert _chat(c, "sk-acme-writer", "stub", **{"x-molt-agent": "support"}).status_code == 200
    assert _chat(c, "sk-globex-writer", "stub", **{"x-molt-agent": "support"}).status_code == 200
    assert backend.served == [ACME_LORA, GLOBEX_LORA]
    assert _chat(c, "sk-acme-writer", ACME_LORA).status_code == 200 and backend.served[-1] == ACME_LORA

    # from globex: acme's adapter name and acme's version are the same 404 as an unknown name
    before = len(backend.served)
    for name in (ACME_LORA, acme_v):
        a, b = _chat(c, "sk-globex-writer", name), _chat(c, "sk-globex-writer", "stub@lora-404")
        assert a.status_code == b.status_code == 404, (a.text, b.text)
        assert a.text.replace(f"'{name}'", "N") == b.text.replace("'stub@lora-404'", "N")
        assert ACME_LORA not in a.text.replace(f"'{name}'", "N")  # only the caller's models are listed
        assert c.get(f"/v1/models/{name}", headers=_h("sk-globex-reader")).status_code == 404
    assert ACME_LORA not in c.get("/v1/models", headers=_h("sk-globex-reader")).text
    assert len(backend.served) == before
    # globex's admin cannot point a version of its own at acme's adapter
    r = c.post("/v1/molt/admin/versions", headers=_h("sk-globex-admin"), json={
        "model": "stub", "spec": {"version": "steal", "backends": ["stub"], "upstream_model": ACME_LORA}})
    assert r.status_code == 404, r.text

    # a routing fault: an operator's shared version serving acme's adapter, bound to globex's agent key
    fault = VersionSpec(version="shared-oops", backends=("stub",), upstream_model=ACME_LORA)
    gw.router.bind("stub#globex/support", [fault], {fault.version: 1.0}, immediate=True)
    r = _chat(c, "sk-globex-writer", "stub", **{"x-molt-agent": "support"})
    assert r.status_code == 404 and gw.harness_refusals == 1 and len(backend.served) == before, r.text
    assert ACME_LORA not in backend.served[before:]


def test_an_adapter_name_is_one_tenant_set_and_a_canary_of_its_tenants_only(served: dict[str, Any]) -> None:
    c, backend = served["client"], served["backend"]
    body = {"model": "stub", "version": ACME_LORA, "path": _adapter(served["root"] / "again", ACME_LORA, "globex"),
            "weight": 0.0}
    for tenants in (["globex"], ["acme", "globex"], None):  # loading acme's name for others: refused
        r = c.post("/v1/molt/admin/adapters", headers=OPERATOR,
                   json={**body, **({"tenants": tenants} if tenants else {})})
        assert r.status_code == 400 and "other tenants" in r.text, r.text
    assert backend.adapters[ACME_LORA] == str(served["root"] / "stub_lora-1")  # acme's weights were not replaced
    # with a weight, a tenant's adapter is a canary of that tenant's own sessions of the model only
    path = _adapter(served["root"] / "canary", "stub@lora-3", "acme")
    r = c.post("/v1/molt/admin/adapters", headers=OPERATOR,
               json={**body, "version": "stub@lora-3", "path": path, "weight": 1.0, "weights": {"stub@base": 0.0},
                     "tenants": ["acme"]})
    assert r.status_code == 200, r.text
    assert _chat(c, "sk-acme-writer", "stub").status_code == 200 and backend.served[-1] == "stub@lora-3"
    assert _chat(c, "sk-globex-writer", "stub").status_code == 200 and backend.served[-1] == "stub"


def test_a_shared_adapter_serves_the_tenants_that_share_it_only(served: dict[str, Any]) -> None:
    c, gw, backend = served["client"], served["gw"], served["backend"]
    path = _adapter(served["root"], "stub@shared-1", "acme", share_with=("globex",))
    r = c.post("/v1/molt/admin/adapters", headers=OPERATOR, json={
        "model": "stub", "version": "stub@shared-1", "path": path, "weight": 0.0, "tenants": ["acme", "globex"]})
    assert r.status_code == 200, r.text
    for key in ("sk-acme-writer", "sk-globex-writer"):
        assert _chat(c, key, "stub@shared-1").status_code == 200 and backend.served[-1] == "stub@shared-1"
    # a third tenant's request routed onto it (a routing fault) is refused
    gw.keyring.add(tenant="initech", role="agent_writer", key="sk-initech-writer", name="initech")
    before = len(backend.served)
    fault = VersionSpec(version="shared-oops", backends=("stub",), upstream_model="stub@shared-1")
    gw.router.bind("stub#initech", [fault], {fault.version: 1.0}, immediate=True)
    assert _chat(c, "sk-initech-writer", "stub").status_code == 404 and len(backend.served) == before
    assert _chat(c, "sk-initech-writer", "stub@shared-1").status_code == 404


def test_an_adapter_is_loaded_for_a_tenant_only_as_its_manifest_allows(served: dict[str, Any]) -> None:
    """The manifest written with an adapter decides: loading it for a tenant it does not serve, after its
    files changed, without a manifest, or a tenant's adapter as everyone's, is refused and nothing loads."""
    c, backend, root = served["client"], served["backend"], served["root"]
    acme_only = _adapter(root / "m", "stub@lora-7", "acme")
    bare = root / "bare"
    bare.mkdir()
    (bare / "adapter_model.safetensors").write_bytes(b"w")
    tampered = _adapter(root / "t", "stub@lora-8", "acme")
    (Path(tampered) / "adapter_model.safetensors").write_bytes(b"other weights")
    cases = [("stub@lora-7", acme_only, ["globex"], "tenant"), ("stub@lora-7", acme_only, None, "tenants"),
             ("stub@lora-8", tampered, ["acme"], "files"), ("stub@lora-9", str(bare), ["acme"], "missing")]
    for name, path, tenants, why in cases:
        r = c.post("/v1/molt/admin/adapters", headers=OPERATOR, json={
            "model": "stub", "version": name, "path": path, "weight": 0.0, **({"tenants": tenants} if tenants else {})})
        assert r.status_code == 400 and why in r.text, (name, tenants, r.text)
        assert name not in backend.adapters
    ok = c.post("/v1/molt/admin/adapters", headers=OPERATOR, json={
        "model": "stub", "version": "stub@lora-7", "path": acme_only, "weight": 0.0, "tenants": ["acme"]})
    assert ok.status_code == 200, ok.text
