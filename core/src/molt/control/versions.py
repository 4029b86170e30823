"""Composite policy versions: A = ⟨weights, harness, memory, tools, governance⟩, versioned per tenant and agent.

A :class:`AgentVersion` is an immutable tuple of parts (:class:`AgentConfig`): the base model and
LoRA adapter, the harness (system prompt and context rules, static skills), the memory snapshot and
skill set (ids into the :mod:`molt.control.memory` tables, which are append-only, so an id always
names the same text), the tool-schema rewrites and the governance config. Versions are stored as
canonical JSON bytes, so "the same version" means byte-identical parts.

Which version serves is a separate, append-only log of actions (``promote``, ``canary``, ``abort``,
``rollback``, approval mode's ``propose`` and ``reject``, and ``erase``: a version holding a data
subject's erased data leaves the stack for good) in the ``agent_version_events`` table.
The live version is the top of a stack that ``promote`` pushes and ``rollback`` pops, so rollback is
one step and restores exactly the version that was live before; a canary is a version given a share of new sessions until it is promoted or
aborted. A *proposed* version (approval mode, :mod:`molt.control.approval`) waits for an operator and is
not routed: approving it starts its canary, rejecting it marks it ``rejected``. Nothing is ever rewritten.

Example::

    reg = VersionRegistry(store)
    base = reg.ensure_base("acme", "support", AgentConfig(model=ModelPart(base="smollm2")))
    v2 = reg.create("acme", "support", base.parts.with_memories(["mem-1"]), parent=base.version_id,
                    note="memory insert: refund window")
    reg.promote(v2.version_id, actor="control-plane")
    reg.rollback("acme", "support", actor="alice")          # base is live again, byte for byte
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from molt.atdp.ids import new_id
from molt.errors import InterventionError, NotFound
from molt.harness import HarnessSpec, ToolRewrite
from molt.store import Filter, Store
from molt.store.tables import append, ensure_table

__all__ = [
    "AgentConfig",
    "AgentVersion",
    "EVENTS_SCHEMA",
    "EVENTS_TABLE",
    "GovernancePart",
    "ModelPart",
    "StalePromotion",
    "VERSIONS_SCHEMA",
    "VERSIONS_TABLE",
    "VersionRegistry",
    "diff_parts",
]

VERSIONS_TABLE = "agent_versions"
EVENTS_TABLE = "agent_version_events"
_TS = pa.timestamp("us", tz="UTC")
log = logging.getLogger("molt.control")

VERSIONS_SCHEMA = pa.schema([
    pa.field("version_id", pa.string(), nullable=False),
    pa.field("tenant_id", pa.string(), nullable=False),
    pa.field("agent_id", pa.string(), nullable=False),
    pa.field("parent_id", pa.string()),
    pa.field("parts", pa.binary(), nullable=False),        # canonical JSON of AgentConfig
    pa.field("parts_digest", pa.string(), nullable=False),
    pa.field("note", pa.string()),
    pa.field("created_by", pa.string()),
    pa.field("created_at", _TS, nullable=False),
])

EVENTS_SCHEMA = pa.schema([
    pa.field("event_id", pa.string(), nullable=False),
    pa.field("tenant_id", pa.string(), nullable=False),
    pa.field("agent_id", pa.string(), nullable=False),
    pa.field("version_id", pa.string(), nullable=False),
    # promote | canary | abort | rollback | propose | reject | erase
    pa.field("action", pa.string(), nullable=False),
    pa.field("weight", pa.float64()),
    pa.field("actor", pa.string()),
    pa.field("reason", pa.string()),
    pa.field("at", _TS, nullable=False),
])

_DATA = ConfigDict(extra="forbid", frozen=True)
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
Action = Literal["promote", "canary", "abort", "rollback", "propose", "reject", "erase"]


class ModelPart(BaseModel):
    """The weights part: base model, and the LoRA adapter (name served upstream, path on disk)."""

    model_config = _DATA

    base: str = Field(min_length=1)
    adapter: str | None = None
    adapter_path: str | None = None


class GovernancePart(BaseModel):
    """The governance config a version runs under: policy file name and its content digest."""

    model_config = _DATA

    policy: str | None = None
    digest: str | None = None


class AgentConfig(BaseModel):
    """The parts of a composite policy version (see the module docstring)."""

    model_config = _DATA

    model: ModelPart
    harness: HarnessSpec = HarnessSpec()
    memory_ids: tuple[str, ...] = ()
    skill_ids: tuple[str, ...] = ()
    tools: dict[str, ToolRewrite] = Field(default_factory=dict)
    governance: GovernancePart = GovernancePart()

    def canonical(self) -> bytes:
        """Canonical JSON bytes (sorted keys): equal parts ⇔ equal bytes."""
        data: Any = self.model_dump(mode="json")
        return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)

    def digest(self) -> str:
        """SHA-256 of :meth:`canonical`."""
        return hashlib.sha256(self.canonical()).hexdigest()

    def effective_harness(self) -> HarnessSpec:
        """The harness the gateway applies: the harness spec with this version's tool rewrites merged in."""
        if not self.tools:
            return self.harness
        return self.harness.model_copy(update={"tool_rewrites": {**self.harness.tool_rewrites, **self.tools}})

    def with_memories(self, ids: Sequence[str]) -> AgentConfig:
        """These parts with ``ids`` added to the memory snapshot (order kept, no duplicates)."""
        return self.model_copy(update={"memory_ids": tuple(dict.fromkeys([*self.memory_ids, *ids]))})

    def with_skills(self, ids: Sequence[str]) -> AgentConfig:
        """These parts with ``ids`` added to the skill set."""
        return self.model_copy(update={"skill_ids": tuple(dict.fromkeys([*self.skill_ids, *ids]))})

    def with_tools(self, rewrites: dict[str, ToolRewrite]) -> AgentConfig:
        """These parts with tool-schema rewrites replaced or added."""
        return self.model_copy(update={"tools": {**self.tools, **rewrites}})

    def with_system_prompt(self, text: str) -> AgentConfig:
        """These parts with ``text`` appended to the harness system prompt."""
        current = self.harness.system_prompt
        new = text if not current else f"{current}\n{text}"
        return self.model_copy(update={"harness": self.harness.model_copy(update={"system_prompt": new})})

    def with_model(self, model: ModelPart) -> AgentConfig:
        """These parts with another weights part."""
        return self.model_copy(update={"model": model})


