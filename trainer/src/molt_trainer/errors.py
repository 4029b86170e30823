"""Errors of molt-trainer.

::

    MoltError (molt.errors)
    └── TrainerError            anything the trainer refuses or cannot do
        ├── DataError           recorded trajectories that cannot become samples
        └── PublishError        an adapter that could not be served (vLLM down, refused)
"""

from __future__ import annotations

from molt.errors import MoltError

__all__ = ["DataError", "PublishError", "TrainerError"]


class TrainerError(MoltError):
    """Root error of molt-trainer."""


class DataError(TrainerError, ValueError):
    """Recorded data that cannot be turned into training samples."""


class PublishError(TrainerError):
    """A trained adapter could not be published (the previous one stays live)."""
