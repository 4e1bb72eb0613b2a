"""The unbiased pass@k estimator: known values, validation, agreement with the binomials."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_llmeval.sandbox import pass_at_k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (10, 3, 1, 0.3),
        (10, 0, 1, 0.0),
        (10, 0, 10, 0.0),
        (10, 10, 1, 1.0),
        (10, 10, 5, 1.0),
        (10, 1, 10, 1.0),
        (5, 2, 5, 1.0),
        (1, 1, 1, 1.0),
        (1, 0, 1, 0.0),
        (200, 1, 1, 0.005),
        (4, 2, 2, 1 - 1 / 6),
    ],
)
def test_known_values(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_1_is_the_fraction_correct() -> None:
    for n in range(1, 30):
        for c in range(n + 1):
            assert pass_at_k(n, c, 1) == pytest.approx(c / n, abs=1e-12)


def test_large_counts_do_not_overflow() -> None:
    value = pass_at_k(100_000, 50_000, 1_000)
    assert value == pytest.approx(1.0)
    assert 0.0 < pass_at_k(100_000, 1, 10) < 1.0


@pytest.mark.parametrize(
    ("n", "c", "k"),
    [(10, 3, 0), (10, 3, 11), (10, -1, 1), (10, 11, 1), (0, 0, 1), (-1, 0, 1), (10, 3, -2)],
)
def test_invalid_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


@pytest.mark.parametrize("bad", [1.5, "3", None, True])
def test_non_integers_are_rejected(bad: object) -> None:
    with pytest.raises(ValueError):
        pass_at_k(10, bad, 1)  # type: ignore[arg-type]


@given(st.data())
def test_agrees_with_the_binomial_formula(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 40))
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    naive = 1 - math.comb(n - c, k) / math.comb(n, k)
    value = pass_at_k(n, c, k)
    assert value == pytest.approx(naive, abs=1e-9)
    assert 0.0 <= value <= 1.0


@given(st.data())
def test_monotone_in_k_and_c(data: st.DataObject) -> None:
    n = data.draw(st.integers(2, 40))
    c = data.draw(st.integers(0, n - 1))
    k = data.draw(st.integers(1, n - 1))
    assert pass_at_k(n, c, k) <= pass_at_k(n, c, k + 1) + 1e-12
    assert pass_at_k(n, c, k) <= pass_at_k(n, c + 1, k) + 1e-12
