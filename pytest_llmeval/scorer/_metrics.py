"""Task-level statistics: a mean score with a 95% confidence interval, and exact tests."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

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
    # At p = 1 (p = 0) the upper (lower) end is exactly 1 (0); in floating point it came out
    # a hair below (above) for some n, and a perfect score "failed" a floor of 1.0.
    low = 0.0 if successes <= 0 else max(0.0, centre - half)
    high = 1.0 if successes >= n else min(1.0, centre + half)
    return (low, high)


def _mean_stderr(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error (sample sd / sqrt(n); NaN below two values) of a non-empty
    list. Sums are exactly rounded (``math.fsum``), so the numbers do not depend on the
    order the items arrived in (xdist workers finish in any order)."""
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, float("nan")
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def accuracy(correct: Sequence[bool | float]) -> Estimate:
    """Mean of per-item scores in [0, 1] with stderr (sample sd / sqrt(n)) and a 95% CI.

    Scores that are all 0 or 1 get the Wilson score interval; fractional scores (TruthfulQA
    MC2's probability mass, F1) get the normal interval ``mean +- 1.96 stderr``, clipped
    to [0, 1] (an n of 1 gives [0, 1]).
    """
    n = len(correct)
    if n == 0:
        return Estimate(n=0, value=float("nan"), stderr=float("nan"), ci_low=0.0, ci_high=1.0)
    scores = [float(c) for c in correct]
    mean, stderr = _mean_stderr(scores)
    if all(c in (0.0, 1.0) for c in scores):
        low, high = wilson_interval(math.fsum(scores), n)
    elif n > 1:
        low, high = max(0.0, mean - Z95 * stderr), min(1.0, mean + Z95 * stderr)
    else:
        low, high = 0.0, 1.0
    return Estimate(n=n, value=mean, stderr=stderr, ci_low=low, ci_high=high)


