"""The exact tests and intervals the control plane and the replay decide with — one copy of each.

A leaf: the standard library only, no Molt module, so every layer may use it and none of its callers
import each other for a p-value.

- :func:`fisher_greater` — one-sided Fisher exact test (hypergeometric upper tail): are a cluster's
  failures more than the rest of the window's rate explains?
- :func:`binomial_greater` — one-sided exact binomial test: P(X ≥ k) for X ~ Binomial(n, p).
- :func:`sign_greater` — one-sided exact sign test on discordant pairs, in integer arithmetic (the
  confirmation bar ½⁷ is compared with ``alpha`` exactly).
- :func:`wilson` — Wilson's score interval of a rate; :func:`newcombe_diff` — Newcombe's hybrid score
  interval of a difference of two rates (method 10 of Newcombe 1998).
- :func:`bootstrap_ci` — a seeded percentile bootstrap interval of a mean.
- :func:`stratified_delta` — a difference of success rates compared stratum by stratum (a canary's
  few runs rarely draw the live version's mix of tasks).

>>> round(fisher_greater(4, 4, 0, 4), 4)          # all four failures on the first four of eight
0.0143
>>> sign_greater(7, 0) == 0.5 ** 7
True
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Sequence

__all__ = ["Z90_ONE_SIDED", "Z95", "binomial_greater", "bootstrap_ci", "fisher_greater", "newcombe_diff",
           "sign_greater", "stratified_delta", "wilson"]

#: The two-sided 95 % normal quantile (the replay's and the plane's intervals).
Z95 = 1.959963984540054
#: The one-sided 95 % normal quantile (an upper bound that may be exceeded 5 % of the time).
Z90_ONE_SIDED = 1.645


def fisher_greater(k: int, n: int, f: int, m: int) -> float:
    """One-sided Fisher exact test: P(X ≥ k) when ``k + f`` failures fall at random on ``n + m``
    requests and X of them land on the ``n`` (hypergeometric tail)."""
    if k <= 0:
        return 1.0
    total, fails = n + m, k + f
    hi = min(n, fails)
    if k > hi:
        return 0.0
    base = _lcomb(total, n)
    return _sum_exp([_lcomb(fails, i) + _lcomb(total - fails, n - i) - base for i in range(k, hi + 1)])


def binomial_greater(k: int, n: int, p: float) -> float:
    """One-sided exact binomial test: P(X ≥ k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    return _sum_exp([_lcomb(n, i) + i * lp + (n - i) * lq for i in range(k, n + 1)])


def sign_greater(fixed: int, broken: int) -> float:
    """One-sided exact sign test: P(X ≥ ``fixed``) for X ~ Binomial(``fixed + broken``, ½), summed in
    integers (no rounding before the one division)."""
    n = fixed + broken
    if fixed <= 0:
        return 1.0
    return min(1.0, sum(math.comb(n, i) for i in range(fixed, n + 1)) / 2.0 ** n)


def wilson(k: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a rate ``k/n`` (``(0, 1)`` when ``n == 0``). ``k`` may be fractional
    (an estimated rate times its sample size)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def newcombe_diff(k1: int, n1: int, k0: int, n0: int, z: float = Z95) -> tuple[float, float]:
    """Newcombe's hybrid score interval for ``k1/n1 - k0/n0`` (method 10 of Newcombe 1998)."""
    p1, p0 = (k1 / n1 if n1 else 0.0), (k0 / n0 if n0 else 0.0)
    l1, u1 = wilson(k1, n1, z)
    l0, u0 = wilson(k0, n0, z)
    d = p1 - p0
    lo = d - math.sqrt((p1 - l1) ** 2 + (u0 - p0) ** 2)
    hi = d + math.sqrt((u1 - p1) ** 2 + (p0 - l0) ** 2)
    return max(-1.0, lo), min(1.0, hi)


def bootstrap_ci(values: Sequence[float], *, resamples: int = 2000, alpha: float = 0.05,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (``(nan, nan)`` when empty)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    rng = random.Random(seed)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return means[int(alpha / 2 * resamples)], means[min(resamples - 1, int((1 - alpha / 2) * resamples))]


def stratified_delta(mine: Sequence[tuple[Hashable, bool]], theirs: Sequence[tuple[Hashable, bool]]) -> float:
    """``mine``'s success rate minus ``theirs``, compared stratum by stratum: the mean over ``mine``'s
    runs of (its stratum's rate in ``mine`` − that stratum's rate in ``theirs``), over strata both
    saw. Each run is ``(stratum, succeeded)``. A small sample rarely draws the other's mix of strata,
    and a pooled difference then measures the mix (a canary that drew the tasks nothing solves looks
    worse however good it is). With no stratum in common, the pooled difference. Both must be
    non-empty."""
    base: dict[Hashable, list[bool]] = {}
    for stratum, ok in theirs:
        base.setdefault(stratum, []).append(ok)
    mine_by: dict[Hashable, list[bool]] = {}
    for stratum, ok in mine:
        mine_by.setdefault(stratum, []).append(ok)
    total = weight = 0.0
    for stratum, runs in mine_by.items():
        other = base.get(stratum)
        if other:
            total += len(runs) * (sum(runs) / len(runs) - sum(other) / len(other))
            weight += len(runs)
    if not weight:
        return sum(ok for _, ok in mine) / len(mine) - sum(ok for _, ok in theirs) / len(theirs)
    return total / weight


def _lcomb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _sum_exp(terms: list[float]) -> float:
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))
