"""The LanceDB store: queries, export, compaction, and bad input that alters nothing."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pyarrow.parquet as pq
import pytest

from molt.atdp import Event, EventKind, Outcome, RewardAnnotation, ToolCall
from molt.capture import Recorder
from molt.errors import NotFound, PayloadTooLarge, StoreError
from molt.store import Filter, Store
from molt.store.scoped import TenantView


def _fill(store, molt_home, event_factory, tenants=("acme", "globex"), per=5, n=6):  # type: ignore[no-untyped-def]
    rec = Recorder(store, spool_dir=molt_home / "spool")
    tids: dict[str, list[str]] = {t: [] for t in tenants}
    for tenant in tenants:
        for _ in range(per):
            tid = rec.new_trajectory()
            tids[tenant].append(tid)
            for i in range(n):
                rec.record(event_factory(tid, i, tenant=tenant))
    assert rec.flush(deliver=True)
    return rec, tids


def test_query_by_tenant_agent_time_and_outcome(store, molt_home, event_factory) -> None:  # type: ignore[no-untyped-def]
    rec, tids = _fill(store, molt_home, event_factory)
    acme = store.trajectories(tenant="acme")
    assert {s.trajectory_id for s in acme} == set(tids["acme"])
    assert all(s.tenant_id == "acme" and s.events == 6 for s in acme)
    assert store.trajectories(tenant="nobody") == []
    assert len(store.trajectories(agent="support-bot", limit=None)) == 10
    assert len(store.trajectories(limit=3)) == 3
    assert store.trajectories(since=datetime.now(UTC) + timedelta(hours=1)) == []
    assert len(store.trajectories(until=datetime.now(UTC) + timedelta(hours=1), limit=None)) == 10

    win, lose = tids["acme"][0], tids["acme"][1]
    rec.reward(RewardAnnotation(trajectory_id=win, value=1, source="test_result"))
    rec.reward(RewardAnnotation(trajectory_id=lose, value=-1, source="test_result"))
    failing = rec.new_trajectory()
    rec.record(Event(trajectory_id=failing, kind=EventKind.TOOL_CALL, metadata={"tenant_id": "acme"},
                     action=ToolCall(tool_name="refund"),
                     outcome=Outcome(status="error", error={"type": "Timeout", "message": "slow"})))
    assert rec.flush(deliver=True)
    assert [s.trajectory_id for s in store.trajectories(outcome="success")] == [win]
    assert [s.trajectory_id for s in store.trajectories(outcome="failure")] == [lose]
    assert [s.trajectory_id for s in store.trajectories(outcome="error")] == [failing]
    with pytest.raises(ValueError, match="outcome"):
        store.trajectories(outcome="meh")

    # A tenant's view lists exactly what the store lists for that tenant: one filter and order.
    view = TenantView.for_tenant(store, "acme")
    hour = timedelta(hours=1)
    for kw in ({}, {"outcome": "success"}, {"outcome": "failure"}, {"outcome": "error"}, {"limit": 2},
               {"limit": None}, {"agent": "support-bot"}, {"since": datetime.now(UTC) - hour},
               {"since": datetime.now(UTC) + hour}, {"until": datetime.now(UTC) + hour, "limit": None}):
        assert view.trajectories(**kw) == store.trajectories(tenant="acme", **kw), kw  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="outcome"):
        view.trajectories(outcome="meh")
    rec.close()


def test_export_to_parquet(store, molt_home, event_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rec, _tids = _fill(store, molt_home, event_factory)
    n = store.export_parquet(tmp_path / "all.parquet")
    assert n == 60 and pq.read_table(tmp_path / "all.parquet").num_rows == 60
    n = store.export_parquet(tmp_path / "acme.parquet", where=Filter(tenant_id="acme"))
    table = pq.read_table(tmp_path / "acme.parquet")
    assert n == 30 and set(table.column("tenant_id").to_pylist()) == {"acme"}
    assert {"envelope", "payload", "chain"} <= set(table.column_names)
    rec.close()


def test_compaction_keeps_fragments_bounded_under_continuous_ingest(store, molt_home, event_factory) -> None:  # type: ignore[no-untyped-def]
    store.compact_every = 10
    rec = Recorder(store, spool_dir=molt_home / "spool")
    tid = rec.new_trajectory()
    peak = 0
    for i in range(60):  # 60 separate appends
        rec.record(event_factory(tid, i))
        assert rec.flush(deliver=True)
        if store._appends_since_compact >= store.compact_every:
            store.compact(keep_versions_s=0)
        peak = max(peak, store.fragment_count())
    assert peak <= 11
    assert len(store.table("events").list_versions()) < 30
    assert store.verify(tid).ok and store.count() == 60
    rec.close()


def test_compaction_leaves_full_fragments_alone(molt_home, event_factory) -> None:  # type: ignore[no-untyped-def]
    """Compaction merges small fragments up to ``fragment_rows`` and then leaves them: a run after a few
    more appends rewrites only the new rows and the one partly filled fragment, however large the table
    (LanceDB's optimize() merges towards 1M rows, so each run rewrote the whole table)."""
    s = Store.open(molt_home / "frag", auto_compact=False, fragment_rows=1024)
    rec = Recorder(s, spool_dir=molt_home / "spool-frag")
    tid = rec.new_trajectory()
    seq = 0
    for _ in range(12):  # 12 appends of 400 events
        for _ in range(400):
            rec.record(event_factory(tid, seq))
            seq += 1
        assert rec.flush(deliver=True)
    before = s.fragment_count()
    first = s.compact(keep_versions_s=0)["events"]
    frags = s.table("events").to_lance().get_fragments()
    rows = [f.count_rows() for f in frags]
    full = {f.fragment_id for f in frags if f.count_rows() >= 1024}
    assert first["fragments_compacted"] == before >= 12 and sum(rows) == 4800
    assert sum(r >= 1024 for r in rows) >= 3, rows
    for _ in range(2):  # two more small appends
        for _ in range(50):
            rec.record(event_factory(tid, seq))
            seq += 1
        assert rec.flush(deliver=True)
    added = s.fragment_count() - len(rows)
    second = s.compact(keep_versions_s=0)["events"]
    assert second["fragments_compacted"] <= added + 1, second  # the new ones and at most one partly filled
    assert full <= {f.fragment_id for f in s.table("events").to_lance().get_fragments()}  # not rewritten
    assert s.count() == 4900 and s.verify(tid).ok
    rec.close()
    s.close()


def test_scheduled_compaction_runs_in_the_background(molt_home, event_factory) -> None:  # type: ignore[no-untyped-def]
    s = Store.open(molt_home / "bg", compact_every=5)
    rec = Recorder(s, spool_dir=molt_home / "spool-bg")
    tid = rec.new_trajectory()
    for i in range(20):
        rec.record(event_factory(tid, i))
        assert rec.flush(deliver=True)
    s._compact_wake.set()
    for _ in range(100):
        if s.fragment_count() <= 5:
            break
        import time

        time.sleep(0.1)
    assert s.fragment_count() <= 5
    rec.close()
    s.close()


def test_unknown_ids_and_injection_attempts(store, molt_home, event_factory) -> None:  # type: ignore[no-untyped-def]
    rec, _tids = _fill(store, molt_home, event_factory)
    with pytest.raises(NotFound, match="No trajectory"):
        store.trajectory("does-not-exist")
    # an id crafted to widen the filter matches nothing
    with pytest.raises(NotFound):
        store.trajectory("x' OR '1'='1")
    assert store.trajectories(tenant="acme' OR tenant_id = 'globex") == []
    with pytest.raises(ValueError):
        Filter(trajectory_id="a\x00b")
    rec.close()


def test_bad_late_rewards_are_rejected_and_nothing_changes(store, molt_home, event_factory) -> None:  # type: ignore[no-untyped-def]
    rec, tids = _fill(store, molt_home, event_factory)
    tid = tids["acme"][0]
    before = store.sealed_events(tid)
    with pytest.raises(NotFound):
        store.append_rewards([RewardAnnotation(trajectory_id="nope", value=1, source="judge")])
    with pytest.raises(NotFound, match="No event"):
        store.append_rewards([RewardAnnotation(trajectory_id=tid, event_id="nope", value=1, source="judge")])
    with pytest.raises(PayloadTooLarge):
        store.append_rewards([RewardAnnotation(trajectory_id=tid, value=1, source="judge",
                                               dimensions={f"d{i}": 0.0 for i in range(100_000)})])
    assert store.count("rewards") == 0
    assert store.sealed_events(tid) == before and store.verify(tid).ok
    rec.close()


def test_unknown_table_and_unopenable_store(store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(StoreError, match="tables"):
        store.table("nope")
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises((StoreError, OSError)):
        Store.open(blocker / "store")


def test_a_long_lived_handle_sees_what_another_process_wrote(tmp_path, event_factory) -> None:  # type: ignore[no-untyped-def]
    """``molt serve``: the control plane and console read through a handle opened at start, the capture
    process writes through its own. LanceDB's default handle never looks for newer versions."""
    reader = Store.open(tmp_path / "store", auto_compact=False)
    assert reader.count("events") == 0 and reader.trajectory_ids() == []
    writer = Store.open(tmp_path / "store", auto_compact=False)
    rec = Recorder(writer, spool_dir=tmp_path / "spool")
    tid = rec.new_trajectory()
    rec.record(event_factory(tid, 0))
    assert rec.flush(timeout=30, deliver=True)
    rec.close()
    deadline = time.monotonic() + 10  # visible within the store's read_consistency_s (1 s)
    while reader.count("events") == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert reader.count("events") == 1
    assert reader.trajectory_ids() == [tid] and reader.verify(tid).ok
    strict = Store.open(tmp_path / "store", auto_compact=False, read_consistency_s=0)
    before = strict.count("events")
    rec = Recorder(writer, spool_dir=tmp_path / "spool")
    rec.record(event_factory(tid, 1))
    assert rec.flush(timeout=30, deliver=True)
    rec.close()
    assert strict.count("events") == before + 1  # 0: every read sees the latest version at once
    with pytest.raises(ValueError, match="read_consistency_s"):
        Store.open(tmp_path / "store", read_consistency_s=-1)


def test_a_follower_settles_at_its_metadata_cache_bound(tmp_path, event_factory) -> None:  # type: ignore[no-untyped-def]
    """A long-lived reader of a table another handle keeps appending to (``molt serve``'s read side)
    opens a new version on almost every read, and LanceDB keeps each one's metadata until the cache's
    bound: with the default bound that memory climbs for hours, with a follower's it levels off."""
    writer = Store.open(tmp_path / "store", auto_compact=False)
    bound = 512 << 10
    follower = Store.open(tmp_path / "store", auto_compact=False, metadata_cache_bytes=bound, read_consistency_s=0)
    default = Store.open(tmp_path / "store", auto_compact=False, read_consistency_s=0)
    rec = Recorder(writer, spool_dir=tmp_path / "spool")
    tid = rec.new_trajectory()
    held = []
    for i in range(60):  # 60 versions, each read by both
        rec.record(event_factory(tid, i))
        assert rec.flush(timeout=30, deliver=True)
        for s in (follower, default):
            assert s.count("events") == i + 1 and len(s.trajectory(tid).events) == i + 1
        held.append(follower.cache_bytes())
    rec.close()
    assert max(held) <= bound * 1.1, held  # LanceDB's bound is approximate (entries are weighed as added)
    assert held[-1] - held[29] <= bound * 0.1  # level over the second half
    assert default.cache_bytes() > 2 * held[-1]  # the same reads under the default bound kept everything


def test_a_follower_settles_at_its_index_cache_bound(tmp_path, event_factory) -> None:  # type: ignore[no-untyped-def]
    """Each compaction by the writer gives the indices a new version; a follower's cached pages of the
    old one are never read again. Under LanceDB's 256 MiB default they pile up; under a follower's
    bound they are evicted. (Both followers have the same metadata bound, so the difference is the
    index cache.)"""
    writer = Store.open(tmp_path / "store", auto_compact=False)
    meta, index = 256 << 10, 256 << 10
    follower = Store.open(tmp_path / "store", auto_compact=False, read_consistency_s=0,
                          metadata_cache_bytes=meta, index_cache_bytes=index)
    default = Store.open(tmp_path / "store", auto_compact=False, read_consistency_s=0, metadata_cache_bytes=meta)
    rec = Recorder(writer, spool_dir=tmp_path / "spool")
    tids = [rec.new_trajectory() for _ in range(3)]
    held = []
    for i in range(30):  # 30 compactions, each followed by reads by id (the BTREE index) in both
        for tid in tids:
            for j in range(20):
                rec.record(event_factory(tid, 20 * i + j))
        assert rec.flush(timeout=30, deliver=True)
        writer.compact()
        for s in (follower, default):
            assert [len(s.trajectory(t).events) for t in tids] == [20 * (i + 1)] * 3
        held.append(follower.cache_bytes())
    rec.close()
    assert ("trajectory_id",) in {tuple(ix.columns) for ix in writer.table("events").list_indices()}
    assert max(held) <= (meta + index) * 1.1, held
    assert default.cache_bytes() > 2 * held[-1]  # the same reads under the default index bound kept everything
