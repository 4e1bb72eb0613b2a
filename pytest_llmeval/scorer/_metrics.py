"""Task-level statistics: accuracy with a 95% confidence interval."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Estimate:
    """A proportion with its standard error and 95% Wilson score interval."""

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
    """Mean of per-item scores in [0, 1] with stderr (sample sd / sqrt(n)) and a Wilson CI."""
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
    low, high = wilson_interval(total, n)
    return Estimate(n=n, value=mean, stderr=stderr, ci_low=low, ci_high=high)
