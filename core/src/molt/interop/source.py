"""What the vendor importers share: reading a JSON or JSON-lines export, times, ids, events.

Ids are derived, never invented: an event's id is a UUID from (source trace id, source record id)
(:func:`molt.capture.otlp.event_id_for`, the rule OTLP ingest uses), so a rerun of the same export
names the same events and is deduplicated by the store.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from molt.atdp.models import (
    Generation,
    Observation,
    Outcome,
    Passage,
    Provenance,
)
from molt.capture.adapt import distribution_version
from molt.capture.otlp import event_id_for
from molt.errors import MoltError
from molt.interop.messages import as_messages, tool_calls_of

__all__ = ["derived_id", "documents", "generation", "json_records", "observation", "outcome_of", "parse_time",
           "provenance", "raw_size"]


def derived_id(trace_id: str, source_id: str) -> str:
    """The event (or annotation) id of source record ``source_id`` in trace ``trace_id``."""
    return event_id_for(trace_id, source_id)


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 time (``Z`` or an offset; a naive one is UTC), or ``None``."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000 if value > 1e11 else value, tz=UTC)
    ts = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def raw_size(record: Any) -> int:
    """Serialized size of a source record (checked against the record limit before mapping, which
    would otherwise only truncate its fields)."""
    return len(orjson.dumps(record, default=str))


def json_records(path: Path, *, list_keys: tuple[str, ...] = ("data",)) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` for each top-level record of a JSON or JSON-lines export.

    JSON lines (a first line that parses, and more after it) are read a line at a time, so memory is
    bounded by the longest line, not the file; a line that does not parse yields ``(where,
    MoltError)`` — a truncated last line costs that line only. Otherwise the file is one JSON
    document (one object, or a list, or an object whose ``list_keys`` entry is the list), parsed
    whole, and its items are yielded. A file that is neither is refused whole.
    """
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below; a generator holds it while it is consumed
    except OSError as exc:
        raise MoltError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    with f:
        lineno, first = _next_line(f, 0)
        try:
            head = orjson.loads(first)
        except orjson.JSONDecodeError:
            head = _NOT_JSON
        if head is not _NOT_JSON:
            second_no, second = _next_line(f, lineno)
            if second:  # JSON lines
                yield f"line {lineno}", head
                del head
                lineno, line = second_no, second
                while line:
                    try:
                        yield f"line {lineno}", orjson.loads(line)
                    except orjson.JSONDecodeError as exc:
                        yield f"line {lineno}", MoltError(f"not valid JSON (truncated?): {exc}")
                    lineno, line = _next_line(f, lineno)
                return
            doc = head  # one document on one line
        else:  # a document over several lines (pretty-printed), or not JSON at all
            f.seek(0)
            data = f.read()
            try:
                doc = orjson.loads(data)
            except orjson.JSONDecodeError as whole:
                raise MoltError(f"{path} is not valid JSON nor JSON lines ({whole}); a truncated export cannot "
                                f"be imported — export it again.") from None
            del data
    if isinstance(doc, Mapping):
        for key in list_keys:
            if isinstance(doc.get(key), list):
                doc = doc[key]
                break
    if isinstance(doc, list):
        for i, item in enumerate(doc):
            yield f"item {i}", item
    else:
        yield "document", doc


_NOT_JSON = object()


def _next_line(f: Any, lineno: int) -> tuple[int, bytes]:
    """The next non-blank line after line ``lineno`` (``(n, b"")`` at the end of the file)."""
    while True:
        line = f.readline()
        lineno += 1
        if not line or line.strip():
            return lineno, line


def provenance(integration: str, framework: str | None = None, framework_version: str | None = None) -> Provenance:
    """Provenance of an imported event: the importer (``langfuse-import``) at molt-core's version and
    the framework the source names."""
    return Provenance(integration=integration, integration_version=distribution_version("molt-core"),
                      framework=framework, framework_version=framework_version)


def generation(model: str | None, output: Any, *, finish_reason: str | None = None,
               sampling: Mapping[str, Any] | None = None) -> Generation:
    """A model call's output in any of the vendors' shapes: text, an assistant message, LangChain
    ``generations``, OpenAI ``choices``."""
    text: str | None = None
    msg: Any = output
    if isinstance(output, Mapping):
        if isinstance(output.get("generations"), list):  # LangChain LLMResult
            gens = output["generations"]
            first = gens[0][0] if gens and isinstance(gens[0], list) and gens[0] else (gens[0] if gens else {})
            info = (first.get("generation_info") or {}) if isinstance(first, Mapping) else {}
            finish_reason = finish_reason or info.get("finish_reason")
            msg = first.get("message") or {"role": "assistant", "content": first.get("text")}
        elif isinstance(output.get("choices"), list) and output["choices"]:  # OpenAI response
            choice = output["choices"][0]
            finish_reason = finish_reason or choice.get("finish_reason")
            msg = choice.get("message") or {"role": "assistant", "content": choice.get("text")}
    if isinstance(msg, str):
        text = msg
    elif msg is not None:
        got = as_messages([msg])
        if got:
            m = got[0]
            text = m.content if isinstance(m.content, str) else (
                orjson.dumps(m.content).decode() if m.content else None)
            calls = tool_calls_of(msg if not (isinstance(msg, Mapping) and msg.get("lc") == 1) else msg["kwargs"])
            return Generation(model=model, text=text, tool_calls=calls or None, finish_reason=finish_reason,
                              sampling=dict(sampling) if sampling else None)
        text = orjson.dumps(msg, default=str).decode()
    return Generation(model=model, text=text, finish_reason=finish_reason,
                      sampling=dict(sampling) if sampling else None)


def observation(inputs: Any) -> Observation | None:
    """What a step saw: chat messages when ``inputs`` is a message list, else the data as given."""
    if inputs is None:
        return None
    msgs = as_messages(inputs)
    if msgs is not None:
        return Observation(messages=msgs)
    if isinstance(inputs, str):
        return Observation(text=inputs)
    return Observation(data=orjson.loads(orjson.dumps(inputs, default=str)))


def documents(output: Any) -> list[Passage] | None:
    """Retrieved documents (LangChain ``Document``s, ``{text|content|page_content, …}``) as passages."""
    docs = output.get("documents") if isinstance(output, Mapping) else output
    if not isinstance(docs, list):
        return None
    out = []
    for d in docs:
        if isinstance(d, str):
            out.append(Passage(text=d))
        elif isinstance(d, Mapping):
            text = d.get("page_content") or d.get("text") or d.get("content")
            if text is None:
                return None
            md: Mapping[str, Any] = d["metadata"] if isinstance(d.get("metadata"), Mapping) else {}
            doc_id = d.get("id") or md.get("id") or md.get("source")
            out.append(Passage(text=str(text), doc_id=str(doc_id) if doc_id is not None else None,
                               score=d.get("score") if isinstance(d.get("score"), int | float) else None))
        else:
            return None
    return out


def outcome_of(output: Any, error: str | None, error_type: str) -> Outcome | None:
    """The outcome: an error when the source says so, else ``ok`` with the output."""
    data = None if output is None else orjson.loads(orjson.dumps(output, default=str))
    if error:
        return Outcome(status="error", output=data, error={"type": error_type, "message": str(error)[:4000]})
    return Outcome(status="ok", output=data)
