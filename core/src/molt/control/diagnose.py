"""Diagnosis: cluster a window's failures and propose typed interventions for each cluster.

A failure's **signature** is its first tool error (tool, error type) when it has one, else the
category of the verifier's reason — ``format`` when the reason names the answer's format, else
``answer`` (the content was wrong). Failures with the same task and signature form a :class:`Cluster`.

Each cluster gets the candidates that could fix it, built from the trajectories themselves:

========================  =====================================================================
``memory_insert``         the most common user correction in the cluster becomes the memory text
``tool_schema_edit``      a tool whose calls fail with an argument error: the error message is
                          added to the description of each parameter it names
``skill_patch``           a multi-step task that succeeds in other trajectories: the tool sequence
                          of those successes becomes procedural instructions with a trigger
``harness_edit``          format failures: the verifier's format requirement becomes a system-
                          prompt rule; answer failures: a generic "check your work" rule
``weight_update``         answer failures (no tool error): only when no context change fixes the
                          cluster in replay (decided by the selector), sized by recurrence across
                          tenants and tasks
``rollback``              the live version, promoted in the window, does worse than the version
                          before it
========================  =====================================================================

The candidates' parts are the live version's parts plus the change, so replay evaluates exactly
the version that would go live.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from molt.atdp.ids import new_id
from molt.control.signals import Episode, arg_pattern
from molt.control.versions import PolicyParts, PolicyVersion
from molt.harness import ToolRewrite

__all__ = ["COSTS", "Candidate", "Cluster", "Kind", "cluster_failures", "propose", "rollback_candidate"]

Kind = Literal["memory_insert", "skill_patch", "harness_edit", "tool_schema_edit", "weight_update", "rollback",
               "noop"]

#: Relative cost of each intervention (compute, latency, token budget, blast radius): the selector
#: prefers the cheapest sufficient one.
COSTS: dict[str, float] = {"rollback": 0.5, "memory_insert": 1.0, "tool_schema_edit": 2.0, "harness_edit": 2.5,
                           "skill_patch": 3.0, "weight_update": 50.0, "noop": 0.0}

_FORMAT = re.compile(r"\b(format|json|schema|markdown|yaml|csv)\b", re.I)
_ARG_ERRORS = re.compile(r"(validation|value|type|schema|argument|invalid)", re.I)


@dataclass
class Cluster:
    """Failures of one task with one signature."""

    key: str
    task: str | None
    signature: str              # "tool:<name>:<error type>" | "format" | "answer"
    kind: Literal["tool_error", "format", "answer"]
    failures: list[Episode] = field(default_factory=list)
    tool: str | None = None
    error_type: str | None = None

    @property
    def size(self) -> int:
        return len(self.failures)

    @property
    def tenants(self) -> set[str]:
        return {e.tenant_id or "-" for e in self.failures}

    def summary(self) -> dict[str, Any]:
        """JSON-able description (what the decision log keeps)."""
        errs = Counter(t.error_message for e in self.failures for t in e.tool_errors if t.name == self.tool)
        pats = Counter(arg_pattern(t.arguments) for e in self.failures for t in e.tool_errors if t.name == self.tool)
        return {"key": self.key, "task": self.task, "signature": self.signature, "kind": self.kind,
                "size": self.size, "tenants": sorted(self.tenants),
                "corrections": sum(1 for e in self.failures if e.corrections),
                "top_error": errs.most_common(1)[0][0] if errs else None,
                "argument_pattern": pats.most_common(1)[0][0] if pats else None,
                "verdict": Counter(e.verdict for e in self.failures).most_common(1)[0][0]}


class Candidate(BaseModel):
    """A typed intervention proposed for a cluster; ``parts`` is the version it would make live."""

    model_config = ConfigDict(extra="forbid")

    candidate_id: str = Field(default_factory=lambda: "cand-" + new_id()[-12:])
    kind: Kind
    cluster: str
    description: str
    cost: float
    parts: PolicyParts | None = None
    payload: dict[str, Any] = Field(default_factory=dict)
    source_trajectories: list[str] = Field(default_factory=list)


def _signature(e: Episode) -> tuple[str, str, str | None, str | None]:
    errs = e.tool_errors
    if errs:
        t = errs[0]
        return f"tool:{t.name}:{t.error_type or 'error'}", "tool_error", t.name, t.error_type
    if e.verdict and _FORMAT.search(e.verdict):
        return "format", "format", None, None
    return "answer", "answer", None, None


def cluster_failures(eps: Sequence[Episode]) -> list[Cluster]:
    """Clusters of the window's failures, largest first."""
    clusters: dict[str, Cluster] = {}
    for e in eps:
        if e.success is not False:
            continue
        sig, kind, tool, et = _signature(e)
        key = f"{e.task or '-'}|{sig}"
        c = clusters.get(key)
        if c is None:
            c = clusters[key] = Cluster(key=key, task=e.task, signature=sig, kind=kind, tool=tool,  # type: ignore[arg-type]
                                        error_type=et)
        c.failures.append(e)
    return sorted(clusters.values(), key=lambda c: (-c.size, c.key))