def paired_difference(a: Sequence[float], b: Sequence[float]) -> Estimate:
    """The mean of ``b[i] - a[i]`` over paired per-item scores, with its standard error and
    the normal 95% interval ``mean +- 1.96 stderr`` (not clipped; NaN bounds below 2 pairs).
    """
    if len(a) != len(b):
        raise ValueError(f"paired scores need equal lengths, got {len(a)} and {len(b)}")
    n = len(a)
    if n == 0:
        nan = float("nan")
        return Estimate(n=0, value=nan, stderr=nan, ci_low=nan, ci_high=nan)
    mean, stderr = _mean_stderr([float(y) - float(x) for x, y in zip(a, b, strict=True)])
    return Estimate(
        n=n, value=mean, stderr=stderr, ci_low=mean - Z95 * stderr, ci_high=mean + Z95 * stderr
    )


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` correct->wrong and ``c`` wrong->correct pairs.

    The binomial test of the discordant pairs at p = 1/2: ``min(1, 2 * P(X <= min(b, c)))``
    with X ~ Binomial(b + c, 1/2); 1.0 when there are no discordant pairs. Computed exactly
    with integers, so it neither underflows nor loses precision for thousands of pairs; a
    p-value below the smallest positive float is returned as that float (never 0).
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    term = 1  # comb(n, 0), then comb(n, i) by the recurrence
    tail = 0
    for i in range(k + 1):
        tail += term
        term = term * (n - i) // (i + 1)
    # 2 * tail / 2**n
    p = Fraction(tail, 1 << (n - 1))
    if p >= 1:
        return 1.0
    return max(float(p), math.ulp(0.0))


def mcnemar_one_sided(b: int, c: int) -> float:
    """One-sided exact McNemar p-value: ``P(X >= b)`` with X ~ Binomial(b + c, 1/2), for
    the alternative that ``b`` (pairs right in the first member and wrong in the second) is
    larger than ``c`` (the reverse). 1.0 without discordant pairs. Computed exactly with
    integers; a p-value below the smallest positive float is returned as that float."""
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0 or b == 0:
        return 1.0
    # P(X >= b) = P(X <= c) at p = 1/2: comb(n, 0) + ... + comb(n, c), by the recurrence.
    term, tail = 1, 0
    for i in range(c + 1):
        tail += term
        term = term * (n - i) // (i + 1)
    return max(float(Fraction(tail, 1 << n)), math.ulp(0.0))


EXACT_SIGNED_RANK_MAX = 50  # above this many non-zero differences: the normal approximation


def signed_rank_upper_tail(differences: Sequence[float]) -> float:
    """One-sided Wilcoxon signed-rank p-value for the alternative that ``differences`` lean
    positive: ``P(W+ >= observed)`` when each difference's sign is a fair coin given its
    absolute value (a distribution symmetric about 0). Zeros are dropped; tied absolute
    values share their mean rank. Exact (over every sign pattern of the ranks) up to
    :data:`EXACT_SIGNED_RANK_MAX` differences, else the normal approximation with the tie
    and continuity corrections. 1.0 without a non-zero difference.

    Unlike the sign test it weighs each item by how far it leans, so a tenth of items
    that lean far (items a model memorised) is not drowned by a mass of items that lean
    a little either way."""
    nonzero = [d for d in differences if d != 0 and not math.isnan(d)]
    n = len(nonzero)
    if n == 0:
        return 1.0
    ordered = sorted(range(n), key=lambda i: abs(nonzero[i]))
    doubled = [0] * n  # twice each rank, so that mean ranks of ties stay integers
    ties: list[int] = []
    i = 0
    while i < n:
        j = i
        while j < n and abs(nonzero[ordered[j]]) == abs(nonzero[ordered[i]]):
            j += 1
        for k in range(i, j):
            doubled[ordered[k]] = i + 1 + j  # (i+1 + j) / 2, doubled
        ties.append(j - i)
        i = j
    observed = sum(r for r, d in zip(doubled, nonzero, strict=True) if d > 0)
    if n <= EXACT_SIGNED_RANK_MAX:
        counts = [0] * (sum(doubled) + 1)  # sign patterns per doubled W+
        counts[0] = 1
        reach = 0
        for r in doubled:
            for total in range(reach, -1, -1):
                if counts[total]:
                    counts[total + r] += counts[total]
            reach += r
        tail = sum(counts[observed:])
        return max(float(Fraction(tail, 1 << n)), math.ulp(0.0))
    mean = n * (n + 1) / 4
    var = n * (n + 1) * (2 * n + 1) / 24 - sum(t**3 - t for t in ties) / 48
    if var <= 0:
        return 1.0
    z = (observed / 2 - mean - 0.5) / math.sqrt(var)
    return min(1.0, max(0.5 * math.erfc(z / math.sqrt(2)), math.ulp(0.0)))


def binomial_upper_tail(k: int, n: int, p: Fraction) -> float:
    """``P(X >= k)`` for X ~ Binomial(n, p) (a one-sided binomial test's p-value): in exact
    rational arithmetic up to a few hundred trials with a small denominator, else summed
    in log space (relative error about 1e-12; a share such as 3,535/13,202 raised to powers
    in the thousands takes seconds exactly, and the validation experiment computes
    hundreds of thousands of these)."""
    if not 0 <= k <= n + 1 or n < 0:
        raise ValueError(f"need 0 <= k <= n + 1, got k={k}, n={n}")
    if not 0 <= p <= 1:
        raise ValueError(f"p must be in [0, 1], got {p}")
    if k > n:
        return 0.0
    if k == 0 or p == 1:
        return 1.0
    if p == 0:
        return 0.0
    if n * p.denominator.bit_length() > 500:
        return _binomial_upper_tail_log(k, n, float(p))
    total = Fraction(0)
    for i in range(k, n + 1):
        total += math.comb(n, i) * p**i * (1 - p) ** (n - i)
    return min(1.0, max(float(total), 0.0))


def _binomial_upper_tail_log(k: int, n: int, p: float) -> float:
    """:func:`binomial_upper_tail` for 0 < p < 1 and 1 <= k <= n, its terms summed relative
    to the largest in log space (no term underflows the sum's own scale)."""
    lp, lq, top = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    logs = [
        top - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
        for i in range(k, n + 1)
    ]
    peak = max(logs)
    tail = math.exp(peak) * math.fsum(math.exp(x - peak) for x in logs)
    return min(1.0, max(tail, 0.0))


def auroc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """Area under the ROC curve of a score separating ``positives`` from ``negatives``: the
    probability that a random positive scores higher than a random negative, ties counting
    one half (the Mann-Whitney U statistic over ``n_pos * n_neg``). NaN without both."""
    if not positives or not negatives:
        return float("nan")
    ranked = sorted([(v, 1) for v in positives] + [(v, 0) for v in negatives])
    rank_sum, i = 0.0, 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        mid_rank = (i + 1 + j) / 2  # ranks i+1 .. j share their mean
        rank_sum += mid_rank * sum(label for _, label in ranked[i:j])
        i = j
    n_pos, n_neg = len(positives), len(negatives)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
