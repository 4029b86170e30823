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
cluster under diagnose's Bonferroni split (``alpha / 3`` per test and cluster), so the family-wise
false-alarm rate stays at most ``alpha``.

How noisy the outcome rewards are is estimated from the same agreement (:func:`reward_disagreement`):
among the confirmed failures that also have an outcome reward, the share whose reward says success.
It is reported with each cluster's evidence (an operator reads how far to trust the reward channel);
the test itself does not depend on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from molt.control.signals import Episode

__all__ = ["INDEPENDENT_SIGNALS", "Agreement", "agreement", "confirmed", "reward_disagreement"]

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
