"""A change as a person judges it: one data builder for every place that shows a control-plane change
(the console's decision, version and proposal pages, the demo report, the CLI).

:func:`change_view` turns what the plane recorded — a decision's chosen candidate with its replay and
regression evidence, the failure cluster it was chosen for, the version it made and that version's
parent — into plain data with every rate's interval, every term explained where it is used, and links
(trajectory ids) to the runs the figures stand on:

- **what failed**: the cluster (how many failures, which tenants and users, what said they failed) and
  up to three example exchanges, each with the user's correction or the verifier's verdict beside it;
- **what is proposed**: the full text of the change and a diff of the new version's parts against its
  parent's, with memory and skill ids resolved to their text;
- **the evidence**: the replay (the model and backend that ran it; cases passed, failed and unknown;
  success before and after with Wilson intervals; the delta with its Newcombe interval), the held-back
  regression check, and — once the version has served — its success against its parent's;
- **cost**, the **gate verdicts**, and **why this change and not the next cheaper one**, in a sentence.

Nothing here renders HTML (:mod:`molt.console.change` does, for the console and the report).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from molt.control.diagnose import COSTS
from molt.control.versions import AgentVersion, diff_parts
from molt.stats import newcombe_diff, wilson

__all__ = ["KIND_NAMES", "PROMOTION_RULE", "TERMS", "canary_state_of", "canary_state_text", "canary_view",
           "change_view", "decision_change", "proposed_text", "rate", "version_success"]

#: What each kind of change is called where a person reads it.
KIND_NAMES = {"memory_insert": "memory insert", "skill_patch": "skill", "harness_edit": "harness edit (system prompt)",
              "tool_schema_edit": "tool-schema edit", "weight_update": "weight update (LoRA adapter)",
              "rollback": "rollback", "promote": "promotion", "noop": "no change"}

#: The terms the view uses, explained once where they appear.
TERMS = {
    "cost": "the plane's price of a kind of change, cheapest first: rollback 0.5, memory 1, tool schema 2, "
            "harness 2.5, skill 3, weights 50 — the plane prefers the cheapest change that fixes enough",
    "replay": "the cluster's recorded failures run again with the change applied, on the model named; a case "
              "passes when the replayed answer is judged right (verifier, the user's correction or a judge), "
              "is unknown when nothing could judge it",
    "delta": "success with the change minus success without it, on the same replayed cases; the interval is "
             "Newcombe's 95 % interval of that difference",
    "interval": "95 % Wilson score interval of a rate: with this many cases, the true rate lies in it 19 times "
                "in 20",
    "regression": "successful runs held back from the cluster, replayed with the change: it must not break them "
                  "(a drop beyond the tolerance rejects it)",
    "evidence bar": "a change goes live only when its replay delta is at least the minimum gain with an interval "
                    "above zero; one fixing at least half the cases is sufficient and the cheapest sufficient wins",
    "guarded canary": "a cheap, reversible change whose replay is positive but not conclusive is tried on a "
                      "share of the sessions; each canary run is paired with a live run beside it in time, and a "
                      "mixture sequential probability ratio test (mSPRT) on the pairs one version won promotes it "
                      "when the ratio reaches 1/level (false promotions at most the level, however often it is "
                      "looked at), aborts it on harm, and withdraws it at its exposure bound",
    "p-value": "the chance of a cluster this large among the window's requests if this intent failed no more often "
               "than the rest; the cluster counts when it is below the level (Bonferroni-corrected)",
}

#: The promotion rule, as the decision log states it (molt.control.plane's canary step).
PROMOTION_RULE = ("a canary is promoted once it has served {canary_min} rewarded requests and is no worse than the "
                  "live version by more than {tolerance:.0%} (task for task), and its interval does not lie wholly "
                  "below it; it is aborted when it is worse beyond that or significantly worse")


def rate(k: int, n: int) -> dict[str, Any]:
    """``k`` of ``n`` with its Wilson interval, and the text a person reads (``"40% of 10 (95% interval 17–69%)"``)."""
    if n <= 0:
        return {"k": k, "n": n, "rate": None, "lo": None, "hi": None, "text": "no cases"}
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": k / n, "lo": lo, "hi": hi,
            "text": f"{k / n:.0%} of {n} (95% interval {lo:.0%}–{hi:.0%})"}


def _delta(d: float | None, ci: Sequence[float] | None) -> dict[str, Any]:
    if d is None:
        return {"delta": None, "text": "not measured"}
    text = f"{d:+.0%}" + (f" (95% interval {ci[0]:+.0%} to {ci[1]:+.0%})" if ci else "")
    return {"delta": d, "lo": ci[0] if ci else None, "hi": ci[1] if ci else None, "text": text}


def _count(r: float | None, n: int | None) -> int:
    return 0 if r is None or not n else round(r * n)


def _replay(replay: dict[str, Any] | None) -> dict[str, Any] | None:
    if not replay:
        return None
    if "skipped" in replay:
        return {"skipped": replay["skipped"], "cases": [], "model_calls": None}
    scored = int(replay.get("scored") or 0)
    cases = []
    for c in replay.get("cases") or []:
        st, r = c.get("status"), c.get("replayed_reward")
        verdict = ("passed" if r is not None and r > 0.5 else "failed" if r is not None else "unknown") \
            if st == "ok" else ("error" if st in ("error", "invalid") else "unknown")
        cases.append({"trajectory_id": c.get("trajectory_id"), "verdict": verdict,
                      "recorded": c.get("recorded_reward"), "replayed": r})
    tally = {v: sum(c["verdict"] == v for c in cases) for v in ("passed", "failed", "unknown", "error")}
    return {"skipped": None, "model": replay.get("model"), "backend": replay.get("backend"), "mode": replay.get("mode"),
            "sampled": replay.get("sampled"), "scored": scored, "unknown": replay.get("unknown"),
            "errors": replay.get("errors"), "cases": cases, "tally": tally,
            "baseline_label": replay.get("baseline") or "as recorded",
            "before": rate(_count(replay.get("baseline_success_rate"), scored), scored),
            "after": rate(_count(replay.get("candidate_success_rate"), scored), scored),
            "delta": _delta(replay.get("success_delta"), replay.get("success_delta_ci")),
            "model_calls": replay.get("model_calls")}


def _regression(reg: dict[str, Any] | None, rejected: str | None) -> dict[str, Any]:
    if not reg:
        return {"state": "not run", "text": "no held-back successes to check in this window"}
    if "skipped" in reg:
        return {"state": "skipped", "text": f"not run: {reg['skipped']}"}
    scored = int(reg.get("scored") or 0)
    before = rate(_count(reg.get("baseline_success_rate"), scored), scored)
    after = rate(_count(reg.get("candidate_success_rate"), scored), scored)
    failed = bool(rejected and rejected.startswith("regression"))
    return {"state": "failed" if failed else "passed", "before": before, "after": after,
            "cases": _replay(reg)["cases"] if reg.get("cases") else [],  # type: ignore[index]
            "text": (f"held-back successes {before['text']} → {after['text']} with the change"
                     + (" — regressed, rejected" if failed else " — no regression"))}


def _gates(entry: dict[str, Any], operator: dict[str, Any] | None) -> list[dict[str, str]]:
    ev = entry.get("evidence") or {}
    rejected = entry.get("rejected") or ev.get("rejected") or ""
    out = []

    def add(gate: str, verdict: str, detail: str) -> None:
        out.append({"gate": gate, "verdict": verdict, "detail": detail})

    if rejected.startswith(("safety", "tenant", "malformed")):
        add("safety", "refused", rejected)
    else:
        add("safety", "passed", "no personal data or secrets in the text; every source run is the tenant's own")
    if "replay" in ev:
        r = ev["replay"]
        if rejected.startswith("replay"):
            add("replay", "refused", rejected)
        else:
            d = r.get("success_delta")
            add("replay", "passed" if not rejected else "measured",
                "fixes " + _delta(d, r.get("success_delta_ci"))["text"] + f" of {r.get('scored')} scored cases")
    if "confirmation" in ev:
        add("confirmation", "refused" if rejected.startswith("confirmation") else "passed",
            rejected if rejected.startswith("confirmation") else orjson.dumps(ev["confirmation"]).decode())
    if "regression" in ev:
        reg = _regression(ev["regression"], rejected)
        add("regression", reg["state"], reg["text"])
    if rejected and not rejected.startswith(("safety", "tenant", "malformed", "replay", "confirmation",
                                             "regression")):
        add(rejected.split(":", 1)[0], "refused", rejected)
    if operator is not None:
        add("operator", operator.get("action", ""), f"{operator.get('actor') or ''}: {operator.get('reason') or ''}")
    return out


def _why_not_cheaper(entry: dict[str, Any], others: Sequence[dict[str, Any]]) -> str:
    kind, cost = entry.get("kind", ""), float(entry.get("cost") or COSTS.get(entry.get("kind", ""), 0.0))
    cheaper = sorted((o for o in others if float(o.get("cost") or 0) < cost and o.get("kind") != "weight_update"),
                     key=lambda o: float(o.get("cost") or 0), reverse=True)
    if not cheaper:
        return (f"A {KIND_NAMES.get(kind, kind)} (cost {cost:g}) was the cheapest change built for this cluster "
                f"that passed its gates.")
    nxt = cheaper[0]
    why = nxt.get("rejected") or "it did not clear the evidence bar"
    name = KIND_NAMES.get(nxt.get("kind", ""), nxt.get("kind"))
    return (f"The cheaper {name} (cost {float(nxt.get('cost') or 0):g}) "
            f"was not chosen: {why}.")


def _example(traj: Any) -> dict[str, Any] | None:
    from molt.control.signals import episode_of

    try:
        e = episode_of(traj)
    except Exception:  # a trajectory the plane cannot read is shown by id only
        return None
    users = {ev.session_id for ev in traj.events if getattr(ev, "session_id", None)}
    for ev in traj.events:
        consent = getattr(ev.metadata, "consent", None)
        if consent is not None and consent.subject_id:
            users.add(consent.subject_id)
    return {"trajectory_id": e.trajectory_id, "tenant_id": e.tenant_id, "question": e.question,
            "answer": e.answer or "", "correction": e.corrections[-1] if e.corrections else None,
            "verdict": e.verdict, "said": e.failure_signals, "version": e.policy_version, "users": sorted(users)}


def _part_text(path: str, value: Any, memories: Any, tenant_id: str) -> Any:
    """A diff value with memory and skill ids replaced by their text (the ids name append-only rows)."""
    if memories is None or not isinstance(value, list) or path not in ("memory_ids", "skill_ids"):
        return value
    try:
        if path == "memory_ids":
            got = {m.memory_id: m.text for m in memories.memories(tenant_id, list(value))}
        else:
            got = {s.skill_id: f"{s.name}: {s.instructions}" for s in memories.skills(tenant_id, list(value))}
    except Exception:
        return value
    return [got.get(i, i) for i in value]


def _show(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return "\n".join(f"• {x}" for x in v) or "(none)"
    return orjson.dumps(v, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()


def proposed_text(entry: dict[str, Any]) -> str:
    """The full text a candidate would add (memory, skill, system-prompt rule, tool-schema note), never cut."""
    p = entry.get("payload") or {}
    kind = entry.get("kind")
    if kind == "memory_insert":
        return str(p.get("text") or "")
    if kind == "skill_patch":
        return f"{p.get('name')} (when: {p.get('trigger')})\n{p.get('instructions')}"
    if kind == "harness_edit" and p.get("system_prompt"):
        return str(p["system_prompt"])
    if kind == "tool_schema_edit":
        if p.get("rename"):
            return f"dispatch {p.get('tool')} as {p.get('rename')} ({p.get('note')})"
        return f"{p.get('tool')}: document {', '.join(p.get('parameters') or [])} — {p.get('note')}"
    return str(entry.get("description") or "")


def _duration(s: float | None) -> str:
    if not s:
        return "no time bound"
    return f"{s / 86400:.1f} days" if s >= 86400 else f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min"


def canary_state_text(state: dict[str, Any]) -> str:
    """A guarded canary's sequential state (:meth:`molt.control.significance.CanaryState.summary`) in one line:
    pairs won and lost, the mixture ratio against its threshold, the exposure against its bounds, the
    decision."""
    exp = state.get("exposure") or {}
    elapsed = exp.get("elapsed_s")
    return (f"{state.get('wins', 0)} pairs won, {state.get('losses', 0)} lost; mixture ratio "
            f"{float(state.get('ratio') or 0):.2f} against the threshold {float(state.get('threshold') or 0):g} "
            f"(harm {float(state.get('harm_ratio') or 0):.2f}); exposure {exp.get('runs', '?')}/"
            f"{exp.get('max_runs', '?')} canary runs"
            + (f", {_duration(elapsed)} of {_duration(exp.get('max_s'))}" if elapsed is not None else "")
            + f" — {state.get('decision')}")


def canary_view(guard: dict[str, Any] | None, state: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """A guarded canary's experiment as a person reads it: its test, level, share and exposure bound (the
    ``guard`` the decision that started it recorded) and its sequential state at the plane's last look
    (``state``: :meth:`molt.control.significance.CanaryState.summary`, from the newest decision that looked at
    it; ``None``: not looked at yet). ``None`` for a change that did not go to a guarded canary."""
    if not guard:
        return None
    alpha = float(guard.get("alpha") or 0.05)
    threshold = 1.0 / alpha
    max_runs, max_s = guard.get("max_requests"), guard.get("max_s")
    setup = (f"mSPRT on canary/live pairs at level {alpha:g} (promote at a mixture ratio of {threshold:g}), "
             f"{float(guard.get('share') or 0):.0%} of the sessions, bounded at {max_runs} canary runs and "
             f"{_duration(max_s)}")
    now = canary_state_text(state) if state else "not looked at yet (no cycle has run since it started)"
    return {"alpha": alpha, "threshold": threshold, "share": guard.get("share"), "max_runs": max_runs, "max_s": max_s,
            "prior": guard.get("prior"), "state": state, "setup": setup, "text": now}


def version_success(episodes: Sequence[Any], version_id: str) -> dict[str, Any]:
    """Success of the rewarded runs stamped with ``version_id``, with its Wilson interval."""
    mine = [e for e in episodes if e.policy_version == version_id and e.success is not None]
    return rate(sum(bool(e.success) for e in mine), len(mine))


def change_view(entry: dict[str, Any], *, cluster: dict[str, Any] | None = None,
                decision: dict[str, Any] | None = None, others: Sequence[dict[str, Any]] = (),
                version: AgentVersion | None = None, parent: AgentVersion | None = None, memories: Any = None,
                trajectory: Callable[[str], Any] | None = None, episodes: Sequence[Any] | None = None,
                operator: dict[str, Any] | None = None, examples: int = 3,
                canary: dict[str, Any] | None = None) -> dict[str, Any]:
    """One change as plain data (see the module docstring).

    Args:
        entry: the candidate as the decision log keeps it (kind, description, cost, payload,
            source_trajectories, evidence with replay / regression, rejected).
        cluster: the failure cluster's summary from the decision's signals.
        decision: ``{"cycle_id", "choice", "reason", "created_at"}`` of the cycle that chose it.
        others: the other candidates of the same cluster (passed or rejected), for "why not cheaper".
        version / parent: the version the change made and the one it was made from (for the diff and
            the served success); without them the diff is the candidate's payload alone.
        memories: a :class:`molt.control.memory.MemoryStore` to show memory and skill texts in the diff.
        trajectory: ``fn(trajectory_id) → Trajectory | None`` reading the caller's tenant's runs (the
            examples); ``None``: examples by id only.
        episodes: the agent's recent runs (:func:`molt.control.signals.episodes`) for served success.
        operator: an operator's decision on a proposal (``action``, ``actor``, ``reason``).
        canary: a guarded canary's experiment and sequential state (:func:`canary_view`).
    """
    ev = entry.get("evidence") or {}
    kind = entry.get("kind") or (decision or {}).get("choice") or ""
    tenant = version.tenant_id if version is not None else (cluster or {}).get("tenants", [""])[0] if cluster else ""
    ids = list(dict.fromkeys(entry.get("source_trajectories") or []))
    shown: list[dict[str, Any]] = []
    users: set[str] = set()
    if trajectory is not None:
        for tid in ids[:max(examples * 4, 12)]:
            try:
                traj = trajectory(tid)
            except Exception:  # another tenant's or an erased run: not shown
                traj = None
            ex = _example(traj) if traj is not None else None
            if ex is None:
                continue
            users.update(ex["users"])
            if len(shown) < examples:
                shown.append(ex)
    diff: list[dict[str, str]] = []
    if version is not None and parent is not None:
        for path, a, b in diff_parts(parent.parts, version.parts):
            diff.append({"part": path, "live": _show(_part_text(path, a, memories, version.tenant_id)),
                         "proposed": _show(_part_text(path, b, memories, version.tenant_id))})
    replay = _replay(ev.get("replay"))
    rejected = entry.get("rejected") or ev.get("rejected")
    served = None
    if episodes is not None and version is not None and parent is not None:
        served = {"version": version_success(episodes, version.version_id),
                  "parent": version_success(episodes, parent.version_id), "delta": None}
        a, b = served["version"], served["parent"]
        if a["n"] and b["n"]:
            lo, hi = newcombe_diff(a["k"], a["n"], b["k"], b["n"])
            served["delta"] = _delta(a["rate"] - b["rate"], (lo, hi))
    cost = float(entry.get("cost") if entry.get("cost") is not None else COSTS.get(kind, 0.0))
    calls = (replay or {}).get("model_calls")
    c = cluster or {}
    evidence = c.get("evidence") or {}
    return {
        "kind": kind, "kind_name": KIND_NAMES.get(kind, kind.replace("_", " ")),
        "description": entry.get("description") or "", "candidate_id": entry.get("candidate_id"),
        "decision": {"cycle_id": None, "choice": None, "reason": None, **(decision or {})}, "rejected": rejected,
        "version_id": version.version_id if version is not None else None,
        "parent_id": parent.version_id if parent is not None else (version.parent_id if version is not None else None),
        "failed": {"key": c.get("key") or entry.get("cluster"), "size": c.get("size", len(ids)),
                   "task": c.get("task"), "intent": c.get("intent"), "signature": c.get("signature"),
                   "tenants": c.get("tenants") or ([tenant] if tenant else []), "users": sorted(users),
                   "corrections": c.get("corrections"), "said": c.get("failure_signals") or {},
                   "requests": evidence.get("n"), "p_value": evidence.get("p_value"), "level": evidence.get("level"),
                   "examples": shown, "example_ids": ids},
        "proposed": {"text": proposed_text(entry), "diff": diff},
        "replay": replay,
        "regression": _regression(ev.get("regression"), rejected),
        "served": served,
        "canary": canary,
        "cost": {"units": cost, "replay_model_calls": calls,
                 "text": f"{cost:g} (the kind's price)" + (f"; the replay made {calls} model calls" if calls else "")},
        "gates": _gates(entry, operator),
        "why": _why_not_cheaper(entry, others),
        "terms": TERMS,
        "raw": orjson.dumps({"candidate": entry, "cluster": cluster, "decision": decision},
                            option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS, default=str).decode(),
    }


def canary_state_of(record: Any, log: Any) -> dict[str, Any] | None:
    """:func:`canary_view` of the guarded canary ``record`` started (``None``: it started none), its state
    from the newest decision in ``log`` (a :class:`molt.control.log.DecisionLog`) that looked at it."""
    guard = (record.signals or {}).get("guard")
    if not guard or not record.applied_version:
        return None
    state = None
    if log is not None:
        for d in log.list(record.tenant_id, record.agent_id, limit=200):  # newest first
            got = (d.signals or {}).get("canary")
            if isinstance(got, dict) and got.get("version") == record.applied_version:
                state = got
                break
    return canary_view(guard, state)


def decision_change(record: Any, *, registry: Any = None, memories: Any = None,
                    trajectory: Callable[[str], Any] | None = None, episodes: Sequence[Any] | None = None,
                    log: Any = None) -> dict[str, Any] | None:
    """:func:`change_view` of the change a decision record chose (``None`` when it chose none): the
    chosen candidate, its cluster, the other candidates of that cluster, the version it made and its
    parent (read from ``registry``), and — for a guarded canary — its sequential state (read from the
    decision ``log``)."""
    d = record
    entry = next((x for x in d.candidates if d.chosen_candidate and x.get("candidate_id") == d.chosen_candidate),
                 None) or next((x for x in d.candidates if x.get("kind") == d.choice), None)
    if entry is None:
        return None
    cluster = next((x for x in (d.signals or {}).get("clusters") or [] if x.get("key") == entry.get("cluster")), None)
    others = [x for x in [*d.candidates, *d.rejected] if x.get("cluster") == entry.get("cluster") and x is not entry]
    version = parent = None
    if registry is not None and d.applied_version:
        from molt.errors import MoltError

        try:
            version = registry.get(d.applied_version, tenant_id=d.tenant_id)
            parent = registry.get(version.parent_id, tenant_id=d.tenant_id) if version.parent_id else None
        except MoltError:
            version = parent = None
    return change_view(entry, cluster=cluster, others=others, version=version, parent=parent, memories=memories,
                       trajectory=trajectory, episodes=episodes, canary=canary_state_of(d, log),
                       decision={"cycle_id": d.cycle_id, "choice": d.choice, "reason": d.reason,
                                 "created_at": d.created_at})
