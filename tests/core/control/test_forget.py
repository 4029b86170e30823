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
from molt.control.versions import ModelPart, PolicyParts, VersionRegistry
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
    base = reg.ensure_base("acme", "support", PolicyParts(model=ModelPart(base="m")))
    v2 = reg.promote(reg.create("acme", "support", base.parts.with_memories([m.memory_id]),
                                parent=base.version_id).version_id, actor="plane")
    assert LINEAGE_TABLE not in open_all(store)
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
    store.close()
    assert molt(["adapters", "ls", "--operator", "--json"]) == 0
    listed = [orjson.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(r["tenant_id"], r["manifest"], r["trajectories"]) for r in listed] == [("acme", "ok", 1),
                                                                                     ("globex", "ok", 1)]
    assert molt(["erase", "--tenant", "acme", "--operator", "--yes", "--json"]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["rows"]["adapter_dirs"] == 1
    assert not dirs["acme"].exists() and dirs["globex"].is_dir()
    assert molt(["adapters", "ls", "--operator", "--json"]) == 0
    assert [orjson.loads(x)["tenant_id"] for x in capsys.readouterr().out.splitlines()] == ["globex"]
