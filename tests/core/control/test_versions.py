"""Composite policy versions: create, promote, canary, rollback (byte-identical), diff, bad input."""

from __future__ import annotations

import pytest

from molt.control.log import DecisionLog, DecisionRecord
from molt.control.versions import AgentConfig, ModelPart, VersionRegistry, diff_parts
from molt.errors import InterventionError, NotFound
from molt.harness import ToolRewrite
from molt.store import Store


@pytest.fixture()
def reg(tmp_path):  # type: ignore[no-untyped-def]
    with Store.open(tmp_path / "store") as store:
        yield VersionRegistry(store)


BASE = AgentConfig(model=ModelPart(base="smollm2"))


def test_base_promote_rollback_restores_exact_bytes(reg: VersionRegistry) -> None:
    base = reg.ensure_base("acme", "support", BASE)
    assert base.status == "live" and reg.ensure_base("acme", "support", BASE).version_id == base.version_id
    v2 = reg.create("acme", "support", base.parts.with_memories(["m1"]).with_system_prompt("Be brief."),
                    parent=base.version_id, note="memory + prompt")
    assert v2.status == "candidate" and reg.live("acme", "support").version_id == base.version_id
    reg.promote(v2.version_id, actor="test")
    assert reg.live("acme", "support").version_id == v2.version_id
    assert reg.get(base.version_id).status == "previous"
    assert reg.rollback_target("acme", "support").version_id == base.version_id
    back = reg.rollback("acme", "support", actor="test", reason="regression")
    assert back.version_id == base.version_id
    live = reg.live("acme", "support")
    assert live.version_id == base.version_id and live.parts_bytes == base.parts_bytes
    assert live.parts == BASE
    assert reg.rollback_target("acme", "support") is None
    with pytest.raises(InterventionError, match="no earlier live version"):
        reg.rollback("acme", "support", actor="test")
    actions = [r["action"] for r in reg.history("acme", "support")]
    assert actions == ["promote", "promote", "rollback"]


def test_canary_and_abort(reg: VersionRegistry) -> None:
    base = reg.ensure_base("acme", "support", BASE)
    v2 = reg.create("acme", "support", base.parts.with_skills(["s1"]), parent=base.version_id)
    reg.canary(v2.version_id, 0.1, actor="plane")
    [c] = reg.canaries("acme", "support")
    assert c.version_id == v2.version_id and c.canary_weight == pytest.approx(0.1) and c.status == "canary"
    reg.abort(v2.version_id, actor="plane", reason="canary delta negative")
    assert reg.canaries("acme", "support") == [] and reg.live("acme", "support").version_id == base.version_id
    with pytest.raises(InterventionError, match=r"\(0, 1\)"):
        reg.canary(v2.version_id, 1.5, actor="plane")


def test_diff_and_tenant_scoping(reg: VersionRegistry) -> None:
    a = reg.ensure_base("acme", "support", BASE)
    b = reg.create("acme", "support", a.parts.with_tools({"lookup": ToolRewrite(description="Use the A- prefix.")}),
                   parent=a.version_id)
    d = reg.diff(a.version_id, b.version_id)
    assert d == [("tools.lookup", None, {"description": "Use the A- prefix.", "parameters": None, "rename": None,
                                             "dispatch": None})]
    assert diff_parts(a.parts, a.parts) == []
    assert b.harness.tool_rewrites["lookup"].description == "Use the A- prefix."
    reg.ensure_base("globex", "support", BASE)
    assert {v.tenant_id for v in reg.list("globex")} == {"globex"}
    with pytest.raises(NotFound):
        reg.get(a.version_id, tenant_id="globex")


def test_bad_input(reg: VersionRegistry) -> None:
    with pytest.raises(InterventionError, match="tenant id"):
        reg.create("bad tenant!", "support", BASE)
    with pytest.raises(InterventionError, match="Invalid policy parts"):
        reg.create("acme", "support", {"model": {"base": ""}})
    with pytest.raises(InterventionError, match="Invalid policy parts"):
        reg.create("acme", "support", {"model": {"base": "m"}, "surprise": 1})
    other = reg.ensure_base("globex", "support", BASE)
    with pytest.raises(InterventionError, match="belongs to"):
        reg.create("acme", "support", BASE, parent=other.version_id)


def test_decision_log_roundtrip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Store.open(tmp_path / "s") as store:
        log = DecisionLog(store)
        log.append(DecisionRecord(tenant_id="acme", agent_id="support", choice="noop", reason="too little evidence",
                                  signals={"success_rate": 0.9}))
        log.append(DecisionRecord(tenant_id="globex", agent_id="support", choice="memory_insert", reason="x"))
        [d] = log.list("acme")
        assert d.choice == "noop" and d.signals == {"success_rate": 0.9}
        assert log.get(d.cycle_id, tenant_id="globex") is None and log.get(d.cycle_id, tenant_id="acme") == d
