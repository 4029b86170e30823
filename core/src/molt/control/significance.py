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
from molt.stats import Z90_ONE_SIDED, binomial_greater, fisher_greater, sign_greater, wilson

__all__ = ["INDEPENDENT_SIGNALS", "AgentLevel", "Agreement", "CanaryState", "Confirmation", "FlipEstimate",
           "agent_level", "agreement", "canary_state", "confirmation", "confirmed", "flip_rate", "holm",
           "mixture_ratio", "pair_in_time", "reward_disagreement", "screen_levels"]

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
    k = sum(1 for e in failures if confirmed(e))
    f = sum(1 for e in rest if confirmed(e))
    return Agreement(k, requests, f, len(rest), fisher_greater(k, requests, f, len(rest)) if k else 1.0)


def reward_disagreement(window: Sequence[Episode]) -> tuple[int, int]:
    """``(disagreeing, compared)``: of the confirmed failures that have an outcome reward, how many have a
    reward that says success — the outcome reward's observed flip rate on failures is their ratio."""
    rated = [e for e in window if confirmed(e) and e.reward is not None]
    return sum(1 for e in rated if e.reward is not None and e.reward > 0.5), len(rated)


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



# --------------------------------------------------------------------------- the reward channel's noise


@dataclass(frozen=True)
class FlipEstimate:
    """How often an outcome reward says the opposite of what happened, from the calls where two signals
    speak (:func:`flip_rate`)."""

    rate: float          # the estimated flip rate of an outcome-reward channel
    upper: float         # its one-sided 95 % upper bound (Wilson)
    against_truth: tuple[int, int]   # (disagreeing, compared): a reward beside a correction / tool error / thumbs-down
    between_rewards: tuple[int, int]  # (disagreeing, compared): two reward channels on the same call

    def summary(self) -> dict[str, Any]:
        return {"model": "each outcome-reward channel flips with one rate; corrections, unrecovered tool errors "
                         "and thumbs-downs are taken as true", "rate": round(self.rate, 4),
                "upper_95": round(self.upper, 4), "reward_vs_independent": list(self.against_truth),
                "reward_vs_reward": list(self.between_rewards)}


def flip_rate(window: Sequence[Episode]) -> FlipEstimate:
    """The outcome rewards' flip rate, estimated from disagreements between signals on the same call.

    Each outcome-reward channel (verifier, judge, user feedback, ...: ``Episode.votes``) is taken to
    flip with one rate ``e``, independently; a correction, an unrecovered tool error or a thumbs-down
    is a statement of failure and taken as true. A reward beside such a statement disagrees with
    probability ``e`` (it says success); two reward channels on one call disagree with probability
    ``2e(1 - e)``. The two moment estimates are pooled by the number of comparisons. With no call where
    two signals speak the estimate is 0 with an upper bound of 1 (nothing is known)."""
    d1 = n1 = d2 = n2 = 0
    for e in window:
        rewards = [v for k, v in e.votes.items() if k not in INDEPENDENT_SIGNALS]
        truth = any(not v for k, v in e.votes.items() if k in INDEPENDENT_SIGNALS) or bool(e.corrections)
        if truth:
            n1 += len(rewards)
            d1 += sum(rewards)
        for i in range(len(rewards)):
            for j in range(i + 1, len(rewards)):
                n2 += 1
                d2 += rewards[i] != rewards[j]
    e1 = d1 / n1 if n1 else 0.0
    r2 = min(d2 / n2, 0.5) if n2 else 0.0
    e2 = (1.0 - math.sqrt(1.0 - 2.0 * r2)) / 2.0
    n = n1 + n2
    rate = (n1 * e1 + n2 * e2) / n if n else 0.0
    return FlipEstimate(rate, wilson(rate * n, n, Z90_ONE_SIDED)[1] if n else 1.0, (d1, n1), (d2, n2))


# --------------------------------------------------------------------------- the agent, then its clusters


def holm(p_values: Mapping[str, float], alpha: float) -> dict[str, tuple[float, bool]]:
    """Holm's step-down procedure: each hypothesis's ``(level it was held to, rejected)``. Sorted by
    p-value, the i-th (from 0) of ``m`` is tested at ``alpha / (m - i)`` while every smaller one was
    rejected; the family-wise error rate is at most ``alpha`` under any dependence, and it rejects
    everything Bonferroni's ``alpha / m`` does, and more."""
    order = sorted(p_values, key=lambda k: (p_values[k], k))
    m = len(order)
    out: dict[str, tuple[float, bool]] = {}
    going = True
    for i, k in enumerate(order):
        level = alpha / (m - i)
        going = going and p_values[k] <= level
        out[k] = (level, going)
    return out


