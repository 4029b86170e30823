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
from pydantic import BaseModel

from molt.atdp import models
from molt.atdp.models import PAYLOAD_FIELDS, Event

__all__ = [
    "GENESIS",
    "ChainReport",
    "SealedEvent",
    "canonical",
    "canonical_parts",
    "link_hash",
    "payload_digest",
    "seal",
    "seal_parts",
    "unseal",
    "verify_chain",
]

GENESIS = "0" * 64

_OPTS = orjson.OPT_SORT_KEYS
_sha256 = hashlib.sha256


def canonical(obj: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no whitespace, UTF-8."""
    return orjson.dumps(obj, option=_OPTS)


def payload_digest(payload: bytes, salt: bytes) -> str:
    """Salted SHA-256 of a canonical payload, hex."""
    return _sha256(salt + payload).hexdigest()


def link_hash(prev_hash: str, envelope: bytes, digest: str) -> str:
    """The chain link: SHA-256 over the previous hash, the envelope and the payload digest, hex."""
    # one buffer, one hash call: four update() calls cost more than copying a short envelope
    return _sha256(b"".join((prev_hash.encode(), b"\n", envelope, b"\n", digest.encode()))).hexdigest()


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


#: The ATDP model classes whose instances :func:`canonical_parts` serializes from their fields directly.
#: Exact classes only: a subclass may serialize differently (its own serializers, computed fields), so
#: it takes pydantic's path.
_PLAIN_MODELS = frozenset(v for v in vars(models).values()
                          if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__ == models.__name__)
_FAST_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_UTC_Z


def _fields(obj: Any) -> dict[str, Any]:
    # orjson's default= hook for the nested models: their set fields, as model_dump(exclude_none=True)
    # gives them (None dropped from model fields only; a None inside a JSON value is kept, as pydantic
    # keeps it). Enums, datetimes (UTC, "Z") and JSON values orjson writes itself, as pydantic writes them.
    if type(obj) in _PLAIN_MODELS:
        return {k: v for k, v in obj.__dict__.items() if v is not None}
    raise TypeError(f"Type is not JSON serializable: {type(obj).__name__}")


def canonical_parts(event: Event, seq: int) -> tuple[bytes, bytes]:
    """The canonical ``(envelope, payload)`` bytes of ``event`` at ``seq``: exactly
    ``canonical(...)`` of ``event.model_dump(mode="json", exclude_none=True)`` with ``seq`` set, split
    into envelope and payload fields.

    Serialized by orjson from the models' fields in one pass each: pydantic's ``model_dump`` into a
    dict and orjson over that dict cost the capture writer about three times as much per event, and
    sealing is most of what an event costs it. A value orjson does not write the way pydantic does
    (a model subclass, a foreign type) makes this fall back to pydantic's path, which gives the same
    bytes or raises the same kind of error.
    """
    if type(event) is Event:
        record = {k: v for k, v in event.__dict__.items() if v is not None}
        record["seq"] = seq
        payload = {k: record.pop(k) for k in PAYLOAD_FIELDS if k in record}
        try:
            # Copied to their own size: orjson's output keeps the large buffer it was written into, and
            # kept by the thousand until a batch is delivered, those cost a page fault each.
            return (bytes(memoryview(orjson.dumps(record, default=_fields, option=_FAST_OPTS))),
                    bytes(memoryview(orjson.dumps(payload, default=_fields, option=_FAST_OPTS))))
        except TypeError:
            pass
    record = event.model_dump(mode="json", exclude_none=True)
    record["seq"] = seq
    payload = {k: record.pop(k) for k in PAYLOAD_FIELDS if k in record}
    return canonical(record), canonical(payload)


def seal(event: Event, seq: int, prev_hash: str, *, salt: bytes | None = None) -> SealedEvent:
    """Assign ``seq`` and link ``event`` after ``prev_hash``. ``salt``: 16 random bytes (drawn here
    when not given; a caller sealing many events draws them for all at once)."""
    salt = os.urandom(16) if salt is None else salt
    env_b, pay_b, digest, link = seal_parts(event, seq, prev_hash, salt)
    return SealedEvent(event.event_id, event.trajectory_id, seq, env_b, pay_b, salt, digest, prev_hash, link)


def seal_parts(event: Event, seq: int, prev_hash: str, salt: bytes) -> tuple[bytes, bytes, str, str]:
    """What :func:`seal` computes, as a tuple: ``(envelope, payload, digest, hash)``. For a writer
    that keeps its own row type (the capture Recorder's), where building a frozen ``SealedEvent``
    per event only to copy its fields out cost about as much as the two hashes."""
    env_b, pay_b = canonical_parts(event, seq)
    digest = payload_digest(pay_b, salt)
    return env_b, pay_b, digest, link_hash(prev_hash, env_b, digest)


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
