"""Task statistics: the Wilson score interval and accuracy with its standard error."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmeval.scorer import (
    Estimate,
    accuracy,
    binomial_upper_tail,
    mcnemar_exact,
    mcnemar_one_sided,
    paired_difference,
    signed_rank_upper_tail,
    wilson_interval,
)
from pytest_llmeval.scorer._metrics import Z95

EPS = 1e-12


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [
        (0, 10, 0.0, 0.2775),
        (10, 10, 0.7225, 1.0),
        (5, 10, 0.2366, 0.7634),
        (1, 1, 0.2065, 1.0),
        (50, 100, 0.4038, 0.5962),
        (81, 263, 0.2553, 0.3662),
    ],
)
def test_known_values(successes: int, n: int, low: float, high: float) -> None:
    lo, hi = wilson_interval(successes, n)
    assert lo == pytest.approx(low, abs=1e-4)
    assert hi == pytest.approx(high, abs=1e-4)


def test_empty_sample_is_uninformative() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_wider_with_larger_z() -> None:
    lo95, hi95 = wilson_interval(30, 100)
    lo99, hi99 = wilson_interval(30, 100, z=2.5758)
    assert lo99 < lo95 < 0.3 < hi95 < hi99


interval_args = st.integers(min_value=1, max_value=10_000).flatmap(
    lambda n: st.tuples(st.integers(min_value=0, max_value=n), st.just(n))
)


@given(interval_args)
def test_interval_contains_p_within_unit(args: tuple[int, int]) -> None:
    successes, n = args
    lo, hi = wilson_interval(successes, n)
    p = successes / n
    assert 0.0 <= lo <= hi <= 1.0
    assert lo - EPS <= p <= hi + EPS


@given(interval_args)
def test_bounds_invert_the_score_test(args: tuple[int, int]) -> None:
    # Definition of the Wilson interval: the p0 where |p - p0| = z * sqrt(p0 (1 - p0) / n).
    successes, n = args
    p = successes / n
    for p0 in wilson_interval(successes, n):
        if 0.0 < p0 < 1.0:
            assert (p - p0) ** 2 == pytest.approx(Z95**2 * p0 * (1 - p0) / n, rel=1e-6, abs=1e-15)


@given(interval_args)
def test_interval_symmetry(args: tuple[int, int]) -> None:
    successes, n = args
    lo, hi = wilson_interval(successes, n)
    lo2, hi2 = wilson_interval(n - successes, n)
    assert lo == pytest.approx(1 - hi2, abs=1e-12)
    assert hi == pytest.approx(1 - lo2, abs=1e-12)


@given(interval_args, st.integers(min_value=2, max_value=50))
def test_interval_narrows_with_n(args: tuple[int, int], factor: int) -> None:
    successes, n = args
    lo, hi = wilson_interval(successes, n)
    lo_big, hi_big = wilson_interval(successes * factor, n * factor)
    assert hi_big - lo_big < hi - lo


def test_accuracy_values() -> None:
    est = accuracy([True, False, True, False])
    assert est.n == 4
    assert est.value == 0.5
    assert est.stderr == pytest.approx(math.sqrt((1 / 3) / 4))
    assert (est.ci_low, est.ci_high) == wilson_interval(2, 4)


def test_accuracy_fractional_scores() -> None:
    est = accuracy([1.0, 0.5, 0.0])
    assert est.value == pytest.approx(0.5)
    assert est.stderr == pytest.approx(math.sqrt(0.25 / 3))
    assert est.ci_low < 0.5 < est.ci_high


def test_accuracy_all_equal_has_zero_stderr() -> None:
    est = accuracy([True] * 20)
    assert est.value == 1.0
    assert est.stderr == 0.0
    assert est.ci_high == 1.0
    assert est.ci_low == pytest.approx(0.8389, abs=1e-4)


def test_accuracy_single_and_empty() -> None:
    one = accuracy([True])
    assert one.n == 1 and one.value == 1.0
    assert math.isnan(one.stderr)
    empty = accuracy([])
    assert isinstance(empty, Estimate)
    assert empty.n == 0
    assert math.isnan(empty.value) and math.isnan(empty.stderr)
    assert (empty.ci_low, empty.ci_high) == (0.0, 1.0)


@given(st.lists(st.booleans(), min_size=2, max_size=500))
def test_accuracy_matches_definition(correct: list[bool]) -> None:
    est = accuracy(correct)
    n = len(correct)
    mean = sum(correct) / n
    assert est.n == n
    assert est.value == pytest.approx(mean)
    sd = math.sqrt(sum((c - mean) ** 2 for c in correct) / (n - 1))
    assert est.stderr == pytest.approx(sd / math.sqrt(n))
    assert est.ci_low - EPS <= est.value <= est.ci_high + EPS


def test_fractional_scores_get_the_normal_interval() -> None:
    scores = [0.2, 0.4, 0.6, 0.8]
    est = accuracy(scores)
    sd = math.sqrt(sum((s - 0.5) ** 2 for s in scores) / 3)
    assert est.value == pytest.approx(0.5)
    assert est.stderr == pytest.approx(sd / 2)
    assert (est.ci_low, est.ci_high) == pytest.approx((0.5 - Z95 * sd / 2, 0.5 + Z95 * sd / 2))
    assert accuracy([0.99, 0.5]).ci_high == 1.0  # clipped
    assert (accuracy([0.3]).ci_low, accuracy([0.3]).ci_high) == (0.0, 1.0)


def test_paired_difference_is_the_mean_per_item_change_with_a_normal_interval() -> None:
    a = [1.0, 0.0, 1.0, 0.0, 1.0]
    b = [1.0, 1.0, 1.0, 0.0, 0.0]
    diff = paired_difference(a, b)
    assert diff.value == 0.0 and diff.n == 5
    sd = math.sqrt(2 / 4)  # differences 0, 1, 0, 0, -1
    assert diff.stderr == pytest.approx(sd / math.sqrt(5))
    assert (diff.ci_low, diff.ci_high) == pytest.approx((-Z95 * diff.stderr, Z95 * diff.stderr))
    assert paired_difference([0.0, 0.0], [1.0, 1.0]).ci_low == 1.0  # no spread
    assert math.isnan(paired_difference([1.0], [0.0]).ci_low)
    with pytest.raises(ValueError, match="equal lengths"):
        paired_difference([1.0], [])


def test_accuracy_does_not_depend_on_the_order_of_the_items() -> None:
    """xdist workers report items in any order: the same scores give the same numbers."""
    scores = [1.0, 0.0, 0.0, 1.0, 0.3, 0.7, 0.1] * 5 + [0.0] * 3
    reference = accuracy(scores)
    rng = random.Random(0)
    for _ in range(50):
        rng.shuffle(scores)
        assert accuracy(scores) == reference


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        (5, 0, 1 / 32),
        (0, 5, 1.0),
        (0, 0, 1.0),
        (3, 3, 42 / 64),  # P(X >= 3 | Bin(6, 1/2)) = (20 + 15 + 6 + 1) / 64
        (6, 1, 8 / 128),  # (7 + 1) / 128
        (1, 6, 127 / 128),
    ],
)
def test_mcnemar_one_sided_known_values(b: int, c: int, p: float) -> None:
    assert mcnemar_one_sided(b, c) == pytest.approx(p, rel=1e-12)


@given(st.integers(0, 60), st.integers(0, 60))
def test_mcnemar_one_sided_is_the_binomial_upper_tail(b: int, c: int) -> None:
    expected = binomial_upper_tail(b, b + c, Fraction(1, 2)) if b + c else 1.0
    assert mcnemar_one_sided(b, c) == pytest.approx(expected, rel=1e-12)
    if b > c:  # the one-sided p-value is half the two-sided one on the side of the data
        assert mcnemar_one_sided(b, c) == pytest.approx(mcnemar_exact(b, c) / 2, rel=1e-12)


def test_mcnemar_one_sided_is_exact_far_in_the_tail() -> None:
    assert mcnemar_one_sided(2000, 0) > 0.0  # never 0, even below the float range
    assert mcnemar_one_sided(1000, 0) == pytest.approx(2.0**-1000, rel=1e-12)
    with pytest.raises(ValueError, match="discordant"):
        mcnemar_one_sided(-1, 2)


@pytest.mark.parametrize(
    ("differences", "p"),
    [
        ([], 1.0),
        ([0.0, 0.0], 1.0),
        ([1.0], 0.5),
        ([1.0, 2.0, 3.0], 1 / 8),  # W+ = 6: only the all-positive pattern of 8
        ([-1.0, 2.0, 3.0], 2 / 8),  # W+ = 5: {2, 3} and {1, 2, 3}
        ([1.0, -2.0, -3.0], 7 / 8),  # W+ = 1: every pattern but the empty one
        ([1.0, -1.0], 3 / 4),  # tied ranks 1.5 each: W+ >= 1.5 in 3 of 4 patterns
        ([0.0, 1.0, 2.0, 3.0], 1 / 8),  # zeros are dropped
    ],
)
def test_signed_rank_upper_tail_known_values(differences: list[float], p: float) -> None:
    assert signed_rank_upper_tail(differences) == pytest.approx(p, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-5, 5, allow_nan=False).map(lambda x: round(x, 1)), min_size=1, max_size=120)
)
def test_signed_rank_upper_tail_is_scipys(differences: list[float]) -> None:
    """The same p as scipy's Wilcoxon test (exact up to 50 untied differences, else the
    normal approximation with tie and continuity corrections)."""
    stats = pytest.importorskip("scipy.stats")
    nonzero = [d for d in differences if d != 0]
    if not nonzero:
        assert signed_rank_upper_tail(differences) == 1.0
        return
    untied = len({abs(d) for d in nonzero}) == len(nonzero)
    exact = untied and len(nonzero) <= 50
    if not exact and len(nonzero) <= 50:
        return  # scipy has no exact test with ties; ours counts the tied patterns exactly
    expected = stats.wilcoxon(
        nonzero, alternative="greater", method="exact" if exact else "approx", correction=True
    ).pvalue
    assert signed_rank_upper_tail(differences) == pytest.approx(expected, rel=1e-9, abs=1e-15)
