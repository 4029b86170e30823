"""Where a learned artifact came from: the trajectories whose evidence made it, and the data subjects
they concern, as keyed digests.

A memory, a skill, a harness edit, a tool rewrite and an adapter each carry a :class:`Lineage` per
tenant whose data made them: the ids of the trajectories (the corrections and failures of the
candidate's cluster, or an adapter's training samples) and the subjects those trajectories concern
(``metadata.consent.subject_id``). A subject is never written as given: it is the tenant's keyed digest
of it (:func:`molt.governance.envelope.id_digest`, ``idh-`` + 32 hex digits, the key is the tenant's
pseudonym key), so a lineage can be shown, logged and shipped beside an adapter without naming anyone,
and ``molt erase --subject S`` finds every artifact whose lineage holds S by digesting S again
(:meth:`Lineage.names_subject`).

An adapter carries its lineage in an :class:`AdapterManifest` written into its directory
(:data:`MANIFEST_FILE`) by :func:`write_manifest` when the trainer saves it: the tenant it belongs to,
the tenants it may also serve (``share_with``), its base model, the SHA-256 of each of its files, the
lineage of its training samples and when it was made. The manifest is content-addressed: its id is the
SHA-256 of its canonical JSON, so an edit to it (another tenant added to ``share_with``, a trajectory
dropped from its lineage) changes the id it is stored under and is caught. :func:`load_manifest` is
what serving calls before an adapter is loaded for a tenant; it refuses (:class:`~molt.errors.LineageError`)
an adapter whose files differ from the manifest, a manifest that was edited, an adapter the tenant may
not be served, and one whose lineage names another tenant's trajectories (checked against the store
when one is given: the tenant a trajectory's events carry is the one that counts).

Example::

    lin = Lineage.from_store(store, "acme", ["traj-1", "traj-2"])   # subjects read and digested
    write_manifest("adapters/w-7", tenant_id="acme", adapter="w-7", base_model="SmolLM2-135M",
                   lineage=[lin])
    m = load_manifest("adapters/w-7", tenant="acme", store=store)   # raises LineageError on a mismatch
    m.names_subject("customer-4711")                                # True when its data trained it

Every learned artifact's lineage is also a row of the store's ``artifact_lineage`` table
(:class:`LineageLog`): its kind (``memory``, ``skill``, ``harness_edit``, ``tool_rewrite``,
``adapter``), its id, the version that introduced it, the trajectory ids and subject digests, and a
small ``detail`` (an adapter's manifest id and directory; never a payload). ``molt versions show``,
``molt adapters ls`` and ``molt erase --subject`` read it. A store made before the table existed gets
it on first use, with a lineage for each memory and skill it holds from its one recorded source
trajectory (:meth:`LineageLog.migrate`).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from molt.errors import LineageError
from molt.governance.envelope import DIGEST_PREFIX, id_digest
from molt.store import Filter, Store
from molt.store.query import Trajectory
from molt.store.tables import append, ensure_table, open_all

__all__ = [
    "MANIFEST_FILE",
    "MANIFEST_SCHEMA",
    "KINDS",
    "LINEAGE_SCHEMA",
    "LINEAGE_TABLE",
    "AdapterManifest",
    "Lineage",
    "LineageDiff",
    "LineageLog",
    "LineageRecord",
    "file_digests",
    "lineage_from_store",
    "lineage_of",
    "load_manifest",
    "manifest_diff",
    "read_manifest",
    "subject_key",
    "write_manifest",
]

#: The manifest's file name inside an adapter directory.
MANIFEST_FILE = "molt-manifest.json"
#: What a manifest's ``schema`` field says (a reader refuses another).
MANIFEST_SCHEMA = "molt.adapter-manifest/1"

_DIGEST = re.compile(re.escape(DIGEST_PREFIX) + r"[0-9a-f]{32}\Z")
_FILE_HASH = re.compile(r"sha256:[0-9a-f]{64}\Z")
_IN_CHUNK = 256
# hide_input_in_errors: an error about a subject must not repeat the subject
_DATA = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


def subject_key(tenant_id: str | None, subject_id: str) -> str:
    """How a lineage names ``subject_id`` of ``tenant_id``: the tenant's keyed digest of it."""
    return id_digest(tenant_id, subject_id)


