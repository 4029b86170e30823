"""A sink that stores each event together with its governance decision.

The pipeline's :class:`~molt.governance.decision.Decision` travels in the spool with the sealed event
(``SealedRow.x["annotations"]``); :class:`GovernedSink` writes the events to the store as usual and
the decisions to the ``governance`` table in the same delivery, so a decision is durable exactly when
its event is. A failed delivery is retried by the Recorder; the retry deduplicates by event id in
both tables, so nothing is written twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pyarrow.compute as pc

from molt.governance.records import decision_rows, ensure_governance_tables
from molt.store.filters import Filter
from molt.store.lance import Store
from molt.store.tables import append

__all__ = ["GovernedSink"]



class GovernedSink:
    """A :class:`~molt.capture.Sink` over a :class:`~molt.store.Store` that also records decisions.

    Example::

        rec = Recorder(GovernedSink(store), hook=GovernancePipeline.from_file("governance.yaml"))
    """

    def __init__(self, store: Store):
        self.store = store
        ensure_governance_tables(store)
        self._retrying = False

    def write_batch(self, batch: Any) -> None:
        """Store the events (and rewards, quarantine), then their decisions; raise to be retried."""
        dedupe = batch.redelivery or self._retrying
        try:
            self.store.write_batch(dataclasses.replace(batch, redelivery=True) if dedupe else batch)
            pairs = [(r.x, r.x["annotations"]) for r in batch.events if r.x.get("annotations")]
            if pairs:
                data = decision_rows(pairs)
                if dedupe:
                    present = self._existing(data.column("event_id").to_pylist())
                    if present:
                        data = data.filter(pc.invert(pc.is_in(data.column("event_id"),
                                                              value_set=_arr(sorted(present)))))
                append(self.store, "governance", data)
        except Exception:
            self._retrying = True
            raise
        self._retrying = False

    def _existing(self, ids: Sequence[str]) -> set[str]:
        tbl = self.store.table("governance")
        found: set[str] = set()
        for where in Filter().chunks("event_id", ids):
            got = tbl.search().where(str(where)).select(["event_id"]).limit(None).to_arrow()
            found.update(got.column("event_id").to_pylist())
        return found

    def chain_head(self, trajectory_id: str) -> tuple[int, str] | None:
        """Delegates to the store."""
        return self.store.chain_head(trajectory_id)

    def chain_heads(self, trajectory_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        """Delegates to the store."""
        return self.store.chain_heads(trajectory_ids)


def _arr(values: list[str]) -> Any:
    import pyarrow as pa

    return pa.array(values, pa.string())
