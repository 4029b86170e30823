"""Erasure follows lineage (issue 47): a subject whose corrections fed memories and a harness edit and
whose trajectories trained an adapter (the real trainer code: RequestTrainer → Publisher, one LoRA step
on SmolLM2-135M) is erased with ``molt erase --subject``; afterwards no live version, and no version
a rollback can reach, holds those artifacts, the queued retraining request excludes the subject (and the
adapter it trains has a manifest without it: the manifest diff), a byte scan of MOLT_HOME finds none of
the subject's raw values, and the audit log lists each artifact and what was done.

Troubleshooting: a marker found under ``store/`` names the table that kept it (molt.store.erase purges
old versions); a subject id found outside ``store/events.lance`` means a lineage, manifest or request
wrote it in clear instead of as its keyed digest (molt.lineage.subject_key).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from molt.atdp import Event, EventKind, Generation, RewardAnnotation, RewardSource, TokenTrace, UserMessage
from molt.capture import Recorder
from molt.cli import run as molt
from molt.control.diagnose import Candidate
from molt.control.memory import MemoryStore
from molt.control.provenance import record_change
from molt.control.versions import AgentConfig, ModelPart, VersionRegistry
from molt.control.weight_queue import WeightQueue, serve_requests
from molt.control.weights import WeightLoop, store_reader
from molt.lineage import LineageLog, manifest_diff, read_manifest, subject_key
from molt.store import Store
from molt_trainer.policy import LoraSettings
from molt_trainer.publish import Publisher
from molt_trainer.requests import RequestTrainer, RunSettings

SUBJECT = "ana.lima@example.org"
MARK = "lilac-octopus-4711"  # what the subject wrote: in its messages and its corrections
AGENT = "support"
MODEL = "smollm2-135m-instruct"


def _grep(root: Path, needle: bytes) -> list[str]:
    hits = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            if needle in p.read_bytes():
                hits.append(str(p.relative_to(root)))
    return hits


def _record(rec: Recorder, i: int, *, subject: bool, reward: float) -> str:
    tid = f"t-{'s' if subject else 'u'}-{i}"
    md: dict[str, Any] = {"tenant_id": "acme", "agent_id": AGENT, "task": "refund"}
    if subject:
        md["consent"] = {"subject_id": SUBJECT, "training": True}
    who = MARK if subject else f"user {i}"
    rec.record(Event(trajectory_id=tid, session_id=f"sess-{tid}", kind=EventKind.USER_MESSAGE, metadata=md,
                     action=UserMessage(content=f"my parcel came damaged, I am {who}")))
    trace = TokenTrace(prompt_ids=[3, 4, 5 + i % 3], completion_ids=[6 + i % 4, 7], completion_logprobs=[-0.5, -0.5],
                       policy_version="smollm2@base", tokenizer="smollm2")
    rec.record(Event(trajectory_id=tid, session_id=f"sess-{tid}", kind=EventKind.MODEL_CALL, metadata=md,
                     reward=reward, action=Generation(text=f"refund for {who}", tokens=trace)))
    return tid


def _correct(store: Store, tid: str, text: str) -> None:
    store.append_rewards([RewardAnnotation(trajectory_id=tid, value=0.0, source=RewardSource.USER_CORRECTION,
                                           reason=text)])


def _json_lines(out: str) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in out.strip().splitlines() if x.startswith("{")]


def test_erasing_a_subject_retires_rolls_back_and_retrains_what_it_fed(policy_model_dir: Path, molt_home: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    store = Store.open(molt_home / "store", auto_compact=False)
    rec = Recorder(store, spool_dir=molt_home / "spool")
    subj = [_record(rec, i, subject=True, reward=float(i % 2)) for i in range(3)]
    others = [_record(rec, i, subject=False, reward=float(i % 2)) for i in range(6)]
    assert rec.flush(deliver=True)
    for t in subj:
        _correct(store, t, f"no: damaged parcels are refunded in 5 days ({MARK})")
    for t in others:
        _correct(store, t, "damaged parcels are refunded within 5 days")

    reg = VersionRegistry(store)
    base = reg.ensure_base("acme", AGENT, AgentConfig(model=ModelPart(base=MODEL)))
    mem = MemoryStore(store)

    def apply(parent: Any, parts: AgentConfig, evidence: list[str], kind: str) -> Any:
        # what ControlPlane._apply does once a candidate is chosen: the version, its lineage, live
        v = reg.create("acme", AGENT, parts, parent=parent.version_id, note=kind)
        record_change(store, v, parent, evidence, kind=kind)
        return reg.promote(v.version_id, actor="control-plane")

    # memory 1: the subject and two others (after erasure: 2 sessions, under the bar of 3) → retired
    m1 = mem.add_memory("acme", "Damaged parcels are refunded within 5 days.", agent_id=AGENT)
    v2 = apply(base, base.parts.with_memories([m1.memory_id]), [subj[0], *others[:2]], "memory_insert")
    # memory 2: the subject and four others (3+ sessions remain) → regenerated from the rest
    m2 = mem.add_memory("acme", "Refunds go back to the original card.", agent_id=AGENT)
    v3 = apply(v2, v2.parts.with_memories([m2.memory_id]), [subj[1], *others[2:6]], "memory_insert")
    # a harness edit on the subject's and one other's evidence → taken out
    v4 = apply(v3, v3.parts.with_system_prompt("Answers state the refund window in days."), [subj[2], others[0]],
               "harness_edit")
    # the adapter: a real LoRA run on the agent's traffic, the subject's trajectories among its samples
    pub = Publisher(model=MODEL, out_dir=molt_home / "adapters", store=store, tenant_id="acme", agent_id=AGENT)
    trainer = RequestTrainer(pub, RunSettings(lora=LoraSettings(rank=2, lr=1e-2), steps=1),
                             model_path=policy_model_dir)
    loop = WeightLoop(store, trainer, read=store_reader(store), min_trajectories=4, timeout_s=300)
    cand = Candidate(kind="weight_update", cluster="refund|answer", description="weights", cost=10.0,
                     payload={"task": "refund"}, source_trajectories=[*subj, *others])
    part = loop("acme", AGENT, cand)
    v5 = apply(v4, v4.parts.with_model(part), [*subj, *others], "weight_update")
    old = read_manifest(part.adapter_path)
    assert old.names_subject(SUBJECT) and set(subj) <= {t for x in old.lineage for t in x.trajectories}
    assert SUBJECT.encode() not in (Path(part.adapter_path) / "molt-manifest.json").read_bytes()

    # versions show: the lineage section, counts and tenants only
    assert molt(["versions", "show", v5.version_id, "--operator"]) == 0
    shown = orjson.loads(capsys.readouterr().out)
    kinds = sorted(x["kind"] for x in shown["lineage"])
    assert kinds == ["adapter", "harness_edit", "memory", "memory"], shown["lineage"]
    assert all(x["tenants"] == ["acme"] and x["subjects"] == 1 for x in shown["lineage"]), shown["lineage"]
    assert molt(["adapters", "ls", "--operator", "--json"]) == 0
    [ad] = _json_lines(capsys.readouterr().out)
    assert (ad["artifact"], ad["manifest"], ad["subjects"]) == (part.adapter, "ok", 1) and ad["versions"]

    # dry run: the same plan, nothing changed
    assert molt(["erase", "--subject", SUBJECT, "--operator", "--dry-run", "--json"]) == 0
    plan = orjson.loads(capsys.readouterr().out)
    assert sorted((a["kind"], a["artifact_id"]) for a in plan["artifacts"]) == sorted(
        [("memory", m1.memory_id), ("memory", m2.memory_id), ("harness_edit", f"{v4.version_id}#harness"),
         ("adapter", part.adapter)])
    assert reg.live("acme", AGENT).version_id == v5.version_id and Path(part.adapter_path).is_dir()

    assert molt(["erase", "--subject", SUBJECT, "--operator", "--json"]) == 0
    done = orjson.loads(capsys.readouterr().out)
    acts = {(a["kind"], a["artifact_id"]): a for a in done["artifacts"]}
    assert acts[("memory", m1.memory_id)]["action"] == "retired"
    regen = acts[("memory", m2.memory_id)]
    assert regen["action"].startswith("retired; regenerated") and regen["replacement"]
    assert acts[("harness_edit", f"{v4.version_id}#harness")]["action"].startswith("taken out")
    assert acts[("adapter", part.adapter)]["request_id"] and done["chains_failed"] == 0

    # no live version holds them, and none a rollback can reach
    store = Store.open(molt_home / "store", auto_compact=False)
    reg = VersionRegistry(store)
    live = reg.live("acme", AGENT)
    assert live.parts.memory_ids == (regen["replacement"],) and live.parts.model.adapter is None, (live, done)
    assert not live.parts.harness.system_prompt
    assert {v.version_id: v.status for v in reg.list("acme", AGENT) if v.version_id in
            (v2.version_id, v3.version_id, v4.version_id, v5.version_id)} == dict.fromkeys(
        (v2.version_id, v3.version_id, v4.version_id, v5.version_id), "erased")
    assert reg.rollback("acme", AGENT, actor="t").version_id == base.version_id
    assert not Path(part.adapter_path).exists()
    assert [r.memory_id for r in MemoryStore(store).memories("acme")] == [regen["replacement"]]
    book = LineageLog(store)
    assert not book.records("acme", kind="memory", artifact_ids=[m1.memory_id, m2.memory_id])  # live ones
    assert not any(r.names_subject(SUBJECT) for r in book.records("acme", status=None))

    # the retraining request excludes the subject: its lineage diff, and the manifest of what it trains
    [req] = WeightQueue(store).requests("acme")
    p = req.candidate["payload"]
    digest = subject_key("acme", SUBJECT)
    assert p["lineage_diff"]["removed_subjects"] == {"acme": [digest]} and set(subj) <= set(p["exclude_trajectories"])
    assert not set(subj) & set(req.candidate["source_trajectories"]) and p["model"]["adapter"] is None
    reg.promote(live.version_id, actor="t")  # (undo the rollback check above)
    # the trainer service takes it (the same weight loop: its trainer starts from fresh weights each run)
    assert serve_requests(WeightQueue(store), loop, threading.Event(), tenant_id="acme", max_requests=1,
                          poll_s=0.01) == 1
    loop.close()
    [after] = WeightQueue(store).requests("acme")
    assert after.status == "done", after.detail
    new = read_manifest(reg.get(after.detail).parts.model.adapter_path)
    diff = manifest_diff(old.lineage, new.lineage)
    assert not new.names_subject(SUBJECT) and diff.removed_subjects == {"acme": (digest,)}
    assert set(diff.removed_trajectories["acme"]) >= set(subj) and not diff.added_subjects

    # a byte scan: none of the subject's words anywhere; its id only where governance keeps envelopes
    # (sealed events, their spool frames, per-event governance decisions), never in what was learned
    store.close()
    assert _grep(molt_home, MARK.encode()) == []
    envelopes = ("store/events.lance/", "store/governance.lance/", "spool/")
    assert all(h.startswith(envelopes) for h in _grep(molt_home, SUBJECT.encode())), _grep(molt_home, SUBJECT.encode())

    # the audit log lists each artifact and what was done
    assert molt(["audit", "--kind", "erasure", "--operator", "--tenant", "acme", "--json"]) == 0
    rows = _json_lines(capsys.readouterr().out)
    listed = {(a["kind"], a["artifact_id"]): a["action"]
              for r in rows for a in (r.get("detail") or {}).get("artifacts", [])}
    assert set(listed) == set(acts) and listed[("adapter", part.adapter)].startswith("rolled back")