class Lineage(BaseModel):
    """The trajectories of one tenant whose evidence made an artifact, and the subjects they concern
    (keyed digests, never the values). Trajectory ids and subjects are kept sorted and unique, so two
    lineages of the same evidence are equal and serialise to the same bytes."""

    model_config = _DATA

    tenant_id: str | None = None
    trajectories: tuple[str, ...] = ()
    subjects: tuple[str, ...] = Field(default=(), description="keyed digests (idh-…) of the subjects")

    @field_validator("trajectories")
    @classmethod
    def _sorted_ids(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any(not t for t in v):
            raise ValueError("a trajectory id is empty")
        return tuple(sorted(set(v)))

    @field_validator("subjects")
    @classmethod
    def _digests_only(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [s for s in v if not _DIGEST.match(s)]
        if bad:
            # never echo the value: it may be the very subject id that must not be written
            raise ValueError(f"{len(bad)} subject(s) are not keyed digests ({DIGEST_PREFIX}…); "
                             f"use Lineage.of or subject_key")
        return tuple(sorted(set(v)))

    @classmethod
    def of(cls, tenant_id: str | None, trajectories: Iterable[str], subjects: Iterable[str] = ()) -> Lineage:
        """A lineage from trajectory ids and subject ids as given (digested here)."""
        return cls(tenant_id=tenant_id, trajectories=tuple(trajectories),
                   subjects=tuple(subject_key(tenant_id, s) for s in subjects if s))

    @classmethod
    def from_store(cls, store: Store, tenant_id: str | None, trajectories: Iterable[str]) -> Lineage:
        """A lineage of ``trajectories``, their subjects read from the store's events and digested."""
        tids = sorted({t for t in trajectories if t})
        return cls.of(tenant_id, tids, sorted(_subjects_of(store, tids)))

    def names_subject(self, subject_id: str) -> bool:
        """Whether the subject (as given) is one this lineage's trajectories concern."""
        return bool(self.subjects) and subject_key(self.tenant_id, subject_id) in self.subjects

    def without(self, trajectories: Iterable[str] = (), subjects: Iterable[str] = ()) -> Lineage:
        """This lineage less some trajectories and some subjects (given as ids, digested here)."""
        drop_t = set(trajectories)
        drop_s = {subject_key(self.tenant_id, s) for s in subjects}
        return Lineage(tenant_id=self.tenant_id, trajectories=tuple(t for t in self.trajectories if t not in drop_t),
                       subjects=tuple(s for s in self.subjects if s not in drop_s))

    @property
    def empty(self) -> bool:
        """No trajectory and no subject."""
        return not self.trajectories and not self.subjects

    @staticmethod
    def merge(lineages: Iterable[Lineage]) -> tuple[Lineage, ...]:
        """One lineage per tenant, the union of the given ones, in tenant order."""
        by: dict[str | None, tuple[set[str], set[str]]] = {}
        for lin in lineages:
            t, s = by.setdefault(lin.tenant_id, (set(), set()))
            t.update(lin.trajectories)
            s.update(lin.subjects)
        return tuple(Lineage(tenant_id=k, trajectories=tuple(t), subjects=tuple(s))
                     for k, (t, s) in sorted(by.items(), key=lambda kv: kv[0] or ""))


class LineageDiff(BaseModel):
    """What one set of lineages holds that another does not, per tenant (trajectory ids and subject
    digests): how a retraining request shows an erased subject excluded."""

    model_config = _DATA

    removed_trajectories: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    added_trajectories: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    removed_subjects: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    added_subjects: dict[str, tuple[str, ...]] = Field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """Both sides hold the same trajectories and subjects."""
        return not (self.removed_trajectories or self.added_trajectories or self.removed_subjects
                    or self.added_subjects)


def manifest_diff(before: Iterable[Lineage], after: Iterable[Lineage]) -> LineageDiff:
    """What ``after`` lacks and adds compared with ``before`` (tenant ``None`` is keyed ``""``)."""
    a = {lin.tenant_id or "": lin for lin in Lineage.merge(before)}
    b = {lin.tenant_id or "": lin for lin in Lineage.merge(after)}
    out: dict[str, dict[str, tuple[str, ...]]] = {k: {} for k in ("rt", "at", "rs", "as")}
    for t in sorted(set(a) | set(b)):
        x, y = a.get(t, Lineage()), b.get(t, Lineage())
        for key, got in (("rt", set(x.trajectories) - set(y.trajectories)),
                         ("at", set(y.trajectories) - set(x.trajectories)),
                         ("rs", set(x.subjects) - set(y.subjects)), ("as", set(y.subjects) - set(x.subjects))):
            if got:
                out[key][t] = tuple(sorted(got))
    return LineageDiff(removed_trajectories=out["rt"], added_trajectories=out["at"],
                       removed_subjects=out["rs"], added_subjects=out["as"])


class AdapterManifest(BaseModel):
    """What an adapter directory holds and whose data made it (see the module docstring)."""

    model_config = _DATA

    schema_: str = Field(default=MANIFEST_SCHEMA, alias="schema")
    tenant_id: str | None
    adapter: str
    base_model: str
    share_with: tuple[str, ...] = ()
    files: dict[str, str]
    lineage: tuple[Lineage, ...] = ()
    created_at: str
    request_id: str | None = None
    #: the manifest id of the adapter this one replaces (a retraining after an erasure), if any
    replaces: str | None = None

    @field_validator("share_with")
    @classmethod
    def _sorted_tenants(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(set(v)))

    @field_validator("files")
    @classmethod
    def _hashes(cls, v: dict[str, str]) -> dict[str, str]:
        if not v:
            raise ValueError("an adapter manifest lists at least one file")
        for name, h in v.items():
            if not _FILE_HASH.match(h) or Path(name).is_absolute() or ".." in Path(name).parts:
                raise ValueError(f"file entry {name!r}: a relative path and 'sha256:<64 hex>' expected")
        return dict(sorted(v.items()))

    def canonical(self) -> bytes:
        """The canonical JSON bytes its id is the hash of."""
        return orjson.dumps(self.model_dump(mode="json", by_alias=True), option=orjson.OPT_SORT_KEYS)

    @property
    def manifest_id(self) -> str:
        """``sha256:`` + the SHA-256 of :meth:`canonical`: the manifest's content address."""
        return "sha256:" + hashlib.sha256(self.canonical()).hexdigest()

    @property
    def tenants(self) -> tuple[str | None, ...]:
        """The tenants this adapter may serve: its own, then ``share_with``."""
        return (self.tenant_id, *(t for t in self.share_with if t != self.tenant_id))

    def serves(self, tenant: str | None) -> bool:
        """Whether ``tenant``'s requests may be served by this adapter."""
        return tenant in self.tenants

    def names_subject(self, subject_id: str) -> bool:
        """Whether any of its training samples concerns ``subject_id`` (as given)."""
        return any(lin.names_subject(subject_id) for lin in self.lineage)

    @property
    def trajectory_count(self) -> int:
        """How many trajectories trained it."""
        return sum(len(lin.trajectories) for lin in self.lineage)

    @property
    def subject_count(self) -> int:
        """How many distinct subject digests its lineage holds."""
        return sum(len(lin.subjects) for lin in self.lineage)


def file_digests(adapter_dir: str | os.PathLike[str]) -> dict[str, str]:
    """``{relative path: "sha256:<hex>"}`` of every file under ``adapter_dir`` except the manifest."""
    root = Path(adapter_dir)
    out: dict[str, str] = {}
    for f in sorted(root.rglob("*")):
        rel = f.relative_to(root).as_posix()
        if rel == MANIFEST_FILE or rel.startswith(f".{MANIFEST_FILE}.") or f.is_dir():
            continue
        if f.is_symlink():  # what it points at can change without the directory changing
            raise LineageError(f"{f} is a symbolic link; an adapter directory holds its own files.", reason="files")
        h = hashlib.sha256()
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        out[rel] = "sha256:" + h.hexdigest()
    return out


def write_manifest(adapter_dir: str | os.PathLike[str], *, tenant_id: str | None, adapter: str, base_model: str,
                   lineage: Sequence[Lineage] = (), share_with: Iterable[str] = (), request_id: str | None = None,
                   replaces: str | None = None, created_at: datetime | None = None) -> AdapterManifest:
    """Hash the files of ``adapter_dir`` and write its manifest there (atomically); return it.

    Refuses (:class:`LineageError`) a directory with no files and a lineage naming a tenant that the
    adapter neither belongs to nor is shared with — a manifest that :func:`load_manifest` would refuse
    is never written."""
    root = Path(adapter_dir)
    if not root.is_dir():
        raise LineageError(f"No adapter directory at {root}.", reason="missing")
    files = file_digests(root)
    if not files:
        raise LineageError(f"The adapter directory {root} holds no files.", reason="files")
    when = (created_at or datetime.now(UTC)).astimezone(UTC).isoformat(timespec="seconds")
    try:
        m = AdapterManifest(tenant_id=tenant_id, adapter=adapter, base_model=base_model,
                            share_with=tuple(share_with), files=files, lineage=Lineage.merge(lineage),
                            created_at=when, request_id=request_id, replaces=replaces)
    except ValidationError as exc:
        raise LineageError(f"Adapter manifest for {adapter!r}: {_first(exc)}", reason="files") from exc
    _check_tenants(m)
    doc = {"manifest_id": m.manifest_id, **m.model_dump(mode="json", by_alias=True)}
    tmp = root / f".{MANIFEST_FILE}.{os.getpid()}"
    tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2))
    os.replace(tmp, root / MANIFEST_FILE)
    return m


