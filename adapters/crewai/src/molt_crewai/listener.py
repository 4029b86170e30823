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
from crewai.hooks.llm_hooks import register_before_llm_call_hook, unregister_before_llm_call_hook

from molt.capture.instrumentor import Instrumentor

from .mapping import CrewAIMapper

__all__ = ["MoltEventListener"]

#: The oldest crewai this adapter supports (checked at import and when the listener is built).
FRAMEWORK_MIN = "1.15"
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


class MoltEventListener(BaseEventListener, Instrumentor):
    """Record CrewAI crews, tasks, agents, LLM calls, tool usage, memory, knowledge and human feedback
    as ATDP events. Create it once, before ``crew.kickoff()``::

        from molt_crewai import MoltEventListener
        listener = MoltEventListener(recorder)

    Each kickoff is a trajectory; its events are made durable when it ends.

    With ``versions=``, a ``before_llm_call`` hook applies the live version of ``tenant_id``/``agent_id``
    to the messages of every LLM call in the process (system prompt, memories, skills); tool rewrites
    do not apply (CrewAI renders its tools into its own prompt, past any hook).

    Args:
        recorder: the :class:`molt.capture.Recorder` (default: the process default Recorder).
        **options: the :class:`~molt.capture.instrumentor.Instrumentor` options (``tenant_id``,
            ``agent_id``, ``task``, ``tags``, ``max_field_bytes``, ``blob_store``, ``strict``, ``versions``,
            ``harness``, ``version_poll_s``, ``capture``).
    """

    integration = "molt-crewai"
    framework = "crewai"
    framework_dist = "crewai"
    framework_min = FRAMEWORK_MIN
    framework_below = "2"
    install = 'pip install "crewai>=1.15,<2"'
    version_hook = "before_llm_call hook (system prompt, memories, skills; no tool rewrites)"

    def __init__(self, recorder: Any = None, **options: Any):
        Instrumentor.__init__(self, recorder, **options)
        self._mapper = CrewAIMapper(self.capture)
        self._registered: list[tuple[type[BaseEvent], Any]] = []
        # (id of an executor's message list) -> (the agent's system text, the text Molt put there): the
        # executor keeps its list across iterations, so the next call must start from the agent's own text
        self._applied: dict[int, tuple[str, str]] = {}
        if self.live is not None:
            register_before_llm_call_hook(self._before_llm_call)
        # BaseEventListener.__init__ would call the next __init__ in the MRO (Instrumentor's) again,
        # without our arguments; what it does besides is these two calls.
        self.setup_listeners(crewai_event_bus)
        crewai_event_bus.validate_dependencies()

    def _before_llm_call(self, context: Any) -> None:
        """Apply the live version to the call's messages, in place (CrewAI's contract); never raises."""
        try:
            messages = context.messages
            key = id(messages)
            first = messages[0] if messages else None
            own = None
            if first is not None and first.get("role") == "system":
                seen = self._applied.get(key)
                own = seen[0] if seen is not None and first.get("content") == seen[1] else first.get("content")
            plain = [dict(m) for m in messages]
            if own is not None:
                plain[0]["content"] = own
            applied = self.apply_version(plain, None)
            if applied.fingerprint is None:
                if own is not None and first is not None and first.get("content") != own:
                    first["content"] = own  # the version was rolled back to one without a harness
                return
            new_system = applied.messages[0]
            if own is not None and first is not None:
                first["content"] = new_system["content"]
            else:
                messages.insert(0, dict(new_system))
            self._applied[key] = (own if own is not None else "", str(new_system["content"]))
            if len(self._applied) > 10_000:
                self._applied.pop(next(iter(self._applied)))
        except Exception as exc:
            self.capture.fail(exc)

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
        """Unsubscribe from the bus and the LLM hook (the capture stays usable for :meth:`flush`)."""
        if self.live is not None:
            unregister_before_llm_call_hook(self._before_llm_call)
        Instrumentor.close(self)
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
