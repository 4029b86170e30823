"""Langfuse trace exports as ATDP rows.

Reads what Langfuse's public API and UI export give: traces with their ``observations`` and ``scores``
(``GET /api/public/traces/{id}``, a list of them, the ``{"data": [...]}`` page of a list call, or
JSON lines of traces), and flat ``{"traces": [...], "observations": [...], "scores": [...]}`` files
joined by ``traceId``. Mapping:

- a **trace** is a trajectory (``trajectory_id`` = the trace id) whose root event is an
  ``agent_step`` (``step_type="trace"``, the trace's input and output); ``sessionId`` → ``session_id``;
  the trace's ``name`` is every event's ``agent_id`` (the name the control plane evolves);
- an **observation** is an event under its ``parentObservationId`` (or the root): ``GENERATION`` →
  ``model_call`` (input messages as the observation, output text and tool calls, model, model
  parameters as sampling, usage), ``TOOL`` → ``tool_call``, ``RETRIEVER`` → ``retrieval`` (documents
  as passages), ``SPAN``/``EVENT``/``AGENT``/``CHAIN``/``EVALUATOR``/``GUARDRAIL``/``EMBEDDING`` →
  ``agent_step`` with the type as ``step_type``; level ``ERROR`` is an error outcome with the status
  message;
- a **score** is a late :class:`~molt.atdp.RewardAnnotation` on its observation (or the trajectory):
  ``NUMERIC`` and ``BOOLEAN`` values as the value and as the named dimension, ``source`` ``ANNOTATION``
  → ``human_label``, ``API`` → ``user_feedback``, ``EVAL`` → ``judge``; ``comment`` is the reason and
  ``annotator`` says ``langfuse:<source>:<name>``.

Provenance says where each event came from: ``integration="langfuse-import"`` and
``metadata.tags`` ``source.trace_id`` / ``source.id`` hold the Langfuse ids.

Refused with the reason: an unknown observation type, level, score source or data type, a
``CATEGORICAL`` score (no number to learn from), a record over the size limit, an unparsable time.

Not carried: cost details, prompt links (``promptId``), ``completionStartTime``, ``release``/``version``
strings, ``userId`` (an identity: map it to consent by policy, not by import), trace ``public`` and
``bookmarked`` flags, observation and trace ``metadata`` beyond what the mapping reads.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from molt.atdp.models import (
    AgentStep,
    Event,
    EventKind,
    Observation,
    RetrievalQuery,
    RewardAnnotation,
    ToolCall,
    Usage,
)
from molt.atdp.validate import MAX_RECORD_BYTES
from molt.errors import MoltError
from molt.interop.ingest import Row
from molt.interop.source import (
    derived_id,
    documents,
    generation,
    json_records,
    observation,
    outcome_of,
    parse_time,
    provenance,
    raw_size,
)

__all__ = ["INTEGRATION", "read_langfuse"]

INTEGRATION = "langfuse-import"
_STEP_TYPES = {"SPAN", "EVENT", "AGENT", "CHAIN", "EVALUATOR", "GUARDRAIL", "EMBEDDING"}
_TYPES = _STEP_TYPES | {"GENERATION", "TOOL", "RETRIEVER"}
_LEVELS = {"DEBUG", "DEFAULT", "WARNING", "ERROR"}
_SOURCES = {"ANNOTATION": "human_label", "API": "user_feedback", "EVAL": "judge"}
_DATA_TYPES = {"NUMERIC", "BOOLEAN", "CATEGORICAL"}
ROOT = "trace"


def _usage(o: Mapping[str, Any]) -> Usage | None:
    u = o.get("usageDetails") or o.get("usage") or {}
    if not isinstance(u, Mapping):
        return None
    inp = u.get("input", u.get("promptTokens"))
    out = u.get("output", u.get("completionTokens"))
    tot = u.get("total", u.get("totalTokens"))
    if inp is None and out is None and tot is None:
        return None
    return Usage(input_tokens=inp, output_tokens=out,
                 total_tokens=tot if tot is not None else (inp or 0) + (out or 0))


def _traces(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, trace)`` with observations and scores attached, or ``(where, MoltError)``."""
    flat_obs: dict[str, list[Any]] = defaultdict(list)
    flat_scores: dict[str, list[Any]] = defaultdict(list)
    traces: list[tuple[str, Any]] = []
    for where, rec in json_records(path, list_keys=("data",)):
        if isinstance(rec, Mapping) and ("traces" in rec or "observations" in rec) and "id" not in rec:
            for i, t in enumerate(rec.get("traces") or []):
                traces.append((f"{where}, traces[{i}]", t))
            for o in rec.get("observations") or []:
                flat_obs[str(o.get("traceId")) if isinstance(o, Mapping) else ""].append(o)
            for s in rec.get("scores") or []:
                flat_scores[str(s.get("traceId")) if isinstance(s, Mapping) else ""].append(s)
        else:
            traces.append((where, rec))
    for where, t in traces:
        if isinstance(t, Mapping) and t.get("id") is not None:
            tid = str(t["id"])
            if flat_obs.get(tid) or flat_scores.get(tid):
                t = {**t, "observations": [*(t.get("observations") or []), *flat_obs.pop(tid, [])],
                     "scores": [*(t.get("scores") or []), *flat_scores.pop(tid, [])]}
        yield where, t
    for tid, obs in flat_obs.items():
        yield (f"observations of trace {tid!r}",
               MoltError(f"{len(obs)} observation(s) of a trace that is not in the file"))


