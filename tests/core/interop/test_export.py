"""Exports: OTLP through the OpenTelemetry SDK (in-memory exporter, and the real OTLP/HTTP exporter with its
BatchSpanProcessor against the gateway's own /v1/traces on loopback), Parquet with late rewards, a
datasets-loadable file; and the round trips import → export → import."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from molt.interop import import_file
from molt.interop.hf import export_dataset
from molt.interop.otlp import EVALUATION_EVENT, export_otlp, write_otlp_file
from molt.interop.parquet import export_parquet, import_parquet_export, rewards_path
from molt.store import Store

FIXTURES = Path(__file__).parent / "fixtures"
LANGFUSE = "7f3a2c1e-5b4d-4e8f-9a01-2b3c4d5e6f70"


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Any]:
    opened: list[Store] = []

    def make(name: str) -> Store:
        s = Store.open(tmp_path / name, auto_compact=False)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


@pytest.fixture
def filled(stores: Any, pipeline: Any) -> Store:
    s = stores("a")
    import_file(s, FIXTURES / "langfuse_traces.json", "langfuse", pipeline=pipeline)
    import_file(s, FIXTURES / "langsmith_runs.json", "langsmith", pipeline=pipeline)
    return s


def _events(store: Store) -> dict[str, dict[str, Any]]:
    return {e.event_id: e.model_dump(mode="json", exclude={"seq"}) for tid in store.trajectory_ids()
            for e in store.trajectory(tid).events}


def _rewards(store: Store) -> dict[str, Any]:
    return {r.annotation_id: r.model_dump(mode="json") for tid in store.trajectory_ids() for r in store.rewards(tid)}


def test_otlp_export_spans_carry_the_genai_attributes_and_rewards(filled: Store) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    mem = InMemorySpanExporter()
    sent, failed = export_otlp(filled, exporter=mem)
    spans = mem.get_finished_spans()
    assert (sent, failed) == (len(spans), 0) and sent == filled.count("events") == 15
    ops = {s.attributes.get("gen_ai.operation.name") for s in spans}
    assert {"chat", "execute_tool", "invoke_agent", "retrieval"} <= ops
    chat = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert all(s.attributes["gen_ai.request.model"] == "gpt-4o-mini" for s in chat)
    assert any(s.attributes.get("gen_ai.usage.input_tokens") == 52 for s in chat)
    tools = {s.attributes.get("gen_ai.tool.name") for s in spans} - {None}
    assert tools == {"lookup_order", "send_email", "issue_refund", "notify_customer"}
    # the causal tree: every parent span is in the same trace
    by_id = {(s.context.trace_id, s.context.span_id): s for s in spans}
    assert all((s.context.trace_id, s.parent.span_id) in by_id for s in spans if s.parent is not None)
    assert sum(s.parent is None for s in spans) == 3  # one root per trajectory
    evals = [e for s in spans for e in s.events if e.name == EVALUATION_EVENT]
    assert len(evals) == 6 and {e.attributes["gen_ai.evaluation.name"] for e in evals} >= {"user-thumbs",
                                                                                         "correctness"}
    assert all(isinstance(e.attributes["gen_ai.evaluation.score.value"], float) for e in evals)
    errors = [s for s in spans if s.status.status_code.name == "ERROR"]
    assert {s.attributes.get("gen_ai.tool.name") for s in errors} == {"send_email", "notify_customer"}


def test_otlp_export_over_http_reaches_the_gateway_endpoint(filled: Store, stores: Any, tmp_path: Path) -> None:
    from molt.capture import Recorder
    from molt.capture.otlp import OtlpIngest
    from molt.capture.otlp_app import create_app
    from molt.gateway.loopback import ServerThread

    target = stores("b")
    rec = Recorder(target, spool_dir=tmp_path / "spool", fsync="never", hook=None)
    ingest = OtlpIngest(rec, strict=True)
    try:
        with ServerThread(create_app(ingest)) as srv:
            sent, failed = export_otlp(filled, srv.url + "/v1/traces", flush_every=4)  # several batches
        assert (sent, failed) == (15, 0)
        assert ingest.flush(deliver=True)
    finally:
        rec.close(timeout=10)
    assert _events(target) == _events(filled)  # each span carried its event whole (molt.event)
    # and its rewards (molt.reward on evaluation events), recorded live as late rewards; the gateway
    # keeps no explanation text (its reward path runs no redaction)
    assert _rewards(target) == {k: {**r, "reason": None} for k, r in _rewards(filled).items()}
    assert all(target.verify(t).ok for t in target.trajectory_ids())


def test_parquet_round_trip_is_byte_identical_rewards_included(filled: Store, stores: Any, tmp_path: Path,
                                                                pipeline: Any) -> None:
    first = tmp_path / "one.parquet"
    assert export_parquet(filled, first) == (15, 6)
    b = stores("b")
    got = import_parquet_export(b, first, pipeline=pipeline)
    assert (got.events.imported, got.rewards) == (15, 6)
    second = tmp_path / "two.parquet"
    export_parquet(b, second)
    cols = ["event_id", "trajectory_id", "seq", "envelope", "payload", "payload_salt", "chain"]
    one, two = (pq.read_table(p, columns=cols).sort_by("event_id") for p in (first, second))
    assert one.equals(two)  # the sealed records, byte for byte
    r1, r2 = (pq.read_table(rewards_path(p), columns=["annotation_id", "record"]).sort_by("annotation_id")
              for p in (first, second))
    assert r1.equals(r2)
    again = import_parquet_export(b, first, pipeline=pipeline)
    assert (again.events.imported, again.events.duplicates, again.rewards, again.reward_duplicates) == (0, 15, 0, 6)


def test_otlp_file_round_trip_gives_back_the_same_events_and_rewards(filled: Store, stores: Any, tmp_path: Path,
                                                                     pipeline: Any) -> None:
    first = tmp_path / "one.otlp.pb"
    assert write_otlp_file(filled, first) == 15
    b = stores("b")
    rep = import_file(b, first, "otlp", pipeline=pipeline)
    assert (rep.imported, rep.rewards, rep.refused) == (15, 6, [])
    assert _events(b) == _events(filled) and _rewards(b) == _rewards(filled)
    second = tmp_path / "two.otlp.pb"
    write_otlp_file(b, second)
    # chains are sealed anew (random salts), but what OTLP carries comes back the same
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    def spans(p: Path) -> list[bytes]:
        req = ExportTraceServiceRequest.FromString(p.read_bytes())
        return sorted(s.SerializeToString() for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans)

    assert spans(first) == spans(second)


def test_datasets_export_loads_with_messages_tools_and_rewards(filled: Store, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    path = tmp_path / "train.parquet"
    assert export_dataset(filled, path) == 3
    import datasets

    ds = datasets.Dataset.from_parquet(str(path), cache_dir=str(tmp_path / "hf-cache"))
    rows = {r["trajectory_id"]: r for r in ds}
    lf = rows[LANGFUSE]
    assert [m["role"] for m in lf["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert lf["messages"][2]["tool_calls"][0]["function"]["name"] == "lookup_order"
    assert lf["messages"][-1]["content"] == "Your order A-17 shipped on March 3."
    assert {t["function"]["name"] for t in lf["tools"]} == {"lookup_order", "send_email"}
    assert sorted(r["source"] for r in lf["rewards"]) == ["human_label", "judge", "user_feedback"]
    assert lf["reward"] == pytest.approx(-0.75) and lf["status"] == "error"
    text = path.read_bytes()
    assert b"jane.doe@example.com" not in text and b"415 555 0134" not in text


def test_cli_exports(filled: Store, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from molt.cli import app

    runner = CliRunner()
    uri = str(tmp_path / "a")
    for args in (["out.parquet"], ["out.hf.parquet", "--format", "hf"], ["out.pb", "--format", "otlp"]):
        got = runner.invoke(app, ["trajectories", "export", str(tmp_path / args[0]), *args[1:], "--store", uri])
        assert got.exit_code == 0, got.output
    assert pq.read_table(rewards_path(tmp_path / "out.parquet")).num_rows == 6
    assert pq.read_table(tmp_path / "out.hf.parquet").num_rows == 3
    got = runner.invoke(app, ["trajectories", "import", str(tmp_path / "out.pb"), "--format", "otlp", "--store", uri])
    assert got.exit_code == 0 and "15 already stored" in " ".join(got.output.split()), got.output
    bad = runner.invoke(app, ["trajectories", "import", str(tmp_path / "out.pb"), "--format", "zipkin"])
    assert bad.exit_code == 2
