"""An import's memory does not grow with the file: importing 4x the spans peaks at about the same
Python heap (measured with tracemalloc in a fresh process per size). Before the import streamed, each
span's event was held until the end (~23 KB a span with governance; the bound here is 1 KB)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SPANS_PER_RUN = 10
PAD = "All good here, nothing to add. " * 60  # ~1.9 KB of message text per chat span

PROBE = r"""
import json, resource, sys, tracemalloc
from pathlib import Path
from molt.interop import read_rows
from molt.interop.ingest import import_rows
from molt.store import Store

path, home, warm = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
store = Store.open(home, auto_compact=False)
# warm up: imports, the store's tables and caches, one import's code paths
import_rows(store, read_rows(warm, "otlp"), source=warm.name, pipeline=None, batch_rows=128)
tracemalloc.start()
rep = import_rows(store, read_rows(path, "otlp"), source=path.name, pipeline=None, batch_rows=128)
peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
print(json.dumps({"imported": rep.imported, "peak": peak,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def _attr(k: str, v: object) -> dict[str, object]:
    return {"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}


def _write(path: Path, spans: int, first_run: int = 0) -> None:
    lines = []
    for run in range(first_run, first_run + spans // SPANS_PER_RUN):
        trace = f"{run + 1:032x}"
        root = f"{(run + 1) << 8:016x}"
        t0 = 1_746_090_000_000_000_000 + run * 10_000_000_000
        spans_ = [{"traceId": trace, "spanId": root, "name": "invoke_agent a", "startTimeUnixNano": str(t0),
                   "endTimeUnixNano": str(t0 + 9_000_000_000),
                   "attributes": [_attr("gen_ai.operation.name", "invoke_agent")]}]
        for k in range(1, SPANS_PER_RUN):
            s0 = t0 + k * 500_000_000
            spans_.append({"traceId": trace, "spanId": f"{((run + 1) << 8) + k:016x}", "parentSpanId": root,
                           "name": "chat m", "startTimeUnixNano": str(s0), "endTimeUnixNano": str(s0 + 400_000_000),
                           "attributes": [_attr("gen_ai.operation.name", "chat"), _attr("gen_ai.request.model", "m"),
                                          _attr("gen_ai.prompt.0.role", "user"),
                                          _attr("gen_ai.prompt.0.content", f"run {run} step {k}. {PAD}"),
                                          _attr("gen_ai.completion.0.content", f"ok {run}.{k}")]})
        lines.append(json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                                    "scopeSpans": [{"scope": {}, "spans": spans_}]}]}))
    path.write_text("\n".join(lines) + "\n")


def _peak(tmp: Path, spans: int) -> dict[str, int]:
    path, warm = tmp / f"{spans}.jsonl", tmp / f"warm{spans}.jsonl"
    _write(path, spans)
    _write(warm, 20, first_run=10**6)
    out = subprocess.run([sys.executable, "-c", PROBE, str(path), str(tmp / f"store{spans}"), str(warm)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got: dict[str, int] = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["imported"] == spans
    return got


def test_import_memory_does_not_grow_with_the_file(tmp_path: Path) -> None:
    n = 1_200  # above the spill's buffer of 1,024 rows (molt.interop.spill), so both sizes hold it full
    one, four = _peak(tmp_path, n), _peak(tmp_path, 4 * n)
    per_extra_span = (four["peak"] - one["peak"]) / (3 * n)
    assert per_extra_span < 1024, (f"peak heap {one['peak'] / 1e6:.1f} MB for {n:,} spans, "
                                   f"{four['peak'] / 1e6:.1f} MB for {4 * n:,}: {per_extra_span:,.0f} bytes a span "
                                   f"(max RSS {one['maxrss_kb'] / 1e3:.0f} vs {four['maxrss_kb'] / 1e3:.0f} MB)")


def test_protobuf_files_are_read_a_resource_or_frame_at_a_time(tmp_path: Path) -> None:
    """Both protobuf layouts a collector or Molt writes: length-prefixed frames, and concatenated
    ExportTraceServiceRequests (read one resource_spans entry at a time); a truncated tail is refused."""
    import struct

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from molt.interop import read_rows

    msgs = []
    for t in range(3):
        req = ExportTraceServiceRequest()
        spans = req.resource_spans.add().scope_spans.add().spans
        for k in range(4):
            s = spans.add(trace_id=bytes([t + 1]) * 16, span_id=bytes([k + 1]) * 8, name="step",
                          start_time_unix_nano=1_746_090_000_000_000_000 + k,
                          end_time_unix_nano=1_746_090_001_000_000_000)
            if k:
                s.parent_span_id = bytes([1]) * 8
        msgs.append(req.SerializeToString())
    framed, concat = tmp_path / "framed.pb", tmp_path / "concat.pb"
    framed.write_bytes(b"".join(struct.pack(">I", len(m)) + m for m in msgs))
    concat.write_bytes(b"".join(msgs))
    for path, where in ((framed, "frame 2"), (concat, "resource_spans 2")):
        rows = list(read_rows(path, "otlp"))
        assert [r.problem for r in rows] == [None] * 12 and rows[-1].where.startswith(where)
        assert {r.trajectory for r in rows} == {f"{t + 1:02x}" * 16 for t in range(3)}
        path.write_bytes(path.read_bytes()[:-7])
        rows = list(read_rows(path, "otlp"))
        assert len(rows) == 9 and rows[-1].problem is not None and "truncated" in rows[-1].problem
