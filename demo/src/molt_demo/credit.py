"""Credit: which intervention fixed which failure cluster, read from the traffic each version served (the
version stamped in each trajectory's provenance), and what the trainer did for each weight update."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

__all__ = ["fixes", "parent_lookup", "served_by_version"]


def served_by_version(store: Any, pairs: list[tuple[str, str]]) -> dict[tuple[str, str, str, str], list[int]]:
    """Successes and runs per (tenant, agent, policy version, task): the version is the one stamped in each
    trajectory's provenance, i.e. what the gateway served that request with."""
    from molt.control.signals import episodes

    out: dict[tuple[str, str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for tenant, agent in pairs:
        for e in episodes(store, tenant, agent, limit=1_000_000):
            if e.success is None or e.policy_version is None or e.task is None:
                continue
            k = out[(tenant, agent, e.policy_version, e.task)]
            k[0] += bool(e.success)
            k[1] += 1
    return dict(out)


def fixes(decisions: list[dict[str, Any]], served: dict[tuple[str, str, str, str], list[int]],
           parent_of: Any, requests: list[dict[str, Any]], *, trains: bool = False) -> list[dict[str, Any]]:
    """Which intervention fixed which failure cluster, per version.

    A change is credited only with what the traffic it served shows: success on the cluster's task of
    the requests served under the version it made (``after``) against those served under that version's
    parent, the version live when it was chosen (``before``) — both read from the version in each
    trajectory's provenance. The two run side by side while the new version is in canary, so the
    difference is this change's alone; an intervention that made no version (a weight update only
    requested) served nothing and is credited with nothing. When the version also carries an earlier
    intervention on the same task (one in its parent chain), ``overlaps`` names it: ``after`` is then
    the rate of both together.
    """
    out: list[dict[str, Any]] = []
    for d in decisions:
        if d["choice"] in ("noop", "promote") or not d.get("cluster"):
            continue
        task = d["cluster"].split("|", 1)[0] if "|" in d["cluster"] else None
        version = d["version"] if d["choice"] != "rollback" else None
        parent = parent_of(version) if version else None

        def rate(v: str | None, d: dict[str, Any] = d, task: str | None = task) -> tuple[float | None, int]:
            k, n = served.get((d["tenant"], d["agent"], v, task), (0, 0)) if v and task else (0, 0)
            return (k / n if n else None), n

        (before, n_before), (after, n_after) = rate(parent), rate(version)
        promoted = next((p["round"] + 1 for p in decisions if p["choice"] == "promote" and d["version"]
                         and p["version"] == d["version"]), None)
        out.append({"tenant": d["tenant"], "agent": d["agent"], "cluster": d["cluster"], "task": task,
                    "intervention": d["choice"], "round": d["round"] + 1,
                    "live_from": promoted + 1 if promoted else None, "version": d["version"], "parent": parent,
                    "before": before, "n_before": n_before, "after": after, "n_after": n_after,
                    "overlaps": [], "what": d.get("text") or d["description"]})
    made = {f["version"]: f for f in out if f["version"] and f["intervention"] != "rollback"}
    for f in out:
        if not f["version"] or f["intervention"] == "rollback":
            continue
        seen, v = {f["version"]}, f["parent"]
        while v and v not in seen:   # the version's lineage: earlier changes it still carries
            seen.add(v)
            o = made.get(v)
            if o is not None and o["task"] == f["task"]:
                f["overlaps"].append(f"{o['intervention']} of round {o['round']} ({v})")
            v = parent_of(v)
    if trains:
        return _train_fixes(out, requests)
    asked = {(r["tenant"], r["task"]): r for r in requests}
    for f in out:
        r = asked.get((f["tenant"], f["task"]))
        if f["intervention"] == "weight_update" and r is not None:
            f["what"] = (f"requested from the trainer ({r['request']}, {r['trajectories']} failing trajectories); "
                         f"this demo trains nothing, so no traffic was served with it")
    return out


def _train_fixes(out: list[dict[str, Any]], requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``--train``: what the trainer did for each weight update (requests and decisions are both in
    the order the plane made them)."""
    queues: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in requests:
        if r.get("outcome") not in ("deferred", "failed"):  # those were logged as no-ops, not weight updates
            queues[(r["tenant"], r["task"])].append(r)
    for f in out:
        q = queues.get((f["tenant"], f["task"]))
        if f["intervention"] != "weight_update" or not q:
            continue
        r = q.pop(0)
        f["trainer"] = r
        if r.get("outcome") == "trained":
            f["what"] = (f"trained a LoRA adapter ({r['steps']} steps on {r['samples']} recorded samples, mean reward "
                         f"{r['reward_before']:.2f}, {r['seconds']:.0f} s) and hot-loaded it as {r['adapter']}; "
                         + (f"canaried, live from round {f['live_from']}" if f.get("live_from")
                            else "canaried, not promoted in this run"))
        elif r.get("outcome") == "shared":
            f["what"] = f"the adapter {r['adapter']} already trained for this cluster (weights serve every tenant)"
        elif r.get("outcome") == "budget":
            f["what"] = f"requested ({r['request']}); this run's training budget is spent"
        else:
            f["what"] = (f"requested from the trainer ({r['request']}, {r['trajectories']} failing trajectories); "
                         f"the scripted desk model has no weights to train, so no traffic was served with it")
    return out


def parent_lookup(registry: Any) -> Any:
    """``version id → its parent's id`` (``None`` for a base version or an unknown id)."""
    from molt.errors import MoltError

    def parent(version: str) -> str | None:
        try:
            parent_id: str | None = registry.get(version).parent_id
            return parent_id
        except MoltError:
            return None

    return parent
