"""Erasure follows lineage (molt.control.forget), the cases the end-to-end test (tests/trainer/
test_erase_follows_lineage.py) does not take: a store made before lineage existed, and a whole tenant's
erasure removing its adapters' files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from molt.atdp import Event, EventKind, UserMessage
from molt.capture import Recorder
from molt.cli import run as molt
from molt.control.forget import erase_subject_everywhere
from molt.control.memory import MemoryStore
from molt.control.versions import AgentConfig, ModelPart, VersionRegistry
from molt.control.weight_queue import WeightQueue
from molt.lineage import LINEAGE_TABLE, Lineage, LineageLog, subject_key, write_manifest
from molt.store import Store
from molt.store.tables import open_all

SUBJECT = "customer-4711"


def _record(store: Store, home: Path, tenant: str, tid: str, subject: str | None) -> None:
    rec = Recorder(store, spool_dir=home / "spool")
    md: dict[str, Any] = {"tenant_id": tenant, "agent_id": "support"}
    if subject:
        md["consent"] = {"subject_id": subject}
    rec.record(Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata=md,
                     action=UserMessage(content="the parcel came damaged")))
    assert rec.flush(deliver=True)
    rec.close()


def test_a_store_made_before_lineage_gets_it_and_erasure_reaches_its_memories(store: Store, molt_home: Path) -> None:
    _record(store, molt_home, "acme", "t-subject", SUBJECT)
    # what an older Molt left: a memory naming its one source trajectory, in a live version; no lineage
    m = MemoryStore(store).add_memory("acme", "Damaged parcels are refunded within 5 days.", agent_id="support",
                                      source_trajectory_id="t-subject")
    reg = VersionRegistry(store)
    base = reg.ensure_base("acme", "support", AgentConfig(model=ModelPart(base="m")))
    v2 = reg.promote(reg.create("acme", "support", base.parts.with_memories([m.memory_id]),
                                parent=base.version_id).version_id, actor="plane")
    assert LINEAGE_TABLE not in open_all(store)
    # a dry run lists it from the migration it would make, and writes none of it
    plan = erase_subject_everywhere(store, SUBJECT, dry_run=True)
    assert [(a.kind, a.artifact_id) for a in plan.artifacts] == [("memory", m.memory_id)]
    assert plan.erased_versions == [v2.version_id] and reg.live("acme", "support").version_id == v2.version_id
    assert store.table(LINEAGE_TABLE).count_rows() == 0
    [rec] = LineageLog(store).records("acme")  # the migration, on first use
    assert (rec.kind, rec.artifact_id, rec.trajectories) == ("memory", m.memory_id, ("t-subject",))
    assert rec.lineage[0].subjects == (subject_key("acme", SUBJECT),)

    out = erase_subject_everywhere(store, SUBJECT)
    assert [(a.kind, a.action) for a in out.artifacts] == [("memory", "retired")]
    live = reg.live("acme", "support")
    assert live.version_id == out.superseded[v2.version_id] and live.parts.memory_ids == ()
    assert reg.get(v2.version_id).status == "erased"
    with pytest.raises(Exception, match="erased data"):
        reg.promote(v2.version_id, actor="someone")


def test_erasing_a_tenant_removes_its_adapters_files(store: Store, molt_home: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    dirs = {}
    for tenant in ("acme", "globex"):
        _record(store, molt_home, tenant, f"t-{tenant}", None)
        d = molt_home / "adapters" / tenant
        d.mkdir(parents=True)
        (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
        (d / "adapter_model.safetensors").write_bytes(b"\1" * 64)
        man = write_manifest(d, tenant_id=tenant, adapter=f"lora-{tenant}", base_model="m",
                             lineage=[Lineage.of(tenant, [f"t-{tenant}"])])
        LineageLog(store).record("adapter", tenant, f"lora-{tenant}", man.lineage, agent_id="support",
                                 detail={"path": str(d), "manifest_id": man.manifest_id})
        dirs[tenant] = d
    # globex's adapter shared with acme, trained on both tenants' data, live for globex's agent
    d = molt_home / "adapters" / "shared"
    d.mkdir()
    (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    (d / "adapter_model.safetensors").write_bytes(b"\2" * 64)
    man = write_manifest(d, tenant_id="globex", adapter="lora-shared", base_model="m", share_with=["acme"],
                         lineage=[Lineage.of("acme", ["t-acme"]), Lineage.of("globex", ["t-globex"])])
    LineageLog(store).record("adapter", "globex", "lora-shared", man.lineage, agent_id="support",
                             detail={"path": str(d), "manifest_id": man.manifest_id, "share_with": ["acme"]})
    reg = VersionRegistry(store)
    base = reg.ensure_base("globex", "support", AgentConfig(model=ModelPart(base="m")))
    v = reg.create("globex", "support", base.parts.with_model(ModelPart(base="m", adapter="lora-shared",
                                                                        adapter_path=str(d))), parent=base.version_id)
    reg.promote(v.version_id, actor="plane")
    store.close()
    assert molt(["adapters", "ls", "--operator", "--json"]) == 0
    listed = [orjson.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(r["tenant_id"], r["artifact"], r["manifest"], r["trajectories"]) for r in listed] == [
        ("acme", "lora-acme", "ok", 1), ("globex", "lora-globex", "ok", 1), ("globex", "lora-shared", "ok", 2)]
    assert molt(["erase", "--tenant", "acme", "--operator", "--yes", "--json"]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["rows"]["adapter_dirs"] == 2 and report["rows"]["shared_adapters"] == 1
    assert not dirs["acme"].exists() and not d.exists() and dirs["globex"].is_dir()
    assert molt(["adapters", "ls", "--operator", "--json"]) == 0
    assert [(x["artifact"], x["status"], x["tenants"]) for x in map(orjson.loads, capsys.readouterr().out.splitlines())
            ] == [("lora-globex", "live", ["globex"]), ("lora-shared", "retired", ["globex"])]
    with Store.open(molt_home / "store", auto_compact=False) as s2:
        live = VersionRegistry(s2).live("globex", "support")
        assert live.parts.model.adapter is None and VersionRegistry(s2).get(v.version_id).status == "erased"
        [req] = WeightQueue(s2).requests("globex")
        assert req.candidate["payload"]["exclude_trajectories"] == ["t-acme"]
        assert req.candidate["payload"]["lineage_diff"]["removed_trajectories"] == {"acme": ["t-acme"]}


def test_a_tool_rewrite_and_a_harness_edit_follow_their_evidence(store: Store, molt_home: Path) -> None:
    """A tool rewrite resting on the subject's run and one other is taken out (one session left, under
    the bar of 3); a harness edit resting on the subject's and three others' stays, its lineage without
    the subject; a later version that kept both is superseded with the rewrite alone taken back."""
    from molt.control.provenance import holds, record_change
    from molt.harness import ToolRewrite

    _record(store, molt_home, "acme", "t-s", SUBJECT)
    for i in range(3):
        _record(store, molt_home, "acme", f"t-u{i}", None)
    reg = VersionRegistry(store)
    base = reg.ensure_base("acme", "support", AgentConfig(model=ModelPart(base="m"),
                                                           tools={"lookup": ToolRewrite(description="Look up.")}))
    v2 = reg.create("acme", "support", base.parts.with_tools({"lookup": ToolRewrite(description="Look up an order "
                                                                                    "by its id (A-1234).")}),
                    parent=base.version_id)
    record_change(store, v2, base, ["t-s", "t-u0"], kind="tool_schema_edit")
    reg.promote(v2.version_id, actor="plane")
    v3 = reg.create("acme", "support", v2.parts.with_system_prompt("Answers cite the order id."), parent=v2.version_id)
    [h] = record_change(store, v3, v2, ["t-s", "t-u0", "t-u1", "t-u2"], kind="harness_edit")
    reg.promote(v3.version_id, actor="plane")
    [t] = LineageLog(store).records("acme", kind="tool_rewrite")
    assert t.artifact_id == f"{v2.version_id}#tools.lookup" and holds(reg, v3, t) and not holds(reg, base, t)
    assert holds(reg, v3, h) and not holds(reg, v2, h)

    out = erase_subject_everywhere(store, SUBJECT)
    acts = {a.kind: a for a in out.artifacts}
    assert acts["tool_rewrite"].action == "taken out of the versions holding it"
    assert acts["harness_edit"].action.startswith("kept") and acts["harness_edit"].trajectories_left == 3
    live = reg.live("acme", "support")
    assert live.parts.tools["lookup"].description == "Look up."
    assert live.parts.harness.system_prompt == "Answers cite the order id."
    assert {reg.get(v.version_id).status for v in (v2, v3)} == {"erased"}
    [kept] = LineageLog(store).records("acme", kind="harness_edit")
    assert not kept.names_subject(SUBJECT) and "t-s" not in kept.trajectories
