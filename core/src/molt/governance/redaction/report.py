"""What redaction reports: :class:`RedactedSpan` (one replaced span) and :class:`RedactionReport`
(one event or text).

Kept apart from :mod:`~molt.governance.redaction.walk` because pydantic models cannot be compiled
(see :mod:`~molt.governance.redaction.native`); the walker that builds them
(:func:`~molt.governance.redaction.walk.constructed`) can.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["RedactedSpan", "RedactionReport"]


class RedactedSpan(BaseModel):
    """One replaced span: where (field path + offsets into the field's original string), what type,
    which detector, which mode. Never the original value."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    field: str
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    entity_type: str
    detector: str
    score: float
    mode: str


class RedactionReport(BaseModel):
    """What redaction did to one event (or one text): spans, counts by type, the policy that ran."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event_id: str | None = None
    trajectory_id: str | None = None
    policy: str
    policy_fingerprint: str
    spans: list[RedactedSpan] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    fields_scanned: int = 0
    token_trace_dropped: bool = False

    @property
    def redacted(self) -> bool:
        """Whether anything was replaced."""
        return bool(self.spans)
