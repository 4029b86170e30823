"""The governed write path every foreign-format import shares: mapped rows in, sealed events out.

A format module (:mod:`molt.interop.otlp`, :mod:`~molt.interop.langfuse`, :mod:`~molt.interop.langsmith`)
turns a file into :class:`Row` objects — an ATDP event, a late reward, or a refusal with its reason —
and :func:`import_rows` writes them as live capture would:

- **checked first**: a row over the record size limit, a span tree with a cycle, a row naming another
  tenant than the importing key's, a file mixing tenants without a key, a malformed or unknown value
  (the format module's refusals) are collected with the row they came from before anything is written;
- **all or nothing by default** (``mode="all-or-nothing"``): any refused row refuses the whole file
  and nothing is stored. ``mode="per-trajectory"`` stores the trajectories without a refused row and
  quarantines each refused row — and the other rows of its trajectory, since a tree with a hole would
  be replayed wrong — with the reason (the source record is not kept: it was never redacted, and it
  stays in the file). A file mixing tenants without a key is refused in both modes: no row of it can
  be said to be right;
- **tenants** as on every ingest path (:class:`~molt.capture.tenancy.TrajectoryNamespace`): with a
  tenant key, source trajectory ids are resolved within the tenant (namespaced when the deployment has
  more than one tenant), event ids re-derived from the resolved trajectory, and every event stamped
  with the tenant;
- **governed**: each new event goes through the governance pipeline (redaction, classification,
  eligibility, retention); an accepted event is sealed with its decision, a rejected one quarantined
  with the pipeline's (redacted) record — exactly the Recorder's rule, so nothing raw is stored. A
  reward's reason (a Langfuse comment, a LangSmith correction) is redacted by the same pipeline;
- **idempotent**: event and annotation ids are derived from the source's ids, so a rerun finds them
  stored and counts them as duplicates; new events of a stored trajectory continue its chain.

Events of a trajectory are chained in start-time order (a parent before a child that starts with it).

Memory does not grow with the file: checked rows wait on disk (:class:`~molt.interop.spill.Spill`)
until the file is read, then come back a trajectory at a time, twice (the checks that need a whole
trajectory; then governing, sealing and writing). What is held is one page of trajectories, one write
batch, and per refused row its reason. The format module's reader bounds the rest (OTLP streams its
file; the Langfuse and LangSmith readers hold their source records, which they link across the file).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from molt.atdp.chain import GENESIS, seal
from molt.atdp.models import PAYLOAD_FIELDS, Event, RewardAnnotation
from molt.atdp.validate import MAX_RECORD_BYTES
from molt.capture.hooks import govern_reward
from molt.capture.recorder import DEFAULT_PIPELINE, index_fields, resolve_pipeline
from molt.capture.sinks import SealedRow, SinkBatch
from molt.capture.tenancy import TrajectoryNamespace, store_tenant, unclaimed
from molt.errors import MoltError
from molt.interop.spill import Spill
from molt.store.filters import Filter

__all__ = ["ImportMode", "ImportRefused", "ImportReport", "Row", "import_rows"]

ImportMode = Literal["all-or-nothing", "per-trajectory"]
MODES: tuple[str, ...] = ("all-or-nothing", "per-trajectory")
_SHOWN = 10


@dataclass
class Row:
    """One mapped source record: an event, a late reward, or a refusal (``problem``).

    ``where`` names the record in the source (``line 3, span 5b8a…``) for the report; ``trajectory``
    is the trajectory it belongs to (the source's trace id), when known.
    """

    where: str
    trajectory: str | None = None
    event: Event | None = None
    reward: RewardAnnotation | None = None
    problem: str | None = None


@dataclass
class ImportReport:
    """What an import did. ``refused`` holds ``"<where>: <reason>"`` per refused row."""

    source: str
    mode: str = "all-or-nothing"
    rows: int = 0
    imported: int = 0
    duplicates: int = 0
    trajectories: int = 0
    rewards: int = 0
    reward_duplicates: int = 0
    #: events the governance pipeline quarantined (stored in quarantine with its reason, not as events)
    quarantined: int = 0
    #: events stored whose payload the pipeline redacted
    redacted: int = 0
    refused: list[str] = field(default_factory=list)
    #: rewards not stored because their event or trajectory was not (refused or quarantined)
    rewards_dropped: int = 0

    def summary(self) -> str:
        """One line for the CLI."""
        parts = [f"{self.imported:,} events of {self.trajectories:,} trajectories imported",
                 f"{self.duplicates:,} already stored", f"{self.rewards:,} rewards"
                 + (f" ({self.reward_duplicates:,} already stored)" if self.reward_duplicates else ""),
                 f"{self.redacted:,} redacted", f"{self.quarantined:,} quarantined by governance",
                 f"{len(self.refused):,} refused"]
        if self.rewards_dropped:
            parts.append(f"{self.rewards_dropped:,} rewards dropped with their event")
        return "; ".join(parts)


class ImportRefused(MoltError):
    """The file (all-or-nothing) was refused; nothing was stored. ``report.refused`` says why."""

    def __init__(self, report: ImportReport, message: str) -> None:
        super().__init__(message)
        self.report = report


def _cycles(events: Sequence[Event]) -> set[str]:
    """Event ids that sit on a cycle of parent links (within one trajectory)."""
    parent = {e.event_id: e.parent_id for e in events}
    state: dict[str, int] = {}  # 1: on the current walk, 2: known acyclic / done
    on_cycle: set[str] = set()
    for start in parent:
        path: list[str] = []
        node: str | None = start
        while node is not None and node in parent and state.get(node) is None:
            state[node] = 1
            path.append(node)
            node = parent[node]
        if node is not None and state.get(node) == 1:  # walked back into this path: a cycle
            on_cycle.update(path[path.index(node):])
        for n in path:
            state[n] = 2
    return on_cycle


def _depths(events: Sequence[Event]) -> dict[str, int]:
    parent = {e.event_id: e.parent_id for e in events}
    depth: dict[str, int] = {}
    for e in events:
        d, node, seen = 0, e.parent_id, 0
        while node is not None and node in parent and seen < len(parent):
            d, node, seen = d + 1, parent[node], seen + 1
        depth[e.event_id] = d
    return depth


def _existing_events(store: Any, tids: Sequence[str]) -> dict[str, set[str]]:
    """Stored event ids of each trajectory in ``tids`` that has any."""
    heads = store.chain_heads(list(tids))
    found: dict[str, set[str]] = defaultdict(set)
    have = sorted(heads)
    tbl = store.table("events")
    for where in Filter().chunks("trajectory_id", have):
        got = tbl.search().where(str(where)).select(["trajectory_id", "event_id"]).limit(None).to_arrow()
        for t, e in zip(got.column("trajectory_id").to_pylist(), got.column("event_id").to_pylist(), strict=True):
            found[t].add(e)
    return found


def _existing_rewards(store: Any, ids: Sequence[str]) -> set[str]:
    tbl = store.table("rewards")
    found: set[str] = set()
    for where in Filter().chunks("annotation_id", ids):
        got = tbl.search().where(str(where)).select(["annotation_id"]).limit(None).to_arrow()
        found.update(got.column("annotation_id").to_pylist())
    return found


def _rehome(ev: Event, tid: str, ns: TrajectoryNamespace, tenant: str) -> Event:
    md = ev.metadata.model_copy(update={"tenant_id": tenant})
    if tid == ev.trajectory_id:
        return ev.model_copy(update={"metadata": md})
    return ev.model_copy(update={"metadata": md, "trajectory_id": tid, "event_id": ns.event_id(tid, ev.event_id),
                                 "parent_id": ns.event_id(tid, ev.parent_id) if ev.parent_id else None})


def import_rows(store: Any, rows: Iterable[Row], *, source: str, tenant_id: str | None = None,
                namespace: TrajectoryNamespace | None = None, pipeline: Any = DEFAULT_PIPELINE,
                mode: ImportMode = "all-or-nothing", max_record_bytes: int = MAX_RECORD_BYTES,
                batch_rows: int = 4096, progress: Callable[[int], None] | None = None,
                spill_dir: str | None = None) -> ImportReport:
    """Check, govern and store mapped rows (see the module docstring).

    Args:
        store: the target :class:`~molt.store.Store`.
        rows: the format module's rows.
        source: the file's name, for the report and messages.
        tenant_id: the importing key's tenant (``None``: the operator or a local install).
        namespace: resolves source trajectory ids within ``tenant_id`` (default: namespaced when it
            is on, see :class:`~molt.capture.tenancy.TrajectoryNamespace`).
        pipeline: the governance pipeline (``"default"``, a ``GovernancePipeline``, or ``None``: off).
        mode: ``"all-or-nothing"`` (default) or ``"per-trajectory"``.
        progress: called with the number of rows handled, as they are.
        spill_dir: where the checked rows wait for the rest of the file (default: the system's
            temporary directory; about the size of the file's events as JSON).

    Raises :class:`ImportRefused` (all-or-nothing, or a file mixing tenants without a key) with the
    report; nothing is stored then.
    """
    if mode not in MODES:
        raise MoltError(f"mode must be one of {', '.join(MODES)}, not {mode!r}.")
    with Spill(spill_dir) as spill:
        return _import(store, rows, spill, source=source, tenant_id=tenant_id, namespace=namespace,
                       pipeline=pipeline, mode=mode, max_record_bytes=max_record_bytes, batch_rows=batch_rows,
                       progress=progress)


#: (where, reason, event id, event kind) of a refused row
_Refusal = tuple[str, str, str | None, str | None]


def _import(store: Any, rows: Iterable[Row], spill: Spill, *, source: str, tenant_id: str | None,
            namespace: TrajectoryNamespace | None, pipeline: Any, mode: str, max_record_bytes: int,
            batch_rows: int, progress: Callable[[int], None] | None) -> ImportReport:
    report = ImportReport(source=source, mode=mode)
    bad: dict[str, list[_Refusal]] = defaultdict(list)  # source trajectory -> its refused rows
    loose: list[str] = []  # refusals that belong to no trajectory
    stated: set[str] = set()  # tenants the file names

    # 1. read: what a row alone can tell is checked now; the rest waits on disk, by trajectory
    n = 0
    for row in rows:
        n += 1
        if progress is not None and n % 256 == 0:
            progress(256)
        if row.problem is not None:
            if row.trajectory is None:
                loose.append(f"{row.where}: {row.problem}")
            else:
                ev = row.event
                bad[row.trajectory].append((row.where, row.problem, ev.event_id if ev else None,
                                            ev.kind.value if ev else None))
        elif row.event is not None:
            ev = row.event
            data = ev.model_dump_json()
            owner = ev.metadata.tenant_id
            if len(data) > max_record_bytes:
                bad[ev.trajectory_id].append((row.where, f"{len(data):,} bytes, over the {max_record_bytes:,}-byte "
                                                         f"record limit", ev.event_id, ev.kind.value))
            elif tenant_id is not None and owner not in (None, tenant_id):
                bad[ev.trajectory_id].append((row.where, f"names tenant {owner!r}, but this key imports tenant "
                                                         f"{tenant_id!r}", ev.event_id, ev.kind.value))
            else:
                spill.event(ev.trajectory_id, row.where, data)
            if owner is not None:
                stated.add(owner)
        elif row.reward is not None:
            r = row.reward
            if r.tenant_id is not None:
                stated.add(r.tenant_id)
            if tenant_id is not None and r.tenant_id not in (None, tenant_id):
                bad[r.trajectory_id].append((row.where, f"names tenant {r.tenant_id!r}, but this key imports "
                                                        f"tenant {tenant_id!r}", None, None))
            else:
                spill.reward(r.trajectory_id, row.where, r.model_dump_json())
    if progress is not None:
        progress(n % 256)
    report.rows = n

    # tenants: a key's import takes its tenant; without a key the file must name at most one
    if tenant_id is None and len(stated) > 1:
        shown = ", ".join(repr(t) for t in sorted(stated)[:5])
        report.refused.append(f"{source}: the file mixes the tenants {shown}"
                              f"{' …' if len(stated) > 5 else ''} and no tenant key was given")
        raise ImportRefused(report, f"Nothing imported from {source}: it mixes {len(stated)} tenants ({shown}) and "
                                    f"no tenant key was given; import each tenant's part with that tenant's key "
                                    f"(--api-key), or split the file.")
    tenant = tenant_id if tenant_id is not None else next(iter(stated), None)
    ns = namespace if namespace is not None else TrajectoryNamespace(store_tenant(store))

    hook = resolve_pipeline(pipeline)
    governed_id = getattr(hook, "governed_id", None)

    def resolved(stid: str) -> str:
        tid = ns.resolve(tenant, stid) if tenant is not None and tenant_id is not None else stid
        # the id as governance stores it (a digest where the id holds personal data), so that the
        # lookups below and the events sealed agree
        return governed_id(tenant, tid) if governed_id is not None else tid

    def load(stid: str, tid: str) -> tuple[list[tuple[str, Event]], list[_Refusal], int]:
        """A trajectory's events re-homed, without in-file copies; refusals of copies with other content."""
        seen: dict[str, Event] = {}
        unique: list[tuple[str, Event]] = []
        refused: list[_Refusal] = []
        copies = 0
        for where, data in spill.events(stid):
            # which version served a call is the gateway's to say, not a file's
            ev = unclaimed(Event.model_validate_json(data), "import")
            if tenant is not None:
                ev = _rehome(ev, tid, ns, tenant)
            first = seen.get(ev.event_id)
            if first is None:
                seen[ev.event_id] = ev
                unique.append((where, ev))
            elif first != ev:
                refused.append((where, f"event {ev.event_id} appears twice with other content", ev.event_id,
                                ev.kind.value))
            else:
                copies += 1
        return unique, refused, copies

    # 2. check what needs a whole trajectory: copies with other content, cycles, another tenant's trajectory
    owner_of = store_tenant(store) if tenant_id is not None else None
    for page in spill.trajectories():
        for stid in page:
            tid = resolved(stid)
            unique, refused, copies = load(stid, tid)
            report.duplicates += copies
            if refused:
                bad[stid].extend(refused)
            cyc = _cycles([ev for _, ev in unique])
            if cyc:
                bad[stid].extend((where, f"its parent links form a cycle ({len(cyc)} events on it); the tree has "
                                         f"no root there", ev.event_id, ev.kind.value)
                                 for where, ev in unique if ev.event_id in cyc)
            if owner_of is not None:
                owner = owner_of(tid)
                if owner is not None and owner != tenant_id:
                    bad[stid].append((f"trajectory {tid[:80]!r}", "holds another tenant's events in this store",
                                      None, None))
    bad = {k: v for k, v in bad.items() if v}
    for refused in bad.values():
        report.refused.extend(f"{where}: {reason}" for where, reason, _, _ in refused)
    report.refused.extend(loose)
    if report.refused and mode == "all-or-nothing":
        more = f" (and {len(report.refused) - _SHOWN} more)" if len(report.refused) > _SHOWN else ""
        raise ImportRefused(report, f"Nothing imported from {source} (all or nothing): {len(report.refused)} "
                                    f"row(s) refused{more}:\n  " + "\n  ".join(report.refused[:_SHOWN]))

    # 3. write: everything is checked; a page of trajectories at a time, each governed, sealed and
    # written with its rewards, so what is held is one page's rows and one write batch
    sink_for = getattr(hook, "sink_for", None)
    sink = sink_for(store) if sink_for is not None else store  # decisions are stored with their events
    now_us = int(time.time() * 1_000_000)
    out = _Batches(sink, batch_rows, report)
    # per-trajectory: each refused row, and the rest of its trajectory, to quarantine with the reason
    for stid, refused in bad.items():
        for where, reason, eid, kind in refused:
            out.quarantine.append({"stage": "import", "reason": f"{source}, {where}: {reason}"[:2000],
                                   "ts_us": now_us, "event_id": eid, "trajectory_id": resolved(stid),
                                   "tenant_id": tenant, "kind": kind})
    for line in loose:  # a record that names no trajectory (a truncated line): its reason, nothing else
        out.quarantine.append({"stage": "import", "reason": f"{source}, {line}"[:2000], "ts_us": now_us,
                               "tenant_id": tenant})
    for page in spill.trajectories():
        tids = {stid: resolved(stid) for stid in page}
        kept = [stid for stid in page if stid not in bad]
        stored = _existing_events(store, [tids[s] for s in kept])
        heads = store.chain_heads([tids[s] for s in kept if tids[s] in stored]) if stored else {}
        reward_rows: list[dict[str, Any]] = []
        for stid in page:
            tid = tids[stid]
            items, _, _ = load(stid, tid)
            if stid in bad:
                refused_ids = {eid for _, _, eid, _ in bad[stid] if eid is not None}
                out.quarantine.extend(
                    {"stage": "import", "reason": f"{source}, {where}: another row of its trajectory was refused",
                     "ts_us": now_us, "event_id": ev.event_id, "trajectory_id": tid, "tenant_id": tenant,
                     "kind": ev.kind.value} for where, ev in items if ev.event_id not in refused_ids)
                report.rewards_dropped += len(spill.rewards(stid))
                out.flush()
                continue
            present, owner = _write_trajectory(items, tid, stored.get(tid, set()), heads.get(tid, (-1, GENESIS)),
                                               hook, out, report, now_us)
            if present:
                report.trajectories += 1
            if owner is _NONE_NEW:  # nothing new in it: its stored events' tenant
                owner = store.trajectory_tenant(tid) if present else None
            rewards = [(w, RewardAnnotation.model_validate_json(d)) for w, d in spill.rewards(stid)]
            reward_rows += _rewards(rewards, stid, tid, present, ns, owner, hook, report)
        existing = _existing_rewards(store, [r["annotation_id"] for r in reward_rows]) if reward_rows else set()
        report.reward_duplicates += len(existing)
        fresh = [r for r in reward_rows if r["annotation_id"] not in existing]
        report.rewards += len(fresh)
        out.rewards.extend(fresh)
        out.flush()
    report.rewards_dropped += spill.orphan_rewards()
    out.flush(force=True)
    return report


class _Batches:
    """Rows on their way to the sink, written ``batch_rows`` at a time (events, quarantine, rewards)."""

    def __init__(self, sink: Any, batch_rows: int, report: ImportReport) -> None:
        self.sink, self.batch_rows, self.report = sink, batch_rows, report
        self.events: list[SealedRow] = []
        self.quarantine: list[dict[str, Any]] = []
        self.rewards: list[dict[str, Any]] = []

    def flush(self, *, force: bool = False) -> None:
        while max(len(self.events), len(self.quarantine), len(self.rewards)) >= (1 if force else self.batch_rows):
            k = self.batch_rows
            batch = SinkBatch(events=self.events[:k], quarantine=self.quarantine[:k], rewards=self.rewards[:k],
                              redelivery=True)
            self.sink.write_batch(batch)
            self.report.imported += len(batch.events)
            del self.events[:k], self.quarantine[:k], self.rewards[:k]


_NONE_NEW: Any = object()  # a trajectory with no new event: its tenant is its stored events'


def _write_trajectory(items: list[tuple[str, Event]], tid: str, have: set[str], head: tuple[int, str], hook: Any,
                      out: _Batches, report: ImportReport, now_us: int) -> tuple[set[str], Any]:
    """Govern, seal and queue a trajectory's new events after its stored ones; returns the ids present
    after the import and the tenant its new events were stamped with (``_NONE_NEW`` if none is new)."""
    depth = _depths([ev for _, ev in items])
    fresh = sorted((ev for _, ev in items if ev.event_id not in have),
                   key=lambda e: (e.timestamp, depth[e.event_id], e.event_id))
    report.duplicates += len(items) - len(fresh)
    seq, prev = head
    ok = set(have)
    owner: Any = _NONE_NEW
    for ev in fresh:
        annotations = None
        if hook is not None:
            res = hook.process(ev)
            if res.event is None:
                report.quarantined += 1
                rec = res.record
                out.quarantine.append({"stage": res.stage or "governance", "reason": (res.reason or "rejected")[:2000],
                                       "ts_us": now_us, "event_id": ev.event_id, "trajectory_id": tid,
                                       "tenant_id": ev.metadata.tenant_id, "kind": ev.kind.value,
                                       **({"record": rec.decode("utf-8", "replace")} if rec else {})})
                continue
            if any(getattr(res.event, f) != getattr(ev, f) for f in PAYLOAD_FIELDS):
                report.redacted += 1
            ev, annotations = res.event, res.annotations
        seq += 1
        sealed = seal(ev, seq, prev)
        prev = sealed.hash
        x = index_fields(ev, seq)
        if annotations is not None:
            x["annotations"] = annotations
        out.events.append(SealedRow(x=x, envelope=sealed.envelope, payload=sealed.payload, salt=sealed.salt,
                                    digest=sealed.digest, prev_hash=sealed.prev_hash, hash=sealed.hash))
        ok.add(ev.event_id)
        owner = ev.metadata.tenant_id  # as governance stamped it: the rewards take the same
        if len(out.events) >= out.batch_rows:
            out.flush()
    return ok, owner


def _rewards(rewards: list[tuple[str, RewardAnnotation]], stid: str, tid: str, present: set[str],
             ns: TrajectoryNamespace, owner: str | None, hook: Any, report: ImportReport) -> list[dict[str, Any]]:
    """A trajectory's reward rows to store: re-homed like its events, reasons redacted, dropped with their
    event."""
    out: list[dict[str, Any]] = []
    for _, r in rewards:
        eid = r.event_id
        if tid != stid and eid is not None:
            eid = ns.event_id(tid, eid)
        if not present or (eid is not None and eid not in present):
            report.rewards_dropped += 1
            continue
        annotation_id = ns.event_id(tid, r.annotation_id) if tid != stid else r.annotation_id
        rehomed = r.model_copy(update={"trajectory_id": tid, "event_id": eid, "tenant_id": owner,
                                       "annotation_id": annotation_id})
        out.append(govern_reward(hook, rehomed).model_dump(mode="json"))
    return out