@dataclass(frozen=True)
class AgentLevel:
    """The agent's failure rate (and each tenant's share of it) tested against the tolerated rate before
    any cluster is (:func:`agent_level`)."""

    failures: int
    requests: int
    tolerable: float
    null_rate: float      # the tolerated rate as it shows through the estimated reward flips
    p_value: float
    level: float
    significant: bool
    tenants: dict[str, dict[str, Any]]

    def summary(self) -> dict[str, Any]:
        return {"test": "one-sided exact binomial of the agent's failures against the tolerated failure rate "
                        "(Holm over the agent and each tenant's share)", "k": self.failures, "n": self.requests,
                "tolerable": self.tolerable, "null_rate": round(self.null_rate, 4), "p_value": self.p_value,
                "level": self.level, "significant": self.significant, "tenants": self.tenants,
                "false_alarm_rate": f"at most {self.level:g} for an agent failing at most {self.tolerable:g}"}


def agent_level(window: Sequence[Episode], tolerable: float, alpha: float,
                   flips: FlipEstimate | None = None) -> AgentLevel:
    """Test the agent (and each tenant's share, when the window holds several) against ``tolerable``.

    Under the null hypothesis the agent fails at most ``tolerable`` of its requests. A flipped reward
    moves a success to a failure as often as the reverse, so what the window shows under the null is
    at most ``t + e (1 - 2t)`` for a flip rate ``e`` (its upper bound is used: the test must not alarm
    on noise); for ``t = 0.5`` flips change nothing. P(X ≥ k), X ~ Binomial(n, that rate), is exact;
    Holm's procedure over the agent and its tenants keeps the family-wise false-alarm rate at ``alpha``.
    """
    e = min((flips.upper if flips is not None and flips.rate > 0 else 0.0), 0.5)
    null = min(1.0, tolerable + e * (1.0 - 2.0 * tolerable)) if tolerable < 0.5 else tolerable
    judged = [x for x in window if x.success is not None]
    k = sum(1 for x in judged if x.success is False)
    ps = {"*": binomial_greater(k, len(judged), null)}
    counts: dict[str, tuple[int, int]] = {"*": (k, len(judged))}
    tenants = sorted({x.tenant_id or "-" for x in judged})
    if len(tenants) > 1:
        for t in tenants:
            mine = [x for x in judged if (x.tenant_id or "-") == t]
            kt = sum(1 for x in mine if x.success is False)
            ps[t] = binomial_greater(kt, len(mine), null)
            counts[t] = (kt, len(mine))
    tested = holm(ps, alpha)
    return AgentLevel(k, len(judged), tolerable, null, ps["*"], tested["*"][0], tested["*"][1],
                         {t: {"k": counts[t][0], "n": counts[t][1], "p_value": ps[t], "level": tested[t][0],
                              "significant": tested[t][1]} for t in tenants if t in ps})


# --------------------------------------------------------------------------- the guarded canary


def mixture_ratio(wins: int, losses: int, a: float, b: float) -> float:
    """The mixture likelihood ratio of ``wins`` and ``losses`` against a fair coin, the win probability
    drawn from Beta(``a``, ``b``) *truncated to above one half* (one-sided: only a coin biased towards
    wins is the alternative). Under a coin that is fair — or biased towards losses — it is a nonnegative
    supermartingale with mean at most 1, so by Ville's inequality the chance that it ever reaches
    ``1 / alpha``, however often it is looked at, is at most ``alpha``. ``a`` and ``b`` are rounded to
    whole numbers (the tail integrals are then binomial sums)."""
    a, b = max(1, round(a)), max(1, round(b))

    def log_tail(p: int, q: int) -> float:
        # log ∫_{1/2}^1 θ^(p-1) (1-θ)^(q-1) dθ = log B(p, q) + log P(Bin(p+q-1, 1/2) ≤ p-1)
        n = p + q - 1
        terms = [math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) for j in range(p)]
        top = max(terms)
        tail = top + math.log(sum(math.exp(t - top) for t in terms)) - n * math.log(2.0)
        return math.lgamma(p) + math.lgamma(q) - math.lgamma(p + q) + tail

    return math.exp(log_tail(a + wins, b + losses) - log_tail(a, b) + (wins + losses) * math.log(2.0))


@dataclass(frozen=True)
class CanaryState:
    """The guarded canary's sequential test after the live outcomes seen so far (:func:`canary_state`)."""

    canary: tuple[int, int]      # (successes, rewarded runs) served by the canary
    live: tuple[int, int]        # (successes, rewarded runs) of the live version beside it
    wins: int                    # discordant pairs the canary won (it succeeded, its live partner failed)
    losses: int                  # discordant pairs the canary lost
    prior: tuple[float, float]   # the mixing Beta(a, b) over the win probability, from the replay
    ratio: float                 # the mixture likelihood ratio for "the canary is better"
    harm: float                  # the same for "the canary is worse" (flat mixing prior)
    alpha: float
    decision: str                # "promote" | "abort" | "continue"
    why: str
    runs: int = 0                # the exposure so far: canary runs served (all of them, targeted or not)
    max_runs: int = 0            # ... and its bound
    elapsed_s: float | None = None   # seconds since the canary started
    max_s: float | None = None       # ... and that bound

    def summary(self) -> dict[str, Any]:
        return {"test": "mSPRT on discordant canary/live pairs (each canary run paired with a live run beside "
                        "it; under no effect a discordant pair is a fair coin): mixture likelihood ratio, the "
                        "mixing Beta from the replay's fixed/broken, promote at 1/alpha; harm: the same with a "
                        "flat mixing prior; exposure bounded",
                "canary": list(self.canary), "live": list(self.live), "wins": self.wins, "losses": self.losses,
                "prior": [round(self.prior[0], 3), round(self.prior[1], 3)], "ratio": round(self.ratio, 4),
                "harm_ratio": round(self.harm, 4), "threshold": round(1 / self.alpha, 3),
                "false_promotion_rate": f"at most {self.alpha:g}",
                "exposure": {"runs": self.runs, "max_runs": self.max_runs,
                             "elapsed_s": None if self.elapsed_s is None else round(self.elapsed_s, 1),
                             "max_s": self.max_s},
                "decision": self.decision, "why": self.why}

    def brief(self) -> str:
        """The state in one line, as the decision log and the change view say it."""
        left = f"{self.runs}/{self.max_runs} canary runs"
        if self.elapsed_s is not None and self.max_s:
            left += f", {_duration(self.elapsed_s)} of {_duration(self.max_s)}"
        return (f"{self.wins} pairs won, {self.losses} lost; mixture ratio {self.ratio:.2f} against the threshold "
                f"{1 / self.alpha:g} (harm {self.harm:.2f}); exposure {left}")