def read_manifest(adapter_dir: str | os.PathLike[str]) -> AdapterManifest:
    """The manifest of ``adapter_dir`` after checking it against its own id (not the files, nor the
    tenant: that is :func:`load_manifest`). Raises :class:`LineageError` when it is missing or edited."""
    path = Path(adapter_dir) / MANIFEST_FILE
    if not path.is_file():
        raise LineageError(f"The adapter at {Path(adapter_dir)} has no {MANIFEST_FILE}; an adapter whose "
                           f"training data is not stated is not served.", reason="missing")
    try:
        doc = orjson.loads(path.read_bytes())
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        stated = doc.pop("manifest_id", None)
        if doc.get("schema") != MANIFEST_SCHEMA:
            raise ValueError(f"schema {doc.get('schema')!r}, {MANIFEST_SCHEMA!r} expected")
        m = AdapterManifest.model_validate(doc)
    except (orjson.JSONDecodeError, ValueError) as exc:
        detail = _first(exc) if isinstance(exc, ValidationError) else str(exc)
        raise LineageError(f"{path} is not a valid adapter manifest ({detail}).", reason="tampered") from exc
    if stated != m.manifest_id:
        raise LineageError(f"{path} does not hash to the id it states (the manifest was edited after it was "
                           f"written); not served.", reason="tampered")
    return m


