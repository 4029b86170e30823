"""Recording in a separate capture process (how ``molt serve`` runs): the same events as in-process
capture, rewards, and a dead capture process that does not take the gateway down."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from molt.atdp import EventKind, OutcomeStatus
from molt.backends import StubBackend
from molt.errors import BackendStreamError
from molt.gateway import Gateway, GatewayConfig, create_app
from molt.gateway.call_record import CallRecord, CallRecorder
from molt.gateway.capture_process import CaptureProcess
from molt.gateway.capture_wire import call_from_wire, call_to_wire
from molt.gateway.loopback import ServerThread
from molt.governance.access import KeyRing
from molt.store import Store

from .conftest import KEYS, WEATHER_TOOL

W = {"authorization": "Bearer sk-acme-writer"}


def test_wire_roundtrip_builds_the_same_events(served: Any) -> None:
    captured: list[CallRecord] = []
    gw = served.gateway
    real = gw.capture.submit
    gw.capture.submit = lambda rec: (captured.append(rec), real(rec))[1]
    client = served.client()
    msgs = [{"role": "user", "content": "Lyon"}]
    r = client.chat.completions.create(model="stub", messages=msgs, tools=[WEATHER_TOOL], logprobs=True)
    msgs += [r.choices[0].message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": r.choices[0].message.tool_calls[0].id, "content": "rain"}]
    client.chat.completions.create(model="stub", messages=msgs, tools=[WEATHER_TOOL], n=2)
    captured[-1].error, captured[-1].status = BackendStreamError("boom"), OutcomeStatus.ERROR
    cap = CallRecorder(recorder=None)
    for rec in captured:
        direct = [e.model_dump() for e in cap.events(rec)]
        via_wire = [e.model_dump() for e in cap.events(call_from_wire(call_to_wire(rec)))]
        assert via_wire == direct


def test_gateway_with_a_capture_process(tmp_path: Path) -> None:
    proc = CaptureProcess(tmp_path / "store", tmp_path / "spool", fsync="never")
    gw = Gateway([StubBackend()], recorder=proc, keyring=KeyRing.from_mapping(KEYS),
                 config=GatewayConfig(health_interval_s=0))
    try:
        with ServerThread(create_app(gw)) as srv:
            import openai

            client = openai.OpenAI(base_url=srv.url + "/v1", api_key="sk-acme-writer", max_retries=0)
            # the stub fills the tool's "city" argument with the user's text; a name there would be
            # redacted (a "city" field holds a place) and the call's token ids dropped with it
            msgs: list[dict[str, Any]] = [{"role": "user", "content": "75008"}]
            first = client.chat.completions.with_raw_response.create(model="stub", messages=msgs, tools=[WEATHER_TOOL])
            m = first.parse().choices[0].message
            msgs += [m.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": m.tool_calls[0].id,
                                                       "content": "sunny"}]
            client.chat.completions.create(model="stub", messages=msgs, tools=[WEATHER_TOOL])
            tid = first.headers["x-molt-trajectory"]
            r = httpx.post(srv.url + "/v1/molt/rewards/last-call", headers=W,
                           json={"trajectory_id": tid, "value": 1.0, "discount": 0.9})
            assert r.status_code == 200, r.text
            assert proc.flush(timeout=30, deliver=True)
            stats = httpx.get(srv.url + "/health", headers=W).json()["recorder"]
            assert stats["delivered"] >= 5 and stats["dropped"] == 0
            metrics = httpx.get(srv.url + "/metrics", headers={"authorization": "Bearer sk-acme-admin"}).text
            assert "\nmolt_capture_recycled 0" in metrics and "\nmolt_recorder_delivered " in metrics

            store = Store.open(tmp_path / "store", auto_compact=False)
            traj = store.trajectory(tid)
            assert [e.kind for e in traj.events] == [EventKind.MODEL_CALL, EventKind.TOOL_CALL, EventKind.MODEL_CALL]
            assert traj.events[0].action.tokens is not None and traj.events[0].metadata.tenant_id == "acme"
            assert sorted(a.value for a in traj.rewards) == pytest.approx([0.9, 1.0])
            assert store.verify(tid).ok
            store.close()

            # The capture process dies: recording is lost from then on, serving is not.
            os.kill(proc._proc.pid, signal.SIGKILL)
            proc._proc.wait(10)
            r2 = client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "after"}])
            assert r2.choices[0].message.content == "echo: after"
            # the call is recorded by a task that runs after its answer was sent: wait for it
            deadline = time.monotonic() + 10
            while proc.stats.dropped_queue_full < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert not proc.alive and proc.stats.dropped_queue_full >= 1
    finally:
        proc.close(timeout=5)


def _call(tid: str, k: int) -> CallRecord:
    from molt.atdp.ids import new_id
    from molt.backends.base import Choice, Result, TokenCounts

    return CallRecord(
        endpoint="chat.completions", event_ids=[new_id()], trajectory_id=tid, session_id=f"s-{tid}", parent_id=None,
        tenant_id="acme", agent_id="recycle", public_model="stub", decision=None, started=time.time(),
        messages=[{"role": "user", "content": f"call {k}"}], sampling={"temperature": 1.0},
        result=Result(choices=[Choice(index=0, text=f"reply {k}", finish_reason="stop", token_ids=None)],
                      model="stub", usage=TokenCounts(3, 2)),
        latency_ms=1.0, key_name="load")


def test_a_recycled_capture_process_hands_its_spool_over_with_nothing_lost_or_doubled(tmp_path: Path) -> None:
    """Every ``recycle_after`` records the child is replaced by a fresh one (its memory stays bounded
    in a long run). Conversations that span several children keep one unbroken chain each, every call
    is stored exactly once, and the counters carry over instead of starting again at zero."""
    calls, n_traj, recycle = 3_600, 40, 1_000
    proc = CaptureProcess(tmp_path / "store", tmp_path / "spool", fsync="never", recycle_after=recycle)
    pids = {proc._proc.pid}
    tids = [proc.new_trajectory() for _ in range(n_traj)]
    seen: list[int] = []  # the counters, asked for all along: they never go back across a handover
    try:
        for k in range(calls):  # round robin: every conversation has calls in every child
            proc.submit(_call(tids[k % n_traj], k))
            pids.add(proc._proc.pid)
            if k % 100 == 50:  # a request in flight postpones a recycle; it must still come
                seen.append(proc.stats.enqueued)
        deadline = time.monotonic() + 60  # a recycle the stats requests postponed happens once idle
        while (proc._pending or proc._to_child >= recycle) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.flush(timeout=60, deliver=True)
        pids.add(proc._proc.pid)
    finally:
        assert proc.close(timeout=60)
    # each child takes `recycle` records, more when a request in flight or a child still starting postponed
    # its replacement (then a child can come and go between two of the pids sampled here)
    assert 2 <= proc.recycled <= calls // recycle and len(pids) <= proc.recycled + 1
    stats = proc.stats
    with Store.open(tmp_path / "store", auto_compact=False) as store:
        events = store.table("events").to_arrow().select(["event_id", "trajectory_id", "seq"]).to_pylist()
        assert len(events) == calls and len({e["event_id"] for e in events}) == calls
        for tid in tids:
            assert sorted(e["seq"] for e in events if e["trajectory_id"] == tid) == list(range(calls // n_traj))
            assert store.verify(tid).ok
    assert stats.enqueued == calls and stats.delivered == calls, stats
    assert seen == sorted(seen) and len(seen) == calls // 100, seen
    assert stats.dropped_queue_full == 0 and stats.duplicates == 0 and proc.failed == 0


def test_a_replacement_child_waits_for_a_store_that_is_down(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The child is replaced while the store cannot be opened (an object store's outage): the new one
    keeps trying instead of dying, the records meanwhile wait, and everything lands once it is back."""
    store_dir, away = tmp_path / "store", tmp_path / "store.away"
    proc = CaptureProcess(store_dir, tmp_path / "spool", fsync="never", recycle_after=1000)
    tid = proc.new_trajectory()
    try:
        for k in range(999):
            proc.submit(_call(tid, k))
        assert proc.flush(timeout=60, deliver=True)
        store_dir.rename(away)
        store_dir.write_text("not a store")  # the store is gone: opening it fails
        proc.submit(_call(tid, 999))  # the 1,000th record: the child is replaced now
        seen, deadline = "", time.monotonic() + 60
        while "cannot open the store yet" not in seen and time.monotonic() < deadline:
            time.sleep(0.2)
            seen += capfd.readouterr().err
        assert "cannot open the store yet" in seen and proc.recycled == 1 and proc.alive
        for k in range(1000, 1500):  # recorded while the store is down
            proc.submit(_call(tid, k))
        store_dir.unlink()
        away.rename(store_dir)
        assert proc.flush(timeout=120, deliver=True)
    finally:
        proc.close(timeout=60)
    with Store.open(store_dir, auto_compact=False) as store:
        assert [e.seq for e in store.trajectory(tid).events] == list(range(1500))
        assert store.verify(tid).ok
    assert proc.failed == 0 and proc.stats.dropped_queue_full == 0


