"""LangSmith run exports as ATDP rows.

Reads LangSmith's run schema as its API and SDK export it (``client.list_runs`` dumped to JSON or JSON
lines, or ``{"runs": [...], "feedback": [...]}``): each run has ``id``, ``trace_id``,
``parent_run_id``, ``run_type``, ``name``, ``inputs``, ``outputs``, ``error``, ``status``,
``start_time``/``end_time`` and token counts; feedback (``client.list_feedback``) has ``run_id``,
``key``, ``score``, ``comment``, ``correction`` and ``feedback_source``. Records of either kind may
be mixed in one list or file (a feedback record is one with ``run_id`` and ``key``). Mapping:

- a **trace** (the runs sharing ``trace_id``; without it, the root reached by ``parent_run_id``) is a
  trajectory, each **run** an event under its parent run: ``llm`` → ``model_call`` (input messages,
  LangChain's serialized ones included, as the observation; ``generations`` / ``choices`` output as
  text and tool calls; token counts as usage), ``tool`` → ``tool_call`` (inputs as arguments),
  ``retriever`` → ``retrieval`` (documents as passages), ``chain``/``prompt``/``parser``/``embedding``
  → ``agent_step``; ``error`` (or status ``error``) is an error outcome;
- a **feedback** is a late :class:`~molt.atdp.RewardAnnotation` on its run's event: ``score`` (a
  boolean as 1/0) as the value and the named dimension ``key``; a ``correction`` makes it a
  ``user_correction``, else ``feedback_source.type`` says who: ``model`` / ``auto_eval`` →
  ``judge``, ``api`` / ``app`` → ``user_feedback``, ``human`` / ``annotation`` → ``human_label``.

Provenance: ``integration="langsmith-import"``; ``metadata.tags`` ``source.trace_id`` / ``source.id``
hold the LangSmith ids. Refused with the reason: an unknown ``run_type``, ``status`` or feedback
source, feedback without a numeric score, feedback on a run not in the file, a record over the size
limit, a time that does not parse.

Not carried: ``serialized`` (the component's constructor), ``extra`` beyond the model name, run
``events`` (streaming tokens), ``dotted_order``, ``reference_example_id``, ``feedback_stats``, costs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
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

__all__ = ["INTEGRATION", "read_langsmith"]

INTEGRATION = "langsmith-import"
_RUN_TYPES = {"llm", "chain", "tool", "retriever", "embedding", "prompt", "parser"}
_STATUSES = {"success", "error", "pending"}
_FEEDBACK_SOURCES = {"model": "judge", "auto_eval": "judge", "api": "user_feedback", "app": "user_feedback",
                     "human": "human_label", "annotation": "human_label"}


def _is_feedback(rec: Any) -> bool:
    return isinstance(rec, Mapping) and "run_id" in rec and "key" in rec


def read_langsmith(path: str | Path, *, max_record_bytes: int = MAX_RECORD_BYTES) -> Iterator[Row]:
    """The rows of a LangSmith export (see the module docstring)."""
    runs: list[tuple[str, Mapping[str, Any]]] = []
    feedback: list[tuple[str, Mapping[str, Any]]] = []
    for where, rec in json_records(Path(path), list_keys=("data",)):
        if isinstance(rec, Exception):
            yield Row(where=where, problem=str(rec))
        elif isinstance(rec, Mapping) and isinstance(rec.get("runs"), list) and "id" not in rec:
            runs.extend((f"{where}, runs[{i}]", r) for i, r in enumerate(rec["runs"]))
            feedback.extend((f"{where}, feedback[{i}]", f) for i, f in enumerate(rec.get("feedback") or []))
        elif _is_feedback(rec):
            feedback.append((where, rec))
        elif isinstance(rec, Mapping) and rec.get("id"):
            runs.append((where, rec))
            feedback.extend((f"{where}, feedback[{i}]", f) for i, f in enumerate(rec.get("feedback") or []))
        else:
            yield Row(where=where, problem="neither a LangSmith run (no id) nor feedback (no run_id and key)")
    parent_of = {str(r["id"]): (str(r["parent_run_id"]) if r.get("parent_run_id") else None) for _, r in runs}
    trace_of: dict[str, str] = {}
    for _, r in runs:
        rid = str(r["id"])
        if r.get("trace_id"):
            trace_of[rid] = str(r["trace_id"])
            continue
        node, seen = rid, set()
        while parent_of.get(node) is not None and node not in seen:  # a cycle stops here; the importer refuses it
            seen.add(node)
            node = parent_of[node]  # type: ignore[assignment]
        trace_of[rid] = node
    for where, r in runs:
        rid = str(r["id"])
        tid = trace_of[rid]
        w = f"{where} (run {rid[:80]!r})"
        try:
            yield Row(where=w, trajectory=tid, event=_run(tid, r, max_record_bytes))
        except (ValueError, TypeError, KeyError, ValidationError) as exc:
            yield Row(where=w, trajectory=tid, problem=_reason(exc))
    for where, f in feedback:
        run_id = str(f.get("run_id"))
        ftid: str | None = trace_of.get(run_id) or (str(f["trace_id"]) if f.get("trace_id") else None)
        if ftid is None:
            yield Row(where=where, problem=f"feedback on run {run_id[:80]!r}, which is not in this file")
            continue
        try:
            yield Row(where=where, trajectory=ftid, reward=_feedback(ftid, f, run_id))
        except (ValueError, TypeError, KeyError, ValidationError) as exc:
            yield Row(where=where, trajectory=ftid, problem=_reason(exc))


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        e = exc.errors()[0]
        return f"does not map to a valid ATDP record: {'.'.join(str(x) for x in e['loc'])}: {e['msg']}"[:500]
    if isinstance(exc, KeyError):
        return f"lacks the field {exc}"
    return str(exc)[:500]


def _json(v: Any) -> Any:
    return None if v is None else orjson.loads(orjson.dumps(v, default=str))


def _unwrap(v: Any, *keys: str) -> Any:
    """A single-key mapping's value (``{"input": "..."}`` → ``"..."``), else ``v``."""
    if isinstance(v, Mapping) and len(v) == 1:
        (k, inner), = v.items()
        if k in keys:
            return inner
    return v


