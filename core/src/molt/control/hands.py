"""Evidence from many hands: who stands behind a learned text.

A memory or a skill is served to every later user of the agent, so it must rest on more than one
person's word. Each source trajectory of a candidate has a *hand*: the session the gateway (or the
capture path) recorded it under — the trajectory itself when it has none — and the API keys that
annotated its corrections (``RewardAnnotation.annotator``: the gateway sets it to the key's name; a
writer cannot choose it). A memory or skill needs ``min_hands`` distinct sessions (default 3, the
operator vocabulary's k-anonymity), and when its corrections came through keys, more than one key
(``min_keys``): one key can open as many sessions as it likes.

A key whose feedback the safety gate refused (:func:`molt.control.gate.flagged_feedback`) is *held
out* for ``held_out_hours``: its corrections are taken out of the window's evidence, so the same writer
cannot retry with a milder wording while the flag stands.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from molt.atdp.models import RewardSource
from molt.governance.access import OPEN_KEY_NAME
from molt.store import Filter, Store

__all__ = ["Hand", "hands", "held_out_keys", "many_hands", "without_held_out"]


@dataclass(frozen=True)
class Hand:
    """Who stands behind one trajectory: its session and the keys that annotated its corrections."""

    session: str
    keys: frozenset[str]


def _sessions(store: Store, tenant_id: str, ids: Sequence[str]) -> dict[str, str | None]:
    if not ids:
        return {}
    where = Filter(tenant_id=tenant_id).among("trajectory_id", ids).where(seq=0)
    rows = (store.table("events").search().where(str(where)).select(["trajectory_id", "session_id"]).limit(None)
            .to_arrow())
    return dict(zip(rows.column("trajectory_id").to_pylist(), rows.column("session_id").to_pylist(), strict=True))


def _correction_keys(store: Store, tid: str) -> list[tuple[str | None, str | None, datetime]]:
    """``(annotator, correction text, created_at)`` of a trajectory's correction rewards."""
    return [(r.annotator, r.reason, r.created_at) for r in store.rewards(tid)
            if r.source == RewardSource.USER_CORRECTION]


def hands(store: Store, tenant_id: str, trajectory_ids: Iterable[str]) -> dict[str, Hand]:
    """The :class:`Hand` of each of ``trajectory_ids`` (``tenant_id``'s)."""
    ids = list(dict.fromkeys(trajectory_ids))
    sessions = _sessions(store, tenant_id, ids)
    out: dict[str, Hand] = {}
    for t in ids:
        # the keys of corrections that say something (the text a memory is made of): an OTLP evaluation
        # carries no text, so a writer cannot pad the keys with annotations it names itself there;
        # a gateway without keys names no writer, and the sessions alone are the evidence there
        keys = frozenset(k for k, text, _ in _correction_keys(store, t) if k and text and k != OPEN_KEY_NAME)
        out[t] = Hand(session=sessions.get(t) or f"trajectory:{t}", keys=keys)
    return out


def many_hands(candidate: Any, store: Store, tenant_id: str, *, min_hands: int, min_keys: int,
               extra: Sequence[str] = ()) -> list[str]:
    """Why ``candidate`` (a memory or a skill) does not rest on enough hands; empty when it does (and
    for other kinds, whose evidence is the replay and the canary). ``extra``: more trajectories its
    evidence rests on (a skill's: the failing runs that lacked the procedure)."""
    if candidate.kind not in ("memory_insert", "skill_patch"):
        return []
    hs = hands(store, tenant_id, [*candidate.source_trajectories, *extra])
    sessions = {h.session for h in hs.values()}
    keys = {k for h in hs.values() for k in h.keys}
    what = "memory" if candidate.kind == "memory_insert" else "skill"
    out = []
    if len(sessions) < min_hands:
        out.append(f"evidence: the {what} rests on {len(sessions)} distinct session(s); it needs {min_hands}")
    if keys and len(keys) < min_keys:
        out.append(f"evidence: every correction behind the {what} came through one API key ({sorted(keys)[0]}); "
                   f"it needs {min_keys}")
    return out


def held_out_keys(store: Store, log: Any, tenant_id: str, agent_id: str | None = None, *, hours: float,
                  now: datetime | None = None) -> set[str]:
    """The keys whose corrections stood behind a candidate the gate refused in the last ``hours``."""
    from molt.control.gate import flagged_feedback

    now = now or datetime.now(UTC)
    since = now - timedelta(hours=hours)
    keys: set[str] = set()
    for row in flagged_feedback(log, tenant_id, agent_id, limit=200):
        at = row["created_at"] if row["created_at"].tzinfo else row["created_at"].replace(tzinfo=UTC)
        if at < since:
            continue
        for t in row["trajectories"]:
            keys.update(k for k, _, _ in _correction_keys(store, t) if k)
    return keys


def without_held_out(window: Sequence[Any], store: Store, keys: set[str]) -> list[Any]:
    """``window`` (Episodes) with the corrections of held-out ``keys`` taken out of the evidence: their
    texts dropped and, where a correction was the only sign of failure, the run left unscored."""
    if not keys:
        return list(window)
    out = []
    for e in window:
        if not e.corrections:
            out.append(e)
            continue
        bad = {text for k, text, _ in _correction_keys(store, e.trajectory_id) if k in keys and text}
        kept = [c for c in e.corrections if c not in bad]
        if len(kept) == len(e.corrections):
            out.append(e)
            continue
        signals = [s for s in e.failure_signals if s != "correction" or kept]
        success = e.success if signals else None
        out.append(replace(e, corrections=kept, failure_signals=signals, success=success))
    return out
