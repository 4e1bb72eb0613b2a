"""Task-level statistics: a mean score with a 95% confidence interval."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Estimate:
    """A mean score with its standard error and 95% interval (Wilson for 0/1 scores)."""

    n: int
    value: float
    stderr: float
    ci_low: float
    ci_high: float


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (well-behaved at 0, 1 and small n)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def accuracy(correct: Sequence[bool | float]) -> Estimate:
    """Mean of per-item scores in [0, 1] with stderr (sample sd / sqrt(n)) and a 95% CI.

    Scores that are all 0 or 1 get the Wilson score interval; fractional scores (TruthfulQA
    MC2's probability mass, F1) get the normal interval ``mean +- 1.96 stderr``, clipped
    to [0, 1] (an n of 1 gives [0, 1]).
    """
    n = len(correct)
    if n == 0:
        return Estimate(n=0, value=float("nan"), stderr=float("nan"), ci_low=0.0, ci_high=1.0)
    total = float(sum(float(c) for c in correct))
    mean = total / n
    if n > 1:
        var = sum((float(c) - mean) ** 2 for c in correct) / (n - 1)
        stderr = math.sqrt(var / n)
    else:
        stderr = float("nan")
    if all(float(c) in (0.0, 1.0) for c in correct):
        low, high = wilson_interval(total, n)
    elif n > 1:
        low, high = max(0.0, mean - Z95 * stderr), min(1.0, mean + Z95 * stderr)
    else:
        low, high = 0.0, 1.0
    return Estimate(n=n, value=mean, stderr=stderr, ci_low=low, ci_high=high)
