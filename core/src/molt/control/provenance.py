"""Lineage of what the plane learns, per part of a policy version (:mod:`molt.lineage` keeps the rows).

When the plane makes a version (:func:`record_change`), each part the version adds to its parent gets a
lineage row: a new memory or skill (by its id), a harness edit and a tool rewrite (by the version that
made them, ``<version>#harness`` and ``<version>#tools.<name>``), an adapter (by its name, from the
manifest in its directory when the trainer did not record it). The lineage is the candidate's evidence:
the trajectories of its cluster's corrections and failures and the subjects they concern (keyed digests).

:func:`version_lineage` lists a version's parts with their lineage (``molt versions show``);
:func:`holds` and :func:`without` say whether a version still holds an artifact and what its parts are
without it (what :mod:`molt.control.forget` supersedes a version with).

A harness edit is held by the version that made it and by every descendant whose system prompt still
has the lines it added (and whose other harness fields it changed still have its values); a tool rewrite
by those whose rewrite of that tool is still the one it made.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from molt.control.versions import AgentConfig, AgentVersion, ModelPart, VersionRegistry
from molt.lineage import Lineage, LineageLog, LineageRecord, lineage_from_store, read_manifest
from molt.store import Store

__all__ = ["ensure_adapter_lineage", "holds", "record_change", "version_lineage", "without"]

log = logging.getLogger("molt.control")

_HARNESS_FIELDS = ("system_prompt_mode", "memory_header", "skills")


def _prompt_lines(parts: AgentConfig) -> list[str]:
    return [x for x in (parts.harness.system_prompt or "").splitlines() if x.strip()]


def _tenant_lineage(store: Store, tenant_id: str, trajectories: Sequence[str]) -> tuple[Lineage, ...]:
    # the plane's tenant check refused any candidate whose sources are another tenant's; only the
    # tenant's own are recorded here whatever a caller passes
    return tuple(lin for lin in lineage_from_store(store, trajectories) if lin.tenant_id == tenant_id)


def record_change(store: Store, version: AgentVersion, parent: AgentVersion | None,
                  trajectories: Sequence[str], *, kind: str = "") -> list[LineageRecord]:
    """Record the lineage of every part ``version`` adds to ``parent``: the candidate's evidence
    ``trajectories`` (see the module docstring). Never raises: a lineage that cannot be written is
    logged, and the version stands (it is recorded again by nothing; ``molt versions show`` says
    "no lineage recorded")."""
    try:
        return _record(store, version, parent, trajectories, kind)
    except Exception:
        log.exception("Recording the lineage of %s failed.", version.version_id)
        return []


def _record(store: Store, v: AgentVersion, parent: AgentVersion | None, trajectories: Sequence[str],
            kind: str) -> list[LineageRecord]:
    book = LineageLog(store)
    t, a = v.tenant_id, v.agent_id
    old = parent.parts if parent is not None else None
    lin = _tenant_lineage(store, t, trajectories)
    out = []
    detail = {"change": kind} if kind else {}
    for mid in v.parts.memory_ids:
        if old is None or mid not in old.memory_ids:  # (a row the migration made from its source is superseded)
            out.append(book.record("memory", t, mid, lin, agent_id=a, version_id=v.version_id, detail=detail))
    for sid in v.parts.skill_ids:
        if old is None or sid not in old.skill_ids:
            out.append(book.record("skill", t, sid, lin, agent_id=a, version_id=v.version_id, detail=detail))
    if old is not None and v.parts.harness != old.harness:
        added = [x for x in _prompt_lines(v.parts) if x not in set(_prompt_lines(old))]
        fields = [f for f in _HARNESS_FIELDS if getattr(v.parts.harness, f) != getattr(old.harness, f)]
        out.append(book.record("harness_edit", t, f"{v.version_id}#harness", lin, agent_id=a, version_id=v.version_id,
                               detail={**detail, "lines_added": len(added), "fields": fields}))
    for name in sorted(set(v.parts.tools) | set(old.tools if old is not None else {})):
        if old is not None and v.parts.tools.get(name) != old.tools.get(name) and name in v.parts.tools:
            out.append(book.record("tool_rewrite", t, f"{v.version_id}#tools.{name}", lin, agent_id=a,
                                   version_id=v.version_id, detail={**detail, "tool": name}))
    m = v.parts.model
    if m.adapter and (old is None or m.adapter != old.model.adapter):
        got = ensure_adapter_lineage(store, t, a, m, version_id=v.version_id)
        if got is not None:
            out.append(got)
    return out


def ensure_adapter_lineage(store: Store, tenant_id: str, agent_id: str | None, model: ModelPart, *,
                           version_id: str | None = None) -> LineageRecord | None:
    """The adapter's lineage row: the trainer's when it recorded one, else one made from the manifest
    in its directory (``None`` when it has neither: such an adapter is refused at load)."""
    if not model.adapter:
        return None
    book = LineageLog(store)
    have = book.get("adapter", model.adapter, tenant_id)
    if have is not None:
        return have
    if not model.adapter_path:
        return None
    try:
        man = read_manifest(model.adapter_path)
    except Exception as exc:
        log.warning("Adapter %s has no readable manifest (%s); no lineage recorded.", model.adapter, exc)
        return None
    return book.record("adapter", man.tenant_id, model.adapter, man.lineage, agent_id=agent_id, version_id=version_id,
                       detail=adapter_detail(man, model.adapter_path))


def adapter_detail(man: Any, path: str | Path) -> dict[str, Any]:
    """What an adapter's lineage row keeps besides the lineage: ids and its directory, no payload."""
    return {"manifest_id": man.manifest_id, "path": str(path), "base_model": man.base_model,
            "share_with": list(man.share_with), "created_at": man.created_at, "request_id": man.request_id,
            "replaces": man.replaces}


