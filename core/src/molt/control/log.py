"""The decision log: what every control-plane cycle saw, considered, measured, chose and why.

One row per cycle per (tenant, agent) in the ``evolution_log`` table; the full record (signals,
candidates with their replay evidence and gate results, the choice and the reason) is kept as JSON.
Rows are append-only; :meth:`DecisionLog.list` reads them per tenant (admins of that tenant see
their own decisions only).

Example::

    log = DecisionLog(store)
    for d in log.list("acme", limit=10):
        print(d.created_at, d.choice, d.reason)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from molt.atdp.ids import new_id
from molt.control.diagnose import Candidate
from molt.control.signals import Signals
from molt.control.versions import AgentVersion
from molt.store import Filter, Store
from molt.store.tables import append, ensure_table

__all__ = ["LOG_SCHEMA", "LOG_TABLE", "CycleResult", "DecisionLog", "DecisionRecord"]

LOG_TABLE = "evolution_log"
LOG_SCHEMA = pa.schema([
    pa.field("cycle_id", pa.string(), nullable=False),
    pa.field("tenant_id", pa.string(), nullable=False),
    pa.field("agent_id", pa.string(), nullable=False),
    pa.field("created_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("choice", pa.string(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("applied_version", pa.string()),
    pa.field("record", pa.binary(), nullable=False),
])


class DecisionRecord(BaseModel):
    """One cycle's decision for one agent of one tenant."""

    model_config = ConfigDict(extra="forbid")

    cycle_id: str = Field(default_factory=new_id)
    tenant_id: str
    agent_id: str
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    choice: str
    reason: str
    applied_version: str | None = None
    #: The candidate the cycle chose (its ``candidate_id`` in ``candidates``), when it chose one.
    chosen_candidate: str | None = None
    signals: dict[str, Any] = Field(default_factory=dict)
    candidates: list[dict[str, Any]] = Field(default_factory=list)
    rejected: list[dict[str, Any]] = Field(default_factory=list)
    actions: list[str] = Field(default_factory=list)


class DecisionLog:
    """Append and read :class:`DecisionRecord` rows."""

    def __init__(self, store: Store):
        self.store = store
        self._table = ensure_table(store, LOG_TABLE, LOG_SCHEMA)

    def append(self, rec: DecisionRecord) -> None:
        """Store ``rec``."""
        body = rec.model_dump(mode="json", exclude={"cycle_id", "tenant_id", "agent_id", "created_at", "choice",
                                                    "reason", "applied_version"})
        row = {"cycle_id": rec.cycle_id, "tenant_id": rec.tenant_id, "agent_id": rec.agent_id,
               "created_at": rec.created_at, "choice": rec.choice, "reason": rec.reason,
               "applied_version": rec.applied_version,
               "record": orjson.dumps(body, default=str, option=orjson.OPT_SORT_KEYS)}
        append(self.store, LOG_TABLE, pa.Table.from_pylist([row], schema=LOG_SCHEMA))

    def list(self, tenant_id: str, agent_id: str | None = None, *, limit: int | None = 50,
             choice: str | None = None) -> list[DecisionRecord]:
        """The tenant's decisions, newest first."""
        where = Filter(tenant_id=tenant_id) & Filter.given(agent_id=agent_id, choice=choice)
        rows = self._table.search().where(str(where)).limit(None).to_arrow().to_pylist()
        rows.sort(key=lambda r: (r["created_at"], r["cycle_id"]), reverse=True)
        out = []
        for r in rows[:limit] if limit is not None else rows:
            body = orjson.loads(r.pop("record"))
            out.append(DecisionRecord(**r, **body))
        return out

    def get(self, cycle_id: str, *, tenant_id: str) -> DecisionRecord | None:
        """One decision of ``tenant_id`` by cycle id."""
        rows = self._table.search().where(str(Filter(cycle_id=cycle_id, tenant_id=tenant_id)))
        got = rows.limit(1).to_arrow().to_pylist()
        if not got:
            return None
        r = got[0]
        body = orjson.loads(r.pop("record"))
        return DecisionRecord(**r, **body)


@dataclass
class CycleResult:
    """What one cycle did for one agent."""

    record: DecisionRecord
    chosen: Candidate | None = None
    version: AgentVersion | None = None
    signals: Signals | None = None
    evaluations: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def choice(self) -> str:
        return self.record.choice
