"""Recording an episode of a replayable agent as an ATDP trajectory (the other half of replay).

:func:`record_episode` runs the agent live — the policy through a backend, tools through the
user's live functions — and turns what it did into events: the user input, one ``MODEL_CALL`` per
model call (request messages and offered tools as the observation, the generation with its sampling
as the action, the policy version and harness fingerprint as provenance), and one ``TOOL_CALL`` /
``RETRIEVAL`` / ``MEMORY_READ`` per request with its outcome (the cassette). The verifier's verdict
becomes a late reward. :func:`save_trajectory` seals and appends them to a store in one batch; in a
deployment the same events come through the gateway or an adapter and the Recorder.

Example::

    events, rewards, answer = await record_episode("support", "Where is order A-17?", policy, live)
    save_trajectory(store, events, rewards)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from typing import Any

from molt.atdp.chain import GENESIS, seal
from molt.atdp.ids import new_id
from molt.atdp.models import (
    Event,
    EventKind,
    Generation,
    MemoryRead,
    Message,
    Metadata,
    Observation,
    Outcome,
    Provenance,
    RetrievalQuery,
    RewardAnnotation,
    RewardSource,
    ToolCall,
    ToolCallRequest,
    UserMessage,
)
from molt.capture import SealedRow, SinkBatch, index_fields
from molt.replay.cassette import LiveTools
from molt.replay.decorator import ReplayableAgent
from molt.replay.episode import EpisodeTrace, live_answer, resolve_agent, resolve_verifier, run_agent
from molt.replay.policy import ReplayAgent
from molt.replay.verifiers import VerifyContext
from molt.store import Store

__all__ = ["record_episode", "save_trajectories", "save_trajectory", "trace_events"]


def trace_events(trace: EpisodeTrace, input: str, *, trajectory_id: str | None = None,
                 policy_version: str | None = None,
                 tenant_id: str | None = None, agent_id: str | None = None, task: str | None = None,
                 model: str | None = None) -> list[Event]:
    """The events of one run (see the module docstring), parents chained in order."""
    tid = trajectory_id or new_id()
    md = Metadata(tenant_id=tenant_id, agent_id=agent_id, task=task)
    events: list[Event] = [Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata=md,
                                 action=UserMessage(content=input))]
    for s in trace.steps:
        parent = events[-1].event_id
        if s.kind == "model" and s.decision is not None:
            d = s.decision
            gen = Generation(model=model, text=d.text, finish_reason=d.finish_reason,
                             sampling=dict(s.request) if s.request else None,
                             tool_calls=[ToolCallRequest(id=c["id"], name=c["name"], arguments=c["arguments"])
                                         for c in d.tool_calls] or None)
            obs = Observation(messages=[_message(m) for m in s.messages or []],
                              data={"tools": s.tools} if s.tools else None)
            events.append(Event(trajectory_id=tid, kind=EventKind.MODEL_CALL, parent_id=parent, observation=obs,
                                action=gen, outcome=Outcome(), metadata=md.model_copy(update={"model": model}),
                                provenance=Provenance(policy_version=policy_version,
                                                      harness_fingerprint=d.harness_fingerprint,
                                                      integration="molt.replay")))
        elif s.kind == "tool":
            events.append(Event(trajectory_id=tid, kind=EventKind.TOOL_CALL, parent_id=parent, name=s.name,
                                metadata=md, action=ToolCall(tool_name=s.name, arguments=s.request),
                                outcome=s.outcome))
        elif s.kind == "retrieval":
            events.append(Event(trajectory_id=tid, kind=EventKind.RETRIEVAL, parent_id=parent, metadata=md,
                                action=RetrievalQuery(query=s.request["query"], index=s.name or None,
                                                      top_k=s.request.get("top_k")),
                                observation=Observation(passages=s.passages), outcome=s.outcome))
        elif s.kind == "memory":
            events.append(Event(trajectory_id=tid, kind=EventKind.MEMORY_READ, parent_id=parent, metadata=md,
                                action=MemoryRead(key=s.name or None, query=s.request.get("query")),
                                outcome=s.outcome))
    return events


def _message(m: dict[str, Any]) -> Message:
    import orjson

    calls = None
    if m.get("tool_calls"):
        calls = []
        for c in m["tool_calls"]:
            fn = c.get("function") or {}
            args = fn.get("arguments")
            if isinstance(args, str):
                with contextlib.suppress(orjson.JSONDecodeError):
                    args = orjson.loads(args) if args.strip() else {}
            calls.append(ToolCallRequest(id=c.get("id"), name=fn.get("name", ""), arguments=args))
    return Message(role=m["role"], content=m.get("content"), name=m.get("name"), tool_call_id=m.get("tool_call_id"),
                   tool_calls=calls)


async def record_episode(agent: str | ReplayableAgent, input: str, policy: ReplayAgent, live: LiveTools, *,
                         verifier: Any = None, trajectory_id: str | None = None, tenant_id: str | None = None,
                         task: str | None = None) -> tuple[list[Event], list[RewardAnnotation], Any]:
    """Run ``agent`` live once and return ``(events, rewards, answer)`` (see the module docstring)."""
    ag = resolve_agent(agent)
    answer, trace = await run_agent(ag, input, policy, live_answer(live))
    events = trace_events(trace, input, trajectory_id=trajectory_id, policy_version=policy.version,
                          tenant_id=tenant_id, agent_id=ag.name, task=task, model=policy.backend.model)
    rewards: list[RewardAnnotation] = []
    ver = resolve_verifier(verifier, ag, task)
    if ver is not None:
        v = await ver.ascore(answer, VerifyContext(input=input, trajectory_id=events[0].trajectory_id, task=task))
        rewards.append(RewardAnnotation(trajectory_id=events[0].trajectory_id, value=v.reward,
                                        source=RewardSource.VERIFIER, reason=v.detail, tenant_id=tenant_id))
    return events, rewards, answer


def save_trajectory(store: Store, events: list[Event], rewards: Sequence[RewardAnnotation] = ()) -> None:
    """Seal ``events`` into a fresh hash chain and append them (and ``rewards``) in one store batch."""
    save_trajectories(store, [(events, rewards)])


def save_trajectories(store: Store, items: Iterable[tuple[list[Event], Sequence[RewardAnnotation]]]) -> None:
    """:func:`save_trajectory` for many trajectories, in one store batch."""
    rows: list[SealedRow] = []
    rewards: list[dict[str, Any]] = []
    for events, rws in items:
        prev = GENESIS
        for seq, ev in enumerate(events):
            s = seal(ev, seq, prev)
            rows.append(SealedRow(index_fields(ev, seq), s.envelope, s.payload, s.salt, s.digest, s.prev_hash,
                                  s.hash))
            prev = s.hash
        rewards.extend(r.model_dump(mode="json") for r in rws)
    store.write_batch(SinkBatch(events=rows, rewards=rewards))
