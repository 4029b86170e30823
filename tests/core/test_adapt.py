"""molt.capture.adapt: payload bounding, the dispatcher, Capture and SpanTable."""

from __future__ import annotations

import base64
import os
import threading
import time
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from molt.atdp import EventKind, Outcome, OutcomeStatus, ToolCall
from molt.capture import MemorySink, Recorder
from molt.capture.adapt import (
    MARKER_KEY,
    Capture,
    DirectoryBlobStore,
    Dispatcher,
    SpanTable,
    bound_payload,
    error_outcome,
    require_framework,
)
from molt.errors import AdapterError


def test_small_payloads_pass_unchanged() -> None:
    value = {"a": [1, 2.5, "x", None, True], "b": {"c": "hello"}}
    assert bound_payload(value) == value


def test_long_strings_and_lists_are_cut_with_markers() -> None:
    out = bound_payload({"s": "y" * 100, "l": list(range(10))}, max_str=10, max_items=3)
    assert out["s"].startswith("y" * 10) and "[molt: truncated 90 of 100 chars]" in out["s"]
    assert out["l"][:3] == [0, 1, 2] and out["l"][3] == {MARKER_KEY: "truncated", "omitted_items": 7}


def test_total_size_is_bounded_and_valid_json() -> None:
    value = {"docs": [{"text": "lorem ipsum " * 5000, "n": i} for i in range(200)]}
    out = bound_payload(value, max_bytes=100_000)
    raw = orjson.dumps(out)
    assert len(raw) <= 100_000
    assert orjson.loads(raw) == out
    assert b"truncated" in raw


def test_base64_and_bytes_are_dropped_with_a_note(tmp_path: Path) -> None:
    blob = os.urandom(3000)
    b64 = base64.b64encode(blob).decode()
    out = bound_payload({"img": f"data:image/png;base64,{b64}", "raw": blob, "b64": b64, "word": "a" * 600})
    assert out["img"][MARKER_KEY] == "dropped" and out["img"]["media_type"] == "image/png"
    assert out["img"]["bytes"] == 3000
    assert out["raw"][MARKER_KEY] == "dropped" and out["raw"]["encoding"] == "bytes"
    assert out["b64"][MARKER_KEY] == "dropped"
    assert out["word"] == "a" * 600  # long but not base64-looking text is kept
    stored = bound_payload({"img": b64}, blob_store=DirectoryBlobStore(tmp_path / "blobs"))["img"]
    assert stored[MARKER_KEY] == "offloaded"
    assert Path(stored["ref"].removeprefix("file://")).read_bytes() == blob


def test_objects_cycles_and_depth() -> None:
    from pydantic import BaseModel

    class M(BaseModel):
        x: int
        y: bytes = b"hi"

    cyc: list[object] = []
    cyc.append(cyc)
    deep: object = "leaf"
    for _ in range(50):
        deep = [deep]
    out = bound_payload({"m": M(x=1), "cycle": cyc, "deep": deep, "f": float("nan"), "set": {3}, "obj": object()})
    assert out["m"] == {"x": 1, "y": "hi"}
    assert out["cycle"] == [{MARKER_KEY: "truncated", "reason": "cycle"}]
    assert "depth" in orjson.dumps(out["deep"]).decode()
    assert out["f"] == "nan" and out["set"] == [3] and out["obj"].startswith("<object")
    assert (
        orjson.dumps(bound_payload({"s": "a\ud800b", "big": 1 << 70})) == b'{"s":"a?b","big":"1180591620717411303424"}'
    )


@settings(max_examples=60, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(st.characters(codec=None)) | st.binary(),
        lambda c: st.lists(c, max_size=6) | st.dictionaries(st.text(max_size=5), c, max_size=6),
        max_leaves=40,
    )
)
def test_bound_payload_is_always_json(value: object) -> None:
    out = bound_payload(value, max_bytes=2000, max_str=50, max_items=4)
    raw = orjson.dumps(out)
    assert len(raw) <= 2000


def test_error_outcome_statuses() -> None:
    assert error_outcome(ValueError("bad")).status == OutcomeStatus.ERROR
    assert error_outcome(GeneratorExit()).status == OutcomeStatus.CANCELLED
    assert error_outcome(TimeoutError()).status == OutcomeStatus.TIMEOUT
    o = error_outcome({"message": "nope", "data": 1})
    assert o.error is not None and o.error.message == "nope"