def load_manifest(adapter_dir: str | os.PathLike[str], *, tenant: str | None,
                  store: Store | None = None) -> AdapterManifest:
    """The manifest of ``adapter_dir``, verified for serving ``tenant``'s requests (see the module
    docstring); raises :class:`LineageError` with ``reason`` ``missing``, ``tampered``, ``files`` or
    ``tenant``."""
    m = read_manifest(adapter_dir)
    have = file_digests(adapter_dir)
    if have != m.files:
        changed = sorted(k for k in set(have) & set(m.files) if have[k] != m.files[k])
        gone = sorted(set(m.files) - set(have))
        extra = sorted(set(have) - set(m.files))
        what = "; ".join(f"{label}: {', '.join(v)}" for label, v in
                         (("changed", changed), ("missing", gone), ("not in the manifest", extra)) if v)
        raise LineageError(f"The adapter {m.adapter!r} at {Path(adapter_dir)} does not match its manifest "
                           f"({what}); not served.", reason="files")
    if not m.serves(tenant):
        raise LineageError(f"The adapter {m.adapter!r} belongs to tenant {m.tenant_id!r} and is not shared with "
                           f"{tenant!r}; not served.", reason="tenant")
    _check_tenants(m)
    if store is not None:
        for lin in m.lineage:
            for tid, owner in _owners(store, lin.trajectories).items():
                if owner != lin.tenant_id:
                    raise LineageError(f"The adapter {m.adapter!r}'s manifest lists a trajectory of tenant "
                                       f"{lin.tenant_id!r} that the store holds for another tenant; not served.",
                                       reason="tenant", trajectory_id=tid)
    return m