def read_langfuse(path: str | Path, *, max_record_bytes: int = MAX_RECORD_BYTES) -> Iterator[Row]:
    """The rows of a Langfuse export (see the module docstring)."""
    for where, t in _traces(Path(path)):
        if isinstance(t, Exception):
            yield Row(where=where, problem=str(t))
            continue
        if not isinstance(t, Mapping) or not isinstance(t.get("id"), str) or not t["id"]:
            yield Row(where=where, problem="not a Langfuse trace (no string id)")
            continue
        yield from _trace(where, t, max_record_bytes)


def _trace(where: str, t: Mapping[str, Any], limit: int) -> Iterator[Row]:
    tid = str(t["id"])
    where = f"{where} (trace {tid[:80]!r})"
    observations = t.get("observations") or []
    scores = t.get("scores") or []
    head = {k: v for k, v in t.items() if k not in ("observations", "scores")}
    root_id = derived_id(tid, ROOT)
    try:
        size = raw_size(head)
        if size > limit:
            raise ValueError(f"{size:,} bytes, over the {limit:,}-byte record limit")
        ts = parse_time(t.get("timestamp"))
        name = str(t.get("name") or "trace")
        yield Row(where=where, trajectory=tid, event=Event(
            event_id=root_id, trajectory_id=tid, session_id=t.get("sessionId"), kind=EventKind.AGENT_STEP,
            name=name, **({"timestamp": ts} if ts else {}),
            action=AgentStep(name=name, step_type="trace"),
            observation=observation(t.get("input")),
            outcome=outcome_of(t.get("output"), None, "error") if t.get("output") is not None else None,
            metadata={"tags": {"source": "langfuse", "source.trace_id": tid, "source.id": tid},
                      **({"agent_id": str(t["name"])} if t.get("name") else {})},
            provenance=provenance(INTEGRATION, "langfuse")))
    except (ValueError, TypeError, ValidationError) as exc:
        yield Row(where=where, trajectory=tid, problem=_reason(exc))
    for i, o in enumerate(observations):
        ow = f"{where}, observations[{i}]"
        try:
            yield Row(where=ow, trajectory=tid, event=_observation(tid, o, root_id, limit, t.get("name")))
        except (ValueError, TypeError, KeyError, ValidationError) as exc:
            yield Row(where=ow, trajectory=tid, problem=_reason(exc))
    for i, s in enumerate(scores):
        sw = f"{where}, scores[{i}]"
        try:
            yield Row(where=sw, trajectory=tid, reward=_score(tid, s))
        except (ValueError, TypeError, KeyError, ValidationError) as exc:
            yield Row(where=sw, trajectory=tid, problem=_reason(exc))


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        e = exc.errors()[0]
        return f"does not map to a valid ATDP record: {'.'.join(str(x) for x in e['loc'])}: {e['msg']}"[:500]
    if isinstance(exc, KeyError):
        return f"lacks the field {exc}"
    return str(exc)[:500]


