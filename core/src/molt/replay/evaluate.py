"""Counterfactual evaluation: would a candidate policy version have done better on recorded traffic?

Given a window of trajectories and a candidate (an :class:`~molt.replay.policy.Overrides` set served
by a backend), :func:`evaluate_candidate` replays a sample of episodes under the candidate, scores
each with the task's verifier, and compares with the recorded rewards:

- **success-rate delta** with a 95 % Newcombe (hybrid Wilson score) interval. Newcombe's interval
  treats the two rates as independent samples; here they are paired (same trajectories), which makes
  it conservative (wider than a paired interval).
- **mean reward delta** with a paired percentile-bootstrap interval (2,000 resamples, seeded).
- **coverage**: episodes that left the recording with no live tool are *unknown* and are excluded from
  both estimates (never counted as success or failure); their number is reported.
- **cost**: model calls, prompt / completion tokens, and wall time of the replays.

A :class:`ReplayMemo` passed as ``memo`` remembers each trajectory's replay under a policy, so a caller
that meets the same trajectories again (the control plane, cycle after cycle over a sliding window)
replays only what is new or what changed.

Every per-trajectory result (the evidence) and a summary row are appended to the ``replay_results``
table of the store, keyed by ``evaluation_id`` and linked to ``candidate_id``. Nothing else in the
store is written.

Example::

    ev = await evaluate_candidate(store, ids, "support", ReplayAgent(backend, Overrides(memories=(fact,))),
                                  candidate_id="mem-insert-1")
    print(ev.success_delta, ev.success_delta_ci)
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import orjson
import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

from molt.atdp.ids import new_id
from molt.errors import ReplayError
from molt.replay.cassette import LiveTools, Normalization
from molt.replay.decorator import ReplayableAgent
from molt.replay.episode import EpisodeResult, replay_episode
from molt.replay.generic import check_tenant, replay_recording
from molt.replay.load import load_trajectories
from molt.replay.policy import ReplayAgent
from molt.stats import bootstrap_ci, newcombe_diff
from molt.store import Filter, Store, Trajectory
from molt.store.tables import append, ensure_table

__all__ = ["RESULTS_SCHEMA", "RESULTS_TABLE", "Evaluation", "ReplayMemo", "evaluate_candidate",
           "load_results"]

RESULTS_TABLE = "replay_results"
RESULTS_SCHEMA = pa.schema([
    pa.field("result_id", pa.string(), nullable=False),
    pa.field("evaluation_id", pa.string(), nullable=False),
    pa.field("candidate_id", pa.string(), nullable=False),
    pa.field("tenant_id", pa.string()),
    pa.field("trajectory_id", pa.string()),           # null on the summary row
    pa.field("kind", pa.string(), nullable=False),    # "trajectory" | "summary"
    pa.field("status", pa.string(), nullable=False),  # ok | unknown | error | invalid (summary: "summary")
    pa.field("recorded_reward", pa.float64()),
    pa.field("replayed_reward", pa.float64()),
    pa.field("delta", pa.float64()),
    pa.field("record", pa.binary(), nullable=False),  # JSON evidence / summary
    pa.field("created_at", pa.timestamp("us", tz="UTC"), nullable=False),
])

@dataclass
class Evaluation:
    """The estimate for one candidate over one window, with its evidence (see the module docstring)."""

    evaluation_id: str
    candidate_id: str
    overrides: dict[str, Any]
    window: int
    sampled: int
    scored: int
    unknown: int
    errors: int
    invalid: int
    baseline_success_rate: float | None
    candidate_success_rate: float | None
    success_delta: float | None
    success_delta_ci: tuple[float, float] | None
    reward_delta: float | None
    reward_delta_ci: tuple[float, float] | None
    cost: dict[str, float]
    evidence: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Everything but the evidence, JSON-able."""
        return {k: v for k, v in self.__dict__.items() if k != "evidence"}


