"""The event-bus listener users instantiate once.

CrewAI runs asynchronous handlers on its bus's event loop, one after another in emission order; the
listener's handler is asynchronous for that order, and does nothing but queue the event for Molt's
dispatcher thread. Capture errors are counted in ``listener.stats``, never raised.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from crewai.events import BaseEventListener, crewai_event_bus
from crewai.events.base_events import BaseEvent

from molt.capture.adapt import BlobStore, Capture, CaptureStats, distribution_version

from .mapping import CrewAIMapper

__all__ = ["MoltEventListener"]

_FRAMEWORK_VERSION = distribution_version("crewai")
# Token-by-token chunks: a model call is recorded whole, at its end.
_SKIP = {"llm_stream_chunk", "a2a_streaming_chunk"}


def _event_types() -> list[type[BaseEvent]]:
    import crewai.events.types as pkg

    for m in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{pkg.__name__}.{m.name}")
    found: set[type[BaseEvent]] = set()
    stack = list(BaseEvent.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        field = cls.model_fields.get("type")
        default = field.default if field is not None else None
        if isinstance(default, str) and default not in _SKIP:
            found.add(cls)
    return sorted(found, key=lambda c: c.__name__)


class MoltEventListener(BaseEventListener):
    """Record CrewAI crews, tasks, agents, LLM calls, tool usage, memory, knowledge and human feedback
    as ATDP events. Create it once, before ``crew.kickoff()``::

        from molt_crewai import MoltEventListener
        listener = MoltEventListener(recorder)

    Each kickoff is a trajectory; its events are made durable when it ends.

    Args:
        recorder: the :class:`molt.capture.Recorder` (default: the process default Recorder).
        tenant_id, agent_id, task, tags: metadata put on every event.
        max_field_bytes: bound of each payload field (default 192 KiB).
        blob_store: where binary payloads are offloaded (default: dropped with a note).
        strict: raise capture errors from :meth:`flush` instead of only counting them (tests).
    """

    def __init__(
        self,
        recorder: Any = None,
        *,
        tenant_id: str | None = None,
        agent_id: str | None = None,
        task: str | None = None,
        tags: dict[str, str] | None = None,
        max_field_bytes: int | None = None,
        blob_store: BlobStore | None = None,
        strict: bool = False,
    ):
        self.capture = Capture(
            recorder,
            integration="molt-crewai",
            framework="crewai",
            framework_version=_FRAMEWORK_VERSION,
            tenant_id=tenant_id,
            agent_id=agent_id,
            task=task,
            tags=tags,
            blob_store=blob_store,
            strict=strict,
            max_field_bytes=max_field_bytes,
        )
        self._mapper = CrewAIMapper(self.capture)
        self._registered: list[tuple[type[BaseEvent], Any]] = []
        super().__init__()

    def setup_listeners(self, crewai_event_bus: Any) -> None:
        """Subscribe to every bus event type (called once by ``BaseEventListener``)."""
        capture, on_event = self.capture, self._mapper.on_event

        async def on_bus_event(source: Any, event: Any) -> None:
            try:
                capture.submit(on_event, event)
            except Exception as exc:
                capture.fail(exc)

        for cls in _event_types():
            crewai_event_bus.on(cls)(on_bus_event)
            self._registered.append((cls, on_bus_event))

    def close(self) -> None:
        """Unsubscribe from the bus (the capture stays usable for :meth:`flush`)."""
        for cls, handler in self._registered:
            try:
                crewai_event_bus.off(cls, handler)
            except Exception as exc:
                self.capture.fail(exc)
        self._registered.clear()

    def flush(self, timeout: float | None = 10.0, *, deliver: bool = False) -> bool:
        """Wait for the bus's pending handlers, then until captured events are durable."""
        ok = bool(crewai_event_bus.flush(timeout if timeout is not None else 30.0))
        return self.capture.flush(timeout, deliver=deliver) and ok

    @property
    def stats(self) -> CaptureStats:
        """Counters: events recorded, capture errors, scopes still open."""
        return self.capture.stats