def _duration(s: float) -> str:
    return f"{s / 86400:.1f} d" if s >= 86400 else f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min"


def canary_state(canary: Sequence[bool], live: Sequence[bool], pairs: Sequence[tuple[bool, bool]], *,
                 prior: tuple[float, float], alpha: float, max_runs: int, expired: bool,
                 served: int | None = None, elapsed_s: float | None = None,
                 max_s: float | None = None) -> CanaryState:
    """The guarded canary's decision from its runs' outcomes (``canary``), the live version's beside it
    (``live``) and the ``pairs`` (canary outcome, live outcome) the plane matched in time.

    Under the null hypothesis — the canary does no better than the live version — and with requests
    routed to either at random, a discordant pair (one succeeded, the other failed) is the canary's win
    with probability at most ½. The mixture likelihood ratio of the wins and losses against ½
    (:func:`mixture_ratio`, mixing prior ``prior`` = Beta(1 + fixed, 1 + broken) of the replay, truncated
    to the canary's side) is a test supermartingale: promoting when it reaches ``1 / alpha`` promotes a
    change without effect with probability at most ``alpha``, whenever the plane looks (mSPRT). Harm is
    the mirror image with a flat prior on the live version's side (abort at ``1 / alpha``). At the
    exposure bound (``max_runs`` canary runs — ``served``, all the canary served, when the outcomes tested
    are only those of its target —, or ``expired``) without a decision the canary is aborted: the
    experiment ended without evidence. ``elapsed_s`` and ``max_s`` (the time bound) are reported in the
    state's exposure, beside the runs and their bound."""
    wins = sum(1 for c, lv in pairs if c and not lv)
    losses = sum(1 for c, lv in pairs if lv and not c)
    ratio = mixture_ratio(wins, losses, *prior)
    harm = mixture_ratio(losses, wins, 1.0, 1.0)
    n1, k1, n0, k0 = len(canary), sum(canary), len(live), sum(live)
    exposed = max(n1, served or 0)
    bar = 1.0 / alpha
    if harm >= bar:
        decision, why = "abort", f"harm: mixture ratio {harm:.1f} ≥ {bar:g} ({losses} pairs lost, {wins} won)"
    elif ratio >= bar:
        decision, why = "promote", f"mixture ratio {ratio:.1f} ≥ {bar:g} ({wins} pairs won, {losses} lost)"
    elif exposed >= max_runs or expired:
        decision, why = "abort", (f"exposure bound reached ({exposed} canary runs{', time up' if expired else ''}) at "
                                  f"mixture ratio {ratio:.2f} < {bar:g}: no evidence, the change is withdrawn")
    else:
        decision, why = "continue", (f"mixture ratio {ratio:.2f} < {bar:g} ({wins} won, {losses} lost of "
                                     f"{len(pairs)} pairs) on {exposed}/{max_runs} canary runs")
    return CanaryState((k1, n1), (k0, n0), wins, losses, prior, ratio, harm, alpha, decision, why, exposed, max_runs,
                       elapsed_s, max_s)


def pair_in_time(canary: Sequence[tuple[Any, bool]], live: Sequence[tuple[Any, bool]]) -> list[tuple[bool, bool]]:
    """Each canary run ``(time, outcome)`` paired with the live run nearest to it in time not paired yet
    (ties: the earlier): ``(canary outcome, live outcome)`` pairs, in the canary's time order."""
    free = sorted(live, key=lambda x: x[0])
    used = [False] * len(free)
    out: list[tuple[bool, bool]] = []
    for t, ok in sorted(canary, key=lambda x: x[0]):
        best = None
        for i, (lt, _) in enumerate(free):
            if used[i]:
                continue
            d = abs((lt - t).total_seconds()) if hasattr(lt - t, "total_seconds") else abs(lt - t)
            if best is None or d < best[0]:
                best = (d, i)
        if best is None:
            break
        used[best[1]] = True
        out.append((ok, free[best[1]][1]))
    return out