def test_dispatcher_runs_in_order_and_survives_errors() -> None:
    d = Dispatcher(name="test-dispatcher")
    seen: list[int] = []
    fails: list[BaseException] = []

    class Owner:
        def fail(self, exc: BaseException) -> None:
            fails.append(exc)

    def boom() -> None:
        raise RuntimeError("x")

    for i in range(1000):
        d.submit(Owner(), seen.append, (i,))
        if i == 500:
            d.submit(Owner(), boom, ())
    assert d.drain(5)
    assert seen == list(range(1000)) and len(fails) == 1


def _capture(tmp_path: Path, **kw: object) -> tuple[Capture, MemorySink, Recorder]:
    sink = MemorySink()
    rec = Recorder(sink, spool_dir=tmp_path / "spool", fsync="never")
    return Capture(rec, integration="molt-core", framework="test", framework_version="1", **kw), sink, rec  # type: ignore[arg-type]


def test_capture_builds_events_with_provenance_and_metadata(tmp_path: Path) -> None:
    cap, sink, rec = _capture(tmp_path, tenant_id="acme", tags={"team": "a"})
    spans = SpanTable(cap)
    t0 = time.time_ns()

    def start() -> None:
        spans.open("r1", None, t0, name="root")
        spans.open("r2", "r1", t0 + 1000, name="child")

    def end() -> None:
        child = spans.close("r2")
        assert child is not None
        cap.record(
            cap.event(
                EventKind.TOOL_CALL,
                trajectory_id=child.trajectory_id,
                event_id=child.event_id,
                parent_id=child.parent_event_id,
                start_ns=child.start_ns,
                end_ns=t0 + 3_000_000,
                action=ToolCall(tool_name="t", arguments=cap.payload({"q": 1})),
            )
        )

    cap.submit(start)
    cap.submit(end)
    assert cap.flush(5, deliver=True)
    [tid] = {(r.x if hasattr(r, "x") else r["x"])["trajectory_id"] for r in sink.events.values()}
    [ev] = sink.trajectory_events(tid)
    assert ev.provenance.integration == "molt-core" and ev.provenance.framework == "test"
    assert ev.provenance.integration_version is not None
    assert ev.metadata.tenant_id == "acme" and ev.metadata.tags == {"team": "a"}
    assert ev.metadata.latency_ms == pytest.approx(2.999, abs=1e-3)
    assert ev.parent_id == spans.resolve("r1")[0]  # type: ignore[index]
    assert cap.stats.events == 1 and cap.stats.open_spans == 1
    rec.close()


def test_capture_event_validates_parts_given_as_dicts_or_models_alike(tmp_path: Path) -> None:
    """Capture.event validates the whole event in one pass: a part given as a plain dict makes the same
    event as the model, a bad part is refused as the model would refuse it, and a field Capture.event
    sets itself cannot be passed in ``fields``."""
    cap, _, rec = _capture(tmp_path, tenant_id="acme", tags={"team": "a"})
    common = dict(trajectory_id="t1", event_id="e1", start_ns=1_700_000_000_000_000_000,
                  end_ns=1_700_000_000_002_000_000, tags={"extra": "1"}, usage={"input_tokens": 3})
    as_model = cap.event(EventKind.TOOL_CALL, action=ToolCall(tool_name="t", arguments={"q": 1}),
                         outcome=Outcome(status=OutcomeStatus.OK, output="x"), **common)  # type: ignore[arg-type]
    as_dict = cap.event(EventKind.TOOL_CALL, action={"type": "tool_call", "tool_name": "t", "arguments": {"q": 1}},
                        outcome={"status": "ok", "output": "x"}, **common)  # type: ignore[arg-type]
    assert as_dict == as_model
    assert as_dict.metadata.tags == {"team": "a", "extra": "1"} and as_dict.metadata.usage.input_tokens == 3
    assert as_dict.metadata.latency_ms == pytest.approx(2.0)
    # one event's tags do not change the defaults the next event starts from
    assert cap.event(EventKind.TOOL_CALL, trajectory_id="t1").metadata.tags == {"team": "a"}
    with pytest.raises(ValidationError):  # the kind and the action disagree
        cap.event(EventKind.MODEL_CALL, trajectory_id="t1", action={"type": "tool_call", "tool_name": "t"})
    with pytest.raises(ValidationError):  # a negative token count, inside metadata built as a dict
        cap.event(EventKind.TOOL_CALL, trajectory_id="t1", usage={"input_tokens": -1})
    with pytest.raises(TypeError, match="metadata"):
        cap.event(EventKind.TOOL_CALL, trajectory_id="t1", metadata={"task": "x"})
    rec.close()