class AgentVersion(BaseModel):
    """One stored version: its id, owner, lineage and parts. ``status`` is filled by the registry
    from the action log (``live``, ``canary``, ``previous`` — live before and reachable by rollback —,
    ``proposed`` — waiting for an operator's approval, not routed —, ``rejected`` by an operator, or
    ``candidate``)."""

    model_config = ConfigDict(extra="forbid")

    version_id: str
    tenant_id: str
    agent_id: str
    parent_id: str | None = None
    parts: AgentConfig
    parts_bytes: bytes = Field(repr=False)
    note: str | None = None
    created_by: str | None = None
    created_at: datetime
    status: str = "candidate"
    canary_weight: float | None = None

    # What the gateway's harness applier and router read (HarnessTarget / VersionSpec-like).
    @property
    def version(self) -> str:
        return self.version_id

    @property
    def harness(self) -> HarnessSpec:
        return self.parts.effective_harness()

    @property
    def memory_ids(self) -> tuple[str, ...]:
        return self.parts.memory_ids

    @property
    def skill_ids(self) -> tuple[str, ...]:
        return self.parts.skill_ids


class StalePromotion(InterventionError):
    """A promotion compared against a live version that is no longer live (another writer changed
    it): refused, since it would silently discard the change made meanwhile."""