class ReplayMemo:
    """Replays of (trajectory, policy) pairs kept across evaluations, least recently used dropped first.

    A result is reused only when nothing that decides it changed: the same trajectory with the same
    events and late rewards (a correction that arrives later changes how the replay is judged), the
    same overrides by content (a candidate and a live version with equal content are one policy), and
    the same agent, backend, judge, verifier, live tools and normalisation. A replay that raised is not
    kept (the next evaluation tries again). One replay of a pair is one sample of what the policy does
    there: replaying it again every cycle would pay the model calls again and test the same evidence
    again (each retest a new chance of a false alarm).
    """

    def __init__(self, max_entries: int = 4096):
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._results: OrderedDict[tuple[Hashable, ...], EpisodeResult] = OrderedDict()

    def __len__(self) -> int:
        return len(self._results)

    @staticmethod
    def key(traj: Trajectory, policy: ReplayAgent, context: tuple[Hashable, ...]) -> tuple[Hashable, ...]:
        """What decides a replay: the trajectory as loaded, the policy's content, the replay's context."""
        seen = (traj.trajectory_id, len(traj.events), tuple(r.annotation_id for r in traj.rewards))
        return (*seen, policy.overrides.fingerprint(), _identity(policy.backend), *context)

    def get(self, key: tuple[Hashable, ...]) -> EpisodeResult | None:
        res = self._results.get(key)
        if res is None:
            self.misses += 1
            return None
        self.hits += 1
        self._results.move_to_end(key)
        return res

    def put(self, key: tuple[Hashable, ...], res: EpisodeResult) -> None:
        if res.status == "error":
            return
        self._results[key] = res
        self._results.move_to_end(key)
        while len(self._results) > self.max_entries:
            self._results.popitem(last=False)


def _identity(x: Any) -> Hashable:
    """``x`` itself when hashable by value or identity (a backend, an agent), else its repr."""
    try:
        hash(x)
    except TypeError:
        return repr(x)
    return cast(Hashable, x)


async def evaluate_candidate(store: Store, trajectory_ids: Sequence[str], agent: str | ReplayableAgent | None,
                             policy: ReplayAgent, *, candidate_id: str | None = None, sample: int | None = None,
                             seed: int = 0, verifier: Any = None, live: LiveTools | None = None,
                             normalization: Normalization | None = None, tenant_id: str | None = None,
                             judge: Any = None, save: bool = True, memo: ReplayMemo | None = None,
                             progress: Callable[[EpisodeResult | None], None] | None = None) -> Evaluation:
    """Replay a sample of ``trajectory_ids`` under ``policy`` and estimate the candidate's effect.

    ``agent`` is the ``@molt.replayable`` entry point, or ``None`` to re-drive each trajectory from its
    recording alone (:func:`molt.replay.generic.replay_recording`, judged by the verifier, the user's
    correction, then ``judge`` — a judge model's backend, default the policy's). ``sample`` draws that
    many trajectories (seeded by ``seed``; default all). A trajectory that cannot be replayed (corrupt,
    partial, or — with ``tenant_id`` — another tenant's) is reported as ``invalid`` evidence with the
    reason and left out of the estimate. ``memo`` reuses replays it holds (see :class:`ReplayMemo`);
    ``cost`` counts only the model calls made. ``progress`` is called once per trajectory (for progress bars).
    """
    ids = list(dict.fromkeys(trajectory_ids))
    window = len(ids)
    if sample is not None and sample < window:
        ids = random.Random(seed).sample(ids, sample)
    cid = candidate_id or policy.version
    t0 = time.perf_counter()
    calls0, pt0, ct0 = policy.calls, policy.prompt_tokens, policy.completion_tokens
    results: list[EpisodeResult] = []
    evidence: list[dict[str, Any]] = []
    invalid = 0
    loaded = load_trajectories(store, ids)
    context = (_identity(agent), _identity(verifier), _identity(judge), _identity(live), _identity(normalization),
               tenant_id)
    for tid in ids:
        traj = loaded[tid]
        if isinstance(traj, ReplayError):
            invalid += 1
            evidence.append({"trajectory_id": tid, "status": "invalid", "error": str(traj)})
            if progress is not None:
                progress(None)
            continue
        key = ReplayMemo.key(traj, policy, context) if memo is not None else None
        if memo is not None and key is not None and (kept := memo.get(key)) is not None:
            res = dataclasses.replace(kept, candidate=cid) if kept.candidate != cid else kept
            results.append(res)
            evidence.append(res.as_dict() | {"memo": True})
            if progress is not None:
                progress(res)
            continue
        try:
            if agent is None:
                res = await replay_recording(traj, policy, verifier=verifier, judge=judge, live=live,
                                             normalization=normalization, tenant_id=tenant_id)
            else:
                check_tenant(traj, tenant_id)
                res = await replay_episode(traj, agent, policy, verifier=verifier, live=live,
                                           normalization=normalization)
        except ReplayError as exc:
            invalid += 1
            evidence.append({"trajectory_id": tid, "status": "invalid", "error": str(exc)})
            if progress is not None:
                progress(None)
            continue
        if memo is not None and key is not None:
            memo.put(key, res)
        results.append(res)
        evidence.append(res.as_dict())
        if progress is not None:
            progress(res)
    scored = [r for r in results if r.status == "ok" and r.replayed_reward is not None
              and r.recorded_reward is not None]
    n = len(scored)
    k1 = sum(1 for r in scored if (r.replayed_reward or 0.0) > 0.5)
    k0 = sum(1 for r in scored if (r.recorded_reward or 0.0) > 0.5)
    deltas = [r.delta for r in scored if r.delta is not None]
    ev = Evaluation(
        evaluation_id=new_id(), candidate_id=cid,
        overrides=policy.overrides.model_dump(mode="json", exclude_defaults=True),
        window=window, sampled=len(ids), scored=n, unknown=sum(r.status == "unknown" for r in results),
        errors=sum(r.status == "error" for r in results), invalid=invalid,
        baseline_success_rate=k0 / n if n else None, candidate_success_rate=k1 / n if n else None,
        success_delta=(k1 - k0) / n if n else None, success_delta_ci=newcombe_diff(k1, n, k0, n) if n else None,
        reward_delta=sum(deltas) / len(deltas) if deltas else None,
        reward_delta_ci=bootstrap_ci(deltas, seed=seed) if deltas else None,
        cost={"model_calls": policy.calls - calls0, "prompt_tokens": policy.prompt_tokens - pt0,
              "completion_tokens": policy.completion_tokens - ct0, "wall_s": round(time.perf_counter() - t0, 4)},
        evidence=evidence)
    if save:
        save_evaluation(store, ev, tenant_id=tenant_id)
    return ev


