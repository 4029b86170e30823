"""Evidence that noisy rewards cannot make or unmake: failures confirmed by a second, independent signal.

Production's outcome rewards are noisy — a verifier wrong now and then, a reward pipeline that
mislabels, a score flipped by a bug. :mod:`molt.control.diagnose` counts a request as failed when any
signal says so, so a flipped outcome reward moves failures out of a real pattern and spreads spurious
ones over the rest of the window: both of its tests lose power, and a real pattern waits for evidence.

Some failure signals do not travel through the outcome reward: the user's correction, a tool error the
agent never recovered from, a thumbs-down. A failure one of them reports is *confirmed*
(:func:`confirmed`): whatever the outcome reward says, and however often it is flipped, the failure is
there. Under the same null hypothesis as diagnose's other tests — failures do not depend on the
request — the confirmed failures fall on the window's requests at random as well, so the one-sided
Fisher exact test of a cluster's confirmed failures against the rest of the window's
(:func:`agreement`) is exact and needs no estimate of the flip rate. It is one more test of each
cluster under the clusters' Bonferroni split (``alpha / 3`` per test and cluster), so the family-wise
false-alarm rate stays at most ``alpha``.

How noisy the outcome rewards are is estimated from the same agreement (:func:`reward_disagreement`):
among the confirmed failures that also have an outcome reward, the share whose reward says success.
It is reported with each cluster's evidence (an operator reads how far to trust the reward channel);
the test itself does not depend on it.

**Screen, then confirm by replay.** Some patterns an observational test cannot reach at ``alpha`` on
the window it has, whatever the clustering: requests whose text cannot tell them apart (a JSON consumer
and a human asking the same "Where is order #?": only the checker knows which is which), or a small
cluster in a window where a fifth of the rewards are flipped. The replay is a second, independent
experiment on the same requests. So a cluster the observational bar does not pass, but whose smallest
p-value is at most ``screen`` (default 0.1, a compute knob: the share of pattern-free clusters whose
candidates get replayed), is *screened*; a candidate for it may go live only when the replay
*confirms* it (:func:`confirmation`): the live version and the candidate are both replayed on the
region's requests, and an exact one-sided sign test on the discordant pairs — requests the candidate
turns from failure to success (``fixed``) against those it turns from success to failure
(``broken``) — rejects the null hypothesis that the candidate does no better than the live version
there. Under that null each request's two replays are exchangeable (the same agent, the same request,
two independent runs), so conditionally on the window — and so on the screen, which reads only the
recorded outcomes — ``fixed`` given ``fixed + broken`` is Binomial(·, ½): the test is exact whatever
the screen picked: a recorded failure that was noise (a flipped reward, a sampling accident) is as
likely to come out "fixed" as "broken". The level is split over the screened clusters' candidates by
weights the window sets (:func:`screen_levels`: proportional to ``1 / p`` of each cluster's
observational evidence, then evenly over its candidates); weights fixed before the replay keep a
weighted Bonferroni split valid (Roeder & Wasserman's two-stage weighting), so the chance that a cycle
makes a change through this route with a candidate that does no better than the live version is at
most ``alpha``. (The observational route keeps its own statement: at most ``alpha`` of pattern-free
windows raise a cluster; a weight update, which replay cannot confirm, needs that route.) Against a
deterministic agent at ``alpha`` = 1 % a confirmation needs at least seven fixed requests and none
broken (½⁷ = 0.0078): fewer is evidence for the next window, never a change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from molt.control.signals import Episode

__all__ = ["INDEPENDENT_SIGNALS", "Agreement", "Confirmation", "agreement", "confirmation", "confirmed",
           "reward_disagreement", "screen_levels", "sign_greater"]

#: Failure signals that do not come through the outcome reward (``Episode.failure_signals``).
INDEPENDENT_SIGNALS = frozenset({"correction", "tool_error", "thumbs_down"})


def confirmed(e: Episode) -> bool:
    """Whether ``e`` failed by a signal other than its outcome reward (see the module docstring)."""
    return e.success is False and (not INDEPENDENT_SIGNALS.isdisjoint(e.failure_signals) or bool(e.corrections))


@dataclass(frozen=True)
class Agreement:
    """The test of a cluster's confirmed failures against the rest of the window's."""

    confirmed: int         # the cluster's failures another signal than the reward confirms
    requests: int          # the window's requests of the cluster's intent
    base_confirmed: int    # confirmed failures in the rest of the window
    base_requests: int     # requests in the rest of the window
    p_value: float         # one-sided Fisher exact test of confirmed / requests against the rest's

    def summary(self) -> dict[str, Any]:
        return {"test": "one-sided Fisher exact of the failures a signal other than the reward confirms",
                "k": self.confirmed, "n": self.requests, "f": self.base_confirmed, "m": self.base_requests,
                "p_value": self.p_value}


def agreement(failures: Sequence[Episode], requests: int, rest: Sequence[Episode]) -> Agreement:
    """The confirmed-failure test of a cluster with ``failures`` among ``requests`` requests of its intent,
    against the ``rest`` of the window."""
    from molt.control.diagnose import fisher_greater  # diagnose calls this module

    k = sum(1 for e in failures if confirmed(e))
    f = sum(1 for e in rest if confirmed(e))
    return Agreement(k, requests, f, len(rest), fisher_greater(k, requests, f, len(rest)) if k else 1.0)


def reward_disagreement(window: Sequence[Episode]) -> tuple[int, int]:
    """``(disagreeing, compared)``: of the confirmed failures that have an outcome reward, how many have a
    reward that says success — the outcome reward's observed flip rate on failures is their ratio."""
    rated = [e for e in window if confirmed(e) and e.reward is not None]
    return sum(1 for e in rated if e.reward is not None and e.reward > 0.5), len(rated)