def _observation(tid: str, o: Any, root_id: str, limit: int, agent: Any = None) -> Event:
    if not isinstance(o, Mapping) or not o.get("id"):
        raise ValueError("not a Langfuse observation (no id)")
    size = raw_size(o)
    if size > limit:
        raise ValueError(f"{size:,} bytes, over the {limit:,}-byte record limit")
    otype = str(o.get("type") or "SPAN").upper()
    if otype not in _TYPES:
        raise ValueError(f"unknown observation type {o.get('type')!r} (Langfuse types: {', '.join(sorted(_TYPES))})")
    level = str(o.get("level") or "DEFAULT").upper()
    if level not in _LEVELS:
        raise ValueError(f"unknown level {o.get('level')!r} (Langfuse levels: {', '.join(sorted(_LEVELS))})")
    oid = str(o["id"])
    start, end = parse_time(o.get("startTime")), parse_time(o.get("endTime"))
    name = str(o.get("name") or otype.lower())
    error = (o.get("statusMessage") or "error") if level == "ERROR" else None
    inputs, output = o.get("input"), o.get("output")
    obs: Observation | None = observation(inputs)
    md: dict[str, Any] = {"tags": {"source": "langfuse", "source.trace_id": tid, "source.id": oid,
                                   "source.type": otype},
                          "latency_ms": max(0.0, (end - start).total_seconds() * 1000) if start and end else None,
                          "agent_id": str(agent) if agent else None}  # the trace's name, as on its root
    if level == "WARNING" and o.get("statusMessage"):
        md["tags"]["source.warning"] = str(o["statusMessage"])[:500]
    if otype == "GENERATION":
        kind = EventKind.MODEL_CALL
        action: Any = generation(o.get("model"), output, sampling=o.get("modelParameters") or None)
        outcome = outcome_of(None, error, "langfuse.ERROR") if error else None
        md.update(model=o.get("model"), usage=_usage(o))
    elif otype == "TOOL":
        kind = EventKind.TOOL_CALL
        action = ToolCall(tool_name=name, arguments=_json(inputs))
        outcome = outcome_of(output, error, "langfuse.ERROR")
        obs = None
    elif otype == "RETRIEVER":
        kind = EventKind.RETRIEVAL
        query = inputs.get("query", inputs) if isinstance(inputs, Mapping) else inputs
        action = RetrievalQuery(query=query if isinstance(query, str) else str(_json(query)))
        passages = documents(output)
        obs = Observation(passages=passages) if passages else None
        outcome = outcome_of(None if passages else output, error, "langfuse.ERROR")
    else:
        kind = EventKind.AGENT_STEP
        action = AgentStep(name=name, step_type=otype.lower(), inputs=_json(inputs) if obs is None else None)
        outcome = outcome_of(output, error, "langfuse.ERROR") if output is not None or error else None
    parent = o.get("parentObservationId")
    return Event(event_id=derived_id(tid, oid), trajectory_id=tid, kind=kind, name=name[:512],
                 parent_id=derived_id(tid, str(parent)) if parent else root_id,
                 **({"timestamp": start} if start else {}), observation=obs, action=action, outcome=outcome,
                 metadata={k: v for k, v in md.items() if v is not None},
                 provenance=provenance(INTEGRATION, "langfuse"))


def _json(v: Any) -> Any:
    import orjson

    return None if v is None else orjson.loads(orjson.dumps(v, default=str))


def _score(tid: str, s: Any) -> RewardAnnotation:
    if not isinstance(s, Mapping) or not s.get("id"):
        raise ValueError("not a Langfuse score (no id)")
    source = str(s.get("source") or "API").upper()
    if source not in _SOURCES:
        raise ValueError(f"unknown score source {s.get('source')!r} (Langfuse sources: {', '.join(sorted(_SOURCES))})")
    dtype = str(s.get("dataType") or "NUMERIC").upper()
    if dtype not in _DATA_TYPES:
        raise ValueError(f"unknown score data type {s.get('dataType')!r} (Langfuse: {', '.join(sorted(_DATA_TYPES))})")
    value = s.get("value")
    if dtype == "CATEGORICAL" or isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"score {s.get('name')!r} has no numeric value ({dtype.lower()} "
                         f"{s.get('stringValue', value)!r}); a reward needs a number")
    name = str(s.get("name") or "score")
    created = parse_time(s.get("timestamp") or s.get("createdAt"))
    obs = s.get("observationId")
    return RewardAnnotation(annotation_id=derived_id(tid, f"score:{s['id']}"), trajectory_id=tid,
                            event_id=derived_id(tid, str(obs)) if obs else None, value=float(value),
                            dimensions={name: float(value)}, source=_SOURCES[source],
                            reason=str(s["comment"]) if s.get("comment") else None,
                            annotator=f"langfuse:{source.lower()}:{name}"[:200],
                            **({"created_at": created} if created else {}))
