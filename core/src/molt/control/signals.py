"""Signals over a sliding window of trajectories, per tenant and agent (broken down by task, tool
and policy version).

:func:`episodes` reads a window of trajectories (chain-verified, through replay's loader) and reduces
each to an :class:`Episode`: outcome, the tool calls with their errors, user corrections, the
verifier's reason, cost. :func:`compute_signals` turns a window of episodes into :class:`Signals`:

- success rate (with a Wilson interval) and mean reward; per task and per policy version;
- user-correction rate; a process-reward estimate (share of tool calls that succeeded);
- tool-failure clusters by tool, error type and argument pattern;
- canary deltas between each non-live version seen in the window and the live one;
- cost per success (model calls and tokens per successful trajectory);
- input drift: total-variation distance between the task mix of the older and newer half of the
  window, and the relative change in question length.

Outcome of a trajectory — a failure is what production says it is (:attr:`Episode.failure_signals`
names what said so): the latest reward from an outcome source (verifier, test result, human label,
judge, environment, user feedback through the gateway) says success (``> 0.5``) or failure (so a
negative late reward or a judge's FAIL is a failure); and any of these makes a failure whatever a
reward says: a ``user_correction`` (its ``reason`` is the corrected answer), a ``FEEDBACK`` event's
``correction`` or a ``rating`` below zero (a thumbs-down), a tool error the agent did not recover from
(no later successful call of the same tool). A trajectory nothing spoke about stays unscored.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from molt.atdp.models import EventKind, OutcomeStatus, RewardSource
from molt.backends.chat_format import text_content
from molt.replay.load import load_trajectories
from molt.stats import wilson
from molt.store import Filter, Store
from molt.store.query import Trajectory

__all__ = ["Episode", "Signals", "ToolUse", "arg_pattern", "compute_signals", "episode_of", "episodes"]

_OUTCOME_SOURCES = {RewardSource.VERIFIER, RewardSource.TEST_RESULT, RewardSource.HUMAN_LABEL, RewardSource.JUDGE,
                    RewardSource.ENVIRONMENT, RewardSource.USER_FEEDBACK}


@dataclass(frozen=True)
class ToolUse:
    """One tool call: name, arguments, and the error (type, message) when it failed."""

    name: str
    arguments: Any
    ok: bool
    error_type: str | None = None
    error_message: str | None = None


@dataclass
class Episode:
    """A trajectory as the control plane sees it."""

    trajectory_id: str
    tenant_id: str | None
    agent_id: str | None
    task: str | None
    policy_version: str | None
    started_at: datetime
    success: bool | None
    reward: float | None
    question: str
    answer: str | None
    tools: list[ToolUse] = field(default_factory=list)
    offered_tools: list[dict[str, Any]] = field(default_factory=list)
    corrections: list[str] = field(default_factory=list)
    verdict: str | None = None
    model_calls: int = 0
    tokens: int = 0
    #: What said this trajectory failed: "reward" (a low or negative outcome reward), "judge",
    #: "correction", "thumbs_down", "tool_error" (empty for a success or an unscored run).
    failure_signals: list[str] = field(default_factory=list)
    #: What each signal on this call said, success (True) or failure (False): the latest reward of each
    #: outcome source by its name ("verifier", "judge", ...), and "correction" / "thumbs_down" /
    #: "tool_error" (False) when present — what :func:`molt.control.significance.flip_rate` compares.
    votes: dict[str, bool] = field(default_factory=dict)

    @property
    def tool_errors(self) -> list[ToolUse]:
        return [t for t in self.tools if not t.ok]


def episode_of(traj: Trajectory) -> Episode:
    """Reduce one trajectory to an :class:`Episode`."""
    evs = traj.events
    first = evs[0]
    md = first.metadata
    version = next((e.provenance.policy_version for e in evs
                    if e.provenance is not None and e.provenance.policy_version), None)
    question = ""
    answer: str | None = None
    tools: list[ToolUse] = []
    offered: list[dict[str, Any]] = []
    corrections: list[str] = []
    calls = tokens = 0
    thumbs_down = False
    for e in evs:
        a: Any = e.action
        if e.kind == EventKind.USER_MESSAGE and not question:
            question = a.content if isinstance(a.content, str) else str(a.content)
        elif e.kind == EventKind.MODEL_CALL:
            calls += 1
            if not question:  # the gateway records model calls only: the request is the first user turn
                question = _first_user(e)
            if getattr(a, "text", None):
                answer = a.text
            md_usage = e.metadata.usage if e.metadata else None
            if md_usage is not None and md_usage.total_tokens:
                tokens += md_usage.total_tokens
            elif getattr(a, "tokens", None) is not None:
                tokens += len(a.tokens.prompt_ids) + len(a.tokens.completion_ids)
            data = e.observation.data if e.observation is not None else None
            if not offered and isinstance(data, dict) and isinstance(data.get("tools"), list):
                offered = data["tools"]
        elif e.kind == EventKind.TOOL_CALL:
            out = e.outcome
            err = out.error if out is not None else None
            if out is None or out.status == OutcomeStatus.OK:
                # Captured from the agent's tool message (the gateway), an error is only text.
                found = _error_in(out.output if out is not None else None)
                tools.append(ToolUse(a.tool_name, a.arguments, found is None, *(found or (None, None))))
            else:
                tools.append(ToolUse(a.tool_name, a.arguments, False, err.type if err else None,
                                     err.message if err else None))
        elif e.kind == EventKind.FEEDBACK:
            if getattr(a, "correction", None):
                corrections.append(a.correction)
            if isinstance(getattr(a, "rating", None), int | float) and a.rating < 0:
                thumbs_down = True
    success: bool | None = None
    reward: float | None = None
    verdict: str | None = None
    said: list[str] = []
    votes: dict[str, bool] = {}
    for r in sorted(traj.rewards, key=lambda r: r.created_at):
        if r.source in _OUTCOME_SOURCES:
            votes[str(r.source)] = r.value > 0.5
            reward, success, verdict = r.value, r.value > 0.5, r.reason
            said = [] if success else ["judge" if r.source == RewardSource.JUDGE else "reward"]
        elif r.source == RewardSource.USER_CORRECTION:
            success = False
            said.append("correction")
            if r.reason:
                corrections.append(r.reason)
    # Any failure signal makes a failure, whatever an outcome reward says: rewards are noisy and late,
    # and a user who corrected the answer or a tool error the agent never recovered from is evidence
    # of its own.
    if success is False and not said:
        said = ["reward"]
    for signal, present in (("correction", bool(corrections)), ("thumbs_down", thumbs_down),
                            ("tool_error", _unrecovered(tools))):
        if present:
            success = False
            said.append(signal)
            votes[signal] = False
    return Episode(trajectory_id=traj.trajectory_id, tenant_id=md.tenant_id if md else None,
                   agent_id=md.agent_id if md else None, task=md.task if md else None, policy_version=version,
                   started_at=first.timestamp, success=success, reward=reward, question=question, answer=answer,
                   tools=tools, offered_tools=offered, corrections=corrections, verdict=verdict, model_calls=calls,
                   tokens=tokens, failure_signals=list(dict.fromkeys(said)) if success is False else [],
                   votes=votes)


def _first_user(e: Any) -> str:
    for m in getattr(e.observation, "messages", None) or []:
        if getattr(m, "role", None) == "user":
            return m.content if isinstance(m.content, str) else text_content(m.content)
    return ""


def _unrecovered(tools: Sequence[ToolUse]) -> bool:
    """Whether a tool call failed and no later call of the same tool succeeded."""
    return any(not t.ok and not any(u.ok and u.name == t.name for u in tools[i + 1:]) for i, t in enumerate(tools))


def episodes(store: Store, tenant_id: str, agent_id: str, *, limit: int = 2000,
             since: datetime | None = None) -> list[Episode]:
    """The newest ``limit`` trajectories of ``tenant_id``/``agent_id`` (since ``since``), oldest first.

    Trajectories that fail to load (broken chain, erased payload) are skipped: signals never rest on
    a record that does not verify.
    """
    where = Filter(tenant_id=tenant_id, agent_id=agent_id, seq=0)
    if since is not None:
        where = where.since("ts", since)
    rows = store.table("events").search().where(str(where)).select(["trajectory_id", "ts"]).limit(None).to_arrow()
    pairs = sorted(zip(rows.column("ts").to_pylist(), rows.column("trajectory_id").to_pylist(), strict=True))[-limit:]
    loaded = load_trajectories(store, [t for _, t in pairs])
    out = [episode_of(t) for t in loaded.values() if isinstance(t, Trajectory)]
    out.sort(key=lambda e: (e.started_at, e.trajectory_id))
    return out


_ERROR_TEXT = re.compile(r"^\s*(?:error:\s*)?(?:tool '[^']*' failed:\s*)?([A-Z]\w*(?:Error|Exception))\s*[:(]\s*(.*)",
                         re.I | re.S)


def _error_in(output: Any) -> tuple[str, str] | None:
    """``(error type, message)`` when a tool's output is an error report: ``{"error": "..."}`` or text
    like ``Error: ValidationError: ...`` / ``ValidationError(...)``; else ``None``."""
    text = output
    if isinstance(output, str) and output.lstrip().startswith("{"):
        try:
            text = orjson.loads(output)
        except orjson.JSONDecodeError:
            text = output
    reported = False
    if isinstance(text, dict):
        if not isinstance(text.get("error"), str):
            return None
        text, reported = text["error"], True
    if not isinstance(text, str):
        return None
    m = _ERROR_TEXT.match(text)
    if m:
        return m.group(1), m.group(2).strip().rstrip(")")
    if reported:  # {"error": ...} is an error report whatever its text (its type may have been redacted)
        head, sep, rest = text.partition(":")
        return "ToolError", (rest if sep and len(head) <= 40 else text).strip()
    if text.lower().startswith("error"):
        return "ToolError", text.split(":", 1)[-1].strip()
    return None


_DIGITS = re.compile(r"\d")
_ALPHA = re.compile(r"[A-Za-z]")


def arg_pattern(arguments: Any) -> str:
    """A coarse shape of tool arguments: ``order_id=9999`` vs ``order_id=A-9999`` (digits → 9,
    letters → a, except a leading literal prefix up to the first digit), keys sorted."""
    if not isinstance(arguments, dict):
        return type(arguments).__name__
    parts = []
    for k in sorted(arguments):
        v = arguments[k]
        if isinstance(v, str):
            cut = _DIGITS.search(v)
            head, tail = (v[:cut.start()], v[cut.start():]) if cut else (v, "")
            shape = (head if len(head) <= 4 else _ALPHA.sub("a", head)) + _DIGITS.sub("9", _ALPHA.sub("a", tail))
            parts.append(f"{k}={shape[:24]}")
        else:
            parts.append(f"{k}:{type(v).__name__}")
    return ",".join(parts)


class Signals(BaseModel):
    """What a window of one agent's traffic says (see the module docstring). JSON-able."""

    model_config = ConfigDict(extra="forbid")

    window: int
    rewarded: int
    successes: int
    success_rate: float | None
    success_ci: tuple[float, float] | None
    mean_reward: float | None
    correction_rate: float | None
    process_reward: float | None
    by_task: dict[str, dict[str, Any]] = Field(default_factory=dict)
    by_version: dict[str, dict[str, Any]] = Field(default_factory=dict)
    tool_failures: list[dict[str, Any]] = Field(default_factory=list)
    canary: dict[str, dict[str, Any]] = Field(default_factory=dict)
    cost_per_success: dict[str, float | None] = Field(default_factory=dict)
    drift: dict[str, float | None] = Field(default_factory=dict)


