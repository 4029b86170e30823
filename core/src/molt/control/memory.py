"""The memory and skill store, and the retrieval harness that injects them into requests.

Two append-only LanceDB tables in the :class:`~molt.store.Store`:

- ``memories``: facts (:class:`Memory`) with tenant, optional agent, scope (``agent`` or ``tenant``),
  source trajectory and optional expiry;
- ``skills``: skill patches (:class:`SkillPatch`): named procedural instructions with a trigger that
  says when to use them.

Text is validated (non-empty, at most 4 KB) and redacted (the thorough redaction profile under molt's
default policy, unless another redactor is given) *before* it is embedded or stored, so neither the row nor its vector holds
the personal data. Ids are never reused and rows never rewritten, so a policy version's snapshot of
memory and skill ids always names the same text.

Search is by meaning (a vector column, filled by an :class:`~molt.control.embed.Embedder`; cosine
similarity, exact brute force — under a few hundred thousand rows that takes milliseconds and needs no
index to train), by keyword (a LanceDB full-text index: BM25) or both (``hybrid``: reciprocal-rank
fusion of the two lists). Every read goes through :class:`~molt.store.scoped.TenantView`: the tenant
filter is a prefilter on every query, and rows of another tenant are dropped again in Arrow. A
snapshot (``ids``) only narrows that filter, so naming another tenant's ids returns nothing.

:class:`RetrievalHarness` is a :class:`~molt.harness.HarnessApplier` for the gateway: for each request
it retrieves the version's snapshot memories and skills most relevant to the last user message and
injects the best within a token budget.

Example::

    from molt.control.memory import MemoryStore, RetrievalHarness

    mem = MemoryStore(store)
    m = mem.add_memory("acme", "Refunds go back to the original card within 5 business days.")
    mem.search_memories("acme", "how long does a refund take?", ids=[m.memory_id])  # [(m, score)]
    gateway_harness = RetrievalHarness(mem, token_budget=256)
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from molt.atdp.ids import new_id
from molt.control.collaborators import TextRedactor
from molt.control.embed import Embedder, default_embedder
from molt.errors import InterventionError, StoreError
from molt.harness.apply import Applied, StaticHarness, apply_spec
from molt.harness.spec import HarnessSpec, Skill
from molt.store import Filter, Store
from molt.store.schemas import MEMORIES, SKILLS
from molt.store.scoped import TenantView
from molt.store.tables import append, ensure_table

__all__ = [
    "MAX_TEXT_BYTES",
    "Memory",
    "MemoryStore",
    "RetrievalHarness",
    "SkillPatch",
    "approx_tokens",
]

log = logging.getLogger("molt.control")

#: Largest memory text, skill trigger or skill instructions accepted, in UTF-8 bytes.
MAX_TEXT_BYTES = 4096
#: Longest skill name (the harness's :class:`~molt.harness.Skill` limit).
MAX_NAME_CHARS = 200
#: A search query is cut to this many characters (the embedding model reads ~256 tokens anyway).
MAX_QUERY_CHARS = 2000
_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")  # tenant and agent ids: the policy-version registry's format
_RRF_K = 60  # the usual reciprocal-rank-fusion constant (Cormack et al., 2009)
_SCOPES = ("agent", "tenant")
_MODES = ("vector", "text", "hybrid")
_MEM_COLS = ["memory_id", "tenant_id", "agent_id", "scope", "text", "source_trajectory_id", "created_at",
             "expires_at"]
_SKILL_COLS = ["skill_id", "tenant_id", "agent_id", "name", "trigger", "instructions", "source_trajectory_id",
               "created_at"]
_DATA = ConfigDict(extra="forbid", frozen=True)

Mode = Literal["vector", "text", "hybrid"]


class Memory(BaseModel):
    """A stored fact. ``text`` is as stored (redacted). ``scope`` ``tenant`` serves every agent of the
    tenant; ``agent`` serves ``agent_id`` only (every agent when ``agent_id`` is ``None``)."""

    model_config = _DATA

    memory_id: str
    tenant_id: str
    agent_id: str | None = None
    scope: Literal["agent", "tenant"] = "agent"
    text: str
    source_trajectory_id: str | None = None
    created_at: datetime
    expires_at: datetime | None = None


class SkillPatch(BaseModel):
    """A stored skill patch: ``instructions`` to follow when ``trigger`` describes the situation."""

    model_config = _DATA

    skill_id: str
    tenant_id: str
    agent_id: str | None = None
    name: str
    trigger: str
    instructions: str
    source_trajectory_id: str | None = None
    created_at: datetime


class MemoryStore:
    """Memories and skill patches of every tenant, in ``store`` (see the module docstring).

    Args:
        store: the :class:`~molt.store.Store` (its ``memories`` and ``skills`` tables).
        embedder: the :class:`~molt.control.embed.Embedder` (default: all-MiniLM-L6-v2, loaded on first
            use). Every vector in one store must come from models of the same dimension.
        redactor: a :class:`~molt.governance.redaction.Redactor` (or anything with
            ``redact(text) -> (text, spans)``); default: molt's default redaction policy.
    """

    def __init__(self, store: Store, embedder: Embedder | None = None, redactor: TextRedactor | None = None):
        self.store = store
        self._embedder = embedder
        self._redactor = redactor
        self._lock = threading.Lock()
        self._vector_ready: set[str] = set()
        self._queries: OrderedDict[str, list[float]] = OrderedDict()  # query text -> vector (LRU)
        self._tables = {"memories": self._open("memories", MEMORIES, "text"),
                        "skills": self._open("skills", SKILLS, "match_text")}

    # ------------------------------------------------------------------ plumbing

    @property
    def embedder(self) -> Embedder:
        """The embedder (the default one is loaded here, on first use)."""
        if self._embedder is None:
            self._embedder = default_embedder()
        return self._embedder

    @property
    def redactor(self) -> TextRedactor:
        """The redactor applied to every text before it is stored: the thorough profile (a memory or
        skill is text a prompt will carry; :mod:`molt.governance.redaction.profiles`)."""
        if self._redactor is None:
            from molt.governance.redaction.profiles import redactor_for_profile

            self._redactor = redactor_for_profile("thorough")
        return self._redactor

    def _open(self, name: str, schema: pa.Schema, fts_column: str) -> Any:
        """The table, with any column a store created before this schema lacks, and its FTS index."""
        tbl = ensure_table(self.store, name, schema)
        missing = [f for f in schema if f.name not in tbl.schema.names]
        if missing:
            self._add_columns(tbl, name, missing)
        self._ensure_fts(tbl, fts_column)
        return tbl

    def _add_columns(self, tbl: Any, name: str, fields: list[pa.Field]) -> None:
        # the store's write lock, as molt.store.tables takes it: schema changes and appends in order
        with self.store.write_lock:
            try:
                tbl.add_columns(pa.schema(fields))
            except Exception as exc:  # another process may have added them first
                with contextlib.suppress(Exception):
                    tbl.checkout_latest()
                if any(f.name not in tbl.schema.names for f in fields):
                    raise StoreError(f"Cannot add columns {[f.name for f in fields]} to {name!r} in "
                                     f"{self.store.uri}: {exc}.") from exc

    def _ensure_fts(self, tbl: Any, column: str) -> None:
        if any(ix.columns == [column] and ix.index_type in ("FTS", "Inverted") for ix in tbl.list_indices()):
            return
        from lancedb.index import FTS

        # Built on the (usually empty) table once; LanceDB searches rows appended since then without
        # the index, and the store's compaction (table.optimize) folds them into it.
        with self.store.write_lock:
            try:
                tbl.create_index(column, config=FTS(), replace=True)
            except Exception as exc:
                raise StoreError(f"Cannot build the full-text index on {column!r}: {exc}.") from exc

    def _table(self, name: str) -> Any:
        """The table, with its vector column (of the embedder's dimension) checked or added."""
        tbl = self._tables[name]
        if name in self._vector_ready:
            return tbl
        with self._lock:
            dim = int(self.embedder.dim)
            if "vector" not in tbl.schema.names:
                self._add_columns(tbl, name, [pa.field("vector", pa.list_(pa.float32(), dim))])
            typ = tbl.schema.field("vector").type
            if not pa.types.is_fixed_size_list(typ) or typ.list_size != dim:
                raise StoreError(f"The {name!r} table in {self.store.uri} holds vectors of type {typ}, but the "
                                 f"embedder makes {dim}-d vectors; use the embedder the store was filled with "
                                 f"(or a new store).")
            self._vector_ready.add(name)
        return tbl

    def _redact(self, *texts: str) -> list[str]:
        from molt.governance.redaction import Redactor, ReplacementState

        r = self.redactor
        if isinstance(r, Redactor):
            state = ReplacementState()  # the fields of one record share placeholder numbering
            return [r.redact(t, state)[0] for t in texts]
        return [r.redact(t)[0] for t in texts]

    def _embed(self, texts: list[str]) -> list[list[float]]:
        vecs = self.embedder.embed(texts)
        if vecs.shape != (len(texts), self.embedder.dim):
            raise StoreError(f"The embedder returned an array of shape {vecs.shape}; expected "
                             f"({len(texts)}, {self.embedder.dim}).")
        out: list[list[float]] = vecs.astype("float32").tolist()
        return out

    def _query_vector(self, query: str) -> list[float]:
        """The query's vector; the last 256 are kept, since a request searches memories and skills."""
        with self._lock:
            vec = self._queries.get(query)
            if vec is not None:
                self._queries.move_to_end(query)
                return vec
        [vec] = self._embed([query])
        with self._lock:
            self._queries[query] = vec
            while len(self._queries) > 256:
                self._queries.popitem(last=False)
        return vec

    def _model_name(self) -> str:
        return str(getattr(self.embedder, "name", type(self.embedder).__name__))

    # ------------------------------------------------------------------ writes

    def add_memory(self, tenant_id: str, text: str, *, agent_id: str | None = None, scope: str = "agent",
                   source_trajectory_id: str | None = None, ttl_s: float | None = None) -> Memory:
        """Store a memory (redacted) and return it as stored.

        Raises :class:`~molt.errors.InterventionError` for empty or oversized text, a malformed tenant
        or agent id, an unknown scope or a non-positive ``ttl_s`` (seconds until it expires).
        """
        tenant_id = _check_id("tenant", tenant_id)
        agent_id = _check_id("agent", agent_id, optional=True)
        if scope not in _SCOPES:
            raise InterventionError(f"A memory's scope is 'agent' or 'tenant', not {scope!r}.")
        if ttl_s is not None and not (isinstance(ttl_s, int | float) and math.isfinite(ttl_s) and ttl_s > 0):
            raise InterventionError(f"ttl_s is a number of seconds > 0 (or None: never expires); got {ttl_s!r}.")
        text = _check_text("memory text", text)
        source_trajectory_id = _check_source(source_trajectory_id)
        [clean] = self._redact(text)
        tbl = self._table("memories")
        [vec] = self._embed([clean])
        now = datetime.now(UTC)
        mem = Memory(memory_id=new_id(), tenant_id=tenant_id, agent_id=agent_id, scope=scope,
                     text=clean, source_trajectory_id=source_trajectory_id, created_at=now,
                     expires_at=now + timedelta(seconds=ttl_s) if ttl_s is not None else None)
        row = {**mem.model_dump(), "vector": vec, "embed_model": self._model_name()}
        append(self.store, "memories", pa.Table.from_pylist([row], schema=tbl.schema))
        return mem

    def add_skill(self, tenant_id: str, name: str, trigger: str, instructions: str, *,
                  agent_id: str | None = None, source_trajectory_id: str | None = None) -> SkillPatch:
        """Store a skill patch (redacted) and return it as stored.

        Raises :class:`~molt.errors.InterventionError` for an empty or oversized name, trigger or
        instructions, or a malformed tenant or agent id.
        """
        tenant_id = _check_id("tenant", tenant_id)
        agent_id = _check_id("agent", agent_id, optional=True)
        name = _check_text("skill name", name, max_chars=MAX_NAME_CHARS)
        trigger = _check_text("skill trigger (when to use the skill)", trigger)
        instructions = _check_text("skill instructions", instructions)
        source_trajectory_id = _check_source(source_trajectory_id)
        name, trigger, instructions = self._redact(name, trigger, instructions)
        tbl = self._table("skills")
        name = name[:MAX_NAME_CHARS]
        match = f"{name}\n{trigger}"
        [vec] = self._embed([match])
        skill = SkillPatch(skill_id=new_id(), tenant_id=tenant_id, agent_id=agent_id, name=name,
                           trigger=trigger, instructions=instructions, source_trajectory_id=source_trajectory_id,
                           created_at=datetime.now(UTC))
        row = {**skill.model_dump(), "match_text": match, "vector": vec, "embed_model": self._model_name()}
        append(self.store, "skills", pa.Table.from_pylist([row], schema=tbl.schema))
        return skill

    def expire(self, now: datetime | None = None) -> int:
        """Delete every tenant's memories expired at ``now`` (default: the current time); returns how
        many. Searches exclude expired memories whether or not this has run; this reclaims the rows."""
        where = str(Filter().present("expires_at").at_or_before("expires_at", _utc(now)))
        tbl = self._tables["memories"]
        with self.store.write_lock:
            n = int(tbl.count_rows(where))
            if n:
                try:
                    tbl.delete(where)
                except Exception as exc:
                    raise StoreError(f"Deleting expired memories failed: {exc}.") from exc
        return n

    # ------------------------------------------------------------------ reads

    def memories(self, tenant_id: str, ids: Sequence[str] | None = None) -> list[Memory]:
        """The tenant's memories: all (oldest first), or those of ``ids`` in that order (ids that are
        not the tenant's, or no longer stored, are left out). Expired ones are included."""
        rows = self._rows("memories", "memory_id", _MEM_COLS, tenant_id, ids)
        return [Memory(**r) for r in rows]

    def skills(self, tenant_id: str, ids: Sequence[str] | None = None) -> list[SkillPatch]:
        """The tenant's skill patches: all (oldest first), or those of ``ids`` in that order."""
        rows = self._rows("skills", "skill_id", _SKILL_COLS, tenant_id, ids)
        return [SkillPatch(**r) for r in rows]

    def _rows(self, table: str, key: str, cols: list[str], tenant_id: str,
              ids: Sequence[str] | None) -> list[dict[str, Any]]:
        view = TenantView.for_tenant(self.store, _check_id("tenant", tenant_id))
        if ids is None:
            rows = view.scan(table, columns=cols).to_pylist()
            return sorted(rows, key=lambda r: (r["created_at"], r[key]))
        wanted = list(dict.fromkeys(_check_ids(ids)))
        found: dict[str, dict[str, Any]] = {}
        for where in Filter().chunks(key, wanted):
            got = view.scan(table, where=where, columns=cols)
            found.update((r[key], r) for r in got.to_pylist())
        return [found[i] for i in wanted if i in found]

    def search_memories(self, tenant_id: str, query: str, *, k: int = 5, ids: Sequence[str] | None = None,
                        agent_id: str | None = None, mode: Mode = "hybrid",
                        now: datetime | None = None) -> list[tuple[Memory, float]]:
        """The tenant's ``k`` memories most relevant to ``query``, best first, with their score.

        ``mode``: ``vector`` (score = cosine similarity), ``text`` (score = BM25) or ``hybrid`` (score
        = reciprocal-rank fusion of both lists, scaled so that first in both is 1.0 and first in one
        only is 0.5). Memories expired at ``now`` are left out; ``ids`` restricts the search to a
        snapshot (an empty snapshot finds nothing); ``agent_id`` keeps tenant-scoped memories and
        those of that agent (or of no agent).
        """
        clauses = Filter().either(Filter().absent("expires_at"), Filter().after("expires_at", _utc(now)))
        if agent_id is not None:
            agent = _check_id("agent", agent_id)
            clauses = clauses.either(Filter(scope="tenant"), Filter().absent("agent_id"), Filter(agent_id=agent))
        hits = self._search("memories", "text", "memory_id", _MEM_COLS, tenant_id, query, k, ids, clauses, mode)
        return [(Memory(**r), s) for r, s in hits]

    def search_skills(self, tenant_id: str, query: str, *, k: int = 3, ids: Sequence[str] | None = None,
                      agent_id: str | None = None, mode: Mode = "hybrid") -> list[tuple[SkillPatch, float]]:
        """The tenant's ``k`` skill patches whose name and trigger best match ``query`` (see
        :meth:`search_memories` for the modes, scores and ``ids``); ``agent_id`` keeps that agent's
        skills and those of no agent."""
        clauses = Filter()
        if agent_id is not None:
            clauses = clauses.either(Filter().absent("agent_id"), Filter(agent_id=_check_id("agent", agent_id)))
        hits = self._search("skills", "match_text", "skill_id", _SKILL_COLS, tenant_id, query, k, ids, clauses,
                            mode)
        return [(SkillPatch(**r), s) for r, s in hits]

    def _search(self, table: str, fts_column: str, key: str, cols: list[str], tenant_id: str, query: str,
                k: int, ids: Sequence[str] | None, clauses: Filter, mode: str) -> list[tuple[dict[str, Any], float]]:
        view = TenantView.for_tenant(self.store, _check_id("tenant", tenant_id))
        if mode not in _MODES:
            raise InterventionError(f"A search mode is 'vector', 'text' or 'hybrid', not {mode!r}.")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 1000:
            raise InterventionError(f"k is a whole number from 1 to 1000; got {k!r}.")
        if not isinstance(query, str):
            raise InterventionError(f"A search query is a string, not {type(query).__name__}.")
        query = query.strip()[:MAX_QUERY_CHARS]
        if not query:
            return []
        if ids is not None:
            wanted = list(dict.fromkeys(_check_ids(ids)))
            if not wanted:
                return []
            clauses = clauses.among(key, wanted)
        where = clauses or None
        pool = k if mode != "hybrid" else max(4 * k, 20)
        by_vector: list[tuple[dict[str, Any], float]] = []
        by_text: list[tuple[dict[str, Any], float]] = []
        if mode in ("vector", "hybrid"):
            self._table(table)
            got = view.search_vector(table, self._query_vector(query), k=pool, where=where, columns=cols,
                                     metric="cosine")
            by_vector = [(r, 1.0 - float(r.pop("_distance"))) for r in got.to_pylist()]
        if mode in ("text", "hybrid"):
            got = self._search_text(view, table, fts_column, query, pool, where, cols)
            by_text = [(r, float(r.pop("_score"))) for r in got.to_pylist()]
        if mode == "vector":
            return by_vector[:k]
        if mode == "text":
            return by_text[:k]
        return _fuse(by_vector, by_text, key)[:k]

    def _search_text(self, view: TenantView, table: str, column: str, query: str, k: int, where: Filter | None,
                     cols: list[str]) -> pa.Table:
        try:
            return view.search_text(table, query, column=column, k=k, where=where, columns=cols)
        except StoreError:
            # Erasure drops the indices of a table it empties; rebuild the full-text index and retry once.
            tbl = self._tables[table]
            if any(ix.columns == [column] for ix in tbl.list_indices()):
                raise
            self._ensure_fts(tbl, column)
            return view.search_text(table, query, column=column, k=k, where=where, columns=cols)


class RetrievalHarness:
    """A :class:`~molt.harness.HarnessApplier` that adds the version's most relevant memories and skills.

    For each request, with ``version.tenant_id`` and a non-empty ``version.memory_ids`` or
    ``version.skill_ids`` snapshot, it searches that tenant's snapshot (hybrid search) with the last
    user message, and adds the matches to ``version.harness``, most relevant first, alternating memory
    and skill by rank, each while it fits in ``token_budget`` (estimated by :func:`approx_tokens`) and
    scores at least ``min_score`` (hybrid score, 0 – 1). Otherwise, and whenever retrieval fails (the
    failure is logged and counted in :attr:`errors`), it is exactly :class:`~molt.harness.StaticHarness`.

    Args:
        memories: the :class:`MemoryStore`.
        k_memories: memories to consider per request (default 4).
        k_skills: skills to consider per request (default 2).
        token_budget: most tokens the injected memories and skills may take (default 256).
        min_score: drop matches scoring below this (default ``None``: keep all ``k``).
    """

    #: It does I/O (embeds the query, searches LanceDB): the gateway runs it off its event loop, within
    #: ``GatewayConfig.harness_timeout_s``.
    blocking = True

    def __init__(self, memories: MemoryStore, *, k_memories: int = 4, k_skills: int = 2, token_budget: int = 256,
                 min_score: float | None = None):
        if k_memories < 0 or k_skills < 0 or token_budget < 0:
            raise ValueError("k_memories, k_skills and token_budget must be ≥ 0.")
        self.memories = memories
        self.k_memories = k_memories
        self.k_skills = k_skills
        self.token_budget = token_budget
        self.min_score = min_score
        self.errors = 0
        self._static = StaticHarness()

    def apply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, version: Any) -> Applied:
        """See :class:`~molt.harness.HarnessApplier`; never raises because retrieval failed."""
        tenant = getattr(version, "tenant_id", None)
        memory_ids = tuple(getattr(version, "memory_ids", None) or ())
        skill_ids = tuple(getattr(version, "skill_ids", None) or ())
        if version is None or tenant is None or not (memory_ids or skill_ids):
            return self._static.apply(messages, tools, version)
        try:
            spec = self._spec(messages, version, tenant, memory_ids, skill_ids)
        except Exception as exc:
            self.errors += 1
            log.warning("Memory retrieval for version %r failed (%r); serving the static harness.",
                        getattr(version, "version", None), exc, exc_info=log.isEnabledFor(logging.DEBUG))
            return self._static.apply(messages, tools, version)
        if spec is None:
            return self._static.apply(messages, tools, version)
        return apply_spec(spec, messages, tools)

    def _spec(self, messages: list[dict[str, Any]], version: Any, tenant: str, memory_ids: tuple[str, ...],
              skill_ids: tuple[str, ...]) -> HarnessSpec | None:
        query = _last_user_text(messages)
        if not query.strip():
            return None
        mems = (self.memories.search_memories(tenant, query, k=self.k_memories, ids=memory_ids)
                if memory_ids and self.k_memories else [])
        skills = (self.memories.search_skills(tenant, query, k=self.k_skills, ids=skill_ids)
                  if skill_ids and self.k_skills else [])
        if self.min_score is not None:
            mems = [(m, s) for m, s in mems if s >= self.min_score]
            skills = [(p, s) for p, s in skills if s >= self.min_score]
        picked_m: list[str] = []
        picked_s: list[Skill] = []
        used = 0
        for i in range(max(len(mems), len(skills))):
            for item in (mems[i][0] if i < len(mems) else None, skills[i][0] if i < len(skills) else None):
                if item is None:
                    continue
                cost = approx_tokens(item.text) if isinstance(item, Memory) else approx_tokens(
                    f"## {item.name}\n{item.instructions}")
                if used + cost > self.token_budget:
                    continue  # a smaller, less relevant match may still fit
                used += cost
                if isinstance(item, Memory):
                    picked_m.append(item.text)
                else:
                    picked_s.append(Skill(name=item.name, instructions=item.instructions))
        if not picked_m and not picked_s:
            return None
        base = getattr(version, "harness", None) or HarnessSpec()
        return base.model_copy(update={"memories": (*base.memories, *picked_m), "skills": (*base.skills, *picked_s)})