def _check_tenants(m: AdapterManifest) -> None:
    allowed = set(m.tenants)
    for lin in m.lineage:
        if lin.tenant_id not in allowed:
            raise LineageError(f"The adapter {m.adapter!r} of tenant {m.tenant_id!r} names trajectories of tenant "
                               f"{lin.tenant_id!r}, which it is not shared with; not served.", reason="tenant")


def _rows(store: Store, trajectories: Sequence[str], columns: list[str]) -> Iterable[Mapping[str, Any]]:
    if not trajectories:
        return
    tbl = store.table("events")
    for where in Filter().chunks("trajectory_id", sorted(trajectories), _IN_CHUNK):
        yield from tbl.search().where(str(where)).select(columns).limit(None).to_arrow().to_pylist()


def _subjects_of(store: Store, trajectories: Sequence[str]) -> set[str]:
    return {r["subject_id"] for r in _rows(store, trajectories, ["subject_id"]) if r["subject_id"]}


def _owners(store: Store, trajectories: Sequence[str]) -> dict[str, str | None]:
    """The tenant each stored trajectory's events carry; one with events of two tenants maps to a
    value that matches no tenant. Trajectories the store does not hold (retention removed them) are
    absent: nothing says whose they were."""
    seen: dict[str, set[str | None]] = {}
    for r in _rows(store, trajectories, ["trajectory_id", "tenant_id"]):
        seen.setdefault(r["trajectory_id"], set()).add(r["tenant_id"])
    return {t: next(iter(v)) if len(v) == 1 else "\x00several" for t, v in seen.items()}


def _first(exc: ValidationError | Exception) -> str:
    if isinstance(exc, ValidationError):
        e = exc.errors()[0]
        return f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
    return str(exc)


# ------------------------------------------------------------------ lineage of trajectories read elsewhere


def lineage_of(trajectories: Iterable[Trajectory], *, default_tenant: str | None = None) -> tuple[Lineage, ...]:
    """One lineage per tenant of ``trajectories`` as read back (their events' tenant and
    ``metadata.consent.subject_id``); a trajectory whose events name no tenant counts as
    ``default_tenant``'s (the reader that chose it for that tenant vouches for it)."""
    by: dict[str | None, tuple[set[str], set[str]]] = {}
    for t in trajectories:
        tenant = next((e.tenant_id for e in t.events if e.tenant_id), default_tenant)
        ids, subjects = by.setdefault(tenant, (set(), set()))
        ids.add(t.trajectory_id)
        for e in t.events:
            consent = e.metadata.consent if e.metadata is not None else None
            if consent is not None and consent.subject_id:
                subjects.add(consent.subject_id)
    return Lineage.merge(Lineage.of(k, ids, subjects) for k, (ids, subjects) in by.items())


def lineage_from_store(store: Store, trajectories: Iterable[str]) -> tuple[Lineage, ...]:
    """One lineage per tenant of the trajectory ids, tenants and subjects read from the store's events
    (ids the store does not hold are left out: nothing says whose they were)."""
    tids = sorted({t for t in trajectories if t})
    by: dict[str | None, tuple[set[str], set[str]]] = {}
    for r in _rows(store, tids, ["trajectory_id", "tenant_id", "subject_id"]):
        ids, subjects = by.setdefault(r["tenant_id"], (set(), set()))
        ids.add(r["trajectory_id"])
        if r["subject_id"]:
            subjects.add(r["subject_id"])
    return Lineage.merge(Lineage.of(k, ids, subjects) for k, (ids, subjects) in by.items())


# ------------------------------------------------------------------ the artifact_lineage table

LINEAGE_TABLE = "artifact_lineage"
#: What a lineage row can be of.
KINDS = ("memory", "skill", "harness_edit", "tool_rewrite", "adapter")
_TS = pa.timestamp("us", tz="UTC")
LINEAGE_SCHEMA = pa.schema([
    pa.field("row_id", pa.string(), nullable=False),
    pa.field("tenant_id", pa.string()),
    pa.field("agent_id", pa.string()),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("artifact_id", pa.string(), nullable=False),
    pa.field("version_id", pa.string()),           # the policy version that introduced it, when one did
    pa.field("lineage", pa.binary(), nullable=False),  # JSON list of Lineage (one per tenant)
    pa.field("detail", pa.binary()),               # JSON: ids and paths only, never a payload
    pa.field("status", pa.string(), nullable=False),   # live | retired
    pa.field("created_at", _TS, nullable=False),
])


