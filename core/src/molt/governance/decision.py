"""What the governance pipeline decided about one event, as recorded next to the event.

A :class:`Decision` travels with the sealed event through the spool (``SealedRow.x["annotations"]``)
and lands in the store's ``governance`` table, one row per event, so every verdict is queryable and
auditable: which entity types were redacted (never the values), the classification and what raised
it, the training-eligibility verdict with its reasons, and the retention class and expiry.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from molt.atdp.models import Classification

__all__ = ["Decision", "RedactionSummary"]

_DATA = ConfigDict(extra="forbid", frozen=True)


class RedactionSummary(BaseModel):
    """What redaction did to an event: counts by entity type and the field paths touched."""

    model_config = _DATA

    enabled: bool = True
    policy: str | None = None
    fingerprint: str | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    fields: list[str] = Field(default_factory=list)
    token_trace_dropped: bool = False

    @property
    def types(self) -> list[str]:
        """Entity types that were replaced, sorted."""
        return sorted(self.counts)


class Decision(BaseModel):
    """One event's governance record.

    ``eligible`` is ``None`` when the pipeline had no eligibility stage (the training queue then
    treats the event as ineligible: fail closed). ``reasons`` say why an event is ineligible, as
    ``"rule: detail"`` strings (``"consent: training consent was refused"``).
    """

    model_config = _DATA

    policy: str
    stages: list[str]
    tenant_id: str | None = None
    redaction: RedactionSummary | None = None
    classification: Classification
    classification_in: Classification
    escalated_by: list[str] = Field(default_factory=list)
    eligible: bool | None = None
    reasons: list[str] = Field(default_factory=list)
    excluded_fields: list[str] = Field(default_factory=list)
    retention_class: str | None = None
    retention_days: int | None = None
    expires_at: datetime | None = None
    decided_at: datetime

    def annotations(self) -> dict[str, Any]:
        """The JSON form carried with the sealed row."""
        return self.model_dump(mode="json", exclude_none=True)

    @classmethod
    def from_annotations(cls, data: dict[str, Any]) -> Decision:
        """Inverse of :meth:`annotations`."""
        return cls.model_validate(data)
