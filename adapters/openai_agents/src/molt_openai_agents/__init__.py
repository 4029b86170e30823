"""Molt for the OpenAI Agents SDK: a tracing processor that records agents, model calls, tool calls,
handoffs, guardrails and MCP tool listings as ATDP events.

::

    from agents import add_trace_processor
    from molt_openai_agents import MoltTracingProcessor

    add_trace_processor(MoltTracingProcessor(recorder))
"""

from __future__ import annotations

from molt.capture.adapt import require_framework

require_framework("molt-openai-agents", "openai-agents", "0.20", 'pip install "openai-agents>=0.20"')

from .model import MoltModel  # noqa: E402
from .processor import MoltTracingProcessor  # noqa: E402

__all__ = ["MoltModel", "MoltTracingProcessor", "__version__"]

__version__ = "0.1.0"
