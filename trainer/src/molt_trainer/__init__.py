"""Molt online RL trainer (skeleton; see the trainer issue)."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
