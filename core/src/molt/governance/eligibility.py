"""Training-eligibility rules: per event (at capture) and per trajectory (at read, with late rewards).

An event is eligible when its tenant opted in, consent allows it, its classification is trainable,
its kind and tools are not excluded, and redaction found nothing the tenant refuses to train on even
redacted. A trajectory is eligible when every event is, no payload was erased, and it meets the
tenant's :class:`~molt.governance.policy.QualityRules`. Every rule that fails adds a reason
(``"rule: detail"``); an empty list means eligible.

Per-field exclusions do not make anything ineligible: :func:`strip_fields` removes those payload
paths from what the trainer reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from molt.atdp.models import Event, Generation, ToolCall
from molt.errors import GovernanceError
from molt.governance.policy import QualityRules, TrainingSettings

__all__ = ["event_reasons", "quality_reasons", "strip_fields", "tool_names"]


def tool_names(event: Event) -> list[str]:
    """Names of the tools an event calls or asks to call."""
    names: list[str] = []
    action = event.action
    if isinstance(action, ToolCall):
        names.append(action.tool_name)
    elif isinstance(action, Generation) and action.tool_calls:
        names.extend(c.name for c in action.tool_calls)
    obs = event.observation
    if obs is not None and obs.messages:
        for m in obs.messages:
            names.extend(c.name for c in m.tool_calls or ())
    return names


def event_reasons(event: Event, training: TrainingSettings, *, redacted_types: Iterable[str] = ()) -> list[str]:
    """Why ``event`` may not be trained on under ``training`` (empty: it may)."""
    reasons: list[str] = []
    if not training.opt_in:
        reasons.append("tenant: the tenant has not opted in to training")
    consent = event.metadata.consent
    if consent is not None and consent.training is False:
        reasons.append("consent: training consent was refused")
    elif training.require_consent and (consent is None or consent.training is None):
        reasons.append("consent: no training consent was recorded and the policy requires it")
    c = event.metadata.classification
    if c not in training.classifications:
        allowed = ", ".join(sorted(x.value for x in training.classifications)) or "none"
        reasons.append(f"classification: {c.value} data is not trainable (allowed: {allowed})")
    if event.kind in training.exclude_kinds:
        reasons.append(f"kind: {event.kind.value} events are excluded")
    if training.exclude_tools:  # (this runs per event at capture: skip what no rule can match)
        for name in dict.fromkeys(tool_names(event)):
            if training.tool_excluded(name):
                reasons.append(f"tool: calls to {name!r} are excluded")
    if training.exclude_if_redacted:
        found = sorted(training.exclude_if_redacted.intersection(redacted_types))
        if found:
            reasons.append(f"redaction: the event held {', '.join(found)}")
    return reasons


def quality_reasons(events: list[Event], total_reward: float | None, rules: QualityRules,
                    *, chain_ok: bool | None = None) -> list[str]:
    """Why a trajectory fails the minimum-quality rules (empty: it passes)."""
    reasons: list[str] = []
    n = len(events)
    if n < rules.min_events:
        reasons.append(f"quality: {n} events, fewer than min_events={rules.min_events}")
    if rules.max_events is not None and n > rules.max_events:
        reasons.append(f"quality: {n} events, more than max_events={rules.max_events}")
    if rules.require_reward and total_reward is None:
        reasons.append("quality: no reward, and require_reward is set")
    if rules.min_total_reward is not None and (total_reward is None or total_reward < rules.min_total_reward):
        reasons.append(f"quality: total reward {total_reward} is below min_total_reward={rules.min_total_reward}")
    errors = sum(1 for e in events if e.outcome is not None and e.outcome.status.value == "error")
    if n and errors / n > rules.max_error_fraction:
        reasons.append(f"quality: {errors}/{n} events ended in error, over max_error_fraction="
                       f"{rules.max_error_fraction}")
    if rules.require_chain_ok and chain_ok is False:
        reasons.append("integrity: the hash chain does not verify")
    return reasons


def strip_fields(event: Event, paths: Iterable[str]) -> Event:
    """``event`` without the payload ``paths`` (``hidden``, ``hidden.reasoning``, ``outcome.output``;
    a path through a list applies to every element). A field the model requires is emptied instead."""
    paths = list(paths)
    if not paths:
        return event
    for blank in (False, True):
        data = event.model_dump(mode="json")
        if not any([_drop(data, p.split("."), blank) for p in paths]):
            return event
        try:
            return Event.model_validate(data)
        except ValueError as exc:
            error = exc
    raise GovernanceError(f"Excluding the fields {paths} leaves an invalid event ({error}); exclude the "
                          f"enclosing field instead.", trajectory_id=event.trajectory_id,
                          event_id=event.event_id) from None


def _drop(node: Any, keys: list[str], blank: bool) -> bool:
    if isinstance(node, list):
        return any([_drop(item, keys, blank) for item in node])
    if not isinstance(node, dict) or keys[0] not in node or node[keys[0]] is None:
        return False
    if len(keys) == 1:
        if blank and isinstance(node[keys[0]], str):
            node[keys[0]] = ""
        else:
            del node[keys[0]]
        return True
    return _drop(node[keys[0]], keys[1:], blank)