def _run(tid: str, r: Mapping[str, Any], limit: int) -> Event:
    size = raw_size(r)
    if size > limit:
        raise ValueError(f"{size:,} bytes, over the {limit:,}-byte record limit")
    rid = str(r["id"])
    rtype = str(r.get("run_type") or "chain")
    if rtype not in _RUN_TYPES:
        raise ValueError(f"unknown run_type {r.get('run_type')!r} "
                         f"(LangSmith run types: {', '.join(sorted(_RUN_TYPES))})")
    status = r.get("status")
    if status is not None and status not in _STATUSES:
        raise ValueError(f"unknown status {status!r} (LangSmith statuses: {', '.join(sorted(_STATUSES))})")
    start, end = parse_time(r.get("start_time")), parse_time(r.get("end_time"))
    name = str(r.get("name") or rtype)
    error = r.get("error") or ("error" if status == "error" else None)
    inputs, outputs = r.get("inputs"), r.get("outputs")
    obs: Observation | None = None
    md: dict[str, Any] = {"tags": {"source": "langsmith", "source.trace_id": tid, "source.id": rid,
                                   "source.run_type": rtype},
                          "latency_ms": max(0.0, (end - start).total_seconds() * 1000) if start and end else None}
    if r.get("session_name") or r.get("session_id"):
        md["tags"]["source.project"] = str(r.get("session_name") or r.get("session_id"))
    if rtype == "llm":
        kind = EventKind.MODEL_CALL
        extra: Mapping[str, Any] = r["extra"] if isinstance(r.get("extra"), Mapping) else {}
        params: Mapping[str, Any] = extra["invocation_params"] if isinstance(extra.get("invocation_params"),
                                                                              Mapping) else {}
        model = params.get("model") or params.get("model_name") or (extra.get("metadata") or {}).get("ls_model_name")
        msgs = inputs.get("messages", inputs.get("prompts")) if isinstance(inputs, Mapping) else inputs
        obs = observation(msgs)
        action: Any = generation(str(model) if model else None, outputs)
        outcome = outcome_of(None, error, "langsmith.error") if error else None
        pt, ct = r.get("prompt_tokens"), r.get("completion_tokens")
        if pt is not None or ct is not None:
            md["usage"] = Usage(input_tokens=pt, output_tokens=ct,
                                total_tokens=r.get("total_tokens") or (pt or 0) + (ct or 0))
        md["model"] = str(model) if model else None
    elif rtype == "tool":
        kind = EventKind.TOOL_CALL
        action = ToolCall(tool_name=name, arguments=_json(_unwrap(inputs, "input")))
        outcome = outcome_of(_unwrap(outputs, "output"), error, "langsmith.error")
    elif rtype == "retriever":
        kind = EventKind.RETRIEVAL
        query = _unwrap(inputs, "query", "input")
        action = RetrievalQuery(query=query if isinstance(query, str) else orjson.dumps(_json(query)).decode())
        passages = documents(outputs)
        obs = Observation(passages=passages) if passages else None
        outcome = outcome_of(None if passages else outputs, error, "langsmith.error")
    else:
        kind = EventKind.AGENT_STEP
        obs = observation(inputs.get("messages") if isinstance(inputs, Mapping) and "messages" in inputs else None)
        action = AgentStep(name=name, step_type=rtype, inputs=_json(inputs) if obs is None else None)
        outcome = outcome_of(outputs, error, "langsmith.error") if outputs is not None or error else None
    parent = r.get("parent_run_id")
    return Event(event_id=derived_id(tid, rid), trajectory_id=tid, kind=kind, name=name[:512],
                 parent_id=derived_id(tid, str(parent)) if parent else None,
                 session_id=str(r["thread_id"]) if r.get("thread_id") else None,
                 **({"timestamp": start} if start else {}), observation=obs, action=action, outcome=outcome,
                 metadata={k: v for k, v in md.items() if v is not None},
                 provenance=provenance(INTEGRATION, "langsmith"))