def save_evaluation(store: Store, ev: Evaluation, *, tenant_id: str | None = None) -> None:
    """Append the evaluation's evidence rows and summary row to ``replay_results`` (one append)."""
    ensure_table(store, RESULTS_TABLE, RESULTS_SCHEMA)
    now = datetime.now(UTC)
    rows = []
    for e in ev.evidence:
        rows.append({"result_id": new_id(), "evaluation_id": ev.evaluation_id, "candidate_id": ev.candidate_id,
                     "tenant_id": tenant_id, "trajectory_id": e["trajectory_id"], "kind": "trajectory",
                     "status": e["status"], "recorded_reward": e.get("recorded_reward"),
                     "replayed_reward": e.get("replayed_reward"), "delta": e.get("delta"),
                     "record": orjson.dumps(e), "created_at": now})
    rows.append({"result_id": new_id(), "evaluation_id": ev.evaluation_id, "candidate_id": ev.candidate_id,
                 "tenant_id": tenant_id, "trajectory_id": None, "kind": "summary", "status": "summary",
                 "recorded_reward": ev.baseline_success_rate, "replayed_reward": ev.candidate_success_rate,
                 "delta": ev.success_delta, "record": orjson.dumps(ev.summary()), "created_at": now})
    append(store, RESULTS_TABLE, pa.Table.from_pylist(rows, schema=RESULTS_SCHEMA))


def load_results(store: Store, *, candidate_id: str | None = None,
                 evaluation_id: str | None = None) -> list[dict[str, Any]]:
    """Stored result rows (``record`` decoded) for a candidate or one evaluation, oldest first."""
    tbl = ensure_table(store, RESULTS_TABLE, RESULTS_SCHEMA)
    where = Filter.given(candidate_id=candidate_id, evaluation_id=evaluation_id)
    q = tbl.search()
    if where:
        q = q.where(str(where))
    rows = q.limit(None).to_arrow().to_pylist()
    for r in rows:
        r["record"] = orjson.loads(r["record"])
    return sorted(rows, key=lambda r: r["created_at"])
