"""Late feedback through the gateway: rewards on a call, a trajectory, or a session's last call, and
the end of a trajectory.

Rewards are append-only :class:`~molt.atdp.RewardAnnotation` records (the calls they point at are
never rewritten), sent through the Recorder like events. "The last call" of a session is the most
recent model call of its current trajectory; with ``discount`` γ the k-th call before it gets
``value · γ^k`` as well (a per-turn discounted credit, each its own annotation).

Calls are identified by the id the gateway returned: the response ``id``
(``chatcmpl-<event id>``, ``resp_<event id>``, ``msg_<event id>``) or the ``X-Molt-Event-Id`` header.
A key may only reward its own tenant's calls. ``source`` says who gives the reward; left out, a failing
reward (value ≤ 0.5) that carries a ``reason`` is a ``user_correction`` — what the control plane reads as
a correction and may learn from — and any other a ``user_feedback`` rating (the call's outcome). The
response says which was recorded. The bodies are published in ``/openapi.json`` (:mod:`molt.gateway.openapi`).
A key may send feedback only ``GatewayConfig.feedback_per_minute`` times a minute (429 past it): what
users say becomes the agent's prompt text through the control plane, so one key must not be able to
speak for many users.
"""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from molt.atdp.models import (
    AgentStep,
    Event,
    EventKind,
    Metadata,
    Outcome,
    OutcomeStatus,
    Provenance,
    RewardAnnotation,
    RewardSource,
)
from molt.errors import CaptureError, NotFound, RateLimited
from molt.governance.access import Principal

if TYPE_CHECKING:
    from molt.gateway.service import Gateway

__all__ = ["CallReward", "EndTrajectory", "LastCallReward", "TrajectoryReward", "Feedback"]

_BODY = ConfigDict(extra="forbid")


class _Reward(BaseModel):
    model_config = _BODY

    value: float = Field(description="The reward: above 0.5 the call succeeded, at or below it the call failed.")
    source: RewardSource | None = Field(default=None, description=(
        "Who says so. user_correction: the user said what the right answer is (in reason) — the control plane "
        "learns from it; user_feedback: a rating, read as the call's outcome; verifier / test_result / judge / "
        "human_label / environment: the outcome from that source. Left out: user_correction when a reason comes "
        "with a failing value (value ≤ 0.5), else user_feedback."))
    reason: str | None = Field(default=None, max_length=16_384, description=(
        "Text: the user's correction (the right answer), or why the value is what it is."))
    dimensions: dict[str, float] | None = None

    @field_validator("value")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("value must be a finite number.")
        return v

    @model_validator(mode="after")
    def _default_source(self) -> _Reward:
        # What the control plane reads: a failing reward that says what was wrong is a user's correction
        # (it may become a memory once enough users agree); a bare rating is the call's outcome.
        if self.source is None:
            failing = self.value <= 0.5 and bool(self.reason and self.reason.strip())
            self.source = RewardSource.USER_CORRECTION if failing else RewardSource.USER_FEEDBACK
        return self


class CallReward(_Reward):
    """A reward on one model call (``call_id``: the response id or the ``X-Molt-Event-Id``)."""

    call_id: str = Field(min_length=1, max_length=200)


class TrajectoryReward(_Reward):
    """A reward on a whole trajectory."""

    trajectory_id: str = Field(min_length=1, max_length=128)