def _hold_spool(spool: Path, seconds: float) -> Any:
    """A process holding ``spool``'s lock for ``seconds`` (as the capture child of a gateway that was
    just killed does while it makes its records durable and delivers them), once it has it."""
    import subprocess
    import sys

    spool.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from molt.capture.spool import "
         "_lock_directory; h = _lock_directory(Path(sys.argv[1])); print('held', flush=True); "
         "time.sleep(float(sys.argv[2]))", str(spool), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_restarted_gateway_waits_for_the_spool_its_crashed_predecessor_still_holds(tmp_path: Path) -> None:
    """A supervisor restarts ``molt serve`` at once after a crash, while the old capture child still
    holds the spool (it drains for up to its close timeout once its gateway is gone). The new child
    waits for the lock instead of dying: otherwise that gateway serves its whole life unrecorded."""
    holder = _hold_spool(tmp_path / "spool", 3.0)
    held_since = time.monotonic()
    try:
        proc = CaptureProcess(tmp_path / "store", tmp_path / "spool", fsync="never")
        assert time.monotonic() - held_since >= 2.9  # it came up once the lock was free, not before
        tid = proc.new_trajectory()
        try:
            for k in range(50):
                proc.submit(_call(tid, k))
            assert proc.alive and proc.flush(timeout=60, deliver=True)
        finally:
            proc.close(timeout=30)
    finally:
        holder.kill()
        holder.wait()
    with Store.open(tmp_path / "store", auto_compact=False) as store:
        assert [e.seq for e in store.trajectory(tid).events] == list(range(50))
    assert proc.failed == 0 and proc.stats.delivered == 50


