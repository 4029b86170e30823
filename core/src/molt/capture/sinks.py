"""Where the Recorder delivers spooled records: the ``Sink`` protocol and an in-memory sink.

A sink receives :class:`SinkBatch` objects from the Recorder's delivery thread. The LanceDB
:class:`molt.store.Store` implements this protocol; so will the governance pipeline (which wraps a
store) and the HTTP sink. A sink may raise: the Recorder counts the error, keeps the batch in the
spool and retries later, so nothing is lost while a sink is down.
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

import orjson

from molt.atdp.chain import SealedEvent

__all__ = ["MemorySink", "SealedRow", "Sink", "SinkBatch"]

_ROW_HEADER = struct.Struct("<IIiB")  # len(index JSON), len(envelope), len(payload) or -1, len(salt)
_dumps = orjson.dumps
_fromhex = bytes.fromhex


class SealedRow(NamedTuple):
    """A sealed event as the spool carries it: the store's index columns plus the sealed record.

    ``x`` holds the denormalized columns from :func:`molt.capture.index_fields`; the rest is the
    :class:`~molt.atdp.SealedEvent` (envelope and payload bytes exactly as hashed). A NamedTuple,
    not a frozen dataclass: it is built once per event on the delivery path, where a tuple is cheaper.
    """

    x: dict[str, Any]
    envelope: bytes
    payload: bytes | None
    salt: bytes | None
    digest: str
    prev_hash: str
    hash: str

    @property
    def event_id(self) -> str:
        """The event's id."""
        return str(self.x["event_id"])

    def sealed(self) -> SealedEvent:
        """The :class:`~molt.atdp.SealedEvent` (for verification and unsealing)."""
        return SealedEvent(event_id=self.x["event_id"], trajectory_id=self.x["trajectory_id"], seq=self.x["seq"],
                           envelope=self.envelope, payload=self.payload, salt=self.salt, digest=self.digest,
                           prev_hash=self.prev_hash, hash=self.hash)

    def encode(self) -> bytes:
        """Binary frame body: a small header, the index JSON, then the raw bytes (no JSON escaping
        of the envelope and payload, which would cost more than sealing them). Once per event on the
        capture writer thread: one join, one hex decode of the three hashes."""
        xb = _dumps(self.x)
        env, pay, salt = self.envelope, self.payload, self.salt or b""
        return b"".join((_ROW_HEADER.pack(len(xb), len(env), -1 if pay is None else len(pay), len(salt)), xb, env,
                         pay or b"", salt, _fromhex(self.digest + self.prev_hash + self.hash)))

    @classmethod
    def decode(cls, body: bytes) -> SealedRow:
        """Inverse of :meth:`encode`."""
        lx, le, lp, ls = _ROW_HEADER.unpack_from(body)
        p = _ROW_HEADER.size
        x = orjson.loads(body[p:p + lx])
        p += lx
        env = body[p:p + le]
        p += le
        pay = None
        if lp >= 0:
            pay = body[p:p + lp]
            p += lp
        salt = body[p:p + ls] if ls else None
        p += ls
        return cls(x=x, envelope=env, payload=pay, salt=salt, digest=body[p:p + 32].hex(),
                   prev_hash=body[p + 32:p + 64].hex(), hash=body[p + 64:p + 96].hex())


@dataclass
class SinkBatch:
    """Records to deliver together.

    ``events`` are :class:`SealedRow` records.
    ``rewards`` are reward-annotation dicts (JSON mode). ``quarantine`` are records rejected before
    sealing, each with ``reason``, ``stage`` and what could be kept of the record.
    ``redelivery`` is True when the batch may already have been delivered before a crash, so the sink
    must deduplicate by id.
    """

    events: list[SealedRow] = field(default_factory=list)
    rewards: list[dict[str, Any]] = field(default_factory=list)
    quarantine: list[dict[str, Any]] = field(default_factory=list)
    redelivery: bool = False

    def __len__(self) -> int:
        return len(self.events) + len(self.rewards) + len(self.quarantine)


@runtime_checkable
class Sink(Protocol):
    """A destination for spooled records."""

    def write_batch(self, batch: SinkBatch) -> None:
        """Persist the batch (idempotently when ``batch.redelivery``), or raise."""

    def chain_head(self, trajectory_id: str) -> tuple[int, str] | None:
        """``(seq, hash)`` of the last stored event of a trajectory, or ``None`` if it has none.

        A sink may also offer ``chain_heads(ids) -> {id: (seq, hash)}`` to answer many at once."""


class MemorySink:
    """A thread-safe in-memory sink, deduplicating by id; for tests and adapters' conformance runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: dict[str, SealedRow] = {}
        self.rewards: dict[str, dict[str, Any]] = {}
        self.quarantine: list[dict[str, Any]] = []
        self.batches = 0

    def write_batch(self, batch: SinkBatch) -> None:
        """Store the batch, keeping the first copy of each id."""
        with self._lock:
            self.batches += 1
            for row in batch.events:
                self.events.setdefault(row.event_id, row)
            for r in batch.rewards:
                self.rewards.setdefault(r["annotation_id"], r)
            self.quarantine.extend(batch.quarantine)

    def chain_head(self, trajectory_id: str) -> tuple[int, str] | None:
        """The last event of ``trajectory_id`` held here."""
        with self._lock:
            rows = [r for r in self.events.values() if r.x["trajectory_id"] == trajectory_id]
        if not rows:
            return None
        last = max(rows, key=lambda r: r.x["seq"])
        return last.x["seq"], last.hash

    def trajectory_events(self, trajectory_id: str) -> list[Any]:
        """The trajectory's events as :class:`~molt.atdp.Event`, in ``seq`` order."""
        return [r.to_event() for r in self.sealed_events(trajectory_id)]

    def sealed_events(self, trajectory_id: str) -> list[SealedEvent]:
        """The trajectory's sealed records, in ``seq`` order (for chain verification)."""
        with self._lock:
            rows = sorted((r for r in self.events.values() if r.x["trajectory_id"] == trajectory_id),
                          key=lambda r: r.x["seq"])
        return [r.sealed() for r in rows]
