"""Molt: turn live agent traffic into governed, replayable learning material, and evolve the agent."""

from molt.errors import MoltError
from molt.replay.decorator import replayable

__all__ = ["MoltError", "__version__", "replayable"]

__version__ = "0.1.0"