def test_a_spool_held_for_good_is_a_clear_error_and_the_gateway_goes_on(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Two gateways on one spool: the second's child gives up after ``spool_wait_s`` naming the holder;
    its calls are counted as failed to record, never raised."""
    holder = _hold_spool(tmp_path / "spool", 60.0)
    try:
        proc = CaptureProcess(tmp_path / "store", tmp_path / "spool", fsync="never", spool_wait_s=0.5)
        try:
            assert not proc.alive
            proc.submit(_call(proc.new_trajectory(), 0))
            assert proc.failed == 1
        finally:
            proc.close(timeout=5)
    finally:
        holder.kill()
        holder.wait()
    err = capfd.readouterr().err  # the child's, naming the holder; then the gateway's
    assert f"in use by pid {holder.pid}" in err and "Waiting up to 0 s" in err, err
    assert "exited at start" in caplog.text and "did not answer" not in caplog.text


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"recycle_after": 999}, "recycle_after must be 0"), ({"spool_wait_s": -1.0}, "spool_wait_s must be"),
    ({"spool_wait_s": float("nan")}, "spool_wait_s must be"), ({"dedupe_ids": 10}, "dedupe_ids must be"),
    ({"chain_heads": 10}, "chain_heads must be"), ({"trim_interval_s": -1.0}, "trim_interval_s must be"),
])
def test_bad_settings_are_refused_before_a_child_starts(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CaptureProcess(tmp_path / "store", tmp_path / "spool", **kwargs)
    assert not (tmp_path / "spool").exists()


# A thread allocates 500 blocks of 64 KiB (under the mmap threshold bound_native_heap sets, so they come
# from glibc's second arena, as LanceDB's and the Recorder's do), keeps a small block after each and
# frees the large ones: 31 MiB of free chunks that glibc cannot give back from the top of the heap.
_FRAGMENTED_ARENA = """
import ctypes, threading
from molt.gateway.native_heap import bound_native_heap, trim_native_heap
bound_native_heap()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
def anon():
    return next(int(l.split()[1]) << 10 for l in open("/proc/self/status") if l.startswith("RssAnon"))
kept = []
def work():
    big = []
    for _ in range(500):
        p = libc.malloc(64 << 10)
        libc.memset(p, 1, 64 << 10)
        big.append(p)
        kept.append(libc.malloc(64))
    for p in big:
        libc.free(p)
trim_native_heap()  # what the imports left free in the arenas: the work must fault its pages in afresh
t = threading.Thread(target=work)
t.start()
t.join()
before = anon()
trimmed = trim_native_heap()
print(trimmed, before - anon())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or not os.confstr("CS_GNU_LIBC_VERSION"),
                    reason="glibc's malloc_trim")
