"""The control plane's settings: the cycle's thresholds (:class:`PlaneSettings`, what
``--plane-setting KEY=VALUE`` sets) and the reflector client they configure."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from molt.backends.base import BaseBackend
from molt.control.approval import Approval
from molt.control.diagnose import ALPHA, SCREEN, SIMILARITY, TOLERABLE
from molt.errors import InterventionError

__all__ = ["GUARDED_KINDS", "PlaneSettings", "reflector_from_settings", "settings_from_pairs"]

#: The cheap, reversible changes a guarded canary may try (weight updates keep the strict bar).
GUARDED_KINDS = frozenset({"memory_insert", "memory_update", "memory_retire", "skill_patch", "harness_edit",
                           "tool_schema_edit"})


class PlaneSettings(BaseModel):
    """Thresholds of the cycle (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    window: int = 400
    min_cluster: int = 4
    min_weight_cluster: int = 12
    min_gain: float = 0.2
    sufficient_gain: float = 0.5
    regression_sample: int = 12
    regression_tolerance: float = 0.1
    replay_sample: int = 24
    max_unknown_share: float = 0.5
    cost_lambda: float = 0.05
    regression_min_drop: float = 0.2
    canary_weight: float = 0.2
    canary_min: int = 8
    canary_tolerance: float = 0.1
    promote_directly: bool = False
    #: What may go live without an operator (molt.control.approval): ``auto`` everything, ``context`` no
    #: context change (memory, skill, harness, tool schema) — it becomes a proposed version —, ``all`` no
    #: new version at all. Rollbacks and canary aborts never wait.
    approval: Approval = "auto"
    #: The family-wise false-alarm rate of a window's failure-cluster tests (molt.control.diagnose).
    alpha: float = ALPHA
    #: The feature similarity down to which failures share a cluster (molt.control.diagnose).
    similarity: float = SIMILARITY
    #: The failure rate of one intent tolerated before acting on it, whatever the rest of the window does
    #: (the second test of molt.control.diagnose; in (0, 1)).
    tolerable: float = TOLERABLE
    #: A cluster below the bar whose smallest p-value is at most this is *screened*: its context candidates
    #: are replayed and go live only when the replay confirms them at ``alpha`` (molt.control.significance).
    screen: float = SCREEN
    #: The guarded canary (molt.control.significance, "the canary is the experiment"): a cheap, reversible
    #: context change (memory, skill, harness, tool schema) whose replay is positive (``min_gain``) but
    #: whose interval is wide — on a significant cluster, a screened one, or any cluster of an agent that
    #: fails beyond ``tolerable`` — goes to a small canary whose sequential test on live outcomes promotes
    #: or aborts it. ``False``: the strict bar alone (a context change needs its interval above zero).
    guarded: bool = True
    #: The guarded canary's share of the agent's sessions.
    guarded_weight: float = 0.1
    #: Its sequential test's false-promotion rate (and harm test's level).
    guarded_alpha: float = 0.05
    #: The fewest failures a cluster needs for a guarded canary: one or two asks of anything are noise,
    #: whatever their replay says.
    guarded_min_failures: int = 3
    #: Its exposure bound: canary runs, and seconds since it started; past either without a decision it
    #: is aborted.
    guarded_max_requests: int = 60
    guarded_max_s: float = 7 * 86400.0
    #: A reflector (molt.control.reflector) writing candidates beside the templates': an OpenAI-compatible
    #: base URL (``.../v1``; in production a strong model), or ``"served"`` for the plane's replay backend
    #: (the served model). ``None``: templates only. Its bearer token is read from the environment variable
    #: ``reflector_api_key_env`` names (never a setting: settings are printed in ``molt serve``'s banner).
    reflector_url: str | None = None
    #: The model the reflector asks (default: the replay backend's model).
    reflector_model: str | None = None
    reflector_api_key_env: str = "MOLT_REFLECTOR_API_KEY"
    reflector_max_tokens: int = 512
    reflector_timeout_s: float = 120.0
    #: Replay every candidate, even those dearer than a sufficient one already found (which cannot win):
    #: for measuring candidates (bench/bench_evolve.py), not for production cycles.
    replay_all: bool = False
    #: A memory or skill needs corrections (or successes) from this many distinct sessions, and — when they
    #: came through API keys — from this many keys (molt.control.hands).
    min_hands: int = 3
    min_keys: int = 2
    #: How long corrections from a key whose feedback the safety gate refused stay out of the evidence.
    held_out_hours: float = 72.0
    #: Entity types that make generated memory / skill text unservable (personal data and secrets;
    #: organisations and places are what policy facts are about, so they do not count).
    pii_types: frozenset[str] = frozenset({
        "PERSON", "EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "US_SSN", "IBAN_CODE", "IP_ADDRESS", "ADDRESS",
        "US_DRIVER_LICENSE", "API_KEY", "PASSWORD", "PRIVATE_KEY"})


def settings_from_pairs(items: Sequence[str], **given: Any) -> PlaneSettings:
    """:class:`PlaneSettings` from ``KEY=VALUE`` pairs (values read as JSON, else as text), over ``given``
    — what ``--plane-setting`` means in ``molt serve`` and ``molt evolve run``. A pair without ``=``, or
    an unknown key or bad value, raises :class:`ValueError` naming it."""
    import orjson

    out: dict[str, Any] = dict(given)
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{item!r}: expected KEY=VALUE (e.g. canary_min=6).")
        try:
            out[key.strip()] = orjson.loads(raw)
        except orjson.JSONDecodeError:
            out[key.strip()] = raw
    return PlaneSettings(**out)


def reflector_from_settings(s: PlaneSettings, backend: BaseBackend | Mapping[str, BaseBackend]) -> Any:
    """The reflector ``s.reflector_url`` names (``None`` without one), asking ``backend`` when the URL is
    ``"served"`` (the plane's replay backend)."""
    if not s.reflector_url:
        return None
    from molt.control.reflector import Reflector

    kw: dict[str, Any] = {"max_tokens": s.reflector_max_tokens, "timeout_s": s.reflector_timeout_s}
    if s.reflector_url == "served":
        if isinstance(backend, Mapping):
            raise InterventionError("reflector_url='served' needs one replay backend; this plane has one per "
                                    "agent — give the reflector's URL instead.")
        return Reflector(backend=backend, model=s.reflector_model, **kw)
    model = s.reflector_model or (None if isinstance(backend, Mapping) else backend.model)
    if not model:
        raise InterventionError("reflector_url needs reflector_model (the model to ask at that endpoint).")
    return Reflector(s.reflector_url, model=model, api_key=os.environ.get(s.reflector_api_key_env) or None, **kw)
