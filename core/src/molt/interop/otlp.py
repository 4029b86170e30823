"""OpenTelemetry files in, OpenTelemetry spans out.

**Import** (:func:`read_otlp`): the files an OpenTelemetry collector's ``file`` exporter writes —
OTLP/JSON lines (one ``ExportTraceServiceRequest``/``TracesData`` per line, the spec's JSON file
format) or one JSON document, and OTLP/protobuf (one message, concatenated messages, or the
collector's length-prefixed ``format: proto`` frames). Decoding and the span → event mapping are the
gateway's own (:mod:`molt.capture.otlp`: one decoder, one mapping), older GenAI conventions included
(``gen_ai.prompt.N`` / ``gen_ai.completion.N`` attributes, per-message events). Evaluations
(:func:`molt.capture.otlp.evaluations`, the gateway's mapping: ``gen_ai.evaluation.result`` span
events, or an evaluation span of its own) become late rewards (``judge``) on the evaluated event. Refused per span with the reason: a status code outside the OTLP enum, a
span whose attributes are over the record limit (the live mapping would truncate them; an import says
so instead), a span the mapping rejects (an unrepresentable time).

**Export** (:func:`export_otlp`, :func:`readable_spans`): stored trajectories as GenAI spans
(:func:`molt.atdp.otel.event_to_span`: ``gen_ai.*`` attributes, the whole event in ``molt.*``), sent
with the OpenTelemetry SDK's OTLP/HTTP exporter behind its ``BatchSpanProcessor``, or written to an
OTLP/protobuf file. Late rewards ride as ``gen_ai.evaluation.result`` span events on their event's
span (a trajectory's reward on its root spans), with the annotation itself in ``molt.reward``. The
trace id is the trajectory id when that is 32 hex digits (after dropping dashes), else derived
from it; each span id from the event id likewise.

Round trip: importing what :func:`export_otlp` wrote gives back the same events and annotations
(``molt.event`` / ``molt.reward``); their chains are sealed anew (the salt is random), so the stored
bytes are not the export's. Not carried to a foreign backend: erased payloads (an erased event is
exported with its envelope only), governance decisions, chain hashes.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from molt.atdp.models import Event, RewardAnnotation
from molt.atdp.otel import event_to_span
from molt.atdp.validate import MAX_RECORD_BYTES
from molt.capture.otlp import (
    EVALUATION_EVENT,
    IngestSpan,
    OtlpIngest,
    decode_json,
    decode_protobuf,
    evaluations,
    event_id_for,
    is_evaluation_span,
)
from molt.errors import MoltError
from molt.interop.ingest import Row
from molt.interop.source import json_records
from molt.store import Filter

__all__ = ["EVALUATION_EVENT", "export_otlp", "read_otlp", "readable_spans", "write_otlp_file"]

class _NoRecorder:
    """The mapping is used without recording: the importer writes through the governed path itself."""


_MAPPER: OtlpIngest | None = None


def _mapper() -> OtlpIngest:
    global _MAPPER
    if _MAPPER is None:
        _MAPPER = OtlpIngest(_NoRecorder())
    return _MAPPER


# --------------------------------------------------------------------------- import


def _varint(f: Any) -> int | None:
    """A protobuf varint read from ``f`` (``None`` if the file ends or it runs over 10 bytes)."""
    n: int = 0
    shift = 0
    for _ in range(10):
        b = f.read(1)
        if not b:
            return None
        n |= (b[0] & 0x7F) << shift
        if b[0] < 0x80:
            return n
        shift += 7
    return None


def _messages(path: Path, f: Any) -> Iterator[tuple[str, bytes | Exception]]:
    """The protobuf messages of an OTLP file, one resource's spans (or one frame) at a time.

    Two layouts, told apart by the first byte: the collector's ``format: proto`` frames (a 4-byte
    big-endian length, then the message: a frame under 16 MiB starts with 0x00), and one
    ``ExportTraceServiceRequest`` or several concatenated (protobuf reads them as one), which is a run
    of field-1 ``resource_spans`` entries (tag 0x0A): each entry is read and decoded alone, so memory is
    bounded by the largest entry rather than the file.
    """
    f.seek(0)
    first = f.read(1)
    f.seek(0)
    i = 0
    if first == b"\x00":
        while header := f.read(4):
            size = struct.unpack(">I", header)[0] if len(header) == 4 else 0
            body = f.read(size) if size else b""
            if not size or len(body) < size:
                yield f"frame {i}", MoltError("a truncated or empty length-prefixed frame")
                return
            yield f"frame {i}", body
            i += 1
        return
    if first != b"\x0a":
        raise MoltError(f"{path} is neither OTLP/JSON nor OTLP/protobuf (it starts with byte {first!r}).")
    while tag := f.read(1):
        where = f"resource_spans {i}"
        n = _varint(f) if tag == b"\x0a" else None
        body = f.read(n) if n is not None else b""
        if n is None or len(body) < n:
            yield where, MoltError("not an OTLP/protobuf ExportTraceServiceRequest (truncated, or a field other "
                                   "than resource_spans)")
            return
        yield where, b"\x0a" + _encode_varint(n) + body
        i += 1


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _requests(path: Path) -> Iterator[tuple[str, list[IngestSpan] | Exception]]:
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below; a generator holds it while it is consumed
    except OSError as exc:
        raise MoltError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    with f:
        head = f.read(4096).lstrip()[:1]
        if head in (b"{", b"["):
            f.close()
            for where, d in json_records(path, list_keys=()):  # a line at a time: collector files are large
                if isinstance(d, Exception):
                    yield where, d
                    continue
                try:
                    yield where, decode_json(d)
                except (KeyError, TypeError, ValueError, AttributeError) as exc:
                    yield where, MoltError(f"not an OTLP/JSON ExportTraceServiceRequest: {type(exc).__name__}: {exc}")
            return
        for where, body in _messages(path, f):
            if isinstance(body, Exception):
                yield where, body
                continue
            try:
                yield where, decode_protobuf(body)
            except Exception as exc:  # protobuf's DecodeError, or a value it cannot take
                yield where, MoltError(f"not an OTLP/protobuf ExportTraceServiceRequest: {exc}")


def _attr_bytes(s: IngestSpan) -> int:
    n = 0
    for attrs in (s.span.attributes, *(a for _, a in s.events)):
        for k, v in attrs.items():
            n += len(k) + (len(v) if isinstance(v, str) else len(orjson.dumps(v, default=str)))
    return n


def read_otlp(path: str | Path, *, max_record_bytes: int = MAX_RECORD_BYTES) -> Iterator[Row]:
    """The rows of an OTLP file (see the module docstring)."""
    mapper = _mapper()
    for where_, spans in _requests(Path(path)):
        if isinstance(spans, Exception):
            yield Row(where=where_, problem=str(spans))
            continue
        for s in spans:
            trace = s.span.trace_id or None
            w = f"{where_}, span {s.span.span_id} ({s.span.name[:60]!r})"
            if s.span.status_code.startswith("UNKNOWN"):
                yield Row(where=w, trajectory=trace, problem=f"status code {s.span.status_code[8:-1]} is not an "
                                                             f"OTLP status (UNSET 0, OK 1, ERROR 2)")
                continue
            size = _attr_bytes(s)
            if size > max_record_bytes:
                yield Row(where=w, trajectory=trace,
                          problem=f"{size:,} bytes of attributes, over the {max_record_bytes:,}-byte record limit")
                continue
            if not trace or not s.span.span_id:
                yield Row(where=w, trajectory=trace, problem="the span has no trace id or span id")
                continue
            if is_evaluation_span(s):  # a reward on its parent's event, not a step
                parent = s.span.parent_span_id
                target = event_id_for(trace, parent) if parent and not s.parent_remote else None
                tenant = s.resource.get("tenant.id")
                found = evaluations(s, trace, target, str(tenant) if tenant else None)
            else:
                try:
                    ev = mapper.to_event(s)
                except Exception as exc:
                    yield Row(where=w, trajectory=trace, problem=f"{type(exc).__name__}: {exc}"[:500])
                    continue
                yield Row(where=w, trajectory=ev.trajectory_id, event=ev)
                trace = ev.trajectory_id
                found = evaluations(s, trace, ev.event_id, ev.metadata.tenant_id) if s.events else []
            for where, r in found:
                if isinstance(r, str):
                    yield Row(where=f"{where_}, {where}", trajectory=trace, problem=r)
                else:
                    yield Row(where=w, trajectory=trace, reward=r)


# --------------------------------------------------------------------------- export


_HEX = frozenset("0123456789abcdef")


def _hex_id(value: str, digits: int) -> int:
    """``value`` as an OTel id of ``digits`` hex digits: a trace id is the value itself when it is 32 hex
    digits (dashes dropped: a UUID), a span id its last 16 (a UUID's random part); else derived from it."""
    h = value.replace("-", "").lower()
    tail = h if digits == 32 else h[-16:]
    if len(h) >= digits and (digits == 16 or len(h) == 32) and set(tail) <= _HEX and int(tail, 16):
        return int(tail, 16)
    return int(hashlib.blake2b(value.encode(), digest_size=digits // 2).hexdigest(), 16) or 1


def readable_spans(events: Sequence[Event], rewards: Sequence[RewardAnnotation] = (), *,
                   service_name: str = "molt") -> list[Any]:
    """One trajectory's events as SDK ``ReadableSpan`` objects (GenAI attributes, the event in
    ``molt.*``, late rewards as evaluation events), for any span exporter."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event as SpanEvent
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    from molt.capture.adapt import distribution_version

    scope = InstrumentationScope("molt", distribution_version("molt-core"))
    by_event: dict[str | None, list[RewardAnnotation]] = {}
    for r in rewards:
        by_event.setdefault(r.event_id, []).append(r)
    ids = {e.event_id for e in events}
    root = next((e for e in events if e.parent_id is None or e.parent_id not in ids), None)
    out = []
    for ev in events:
        span = event_to_span(ev)
        trace_id = _hex_id(ev.trajectory_id, 32)
        ctx = SpanContext(trace_id=trace_id, span_id=_hex_id(ev.event_id, 16), is_remote=False,
                          trace_flags=TraceFlags(TraceFlags.SAMPLED))
        parent = None
        if ev.parent_id:
            parent = SpanContext(trace_id=trace_id, span_id=_hex_id(ev.parent_id, 16), is_remote=False,
                                 trace_flags=TraceFlags(TraceFlags.SAMPLED))
        evals = list(by_event.get(ev.event_id, []))
        if ev is root:  # the trajectory's own rewards ride on its (first) root span
            evals += by_event.get(None, [])
        span_events = []
        for r in evals:
            attrs: dict[str, Any] = {
                "gen_ai.evaluation.name": next(iter(r.dimensions)) if r.dimensions else r.source.value,
                "gen_ai.evaluation.score.value": r.value,
                "molt.reward": orjson.dumps(r.model_dump(mode="json", exclude_none=True),
                                            option=orjson.OPT_SORT_KEYS).decode()}
            if r.reason:
                attrs["gen_ai.evaluation.explanation"] = r.reason
            span_events.append(SpanEvent(EVALUATION_EVENT, attrs, timestamp=int(r.created_at.timestamp() * 1e9)))
        res = {"service.name": service_name}
        if ev.metadata.tenant_id:
            res["tenant.id"] = ev.metadata.tenant_id
        status = Status(StatusCode.UNSET)
        if span.status_code == "ERROR":
            status = Status(StatusCode.ERROR, ev.outcome.error.message if ev.outcome and ev.outcome.error else None)
        elif span.status_code == "OK":
            status = Status(StatusCode.OK)
        out.append(ReadableSpan(
            name=span.name, context=ctx, parent=parent, resource=Resource(res),
            attributes=span.attributes, events=span_events,
            kind=SpanKind.CLIENT if span.attributes.get("gen_ai.operation.name") == "chat" else SpanKind.INTERNAL,
            status=status, start_time=span.start_time_unix_nano,
            end_time=span.end_time_unix_nano or span.start_time_unix_nano, instrumentation_scope=scope))
    return out


def _trajectories(reader: Any, where: Filter | str | None) -> Iterator[tuple[list[Event], list[RewardAnnotation]]]:
    for tid in reader.trajectory_ids(where):
        traj = reader.trajectory(tid)
        yield list(traj.events), list(traj.rewards)


class _Counting(SpanExporter):
    """Wraps a span exporter to count what it delivered and what it failed to."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.sent, self.failed = inner, 0, 0

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        result = self.inner.export(spans)
        if result == SpanExportResult.SUCCESS:
            self.sent += len(spans)
        else:
            self.failed += len(spans)
        return result  # type: ignore[no-any-return]

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(getattr(self.inner, "force_flush", lambda *_: True)(timeout_millis))


def export_otlp(reader: Any, endpoint: str | None = None, *, where: Filter | str | None = None, exporter: Any = None,
                headers: dict[str, str] | None = None, service_name: str = "molt",
                progress: Callable[[int], None] | None = None, flush_every: int = 2048) -> tuple[int, int]:
    """Send stored trajectories to an OTLP/HTTP endpoint (``http://collector:4318/v1/traces``) through the
    SDK's ``BatchSpanProcessor``; or to ``exporter`` (any SDK span exporter, e.g. an in-memory one).

    Returns ``(spans delivered, spans that failed)``; a failure is the exporter's (after its retries).
    """
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if exporter is None:
        if not endpoint:
            raise MoltError("Give an OTLP endpoint (http://host:4318/v1/traces) or an exporter.")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=endpoint, headers=headers)
    counting = _Counting(exporter)
    # the queue holds what is not sent yet; flushing every flush_every spans keeps it from overflowing
    # (the processor drops spans beyond max_queue_size rather than block)
    proc = BatchSpanProcessor(counting, max_queue_size=max(flush_every * 2, 4096), max_export_batch_size=512)
    pending = 0
    try:
        for events, rewards in _trajectories(reader, where):
            for span in readable_spans(events, rewards, service_name=service_name):
                proc.on_end(span)
                pending += 1
            if progress is not None:
                progress(len(events))
            if pending >= flush_every:
                proc.force_flush()
                pending = 0
        proc.force_flush()
    finally:
        proc.shutdown()  # type: ignore[no-untyped-call]
    return counting.sent, counting.failed


def write_otlp_file(reader: Any, path: str | Path, *, where: Filter | str | None = None, service_name: str = "molt",
                    progress: Callable[[int], None] | None = None) -> int:
    """Write stored trajectories as an OTLP/protobuf file (concatenated ``ExportTraceServiceRequest``
    messages, one per trajectory: protobuf reads them as one); returns the spans written."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    n = 0
    with open(path, "wb") as f:
        for events, rewards in _trajectories(reader, where):
            spans = readable_spans(events, rewards, service_name=service_name)
            f.write(encode_spans(spans).SerializeToString())
            n += len(spans)
            if progress is not None:
                progress(len(events))
    return n
