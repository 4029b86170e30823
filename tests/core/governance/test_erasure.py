"""Erasure: a subject's or a tenant's content is physically gone from every file, chains still verify.

The marker test writes known strings for a subject into every place content can land — event
payloads (user message, model answer, tool output, hidden reasoning), a late reward's reason, a
quarantined record, a memory with a full-text index — across several appends and LanceDB versions,
plus the Recorder spool; erases; and greps the raw bytes of every file under the store and spool
directories.

Troubleshooting: a marker found in ``*.lance`` under ``data/`` means a fragment was not rewritten
(see molt.store.erase); under ``_indices/`` an index was not rebuilt; in ``*.seg`` the spool scrub
missed a frame; in ``_versions``/``_deletions`` old versions were not cleaned up.
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from molt.atdp import Event, EventKind, Generation, Outcome, RewardAnnotation, ToolCall, UserMessage, verify_chain
from molt.capture import MemorySink, Recorder
from molt.cli import run as molt
from molt.errors import GovernanceError
from molt.governance import GovernancePipeline, GovernancePolicy, GovernedSink, erase_subject, erase_tenant
from molt.store import Store

SUBJECT = "subject-4711"
MARKERS = [b"lilac-octopus-marker-%d" % i for i in range(1, 8)]
KEEP = b"violet-walrus-survivor"
# Redaction off: this is about erasure, and the markers must reach the store verbatim whatever the
# detectors think of them.
# unknown_tenants: quarantine, so that a record naming no tenant is quarantined (under use_defaults it
# would be the anonymous tenant's)
POLICY = GovernancePolicy.model_validate({"defaults": {"training": {"opt_in": True, "require_consent": False},
                                                       "redaction": {"enabled": False}},
                                          "unknown_tenants": "quarantine", "tenants": {"acme": {}, "globex": {}}})


def grep(root: Path, needle: bytes) -> list[str]:
    """Every file under ``root`` whose raw bytes contain ``needle``."""
    hits = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            if needle in p.read_bytes():
                hits.append(str(p.relative_to(root)))
    return hits


def _subject_trajectory(tid: str, tenant: str = "acme") -> list[Event]:
    md: dict[str, Any] = {"tenant_id": tenant, "consent": {"subject_id": SUBJECT, "training": True}}
    plain = {"tenant_id": tenant}  # later events do not name the subject but carry its words
    m = [x.decode() for x in MARKERS]
    return [
        Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata=md,
              action=UserMessage(content=f"my code word is {m[0]}")),
        Event(trajectory_id=tid, kind=EventKind.MODEL_CALL, metadata=plain,
              hidden={"reasoning": f"user said {m[1]}"}, action=Generation(text=f"Noted: {m[2]}")),
        Event(trajectory_id=tid, kind=EventKind.TOOL_CALL, metadata=plain,
              action=ToolCall(tool_name="crm.save", arguments={"note": m[3]}), outcome=Outcome(output=m[3])),
    ]


def _other(tid: str, tenant: str = "acme") -> Event:
    return Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata={"tenant_id": tenant},
                 action=UserMessage(content=f"unrelated {KEEP.decode()}"))


def _fill(store: Store, spool: Path) -> tuple[Recorder, list[str]]:
    rec = Recorder(GovernedSink(store), spool_dir=spool, pipeline=GovernancePipeline(POLICY))
    tids = []
    for i in range(3):  # several appends, so several fragments and LanceDB versions
        tid = f"subj-traj-{i}"
        tids.append(tid)
        for ev in _subject_trajectory(tid):
            rec.record(ev)
        rec.record(_other(f"other-traj-{i}"))
        assert rec.flush(deliver=True)
    # a quarantined record of the subject (no tenant: the authenticate stage rejects it)
    rec.record(Event(trajectory_id="q-traj", kind=EventKind.USER_MESSAGE,
                     metadata={"consent": {"subject_id": SUBJECT}},
                     action=UserMessage(content=MARKERS[4].decode())))
    rec.reward(RewardAnnotation(trajectory_id=tids[0], value=1.0, source="human_label",
                                reason=f"liked {MARKERS[5].decode()}", tenant_id="acme"))
    assert rec.flush(deliver=True)
    # One fragment of 152 memories of which erasure removes one: LanceDB's compaction alone would
    # leave that row's bytes in place (it rewrites a fragment only above 10 % deleted rows).
    n = 152
    texts = [f"remember {MARKERS[6].decode()}", f"remember {KEEP.decode()}"] + [f"note {i}" for i in range(n - 2)]
    sources = [tids[1], "other-traj-0"] + [f"bulk-{i}" for i in range(n - 2)]
    mem = store.table("memories")
    mem.add(pa.table({"memory_id": [f"m{i}" for i in range(n)], "tenant_id": ["acme"] * n, "scope": ["s"] * n,
                      "text": texts, "source_trajectory_id": sources,
                      "created_at": pa.array([datetime.now(UTC)] * n, pa.timestamp("us", tz="UTC")),
                      "expires_at": pa.array([None] * n, pa.timestamp("us", tz="UTC"))}))
    mem.create_fts_index("text")
    from molt.store.schemas import SKILLS
    store.table("skills").add(pa.Table.from_pylist([
        {"skill_id": "s0", "tenant_id": "acme", "trigger": "refunds", "name": "refund procedure",
         "instructions": f"learned from {MARKERS[6].decode()}", "source_trajectory_id": tids[2],
         "created_at": datetime.now(UTC)},
        {"skill_id": "s1", "tenant_id": "acme", "trigger": "orders", "name": "lookup", "instructions": "keep me",
         "source_trajectory_id": "other-traj-0", "created_at": datetime.now(UTC)}], schema=SKILLS))
    store.compact()  # indices built; old versions kept (the default keeps an hour of them)
    return rec, tids


def test_subject_erasure_leaves_no_marker_byte_on_disk_and_chains_verify(store: Store, molt_home: Path) -> None:
    spool = molt_home / "spool"
    rec, tids = _fill(store, spool)
    root = Path(store.uri)
    for m in MARKERS:  # the test means something only if the markers are there to begin with
        assert grep(root, m), m
    assert grep(spool, MARKERS[0])
    versions_before = len(store.table("events").list_versions())

    report = erase_subject(store, SUBJECT, tenant_id="acme", spool_dirs=[spool], actor="test")

    assert report.trajectories == 3 and report.events == 9 and report.chains_failed == 0
    assert report.chains_verified == 3 and report.rows == {"rewards": 1, "memories": 1, "skills": 1,
                                                                  "quarantine": 1}
    assert report.spool[0].nulled == 9 and report.spool[0].tombstoned == 2 and report.spool[0].live
    for m in MARKERS:
        assert grep(root, m) == [], (m, grep(root, m))
        assert grep(spool, m) == [], (m, grep(spool, m))
    assert grep(root, KEEP) and grep(spool, KEEP)  # other subjects' data is untouched
    for tid in tids:
        chain = store.verify(tid)
        assert chain.ok and chain.erased_payloads == 3
        assert [e.action for e in store.trajectory(tid).events] == [None, None, None]
    assert all(store.verify(f"other-traj-{i}").ok for i in range(3))
    assert len(store.table("events").list_versions()) < versions_before
    audit = store.table("audit").search().where("kind = 'erasure'").limit(None).to_arrow().to_pylist()
    assert audit[0]["target"] == "subject:" + hashlib.sha256(SUBJECT.encode()).hexdigest()
    assert SUBJECT.encode() not in audit[0]["detail"]

    # the Recorder keeps working on the erased store and its scrubbed spool
    rec.record(_other("after-erasure"))
    assert rec.flush(deliver=True) and store.verify("after-erasure").ok
    rec.close()


def test_undelivered_spool_frames_are_scrubbed_and_arrive_erased(store: Store, molt_home: Path) -> None:
    spool = molt_home / "spool"
    rec = Recorder(None, spool_dir=spool, pipeline=GovernancePipeline(POLICY))
    for ev in [*_subject_trajectory("pending"), _other("pending-other")]:
        rec.record(ev)
    assert rec.flush()
    rec.close()
    assert grep(spool, MARKERS[0])
    report = erase_subject(store, SUBJECT, spool_dirs=[spool])  # nothing in the store yet
    assert report.spool[0].nulled == 3 and not report.spool[0].live  # the whole trajectory, from the spool
    for m in MARKERS[:4]:
        assert grep(spool, m) == []
    assert grep(spool, KEEP)
    sink = MemorySink()
    with Recorder(sink, spool_dir=spool) as rec2:
        assert rec2.flush(deliver=True)
    (first,) = [r for r in sink.events.values() if r.x["trajectory_id"] == "pending" and r.x["seq"] == 0]
    assert first.payload is None and first.salt is None
    assert len(sink.sealed_events("pending")) == 3
    chain = verify_chain("pending", sink.sealed_events("pending"))
    assert chain.ok and chain.erased_payloads == 3  # erased in the spool, the chain still verifies
    assert all(r.payload is None for r in sink.events.values() if r.x["trajectory_id"] == "pending")
    assert b"".join(r.payload or b"" for r in sink.events.values()).count(KEEP) == 1


def test_tenant_erasure_deletes_every_row_of_the_tenant(store: Store, molt_home: Path) -> None:
    spool = molt_home / "spool"
    rec = Recorder(GovernedSink(store), spool_dir=spool, pipeline=GovernancePipeline(POLICY))
    for i in range(2):
        for ev in _subject_trajectory(f"g-{i}", tenant="globex"):
            rec.record(ev)
        rec.record(_other(f"a-{i}", tenant="acme"))
        assert rec.flush(deliver=True)
    rec.reward(RewardAnnotation(trajectory_id="g-0", value=1.0, source="human_label",
                                reason=MARKERS[5].decode()))  # untagged: found by trajectory
    assert rec.flush(deliver=True)
    with Recorder(store, spool_dir=molt_home / "bulk") as bulk:  # 6 of 208 rows go: under compaction's 10 %
        for i in range(200):
            bulk.record(_other(f"bulk-{i // 20}"))
        assert bulk.flush(deliver=True)
    store.compact()
    assert store.fragment_count() == 1
    root = Path(store.uri)
    assert grep(root, MARKERS[0]) and grep(root, b"globex")

    dry = erase_tenant(store, "globex", dry_run=True)
    assert dry.rows["events"] == 6 and store.count("events", "tenant_id = 'globex'") == 6

    report = erase_tenant(store, "globex", spool_dirs=[spool], actor="test")
    assert report.rows["events"] == 6 and report.rows["governance"] == 6 and report.rows["rewards"] == 1
    assert report.spool[0].tombstoned == 7
    for m in MARKERS:
        assert grep(root, m) == [] and grep(spool, m) == []
    # the tenant's name survives only in the audit record of its erasure
    assert [p for p in grep(root, b"globex") if not p.startswith("audit.lance")] == []
    assert store.count("events") == 202 and all(store.verify(f"a-{i}").ok for i in range(2))
    rec.record(_other("a-late"))
    assert rec.flush(deliver=True)
    rec.close()


def test_erase_cli_needs_an_admin_of_the_tenant(store: Store, molt_home: Path, capsys: Any) -> None:
    rec, _ = _fill(store, molt_home / "spool")
    rec.close()
    keys = molt_home / "keys.toml"
    keys.write_text('[[keys]]\nkey = "adm-acme"\ntenant = "acme"\nrole = "admin"\n'
                    '[[keys]]\nkey = "rd-acme"\ntenant = "acme"\nrole = "reader"\n'
                    '[[keys]]\nkey = "adm-globex"\ntenant = "globex"\nrole = "admin"\n')
    assert molt(["erase", "--subject", SUBJECT, "--api-key", "rd-acme"]) == 2
    assert "may not" in capsys.readouterr().err
    assert molt(["erase", "--subject", SUBJECT, "--tenant", "acme", "--api-key", "adm-globex"]) == 2
    assert molt(["erase", "--tenant", "acme", "--operator"]) == 2
    assert "--yes" in capsys.readouterr().err
    assert molt(["erase", "--subject", SUBJECT, "--api-key", "adm-acme", "--dry-run", "--json"]) == 0
    assert '"events":9' in capsys.readouterr().out and store.count("events", "payload IS NULL") == 0
    assert molt(["erase", "--subject", SUBJECT, "--api-key", "adm-acme"]) == 0
    assert "chains 3 ok, 0 failed" in capsys.readouterr().out
    assert grep(Path(store.uri), MARKERS[0]) == [] and grep(molt_home / "spool", MARKERS[0]) == []


def test_bad_erasure_requests_are_clear_errors(store: Store) -> None:
    with pytest.raises(GovernanceError, match="subject id"):
        erase_subject(store, "")
    with pytest.raises(GovernanceError, match="scope"):
        erase_subject(store, "x", scope="galaxy")
    with pytest.raises(GovernanceError, match="tenant id"):
        erase_tenant(store, "")
    assert erase_subject(store, "nobody").events == 0


def test_purge_rebuilds_vector_and_scalar_indices_without_the_erased_rows(store: Store) -> None:
    import numpy as np

    from molt.store.erase import purge, rewrite
    from molt.store.tables import ensure_table

    n = 600
    schema = pa.schema([pa.field("item_id", pa.string()), pa.field("tenant_id", pa.string()),
                        pa.field("label", pa.string()), pa.field("vector", pa.list_(pa.float32(), 8))])
    tbl = ensure_table(store, "vectors", schema)
    rng = np.random.default_rng(0)
    labels = [MARKERS[0].decode() if i == 7 else f"label-{i}" for i in range(n)]
    tbl.add(pa.table({"item_id": [f"i{i}" for i in range(n)], "tenant_id": ["acme"] * n, "label": labels,
                      "vector": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8, np.float32)), 8)},
                     schema=schema))
    tbl.create_index(vector_column_name="vector", num_partitions=2, num_sub_vectors=2)
    tbl.create_scalar_index("label", index_type="BTREE")
    root = Path(store.uri)
    assert grep(root, MARKERS[0])
    assert rewrite(store, "vectors", "item_id = 'i7'") == 1
    purge(store, ["vectors"])
    assert grep(root, MARKERS[0]) == [] and tbl.count_rows() == n - 1
    assert {ix.index_type for ix in tbl.list_indices()} == {"IvfPq", "BTree"}
    assert tbl.search([0.5] * 8).limit(3).to_arrow().num_rows == 3