class LastCallReward(_Reward):
    """A reward on the last model call of a session (or trajectory), optionally discounted back
    over the earlier calls by ``discount`` (0 < γ ≤ 1)."""

    session_id: str | None = Field(default=None, max_length=256)
    trajectory_id: str | None = Field(default=None, max_length=128)
    discount: float | None = Field(default=None, gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _one_target(self) -> LastCallReward:
        if (self.session_id is None) == (self.trajectory_id is None):
            raise ValueError("give exactly one of session_id or trajectory_id.")
        return self


class EndTrajectory(BaseModel):
    """Close a trajectory: its outcome status, and optionally a final reward on it."""

    model_config = _BODY

    status: OutcomeStatus = OutcomeStatus.OK
    reward: float | None = None
    source: RewardSource = RewardSource.ENVIRONMENT
    reason: str | None = Field(default=None, max_length=16_384)

    @field_validator("reward")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("reward must be a finite number.")
        return v


def _event_id(call_id: str) -> str:
    for prefix in ("chatcmpl-", "cmpl-", "resp_", "msg_"):
        if call_id.startswith(prefix):
            return call_id[len(prefix):]
    return call_id


class Feedback:
    """The feedback operations of one gateway."""

    def __init__(self, gateway: Gateway):
        self.gw = gateway
        self._buckets: dict[tuple[str, str], tuple[float, float]] = {}  # (tenant, key) -> (tokens, at)
        self._lock = threading.Lock()

    def admit(self, p: Principal, n: int = 1) -> None:
        """Take ``n`` from ``p``'s key's bucket (``feedback_per_minute`` deep, refilled continuously), or
        raise :class:`RateLimited` — before anything is looked up or written."""
        rate = self.gw.config.feedback_per_minute
        key = (p.tenant_id, p.key_name or "")
        now = time.monotonic()
        with self._lock:
            tokens, at = self._buckets.get(key, (float(rate), now))
            tokens = min(float(rate), tokens + (now - at) * rate / 60.0)
            if tokens < n:
                self._buckets[key] = (tokens, now)
                wait = (n - tokens) * 60.0 / rate
                raise RateLimited(f"The key {p.key_name!r} sent more than {rate} feedback requests a minute; retry in "
                                  f"{wait:.1f} s (GatewayConfig.feedback_per_minute).")
            self._buckets[key] = (tokens - n, now)
            if len(self._buckets) > 100_000:  # keys that stopped sending: full buckets carry nothing
                for k, (t, a) in list(self._buckets.items()):
                    if t + (now - a) * rate / 60.0 >= rate:
                        del self._buckets[k]

    # ------------------------------------------------------------------ lookups

    def _store_rows(self, where: Any) -> list[dict[str, Any]]:
        """The stored events ``where`` (a :class:`molt.store.Filter`) selects."""
        store = self.gw.store
        if store is None:
            return []
        rows: list[dict[str, Any]] = []
        for batch in store.iter_events(where=where):
            rows += batch.select(["event_id", "trajectory_id", "tenant_id", "seq", "kind", "session_id"]).to_pylist()
        return rows

    def _call(self, p: Principal, call_id: str) -> tuple[str, str]:
        """(trajectory id, event id) of a call of ``p``'s tenant."""
        from molt.store import Filter  # the store (LanceDB) loads on first use, not with the gateway

        eid = _event_id(call_id)
        st = self.gw.sessions.by_event(p.tenant_id, eid)
        if st is not None:
            return st.trajectory_id, eid
        rows = [r for r in self._store_rows(Filter(event_id=eid)) if r["tenant_id"] == p.tenant_id]
        if rows:
            return rows[0]["trajectory_id"], eid
        raise NotFound(f"No model call {call_id!r} of tenant {p.tenant_id!r} is known to this gateway or its store.",
                       event_id=eid)

    def _trajectory_calls(self, p: Principal, tid: str) -> list[str]:
        """Model-call event ids of a trajectory of ``p``'s tenant, oldest first (may be empty)."""
        from molt.store import Filter

        st = self.gw.sessions.trajectory(p.tenant_id, tid)
        if st is not None and not st.calls_truncated:
            return list(st.calls)
        # stored under the client's id, or under its keyed digest where the id holds personal data
        # (molt.governance.envelope; the Recorder maps the reward's id the same way)
        from molt.governance.envelope import lookup_ids

        rows = self._store_rows(Filter().among("trajectory_id", lookup_ids(tid, [p.tenant_id])))
        if st is not None:  # earlier calls fell out of memory: the store's, then what it has not got yet
            stored = [r["event_id"] for r in sorted(rows, key=lambda r: r["seq"]) if r["kind"] == "model_call"
                      and r["tenant_id"] == p.tenant_id]
            have = set(stored)
            return stored + [e for e in st.calls if e not in have]
        if not rows:
            raise NotFound(f"No trajectory {tid!r} is known to this gateway or its store.", trajectory_id=tid)
        if any(r["tenant_id"] != p.tenant_id for r in rows):
            raise NotFound(f"No trajectory {tid!r} of tenant {p.tenant_id!r}.", trajectory_id=tid)
        return [r["event_id"] for r in sorted(rows, key=lambda r: r["seq"]) if r["kind"] == "model_call"]

    # ------------------------------------------------------------------ writing

    def _append(self, annotations: list[RewardAnnotation]) -> list[str]:
        rec = self.gw.recorder
        if rec is not None:
            for a in annotations:
                if not rec.reward(a):
                    raise CaptureError("The Recorder refused the reward (queue full or closed); retry later.",
                                       trajectory_id=a.trajectory_id)
        elif self.gw.store is not None:
            self.gw.store.append_rewards(annotations)
        else:
            raise CaptureError("This gateway records nothing (no Recorder and no store); rewards cannot be kept.")
        return [a.annotation_id for a in annotations]

    def _ann(self, p: Principal, body: _Reward, tid: str, eid: str | None, value: float,
             reason: str | None) -> RewardAnnotation:
        return RewardAnnotation(trajectory_id=tid, event_id=eid, value=value,
                                source=body.source or RewardSource.USER_FEEDBACK, reason=reason,
                                dimensions=body.dimensions, annotator=p.key_name, tenant_id=p.tenant_id)

    def reward_call(self, p: Principal, body: CallReward) -> dict[str, Any]:
        """Reward one call."""
        self.admit(p)
        tid, eid = self._call(p, body.call_id)
        ids = self._append([self._ann(p, body, tid, eid, body.value, body.reason)])
        return {"annotation_ids": ids, "trajectory_id": tid, "event_ids": [eid], "source": str(body.source)}

    def _resolve(self, p: Principal, trajectory_id: str) -> str:
        """The trajectory a client's id names within ``p``'s tenant (the rule chat and OTLP use too)."""
        return self.gw.namespace.resolve(p.tenant_id, trajectory_id)

    def reward_trajectory(self, p: Principal, body: TrajectoryReward) -> dict[str, Any]:
        """Reward a whole trajectory."""
        self.admit(p)
        tid = self._resolve(p, body.trajectory_id)
        self._trajectory_calls(p, tid)  # existence and tenant check
        ids = self._append([self._ann(p, body, tid, None, body.value, body.reason)])
        return {"annotation_ids": ids, "trajectory_id": tid, "event_ids": [], "source": str(body.source)}

    def reward_last_call(self, p: Principal, body: LastCallReward) -> dict[str, Any]:
        """Reward the last call of a session or trajectory (discounted back over earlier calls)."""
        self.admit(p)
        if body.session_id is not None:
            st = self.gw.sessions.session(p.tenant_id, body.session_id)
            if st is None:
                raise NotFound(f"No open session {body.session_id!r} of tenant {p.tenant_id!r} on this gateway.")
            tid = st.trajectory_id
            calls = self._trajectory_calls(p, tid) if st.calls_truncated else list(st.calls)
        else:
            tid = self._resolve(p, body.trajectory_id or "")
            calls = self._trajectory_calls(p, tid)
        if not calls:
            raise NotFound(f"The trajectory {tid} has no model call to reward yet.", trajectory_id=tid)
        anns = [self._ann(p, body, tid, calls[-1], body.value, body.reason)]
        if body.discount is not None:
            for k, eid in enumerate(reversed(calls[:-1]), start=1):
                v = body.value * body.discount**k
                anns.append(self._ann(p, body, tid, eid, v, f"{body.reason + '; ' if body.reason else ''}"
                                      f"discounted from the last call: γ={body.discount:g}, {k} turn(s) back"))
        ids = self._append(anns)
        return {"annotation_ids": ids, "trajectory_id": tid, "event_ids": [a.event_id for a in anns],
                "source": str(body.source)}

    def end_trajectory(self, p: Principal, tid: str, body: EndTrajectory, *, resolved: bool = False) -> dict[str, Any]:
        """Record the end of a trajectory (and its final reward); its session starts anew. ``tid`` is the
        client's id (resolved within its tenant) unless ``resolved``."""
        if not resolved:
            tid = self._resolve(p, tid)
        calls = self._trajectory_calls(p, tid)
        st = self.gw.sessions.trajectory(p.tenant_id, tid)
        parent = st.last_event_id if st is not None else (calls[-1] if calls else None)
        ev = Event(trajectory_id=tid, session_id=st.session_id if st else None, parent_id=parent,
                   kind=EventKind.AGENT_STEP, name="trajectory.end",
                   action=AgentStep(name="trajectory.end", step_type="end"),
                   outcome=Outcome(status=body.status), metadata=Metadata(tenant_id=p.tenant_id),
                   provenance=Provenance(integration="gateway"))
        rec = self.gw.recorder
        if rec is None:
            raise CaptureError("This gateway records nothing (no Recorder); the end of a trajectory cannot be kept.")
        rec.record(ev)
        ids: list[str] = []
        if body.reward is not None:
            ids = self._append([RewardAnnotation(trajectory_id=tid, value=body.reward, source=body.source,
                                                 reason=body.reason, annotator=p.key_name, tenant_id=p.tenant_id)])
        if st is not None:
            self.gw.sessions.end(st)
        return {"trajectory_id": tid, "event_id": ev.event_id, "annotation_ids": ids}

    def end_session(self, p: Principal, session_id: str, body: EndTrajectory) -> dict[str, Any]:
        """End the current trajectory of a session."""
        st = self.gw.sessions.session(p.tenant_id, session_id)
        if st is None:
            raise NotFound(f"No open session {session_id!r} of tenant {p.tenant_id!r} on this gateway.")
        return self.end_trajectory(p, st.trajectory_id, body, resolved=True)