class LineageRecord(BaseModel):
    """One artifact's lineage as stored (see :class:`LineageLog`)."""

    model_config = _DATA

    row_id: str
    tenant_id: str | None
    agent_id: str | None = None
    kind: str
    artifact_id: str
    version_id: str | None = None
    lineage: tuple[Lineage, ...] = ()
    detail: dict[str, Any] = Field(default_factory=dict)
    status: str = "live"
    created_at: datetime

    def names_subject(self, subject_id: str) -> bool:
        """Whether the subject (as given) is in this artifact's lineage."""
        return any(lin.names_subject(subject_id) for lin in self.lineage)

    @property
    def trajectories(self) -> tuple[str, ...]:
        """Every trajectory id of its lineage."""
        return tuple(sorted({t for lin in self.lineage for t in lin.trajectories}))

    @property
    def subject_count(self) -> int:
        """How many subject digests its lineage holds."""
        return sum(len(lin.subjects) for lin in self.lineage)

    def summary(self) -> dict[str, Any]:
        """Counts and tenants (what the console and listings show), never ids of trajectories or subjects."""
        return {"kind": self.kind, "artifact": self.artifact_id, "version": self.version_id, "status": self.status,
                "tenants": [lin.tenant_id for lin in self.lineage], "trajectories": len(self.trajectories),
                "subjects": self.subject_count}