def _rate(eps: Sequence[Episode]) -> dict[str, Any]:
    scored = [e for e in eps if e.success is not None]
    k = sum(1 for e in scored if e.success)
    n = len(scored)
    lo, hi = wilson(k, n)
    return {"n": len(eps), "rewarded": n, "successes": k, "success_rate": k / n if n else None, "ci": (lo, hi)}


def compute_signals(eps: Sequence[Episode], *, live_version: str | None = None) -> Signals:
    """:class:`Signals` of a window of episodes (oldest first)."""
    base = _rate(eps)
    scored = [e for e in eps if e.success is not None]
    rewards = [e.reward for e in eps if e.reward is not None]
    by_task = {t: _rate(g) for t, g in _group(eps, lambda e: e.task or "-").items()}
    by_version: dict[str, dict[str, Any]] = {}
    for v, g in _group(eps, lambda e: e.policy_version or "-").items():
        r = _rate(g)
        r["first_seen"] = min(e.started_at for e in g).isoformat()
        r["last_seen"] = max(e.started_at for e in g).isoformat()
        by_version[v] = r
    failures: Counter[tuple[str, str, str]] = Counter()
    calls: Counter[str] = Counter()
    for e in eps:
        for t in e.tools:
            calls[t.name] += 1
            if not t.ok:
                failures[(t.name, t.error_type or "error", arg_pattern(t.arguments))] += 1
    tool_failures = [{"tool": tool, "error_type": et, "argument_pattern": pat, "count": c,
                      "share_of_calls": c / calls[tool]} for (tool, et, pat), c in failures.most_common()]
    n_tools = sum(calls.values())
    canary: dict[str, dict[str, Any]] = {}
    live = by_version.get(live_version or "")
    if live is not None and live["success_rate"] is not None:
        for v, r in by_version.items():
            if v != live_version and r["success_rate"] is not None:
                canary[v] = {"delta": r["success_rate"] - live["success_rate"], "n": r["rewarded"],
                             "live_n": live["rewarded"]}
    succ = base["successes"]
    calls_total = sum(e.model_calls for e in eps)
    tokens_total = sum(e.tokens for e in eps)
    half = len(eps) // 2
    drift: dict[str, float | None] = {"task_mix_tv": None, "question_length_change": None}
    if half >= 5:
        old, new = eps[:half], eps[half:]
        mo, mn = Counter(e.task for e in old), Counter(e.task for e in new)
        keys = set(mo) | set(mn)
        drift["task_mix_tv"] = 0.5 * sum(abs(mo[k] / len(old) - mn[k] / len(new)) for k in keys)
        lo_ = sum(len(e.question) for e in old) / len(old)
        ln_ = sum(len(e.question) for e in new) / len(new)
        drift["question_length_change"] = (ln_ - lo_) / lo_ if lo_ else None
    return Signals(
        window=len(eps), rewarded=base["rewarded"], successes=succ, success_rate=base["success_rate"],
        success_ci=base["ci"] if scored else None, mean_reward=sum(rewards) / len(rewards) if rewards else None,
        correction_rate=(sum(1 for e in eps if e.corrections) / len(eps)) if eps else None,
        process_reward=(sum(1 for e in eps for t in e.tools if t.ok) / n_tools) if n_tools else None,
        by_task=by_task, by_version=by_version, tool_failures=tool_failures, canary=canary,
        cost_per_success={"model_calls": calls_total / succ if succ else None,
                          "tokens": tokens_total / succ if succ and tokens_total else None},
        drift=drift,
    )


def _group(eps: Sequence[Episode], key: Any) -> dict[str, list[Episode]]:
    out: dict[str, list[Episode]] = defaultdict(list)
    for e in eps:
        out[key(e)].append(e)
    return out
