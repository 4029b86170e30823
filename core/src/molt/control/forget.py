"""Erasure that follows lineage: ``molt erase --subject S`` reaches what was learned from S's data.

:func:`erase_subject_everywhere` runs, in this order:

1. finds S's trajectories (events whose ``metadata.consent.subject_id`` is S) and every live artifact
   whose lineage (:class:`molt.lineage.LineageLog`) holds S's keyed digest or one of those trajectories;
2. a **memory or skill** is retired (its row deleted); when the rest of its evidence — its lineage less
   S's trajectories — still clears the plane's many-hands bar (:func:`molt.control.hands.many_hands`:
   ``min_hands`` distinct sessions, ``min_keys`` keys), it is regenerated: the same (redacted) text under
   a new id, whose lineage is that remaining evidence;
   a **harness edit or tool rewrite** whose remaining evidence clears the same bar stays, its lineage
   rewritten without S; otherwise it is taken out;
   an **adapter** trained on S's data is rolled back — versions holding it get the nearest earlier
   weights whose manifest does not name S (else the base model) — its directory is deleted, and a
   retraining request without S's trajectories is queued (``weight_requests``, the queue
   ``molt-trainer serve --plane-requests`` takes; its payload carries the lineage diff, S's digest
   removed);
3. every version holding such an artifact is superseded: the live one by a new version without it (or
   with the regenerated memory or skill), promoted; then each version holding it — the old live one,
   those below it in the rollback stack, canaries, proposals — is marked ``erased`` and leaves the
   stack, so no rollback reaches it again;
4. :func:`molt.governance.erasure.erase_subject` erases S's content (payloads nulled, rewards and
   quarantined records deleted, spools scrubbed), the lineage rows are rewritten without S (the
   artifacts retired are kept as ``retired`` with counts only) and old table versions are purged;
5. one audit row per tenant lists each artifact and what was done (ids and counts, never a payload).

``dry_run`` lists the same plan and changes nothing.

:func:`erase_tenant_everywhere` is :func:`molt.governance.erasure.erase_tenant` plus the tenant's adapter
directories (every adapter its lineage rows or versions name), deleted before its rows go.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from molt.atdp.ids import new_id
from molt.control.hands import many_hands
from molt.control.memory import MemoryStore
from molt.control.provenance import holds, without
from molt.control.versions import AgentConfig, AgentVersion, ModelPart, VersionRegistry
from molt.control.weight_queue import REQUESTS_TABLE, WeightQueue
from molt.governance.erasure import ErasureReport, erase_subject, erase_tenant, subject_digest
from molt.governance.records import audit_row, write_audit
from molt.lineage import (
    LINEAGE_TABLE,
    Lineage,
    LineageLog,
    LineageRecord,
    manifest_diff,
    subject_key,
)
from molt.store import Filter, Store
from molt.store.erase import purge, rewrite
from molt.store.tables import open_all

__all__ = ["ArtifactAction", "LineageErasure", "erase_subject_everywhere", "erase_tenant_everywhere"]

log = logging.getLogger("molt.control.forget")

_ROWS = {"memory": ("memories", "memory_id"), "skill": ("skills", "skill_id")}


@dataclass
class ArtifactAction:
    """One artifact an erasure reached and what was (or would be) done to it."""

    kind: str
    artifact_id: str
    tenant_id: str | None
    action: str
    trajectories_left: int = 0
    versions: list[str] = field(default_factory=list)
    replacement: str | None = None
    request_id: str | None = None
    #: an adapter's retraining request: the lineage diff (per tenant, subject digests and trajectory ids removed)
    diff: dict[str, Any] | None = None


@dataclass
class LineageErasure:
    """What :func:`erase_subject_everywhere` did: the governance report and each artifact reached."""

    report: ErasureReport
    artifacts: list[ArtifactAction] = field(default_factory=list)
    superseded: dict[str, str] = field(default_factory=dict)  # old live version → its replacement
    erased_versions: list[str] = field(default_factory=list)
    adapter_dirs_removed: list[str] = field(default_factory=list)

    @property
    def chains_failed(self) -> int:
        """Chains that no longer verify (the governance report's)."""
        return self.report.chains_failed

    @property
    def dry_run(self) -> bool:
        return self.report.dry_run

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {**self.report.as_dict(), "artifacts": [asdict(a) for a in self.artifacts],
                "superseded": self.superseded, "erased_versions": self.erased_versions,
                "adapter_dirs_removed": self.adapter_dirs_removed}

    @property
    def summary(self) -> str:
        """The governance summary and one line per artifact."""
        lines = [self.report.summary]
        what = "would be" if self.dry_run else "were"
        counts: dict[str, int] = {}
        for a in self.artifacts:
            counts[a.kind] = counts.get(a.kind, 0) + 1
        lines.append(f"lineage: {len(self.artifacts)} learned artifact(s) held the subject"
                     + (f" ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})" if counts else ""))
        for a in self.artifacts:
            extra = f" → {a.replacement}" if a.replacement else ""
            req = f"; retraining request {a.request_id}" if a.request_id else ""
            vs = f"; versions {', '.join(a.versions)}" if a.versions else ""
            lines.append(f"  {a.kind} {a.artifact_id} ({a.tenant_id}): {a.action}{extra}{vs}{req}")
        if self.superseded:
            pairs = ", ".join(f"{k} → {v}" for k, v in self.superseded.items())
            lines.append(f"versions superseded ({what}): {pairs}")
        if self.erased_versions:
            lines.append(f"versions taken out of service ({what}): {', '.join(self.erased_versions)}")
        return "\n".join(lines)


def _agents(registry: VersionRegistry, tenant_id: str | None) -> Sequence[tuple[str, str]]:
    pairs: Sequence[tuple[str, str]] = registry.agents(tenant_id)  # (mypy reads list[...] as the registry's .list)
    return pairs


def _subject_trajectories(store: Store, subject_id: str, tenant_id: str | None) -> dict[str, str | None]:
    where = Filter(subject_id=subject_id) & Filter.given(tenant_id=tenant_id or None)
    rows = (store.table("events").search().where(str(where)).select(["trajectory_id", "tenant_id"]).limit(None)
            .to_arrow())
    return dict(zip(rows.column("trajectory_id").to_pylist(), rows.column("tenant_id").to_pylist(), strict=True))


def _remaining(rec: LineageRecord, subject_id: str, tids: set[str]) -> tuple[Lineage, ...]:
    return tuple(lin.without(trajectories=tids, subjects=[subject_id]) for lin in rec.lineage)


def _clears_bar(store: Store, rec: LineageRecord, left: Sequence[Lineage], min_hands: int, min_keys: int) -> bool:
    ids = [t for lin in left for t in lin.trajectories]
    if not ids or rec.tenant_id is None:
        return False
    kind = "skill_patch" if rec.kind == "skill" else "memory_insert"
    return not many_hands(SimpleNamespace(kind=kind, source_trajectories=ids), store, rec.tenant_id,
                          min_hands=min_hands, min_keys=min_keys)


def _row(store: Store, kind: str, artifact_id: str) -> dict[str, Any] | None:
    name, key = _ROWS[kind]
    tbl = open_all(store).get(name)
    if tbl is None:
        return None
    got = tbl.search().where(str(Filter(**{key: artifact_id}))).limit(1).to_arrow().to_pylist()
    return got[0] if got else None


def erase_subject_everywhere(store: Store, subject_id: str, *, tenant_id: str | None = None,
                             spool_dirs: Sequence[str | os.PathLike[str]] = (), actor: str = "operator",
                             scope: str = "trajectory", dry_run: bool = False, min_hands: int = 3,
                             min_keys: int = 2, memories: MemoryStore | None = None) -> LineageErasure:
    """Erase ``subject_id``'s data and follow it into every learned artifact (see the module docstring).
    ``min_hands`` / ``min_keys``: the bar regenerated memories and skills must clear (the plane's
    defaults). ``memories``: the memory store to regenerate through (default: one on ``store``)."""
    tids_by = _subject_trajectories(store, subject_id, tenant_id)
    tids = set(tids_by)
    book = LineageLog(store, write=not dry_run)
    reached = book.naming(subject_id, trajectories=tids, tenant_id=tenant_id)
    registry = VersionRegistry(store)
    out = LineageErasure(report=ErasureReport(scope="subject", tenant_id=tenant_id, dry_run=dry_run))
    # the plan: per artifact, what happens and what replaces it in the versions holding it
    replace_in: dict[tuple[str, str], Any] = {}  # (kind, id) → replacement id (memory/skill), or None
    models: dict[str, ModelPart] = {}
    new_records: list[LineageRecord] = []
    for rec in reached:
        left = _remaining(rec, subject_id, tids)
        act = ArtifactAction(kind=rec.kind, artifact_id=rec.artifact_id, tenant_id=rec.tenant_id, action="",
                             trajectories_left=sum(len(x.trajectories) for x in left))
        keep = rec.kind != "adapter" and _clears_bar(store, rec, left, min_hands, min_keys)
        if rec.kind in _ROWS:
            act.action = "retired; regenerated from the remaining evidence" if keep else "retired"
            replace_in[(rec.kind, rec.artifact_id)] = None
            if keep and not dry_run:
                act.replacement = _regenerate(store, rec, left, memories)
                replace_in[(rec.kind, rec.artifact_id)] = act.replacement
                new_records.append(book.make(rec.kind, rec.tenant_id, act.replacement, left, agent_id=rec.agent_id,
                                              detail={"regenerated_from": rec.artifact_id}))
        elif rec.kind in ("harness_edit", "tool_rewrite"):
            act.action = "kept: the remaining evidence clears the bar (lineage without the subject)" if keep \
                else "taken out of the versions holding it"
            if not keep:
                replace_in[(rec.kind, rec.artifact_id)] = None
        else:
            models[rec.artifact_id] = _clean_model(
                registry, book, rec, lambda o: o.names_subject(subject_id) or bool(tids & set(o.trajectories)))
            act.action = (f"rolled back to {models[rec.artifact_id].adapter or 'the base model'}; adapter files "
                          f"deleted; retraining without the subject queued")
            replace_in[(rec.kind, rec.artifact_id)] = None
        out.artifacts.append(act)
        if keep and rec.kind in ("harness_edit", "tool_rewrite"):
            new_records.append(rec.model_copy(update={"lineage": left, "row_id": new_id()}))
        else:
            new_records.append(rec.model_copy(update={"lineage": left, "status": "retired", "row_id": new_id(),
                                                      "detail": {**rec.detail, "retired_by": "erasure"}}))
    by_key = {(r.kind, r.artifact_id): r for r in reached}
    gone = [by_key[k] for k in replace_in]
    _supersede(registry, gone, replace_in, models, out, actor=actor, dry_run=dry_run)
    if not dry_run:
        for rec in reached:
            if rec.kind == "adapter":
                act = next(a for a in out.artifacts if a.artifact_id == rec.artifact_id and a.kind == "adapter")
                excluded = {x.tenant_id or "": [subject_key(x.tenant_id, subject_id)]
                            for x in rec.lineage if x.names_subject(subject_id)}
                act.request_id, act.diff = _queue_retraining(
                    store, registry, rec, models[rec.artifact_id], _remaining(rec, subject_id, tids), tids,
                    why="an erased subject's data", payload={"excluded_subjects": excluded})
                path = rec.detail.get("path")
                if path and Path(path).is_dir():
                    shutil.rmtree(path)
                    out.adapter_dirs_removed.append(str(path))
        for rec in reached:
            if rec.kind in _ROWS:
                name, key = _ROWS[rec.kind]
                rewrite(store, name, Filter(**{key: rec.artifact_id}))
        book.replace(new_records)
    out.report = erase_subject(store, subject_id, tenant_id=tenant_id, spool_dirs=spool_dirs, actor=actor, scope=scope,
                               dry_run=dry_run)
    if dry_run:
        return out
    have = open_all(store)
    purge(store, [t for t in (LINEAGE_TABLE, "memories", "skills", REQUESTS_TABLE) if t in have])
    named = {t for t in tids_by.values() if t} | {r.tenant_id for r in reached if r.tenant_id}
    tenants: Sequence[str | None] = sorted(named | ({tenant_id} if tenant_id else set()))
    sha = subject_digest(subject_id)
    write_audit(store, [audit_row(tenant_id=t, kind="erasure", actor=actor, target=f"subject:{sha}",
                                  summary=f"lineage: {len([a for a in out.artifacts if a.tenant_id == t])} learned "
                                          f"artifact(s) of the subject retired, rolled back or re-attributed",
                                  detail={"artifacts": [asdict(a) for a in out.artifacts if a.tenant_id == t],
                                          "superseded": out.superseded, "erased_versions": out.erased_versions,
                                          "adapter_dirs_removed": out.adapter_dirs_removed})
                        for t in (tenants or [None])])
    return out


def _regenerate(store: Store, rec: LineageRecord, left: Sequence[Lineage], memories: MemoryStore | None) -> str:
    row = _row(store, rec.kind, rec.artifact_id)
    if row is None or rec.tenant_id is None:
        raise ValueError(f"{rec.kind} {rec.artifact_id} is not stored; nothing to regenerate")
    mem = memories or MemoryStore(store)
    src = next((t for lin in left for t in lin.trajectories), None)
    if rec.kind == "memory":
        return mem.add_memory(rec.tenant_id, row["text"], agent_id=row["agent_id"], scope=row["scope"] or "agent",
                              source_trajectory_id=src).memory_id
    return mem.add_skill(rec.tenant_id, row["name"] or "skill", row["trigger"], row["instructions"],
                         agent_id=row["agent_id"], source_trajectory_id=src).skill_id


def _clean_model(registry: VersionRegistry, book: LineageLog, rec: LineageRecord,
                 tainted: Callable[[LineageRecord], bool]) -> ModelPart:
    """The weights a version holding adapter ``rec`` goes back to: the nearest ancestor's adapter whose
    lineage holds none of the erased data (``tainted`` says), else its base model."""
    for t, a in _agents(registry, rec.tenant_id):
        for v in registry.list(t, a):
            if v.parts.model.adapter != rec.artifact_id:
                continue
            cur = v.parent_id
            while cur:
                p = registry.get(cur, tenant_id=t)
                m = p.parts.model
                if m.adapter is None:
                    return m
                other = book.get("adapter", m.adapter)
                if other is not None and not tainted(other) and other.status == "live":
                    return m
                cur = p.parent_id
            return ModelPart(base=v.parts.model.base)
    return ModelPart(base=str(rec.detail.get("base_model") or "base"))


def _supersede(registry: VersionRegistry, gone: list[LineageRecord], replace_in: dict[tuple[str, str], Any],
               models: dict[str, ModelPart], out: LineageErasure, *, actor: str, dry_run: bool) -> None:
    tenants = sorted({t for r in gone for t in (r.tenant_id, *(x.tenant_id for x in r.lineage),
                                                *r.detail.get("share_with", ())) if t})
    for tenant in tenants:
        for t, a in _agents(registry, tenant):
            versions = registry.list(t, a)
            hit = {v.version_id: [r for r in gone if holds(registry, v, r)] for v in versions}
            for v in versions:
                for r in hit[v.version_id]:
                    act = next(x for x in out.artifacts if x.kind == r.kind and x.artifact_id == r.artifact_id)
                    act.versions.append(v.version_id)
            live = next((v for v in versions if v.status == "live"), None)
            if live is not None and hit[live.version_id]:
                parts = _parts_without(registry, live, hit[live.version_id], replace_in, models)
                if dry_run:
                    out.superseded[live.version_id] = "(a new version)"
                else:
                    nv = registry.create(t, a, parts, parent=live.version_id, created_by=actor,
                                         note=f"erasure: {len(hit[live.version_id])} learned part(s) of an erased "
                                              f"subject taken out")
                    registry.promote(nv.version_id, actor=actor, reason="erasure follows lineage",
                                     expected_live=live.version_id)
                    out.superseded[live.version_id] = nv.version_id
            for v in versions:
                if hit[v.version_id] and v.status != "erased":
                    out.erased_versions.append(v.version_id)
                    if not dry_run:
                        registry.erase(v.version_id, actor=actor, reason="holds learned parts of an erased subject")


def _parts_without(registry: VersionRegistry, v: AgentVersion, recs: list[LineageRecord],
                   replace_in: dict[tuple[str, str], Any], models: dict[str, ModelPart]) -> AgentConfig:
    cur = v
    for r in recs:
        parts = without(registry, cur, r, model=models.get(r.artifact_id))
        new = replace_in.get((r.kind, r.artifact_id))
        if new and r.kind == "memory":
            parts = parts.with_memories([new])
        elif new and r.kind == "skill":
            parts = parts.with_skills([new])
        cur = cur.model_copy(update={"parts": parts})
    return cur.parts


def _queue_retraining(store: Store, registry: VersionRegistry, rec: LineageRecord, model: ModelPart,
                      left: Sequence[Lineage], tids: set[str], *, why: str,
                      payload: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """Queue a weight update like the adapter's, from ``model``, on ``left`` and never on ``tids``; returns
    its request id and the lineage diff (old adapter → what the request may train on)."""
    diff = manifest_diff(rec.lineage, left).model_dump(mode="json")
    agent = rec.agent_id or next((a for _, a in _agents(registry, rec.tenant_id)), None)
    if rec.tenant_id is None or agent is None:
        return None, diff
    from molt.control.diagnose import Candidate

    excluded = sorted(tids)
    cand = Candidate(kind="weight_update", cluster=f"erasure-retrain:{rec.artifact_id}", cost=0.0,
                     description=f"retrain adapter {rec.artifact_id} without {why}",
                     payload={"model": model.model_dump(mode="json"), "retrains": rec.artifact_id,
                              "exclude_trajectories": excluded, **payload, "lineage_diff": diff},
                     source_trajectories=[t for lin in left for t in lin.trajectories])
    rid = WeightQueue(store)(rec.tenant_id, agent, cand)
    return rid, diff


def erase_tenant_everywhere(store: Store, tenant_id: str, *, spool_dirs: Sequence[str | os.PathLike[str]] = (),
                            actor: str = "operator", dry_run: bool = False) -> ErasureReport:
    """:func:`~molt.governance.erasure.erase_tenant`, and the tenant's adapter directories deleted first
    (``report.rows["adapter_dirs"]``); an adapter of another tenant that learned from this tenant's data
    (a shared one) is rolled back in the versions holding it, its directory deleted and a retraining
    without this tenant's data queued, as a subject's erasure does (``report.rows["shared_adapters"]``)."""
    book = LineageLog(store, write=not dry_run)
    registry = VersionRegistry(store)
    shared = _shared_adapters(store, registry, book, tenant_id, actor=actor, dry_run=dry_run)
    dirs: set[str] = set()
    for rec in book.records(tenant_id, kind="adapter", status=None):
        if rec.detail.get("path"):
            dirs.add(str(rec.detail["path"]))
    for t, a in _agents(registry, tenant_id):
        for v in registry.list(t, a):
            if v.parts.model.adapter_path:
                dirs.add(v.parts.model.adapter_path)
    present = sorted(d for d in dirs if Path(d).is_dir())
    if not dry_run:
        for d in present:
            shutil.rmtree(d)
    report = erase_tenant(store, tenant_id, spool_dirs=spool_dirs, actor=actor, dry_run=dry_run)
    report.rows["adapter_dirs"] = len(present) + len(shared.adapter_dirs_removed)
    report.rows["shared_adapters"] = len(shared.artifacts)
    if shared.artifacts and not dry_run:
        purge(store, [t for t in (LINEAGE_TABLE, REQUESTS_TABLE) if t in open_all(store)])
        write_audit(store, [audit_row(tenant_id=t, kind="erasure", actor=actor, target=f"tenant:{tenant_id}",
                                      summary=f"lineage: {len(shared.artifacts)} adapter(s) that learned from an "
                                              f"erased tenant's data rolled back",
                                      detail={"artifacts": [asdict(a) for a in shared.artifacts],
                                              "superseded": shared.superseded,
                                              "erased_versions": shared.erased_versions,
                                              "adapter_dirs_removed": shared.adapter_dirs_removed})
                            for t in sorted({a.tenant_id for a in shared.artifacts if a.tenant_id})])
    return report


def _shared_adapters(store: Store, registry: VersionRegistry, book: LineageLog, tenant_id: str, *, actor: str,
                     dry_run: bool) -> LineageErasure:
    """Other tenants' adapters whose lineage holds ``tenant_id``'s data: rolled back and retrained without it."""
    hit = [r for r in book.records(kind="adapter") if r.tenant_id != tenant_id
           and any(x.tenant_id == tenant_id for x in r.lineage)]
    out = LineageErasure(report=ErasureReport(scope="tenant", tenant_id=tenant_id, dry_run=dry_run))
    if not hit:
        return out

    def tainted(o: LineageRecord) -> bool:
        return any(x.tenant_id == tenant_id for x in o.lineage)

    models = {r.artifact_id: _clean_model(registry, book, r, tainted) for r in hit}
    for r in hit:
        out.artifacts.append(ArtifactAction(
            kind="adapter", artifact_id=r.artifact_id, tenant_id=r.tenant_id,
            action=f"rolled back to {models[r.artifact_id].adapter or 'the base model'}; adapter files deleted; "
                   f"retraining without the erased tenant's data queued",
            trajectories_left=sum(len(x.trajectories) for x in r.lineage if x.tenant_id != tenant_id)))
    _supersede(registry, hit, {("adapter", r.artifact_id): None for r in hit}, models, out, actor=actor,
               dry_run=dry_run)
    if dry_run:
        return out
    tids = {t for r in hit for x in r.lineage if x.tenant_id == tenant_id for t in x.trajectories}
    retired = []
    for r, act in zip(hit, out.artifacts, strict=True):
        left = tuple(x for x in r.lineage if x.tenant_id != tenant_id)
        act.request_id, act.diff = _queue_retraining(store, registry, r, models[r.artifact_id], left, tids,
                                                     why="an erased tenant's data",
                                                     payload={"excluded_tenant": tenant_id})
        path = r.detail.get("path")
        if path and Path(path).is_dir():
            shutil.rmtree(path)
            out.adapter_dirs_removed.append(str(path))
        retired.append(r.model_copy(update={"lineage": left, "status": "retired", "row_id": new_id(),
                                            "detail": {**r.detail, "retired_by": "erasure",
                                                       "share_with": [t for t in r.detail.get("share_with", ())
                                                                      if t != tenant_id]}}))
    book.replace(retired)
    return out