def _feedback(tid: str, f: Mapping[str, Any], run_id: str) -> RewardAnnotation:
    if not f.get("id"):
        raise ValueError("not LangSmith feedback (no id)")
    fs: Mapping[str, Any] = f["feedback_source"] if isinstance(f.get("feedback_source"), Mapping) else {}
    ftype = str(fs.get("type") or "api")
    if f.get("correction") is not None:
        source = "user_correction"
    elif ftype in _FEEDBACK_SOURCES:
        source = _FEEDBACK_SOURCES[ftype]
    else:
        raise ValueError(f"unknown feedback_source type {ftype!r} (known: {', '.join(sorted(_FEEDBACK_SOURCES))})")
    score = f.get("score")
    if isinstance(score, bool):
        score = float(score)
    if not isinstance(score, int | float):
        raise ValueError(f"feedback {f.get('key')!r} has no numeric score ({score!r}); a reward needs a number")
    key = str(f.get("key") or "feedback")
    corr = f.get("correction")
    reason = f.get("comment")
    if corr is not None:
        text = corr if isinstance(corr, str) else orjson.dumps(corr, default=str).decode()
        reason = f"{reason}\ncorrection: {text}" if reason else f"correction: {text}"
    created = parse_time(f.get("created_at"))
    return RewardAnnotation(annotation_id=derived_id(tid, f"feedback:{f['id']}"), trajectory_id=tid,
                            event_id=derived_id(tid, run_id), value=float(score), dimensions={key: float(score)},
                            source=source, reason=str(reason) if reason else None,
                            annotator=f"langsmith:{ftype}:{key}"[:200], **({"created_at": created} if created else {}))
