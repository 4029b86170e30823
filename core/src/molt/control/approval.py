"""Approval mode: which changes wait for an operator, and the proposals that wait.

``PlaneSettings.approval`` says what the control plane may put in front of users on its own:

=========  ==========================================================================================
``auto``   every change goes to canary (then promotion) on the plane's own judgement
``context`` a context change — memory, skill, harness edit, tool schema — becomes a *proposed* version
           and waits for an operator; weight updates go to canary as in ``auto``
``all``    every new version (context changes and trained adapters) waits for an operator
=========  ==========================================================================================

Rollbacks and canary aborts never wait: they restore what was serving before. A proposed version is a
status in the version registry (:meth:`~molt.control.versions.VersionRegistry.propose`), not routed;
beside it this module keeps the evidence it was proposed on (the ``agent_proposals`` table: the
decision's candidate with its replay and regression evidence, the failure cluster, the diff against the
live version) so the operator judges it as the plane did. Approving starts the canary (the plane then
promotes or aborts it as any canary); rejecting keeps the live version and remembers the candidate, so
the plane does not propose the same change for the same cluster again. Each approval and rejection is
an ``audit`` row of the tenant (kind ``approval``).

Example::

    book = Proposals(store)
    for p in book.list("acme"):
        print(p.version.version_id, p.kind, p.cluster)
    book.approve("support@acme:v3", tenant_id="acme", actor="console:alice")
    book.reject("support@acme:v4", tenant_id="acme", actor="console:alice", comment="wrong refund window")
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
import pyarrow as pa

from molt.control.versions import AgentVersion, VersionRegistry, diff_parts
from molt.errors import InterventionError, NotFound
from molt.governance.records import audit_row, write_audit
from molt.store import Filter, Store
from molt.store.tables import append, ensure_table

__all__ = ["APPROVAL_MODES", "CONTEXT_KINDS", "PROPOSALS_SCHEMA", "PROPOSALS_TABLE", "Approval", "Proposal",
           "Proposals", "fingerprint", "needs_approval", "proposal_evidence"]

Approval = Literal["auto", "context", "all"]
APPROVAL_MODES: tuple[str, ...] = ("auto", "context", "all")
#: The changes to what the agent is told (its context), as opposed to its weights.
CONTEXT_KINDS = frozenset({"memory_insert", "skill_patch", "harness_edit", "tool_schema_edit"})

PROPOSALS_TABLE = "agent_proposals"
PROPOSALS_SCHEMA = pa.schema([
    pa.field("version_id", pa.string(), nullable=False),
    pa.field("tenant_id", pa.string(), nullable=False),
    pa.field("agent_id", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("cluster", pa.string()),
    pa.field("fingerprint", pa.string(), nullable=False),
    pa.field("cycle_id", pa.string()),
    pa.field("evidence", pa.binary(), nullable=False),   # JSON: candidate, cluster, decision, diff
    pa.field("created_at", pa.timestamp("us", tz="UTC"), nullable=False),
])

# What a candidate *is*, per kind: the payload keys that make it the same change (its support count,
# tenants or model part change from cycle to cycle; the change does not).
_CONTENT = {"memory_insert": ("text",), "skill_patch": ("name", "trigger", "instructions"),
            "harness_edit": ("system_prompt",), "tool_schema_edit": ("tool", "parameters", "rename", "note"),
            "weight_update": ("task",)}


def needs_approval(mode: str, kind: str) -> bool:
    """Whether a change of ``kind`` waits for an operator under approval ``mode``."""
    if mode not in APPROVAL_MODES:
        raise InterventionError(f"approval must be one of {', '.join(APPROVAL_MODES)}; got {mode!r}.")
    if kind == "rollback":
        return False
    return mode == "all" or (mode == "context" and kind in CONTEXT_KINDS)


def fingerprint(kind: str, payload: dict[str, Any] | None, description: str = "") -> str:
    """What makes two candidates the same change: their kind and content (whitespace and case folded)."""
    payload = payload or {}
    keys = _CONTENT.get(kind, ())
    content: Any = {k: payload.get(k) for k in keys if payload.get(k) is not None} or description

    def fold(x: Any) -> Any:
        if isinstance(x, str):
            return " ".join(x.split()).casefold()
        if isinstance(x, list | tuple):
            return [fold(v) for v in x]
        if isinstance(x, dict):
            return {k: fold(v) for k, v in x.items()}
        return x

    raw = orjson.dumps([kind, fold(content)], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(raw).hexdigest()[:32]


def proposal_evidence(candidate_id: str, record: Any) -> dict[str, Any]:
    """What a proposal keeps from its cycle's decision record: the chosen candidate as the log has it
    (description, payload, source trajectories, replay and regression evidence), its failure cluster's
    summary, the decision (cycle, reason) and the other candidates' outcomes on the same cluster."""
    chosen = next((c for c in record.candidates if c.get("candidate_id") == candidate_id), None) or {}
    cluster = chosen.get("cluster")
    summary = next((c for c in (record.signals or {}).get("clusters") or [] if c.get("key") == cluster), None)
    others = [c for c in [*record.candidates, *record.rejected]
              if c.get("cluster") == cluster and c.get("candidate_id") != candidate_id]
    return {"candidate": chosen, "cluster": summary, "others": others,
            "decision": {"cycle_id": record.cycle_id, "choice": record.choice, "reason": record.reason},
            "window": {k: (record.signals or {}).get(k) for k in ("window", "success_rate", "success_rate_ci")}}


