"""Loading a trajectory for replay: read-only, verified, and refused clearly when it cannot be replayed.

A replay never writes to the events or rewards tables. Before anything runs, :func:`load_trajectory`
checks that the trajectory is whole and untampered (the hash chain verifies, ``seq`` has no gaps, no
payload was erased) and that what a replay needs is there (a model call has its request; a tool call
has its outcome and names a tool the agent was offered). Each refusal is a
:class:`~molt.errors.ReplayError` naming the trajectory and the event.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson

from molt.atdp.chain import SealedEvent, unseal, verify_chain
from molt.atdp.models import Event, EventKind, RewardAnnotation
from molt.errors import NotFound, ReplayError
from molt.store import Filter, Store, Trajectory

__all__ = ["check_replayable", "load_trajectories", "load_trajectory", "model_request", "offered_tools"]

_EVENT_IN = re.compile(r"\(event ([^)]+)\)")


def load_trajectory(store: Store, trajectory_id: str) -> Trajectory:
    """The trajectory, verified and checked for replay (see the module docstring)."""
    try:
        sealed = store.sealed_events(trajectory_id)
    except Exception as exc:
        raise ReplayError(f"Cannot read trajectory {trajectory_id} from the store: {exc}.",
                          trajectory_id=trajectory_id) from exc
    return _checked(trajectory_id, sealed, None, store)


_CHUNK = 256


def load_trajectories(store: Store, trajectory_ids: Sequence[str]) -> dict[str, Trajectory | ReplayError]:
    """Many trajectories at once (one events query and one rewards query per 256 ids), each verified
    and checked like :func:`load_trajectory`; a trajectory that cannot be replayed maps to its error."""
    out: dict[str, Trajectory | ReplayError] = {}
    for i in range(0, len(trajectory_ids), _CHUNK):
        chunk = list(trajectory_ids[i:i + _CHUNK])
        where = Filter().among("trajectory_id", chunk)
        by_tid: dict[str, list[SealedEvent]] = {t: [] for t in chunk}
        for rb in store.iter_events(where):
            cols = rb.to_pydict()
            for tid, eid, seq, env, pay, salt, chain in zip(
                    cols["trajectory_id"], cols["event_id"], cols["seq"], cols["envelope"], cols["payload"],
                    cols["payload_salt"], cols["chain"], strict=True):
                by_tid[tid].append(SealedEvent(event_id=eid, trajectory_id=tid, seq=seq, envelope=env, payload=pay,
                                               salt=salt, digest=chain[:64], prev_hash=chain[65:129],
                                               hash=chain[130:]))
        rewards: dict[str, list[RewardAnnotation]] = {t: [] for t in chunk}
        got = store.table("rewards").search().where(str(where)).select(["trajectory_id", "record", "created_at"])
        for r in sorted(got.limit(None).to_arrow().to_pylist(), key=lambda r: r["created_at"]):
            rewards[r["trajectory_id"]].append(RewardAnnotation.model_validate(orjson.loads(r["record"])))
        for tid in chunk:
            try:
                out[tid] = _checked(tid, sorted(by_tid[tid], key=lambda s: s.seq), rewards[tid], store)
            except ReplayError as exc:
                out[tid] = exc
    return out


def _checked(trajectory_id: str, sealed: list[SealedEvent], rewards: list[RewardAnnotation] | None,
             store: Store) -> Trajectory:
    if not sealed:
        raise ReplayError(f"Trajectory {trajectory_id} is not in the store; nothing to replay. Check the id "
                          f"with `molt trajectories list`.", trajectory_id=trajectory_id)
    report = verify_chain(trajectory_id, sealed)
    if not report.ok:
        first = report.problems[0]
        m = _EVENT_IN.search(first)
        raise ReplayError(f"Trajectory {trajectory_id} cannot be replayed: its hash chain does not verify "
                          f"({first}; {len(report.problems)} problem(s) in all). Events are missing, "
                          f"reordered or edited; replay a trajectory that `molt trajectories verify` accepts.",
                          trajectory_id=trajectory_id, event_id=m.group(1) if m else None)
    erased = [s for s in sealed if s.payload is None]
    if erased:
        raise ReplayError(f"Trajectory {trajectory_id} cannot be replayed: the payload of event "
                          f"{erased[0].event_id} (seq {erased[0].seq}) was erased.",
                          trajectory_id=trajectory_id, event_id=erased[0].event_id)
    try:
        events = [unseal(s.envelope, s.payload) for s in sealed]
        traj = Trajectory(trajectory_id=trajectory_id, events=events,
                          rewards=store.rewards(trajectory_id) if rewards is None else rewards)
    except (NotFound, ValueError) as exc:
        raise ReplayError(f"Trajectory {trajectory_id} cannot be read back as ATDP events: {exc}",
                          trajectory_id=trajectory_id) from exc
    check_replayable(traj)
    return traj


def offered_tools(ev: Event) -> list[dict[str, Any]] | None:
    """The tool schemas a recorded model call offered the model (OpenAI ``tools`` list)."""
    data = ev.observation.data if ev.observation is not None else None
    if isinstance(data, dict) and isinstance(data.get("tools"), list):
        return data["tools"]  # type: ignore[return-value]
    return None


def model_request(ev: Event) -> list[dict[str, Any]]:
    """The chat messages a recorded model call sent (before the harness), as plain dicts."""
    if ev.observation is None or not ev.observation.messages:
        raise ReplayError(f"Model call {ev.event_id} of trajectory {ev.trajectory_id} recorded no chat "
                          f"messages, so it cannot be re-decided; only chat calls can be step-replayed.",
                          trajectory_id=ev.trajectory_id, event_id=ev.event_id)
    out = []
    for m in ev.observation.messages:
        d = m.model_dump(mode="json", exclude_none=True)
        if m.tool_calls:
            d["tool_calls"] = [{"id": c.id or f"call_{i}", "type": "function",
                                "function": {"name": c.name, "arguments": _args_text(c.arguments)}}
                               for i, c in enumerate(m.tool_calls)]
        out.append(d)
    return out


def _args_text(args: Any) -> str:
    return args if isinstance(args, str) else orjson.dumps(args if args is not None else {}).decode()


def check_replayable(traj: Trajectory) -> None:
    """Raise :class:`ReplayError` naming the event when ``traj`` lacks something a replay needs."""
    tid = traj.trajectory_id
    known_tools: set[str] = set()
    for i, ev in enumerate(traj.events):
        if ev.seq is not None and ev.seq != i:
            raise ReplayError(f"Trajectory {tid} is partial: event {ev.event_id} has seq {ev.seq} where "
                              f"{i} was expected; events are missing.", trajectory_id=tid, event_id=ev.event_id)
        if ev.kind == EventKind.MODEL_CALL:
            if ev.action is None:
                raise ReplayError(f"Model call {ev.event_id} of trajectory {tid} has no recorded generation; "
                                  f"the trajectory is partial.", trajectory_id=tid, event_id=ev.event_id)
            for t in offered_tools(ev) or []:
                fn = t.get("function") if isinstance(t, dict) else None
                if isinstance(fn, dict) and fn.get("name"):
                    known_tools.add(str(fn["name"]))
        elif ev.kind == EventKind.TOOL_CALL:
            if ev.action is None or ev.action.type != "tool_call":
                raise ReplayError(f"Tool call {ev.event_id} of trajectory {tid} records no tool name or "
                                  f"arguments; the trajectory is partial.", trajectory_id=tid, event_id=ev.event_id)
            if ev.outcome is None:
                raise ReplayError(f"Tool call {ev.event_id} ({ev.action.tool_name!r}) of trajectory {tid} has "
                                  f"no recorded outcome, so the cassette cannot answer it; the trajectory is "
                                  f"partial (the tool may still have been running when capture stopped).",
                                  trajectory_id=tid, event_id=ev.event_id)
            name = ev.action.tool_name
            declared = _declared_tools(traj, ev)
            if declared is not None and name not in declared:
                raise ReplayError(f"Tool call {ev.event_id} of trajectory {tid} names the unknown tool "
                                  f"{name!r}: the model calls before it offered only "
                                  f"{', '.join(sorted(declared)) or 'no tools'}.", trajectory_id=tid,
                                  event_id=ev.event_id)


def _declared_tools(traj: Trajectory, tool_ev: Event) -> set[str] | None:
    """Tool names offered by model calls before ``tool_ev``; ``None`` when no call declared tools
    (agents that call tools themselves, outside the model's tool list)."""
    names: set[str] = set()
    declared = False
    for ev in traj.events:
        if ev is tool_ev:
            break
        if ev.kind == EventKind.MODEL_CALL:
            tools = offered_tools(ev)
            if tools is not None:
                declared = True
                names.update(str(t.get("function", {}).get("name")) for t in tools if isinstance(t, dict))
            calls = getattr(ev.action, "tool_calls", None)
            if calls:
                declared = True
                names.update(c.name for c in calls)
    return names if declared else None