def approx_tokens(text: str) -> int:
    """A cheap token estimate: 1.3 tokens per whitespace-separated word, plus 1 for the list marker.

    English prose averages about 1.3 BPE tokens per word with the SmolLM2 and GPT-style tokenizers;
    ids, numbers and code run higher, so keep some slack in the budget for such memories.
    """
    return math.ceil(len(text.split()) * 1.3) + 1


# ---------------------------------------------------------------------- helpers


def _fuse(a: list[tuple[dict[str, Any], float]], b: list[tuple[dict[str, Any], float]],
          key: str) -> list[tuple[dict[str, Any], float]]:
    """Reciprocal-rank fusion of two ranked lists, scaled to (0, 1] (first in both lists = 1.0)."""
    scores: dict[str, float] = {}
    rows: dict[str, dict[str, Any]] = {}
    for hits in (a, b):
        for rank, (row, _) in enumerate(hits, start=1):
            scores[row[key]] = scores.get(row[key], 0.0) + 1.0 / (_RRF_K + rank)
            rows.setdefault(row[key], row)
    top = 2.0 / (_RRF_K + 1)
    order = sorted(scores, key=lambda x: -scores[x])  # stable: ties keep the vector list's order
    return [(rows[x], scores[x] / top) for x in order]


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(str(p.get("text", "")) for p in content
                                if isinstance(p, dict) and p.get("type", "text") == "text")
            return ""
    return ""


