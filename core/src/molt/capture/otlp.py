"""OpenTelemetry ingest: GenAI-convention spans from any OTel-instrumented stack, recorded as ATDP events.

A home-grown orchestration that already emits OpenTelemetry needs no Molt adapter: point its OTLP/HTTP
exporter at an endpoint serving :class:`OtlpIngest` (see :mod:`molt.capture.otlp_app`), or add
:class:`MoltSpanProcessor` to its ``TracerProvider`` in-process. Each finished span becomes one event
(:func:`molt.atdp.otel.span_to_event`: ``gen_ai.operation.name`` ``chat`` → ``model_call``,
``execute_tool`` → ``tool_call``, ``invoke_agent`` → ``agent_step``, …), with:

- **trajectory** = the trace: ``trajectory_id`` is the 32-hex trace id, so a trajectory is found by
  the id every OTel backend shows;
- **event ids** derived from (trace id, span id), so a child can name its parent before the parent
  span has ended (children end, and are exported, first) and a re-sent export is deduplicated by
  the Recorder instead of recorded twice; a span whose parent is remote (another service, per the
  OTLP span flags) is a root;
- **tenants**: with the caller's tenant (``tenant_id``) and a
  :class:`~molt.capture.tenancy.TrajectoryNamespace` that is on (more than one tenant), the trace
  id is resolved within the tenant like every other client-chosen trajectory id (another tenant's
  trace id names the caller's own namespaced trajectory) and event ids are derived from the resolved
  trajectory, so one tenant's export never lands in, links to, or deduplicates away another's; an
  event Molt exported itself (``molt.event``) is re-homed the same way and stamped with the tenant,
  and loses the provenance only the serving gateway may stamp (the policy version, harness, retrieval
  snapshot and weights that answered: :func:`molt.capture.tenancy.unclaimed`) — a writer cannot vote
  for a version with runs it says that version served;
- **errors as outcomes**: status ``ERROR`` (or an ``error.type`` attribute) becomes
  ``outcome.status == "error"`` with the status message, else the recorded exception's message; an
  ended span with status ``UNSET`` or ``OK`` is ``ok``;
- **usage** from ``gen_ai.usage.*`` (``total_tokens`` filled in), the model from
  ``gen_ai.response.model`` / ``gen_ai.request.model``, input messages as the observation;
- **provenance**: ``integration="otlp"`` at molt-core's version, ``framework`` and
  ``framework_version`` from the instrumentation scope; ``service.name`` in ``metadata.tags``.
- **evaluations as late rewards**: GenAI ``gen_ai.evaluation.result`` results (a span event on the
  evaluated span, or an evaluation span parented to it, sent later) become
  reward annotations (``judge``) on the evaluated event, in the same tenant,
  recorded after it and never folded into it (:func:`evaluations`, :meth:`OtlpIngest.record_span`).

Decoding (protobuf, JSON, SDK spans; the older GenAI message conventions) is
:mod:`molt.capture.otlp_decode`. Payloads are bounded like an adapter's
(:func:`~molt.capture.adapt.bound_payload`). Spans are recorded in the order they arrive (end order),
so ``seq`` follows end times as with every adapter. A span written by
:func:`molt.atdp.otel.event_to_span` comes back as exactly the event it carried.

Example::

    from molt.capture.otlp import OtlpIngest
    from molt.capture.otlp_app import create_app

    app = create_app(OtlpIngest(recorder))  # POST /v1/traces (protobuf or JSON, gzip or not)
"""

from __future__ import annotations

import contextlib
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from molt.atdp.models import Event, Observation, Outcome, OutcomeStatus, Provenance, RewardAnnotation
from molt.atdp.otel import span_to_event
from molt.capture.adapt import Capture, CaptureStats, distribution_version
from molt.capture.otlp_decode import (
    DecodeError,
    IngestSpan,
    decode_json,
    decode_protobuf,
    from_readable,
    genai_messages,
    trace_service,
)
from molt.capture.tenancy import TrajectoryNamespace, unclaimed

