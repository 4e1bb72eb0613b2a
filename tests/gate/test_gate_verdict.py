"""Interval-based verdicts at their boundaries, the policies, the floor rules."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_llmeval.gate import (
    FloorRule,
    interval_status,
    parse_floor_rule,
    pass_threshold,
    policy_fails,
)
from pytest_llmeval.gate._plan import floor_gate_power, floor_need
from pytest_llmeval.gate._verdict import gate_passes
from pytest_llmeval.scorer import wilson_interval


@pytest.mark.parametrize(
    ("low", "high", "floor", "verdict"),
    [
        (0.30, 0.50, 0.30, "pass"),  # the lower end on the floor clears it
        (0.30, 0.50, 0.2999, "pass"),
        (0.30, 0.50, 0.3001, "undecided"),
        (0.30, 0.50, 0.50, "undecided"),  # the upper end on the floor: not below it
        (0.30, 0.50, 0.5001, "fail"),
        (0.0, 0.2775, 0.40, "fail"),  # 0 of 10 right against a floor of 40%
    ],
)
def test_interval_verdict_at_the_boundaries(
    low: float, high: float, floor: float, verdict: str
) -> None:
    assert interval_status(low, high, floor) == verdict


@pytest.mark.parametrize(
    ("score", "floor", "point", "strict", "lenient"),
    [
        # 5 of 10 right: [23.7, 76.3]
        (0.5, 0.2365, False, False, False),  # pass: every policy passes
        (0.5, 0.40, False, True, False),  # undecided, score above the floor
        (0.5, 0.60, True, True, False),  # undecided, score below the floor
        (0.5, 0.77, True, True, True),  # fail: every policy fails
        (0.5, 0.5, False, True, False),  # score on the floor: point passes (as before)
    ],
)
def test_policies(score: float, floor: float, point: bool, strict: bool, lenient: bool) -> None:
    low, high = wilson_interval(score * 10, 10)
    assert policy_fails("point", score, low, high, floor) is point
    assert policy_fails("strict", score, low, high, floor) is strict
    assert policy_fails("lenient", score, low, high, floor) is lenient


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match=r"point\|strict\|lenient"):
        policy_fails("sometimes", 0.5, 0.4, 0.6, 0.5)


@given(
    n=st.integers(1, 80),
    floor=st.floats(0.0, 1.0),
    policy=st.sampled_from(["point", "strict", "lenient"]),
)
@settings(max_examples=200, deadline=None)
def test_pass_threshold_is_where_the_gate_starts_passing(n: int, floor: float, policy: str) -> None:
    t = pass_threshold(n, floor, policy)
    assert all(not gate_passes(k, n, floor, policy) for k in range(0, min(t, n + 1)))
    assert all(gate_passes(k, n, floor, policy) for k in range(t, n + 1))


@given(k=st.integers(0, 200), extra=st.integers(0, 200), floor=st.floats(0.0, 1.0))
@example(k=190, extra=0, floor=1.0)  # found by CI: 190 of 190 "failed" a floor of 1.0
@settings(max_examples=200, deadline=None)
def test_a_decided_verdict_stays_decided_with_more_items_at_the_same_score(
    k: int, extra: int, floor: float
) -> None:
    n = k + extra
    if n == 0:
        return
    before = interval_status(*wilson_interval(k, n), floor)
    after = interval_status(*wilson_interval(2 * k, 2 * n), floor)
    if before != "undecided":
        assert after == before


@given(
    score=st.floats(0.0, 1.0),
    low=st.floats(0.0, 1.0),
    m1=st.floats(0.0, 50.0),
    m2=st.floats(0.0, 50.0),
)
def test_a_larger_margin_makes_a_lower_floor_and_never_turns_a_pass_into_a_fail(
    score: float, low: float, m1: float, m2: float
) -> None:
    small, large = sorted((m1, m2))
    f_small = FloorRule("margin", small / 100).floor(score, low)
    f_large = FloorRule("margin", large / 100).floor(score, low)
    assert f_large <= f_small
    lo, hi = min(low, score), max(low, score)
    for policy in ("point", "strict", "lenient"):
        if not policy_fails(policy, score, lo, hi, f_small):
            assert not policy_fails(policy, score, lo, hi, f_large)


def test_floor_rules() -> None:
    assert parse_floor_rule("lcb") == FloorRule("lcb")
    assert parse_floor_rule("LCB95").name == "lcb95"
    assert parse_floor_rule("margin:5").margin == pytest.approx(0.05)
    assert parse_floor_rule("margin: 2.5pt").name == "margin:2.5"
    with pytest.raises(ValueError, match=r"lcb.*margin:N"):
        parse_floor_rule("median")
    with pytest.raises(ValueError, match="below 100"):
        parse_floor_rule("margin:120")
    # rounded down to 4 decimals: the reference's own score and lower end still clear it
    assert FloorRule("lcb").floor(0.25, 0.225129) == 0.2251
    assert FloorRule("margin", 0.05).floor(0.2512, 0.2) == 0.2012
    assert FloorRule("margin", 0.05).floor(0.01, 0.0) == 0.0


@given(p0=st.floats(0.15, 0.85), n=st.integers(20, 400))
@settings(max_examples=40, deadline=None)
def test_floor_gate_power_grows_with_the_drop(p0: float, n: int) -> None:
    rule = FloorRule("lcb")
    powers = [floor_gate_power(n, p0, d / 100, rule, "point") for d in (0, 2, 5, 10)]
    assert powers == sorted(powers)


@given(p0=st.floats(0.2, 0.8), d1=st.floats(0.04, 0.12), d2=st.floats(0.04, 0.12))
@settings(max_examples=15, deadline=None)
def test_floor_gate_items_fall_with_the_drop(p0: float, d1: float, d2: float) -> None:
    small, large = sorted((d1, d2))
    n_small = floor_need(p0, small, FloorRule("lcb"), "point").items
    n_large = floor_need(p0, large, FloorRule("lcb"), "point").items
    assert n_small is not None and n_large is not None and n_large <= n_small


def test_floor_need_says_why_not() -> None:
    assert "below the drop" in str(floor_need(0.01, 0.02, FloorRule("lcb"), "point").reason)
    assert "stays above" in str(floor_need(0.3, 0.02, FloorRule("margin", 0.05), "point").reason)
    assert "strict" in str(floor_need(0.3, 0.05, FloorRule("lcb"), "strict").reason)
    need = floor_need(0.25, 0.05, FloorRule("lcb"), "point")
    assert need.items is not None and need.power is not None and need.false_alarm is not None
    assert need.power >= 0.8 and need.false_alarm <= 0.2


@pytest.mark.parametrize("n", [1, 7, 190, 380, 1000, 13202])
def test_a_perfect_or_a_null_score_has_its_exact_interval_end(n: int) -> None:
    """All right: the Wilson upper end is exactly 1, so a floor of 1.0 is never failed by a
    perfect score (it is undecided, as a floor at the upper end is); none right: the lower
    end is exactly 0."""
    assert wilson_interval(n, n)[1] == 1.0
    assert interval_status(*wilson_interval(n, n), 1.0) == "undecided"
    assert wilson_interval(0, n)[0] == 0.0
    assert interval_status(*wilson_interval(0, n), 0.0) == "pass"
