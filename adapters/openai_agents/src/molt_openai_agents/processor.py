"""The tracing processor users register with the Agents SDK.

Its callbacks run on the agent's event loop and only read the clock and queue the span for Molt's
dispatcher thread; they never raise into the SDK (errors are counted in ``processor.stats``).
"""

from __future__ import annotations

import time
from typing import Any

from agents.tracing import TracingProcessor

from molt.capture.instrumentor import Instrumentor

from .mapping import AgentsMapper

__all__ = ["MoltTracingProcessor"]

#: The oldest openai-agents this adapter supports (checked at import and when the processor is built).
FRAMEWORK_MIN = "0.20"
_now = time.time_ns


class MoltTracingProcessor(TracingProcessor, Instrumentor):
    """Record Agents SDK traces as ATDP trajectories: agents, model calls, tools, handoffs, guardrails
    and MCP tool listings become events, parented by the SDK's span ids.

    Register it once per process::

        from agents import add_trace_processor
        add_trace_processor(MoltTracingProcessor(recorder))

    (``agents.set_trace_processors([...])`` instead keeps traces from going to OpenAI's backend.) Model
    inputs and outputs reach the processor only when the run's ``trace_include_sensitive_data`` is on
    (the SDK's default); tool error details only when the tool has its own ``failure_error_function``.

    With ``versions=``, :meth:`wrap` the agent's model: the wrapper applies the live version of
    ``tenant_id``/``agent_id`` to the instructions and function tools of every call, and the events
    carry its id in ``provenance.policy_version``.

    Args:
        recorder: the :class:`molt.capture.Recorder` (default: the process default Recorder).
        **options: the :class:`~molt.capture.instrumentor.Instrumentor` options (``tenant_id``,
            ``agent_id``, ``task``, ``tags``, ``max_field_bytes``, ``blob_store``, ``strict``, ``versions``,
            ``harness``, ``version_poll_s``, ``capture``).
    """

    integration = "molt-openai-agents"
    framework = "openai-agents"
    framework_dist = "openai-agents"
    framework_min = FRAMEWORK_MIN
    framework_below = "1"
    install = 'pip install "openai-agents>=0.20,<1"'
    version_hook = "a Model wrapper (instructions and function tools of every call; MoltTracingProcessor.wrap)"

    def __init__(self, recorder: Any = None, **options: Any):
        Instrumentor.__init__(self, recorder, **options)
        self._mapper = AgentsMapper(self.capture)

    _queue = Instrumentor.queue

    def wrap(self, model: Any) -> Any:
        """``model`` (an Agents SDK ``Model``) wrapped so that every call gets the live version applied
        (see :class:`molt_openai_agents.model.MoltModel`); give it to ``Agent(model=…)``."""
        from .model import MoltModel

        return MoltModel(model, self)

    # ------------------------------------------------------------------ TracingProcessor (agent loop)

    def on_trace_start(self, trace: Any) -> None:
        """A workflow begins: a new trajectory."""
        try:
            info = trace.export() or {}
        except Exception:
            info = {"workflow_name": getattr(trace, "name", None)}
        self._queue(self._mapper.trace_start, trace.trace_id, _now(), info)

    def on_trace_end(self, trace: Any) -> None:
        """The workflow ended."""
        self._queue(self._mapper.trace_end, trace.trace_id, _now())

    def on_span_start(self, span: Any) -> None:
        """A span began."""
        self._queue(self._mapper.span_start, span.span_id, span.parent_id, span.trace_id, _now(), span)

    def on_span_end(self, span: Any) -> None:
        """A span ended (its data is final now)."""
        self._queue(self._mapper.span_end, span.span_id, _now(), span)

    def shutdown(self) -> None:
        """Flush what was captured (the SDK calls this at exit)."""
        try:
            self.capture.flush(5.0)
        except Exception as exc:
            self.capture.fail(exc)

    def force_flush(self) -> None:
        """Flush what was captured."""
        self.shutdown()
