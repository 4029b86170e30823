"""Trajectories as a Hugging Face ``datasets``-loadable file: messages + tools + rewards, for SFT/RL elsewhere.

One row per trajectory, written as Parquet with a fixed Arrow schema (so ``datasets`` never has to
guess types from mixed JSON)::

    from datasets import load_dataset
    ds = load_dataset("parquet", data_files="acme.hf.parquet", split="train")
    ds[0]["messages"], ds[0]["tools"], ds[0]["reward"]

Columns: ``trajectory_id``, ``tenant_id``, ``agent_id``, ``messages`` (OpenAI chat form: ``role``,
``content``, ``tool_calls`` with ``function.arguments`` as JSON text, ``tool_call_id``, ``name``),
``tools`` (``type="function"`` with ``function.name`` / ``description`` / ``parameters`` as JSON
text), ``rewards`` (each late reward: ``value``, ``source``, ``event_id``, ``reason``,
``dimensions`` as JSON text), ``reward`` (inline and late rewards summed; null when there are none),
``status`` (``error`` if an event ended in error, else ``ok``).

The conversation is the last model call's input messages plus its answer when the trajectory
recorded them (the gateway, Langfuse and LangSmith generations do); otherwise it is rebuilt from the
events in order (user messages, model answers with their tool calls, tool results). Tools are the
schemas the model was given when recorded (``observation.data.tools``), else the names it called, with
empty parameters. Redacted text stays redacted; an erased payload contributes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from molt.atdp.models import Event, EventKind, Generation, Message, ToolCall, UserMessage
from molt.store import Filter

__all__ = ["SCHEMA", "export_dataset", "trajectory_row"]


def _schema() -> Any:
    import pyarrow as pa

    call = pa.struct([("id", pa.string()), ("type", pa.string()),
                      ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())]))])
    message = pa.struct([("role", pa.string()), ("content", pa.string()), ("tool_calls", pa.list_(call)),
                         ("tool_call_id", pa.string()), ("name", pa.string())])
    tool = pa.struct([("type", pa.string()), ("function", pa.struct([
        ("name", pa.string()), ("description", pa.string()), ("parameters", pa.string())]))])
    reward = pa.struct([("value", pa.float64()), ("source", pa.string()), ("event_id", pa.string()),
                        ("reason", pa.string()), ("dimensions", pa.string())])
    return pa.schema([("trajectory_id", pa.string()), ("tenant_id", pa.string()), ("agent_id", pa.string()),
                      ("messages", pa.list_(message)), ("tools", pa.list_(tool)), ("rewards", pa.list_(reward)),
                      ("reward", pa.float64()), ("status", pa.string())])


SCHEMA = _schema()


def _text(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    return orjson.dumps(content).decode()


def _calls(calls: Any) -> list[dict[str, Any]] | None:
    if not calls:
        return None
    return [{"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments if isinstance(c.arguments, str)
                          else orjson.dumps(c.arguments).decode()}} for c in calls]


def _msg(m: Message) -> dict[str, Any]:
    return {"role": m.role, "content": _text(m.content), "tool_calls": _calls(m.tool_calls),
            "tool_call_id": m.tool_call_id, "name": m.name}


def _answer(g: Generation) -> dict[str, Any]:
    return {"role": "assistant", "content": g.text, "tool_calls": _calls(g.tool_calls), "tool_call_id": None,
            "name": None}


def _messages(events: list[Event]) -> list[dict[str, Any]]:
    calls = [e for e in events if e.kind == EventKind.MODEL_CALL and isinstance(e.action, Generation)]
    last = next((e for e in reversed(calls) if e.observation is not None and e.observation.messages), None)
    if last is not None:
        assert last.observation is not None and last.observation.messages is not None
        return [*map(_msg, last.observation.messages), _answer(last.action)]  # type: ignore[arg-type]
    out: list[dict[str, Any]] = []
    for e in events:
        a = e.action
        if isinstance(a, UserMessage):
            out.append({"role": "user", "content": _text(a.content), "tool_calls": None, "tool_call_id": None,
                        "name": None})
        elif isinstance(a, Generation):
            out.append(_answer(a))
        elif isinstance(a, ToolCall) and e.outcome is not None:
            out.append({"role": "tool", "content": _text(e.outcome.output if e.outcome.error is None
                                                         else e.outcome.error.message),
                        "tool_calls": None, "tool_call_id": a.call_id, "name": a.tool_name})
    return out


def _tools(events: list[Event]) -> list[dict[str, Any]]:
    given: dict[str, dict[str, Any]] = {}
    used: list[str] = []
    for e in events:
        data = e.observation.data if e.observation is not None else None
        tools = data.get("tools") if isinstance(data, dict) else None
        for t in tools if isinstance(tools, list) else []:
            fn = t.get("function") if isinstance(t, dict) and isinstance(t.get("function"), dict) else t
            if isinstance(fn, dict) and fn.get("name"):
                given[str(fn["name"])] = {"type": "function", "function": {
                    "name": str(fn["name"]), "description": fn.get("description"),
                    "parameters": orjson.dumps(fn.get("parameters") or {}).decode()}}
        if isinstance(e.action, Generation):
            used += [c.name for c in e.action.tool_calls or []]
        elif isinstance(e.action, ToolCall):
            used.append(e.action.tool_name)
    for name in used:
        given.setdefault(name, {"type": "function", "function": {"name": name, "description": None,
                                                                  "parameters": "{}"}})
    return list(given.values())


def trajectory_row(events: list[Event], rewards: list[Any]) -> dict[str, Any]:
    """One trajectory as a dataset row (see the module docstring)."""
    first = events[0]
    inline = [e.reward for e in events if e.reward is not None]
    values = inline + [r.value for r in rewards]
    return {
        "trajectory_id": first.trajectory_id, "tenant_id": first.metadata.tenant_id,
        "agent_id": next((e.metadata.agent_id for e in events if e.metadata.agent_id), None),
        "messages": _messages(events), "tools": _tools(events),
        "rewards": [{"value": r.value, "source": r.source.value, "event_id": r.event_id, "reason": r.reason,
                     "dimensions": orjson.dumps(r.dimensions).decode() if r.dimensions else None} for r in rewards],
        "reward": float(sum(values)) if values else None,
        "status": "error" if any(e.outcome is not None and e.outcome.status.value == "error" for e in events) else "ok",
    }


def _rows(reader: Any, where: Filter | str | None, clean: Callable[[list[Event]], list[Event]] | None
          ) -> Iterator[tuple[dict[str, Any], int]]:
    for tid in reader.trajectory_ids(where):
        traj = reader.trajectory(tid)
        events = [e for e in traj.events if e is not None]
        if clean is not None:
            events = clean(events)
        if events:
            yield trajectory_row(events, list(traj.rewards)), len(events)


def export_dataset(reader: Any, path: str | Path, *, where: Filter | str | None = None, batch: int = 512,
                   progress: Callable[[int], None] | None = None,
                   clean: Callable[[list[Event]], list[Event]] | None = None) -> int:
    """Write every trajectory ``reader`` (a store or a tenant view) holds as one dataset row; returns rows.

    ``clean`` runs over each trajectory's events first: a dataset is training material, so ``molt
    trajectories export --format hf`` passes the thorough redaction pass
    (:meth:`molt.governance.thorough.ThoroughPass.clean_many`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 0
    with pq.ParquetWriter(str(path), SCHEMA) as writer:
        rows: list[dict[str, Any]] = []
        for row, events in _rows(reader, where, clean):
            rows.append(row)
            if progress is not None:
                progress(events)
            if len(rows) >= batch:
                writer.write_table(pa.Table.from_pylist(rows, schema=SCHEMA))
                n, rows = n + len(rows), []
        if rows or n == 0:
            writer.write_table(pa.Table.from_pylist(rows, schema=SCHEMA))
            n += len(rows)
    return n