class LineageLog:
    """The ``artifact_lineage`` table of ``store`` (see the module docstring). Rows are appended; an
    erasure rewrites the rows it reaches (:meth:`replace`) so no digest of an erased subject stays."""

    def __init__(self, store: Store, *, write: bool = True):
        """``write=False`` (a dry run): a store without the table gets its migration in memory only —
        :meth:`records` returns those rows, nothing is appended."""
        self.store = store
        self._unwritten: list[LineageRecord] = []
        self._table = ensure_table(store, LINEAGE_TABLE, LINEAGE_SCHEMA)
        # an empty table: made just now, or by a dry run (which migrates in memory only)
        fresh = self._table.count_rows() == 0
        if fresh:
            if write:
                self.migrate()
            else:
                self._unwritten = self.unmigrated()

    def migrate(self) -> int:
        """Give every memory and skill that has no lineage row one from its recorded source trajectory
        (what stores made before lineage knew of it); returns how many rows were written."""
        out = self.unmigrated()
        self._append(out)
        return len(out)

    def unmigrated(self) -> list[LineageRecord]:
        """The rows :meth:`migrate` would write (not stored)."""
        have = {(r.kind, r.artifact_id) for r in self.records(status=None)}
        tables = open_all(self.store)
        out: list[LineageRecord] = []
        for kind, name, key in (("memory", "memories", "memory_id"), ("skill", "skills", "skill_id")):
            tbl = tables.get(name)
            if tbl is None or "source_trajectory_id" not in tbl.schema.names:
                continue
            cols = [key, "tenant_id", "agent_id", "source_trajectory_id"]
            for r in tbl.search().select(cols).limit(None).to_arrow().to_pylist():
                if (kind, r[key]) in have:
                    continue
                src = [r["source_trajectory_id"]] if r["source_trajectory_id"] else []
                lin = lineage_from_store(self.store, src) or (Lineage(tenant_id=r["tenant_id"]),)
                out.append(self.make(kind, r["tenant_id"], r[key], lin, agent_id=r["agent_id"],
                                     detail={"migrated": "from source_trajectory_id"}))
        return out

    @staticmethod
    def make(kind: str, tenant_id: str | None, artifact_id: str, lineage: Iterable[Lineage], *,
              agent_id: str | None = None, version_id: str | None = None, detail: Mapping[str, Any] | None = None,
              status: str = "live") -> LineageRecord:
        """A new record (not yet stored: :meth:`record` stores one, :meth:`replace` several)."""
        if kind not in KINDS:
            raise LineageError(f"A lineage is of one of {', '.join(KINDS)}, not {kind!r}.", reason="kind")
        from molt.atdp.ids import new_id

        return LineageRecord(row_id=new_id(), tenant_id=tenant_id, agent_id=agent_id, kind=kind,
                             artifact_id=artifact_id, version_id=version_id, lineage=Lineage.merge(lineage),
                             detail=dict(detail or {}), status=status, created_at=datetime.now(UTC))

    def record(self, kind: str, tenant_id: str | None, artifact_id: str, lineage: Iterable[Lineage], *,
               agent_id: str | None = None, version_id: str | None = None,
               detail: Mapping[str, Any] | None = None) -> LineageRecord:
        """Append the lineage of one artifact and return it."""
        rec = self.make(kind, tenant_id, artifact_id, lineage, agent_id=agent_id, version_id=version_id,
                         detail=detail)
        self._append([rec])
        return rec

    def _append(self, recs: Sequence[LineageRecord]) -> None:
        rows = [{"row_id": r.row_id, "tenant_id": r.tenant_id, "agent_id": r.agent_id, "kind": r.kind,
                 "artifact_id": r.artifact_id, "version_id": r.version_id,
                 "lineage": orjson.dumps([lin.model_dump(mode="json") for lin in r.lineage]),
                 "detail": orjson.dumps(r.detail, default=str), "status": r.status, "created_at": r.created_at}
                for r in recs]
        append(self.store, LINEAGE_TABLE, pa.Table.from_pylist(rows, schema=LINEAGE_SCHEMA))

    def records(self, tenant_id: str | None = None, *, kind: str | None = None,
                artifact_ids: Iterable[str] | None = None, status: str | None = "live") -> list[LineageRecord]:
        """The newest row of each artifact (of ``tenant_id`` / ``kind`` / ``artifact_ids`` / ``status``
        when given; ``status=None``: any), oldest first."""
        self._table.checkout_latest()
        where = Filter.given(tenant_id=tenant_id, kind=kind)
        ids = None if artifact_ids is None else sorted(set(artifact_ids))
        if ids is not None:
            if not ids:
                return []
            where = where.either(*Filter().chunks("artifact_id", ids, _IN_CHUNK))
        q = self._table.search()
        if where:
            q = q.where(str(where))
        newest: dict[tuple[str, str, str | None], LineageRecord] = {
            (r.kind, r.artifact_id, r.tenant_id): r for r in self._unwritten
            if (tenant_id is None or r.tenant_id == tenant_id) and (kind is None or r.kind == kind)
            and (ids is None or r.artifact_id in ids)}
        for r in sorted(q.limit(None).to_arrow().to_pylist(), key=lambda r: r["created_at"]):
            newest[(r["kind"], r["artifact_id"], r["tenant_id"])] = LineageRecord(
                row_id=r["row_id"], tenant_id=r["tenant_id"], agent_id=r["agent_id"], kind=r["kind"],
                artifact_id=r["artifact_id"], version_id=r["version_id"],
                lineage=tuple(Lineage.model_validate(x) for x in orjson.loads(r["lineage"])),
                detail=orjson.loads(r["detail"]) if r["detail"] else {}, status=r["status"], created_at=r["created_at"])
        return [r for r in newest.values() if status is None or r.status == status]

    def get(self, kind: str, artifact_id: str, tenant_id: str | None = None) -> LineageRecord | None:
        """The newest lineage of one artifact (any status), or ``None``."""
        got = self.records(tenant_id, kind=kind, artifact_ids=[artifact_id], status=None)
        return got[-1] if got else None

    def naming(self, subject_id: str, *, trajectories: Iterable[str] = (), tenant_id: str | None = None,
               ) -> list[LineageRecord]:
        """Every live artifact whose lineage holds the subject (its digest, or one of its
        ``trajectories``)."""
        tids = set(trajectories)
        return [r for r in self.records(tenant_id) if r.names_subject(subject_id) or tids & set(r.trajectories)]

    def replace(self, records: Sequence[LineageRecord]) -> int:
        """Rewrite the rows of ``records``' artifacts with these records (an erasure removing a subject
        from them, or retiring them): the old rows are deleted physically by the caller's purge."""
        if not records:
            return 0
        from molt.store.erase import rewrite

        n = 0
        for r in records:
            mine = Filter().absent("tenant_id") if r.tenant_id is None else Filter(tenant_id=r.tenant_id)
            n += rewrite(self.store, LINEAGE_TABLE, Filter(kind=r.kind, artifact_id=r.artifact_id) & mine)
        self._append(list(records))
        return n