def _normalize(text: str) -> str:
    return " ".join(text.split()).strip()


def propose(cluster: Cluster, window: Sequence[Episode], live: PolicyVersion) -> list[Candidate]:
    """The candidates for ``cluster`` (see the module docstring), cheapest first."""
    out: list[Candidate] = []
    parts = live.parts
    ids = [e.trajectory_id for e in cluster.failures]
    # Memory insert: the most common correction.
    corr = Counter(_normalize(c) for e in cluster.failures for c in e.corrections if _normalize(c))
    if corr:
        text, n = corr.most_common(1)[0]
        src = [e.trajectory_id for e in cluster.failures if any(_normalize(c) == text for c in e.corrections)]
        out.append(Candidate(kind="memory_insert", cluster=cluster.key, cost=COSTS["memory_insert"],
                             description=f"remember the correction given {n}× in this cluster: {text[:120]}",
                             payload={"text": text, "support": n}, source_trajectories=src))
    if cluster.kind == "tool_error" and cluster.tool:
        tool_errs = [t for e in cluster.failures for t in e.tool_errors if t.name == cluster.tool]
        messages = Counter(t.error_message or "" for t in tool_errs)
        message = messages.most_common(1)[0][0]
        schema = _offered_schema(cluster.failures, cluster.tool)
        params = ((schema or {}).get("parameters") or {}).get("properties") or {}
        named = [p for p in params if re.search(rf"\b{re.escape(p)}\b", message)]
        if schema is not None and named and (_ARG_ERRORS.search(cluster.error_type or "") or named):
            new_params = _with_notes(schema.get("parameters") or {}, named, message)
            rw = ToolRewrite(parameters=new_params)
            out.append(Candidate(kind="tool_schema_edit", cluster=cluster.key, cost=COSTS["tool_schema_edit"],
                                 description=f"document in {cluster.tool}'s schema what its error says about "
                                             f"{', '.join(named)}: {message[:120]}",
                                 parts=parts.with_tools({cluster.tool: rw}),
                                 payload={"tool": cluster.tool, "parameters": named, "note": message},
                                 source_trajectories=ids))
        skill = _procedure(cluster, window)
        if skill is not None:
            name, trigger, instructions, src = skill
            out.append(Candidate(kind="skill_patch", cluster=cluster.key, cost=COSTS["skill_patch"],
                                 description=f"skill '{name}': {instructions[:120]}",
                                 payload={"name": name, "trigger": trigger, "instructions": instructions},
                                 source_trajectories=src))
    if cluster.kind == "format":
        verdict = Counter(e.verdict or "" for e in cluster.failures).most_common(1)[0][0]
        req = _requirement(verdict)
        out.append(Candidate(kind="harness_edit", cluster=cluster.key, cost=COSTS["harness_edit"],
                             description=f"system-prompt rule from the verifier's format requirement: {req}",
                             parts=parts.with_system_prompt(f"Output format: every answer must be {req}."),
                             payload={"system_prompt": f"Output format: every answer must be {req}."},
                             source_trajectories=ids))
    if cluster.kind == "answer":
        rule = "Before answering, re-check every figure and computation step by step."
        if rule not in (parts.harness.system_prompt or ""):
            out.append(Candidate(kind="harness_edit", cluster=cluster.key, cost=COSTS["harness_edit"],
                                 description="generic self-check rule in the system prompt",
                                 parts=parts.with_system_prompt(rule), payload={"system_prompt": rule},
                                 source_trajectories=ids))
        out.append(Candidate(kind="weight_update", cluster=cluster.key, cost=COSTS["weight_update"],
                             description=f"train the weights on the cluster's task ({cluster.task}); "
                                         f"{cluster.size} failures over {len(cluster.tenants)} tenant(s)",
                             payload={"task": cluster.task, "tenants": sorted(cluster.tenants)},
                             source_trajectories=ids))
    return sorted(out, key=lambda c: c.cost)


