"""Where the Recorder delivers spooled records: the ``Sink`` protocol and an in-memory sink.

A sink receives :class:`SinkBatch` objects from the Recorder's delivery thread. The LanceDB
:class:`molt.store.Store` implements this protocol; so will the governance pipeline (which wraps a
store) and the HTTP sink. A sink may raise: the Recorder counts the error, keeps the batch in the
spool and retries later, so nothing is lost while a sink is down.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["MemorySink", "Sink", "SinkBatch"]


@dataclass
class SinkBatch:
    """Records to deliver together.

    ``events`` are sealed event rows (the spool's event-frame dicts: ``x`` index columns, ``e``
    envelope JSON, ``p`` payload JSON, ``s`` salt hex, ``d`` digest, ``ph`` previous hash, ``h`` hash).
    ``rewards`` are reward-annotation dicts (JSON mode). ``quarantine`` are records rejected before
    sealing, each with ``reason``, ``stage`` and what could be kept of the record.
    ``redelivery`` is True when the batch may already have been delivered before a crash, so the sink
    must deduplicate by id.
    """

    events: list[dict[str, Any]] = field(default_factory=list)
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
        """``(seq, hash)`` of the last stored event of a trajectory, or ``None`` if it has none."""


class MemorySink:
    """A thread-safe in-memory sink, deduplicating by id; for tests and adapters' conformance runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: dict[str, dict[str, Any]] = {}
        self.rewards: dict[str, dict[str, Any]] = {}
        self.quarantine: list[dict[str, Any]] = []
        self.batches = 0

    def write_batch(self, batch: SinkBatch) -> None:
        """Store the batch, keeping the first copy of each id."""
        with self._lock:
            self.batches += 1
            for row in batch.events:
                self.events.setdefault(row["x"]["event_id"], row)
            for r in batch.rewards:
                self.rewards.setdefault(r["annotation_id"], r)
            self.quarantine.extend(batch.quarantine)

    def chain_head(self, trajectory_id: str) -> tuple[int, str] | None:
        """The last event of ``trajectory_id`` held here."""
        with self._lock:
            rows = [r for r in self.events.values() if r["x"]["trajectory_id"] == trajectory_id]
        if not rows:
            return None
        last = max(rows, key=lambda r: r["x"]["seq"])
        return last["x"]["seq"], last["h"]

    def trajectory_events(self, trajectory_id: str) -> list[Any]:
        """The trajectory's events as :class:`~molt.atdp.Event`, in ``seq`` order."""
        from molt.atdp.chain import unseal

        with self._lock:
            rows = sorted((r for r in self.events.values() if r["x"]["trajectory_id"] == trajectory_id),
                          key=lambda r: r["x"]["seq"])
        return [unseal(r["e"].encode(), r["p"].encode() if r.get("p") is not None else None) for r in rows]