try:  # only MoltSpanProcessor needs the SDK
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
except ImportError:  # pragma: no cover - depends on the environment
    SpanProcessor = object  # type: ignore[assignment,misc]
    ReadableSpan = Any  # type: ignore[assignment,misc]

__all__ = [
    "EVALUATION_EVENT",
    "IngestResult",
    "IngestSpan",
    "MoltSpanProcessor",
    "OtlpIngest",
    "decode_json",
    "decode_protobuf",
    "evaluations",
    "event_id_for",
    "from_readable",
    "genai_messages",
]

#: Event ids from (trajectory, span id): one derivation, shared with the tenant namespace.
_IDS = TrajectoryNamespace()
#: Default cap on one request body (after decompression), in bytes.
MAX_BODY_BYTES = 32 << 20


@dataclass(frozen=True)
class IngestResult:
    """What one export did: spans recorded, spans rejected (and why, for the first)."""

    accepted: int
    rejected: int = 0
    error: str | None = None
    #: evaluations recorded as late rewards, and those that were not (no numeric score, a failed
    #: evaluation, one already recorded); OTLP's response has no field for them
    rewards: int = 0
    rewards_skipped: int = 0


def event_id_for(trace_id: str, span_id: str) -> str:
    """The event id of span ``span_id`` in trace ``trace_id`` (a UUID derived from both, stable)."""
    return _IDS.event_id(trace_id, span_id)


# --------------------------------------------------------------------------- evaluations


#: The GenAI conventions' evaluation result (``gen_ai.evaluation.name``, ``…score.value``,
#: ``…score.label``, ``…explanation``, ``error.type``): a span event on the evaluated span, or — what an
#: evaluator that runs later can send — a span of its own parented to it.
EVALUATION_EVENT = "gen_ai.evaluation.result"


def is_evaluation_span(s: IngestSpan) -> bool:
    """A span that is itself an evaluation result (``gen_ai.evaluation.name`` and no operation): a
    reward on its parent's event, not a step of the trajectory."""
    a = s.span.attributes
    return "gen_ai.evaluation.name" in a and "gen_ai.operation.name" not in a


def evaluations(s: IngestSpan, trajectory_id: str, event_id: str | None,
                tenant_id: str | None) -> list[tuple[str, RewardAnnotation | str]]:
    """The evaluation results ``s`` carries, as ``(where, reward)`` on ``event_id`` (``None``: the
    trajectory) — or ``(where, the reason it is not a reward)``.

    A reward is ``source="judge"``, ``value`` and ``dimensions`` the score under the evaluation's name,
    ``annotator`` ``otlp:<name>``, ``reason`` the explanation; its id is derived from (trajectory, span,
    event index), so a re-sent export names the same reward. An evaluation Molt exported itself
    (``molt.reward``) is the annotation as it was; the caller re-homes it.
    """
    sid = s.span.span_id or ""
    found: list[tuple[str, str, Any]] = [(f"span {sid}, event {i}", str(i), a)
                                         for i, (name, a) in enumerate(s.events) if name == EVALUATION_EVENT]
    if is_evaluation_span(s):
        found.append((f"span {sid}", "span", s.span.attributes))
    out: list[tuple[str, RewardAnnotation | str]] = []
    for where, key, a in found:
        name = str(a.get("gen_ai.evaluation.name") or "evaluation")
        full = a.get("molt.reward")
        value = a.get("gen_ai.evaluation.score.value")
        try:
            if isinstance(full, str):
                out.append((where, RewardAnnotation.model_validate(orjson.loads(full))))
            elif a.get("error.type"):
                out.append((where, f"evaluation {name!r} failed ({str(a['error.type'])[:200]}); not a reward"))
            elif isinstance(value, bool) or not isinstance(value, int | float):
                out.append((where, f"evaluation {name!r} has no numeric score.value "
                                   f"({a.get('gen_ai.evaluation.score.label')!r}); a reward needs a number"))
            else:
                expl = a.get("gen_ai.evaluation.explanation")
                out.append((where, RewardAnnotation(
                    annotation_id=event_id_for(trajectory_id, f"eval:{sid}:{key}"), trajectory_id=trajectory_id,
                    event_id=event_id, value=float(value), dimensions={name: float(value)}, source="judge",
                    reason=str(expl) if expl else None, annotator=f"otlp:{name}"[:200], tenant_id=tenant_id)))
        except Exception as exc:  # an annotation that does not validate (a NaN score, a malformed molt.reward)
            out.append((where, f"evaluation {name!r} is not a valid reward: {type(exc).__name__}: {exc}"[:500]))
    return out