def _ancestry(registry: VersionRegistry, v: AgentVersion) -> list[str]:
    out, cur, seen = [v.version_id], v.parent_id, {v.version_id}
    while cur and cur not in seen:
        seen.add(cur)
        out.append(cur)
        try:
            cur = registry.get(cur, tenant_id=v.tenant_id).parent_id
        except Exception:
            break
    return out


def holds(registry: VersionRegistry, v: AgentVersion, rec: LineageRecord) -> bool:
    """Whether version ``v`` holds the artifact of ``rec`` (see the module docstring)."""
    p = v.parts
    if rec.kind == "memory":
        return rec.artifact_id in p.memory_ids
    if rec.kind == "skill":
        return rec.artifact_id in p.skill_ids
    if rec.kind == "adapter":
        return p.model.adapter == rec.artifact_id
    maker_id, _, part = rec.artifact_id.partition("#")
    if maker_id not in _ancestry(registry, v):
        return False
    maker = registry.get(maker_id, tenant_id=v.tenant_id)
    if rec.kind == "tool_rewrite":
        name = part.removeprefix("tools.")
        return name in p.tools and p.tools.get(name) == maker.parts.tools.get(name)
    before = _parent_parts(registry, maker)
    added = [x for x in _prompt_lines(maker.parts) if before is None or x not in set(_prompt_lines(before))]
    mine = set(_prompt_lines(p))
    fields = [f for f in _HARNESS_FIELDS if before is not None
              and getattr(maker.parts.harness, f) != getattr(before.harness, f)]
    return (bool(added) and all(x in mine for x in added)) or any(
        getattr(p.harness, f) == getattr(maker.parts.harness, f) for f in fields)


def _parent_parts(registry: VersionRegistry, v: AgentVersion) -> AgentConfig | None:
    if not v.parent_id:
        return None
    try:
        return registry.get(v.parent_id, tenant_id=v.tenant_id).parts
    except Exception:
        return None


def without(registry: VersionRegistry, v: AgentVersion, rec: LineageRecord, *,
            model: ModelPart | None = None) -> AgentConfig:
    """``v``'s parts without the artifact of ``rec``: the memory or skill left out, the harness edit's
    lines and fields taken back to what its maker's parent had, the tool rewrite back to the maker's
    parent's, an adapter replaced by ``model`` (default: the base model without an adapter)."""
    p = v.parts
    if rec.kind == "memory":
        return p.model_copy(update={"memory_ids": tuple(x for x in p.memory_ids if x != rec.artifact_id)})
    if rec.kind == "skill":
        return p.model_copy(update={"skill_ids": tuple(x for x in p.skill_ids if x != rec.artifact_id)})
    if rec.kind == "adapter":
        return p.with_model(model or ModelPart(base=p.model.base))
    maker_id, _, part = rec.artifact_id.partition("#")
    maker = registry.get(maker_id, tenant_id=v.tenant_id)
    before = _parent_parts(registry, maker) or AgentConfig(model=p.model)
    if rec.kind == "tool_rewrite":
        name = part.removeprefix("tools.")
        tools = dict(p.tools)
        if name in before.tools:
            tools[name] = before.tools[name]
        else:
            tools.pop(name, None)
        return p.model_copy(update={"tools": tools})
    added = {x for x in _prompt_lines(maker.parts) if x not in set(_prompt_lines(before))}
    kept = [x for x in (p.harness.system_prompt or "").splitlines() if x not in added]
    update: dict[str, Any] = {"system_prompt": "\n".join(kept) or None}
    for f in _HARNESS_FIELDS:
        if getattr(maker.parts.harness, f) != getattr(before.harness, f) and \
                getattr(p.harness, f) == getattr(maker.parts.harness, f):
            update[f] = getattr(before.harness, f)
    return p.model_copy(update={"harness": p.harness.model_copy(update=update)})


def version_lineage(store: Store, registry: VersionRegistry, v: AgentVersion) -> list[LineageRecord]:
    """The lineage of each learned part ``v`` holds: its memories, skills, adapter, and the harness
    edits and tool rewrites of it and its ancestors that it still holds."""
    book = LineageLog(store)
    p = v.parts
    out = [*book.records(v.tenant_id, kind="memory", artifact_ids=p.memory_ids, status=None),
           *book.records(v.tenant_id, kind="skill", artifact_ids=p.skill_ids, status=None)]
    if p.model.adapter:
        got = book.get("adapter", p.model.adapter)
        if got is not None:
            out.append(got)
    chain = _ancestry(registry, v)
    for kind in ("harness_edit", "tool_rewrite"):
        for rec in book.records(v.tenant_id, kind=kind, status=None):
            if rec.artifact_id.partition("#")[0] in chain and holds(registry, v, rec):
                out.append(rec)
    return out
