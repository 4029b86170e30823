"""OTLP ingest: the real opentelemetry-sdk and its OTLP/HTTP exporter, pointed at the endpoint on loopback
(uvicorn in a thread), emitting GenAI-convention spans; plus the JSON encoding, compression, errors,
the in-process SpanProcessor and a Store as the sink."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode

from molt.atdp import Event, EventKind, Generation, OutcomeStatus, ToolCall, verify_chain
from molt.atdp.otel import event_to_span
from molt.capture import MemorySink, Recorder
from molt.capture.otlp import MoltSpanProcessor, OtlpIngest, event_id_for
from molt.capture.otlp_app import create_app
from molt.gateway.loopback import ServerThread


class _Server(ServerThread):
    """The OTLP app on a loopback port; :attr:`url` is its traces endpoint."""

    @property
    def url(self) -> str:
        return super().url + "/v1/traces"


@pytest.fixture
def ingest(tmp_path: Path) -> Iterator[OtlpIngest]:
    # the span → event mapping, checked value by value: raw capture (governance would redact "Paris")
    rec = Recorder(MemorySink(), spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0, pipeline=None)
    yield OtlpIngest(rec, strict=True)
    rec.close(timeout=5)


@pytest.fixture
def server(ingest: OtlpIngest) -> Iterator[_Server]:
    with _Server(create_app(ingest)) as srv:
        yield srv


def _events(ingest: OtlpIngest) -> dict[str, list[Event]]:
    assert ingest.flush(deliver=True)
    sink = ingest.capture.recorder.sink
    tids = sorted({r.x["trajectory_id"] for r in sink.events.values()})
    return {t: sink.trajectory_events(t) for t in tids}


def _agent_run(provider: TracerProvider, marker: str) -> str:
    """A home-grown agent instrumented by hand with GenAI attributes: one agent span, a chat asking for
    two tools, the tools (one raising), and a final chat. Returns the trace id (hex)."""
    tracer = provider.get_tracer("acme.orchestrator", "2.1.0")
    with tracer.start_as_current_span("invoke_agent support") as agent:
        agent.set_attribute("gen_ai.operation.name", "invoke_agent")
        agent.set_attribute("gen_ai.agent.name", "support")
        agent.set_attribute("gen_ai.conversation.id", f"conv-{marker}")
        with tracer.start_as_current_span("chat gpt-x") as chat:
            chat.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-x",
                    "gen_ai.response.model": "gpt-x-2026",
                    "gen_ai.usage.input_tokens": 40,
                    "gen_ai.usage.output_tokens": 9,
                    "gen_ai.response.finish_reasons": ["tool_calls"],
                    "gen_ai.input.messages": json.dumps(
                        [{"role": "user", "parts": [{"type": "text", "content": f"help {marker}"}]}]
                    ),
                    "gen_ai.output.messages": json.dumps(
                        [
                            {
                                "role": "assistant",
                                "parts": [
                                    {
                                        "type": "tool_call",
                                        "id": "call_1",
                                        "name": "lookup",
                                        "arguments": {"query": marker},
                                    },
                                    {
                                        "type": "tool_call",
                                        "id": "call_2",
                                        "name": "explode",
                                        "arguments": {"reason": marker},
                                    },
                                ],
                            }
                        ]
                    ),
                }
            )
        with tracer.start_as_current_span("execute_tool lookup") as tool:
            tool.set_attributes(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "lookup",
                    "gen_ai.tool.call.id": "call_1",
                    "gen_ai.tool.call.arguments": json.dumps({"query": marker}),
                    "gen_ai.tool.call.result": json.dumps({"text": f"found {marker}"}),
                }
            )
        try:
            with tracer.start_as_current_span("execute_tool explode") as bad:
                bad.set_attributes(
                    {
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": "explode",
                        "gen_ai.tool.call.id": "call_2",
                        "gen_ai.tool.call.arguments": json.dumps({"reason": marker}),
                    }
                )
                raise ValueError(marker)  # recorded as an exception event, status ERROR
        except ValueError:
            pass
        with tracer.start_as_current_span("chat gpt-x") as chat2:
            chat2.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-x",
                    "gen_ai.usage.input_tokens": 70,
                    "gen_ai.usage.output_tokens": 4,
                    "gen_ai.output.messages": json.dumps(
                        [{"role": "assistant", "parts": [{"type": "text", "content": f"done: {marker}"}]}]
                    ),
                }
            )
        return f"{agent.get_span_context().trace_id:032x}"


def test_sdk_exporter_to_endpoint_records_the_trajectory(ingest: OtlpIngest, server: _Server) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "acme-agents", "tenant.id": "acme"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=server.url, timeout=10)))
    trace_a = _agent_run(provider, "alpha")
    trace_b = _agent_run(provider, "beta")
    assert provider.force_flush(10_000)
    provider.shutdown()

    trajs = _events(ingest)
    assert set(trajs) == {trace_a, trace_b}
    evs = trajs[trace_a]
    assert "beta" not in " ".join(e.model_dump_json() for e in evs)
    assert [e.kind for e in evs] == [
        EventKind.MODEL_CALL,
        EventKind.TOOL_CALL,
        EventKind.TOOL_CALL,
        EventKind.MODEL_CALL,
        EventKind.AGENT_STEP,
    ]  # end order
    first, ok, bad, last, agent = evs
    # causal tree: one root, every parent in the trajectory
    assert agent.parent_id is None and agent.action.name == "support"
    assert {e.parent_id for e in evs[:-1]} == {agent.event_id}
    # model calls: tool calls asked for, usage, model, input messages
    assert isinstance(first.action, Generation) and [tc.name for tc in first.action.tool_calls] == ["lookup", "explode"]
    assert first.metadata.usage.total_tokens == 49 and first.metadata.model == "gpt-x-2026"
    assert first.observation.data[0]["parts"][0]["content"] == "help alpha"
    assert last.action.text == "done: alpha"
    # tools: arguments, call ids, output; the failure is an outcome with the exception's message
    assert isinstance(ok.action, ToolCall) and ok.action.arguments == {"query": "alpha"}
    assert ok.action.call_id == "call_1" and ok.outcome.status == OutcomeStatus.OK
    assert ok.outcome.output == {"text": "found alpha"}
    assert bad.outcome.status == OutcomeStatus.ERROR
    assert bad.outcome.error.type == "ValueError" and "alpha" in bad.outcome.error.message
    # metadata and provenance
    assert {e.session_id for e in evs} == {None, "conv-alpha"} and agent.session_id == "conv-alpha"
    assert all(e.metadata.tenant_id == "acme" and e.metadata.tags == {"service.name": "acme-agents"} for e in evs)
    p = agent.provenance
    assert (p.framework, p.framework_version, p.integration) == ("acme.orchestrator", "2.1.0", "otlp")
    assert all(e.outcome is not None and e.metadata.latency_ms is not None for e in evs)
    # the chain verifies
    sink = ingest.capture.recorder.sink
    for tid in trajs:
        report = verify_chain(tid, sink.sealed_events(tid))
        assert report.ok, report.problems
    assert ingest.stats.errors == 0


def test_resent_export_is_not_recorded_twice(ingest: OtlpIngest, server: _Server) -> None:
    provider = TracerProvider()
    exporter = OTLPSpanExporter(endpoint=server.url, timeout=10)
    captured: list[Any] = []

    class Twice(BatchSpanProcessor):
        def on_end(self, span: Any) -> None:
            captured.append(span)
            super().on_end(span)

    provider.add_span_processor(Twice(exporter))
    _agent_run(provider, "alpha")
    assert provider.force_flush(10_000)
    assert exporter.export(captured).name == "SUCCESS"  # an exporter retry after a lost response
    provider.shutdown()
    [evs] = _events(ingest).values()
    assert len(evs) == 5


def _json_request(trace: str, spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-svc"}}]},
                "scopeSpans": [{"scope": {"name": "handmade", "version": "0.1"}, "spans": spans}],
            }
        ]
    }


def _jspan(trace: str, sid: str, parent: str, name: str, attrs: dict[str, Any], **kw: Any) -> dict[str, Any]:
    def val(v: Any) -> dict[str, Any]:
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}  # OTLP/JSON sends 64-bit ints as strings
        if isinstance(v, list):
            return {"arrayValue": {"values": [val(x) for x in v]}}
        return {"stringValue": v}

    return {
        "traceId": trace,
        "spanId": sid,
        "parentSpanId": parent,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": "1764480000000000000",
        "endTimeUnixNano": "1764480000500000000",
        "attributes": [{"key": k, "value": val(v)} for k, v in attrs.items()],
        **kw,
    }


def test_json_encoding_gzip_and_remote_parents(ingest: OtlpIngest, server: _Server) -> None:
    trace = "0af7651916cd43dd8448eb211c80319c"
    spans = [
        _jspan(
            trace,
            "b7ad6b7169203331",
            "",
            "chat m",
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "m",
                "gen_ai.usage.input_tokens": 3,
                "gen_ai.usage.output_tokens": 2,
            },
        ),
        _jspan(
            trace,
            "00f067aa0ba902b7",
            "b7ad6b7169203331",
            "execute_tool t",
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"},
            status={"code": 2, "message": "tool t timed out"},
        ),
        _jspan(
            trace,
            "1111111111111111",
            "9999999999999999",
            "invoke_agent sub",  # parent in another service
            {"gen_ai.operation.name": "invoke_agent"},
            flags=0x300,
        ),
    ]
    body = gzip.compress(json.dumps(_json_request(trace, spans)).encode())
    r = httpx.post(server.url, content=body, headers={"content-type": "application/json", "content-encoding": "gzip"})
    assert r.status_code == 200 and r.json() == {} and r.headers["content-type"] == "application/json"
    [evs] = _events(ingest).values()
    chat, tool, sub = evs
    assert chat.trajectory_id == trace and chat.metadata.usage.total_tokens == 5
    assert tool.parent_id == chat.event_id and tool.outcome.error.message == "tool t timed out"
    assert sub.parent_id is None  # a remote parent never arrives here: the span is a root
    assert chat.metadata.tags == {"service.name": "json-svc"} and chat.provenance.framework == "handmade"


def test_snake_case_json_and_deflate(ingest: OtlpIngest, server: _Server) -> None:
    import zlib

    doc = {
        "resource_spans": [
            {
                "scope_spans": [
                    {
                        "spans": [
                            {
                                "trace_id": "AB" * 16,
                                "span_id": "CD" * 8,
                                "name": "retrieval docs",
                                "start_time_unix_nano": 10,
                                "end_time_unix_nano": 20,
                                "attributes": [
                                    {"key": "gen_ai.operation.name", "value": {"string_value": "retrieval"}},
                                    {"key": "gen_ai.data_source.id", "value": {"string_value": "kb"}},
                                    {
                                        "key": "app.meta",
                                        "value": {
                                            "kvlist_value": {"values": [{"key": "k", "value": {"int_value": 1}}]}
                                        },
                                    },
                                ],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    r = httpx.post(
        server.url,
        content=zlib.compress(json.dumps(doc).encode()),
        headers={"content-type": "application/json; charset=utf-8", "content-encoding": "deflate"},
    )
    assert r.status_code == 200
    [evs] = _events(ingest).values()
    [ev] = evs
    assert ev.trajectory_id == "ab" * 16 and ev.kind == EventKind.RETRIEVAL and ev.action.index == "kb"
    assert ev.event_id == event_id_for("ab" * 16, "cd" * 8) and ev.outcome.status == OutcomeStatus.OK


def test_bad_requests_are_answered_not_raised(ingest: OtlpIngest, server: _Server) -> None:
    r = httpx.post(server.url, content=b"\x0a\xff\xff", headers={"content-type": "application/x-protobuf"})
    assert r.status_code == 400
    r = httpx.post(server.url, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "OTLP/JSON" in r.json()["message"]
    r = httpx.post(server.url, content=b"x", headers={"content-type": "text/plain"})
    assert r.status_code == 415
    bomb = gzip.compress(b"\0" * (40 << 20))
    r = httpx.post(
        server.url, content=bomb, headers={"content-type": "application/x-protobuf", "content-encoding": "gzip"}
    )
    assert r.status_code == 413
    assert httpx.get(server.url).status_code == 405
    # a span that cannot be mapped is a partial success, the others are recorded
    req = ExportTraceServiceRequest()
    ss = req.resource_spans.add().scope_spans.add()
    good = ss.spans.add(trace_id=b"\1" * 16, span_id=b"\2" * 8, name="x", start_time_unix_nano=1, end_time_unix_nano=2)
    good.attributes.add(key="gen_ai.operation.name").value.string_value = "chat"
    bad = ss.spans.add(trace_id=b"\1" * 16, span_id=b"\3" * 8, name="y", start_time_unix_nano=5, end_time_unix_nano=6)
    bad.attributes.add(key="gen_ai.usage.input_tokens").value.int_value = -4  # usage must be >= 0
    ingest.capture.strict = False
    r = httpx.post(server.url, content=req.SerializeToString(), headers={"content-type": "application/x-protobuf"})
    resp = ExportTraceServiceResponse.FromString(r.content)
    assert r.status_code == 200 and resp.partial_success.rejected_spans == 1
    assert "input_tokens" in resp.partial_success.error_message
    assert len(next(iter(_events(ingest).values()))) == 1


def test_routes_in_another_app_with_authentication(ingest: OtlpIngest) -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

    from molt.capture.otlp_app import otlp_routes

    async def authenticate(request: Request) -> str | Response | None:
        key = request.headers.get("authorization")
        return {"Bearer k-acme": "acme"}.get(key or "") or Response(status_code=401)

    app = Starlette(routes=otlp_routes(ingest, authenticate=authenticate))
    trace = "ab" * 16
    body = json.dumps(_json_request(trace, [_jspan(trace, "cd" * 8, "", "chat m", {"gen_ai.operation.name": "chat"})]))
    with _Server(app) as srv:
        h = {"content-type": "application/json"}
        assert httpx.post(srv.url, content=body, headers=h).status_code == 401
        r = httpx.post(srv.url, content=body, headers={**h, "authorization": "Bearer k-acme"})
        assert r.status_code == 200
    [evs] = _events(ingest).values()
    assert [e.metadata.tenant_id for e in evs] == ["acme"]


def test_molt_spans_round_trip_exactly(ingest: OtlpIngest) -> None:
    ev = Event(trajectory_id="t-1", kind=EventKind.TOOL_CALL, action=ToolCall(tool_name="search"))
    s = event_to_span(ev)
    from molt.capture.otlp import IngestSpan

    assert ingest.to_event(IngestSpan(span=s)) == ev


def test_span_processor_in_process(tmp_path: Path) -> None:
    rec = Recorder(MemorySink(), spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0)
    proc = MoltSpanProcessor(rec, strict=True, tags={"env": "test"})
    provider = TracerProvider()
    provider.add_span_processor(proc)
    try:
        trace = _agent_run(provider, "gamma")
        tracer = provider.get_tracer("x")
        with tracer.start_as_current_span("plain step") as sp:
            sp.set_status(Status(StatusCode.ERROR, "went wrong"))
        assert proc.force_flush()
        assert proc.flush(deliver=True)
        sink = rec.sink
        evs = sink.trajectory_events(trace)
        assert [e.kind for e in evs][-1] == EventKind.AGENT_STEP and len(evs) == 5
        [bad] = [e for e in evs if e.name == "execute_tool explode"]
        assert bad.outcome.error.type == "ValueError" and "gamma" in bad.outcome.error.message
        assert all(e.metadata.tags["env"] == "test" for e in evs)
        plain = [e for r in sink.events.values() for e in [r] if r.x["name"] == "plain step"]
        assert len(plain) == 1 and plain[0].x["status"] == "error"
        # cost on the instrumented thread: a queue append
        t0 = time.perf_counter()
        for _ in range(500):
            with tracer.start_as_current_span("tick"):
                pass
        per_span = (time.perf_counter() - t0) / 500
        # a guard against blocking work (an export, a network call) on the instrumented thread, not a
        # performance claim: per-event costs are measured in bench/, never asserted in tests
        assert per_span < 20e-3
        assert proc.flush(deliver=True) and proc.stats.errors == 0
    finally:
        provider.shutdown()
        rec.close(timeout=5)


def test_store_as_the_sink(store: Any, tmp_path: Path) -> None:
    rec = Recorder(store, spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0)
    ingest = OtlpIngest(rec, strict=True)
    try:
        with _Server(create_app(ingest)) as srv:
            provider = TracerProvider()
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=srv.url, timeout=10)))
            trace = _agent_run(provider, "delta")
            assert provider.force_flush(10_000)
            provider.shutdown()
        assert ingest.flush(deliver=True)
        assert store.count("events") == 5
        traj = store.trajectory(trace)
        assert [e.kind for e in traj.events][-1] == EventKind.AGENT_STEP
        assert len(traj.children(None)) == 1 and len(traj.children(traj.events[-1].event_id)) == 4
        assert store.verify(trace).ok
    finally:
        rec.close(timeout=5)


def test_one_decoder_reads_the_protobuf_and_the_json_encoding_of_a_request_alike() -> None:
    """The same request, built as a protobuf message and written by hand as OTLP/JSON (hex ids, camelCase,
    64-bit integers as strings, enums as numbers): the decoded spans are equal, field for field."""
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
    from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus

    from molt.capture.otlp_decode import decode_json, decode_protobuf

    trace, span, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "53995c3f42cd8ad8"
    pb_attrs = [KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="chat")),
                KeyValue(key="gen_ai.usage.input_tokens", value=AnyValue(int_value=12)),
                KeyValue(key="temperature", value=AnyValue(double_value=0.5)),
                KeyValue(key="stream", value=AnyValue(bool_value=True)),
                KeyValue(key="blob", value=AnyValue(bytes_value=b"\x00\x01")),
                KeyValue(key="tags", value=AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="a")]))),
                KeyValue(key="meta", value=AnyValue(kvlist_value=KeyValueList(values=[
                    KeyValue(key="k", value=AnyValue(int_value=3))])))]
    pb = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[Span(
        trace_id=bytes.fromhex(trace), span_id=bytes.fromhex(span), parent_span_id=bytes.fromhex(parent),
        name="chat m", start_time_unix_nano=1_700_000_000_000_000_000, end_time_unix_nano=1_700_000_000_500_000_000,
        attributes=pb_attrs, flags=0x300, status=PbStatus(code=2, message="boom"),
        events=[Span.Event(name="exception", attributes=[
            KeyValue(key="exception.type", value=AnyValue(string_value="ValueError"))])])])])])
    js = {"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": trace, "spanId": span, "parentSpanId": parent, "name": "chat m",
        "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000000500000000",
        "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                       {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12"}},
                       {"key": "temperature", "value": {"doubleValue": 0.5}},
                       {"key": "stream", "value": {"boolValue": True}},
                       {"key": "blob", "value": {"bytesValue": "AAE="}},
                       {"key": "tags", "value": {"arrayValue": {"values": [{"stringValue": "a"}]}}},
                       {"key": "meta", "value": {"kvlistValue": {"values": [{"key": "k",
                                                                             "value": {"intValue": "3"}}]}}}],
        "flags": 768, "status": {"code": 2, "message": "boom"},
        "events": [{"name": "exception", "attributes": [{"key": "exception.type",
                                                         "value": {"stringValue": "ValueError"}}]}]}]}]}]}
    from_pb, from_js = decode_protobuf(pb.SerializeToString()), decode_json(json.dumps(js).encode())
    assert from_pb == from_js and len(from_pb) == 1
    got = from_pb[0]
    assert got.span.trace_id == trace and got.span.parent_span_id == parent and got.parent_remote
    assert got.span.status_code == "ERROR" and got.exception == ("ValueError", None)
    assert got.span.attributes["gen_ai.usage.input_tokens"] == 12 and got.span.attributes["blob"] == "AAE="