@dataclass
class Proposal:
    """A proposed (or decided) version and the evidence it was proposed on."""

    version: AgentVersion
    kind: str
    cluster: str | None
    fingerprint: str
    cycle_id: str | None
    evidence: dict[str, Any]
    created_at: datetime
    #: The operator's decision once made: ``{"action": "approve"|"reject", "actor", "reason", "at"}``.
    decision: dict[str, Any] | None = None

    @property
    def status(self) -> str:
        return self.version.status


class Proposals:
    """Proposed versions of a store: record them (the control plane), list, approve, reject (operators)."""

    def __init__(self, store: Store, registry: VersionRegistry | None = None):
        self.store = store
        self.registry = registry or VersionRegistry(store)
        self._table = ensure_table(store, PROPOSALS_TABLE, PROPOSALS_SCHEMA)

    # ------------------------------------------------------------------ the plane's side

    def record(self, version: AgentVersion, *, kind: str, cluster: str | None, payload: dict[str, Any] | None,
               description: str, evidence: dict[str, Any], actor: str, cycle_id: str | None = None,
               reason: str | None = None) -> AgentVersion:
        """Mark the new ``version`` proposed and keep ``evidence`` beside it (with the diff against its
        parent, the version live when it was proposed). Returns the version, now ``proposed``."""
        if version.parent_id is not None and "diff" not in evidence:
            parent = self.registry.get(version.parent_id)
            evidence = {**evidence, "diff": [list(d) for d in diff_parts(parent.parts, version.parts)]}
        row = {"version_id": version.version_id, "tenant_id": version.tenant_id, "agent_id": version.agent_id,
               "kind": kind, "cluster": cluster, "fingerprint": fingerprint(kind, payload, description),
               "cycle_id": cycle_id, "evidence": orjson.dumps(evidence, default=str, option=orjson.OPT_SORT_KEYS),
               "created_at": datetime.now(UTC)}
        append(self.store, PROPOSALS_TABLE, pa.Table.from_pylist([row], schema=PROPOSALS_SCHEMA))
        return self.registry.propose(version.version_id, actor=actor, reason=reason)

    def rejected(self, tenant_id: str, agent_id: str) -> dict[tuple[str | None, str], str]:
        """``(cluster, fingerprint)`` of every candidate an operator rejected for this agent → the comment."""
        out: dict[tuple[str | None, str], str] = {}
        for p in self._list(tenant_id, agent_id):
            if p.decision is not None and p.decision["action"] == "reject":
                out[(p.cluster, p.fingerprint)] = p.decision.get("reason") or ""
        return out

    def was_rejected(self, tenant_id: str, agent_id: str, *, kind: str, cluster: str | None,
                     payload: dict[str, Any] | None, description: str = "") -> str | None:
        """The operator's comment when the same change was rejected for ``cluster`` before, else ``None``."""
        got = self.rejected(tenant_id, agent_id).get((cluster, fingerprint(kind, payload, description)))
        return None if got is None else (got or "no comment")

    # ------------------------------------------------------------------ reading

    def _list(self, tenant_id: str, agent_id: str | None = None, version_id: str | None = None) -> list[Proposal]:
        where = Filter(tenant_id=tenant_id) & Filter.given(agent_id=agent_id, version_id=version_id)
        rows = self._table.search().where(str(where)).limit(None).to_arrow().to_pylist()
        if not rows:
            return []
        versions = {v.version_id: v for v in self.registry.list(tenant_id, agent_id)}
        decisions: dict[str, dict[str, Any]] = {}
        for a in {r["agent_id"] for r in rows}:
            for h in self.registry.history(tenant_id, a):
                if h["action"] in ("reject", "canary") and h["version_id"] not in decisions:
                    decisions[h["version_id"]] = {"action": "approve" if h["action"] == "canary" else "reject",
                                                  "actor": h["actor"], "reason": h["reason"], "at": h["at"]}
        out = []
        for r in sorted(rows, key=lambda r: (r["created_at"], r["version_id"]), reverse=True):
            v = versions.get(r["version_id"])
            if v is None or v.tenant_id != tenant_id:
                continue
            out.append(Proposal(version=v, kind=r["kind"], cluster=r["cluster"], fingerprint=r["fingerprint"],
                                cycle_id=r["cycle_id"], evidence=orjson.loads(r["evidence"]),
                                created_at=r["created_at"], decision=decisions.get(v.version_id)))
        return out

    def list(self, tenant_id: str, agent_id: str | None = None, *, status: str | None = "proposed") -> list[Proposal]:
        """The tenant's proposals, newest first: waiting ones by default, ``status=None`` for all."""
        return [p for p in self._list(tenant_id, agent_id) if status is None or p.status == status]

    def get(self, version_id: str, *, tenant_id: str) -> Proposal:
        """One proposal of ``tenant_id`` (another tenant's is :class:`~molt.errors.NotFound`, like a missing one)."""
        got = self._list(tenant_id, version_id=version_id)
        if not got:
            raise NotFound(f"No proposal {version_id!r} for tenant {tenant_id!r}.")
        return got[0]

    # ------------------------------------------------------------------ the operator's side

    def approve(self, version_id: str, *, tenant_id: str, actor: str, weight: float = 0.2,
                comment: str | None = None) -> AgentVersion:
        """Approve a proposal: its canary starts at ``weight`` (the plane promotes or aborts it as any canary)."""
        p = self.get(version_id, tenant_id=tenant_id)
        if p.status != "proposed":
            raise InterventionError(f"{version_id} is not waiting for approval (status {p.status}).")
        v = self.registry.canary(version_id, weight, actor=actor, tenant_id=tenant_id,
                                 reason="approved" + (f": {comment}" if comment else ""))
        self._audit(p, "approve", actor, comment, f"approved {version_id} ({p.kind}); canary at {weight:.0%}")
        return v

    def reject(self, version_id: str, *, tenant_id: str, actor: str, comment: str) -> AgentVersion:
        """Reject a proposal with a comment; the live version is untouched and the same change is not
        proposed again for the same cluster."""
        if not comment or not comment.strip():
            raise InterventionError("A rejection needs a comment: say why, so the next operator knows.")
        if len(comment) > 2000:
            raise InterventionError(f"A rejection comment is at most 2,000 characters; got {len(comment):,}.")
        p = self.get(version_id, tenant_id=tenant_id)
        v = self.registry.reject(version_id, actor=actor, reason=comment.strip(), tenant_id=tenant_id)
        self._audit(p, "reject", actor, comment.strip(), f"rejected {version_id} ({p.kind}): {comment.strip()}")
        return v

    def _audit(self, p: Proposal, action: str, actor: str, comment: str | None, summary: str) -> None:
        write_audit(self.store, [audit_row(
            tenant_id=p.version.tenant_id, kind="approval", actor=actor, target=p.version.version_id,
            summary=summary, detail={"action": action, "agent_id": p.version.agent_id, "kind": p.kind,
                                     "cluster": p.cluster, "comment": comment})])
