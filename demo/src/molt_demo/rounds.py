"""The round loop: each round's traffic through the gateway (the LangChain agent, its verifier's reward, last
round's late user corrections), then one control-plane cycle per agent; and what each round measured."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from rich.progress import Progress

from molt.atdp.ids import new_id
from molt.control.change import proposed_text
from molt_demo.langchain_agent import LangChainModel, LangChainTools
from molt_demo.traffic import TENANT_KEYS, math_module, math_traffic, round_traffic

__all__ = ["RoundStats", "model_calls", "rate", "rounds_served_by_trained_adapter", "run_rounds"]


@dataclass
class RoundStats:
    round: int
    tenant: str
    n: int = 0
    successes: int = 0
    reward: float = 0.0
    model_calls: int = 0
    by_task: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    versions: Counter[str] = field(default_factory=Counter)
    math_correct: int = 0


def run_rounds(gw: Any, plane: Any, recorder: Any, store: Any, stats: list[RoundStats],
               decisions: list[dict[str, Any]], rounds: int, per_tenant: int, prog: Progress, tools: LangChainTools,
               math_plane: Any = None, math_per_tenant: int = 0,
               done: Callable[[int, list[dict[str, Any]]], bool] | None = None) -> None:
    """The rounds: traffic through the gateway, rewards, late corrections, one plane cycle per agent
    (``math_plane``: plus the ``molt-math`` agent's questions and cycles, see :mod:`molt_demo.math_agent`).
    ``done(round, decisions)``, asked after each round's cycles, ends the run before ``rounds`` when true."""
    from molt.gateway import create_app
    from molt.gateway.loopback import ServerThread
    from molt.replay.decorator import AGENTS
    from molt.replay.verifiers import VerifyContext
    from molt_desk.world import AGENT, LEGACY_AGENT, verify

    cycles = [(plane, "acme", AGENT), (plane, "globex", LEGACY_AGENT)]
    if math_plane is not None:
        from molt_demo.math_agent import MATH_AGENT

        cycles += [(math_plane, "acme", MATH_AGENT), (math_plane, "globex", MATH_AGENT)]

    pending_corrections: list[tuple[str, str, str]] = []
    seen_calls: dict[str, int] = {}
    with ServerThread(create_app(gw), name="molt-demo-gateway") as srv, prog:
        base = f"http://127.0.0.1:{srv.port}"
        bar = prog.add_task("rounds", total=rounds)
        for rnd in range(rounds):
            # Late rewards: last round's users correct the answers they got wrong.
            for tenant, tid, text in pending_corrections:
                _post_reward(base, TENANT_KEYS[tenant], tid, 0.0, "user_correction", text)
            pending_corrections = []
            per: dict[str, RoundStats] = {t: RoundStats(rnd, t) for t in TENANT_KEYS}
            for i, tk in enumerate(round_traffic(rnd, per_tenant) + math_traffic(rnd, math_per_tenant)):
                tid = new_id()
                ag = AGENTS.get(tk.agent)
                math = tk.agent not in (AGENT, LEGACY_AGENT)
                # A session id of the demo's own: the canary split (a hash of the session key) is the same in
                # every run, as the traffic is, so the report is reproducible. Keyed by the random trajectory
                # id, how many requests a canary got each round, and the round it could be promoted, varied.
                model = LangChainModel(base + "/v1", TENANT_KEYS[tk.tenant], agent=tk.agent, task=tk.task,
                                       trajectory_id=tid, session_id=f"demo-{rnd + 1}-{i}",
                                       **({"model": math_module().MATH_MODEL} if math else {}))
                answer = ag.fn(tk.input, model, tools)
                try:
                    (ag.verifier if math else verify)(answer, VerifyContext(input=tk.input, trajectory_id=tid,
                                                                            task=tk.task))
                    ok = True
                    reason = "check passed"
                except AssertionError as exc:
                    ok, reason = False, f"assertion failed: {exc}"
                _post_reward(base, TENANT_KEYS[tk.tenant], tid, 1.0 if ok else 0.0, "verifier", reason)
                if not ok and tk.correction:
                    pending_corrections.append((tk.tenant, tid, tk.correction))
                s = per[tk.tenant]
                s.n += 1
                s.successes += ok
                s.reward += 1.0 if ok else 0.0
                s.by_task[tk.task][0] += ok
                s.by_task[tk.task][1] += 1
                if math:
                    s.math_correct += math_module().correct(answer, tk.input)
            if not recorder.flush(timeout=120, deliver=True):
                raise RuntimeError(f"the demo's recorder did not drain in 120 s: {recorder.stats.as_dict()}")
            for s in per.values():
                stats.append(s)
            calls = model_calls(store)
            for s in per.values():
                s.model_calls = calls.get(s.tenant, 0) - seen_calls.get(s.tenant, 0)
            seen_calls = calls
            # One control-plane cycle per agent.
            for pl, tenant, agent in cycles:
                res = asyncio.run(pl.arun_cycle(tenant, agent))
                rec = res.record
                decisions.append({"round": rnd, "tenant": tenant, "agent": agent, "choice": rec.choice,
                                  "reason": rec.reason, "version": rec.applied_version, "cycle_id": rec.cycle_id,
                                  "cluster": res.chosen.cluster if res.chosen else None,
                                  "description": res.chosen.description if res.chosen else None,
                                  "text": proposed_text(res.chosen.model_dump(mode="json", exclude={"parts"}))
                                  if res.chosen else None,
                                  "actions": rec.actions, "rejected": len(rec.rejected)})
            prog.update(bar, advance=1, description=_round_line(rnd, per, decisions[-len(cycles):]))
            if done is not None and done(rnd, decisions):
                break


def rounds_served_by_trained_adapter(rnd: int, decisions: list[dict[str, Any]]) -> int:
    """How many rounds up to ``rnd`` a version the plane made by a weight update served as the live version:
    the rounds after the first cycle that promoted one (0 if none was promoted before ``rnd``)."""
    trained = {d["version"] for d in decisions if d["choice"] == "weight_update" and d["version"]}
    promoted = [d["round"] for d in decisions if d["choice"] == "promote" and d["version"] in trained]
    return max(0, rnd - min(promoted)) if promoted else 0


def _post_reward(base: str, key: str, tid: str, value: float, source: str, reason: str) -> None:
    r = httpx.post(base + "/v1/molt/rewards/trajectory", timeout=30, headers={"authorization": f"Bearer {key}"},
                   json={"trajectory_id": tid, "value": value, "source": source, "reason": reason})
    r.raise_for_status()


def model_calls(store: Any) -> dict[str, int]:
    tbl = store.table("events").search().where("kind = 'model_call'").select(["tenant_id"]).limit(None).to_arrow()
    return dict(Counter(tbl.column("tenant_id").to_pylist()))


def rate(stats: list[RoundStats]) -> float:
    n = sum(s.n for s in stats)
    return sum(s.successes for s in stats) / n if n else 0.0


def _round_line(rnd: int, per: dict[str, RoundStats], decs: list[dict[str, Any]]) -> str:
    parts = [f"{t} {s.successes}/{s.n}" for t, s in per.items()]
    acts = [f"{d['tenant']}: {d['choice']}" for d in decs if d["choice"] != "noop"]
    return f"round {rnd + 1}: " + ", ".join(parts) + (f" — {'; '.join(acts)}" if acts else "")
