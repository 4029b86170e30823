"""The evidence bars a candidate's replay is held to: it *clears* the bar (``min_gain``, interval above
zero), is *promising* (``min_gain`` whatever its interval: enough for a guarded canary) or *sufficient*
(``sufficient_gain``, interval above zero: the cheapest such candidate wins)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from molt.control.settings import PlaneSettings

__all__ = ["clears", "promising", "sufficient"]


def clears(s: PlaneSettings, replay: Mapping[str, Any]) -> bool:
    """Whether a replay clears the evidence bar (``min_gain``, interval above zero)."""
    d, ci = replay.get("success_delta"), replay.get("success_delta_ci")
    return d is not None and ci is not None and d >= s.min_gain and ci[0] > 0

def promising(s: PlaneSettings, replay: Mapping[str, Any]) -> bool:
    """Whether a replay is positive evidence (``min_gain``), whatever its interval: enough for a guarded
    canary."""
    d = replay.get("success_delta")
    return d is not None and d >= s.min_gain

def sufficient(s: PlaneSettings, replay: Mapping[str, Any]) -> bool:
    """Whether a replay shows a sufficient fix (``sufficient_gain``, interval above zero)."""
    d, ci = replay.get("success_delta"), replay.get("success_delta_ci")
    return d is not None and ci is not None and d >= s.sufficient_gain and ci[0] > 0