def diff_parts(a: AgentConfig, b: AgentConfig) -> list[tuple[str, JsonValue, JsonValue]]:
    """``(path, value in a, value in b)`` for every leaf that differs (dotted paths, sorted)."""
    out: list[tuple[str, JsonValue, JsonValue]] = []

    def walk(path: str, x: Any, y: Any) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                walk(f"{path}.{k}" if path else str(k), x.get(k), y.get(k))
        elif x != y:
            out.append((path, x, y))

    walk("", a.model_dump(mode="json"), b.model_dump(mode="json"))
    return out


class VersionRegistry:
    """Composite policy versions and the live/canary pointer log, in the store.

    Thread-safe within a process (one lock around create and pointer changes). Several processes
    may read; one writes an agent's versions at a time — control-plane cycles hold the agent's lease
    (:mod:`molt.control.lease`), and a promotion given ``expected_live`` is a compare-and-set.
    """

    def __init__(self, store: Store):
        self.store = store
        self._versions = ensure_table(store, VERSIONS_TABLE, VERSIONS_SCHEMA)
        self._events = ensure_table(store, EVENTS_TABLE, EVENTS_SCHEMA)
        self._lock = threading.RLock()
        #: Called as ``fn(tenant_id, agent_id, action)`` after every pointer change (promote, canary,
        #: abort, rollback) — e.g. :class:`molt.gateway.binding.GatewayBinding` rebinding the gateway.
        self.listeners: list[Callable[[str, str, str], None]] = []

    # ------------------------------------------------------------------ reading

    def _rows(self, table: Any, where: Filter) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = table.search().where(str(where)).limit(None).to_arrow().to_pylist()
        return rows

    def _actions(self, tenant_id: str, agent_id: str) -> list[dict[str, Any]]:
        rows = self._rows(self._events, Filter(tenant_id=tenant_id, agent_id=agent_id))
        rows.sort(key=lambda r: (r["at"], r["event_id"]))
        return rows

    def _state(self, tenant_id: str, agent_id: str) -> tuple[list[str], dict[str, float]]:
        """(live stack, canary weights) from the action log."""
        stack: list[str] = []
        canary: dict[str, float] = {}
        for r in self._actions(tenant_id, agent_id):
            v, act = r["version_id"], r["action"]
            if act == "promote":
                stack.append(v)
                canary.pop(v, None)
            elif act == "rollback":
                if stack:
                    stack.pop()
            elif act == "canary":
                canary[v] = float(r["weight"] or 0.0)
            elif act == "abort":
                canary.pop(v, None)
            elif act == "erase":  # it held erased data: out of the stack, so no rollback reaches it
                stack = [x for x in stack if x != v]
                canary.pop(v, None)
        return stack, canary

    def _marks(self, tenant_id: str, agent_id: str) -> dict[str, str]:
        """Approval mode's marks from the action log: version → ``proposed`` or ``rejected`` (the last of
        propose / reject / canary / promote / abort decides; a canary or promotion ends a proposal)."""
        marks: dict[str, str] = {}
        for r in self._actions(tenant_id, agent_id):
            v, act = r["version_id"], r["action"]
            if act == "propose":
                marks[v] = "proposed"
            elif act == "reject":
                marks[v] = "rejected"
            elif act in ("canary", "promote", "abort"):
                marks.pop(v, None)
        for r in self._actions(tenant_id, agent_id):  # erased is final
            if r["action"] == "erase":
                marks[r["version_id"]] = "erased"
        return marks

    def _version(self, row: dict[str, Any], stack: list[str] | None = None,
                 canary: dict[str, float] | None = None, marks: dict[str, str] | None = None) -> AgentVersion:
        parts = AgentConfig.model_validate_json(row["parts"])
        vid = row["version_id"]
        status = "candidate"
        if stack:
            if stack[-1] == vid:
                status = "live"
            elif vid in stack:
                status = "previous"
        if canary and vid in canary and status != "live":
            status = "canary"
        if status == "candidate" and marks and vid in marks:
            status = marks[vid]
        return AgentVersion(version_id=vid, tenant_id=row["tenant_id"], agent_id=row["agent_id"],
                             parent_id=row["parent_id"], parts=parts, parts_bytes=row["parts"], note=row["note"],
                             created_by=row["created_by"], created_at=row["created_at"], status=status,
                             canary_weight=(canary or {}).get(vid))

    def get(self, version_id: str, *, tenant_id: str | None = None) -> AgentVersion:
        """The version ``version_id`` (with ``tenant_id``, only if it belongs to that tenant)."""
        rows = self._rows(self._versions, Filter(version_id=version_id) & Filter.given(tenant_id=tenant_id))
        if not rows:
            raise NotFound(f"No policy version {version_id!r}" + (f" for tenant {tenant_id!r}." if tenant_id else "."))
        row = rows[0]
        stack, canary = self._state(row["tenant_id"], row["agent_id"])
        return self._version(row, stack, canary, self._marks(row["tenant_id"], row["agent_id"]))

    def list(self, tenant_id: str, agent_id: str | None = None) -> list[AgentVersion]:
        """The tenant's versions (of one agent, or all), newest first, with their status."""
        rows = self._rows(self._versions, Filter(tenant_id=tenant_id) & Filter.given(agent_id=agent_id))
        states: dict[str, tuple[list[str], dict[str, float], dict[str, str]]] = {}
        out = []
        for row in sorted(rows, key=lambda r: (r["created_at"], r["version_id"]), reverse=True):
            st = states.get(row["agent_id"])
            if st is None:
                st = states[row["agent_id"]] = (*self._state(tenant_id, row["agent_id"]),
                                                self._marks(tenant_id, row["agent_id"]))
            out.append(self._version(row, *st))
        return out

    def agents(self, tenant_id: str | None = None) -> list[tuple[str, str]]:
        """``(tenant, agent)`` pairs that have versions (of one tenant, or all)."""
        tbl = self._versions.search()
        if tenant_id is not None:
            tbl = tbl.where(str(Filter(tenant_id=tenant_id)))
        rows = tbl.select(["tenant_id", "agent_id"]).limit(None).to_arrow().to_pylist()
        return sorted({(r["tenant_id"], r["agent_id"]) for r in rows})

    def live(self, tenant_id: str, agent_id: str) -> AgentVersion | None:
        """The live version (``None`` before the first promotion)."""
        stack, _ = self._state(tenant_id, agent_id)
        if not stack:
            return None
        return self.get(stack[-1])

    def rollback_target(self, tenant_id: str, agent_id: str) -> AgentVersion | None:
        """The version :meth:`rollback` would restore (the one live before the current), if any."""
        stack, _ = self._state(tenant_id, agent_id)
        return self.get(stack[-2]) if len(stack) >= 2 else None

    def canaries(self, tenant_id: str, agent_id: str) -> list[AgentVersion]:
        """Versions in canary, with their weight."""
        _, canary = self._state(tenant_id, agent_id)
        return [self.get(v) for v in canary]

    def proposals(self, tenant_id: str, agent_id: str | None = None) -> list[AgentVersion]:
        """Versions waiting for an operator's approval (status ``proposed``), newest first."""
        return [v for v in self.list(tenant_id, agent_id) if v.status == "proposed"]

    def history(self, tenant_id: str, agent_id: str) -> list[dict[str, Any]]:
        """The pointer log (promote / canary / abort / rollback / propose / reject), oldest first."""
        return self._actions(tenant_id, agent_id)

    def diff(self, a_id: str, b_id: str, *, tenant_id: str | None = None) -> list[tuple[str, JsonValue, JsonValue]]:
        """Parts that differ between versions ``a_id`` and ``b_id`` (see :func:`diff_parts`)."""
        return diff_parts(self.get(a_id, tenant_id=tenant_id).parts, self.get(b_id, tenant_id=tenant_id).parts)

    # ------------------------------------------------------------------ writing

    def create(self, tenant_id: str, agent_id: str, parts: AgentConfig | dict[str, Any], *,
               parent: str | None = None, note: str | None = None, created_by: str | None = None) -> AgentVersion:
        """Store a new version (not live until promoted). Raises :class:`InterventionError` on bad input."""
        for what, value in (("tenant", tenant_id), ("agent", agent_id)):
            if not isinstance(value, str) or not _NAME.match(value):
                raise InterventionError(f"A policy version needs a {what} id of 1–64 letters, digits, '_', '.' or "
                                        f"'-'; got {value!r}.")
        if not isinstance(parts, AgentConfig):
            try:
                parts = AgentConfig.model_validate(parts)
            except ValidationError as exc:
                raise InterventionError(f"Invalid policy parts: {exc.errors()[0]['msg']} at "
                                        f"{'.'.join(map(str, exc.errors()[0]['loc']))}.") from exc
        with self._lock:
            if parent is not None:
                p = self.get(parent)
                if (p.tenant_id, p.agent_id) != (tenant_id, agent_id):
                    raise InterventionError(f"Parent {parent!r} belongs to {p.tenant_id}/{p.agent_id}, "
                                            f"not {tenant_id}/{agent_id}.")
            n = self._versions.count_rows(str(Filter(tenant_id=tenant_id, agent_id=agent_id)))
            vid = f"{agent_id}@{tenant_id}:v{n + 1}"
            if self._versions.count_rows(str(Filter(version_id=vid))):
                vid = f"{vid}-{new_id()[-8:]}"
            raw = parts.canonical()
            row = {"version_id": vid, "tenant_id": tenant_id, "agent_id": agent_id, "parent_id": parent,
                   "parts": raw, "parts_digest": hashlib.sha256(raw).hexdigest(), "note": note,
                   "created_by": created_by, "created_at": datetime.now(UTC)}
            append(self.store, VERSIONS_TABLE, pa.Table.from_pylist([row], schema=VERSIONS_SCHEMA))
        return self.get(vid)

    def ensure_base(self, tenant_id: str, agent_id: str, parts: AgentConfig, *, actor: str = "molt") -> AgentVersion:
        """The live version, creating and promoting ``parts`` as the first version when there is none."""
        with self._lock:
            live = self.live(tenant_id, agent_id)
            if live is not None:
                return live
            v = self.create(tenant_id, agent_id, parts, note="base version", created_by=actor)
            self._log(v, "promote", actor=actor, reason="base version")
            return self.get(v.version_id)

    def _log(self, v: AgentVersion, action: Action, *, actor: str | None, reason: str | None = None,
             weight: float | None = None) -> None:
        row = {"event_id": new_id(), "tenant_id": v.tenant_id, "agent_id": v.agent_id, "version_id": v.version_id,
               "action": action, "weight": weight, "actor": actor, "reason": reason, "at": datetime.now(UTC)}
        append(self.store, EVENTS_TABLE, pa.Table.from_pylist([row], schema=EVENTS_SCHEMA))
        for fn in list(self.listeners):
            try:
                fn(v.tenant_id, v.agent_id, action)
            except Exception:  # a listener never undoes or blocks a recorded change
                log.exception("A version listener failed after %s of %s.", action, v.version_id)

    def promote(self, version_id: str, *, actor: str, reason: str | None = None,
                tenant_id: str | None = None, expected_live: str | None = None) -> AgentVersion:
        """Make ``version_id`` live (it ends its canary, if any).

        With ``expected_live`` it is a compare-and-set: the version it was compared against (a
        canary's parent, the live version a cycle read) must still be live, else the promotion is
        refused with :class:`StalePromotion` and logged — promoting over a live version nobody
        compared it with would silently discard that version's change."""
        with self._lock:
            v = self.get(version_id, tenant_id=tenant_id)
            if v.status == "live":
                return v
            if v.status == "erased":
                raise InterventionError(f"{version_id} held erased data and is out of service for good.")
            if expected_live is not None:
                live = self.live(v.tenant_id, v.agent_id)
                if live is not None and live.version_id != expected_live:
                    log.warning("Refused to promote %s over live %s: it was compared against %s (actor %s).",
                                version_id, live.version_id, expected_live, actor)
                    raise StalePromotion(
                        f"{version_id} was compared against {expected_live}, but {live.version_id} is live now "
                        f"(another writer changed {v.tenant_id}/{v.agent_id} meanwhile); promoting it would discard "
                        f"{live.version_id}'s change. Make a new candidate from {live.version_id}.")
            self._log(v, "promote", actor=actor, reason=reason)
            return self.get(version_id)

    def canary(self, version_id: str, weight: float, *, actor: str, reason: str | None = None,
               tenant_id: str | None = None) -> AgentVersion:
        """Give ``version_id`` a share ``weight`` (0 < w < 1) of new sessions beside the live version."""
        if not (0.0 < weight < 1.0):
            raise InterventionError(f"A canary weight must be in (0, 1); got {weight}.")
        with self._lock:
            v = self.get(version_id, tenant_id=tenant_id)
            if v.status == "live":
                raise InterventionError(f"{version_id} is already live.")
            if v.status == "erased":
                raise InterventionError(f"{version_id} held erased data and is out of service for good.")
            self._log(v, "canary", actor=actor, reason=reason, weight=weight)
            return self.get(version_id)

    def propose(self, version_id: str, *, actor: str, reason: str | None = None,
                tenant_id: str | None = None) -> AgentVersion:
        """Mark a new version ``proposed``: it waits for an operator (:meth:`canary` approves it,
        :meth:`reject` refuses it) and is not routed meanwhile."""
        with self._lock:
            v = self.get(version_id, tenant_id=tenant_id)
            if v.status != "candidate":
                raise InterventionError(f"Only a new version can be proposed; {version_id} is {v.status}.")
            self._log(v, "propose", actor=actor, reason=reason)
            return self.get(version_id)

    def reject(self, version_id: str, *, actor: str, reason: str | None = None,
               tenant_id: str | None = None) -> AgentVersion:
        """Refuse a proposed version (it stays stored, marked ``rejected``; the live version is untouched)."""
        with self._lock:
            v = self.get(version_id, tenant_id=tenant_id)
            if v.status != "proposed":
                raise InterventionError(f"{version_id} is not waiting for approval (status {v.status}).")
            self._log(v, "reject", actor=actor, reason=reason)
            return self.get(version_id)

    def abort(self, version_id: str, *, actor: str, reason: str | None = None,
              tenant_id: str | None = None) -> AgentVersion:
        """End ``version_id``'s canary without promoting it."""
        with self._lock:
            v = self.get(version_id, tenant_id=tenant_id)
            if v.status != "canary":
                raise InterventionError(f"{version_id} is not in canary (status {v.status}).")
            self._log(v, "abort", actor=actor, reason=reason)
            return self.get(version_id)

    def erase(self, version_id: str, *, actor: str, reason: str | None = None,
              tenant_id: str | None = None) -> AgentVersion:
        """Take ``version_id`` out of service for good because it holds erased data (``molt erase``): it
        leaves the live stack wherever it is (a rollback never reaches it again), its canary ends, and
        it is marked ``erased``. Supersede a live version first (promote one without the data): erasing
        the live version itself makes the one below it live."""
        with self._lock:
            v = self.get(version_id, tenant_id=tenant_id)
            self._log(v, "erase", actor=actor, reason=reason)
            return self.get(version_id)

    def rollback(self, tenant_id: str, agent_id: str, *, actor: str, reason: str | None = None) -> AgentVersion:
        """Restore the version that was live before the current one; returns it (now live)."""
        with self._lock:
            stack, _ = self._state(tenant_id, agent_id)
            if len(stack) < 2:
                raise InterventionError(f"{tenant_id}/{agent_id} has no earlier live version to roll back to.")
            current = self.get(stack[-1])
            self._log(current, "rollback", actor=actor, reason=reason)
            return self.get(stack[-2])
