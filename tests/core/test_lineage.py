"""Lineage and the adapter manifest: subjects only as keyed digests, the manifest content-addressed,
and an adapter refused at load when its files do not match the manifest or its manifest names another
tenant's trajectories.

Troubleshooting: a ``reason="files"`` refusal lists which files changed, went missing or were added;
``reason="tenant"`` names the tenant the manifest claims and the trajectory the store holds for
another.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from molt.atdp import Event, EventKind, UserMessage
from molt.capture import Recorder
from molt.errors import LineageError
from molt.lineage import (
    MANIFEST_FILE,
    AdapterManifest,
    Lineage,
    file_digests,
    load_manifest,
    manifest_diff,
    read_manifest,
    subject_key,
    write_manifest,
)
from molt.store import Store

SUBJECT = "ana.lima@example.org"


def _adapter(root: Path, name: str = "w-1") -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    (d / "adapter_model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + bytes(range(64)))
    return d


def _fill(store: Store, home: Path) -> dict[str, list[str]]:
    rec = Recorder(store, spool_dir=home / "spool")
    out: dict[str, list[str]] = {"acme": [], "globex": []}
    for tenant in out:
        for k in range(2):
            tid = rec.new_trajectory()
            out[tenant].append(tid)
            md: dict[str, Any] = {"tenant_id": tenant}
            if tenant == "acme" and k == 0:
                md["consent"] = {"subject_id": SUBJECT, "training": True}
            rec.record(Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata=md,
                             action=UserMessage(content=f"hello from {tenant}")))
    assert rec.flush(deliver=True)
    return out


def test_lineage_holds_subjects_as_keyed_digests_only(store: Store, molt_home: Path) -> None:
    tids = _fill(store, molt_home)
    lin = Lineage.from_store(store, "acme", tids["acme"])
    assert lin.trajectories == tuple(sorted(tids["acme"]))
    assert lin.subjects == (subject_key("acme", SUBJECT),)
    assert SUBJECT not in lin.model_dump_json()
    assert lin.names_subject(SUBJECT) and not lin.names_subject("someone-else")
    # a tenant's digest is keyed with its own key: the same subject in another tenant digests apart
    assert subject_key("globex", SUBJECT) != subject_key("acme", SUBJECT)
    with pytest.raises(ValueError, match="not keyed digests") as err:
        Lineage(tenant_id="acme", subjects=(SUBJECT,))
    assert SUBJECT not in str(err.value)
    dropped = lin.without(subjects=[SUBJECT], trajectories=[tids["acme"][0]])
    diff = manifest_diff([lin], [dropped])
    assert diff.removed_subjects == {"acme": (subject_key("acme", SUBJECT),)}
    assert diff.removed_trajectories == {"acme": (tids["acme"][0],)} and not diff.added_trajectories


def test_manifest_is_content_addressed_and_round_trips(store: Store, molt_home: Path, tmp_path: Path) -> None:
    tids = _fill(store, molt_home)
    d = _adapter(tmp_path)
    m = write_manifest(d, tenant_id="acme", adapter="w-1", base_model="SmolLM2-135M",
                       lineage=[Lineage.from_store(store, "acme", tids["acme"])])
    assert set(m.files) == {"adapter_config.json", "adapter_model.safetensors"}
    raw = (d / MANIFEST_FILE).read_bytes()
    assert SUBJECT.encode() not in raw
    assert json.loads(raw)["manifest_id"] == m.manifest_id
    back = load_manifest(d, tenant="acme", store=store)
    assert back == m and back.manifest_id == m.manifest_id and back.names_subject(SUBJECT)
    assert back.trajectory_count == 2 and back.subject_count == 1
    # one changed field changes the id
    assert m.model_copy(update={"share_with": ("globex",)}).manifest_id != m.manifest_id


def test_adapter_whose_files_do_not_match_its_manifest_is_refused(tmp_path: Path) -> None:
    d = _adapter(tmp_path)
    write_manifest(d, tenant_id="acme", adapter="w-1", base_model="SmolLM2-135M", lineage=[Lineage.of("acme", ["t1"])])
    load_manifest(d, tenant="acme")
    weights = d / "adapter_model.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[:-1] + b"\xff")  # one byte of the weights
    with pytest.raises(LineageError, match=r"changed: adapter_model\.safetensors") as err:
        load_manifest(d, tenant="acme")
    assert err.value.reason == "files"
    weights.write_bytes(good)
    (d / "adapter_model.bin").write_bytes(b"other weights")  # a file the manifest does not list
    with pytest.raises(LineageError, match=r"not in the manifest: adapter_model\.bin"):
        load_manifest(d, tenant="acme")
    (d / "adapter_model.bin").unlink()
    weights.unlink()
    with pytest.raises(LineageError, match=r"missing: adapter_model\.safetensors"):
        load_manifest(d, tenant="acme")
    weights.write_bytes(good)
    load_manifest(d, tenant="acme")
    (d / MANIFEST_FILE).unlink()
    with pytest.raises(LineageError, match=r"has no molt-manifest\.json") as err:
        load_manifest(d, tenant="acme")
    assert err.value.reason == "missing"


def test_edited_manifest_is_refused(tmp_path: Path) -> None:
    """Sharing an adapter by editing its manifest (and keeping the stated id) is caught."""
    d = _adapter(tmp_path)
    write_manifest(d, tenant_id="acme", adapter="w-1", base_model="SmolLM2-135M", lineage=[Lineage.of("acme", ["t1"])])
    with pytest.raises(LineageError) as err:
        load_manifest(d, tenant="globex")
    assert err.value.reason == "tenant"
    doc = json.loads((d / MANIFEST_FILE).read_text())
    doc["share_with"] = ["globex"]
    (d / MANIFEST_FILE).write_text(json.dumps(doc))
    with pytest.raises(LineageError, match="does not hash to the id it states") as err:
        load_manifest(d, tenant="globex")
    assert err.value.reason == "tampered"
    (d / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(LineageError, match="not a valid adapter manifest"):
        read_manifest(d)


def test_manifest_naming_another_tenants_trajectories_is_refused(store: Store, molt_home: Path,
                                                                 tmp_path: Path) -> None:
    tids = _fill(store, molt_home)
    # 1. the manifest says so itself: a lineage of globex in an adapter of acme not shared with globex
    d = _adapter(tmp_path, "w-own")
    with pytest.raises(LineageError, match="names trajectories of tenant 'globex'"):
        write_manifest(d, tenant_id="acme", adapter="w-own", base_model="b",
                       lineage=[Lineage.of("globex", tids["globex"])])
    # a manifest written by hand (correct id) that claims it anyway is refused at load
    m = AdapterManifest(tenant_id="acme", adapter="w-own", base_model="b", files=file_digests(d),
                        lineage=(Lineage.of("globex", tids["globex"]),), created_at="2026-01-01T00:00:00+00:00")
    doc = {"manifest_id": m.manifest_id, **m.model_dump(mode="json", by_alias=True)}
    (d / MANIFEST_FILE).write_text(json.dumps(doc))
    with pytest.raises(LineageError, match="names trajectories of tenant 'globex'") as err:
        load_manifest(d, tenant="acme")
    assert err.value.reason == "tenant"

    # 2. the manifest lies: globex's trajectories listed under acme; only the store can tell
    d2 = _adapter(tmp_path, "w-lie")
    write_manifest(d2, tenant_id="acme", adapter="w-lie", base_model="b",
                   lineage=[Lineage.of("acme", [tids["acme"][0], tids["globex"][1]])])
    load_manifest(d2, tenant="acme")  # without a store nothing contradicts it
    with pytest.raises(LineageError, match="store holds for another tenant") as err:
        load_manifest(d2, tenant="acme", store=store)
    assert err.value.reason == "tenant" and err.value.trajectory_id == tids["globex"][1]

    # a shared adapter naming a tenant it is shared with loads for both
    d3 = _adapter(tmp_path, "w-shared")
    write_manifest(d3, tenant_id="acme", adapter="w-shared", base_model="b", share_with=["globex"],
                   lineage=[Lineage.of("acme", tids["acme"]), Lineage.of("globex", tids["globex"])])
    assert load_manifest(d3, tenant="globex", store=store).tenants == ("acme", "globex")
