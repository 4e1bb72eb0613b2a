"""Verdicts of a score floor that carry their uncertainty, the policies that turn them into
an exit status, and the rules that make a floor from a reference run.

A task's verdict compares the floor with the 95% interval of its score:

- ``pass``: the interval lies at or above the floor (its lower end clears it);
- ``fail``: the interval lies below the floor (its upper end is under it);
- ``undecided``: the floor lies inside the interval; these items cannot tell.

A policy says what fails the run: ``point`` (the score is below the floor: the behaviour
before verdicts had intervals, the default), ``strict`` (anything but ``pass``: the run must
show, at one-sided 2.5%, that the score clears the floor) or ``lenient`` (only ``fail``: the
run must show that the score is below it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from pytest_llmeval.scorer import Z95, wilson_interval

POLICIES = ("point", "strict", "lenient")
POLICY_TEXT = {
    "point": "fail when the score is below the floor",
    "strict": "fail unless the interval's lower end clears the floor",
    "lenient": "fail only when the interval's upper end is below the floor",
}
IntervalStatus = Literal["pass", "fail", "undecided"]


def interval_status(low: float, high: float, floor: float) -> IntervalStatus:
    """``pass`` when ``low >= floor``, ``fail`` when ``high < floor``, else ``undecided``.

    A floor equal to the lower end passes (as a score equal to its floor always did); a
    floor equal to the upper end is undecided.
    """
    if math.isnan(low) or math.isnan(high):
        return "undecided"
    if low >= floor:
        return "pass"
    if high < floor:
        return "fail"
    return "undecided"


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ValueError(f"expected one of {'|'.join(POLICIES)}, got {policy!r}")
    return policy


def policy_fails(policy: str, score: float, low: float, high: float, floor: float) -> bool:
    """Whether a task with this score and interval fails its floor under ``policy``."""
    check_policy(policy)
    if policy == "point":
        return bool(score < floor) or math.isnan(score)
    verdict = interval_status(low, high, floor)
    if policy == "strict":
        return verdict != "pass"
    return verdict == "fail"


def gate_passes(k: int, n: int, floor: float, policy: str, z: float = Z95) -> bool:
    """Whether ``k`` right answers of ``n`` pass a floor under ``policy`` (0/1 scores, the
    Wilson interval the summary shows)."""
    if n <= 0:
        return False
    low, high = wilson_interval(k, n, z)
    return not policy_fails(policy, k / n, low, high, floor)


def pass_threshold(n: int, floor: float, policy: str, z: float = Z95) -> int:
    """The fewest right answers of ``n`` that pass the floor (``n + 1`` when none do): the
    gate fails exactly when fewer than this many items are right."""
    check_policy(policy)
    lo, hi = -1, n + 1  # gate_passes(hi) is taken as true, gate_passes(lo) as false
    if not gate_passes(n, n, floor, policy, z):
        return n + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if gate_passes(mid, n, floor, policy, z):
            hi = mid
        else:
            lo = mid
    return hi


# ---------------------------------------------------------------------------- floor rules

_MARGIN = re.compile(r"margin:(?P<n>\d+(?:\.\d*)?|\.\d+)\s*(?:%|pts?|points?)?")


@dataclass(frozen=True)
class FloorRule:
    """How a floor is made from a reference run's score on a task.

    ``lcb``: the lower end of the reference's 95% interval (the Wilson interval of 0/1
    scores, as recorded in ``metrics_summary.json``): the score the reference run showed the
    model to reach, at one-sided 97.5% confidence. ``margin``: the reference score minus a
    non-inferiority margin, in points.
    """

    kind: Literal["lcb", "margin"]
    margin: float = 0.0  # for "margin": the margin as a proportion

    @property
    def name(self) -> str:
        if self.kind == "lcb":
            return "lcb95"
        return f"margin:{100 * self.margin:g}"

    def describe(self) -> str:
        if self.kind == "lcb":
            return "the lower end of the reference run's 95% interval"
        return f"the reference score minus {100 * self.margin:g} points"

    def floor(self, score: float, ci_low: float) -> float:
        """The floor for a reference score and the lower end of its 95% interval, rounded
        down to 4 decimals (so that the reference itself still clears it)."""
        value = ci_low if self.kind == "lcb" else score - self.margin
        return max(0.0, math.floor(round(value * 10_000, 6)) / 10_000)


def parse_floor_rule(text: str) -> FloorRule:
    """``lcb`` (or ``lcb95``) or ``margin:N`` (N points, may end in ``%`` or ``pt``)."""
    value = re.sub(r"\s*:\s*", ":", text.strip().lower())
    if value in ("lcb", "lcb95"):
        return FloorRule("lcb")
    match = _MARGIN.fullmatch(value)
    if match is None:
        raise ValueError(
            f"expected lcb (the lower end of the reference's 95% interval) or margin:N (the "
            f"reference score minus N points), got {text!r}"
        )
    points = float(match["n"])
    if not points < 100:
        raise ValueError(f"a margin must be below 100 points, got {text!r}")
    return FloorRule("margin", points / 100)