def rollback_candidate(live: PolicyVersion, previous: PolicyVersion, window: Sequence[Episode]) -> Candidate:
    """Roll back to ``previous``: evaluated by replaying the live version's failures under it."""
    ids = [e.trajectory_id for e in window if e.policy_version == live.version_id and e.success is False]
    return Candidate(kind="rollback", cluster=f"version:{live.version_id}", cost=COSTS["rollback"],
                     description=f"restore {previous.version_id} (live before {live.version_id})",
                     parts=previous.parts, payload={"to": previous.version_id, "from": live.version_id},
                     source_trajectories=ids)


def _offered_schema(eps: Sequence[Episode], tool: str) -> dict[str, Any] | None:
    for e in eps:
        for t in e.offered_tools:
            fn = t.get("function") if isinstance(t, dict) else None
            if isinstance(fn, dict) and fn.get("name") == tool:
                return fn
    return None


def _with_notes(parameters: dict[str, Any], names: list[str], note: str) -> dict[str, Any]:
    params = {**parameters, "properties": dict(parameters.get("properties") or {})}
    for n in names:
        prop = dict(params["properties"].get(n) or {})
        desc = prop.get("description") or ""
        prop["description"] = f"{desc} Note: {note}".strip()
        params["properties"][n] = prop
    return params


def _requirement(verdict: str) -> str:
    text = re.sub(r"^.*?format:\s*", "", verdict, flags=re.I)
    text = re.sub(r"^(the )?(answer|output) (is|was) not\s+", "", text, flags=re.I)
    return text.strip().rstrip(".") or "in the required format"


def _procedure(cluster: Cluster, window: Sequence[Episode]) -> tuple[str, str, str, list[str]] | None:
    """A skill from the tool sequence that the task's successful trajectories share (≥ 2 steps)."""
    wins = [e for e in window if e.task == cluster.task and e.success and len(e.tools) >= 2
            and e.tenant_id in cluster.tenants]
    if len(wins) < 1:
        return None
    seqs = Counter(tuple(t.name for t in e.tools if t.ok) for e in wins)
    seq, _ = seqs.most_common(1)[0]
    if len(seq) < 2:
        return None
    failed = Counter(tuple(t.name for t in e.tools) for e in cluster.failures)
    if failed.most_common(1)[0][0] == seq:
        return None  # the failures already follow this procedure: it is not what they lack
    keys: dict[str, None] = {}
    for e in wins:
        for t in e.tools:
            if isinstance(t.arguments, dict):
                keys.update(dict.fromkeys(t.arguments))
    task = cluster.task or "these"
    steps = ", then ".join(f"call {name}" for name in seq)
    instructions = (f"For {task} requests: {steps}. Pass values returned by earlier calls "
                    f"({', '.join(keys) or 'ids, amounts'}) as the arguments of later calls.")
    questions = Counter(w for e in cluster.failures for w in re.findall(r"[a-z]{5,}", e.question.lower()))
    trigger = f"{task} requests; mentions " + ", ".join(w for w, _ in questions.most_common(3))
    src = [e.trajectory_id for e in wins]
    return f"{task} procedure", trigger, instructions, src