# --------------------------------------------------------------------------- mapping and recording


class OtlpIngest:
    """Turns OTLP spans into ATDP events and hands them to a Recorder.

    Thread-safe (it keeps no per-trace state: ids are derived, not remembered).

    Args:
        recorder: the :class:`~molt.capture.Recorder` (default: the process-wide one).
        tenant_id: ``metadata.tenant_id`` of every event (default: the ``tenant.id`` resource
            attribute, if any).
        max_field_bytes: bound of each free-form payload field (default 192 KiB).
        strict: raise the first mapping or Recorder error from :meth:`flush` (tests).
        namespace: resolves trace ids within the caller's tenant (the gateway's; ``None``: trace ids
            are trajectory ids as given).
        join: ``join(event, tenant)`` for an event handed over whole (``molt.event``): the event to
            record instead, or ``None`` to record nothing (the gateway's
            :class:`~molt.gateway.joins.CallJoins`: an adapter's run joins the gateway's trajectory).
        **capture_options: other :class:`~molt.capture.adapt.Capture` options (``blob_store``, ``tags``).

    Example::

        ingest = OtlpIngest(recorder)
        status, body, content_type = ingest.handle_http(request_body, "application/x-protobuf", None)
    """

    def __init__(
        self,
        recorder: Any = None,
        *,
        tenant_id: str | None = None,
        strict: bool = False,
        namespace: TrajectoryNamespace | None = None,
        join: Callable[[Event, str | None], Event | None] | None = None,
        **capture_options: Any,
    ):
        self.capture = Capture(
            recorder,
            integration="otlp",
            framework="opentelemetry",
            strict=strict,
            tenant_id=tenant_id,
            **capture_options,
        )
        self.tenant_id = tenant_id
        self.namespace = namespace
        self.join = join
        self._tags = {str(k): str(v) for k, v in (capture_options.get("tags") or {}).items()}
        self._version = distribution_version("molt-core")
        # annotation ids of the rewards recorded lately: a re-sent export (an exporter's retry) is
        # not recorded twice (the Recorder deduplicates events the same way, not rewards)
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._seen_lock = threading.Lock()
        self._seen_max = 65_536

    # ---------------------------------------------------------------- HTTP

    def handle_http(
        self,
        body: bytes,
        content_type: str | None,
        content_encoding: str | None = None,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        tenant_id: str | None = None,
        agent_id: str | None = None,
    ) -> tuple[int, bytes, str]:
        """Serve one OTLP/HTTP ``POST /v1/traces``: ``(status, response body, response content type)``.

        Protobuf (``application/x-protobuf``) and JSON (``application/json``) bodies, plain or
        ``gzip``/``deflate``; answers 200 with an ``ExportTraceServiceResponse`` in the request's
        encoding (``partial_success`` naming rejected spans), 400 for an undecodable body, 413 for
        one over ``max_body_bytes``, 415 for another content type. ``tenant_id`` (the tenant the
        caller authenticated as) overrides every other source of ``metadata.tenant_id``; ``agent_id``
        (the exporter's ``X-Molt-Agent`` header) names the agent of spans that carry no ``gen_ai.agent.id``.
        """
        ctype = (content_type or "").split(";")[0].strip().lower()
        is_json = ctype == "application/json"
        if not is_json and ctype not in ("application/x-protobuf", "application/protobuf"):
            return (
                415,
                _status_body(
                    f"Unsupported content type {ctype!r}; send application/x-protobuf or application/json.", True
                ),
                "application/json",
            )
        try:
            body = _decompress(body, (content_encoding or "").strip().lower(), max_body_bytes)
        except _TooLarge:
            return (
                413,
                _status_body(f"The request body is over {max_body_bytes:,} bytes; export smaller batches.", is_json),
                _ctype(is_json),
            )
        except (OSError, zlib.error, EOFError, ValueError) as exc:
            return 400, _status_body(f"Could not decompress the body: {exc}.", is_json), _ctype(is_json)
        try:
            spans = decode_json(body) if is_json else decode_protobuf(body)
        except (DecodeError, orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            what = "OTLP/JSON" if is_json else "OTLP protobuf"
            return (
                400,
                _status_body(f"The body is not a valid {what} ExportTraceServiceRequest: {exc}.", is_json),
                _ctype(is_json),
            )
        result = self.ingest(spans, tenant_id=tenant_id, agent_id=agent_id)
        return 200, _response_body(result, is_json), _ctype(is_json)

    # ---------------------------------------------------------------- spans

    def ingest(self, spans: Iterable[IngestSpan], *, tenant_id: str | None = None,
               agent_id: str | None = None) -> IngestResult:
        """Record each span as an event, and its evaluations as late rewards; a span that cannot be
        mapped is rejected (counted), not raised.

        ``tenant_id`` overrides the ingest's own and the spans' ``tenant.id`` resource attribute;
        ``agent_id`` is the agent of spans that name none (``gen_ai.agent.id``).
        """
        accepted = rejected = rewards = skipped = 0
        first: str | None = None
        for s in spans:
            try:
                got, dropped = self.record_span(s, tenant_id=tenant_id, agent_id=agent_id)
                accepted += 1
                rewards += got
                skipped += dropped
            except Exception as exc:
                rejected += 1
                first = first or f"span {s.span.span_id} ({s.span.name!r}): {type(exc).__name__}: {exc}"[:500]
                self.capture.fail(exc)
        return IngestResult(accepted, rejected, first, rewards, skipped)

    def record_span(self, s: IngestSpan, *, tenant_id: str | None = None,
                    agent_id: str | None = None) -> tuple[int, int]:
        """Record one span: its event (unless it is an evaluation span), then its evaluations as late
        rewards. Returns ``(rewards recorded, evaluations not recorded)``; raises if the span cannot be
        mapped.

        Rewards are appended after the event they point at, never folded into it: the causal record
        is the same with or without them. They are the caller's tenant's: the target trajectory and
        event are resolved like the span's own, and a ``molt.reward`` naming other ids is re-homed
        onto them. The explanation is not kept: the Recorder's reward path runs no governance (the
        pipeline redacts events), and a judge's explanation quotes the conversation it judged.
        """
        if is_evaluation_span(s):
            tid = self._trace(s, tenant_id)
            parent = s.span.parent_span_id
            target = event_id_for(tid, parent) if parent and not s.parent_remote else None
            tenant = tenant_id or self.tenant_id or s.resource.get("tenant.id")
            owner = str(tenant) if tenant else None
        else:
            ev = self.to_event(s, tenant_id=tenant_id, agent_id=agent_id)
            if self.join is not None and isinstance(s.span.attributes.get("molt.event"), str):
                joined = self.join(ev, tenant_id)  # an event handed over whole: the gateway's join
                if joined is None:
                    return 0, 0
                ev = joined
            self.capture.record(ev)
            if not s.events:
                return 0, 0
            tid, target, owner = ev.trajectory_id, ev.event_id, ev.metadata.tenant_id
        recorded = dropped = 0
        for _, r in evaluations(s, tid, target, owner):
            if isinstance(r, str):
                dropped += 1
                continue
            ann = r.model_copy(update={
                "trajectory_id": tid, "event_id": target if r.event_id is not None else None, "reason": None,
                "annotation_id": r.annotation_id if r.trajectory_id == tid else event_id_for(tid, r.annotation_id),
                "tenant_id": owner})
            if self._reward(ann):
                recorded += 1
            else:
                dropped += 1
        return recorded, dropped

    def _reward(self, ann: RewardAnnotation) -> bool:
        """Hand a reward to the Recorder once (a re-sent export names the same annotation id)."""
        with self._seen_lock:
            if ann.annotation_id in self._seen:
                self._seen.move_to_end(ann.annotation_id)
                return False
            self._seen[ann.annotation_id] = None
            if len(self._seen) > self._seen_max:
                self._seen.popitem(last=False)
        reward = getattr(self.capture.recorder, "reward", None)
        if reward is not None and reward(ann):
            return True
        with self._seen_lock:  # not taken (queue full, or no reward path): a retry may bring it again
            self._seen.pop(ann.annotation_id, None)
        return False

    def _trace(self, s: IngestSpan, tenant_id: str | None) -> str:
        """The trajectory a span's trace id names within the caller's tenant."""
        trace = s.span.trace_id or "0" * 32
        ns = self._namespace(tenant_id)
        return ns.resolve(tenant_id or "", trace) if ns is not None else trace

    def _namespace(self, tenant_id: str | None) -> TrajectoryNamespace | None:
        ns = self.namespace
        return ns if tenant_id is not None and ns is not None and ns.enabled else None

    def to_event(self, s: IngestSpan, *, tenant_id: str | None = None, agent_id: str | None = None) -> Event:
        """The ATDP event for one span (see the module docstring for the mapping); ``agent_id`` names the
        agent when the span does not (``gen_ai.agent.id``)."""
        span = s.span
        ns = self._namespace(tenant_id)
        if isinstance(span.attributes.get("molt.event"), str):
            # an event Molt exported itself: as it was, in the caller's tenant — but the provenance only
            # the serving gateway stamps (which version answered) is not the writer's to claim
            ev = unclaimed(span_to_event(span), "otlp")
            if tenant_id is None:
                return ev
            update: dict[str, Any] = {"metadata": ev.metadata.model_copy(update={"tenant_id": tenant_id})}
            if ns is not None:
                tid = ns.resolve(tenant_id, ev.trajectory_id)
                update.update(trajectory_id=tid, event_id=ns.event_id(tid, ev.event_id), seq=None,
                              parent_id=ns.event_id(tid, ev.parent_id) if ev.parent_id else None)
            return ev.model_copy(update=update)
        trace = self._trace(s, tenant_id)
        parents = None
        if span.parent_span_id and not s.parent_remote:
            parents = {span.parent_span_id: event_id_for(trace, span.parent_span_id)}
        ev = span_to_event(span, trajectory_id=trace, parent_ids=parents)
        d = ev.model_dump(mode="json", exclude_none=True)
        d["event_id"] = event_id_for(trace, span.span_id or ev.event_id)
        a = span.attributes
        action, outcome = d.get("action") or {}, d.get("outcome")
        for key in ("arguments", "text"):
            if key in action:
                action[key] = self.capture.payload(action[key])
        if outcome is not None and "output" in outcome:
            outcome["output"] = self.capture.payload(outcome["output"])
        if span.status_code == "ERROR" or "error.type" in a:
            etype, emsg = s.exception or (None, None)
            outcome = outcome or {"status": "error"}
            outcome["error"] = {
                "type": str(a.get("error.type") or etype or "error")[:200],
                "message": (s.status_message or emsg or span.name)[:4000],
            }
        elif outcome is None and span.end_time_unix_nano is not None:
            outcome = {"status": OutcomeStatus.OK.value}
        if outcome is not None:
            d["outcome"] = Outcome.model_validate(outcome).model_dump(mode="json", exclude_none=True)
        inputs = a.get("gen_ai.input.messages")
        if inputs is not None:
            with contextlib.suppress(orjson.JSONDecodeError):
                inputs = orjson.loads(inputs) if isinstance(inputs, str) else inputs
            d["observation"] = Observation(data=self.capture.payload(inputs)).model_dump(mode="json")
        md = d.setdefault("metadata", {})
        usage = md.get("usage")
        if usage and "total_tokens" not in usage:
            usage["total_tokens"] = (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)
        tenant = tenant_id or self.tenant_id or s.resource.get("tenant.id")
        if tenant:
            md["tenant_id"] = str(tenant)
        if agent_id and not md.get("agent_id"):
            md["agent_id"] = agent_id[:256]
        tags = {**(md.get("tags") or {}), **self._tags}
        if s.resource.get("service.name"):
            tags["service.name"] = str(s.resource["service.name"])
        if tags:
            md["tags"] = tags
        d["provenance"] = Provenance(
            framework=s.scope_name or "opentelemetry",
            framework_version=s.scope_version,
            integration="otlp",
            integration_version=self._version,
        ).model_dump(mode="json", exclude_none=True)
        return Event.model_validate(d)

    # ---------------------------------------------------------------- both

    def flush(self, timeout: float | None = 10.0, *, deliver: bool = False) -> bool:
        """Wait until every span so far is durable in the Recorder (see :meth:`Capture.flush`)."""
        return self.capture.flush(timeout, deliver=deliver)

    @property
    def stats(self) -> CaptureStats:
        """Counters: events recorded, drops, mapping errors."""
        return self.capture.stats


class MoltSpanProcessor(SpanProcessor):
    """An OpenTelemetry SDK span processor that records finished spans as ATDP events, in-process.

    ``on_end`` costs the instrumented thread a queue append; mapping happens on Molt's dispatcher
    thread, and errors are counted in :attr:`stats`, never raised.

    Args:
        recorder: the Recorder (default: the process-wide one); other arguments as :class:`OtlpIngest`.

    Example::

        provider = TracerProvider()
        provider.add_span_processor(MoltSpanProcessor(recorder))
    """

    def __init__(self, recorder: Any = None, **options: Any):
        self.ingest = OtlpIngest(recorder, **options)
        self.capture = self.ingest.capture

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        """Nothing: a span is recorded when it ends."""

    def on_end(self, span: ReadableSpan) -> None:
        """Queue ``span`` for mapping on the dispatcher thread."""
        try:
            self.capture.submit(self._map, span)
        except Exception as exc:
            self.capture.fail(exc)

    def _map(self, span: ReadableSpan) -> None:
        self.ingest.record_span(from_readable(span))

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until the spans ended so far are durable in the Recorder."""
        return self.flush(timeout_millis / 1000)

    def flush(self, timeout: float | None = 10.0, *, deliver: bool = False) -> bool:
        """See :meth:`OtlpIngest.flush`."""
        return self.ingest.flush(timeout, deliver=deliver)

    def shutdown(self) -> None:
        """Flush what is queued (the Recorder stays open: it is the caller's)."""
        self.ingest.flush(5.0)

    @property
    def stats(self) -> CaptureStats:
        """See :attr:`OtlpIngest.stats`."""
        return self.capture.stats


# --------------------------------------------------------------------------- HTTP helpers


class _TooLarge(Exception):
    pass


def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    if encoding in ("", "identity"):
        data = body
    elif encoding == "gzip":
        data = _bounded(zlib.decompressobj(16 + zlib.MAX_WBITS), body, limit)
    elif encoding == "deflate":
        data = _bounded(zlib.decompressobj(), body, limit)
    else:
        raise ValueError(f"unsupported Content-Encoding {encoding!r} (use gzip, deflate or none)")
    if len(data) > limit:
        raise _TooLarge
    return data


def _bounded(d: Any, body: bytes, limit: int) -> bytes:
    out = d.decompress(body, limit + 1)  # a zip bomb stops at the limit
    if len(out) > limit:
        raise _TooLarge
    return bytes(out)


def _ctype(is_json: bool) -> str:
    return "application/json" if is_json else "application/x-protobuf"


def _status_body(message: str, is_json: bool) -> bytes:
    if is_json:
        return orjson.dumps({"code": 3, "message": message})
    try:
        from google.rpc import status_pb2  # type: ignore[import-untyped]

        return bytes(status_pb2.Status(code=3, message=message).SerializeToString())
    except ImportError:  # pragma: no cover
        return message.encode()


def _response_body(result: IngestResult, is_json: bool) -> bytes:
    if is_json:
        if not result.rejected:
            return b"{}"
        return orjson.dumps(
            {"partialSuccess": {"rejectedSpans": str(result.rejected), "errorMessage": result.error or ""}}
        )
    resp = trace_service.ExportTraceServiceResponse()
    if result.rejected:
        resp.partial_success.rejected_spans = result.rejected
        resp.partial_success.error_message = result.error or ""
    return bytes(resp.SerializeToString())
