"""CrewAI event-bus listener for Molt (skeleton; see the adapters issue)."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
