"""What the console pages show, computed from store records: the causal tree of a trajectory, the
readable parts of an event, success-rate series for the signal charts, and the control plane's
versions and decisions as plain dicts.

Nothing here renders HTML or checks access; :mod:`molt.console.app` does both.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from markupsafe import Markup, escape

from molt.atdp.models import Event, Generation, ToolCall, UserMessage
from molt.store.query import Trajectory, TrajectorySummary

__all__ = ["EventNode", "causal_tree", "event_sections", "mark_redactions", "provenance_rows", "success_series"]

#: A redaction placeholder as the governance pipeline writes it: ``<EMAIL_ADDRESS_1>``, ``<PERSON_2>``.
PLACEHOLDER = re.compile(r"&lt;([A-Z][A-Z0-9_]*_\d+)&gt;")


def mark_redactions(text: Any) -> Markup:
    """``text`` HTML-escaped, with every redaction placeholder wrapped in ``<mark class="redacted">``."""
    return Markup(PLACEHOLDER.sub(r'<mark class="redacted">&lt;\1&gt;</mark>', str(escape(text))))


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()


@dataclass
class EventNode:
    """An event with its causal children (events whose ``parent_id`` is this event)."""

    event: Event
    sections: list[tuple[str, str]]
    children: list[EventNode] = field(default_factory=list)
    orphan: bool = False  # its parent_id names an event that is not in the trajectory


def causal_tree(traj: Trajectory) -> list[EventNode]:
    """The events of ``traj`` as a forest by ``parent_id``, siblings in ``seq`` order.

    An event whose parent is missing from the trajectory becomes a root marked ``orphan``; a
    ``parent_id`` cycle (which a valid chain cannot hold, but a tree must not loop on) is cut.
    """
    nodes = {e.event_id: EventNode(e, event_sections(e)) for e in traj.events}
    roots: list[EventNode] = []
    for e in traj.events:  # already in seq order
        node = nodes[e.event_id]
        parent = nodes.get(e.parent_id) if e.parent_id else None
        if parent is None or _is_ancestor(node, parent, nodes):
            node.orphan = e.parent_id is not None
            roots.append(node)
        else:
            parent.children.append(node)
    return roots


def _is_ancestor(node: EventNode, of: EventNode, nodes: dict[str, EventNode]) -> bool:
    seen: set[str] = set()
    cur: EventNode | None = of
    while cur is not None and cur.event.event_id not in seen:
        if cur is node:
            return True
        seen.add(cur.event.event_id)
        cur = nodes.get(cur.event.parent_id) if cur.event.parent_id else None
    return False


def event_sections(e: Event) -> list[tuple[str, str]]:
    """``(label, text)`` pairs that show what an event saw, thought, did and got back."""
    out: list[tuple[str, str]] = []
    obs = e.observation
    if obs is not None:
        if obs.text:
            out.append(("observation", obs.text))
        for m in obs.messages or []:
            content = m.content if isinstance(m.content, str) else _json(m.content)
            extra = f" → {_json([t.model_dump(mode='json') for t in m.tool_calls])}" if m.tool_calls else ""
            out.append((f"message ({m.role})", f"{content or ''}{extra}"))
        for p in obs.passages or []:
            out.append(("passage" + (f" {p.doc_id}" if p.doc_id else ""), p.text))
        if obs.data is not None:
            out.append(("observation data", _json(obs.data)))
    if e.hidden is not None:
        for name in ("plan", "reasoning", "scratchpad"):
            v = getattr(e.hidden, name)
            if v:
                out.append((name, v))
    a = e.action
    if isinstance(a, UserMessage):
        out.append(("user", a.content if isinstance(a.content, str) else _json(a.content)))
    elif isinstance(a, Generation):
        if a.text:
            out.append(("generation" + (f" ({a.model})" if a.model else ""), a.text))
        if a.tool_calls:
            out.append(("tool calls", _json([t.model_dump(mode="json") for t in a.tool_calls])))
        if a.tokens is not None:
            out.append(("tokens", f"{len(a.tokens.prompt_ids)} prompt, {len(a.tokens.completion_ids)} "
                                  f"completion, policy {a.tokens.policy_version or '-'}"))
    elif isinstance(a, ToolCall):
        out.append((f"tool {a.tool_name}", _json(a.arguments)))
    elif a is not None:
        out.append((a.type, _json(a.model_dump(mode="json", exclude={"type"}, exclude_none=True))))
    o = e.outcome
    if o is not None:
        if o.output is not None:
            out.append(("outcome", o.output if isinstance(o.output, str) else _json(o.output)))
        if o.error is not None:
            out.append(("error", f"{o.error.type}: {o.error.message}"))
    return out


def provenance_rows(traj: Trajectory) -> list[tuple[str, str]]:
    """Each provenance field with every distinct value it takes in the trajectory."""
    seen: dict[str, list[str]] = {}
    for e in traj.events:
        for k, v in e.provenance.model_dump(mode="json", exclude_none=True).items():
            text = v if isinstance(v, str) else _json(v)
            vals = seen.setdefault(k, [])
            if text not in vals:
                vals.append(text)
    for e in traj.events:  # the model each call went to
        if e.metadata.model:
            vals = seen.setdefault("model", [])
            if e.metadata.model not in vals:
                vals.append(e.metadata.model)
    return [(k, ", ".join(v)) for k, v in seen.items()]


# ------------------------------------------------------------------------------------------ signals


def _bucket_seconds(span_s: float, buckets: int) -> int:
    """A round bucket width that splits ``span_s`` into about ``buckets`` buckets."""
    raw = max(span_s / max(buckets, 1), 1.0)
    for nice in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400):
        if raw <= nice:
            return nice
    return int(math.ceil(raw / 86400) * 86400)


def success_series(summaries: Iterable[TrajectorySummary], *, buckets: int = 30,
                   bucket_s: int | None = None) -> dict[str, Any]:
    """Success rate over time per agent, from trajectory summaries.

    Each rewarded trajectory counts in the bucket of its last event: a success when its total reward
    is positive. Returns ``{"bucket_s", "series": {agent: [{"t", "rate", "n"}]}, "totals": {agent:
    {"success", "failure", "unrewarded", "error"}}}`` with ``t`` the bucket start (epoch seconds).
    """
    rows = list(summaries)
    totals: dict[str, dict[str, int]] = defaultdict(lambda: {"success": 0, "failure": 0, "error": 0,
                                                             "unrewarded": 0})
    for s in rows:
        totals[s.agent_id or "(none)"][s.outcome] += 1
    rewarded = [s for s in rows if s.reward is not None]
    if not rewarded:
        return {"bucket_s": bucket_s or 60, "series": {}, "totals": dict(totals)}
    times = [s.last_ts.timestamp() for s in rewarded]
    width = bucket_s or _bucket_seconds(max(times) - min(times), buckets)
    acc: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for s, t in zip(rewarded, times, strict=True):
        cell = acc[s.agent_id or "(none)"][int(t // width) * width]
        cell[0] += 1 if s.outcome == "success" else 0
        cell[1] += 1
    series = {agent: [_point(t, ok, n) for t, (ok, n) in sorted(cells.items())]
              for agent, cells in sorted(acc.items())}
    if bucket_s is None:
        # Traffic that arrived in a burst lands in one or two time buckets — one dot says nothing about the
        # trend. Such an agent's runs are shown in equal groups in arrival order instead (each point at its
        # group's first run), so a window of tens of runs is still a curve.
        for agent, pts in series.items():
            mine = sorted((t, s.outcome == "success") for s, t in zip(rewarded, times, strict=True)
                          if (s.agent_id or "(none)") == agent)
            if len(pts) < 3 <= len(mine):
                size = max(1, -(-len(mine) // min(buckets, max(3, len(mine) // 4))))
                groups = [mine[i:i + size] for i in range(0, len(mine), size)]
                series[agent] = [_point(g[0][0], sum(ok for _, ok in g), len(g)) for g in groups]
    return {"bucket_s": width, "series": series, "totals": dict(totals)}


def rate_text(k: int, n: int) -> str:
    """``k`` of ``n`` as a person reads it, with the 95 % Wilson interval: ``"60% of 20 (95% interval 39–78%)"``."""
    if n <= 0:
        return "—"
    p = _point(0.0, k, n)
    return f"{p['rate']:.0%} of {n} (95% interval {p['lo']:.0%}–{p['hi']:.0%})"


def _point(t: float, ok: int, n: int) -> dict[str, Any]:
    """One point of a success series with its 95 % Wilson interval."""
    z = 1.959963984540054
    p = ok / n
    den = 1 + z * z / n
    mid, half = (p + z * z / (2 * n)) / den, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return {"t": t, "rate": p, "n": n, "lo": max(0.0, mid - half), "hi": min(1.0, mid + half)}


# ------------------------------------------------------------------------------------ control plane


def version_row(v: Any) -> dict[str, Any]:
    """A :class:`molt.control.versions.AgentVersion` as a dict for the versions table."""
    return {"version_id": v.version_id, "agent_id": v.agent_id, "parent_id": v.parent_id,
            "created_at": v.created_at, "status": _status(v),
            "note": v.note or "", "created_by": getattr(v, "created_by", None) or "",
            "live": str(getattr(v.status, "value", v.status)) == "live"}


def _status(v: Any) -> str:
    status = str(getattr(v.status, "value", v.status))
    weight = getattr(v, "canary_weight", None)
    return f"{status} ({weight:.0%})" if status == "canary" and weight is not None else status


def decision_row(d: Any) -> dict[str, Any]:
    """A :class:`molt.control.log.DecisionRecord` as a dict for the decision log."""
    return {"cycle_id": d.cycle_id, "agent_id": d.agent_id, "created_at": d.created_at, "choice": d.choice,
            "reason": d.reason, "applied_version": d.applied_version,
            "signals": _json(d.signals or {}), "candidates": _json(list(d.candidates or []))}


def diff_rows(diff: Sequence[tuple[str, Any, Any]]) -> list[dict[str, str]]:
    """``(path, a, b)`` triples of a version diff as display strings."""
    def show(v: Any) -> str:
        return "—" if v is None else v if isinstance(v, str) else _json(v)

    return [{"path": p, "a": show(a), "b": show(b)} for p, a, b in diff]


def fmt_ts(ts: datetime | None) -> str:
    """A UTC time as ``2026-01-02 03:04:05``."""
    return "" if ts is None else ts.strftime("%Y-%m-%d %H:%M:%S")
