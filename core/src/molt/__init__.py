"""Molt: turn live agent traffic into governed, replayable learning material, and evolve the agent."""

from molt.errors import MoltError

__all__ = ["MoltError", "__version__"]

__version__ = "0.1.0"
