"""Per-trajectory hash chain: sealing events into tamper-evident records, and verifying them.

Each event is split into an *envelope* (ids, kind, seq, time, metadata, provenance) and a *payload*
(observation, hidden state, action, outcome, reward). Both are serialized canonically (JSON with
sorted keys). Then::

    digest_i = SHA-256(salt_i ‖ payload_i)                 salt_i: 16 random bytes per event
    hash_i   = SHA-256(hash_{i-1} ‖ envelope_i ‖ digest_i)  hash_{-1} = GENESIS

The chain covers the envelope in clear and the payload through its salted digest, so erasing a
payload (and its salt) for the right to be forgotten leaves every link checkable, while the salt keeps
an erased short payload from being guessed from its digest. The verifier reports edits (a digest or
hash that no longer matches), deletions (a gap in ``seq`` or a broken ``prev_hash`` link) and
reorderings (a ``seq`` rewritten in the envelope breaks its hash).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from molt.atdp.models import PAYLOAD_FIELDS, Event

__all__ = [
    "GENESIS",
    "ChainReport",
    "SealedEvent",
    "canonical",
    "link_hash",
    "payload_digest",
    "seal",
    "unseal",
    "verify_chain",
]

GENESIS = "0" * 64

_OPTS = orjson.OPT_SORT_KEYS


def canonical(obj: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no whitespace, UTF-8."""
    return orjson.dumps(obj, option=_OPTS)


def payload_digest(payload: bytes, salt: bytes) -> str:
    """Salted SHA-256 of a canonical payload, hex."""
    return hashlib.sha256(salt + payload).hexdigest()


def link_hash(prev_hash: str, envelope: bytes, digest: str) -> str:
    """The chain link: SHA-256 over the previous hash, the envelope and the payload digest, hex."""
    h = hashlib.sha256(prev_hash.encode())
    h.update(b"\n")
    h.update(envelope)
    h.update(b"\n")
    h.update(digest.encode())
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class SealedEvent:
    """An event as stored: canonical envelope and payload bytes plus its chain link.

    ``payload`` and ``salt`` are ``None`` once the payload has been erased.
    """

    event_id: str
    trajectory_id: str
    seq: int
    envelope: bytes
    payload: bytes | None
    salt: bytes | None
    digest: str
    prev_hash: str
    hash: str

    def to_event(self) -> Event:
        """Rebuild the :class:`Event` (an erased payload comes back empty)."""
        return unseal(self.envelope, self.payload)


def seal(event: Event, seq: int, prev_hash: str, *, salt: bytes | None = None) -> SealedEvent:
    """Assign ``seq`` and link ``event`` after ``prev_hash``."""
    record = event.model_dump(mode="json", exclude_none=True)
    record["seq"] = seq
    payload = {k: record.pop(k) for k in PAYLOAD_FIELDS if k in record}
    env_b = canonical(record)
    pay_b = canonical(payload)
    salt = os.urandom(16) if salt is None else salt
    digest = payload_digest(pay_b, salt)
    return SealedEvent(
        event_id=event.event_id,
        trajectory_id=event.trajectory_id,
        seq=seq,
        envelope=env_b,
        payload=pay_b,
        salt=salt,
        digest=digest,
        prev_hash=prev_hash,
        hash=link_hash(prev_hash, env_b, digest),
    )


def unseal(envelope: bytes, payload: bytes | None) -> Event:
    """Rebuild an :class:`Event` from stored envelope and payload bytes."""
    record = orjson.loads(envelope)
    if payload is not None:
        record.update(orjson.loads(payload))
    return Event.model_validate(record)


@dataclass
class ChainReport:
    """The result of verifying one trajectory's chain."""

    trajectory_id: str
    events: int = 0
    erased_payloads: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems


def verify_chain(trajectory_id: str, records: Iterable[SealedEvent],
                 expected_head: tuple[int, str] | None = None) -> ChainReport:
    """Verify a trajectory's records (any order; they are sorted by ``seq``).

    ``expected_head`` is the ``(seq, hash)`` of the last event, when known from elsewhere (a chain
    checkpoint); it makes deleting the tail of a trajectory detectable too.
    """
    rows: Sequence[SealedEvent] = sorted(records, key=lambda r: r.seq)
    report = ChainReport(trajectory_id=trajectory_id, events=len(rows))
    prev = GENESIS
    for expected_seq, r in enumerate(rows):
        where = f"seq {r.seq} (event {r.event_id})"
        if r.trajectory_id != trajectory_id:
            report.problems.append(f"{where} belongs to trajectory {r.trajectory_id}")
        if r.seq != expected_seq:
            report.problems.append(
                f"{where}: expected seq {expected_seq}; events are missing or reordered")
        if r.prev_hash != prev:
            report.problems.append(f"{where}: prev_hash does not link to the previous event")
        if r.payload is not None and r.salt is not None:
            if payload_digest(r.payload, r.salt) != r.digest:
                report.problems.append(f"{where}: payload does not match its digest (edited)")
        else:
            report.erased_payloads += 1
        if link_hash(r.prev_hash, r.envelope, r.digest) != r.hash:
            report.problems.append(f"{where}: envelope does not match its hash (edited)")
        try:
            env = orjson.loads(r.envelope)
        except orjson.JSONDecodeError:
            report.problems.append(f"{where}: envelope is not valid JSON")
        else:
            if (env.get("seq"), env.get("event_id"), env.get("trajectory_id")) != (
                r.seq, r.event_id, r.trajectory_id):
                report.problems.append(f"{where}: stored columns disagree with the hashed envelope")
        prev = r.hash
    if expected_head is not None:
        head_seq, head_hash = expected_head
        if not rows or rows[-1].seq != head_seq or rows[-1].hash != head_hash:
            report.problems.append(
                f"the last event is not the recorded head (seq {head_seq}); events were deleted")
    return report