def _check_id(what: str, value: Any, *, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not _ID.match(value):
        raise InterventionError(f"A {what} id is 1–64 letters, digits, '_', '.' or '-'; got {value!r}.")
    return value


def _check_ids(ids: Sequence[str]) -> list[str]:
    if isinstance(ids, str):
        raise InterventionError("ids is a sequence of ids, not one string; wrap a single id in a list.")
    out = list(ids)
    for i in out:
        if not isinstance(i, str) or not i or len(i) > 200:
            raise InterventionError(f"An id is a non-empty string of at most 200 characters; got {i!r}.")
    return out


def _check_text(what: str, value: Any, *, max_chars: int | None = None) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InterventionError(f"The {what} is empty; give it some text.")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_TEXT_BYTES:
        raise InterventionError(f"The {what} is {size:,} bytes; the limit is {MAX_TEXT_BYTES:,}. Keep one fact "
                                f"or procedure per entry and split longer text.")
    if max_chars is not None and len(value.strip()) > max_chars:
        raise InterventionError(f"The {what} is {len(value.strip())} characters; the limit is {max_chars}.")
    return value.strip()


def _check_source(value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value or len(value) > 200):
        raise InterventionError(f"source_trajectory_id is a trajectory id (or None); got {value!r}.")
    return value


def _utc(now: datetime | None) -> datetime:
    if now is None:
        return datetime.now(UTC)
    return now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)  # naive = UTC
