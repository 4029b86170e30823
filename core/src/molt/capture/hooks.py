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
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

from molt.atdp.models import Event

__all__ = ["CaptureHook", "HookResult"]


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
