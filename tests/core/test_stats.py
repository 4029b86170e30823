"""molt.stats against SciPy's reference implementations (property tests) and values worked by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from molt.stats import (
    Z95,
    binomial_greater,
    bootstrap_ci,
    fisher_greater,
    newcombe_diff,
    sign_greater,
    stratified_delta,
    wilson,
)

scipy_stats = pytest.importorskip("scipy.stats")

counts = st.integers(min_value=0, max_value=60)


@settings(max_examples=200, deadline=None)
@given(n=counts, m=counts, data=st.data())
def test_fisher_greater_is_scipys_one_sided_fisher_exact(n: int, m: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(0, n))
    f = data.draw(st.integers(0, m))
    want = scipy_stats.hypergeom.sf(k - 1, n + m, k + f, n) if k > 0 else 1.0
    assert fisher_greater(k, n, f, m) == pytest.approx(min(1.0, want), rel=1e-9, abs=1e-14)
    if k > 0 and n and m:   # the same p-value as the 2×2 table's one-sided exact test
        table = [[k, n - k], [f, m - f]]
        assert fisher_greater(k, n, f, m) == pytest.approx(
            scipy_stats.fisher_exact(table, alternative="greater").pvalue, rel=1e-9, abs=1e-14)


@settings(max_examples=200, deadline=None)
@given(n=counts, p=st.floats(0.0, 1.0), data=st.data())
def test_binomial_greater_is_scipys_binomial_upper_tail(n: int, p: float, data: st.DataObject) -> None:
    k = data.draw(st.integers(0, n + 1))
    want = 1.0 if k <= 0 else 0.0 if k > n else scipy_stats.binom.sf(k - 1, n, p)
    assert binomial_greater(k, n, p) == pytest.approx(want, rel=1e-9, abs=1e-14)


@settings(max_examples=200, deadline=None)
@given(fixed=counts, broken=counts)
def test_sign_greater_is_the_exact_binomial_test_at_one_half(fixed: int, broken: int) -> None:
    want = scipy_stats.binomtest(fixed, fixed + broken, 0.5, alternative="greater").pvalue if fixed else 1.0
    assert sign_greater(fixed, broken) == pytest.approx(want, rel=1e-12)
    assert sign_greater(fixed, broken) == pytest.approx(binomial_greater(fixed, fixed + broken, 0.5), rel=1e-9)


def test_sign_greater_is_exact_at_the_confirmation_bar() -> None:
    """Seven fixed, none broken is ½⁷ exactly: the bar a deterministic agent's confirmation meets at 1 %."""
    assert sign_greater(7, 0) == 0.5 ** 7 and sign_greater(6, 0) == 0.5 ** 6
    assert sign_greater(0, 3) == 1.0


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 500), data=st.data())
def test_wilson_is_scipys_score_interval(n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(0, n))
    ci = scipy_stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    lo, hi = wilson(k, n)
    assert (lo, hi) == (pytest.approx(ci.low, abs=1e-9), pytest.approx(ci.high, abs=1e-9))


def test_wilson_takes_a_fractional_count_and_a_one_sided_z() -> None:
    assert wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(2.5, 10, 1.645)
    assert lo < 0.25 < hi < wilson(2.5, 10)[1]


def test_newcombe_matches_the_published_worked_example() -> None:
    """Newcombe (1998), table II, example (a): 56/70 − 48/80 has the hybrid score interval
    0.0524 to 0.3339."""
    lo, hi = newcombe_diff(56, 70, 48, 80)
    assert (round(lo, 4), round(hi, 4)) == (0.0524, 0.3339)
    assert newcombe_diff(5, 10, 5, 10)[0] < 0 < newcombe_diff(5, 10, 5, 10)[1]
    assert newcombe_diff(12, 12, 0, 12)[1] == 1.0


@settings(max_examples=100, deadline=None)
@given(k1=st.integers(0, 40), k0=st.integers(0, 40), extra1=st.integers(1, 40), extra0=st.integers(1, 40))
def test_newcombe_contains_the_difference_and_stays_in_range(k1: int, k0: int, extra1: int, extra0: int) -> None:
    n1, n0 = k1 + extra1, k0 + extra0
    lo, hi = newcombe_diff(k1, n1, k0, n0)
    assert -1.0 <= lo <= k1 / n1 - k0 / n0 <= hi <= 1.0
    wider = newcombe_diff(k1, n1, k0, n0, z=2 * Z95)
    assert wider[0] <= lo and hi <= wider[1]


def test_bootstrap_ci_is_seeded_and_brackets_the_mean() -> None:
    values = [float(i % 7) for i in range(50)]
    lo, hi = bootstrap_ci(values, seed=3)
    assert lo < sum(values) / len(values) < hi
    assert bootstrap_ci(values, seed=3) == (lo, hi)
    assert all(math.isnan(x) for x in bootstrap_ci([]))


def test_stratified_delta_compares_stratum_by_stratum() -> None:
    """A sample as good as the other on every stratum, that drew the hard one, is not worse (pooled it
    would be −0.3); one worse on the same strata is; with no stratum shared, the pooled difference."""
    live = [("easy", True)] * 6 + [("hard", False)] * 2 + [("hard", True)] * 2
    lucky = [("hard", False), ("hard", True)] * 2
    assert sum(ok for _, ok in lucky) / 4 - sum(ok for _, ok in live) / 10 == pytest.approx(-0.3)
    assert stratified_delta(lucky, live) == pytest.approx(0.0)
    worse = [("easy", False), ("easy", True), ("hard", False), ("hard", False)]
    assert stratified_delta(worse, live) == pytest.approx(0.5 * -0.5 + 0.5 * -0.5)
    assert stratified_delta([("other", False)] * 4, live) == pytest.approx(-0.8)