def test_capture_strict_raises_mapper_errors_at_flush(tmp_path: Path) -> None:
    cap, _, rec = _capture(tmp_path, strict=True)

    def bad() -> None:
        raise KeyError("mapper bug")

    cap.submit(bad)
    with pytest.raises(AdapterError, match="mapper bug"):
        cap.flush(5)
    assert cap.stats.errors == 1
    rec.close()


def test_capture_never_raises_when_not_strict(tmp_path: Path) -> None:
    cap, _, rec = _capture(tmp_path)
    cap.submit(lambda: 1 / 0)
    assert cap.flush(5)
    assert cap.stats.errors == 1 and "ZeroDivisionError" in (cap.stats.last_error or "")
    rec.close()


def test_span_table_trajectories_hidden_spans_and_late_children(tmp_path: Path) -> None:
    cap, _, rec = _capture(tmp_path)
    spans = SpanTable(cap)
    a = spans.open("a", None, 1)
    h = spans.open("h", "a", 2, hidden=True)
    c = spans.open("c", "h", 3)
    assert c.parent_event_id == a.event_id and c.trajectory_id == a.trajectory_id == h.trajectory_id
    b = spans.open("b", None, 4)
    assert b.trajectory_id != a.trajectory_id
    assert [s.key for s in spans.open_under("a")] == ["c", "h"]
    spans.close("c")
    spans.close("h")
    spans.close("a")
    late = spans.open("late", "a", 5)
    assert late.parent_event_id == a.event_id and late.trajectory_id == a.trajectory_id
    assert spans.close("nope") is None
    rec.close()


def test_require_framework_hint() -> None:
    assert require_framework("molt-x", "pytest", "1.0", "pip install pytest")
    with pytest.raises(AdapterError) as info:
        require_framework("molt-x", "surely-not-installed-dist", "1.0", "pip install molt-x[fw]")
    assert (
        "molt-x needs surely-not-installed-dist>=1.0; install it with: pip install molt-x[fw]"
        in (info.value.__notes__[0])
    )
    with pytest.raises(AdapterError, match="found"):
        require_framework("molt-x", "pytest", "999.0", "pip install -U pytest")


def test_submit_hands_off_without_running_or_waiting(tmp_path: Path) -> None:
    """submit() only queues: with the dispatcher parked, 20,000 hand-offs complete and none of the
    work has run yet (its per-call cost is measured in bench/bench_adapters.py, not asserted here)."""
    cap, _, rec = _capture(tmp_path)
    hold = threading.Event()
    cap.submit(hold.wait, 30)  # park the dispatcher: a blocking submit() would now hang
    ran: list[int] = []
    done = threading.Event()

    def caller() -> None:
        for i in range(20_000):
            cap.submit(ran.append, i)
        done.set()

    threading.Thread(target=caller, daemon=True).start()
    assert done.wait(30), "submit() blocked behind the parked dispatcher"
    assert ran == []  # nothing ran on the caller's thread
    hold.set()
    assert cap.flush(30)
    assert ran == list(range(20_000))
    rec.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_dispatcher_restarts_in_a_forked_child() -> None:
    d = Dispatcher(name="fork-test")
    seen: list[int] = []
    d.submit(None, seen.append, (1,))
    assert d.drain(5)
    pid = os.fork()
    if pid == 0:  # child: the parent's dispatcher thread is gone; a new one must start
        ok = d.drain(5)
        d.submit(None, seen.append, (2,))
        ok = ok and d.drain(5)
        os._exit(0 if ok and seen == [1, 2] else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.slow
def test_events_queued_at_exit_reach_the_spool(tmp_path: Path) -> None:
    """A process that exits right after its last callback still gets its events into the spool:
    the dispatchers drain before the Recorders close."""
    import subprocess
    import sys

    code = f"""
import time
from molt.atdp import Event, EventKind, UserMessage
from molt.capture import Recorder
from molt.capture.adapt import Capture
rec = Recorder(None, spool_dir={str(tmp_path / "spool")!r})
cap = Capture(rec, integration="molt-core", framework="test")
tid = rec.new_trajectory()
def slow():
    time.sleep(0.3)
    cap.record(cap.event(EventKind.USER_MESSAGE, trajectory_id=tid, action=UserMessage(content="bye")))
cap.submit(slow)
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    sink = MemorySink()
    with Recorder(sink, spool_dir=tmp_path / "spool") as r:
        assert r.flush(10, deliver=True)
    assert len(sink.events) == 1
