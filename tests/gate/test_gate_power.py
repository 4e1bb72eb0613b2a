"""Power and sample size of the binomial and of McNemar's test, against published values and
exact enumeration, with monotonicity properties."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmeval.gate import (
    binom_cdf,
    binom_pmf,
    binom_sf,
    binomial_critical_lower,
    binomial_power_lower,
    binomial_sample_size,
    connor_size,
    mcnemar_critical,
    mcnemar_power,
    mcnemar_power_conditional,
    mcnemar_sample_size,
)
from pytest_llmeval.gate._power import _McNemarPower, binomial_size, sample_size
from pytest_llmeval.scorer import mcnemar_exact


def _exact_cdf(k: int, n: int, p: Fraction) -> Fraction:
    return sum((math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1)), Fraction(0))


# ---------------------------------------------------------------------------- the binomial


@given(
    n=st.integers(0, 60),
    k=st.integers(-1, 61),
    p=st.fractions(min_value=0, max_value=1, max_denominator=50),
)
@settings(max_examples=200, deadline=None)
def test_binomial_tails_equal_exact_rational_sums(n: int, k: int, p: Fraction) -> None:
    exact = _exact_cdf(min(k, n), n, p) if k >= 0 else Fraction(0)
    assert binom_cdf(k, n, float(p)) == pytest.approx(float(exact), rel=1e-9, abs=1e-300)
    assert binom_sf(k, n, float(p)) == pytest.approx(float(1 - exact), rel=1e-9, abs=1e-15)


def test_small_tails_keep_their_precision_for_thousands_of_items() -> None:
    # P(X <= 0) for Binomial(5000, 0.25) = 0.75**5000 ~ 1e-625 underflows any float; the
    # sum must not turn into garbage around it, and a tail of 3e-17 keeps its digits.
    assert binom_cdf(0, 5000, 0.25) == 0.0
    exact = float(_exact_cdf(1000, 5000, Fraction(1, 4)))
    assert 0 < exact < 1e-12
    assert binom_cdf(1000, 5000, 0.25) == pytest.approx(exact, rel=1e-9)
    assert binom_pmf(2, 4, 0.5) == 0.375


@pytest.mark.parametrize(
    ("n", "p0", "p1", "critical", "actual_alpha", "power"),
    [
        # pwrss 0.3 (Bulus), tests/testthat/test-proportions.onetwo.R: power.exact.oneprop(
        # prob = 0.45, null.prob = 0.50, n = 500, one-sided alpha 0.05)
        (500, 0.50, 0.45, 231, 0.048945014, 0.7208035),
        # the same at n = 631
        (631, 0.50, 0.45, 294, 0.047223688, 0.800822354),
        # G*Power 3.1 manual, example 4.3 (quoted in the same pwrss test): p = 0.80 against
        # p0 = 0.65, n = 20, one-sided alpha 0.05: power 0.411449, actual alpha 0.044376.
        # Counted from the other side: wrong answers, 0.35 against 0.20.
        (20, 0.35, 0.20, 3, 0.044375603, 0.41144886),
    ],
)
def test_exact_one_sided_binomial_test_known_values(
    n: int, p0: float, p1: float, critical: int, actual_alpha: float, power: float
) -> None:
    assert binomial_critical_lower(n, p0, 0.05) == critical
    assert binom_cdf(critical, n, p0) == pytest.approx(actual_alpha, abs=1e-8)
    assert binomial_power_lower(n, p0, p1, 0.05) == pytest.approx(power, abs=1e-7)


def test_normal_approximation_of_the_one_sample_size() -> None:
    # pwrss power.z.oneprop(prob = 0.45, null.prob = 0.50, one-sided, power = 0.8): n = 617
    assert math.ceil(binomial_size(0.05, 0.8, 0.50, 0.45)) == 617


def test_exact_binomial_sample_size_first_and_stable() -> None:
    first = binomial_sample_size(0.50, 0.45, 0.05, 0.8, stable=False)
    stable = binomial_sample_size(0.50, 0.45, 0.05, 0.8)
    assert first is not None and stable is not None
    assert binomial_power_lower(first, 0.5, 0.45, 0.05) >= 0.8
    assert all(binomial_power_lower(n, 0.5, 0.45, 0.05) < 0.8 for n in range(first - 40, first))
    # the power is saw-toothed: it dips below 0.8 again after the first n that reaches it
    assert stable > first
    assert binomial_power_lower(stable - 1, 0.5, 0.45, 0.05) < 0.8
    assert all(binomial_power_lower(n, 0.5, 0.45, 0.05) >= 0.8 for n in range(stable, 2 * stable))
    assert binomial_sample_size(0.5, 0.5, 0.05, 0.8) is None  # no drop, no sample size


# ---------------------------------------------------------------------------- McNemar


@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_mcnemar_critical_count_matches_mcnemar_exact(alpha: float) -> None:
    for m in range(0, 120):
        k = mcnemar_critical(m, alpha)
        for c in range(0, m // 2 + 1):
            significant = mcnemar_exact(m - c, c) < alpha
            assert significant == (c <= k), (m, c, k)


@pytest.mark.parametrize(
    ("n", "p10", "p01", "two_sided", "power"),
    [
        # pwrss 0.3 (Bulus), tests/testthat/test-proportions.mcnemar.R, power.exact.mcnemar
        # (exact conditional test, unconditional power; validated by its author against PASS
        # and G*Power). Two-sided power there counts significance in either direction.
        (100, 0.20, 0.10, True, 0.373077084),
        (100, 0.20, 0.10, False, 0.514606143),
        (249, 0.20, 0.10, True, 0.801446921),
        (200, 0.20, 0.10, False, 0.80298386),
        # G*Power 3.1 manual, example 5.3 (via the same test): p10 = 0.08, p01 = 0.32, n = 50,
        # one-sided alpha 0.05: power 0.839343 in G*Power, 0.839357 in pwrss
        (50, 0.32, 0.08, False, 0.839356985),
    ],
)
def test_mcnemar_unconditional_power_known_values(
    n: int, p10: float, p01: float, two_sided: bool, power: float
) -> None:
    got = mcnemar_power(n, p10, p01, 0.05, two_sided=two_sided, either_direction=two_sided)
    assert got == pytest.approx(power, abs=1e-8)
    assert mcnemar_power(50, 0.32, 0.08, 0.05, two_sided=False) == pytest.approx(0.839343, abs=2e-5)


def test_mcnemar_power_by_brute_force_enumeration() -> None:
    # every (regressions, improvements) of n = 30 pairs, from the trinomial, through the
    # same mcnemar_exact the gate uses
    n, pr, pi = 30, 0.2, 0.05
    total = 0.0
    for b in range(n + 1):
        for c in range(n + 1 - b):
            prob = (
                math.factorial(n)
                / (math.factorial(b) * math.factorial(c) * math.factorial(n - b - c))
                * pr**b
                * pi**c
                * (1 - pr - pi) ** (n - b - c)
            )
            if b > c and mcnemar_exact(b, c) < 0.05:
                total += prob
    assert mcnemar_power(n, pr, pi, 0.05) == pytest.approx(total, abs=1e-12)


def test_conditional_power_is_the_binomial_of_the_improvements() -> None:
    # 30 discordant items, 2/3 of them regressions: significant when improvements <= 9
    assert mcnemar_critical(30) == 9
    assert mcnemar_power_conditional(30, 0.2, 0.1) == pytest.approx(
        binom_cdf(9, 30, 1 / 3), abs=1e-15
    )


def test_connor_sample_size_known_value() -> None:
    # Connor (1987), Biometrics 43:207-211, p. 209, as given by the HyLown / open
    # powersamplesize calculator "McNemar's Z-test, 2-sided": p01 = 0.45, p10 = 0.05,
    # alpha 0.05, power 0.8 -> n = 23
    assert math.ceil(connor_size(0.45, 0.05, 0.05, 0.8)) == 23


def test_exact_mcnemar_sample_size() -> None:
    n = mcnemar_sample_size(0.20, 0.10, 0.05, 0.8)
    assert n is not None
    assert mcnemar_power(n, 0.2, 0.1) >= 0.8 > mcnemar_power(n - 1, 0.2, 0.1)
    # with either direction counted, pwrss's example gives 249 pairs
    assert mcnemar_sample_size(0.20, 0.10, 0.05, 0.8, either_direction=True) == 249
    # a pure drop of 5 points (no item improves) needs far fewer items than churn around it
    pure = mcnemar_sample_size(0.05, 0.0, 0.05, 0.8)
    churn = mcnemar_sample_size(0.125, 0.075, 0.05, 0.8)
    assert pure is not None and churn is not None and 4 * pure < churn
    assert mcnemar_sample_size(0.1, 0.1, 0.05, 0.8) is None


# ---------------------------------------------------------------------------- properties

shares = st.floats(min_value=0.01, max_value=0.3)


@given(n=st.integers(1, 300), pr=shares, extra=st.floats(0.0, 0.2))
@settings(max_examples=60, deadline=None)
def test_mcnemar_power_grows_with_n(n: int, pr: float, extra: float) -> None:
    gate = _McNemarPower(pr + extra, extra, 0.05, True, False)
    assert gate.power(n + 1) >= gate.power(n) - 1e-12
    assert gate.power(2 * n) >= gate.power(n) - 1e-12


@given(
    churn=st.floats(0.0, 0.2),
    d1=st.floats(0.04, 0.15),
    d2=st.floats(0.04, 0.15),
    target=st.sampled_from([0.5, 0.8, 0.9]),
)
@settings(max_examples=15, deadline=None)
def test_mcnemar_sample_size_falls_with_the_drop(
    churn: float, d1: float, d2: float, target: float
) -> None:
    small, large = sorted((d1, d2))
    n_small = mcnemar_sample_size(churn / 2 + small, churn / 2, 0.05, target)
    n_large = mcnemar_sample_size(churn / 2 + large, churn / 2, 0.05, target)
    assert n_small is not None and n_large is not None
    assert n_large <= n_small
    # and more power costs more items
    if target < 0.9:
        more = mcnemar_sample_size(churn / 2 + large, churn / 2, 0.05, 0.9)
        assert more is not None and more >= n_large


@given(
    p0=st.floats(0.05, 0.95),
    d1=st.floats(0.01, 0.04),
    d2=st.floats(0.01, 0.04),
    n=st.integers(1, 2000),
)
@settings(max_examples=100, deadline=None)
def test_binomial_power_grows_with_the_drop_and_the_normal_size_falls(
    p0: float, d1: float, d2: float, n: int
) -> None:
    small, large = sorted((d1, d2))
    assert binomial_power_lower(n, p0, p0 - large, 0.025) >= binomial_power_lower(
        n, p0, p0 - small, 0.025
    )
    assert binomial_size(0.025, 0.8, p0, p0 - large) <= binomial_size(0.025, 0.8, p0, p0 - small)


@given(
    p0=st.floats(0.1, 0.9),
    d1=st.floats(0.03, 0.1),
    d2=st.floats(0.03, 0.1),
)
@settings(max_examples=20, deadline=None)
def test_exact_binomial_sample_size_falls_with_the_drop(p0: float, d1: float, d2: float) -> None:
    small, large = sorted((d1, d2))
    n_small = binomial_sample_size(p0, p0 - small, 0.025, 0.8)
    n_large = binomial_sample_size(p0, p0 - large, 0.025, 0.8)
    assert n_small is not None and n_large is not None and n_large <= n_small


def test_sample_size_search_finds_a_monotone_crossing_and_reports_none_beyond_the_bound() -> None:
    assert sample_size(lambda n: n / 1000, 0.8) == 800
    assert sample_size(lambda n: n / 1000, 0.8, start=5000) == 800
    assert sample_size(lambda n: 0.1, 0.8, max_n=1000) is None
