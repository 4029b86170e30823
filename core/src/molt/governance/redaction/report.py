"""What redaction reports: :class:`RedactedSpan` (one replaced span) and :class:`RedactionReport`
(one event or text), and how the walker builds them from values it has already checked.

Kept apart from :mod:`~molt.governance.redaction.walk` because pydantic models cannot be compiled
(see :mod:`~molt.governance.redaction.native`); the walker that fills them can.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from molt.governance.redaction.base import Span

__all__ = ["RedactedSpan", "RedactionReport", "constructed", "span_record"]


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


_RECORD_FIELDS = frozenset(RedactedSpan.model_fields)
_set = object.__setattr__
_M = TypeVar("_M", bound=BaseModel)


def constructed(model: type[_M], fields: frozenset[str], **values: Any) -> _M:
    """``model`` from checked values, one for every field (what ``model_construct`` does, without
    its per-field alias and default handling). The walker builds its records and the report from
    values whose types it knows, so validating them again would only cost time."""
    obj: _M = object.__new__(model)
    _set(obj, "__dict__", values)
    _set(obj, "__pydantic_fields_set__", set(fields))
    _set(obj, "__pydantic_extra__", None)
    _set(obj, "__pydantic_private__", None)
    return obj


_ROUNDED: dict[float, float] = {}  # score -> round(score, 3); detectors emit a handful of scores


def span_record(field: str, sp: Span, mode: str) -> RedactedSpan:
    """A :class:`RedactedSpan` from checked values (see :func:`constructed`)."""
    score = _ROUNDED.get(sp.score)
    if score is None:  # round() with digits goes through a decimal conversion: ~0.3 µs a call
        score = round(sp.score, 3)
        if len(_ROUNDED) < 4096:
            _ROUNDED[sp.score] = score
    return constructed(
        RedactedSpan, _RECORD_FIELDS, field=field, start=sp.start, end=sp.end, entity_type=sp.entity_type,
        detector=sp.detector, score=score, mode=mode,
    )  # fmt: skip


