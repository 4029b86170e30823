"""Molt for CrewAI: an event-bus listener that records crews, tasks, agents, LLM calls, tool usage,
memory, knowledge and human feedback as ATDP events.

::

    from molt_crewai import MoltEventListener

    MoltEventListener(recorder)   # once, before crew.kickoff()
"""

from __future__ import annotations

from molt.capture.adapt import require_framework

require_framework("molt-crewai", "crewai", "1.15", 'pip install "crewai>=1.15"')

from .listener import MoltEventListener  # noqa: E402

__all__ = ["MoltEventListener", "__version__"]

__version__ = "0.1.0"