def test_the_free_memory_held_in_a_fragmented_native_heap_goes_back_to_the_system() -> None:
    """What the capture child's RSS gained under load was free chunks in glibc's shared arena (LanceDB's
    and the Recorder's threads free in the middle of it, and glibc returns only its top):
    trim_native_heap, which the child runs every TRIM_INTERVAL_S, gives their pages back."""
    out = subprocess.run([sys.executable, "-c", _FRAGMENTED_ARENA], capture_output=True, text=True, timeout=60,
                         check=True).stdout.split()
    assert out[0] == "True" and int(out[1]) >= 16 << 20, out


def _sealed_rows(n: int, tid: str, start: int) -> list[Any]:
    from molt.atdp.ids import new_id
    from molt.capture.sinks import SealedRow

    now = int(time.time() * 1e6)
    return [SealedRow({"event_id": new_id(), "trajectory_id": tid, "session_id": f"s-{tid}", "seq": start + i,
                       "kind": "llm_call", "name": "chat", "tenant_id": "acme", "ts_us": now},
                      b"e" * 400, b"p" * 600, b"s" * 16, "d" * 64, "0" * 64, "h" * 64) for i in range(n)]


def test_the_capture_childs_store_caches_are_full_within_its_first_minutes(tmp_path: Path) -> None:
    """The capture child appends to the events table three or four times a second for as long as the
    gateway runs, and LanceDB's index cache gains a couple of KB of superseded versions' state per
    append until its bound. A child that takes most of an hour to reach its bound looks like a leak
    for that long (a 20-minute soak's second half); under the child's bounds the caches are full
    within its first 600 appends and stay there."""
    from molt.capture.sinks import SinkBatch
    from molt.gateway.capture_child import WRITER_INDEX_CACHE_BYTES
    from molt.store import FOLLOWER_METADATA_CACHE_BYTES

    store = Store.open(tmp_path / "store", auto_compact=False, index_cache_bytes=WRITER_INDEX_CACHE_BYTES,
                       metadata_cache_bytes=FOLLOWER_METADATA_CACHE_BYTES)
    held = {}
    tid = "t-" + "0" * 30
    for i in range(1, 801):  # what the child appends in about three and a half minutes
        if i % 100 == 0:
            tid = f"t-{i:030d}"
        store.write_batch(SinkBatch(events=_sealed_rows(8, tid, 8 * (i % 100))))
        if i % 64 == 0:  # the child's Store compacts every 64 appends
            store.compact()
        if i % 200 == 0:
            held[i] = store.cache_bytes()
    store.close()
    bounds = WRITER_INDEX_CACHE_BYTES + FOLLOWER_METADATA_CACHE_BYTES
    assert held[800] <= bounds * 1.1, held
    # level from the 600th append on (a 4 MiB index bound still gains ~0.5 MiB per 200 appends there)
    assert held[800] - held[600] <= 64 << 10, held


def test_the_capture_child_samples_its_memory_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With MOLT_CAPTURE_MEMSTATS set, the child appends its allocators' counters (what a soak needs to
    tell Python's objects, glibc's heap, Arrow's pool and LanceDB's caches apart) to that file, with the
    records it has handled so far."""
    import orjson

    from molt.gateway.native_heap import MEMSTATS_ENV

    out = tmp_path / "memstats.jsonl"
    monkeypatch.setenv(MEMSTATS_ENV, str(out))
    monkeypatch.setenv(MEMSTATS_ENV + "_S", "0.1")
    proc = CaptureProcess(tmp_path / "store", tmp_path / "spool", fsync="never", recycle_after=0, governance=None)
    try:
        tid = proc.new_trajectory()
        for k in range(30):
            proc.submit(_call(tid, k))
        assert proc.flush(timeout=30, deliver=True)
        deadline = time.monotonic() + 10
        samples: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not any(s["records"] == 30 for s in samples):
            time.sleep(0.1)
            samples = [orjson.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    finally:
        proc.close(timeout=10)
    last = next(s for s in samples if s["records"] == 30)
    assert last["pid"] != os.getpid() and last["rssanon"] > 0 and last["threads"] >= 1
    assert last["py_blocks"] > 0
    assert last["store_caches"] > 0
    # Arrow allocates from the system allocator in the child (arrow_pool_on_native_heap), unless the
    # environment chose a pool
    assert last["arrow_pool"] == os.environ.get("ARROW_DEFAULT_MEMORY_POOL", "system")
    if sys.platform.startswith("linux"):
        assert last["glibc_used"] > 0
