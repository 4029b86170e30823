"""The hook the Recorder runs on its writer thread before sealing an event.

Governance (redaction, classification, eligibility, retention tagging) must change an event *before*
it is sealed into the hash chain, and must never run on the agent's thread. So the Recorder takes an
optional :class:`CaptureHook`; ``molt.governance`` provides one (``GovernancePipeline``). Capture
only knows this small protocol: the one place it names governance is the Recorder's default
(``pipeline="default"``), which it imports by name when a Recorder is built, so that recording is
governed unless a caller turns it off.

For each event the hook returns a :class:`HookResult`:

- ``event`` set: seal this event (possibly a redacted copy with the same ids) and carry
  ``annotations`` (JSON-serializable) with the sealed row, as ``SealedRow.x["annotations"]``, so the
  sink can store the decisions next to the record.
- ``event`` is ``None``: quarantine the record with ``stage`` and ``reason``, keeping ``record``
  (bytes, e.g. the event's JSON) so nothing is lost; it never reaches the training queue.

A hook that raises fails closed: the Recorder quarantines the event with the error as the reason.
The agent never sees the error either way.

A hook may also say where its annotations go: the Recorder delivers to ``hook.sink_for(sink)`` when
the hook has that method (the governance pipeline wraps a store so that decisions are stored with
their events), so passing the hook is the one call that attaches both.

A late reward's free text (its ``reason``, e.g. a user's correction, and its ``annotator``) is client
text like an event's payload: :func:`govern_reward` puts it through the same hook before the reward is
kept, so every path that stores rewards (the Recorder, trace import) governs it alike. A hook may also
govern the ids a client chose: ``hook.govern_ids(event)``, when it has it, is asked before the Recorder
dedupes, chains or quarantines an event (a digest may replace an id that holds personal data, see
:mod:`molt.governance.envelope`), and ``hook.govern_annotation(reward)`` before a reward is kept.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

from molt.atdp.models import Event, EventKind, FeedbackAction, RewardAnnotation
from molt.capture.payload import clip, max_length

__all__ = ["CaptureHook", "HookResult", "govern_reward"]


class HookResult(NamedTuple):
    """What a :class:`CaptureHook` decided about one event (see the module docstring)."""

    event: Event | None
    annotations: dict[str, Any] | None = None
    stage: str | None = None
    reason: str | None = None
    record: bytes | None = None

    @classmethod
    def accept(cls, event: Event, annotations: dict[str, Any] | None = None) -> HookResult:
        """Seal ``event`` and carry ``annotations`` with it."""
        return cls(event=event, annotations=annotations)

    @classmethod
    def quarantine(cls, stage: str, reason: str, record: bytes | None = None) -> HookResult:
        """Keep the record out of the store's events: quarantine it with the reason."""
        return cls(event=None, stage=stage, reason=reason, record=record)


@runtime_checkable
class CaptureHook(Protocol):
    """Runs on the Recorder's writer thread, once per event, before sealing. Must be thread-safe
    only with respect to itself being called from that one thread."""

    def process(self, event: Event) -> HookResult:
        """Decide what to seal (or quarantine) for ``event``."""
        ...


_LIMITS = {"reason": max_length(RewardAnnotation, "reason")}


def govern_reward(hook: CaptureHook | None, annotation: RewardAnnotation) -> RewardAnnotation:
    """``annotation`` with its free text (``reason``, ``annotator``) as ``hook`` keeps it.

    Each text goes through the hook as the comment of a feedback event of the annotation's tenant and
    trajectory, so it is redacted (or kept) exactly as that tenant's recorded feedback is. A text the
    hook quarantines, or that it fails on, is dropped (fails closed: the score is kept, the text is
    not). Without a hook (recording ungoverned by the caller's choice) the annotation is unchanged.
    """
    if hook is None:
        return annotation
    govern = getattr(hook, "govern_annotation", None)
    if govern is not None:  # its ids as its events' are stored, its dimension names redacted
        try:
            annotation = govern(annotation)
        except Exception:  # a reward whose ids cannot be governed keeps its score, not its dimensions
            annotation = annotation.model_copy(update={"dimensions": None})
    if not (annotation.reason or annotation.annotator):
        return annotation
    governed: dict[str, str | None] = {}
    for name in ("reason", "annotator"):
        text = getattr(annotation, name)
        if not text:
            continue
        try:
            probe = Event(trajectory_id=annotation.trajectory_id, kind=EventKind.FEEDBACK,
                          action=FeedbackAction(comment=text), metadata={"tenant_id": annotation.tenant_id})
            res = hook.process(probe)
            action = res.event.action if res.event is not None else None
            kept = action.comment if isinstance(action, FeedbackAction) else None
            # placeholders can make a text longer than it was: back within the field's bound, or the
            # annotation would not validate when it is read back
            governed[name] = clip(kept, _LIMITS[name]) if name in _LIMITS else kept
        except Exception:  # the text could not be governed: it is not kept
            governed[name] = None
    return annotation.model_copy(update=governed)