def sign_greater(fixed: int, broken: int) -> float:
    """One-sided exact sign test: P(X ≥ ``fixed``) for X ~ Binomial(``fixed + broken``, ½)."""
    n = fixed + broken
    if fixed <= 0:
        return 1.0
    return min(1.0, sum(math.comb(n, i) for i in range(fixed, n + 1)) / 2.0 ** n)


@dataclass(frozen=True)
class Confirmation:
    """The replay's paired test of a candidate on a screened cluster's region (module docstring)."""

    fixed: int      # requests failing under the live version's replay and succeeding under the candidate's
    broken: int     # requests succeeding under the live version's replay and failing under the candidate's
    pairs: int      # requests both replays scored
    p_value: float  # one-sided exact sign test of fixed against broken
    level: float    # this candidate's share of alpha (screen_levels)

    @property
    def confirmed(self) -> bool:
        return self.p_value <= self.level

    def summary(self) -> dict[str, Any]:
        return {"test": "one-sided exact sign test, candidate vs live version replayed on the cluster's region",
                "fixed": self.fixed, "broken": self.broken, "pairs": self.pairs, "p_value": self.p_value,
                "level": self.level, "confirmed": self.confirmed}


def confirmation(live: Mapping[str, float | None], candidate: Mapping[str, float | None],
                 level: float) -> Confirmation:
    """Pair the live version's and the candidate's replayed rewards by trajectory (success: reward > ½)
    and test the discordant pairs (see the module docstring)."""
    fixed = broken = pairs = 0
    for tid, r0 in live.items():
        r1 = candidate.get(tid)
        if r0 is None or r1 is None:
            continue
        pairs += 1
        a, b = r0 > 0.5, r1 > 0.5
        fixed += (not a) and b
        broken += a and not b
    return Confirmation(fixed, broken, pairs, sign_greater(fixed, broken), level)


def screen_levels(p_values: Mapping[str, float], candidates: Mapping[str, int], alpha: float) -> dict[str, float]:
    """Each screened cluster's level per candidate: ``alpha`` split over the clusters in proportion to
    ``1 / p`` of their observational evidence, then evenly over each cluster's ``candidates``. The
    weights sum to one and are fixed before anything is replayed, so the split is a weighted Bonferroni
    one (module docstring). Clusters without a candidate get no share."""
    keys = [k for k in p_values if candidates.get(k, 0) > 0]
    if not keys:
        return {}
    inv = {k: 1.0 / max(p_values[k], 1e-300) for k in keys}
    total = sum(inv.values())
    return {k: alpha * inv[k] / total / candidates[k] for k in keys}
