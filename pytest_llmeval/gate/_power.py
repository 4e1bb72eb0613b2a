"""Power and sample size of the two gates, computed exactly (plain Python, no SciPy).

- The binomial: an item is right with probability ``p``; the number right of ``n`` items is
  Binomial(n, p). Tail probabilities are summed term by term from the log-probability of
  the first term (``math.lgamma``), so they neither underflow for thousands of items nor
  lose the small tails that critical values depend on.
- The exact one-sided binomial test of ``p0`` against a lower ``p1``: its critical count,
  power and sample size (the floor gate's textbook counterpart).
- The exact McNemar test, as ``mcnemar_exact`` computes it (two-sided, p < alpha): its
  power for ``n`` paired items with a share ``p_regress`` of items right in the baseline and
  wrong now and ``p_improve`` the other way round. Conditional on ``m`` discordant items the
  number of improvements is Binomial(m, p_improve / (p_regress + p_improve)); the
  unconditional power averages that over ``m ~ Binomial(n, p_regress + p_improve)`` (SAS
  PROC POWER's DIST=EXACT_COND, pwrss's ``power.exact.mcnemar``). Connor's (1987) normal
  approximation is given beside it.

Powers of exact tests are saw-toothed in ``n`` (the critical count moves in whole steps);
``sample_size`` therefore returns the smallest ``n`` from which on the power stays at or
above the target (checked over a window beyond the first ``n`` that reaches it), unless
asked for the first such ``n``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist

_STD_NORMAL = NormalDist()
# Terms smaller than this share of the running sum end a tail sum: below double precision.
_NEGLIGIBLE = 1e-18
MAX_ITEMS = 200_000


def z_quantile(q: float) -> float:
    """The standard normal quantile (``statistics.NormalDist().inv_cdf``)."""
    return _STD_NORMAL.inv_cdf(q)


def _check_p(p: float) -> None:
    if not 0.0 <= p <= 1.0 or math.isnan(p):
        raise ValueError(f"a probability must be in [0, 1], got {p}")


def _log_pmf(k: int, n: int, p: float) -> float:
    """log P(X = k) for X ~ Binomial(n, p) with 0 < p < 1 and 0 <= k <= n."""
    return (
        math.lgamma(n + 1)
        - math.lgamma(k + 1)
        - math.lgamma(n - k + 1)
        + k * math.log(p)
        + (n - k) * math.log1p(-p)
    )


def binom_pmf(k: int, n: int, p: float) -> float:
    """P(X = k) for X ~ Binomial(n, p)."""
    _check_p(p)
    if k < 0 or k > n:
        return 0.0
    if p == 0.0:
        return 1.0 if k == 0 else 0.0
    if p == 1.0:
        return 1.0 if k == n else 0.0
    return math.exp(_log_pmf(k, n, p))


def _tail_down(k: int, n: int, p: float) -> float:
    """sum_{i <= k} P(X = i), summed from i = k downwards (k below the mode: terms shrink)."""
    term = math.exp(_log_pmf(k, n, p))
    total = term
    ratio = (1.0 - p) / p
    i = k
    while i > 0 and term > _NEGLIGIBLE * total:
        term *= i / (n - i + 1) * ratio
        total += term
        i -= 1
    return total


def _tail_up(k: int, n: int, p: float) -> float:
    """sum_{i >= k} P(X = i), summed from i = k upwards (k above the mode: terms shrink)."""
    term = math.exp(_log_pmf(k, n, p))
    total = term
    ratio = p / (1.0 - p)
    i = k
    while i < n and term > _NEGLIGIBLE * total:
        term *= (n - i) / (i + 1) * ratio
        total += term
        i += 1
    return total


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p); small lower tails keep their relative precision."""
    _check_p(p)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if p == 0.0:
        return 1.0
    if p == 1.0:
        return 0.0
    if k <= n * p:
        return min(1.0, _tail_down(k, n, p))
    return max(0.0, 1.0 - _tail_up(k + 1, n, p))


def binom_sf(k: int, n: int, p: float) -> float:
    """P(X > k) for X ~ Binomial(n, p); small upper tails keep their relative precision."""
    _check_p(p)
    if k < 0:
        return 1.0
    if k >= n:
        return 0.0
    if p == 0.0:
        return 0.0
    if p == 1.0:
        return 1.0
    if k + 1 >= n * p:
        return min(1.0, _tail_up(k + 1, n, p))
    return max(0.0, 1.0 - _tail_down(k, n, p))


# ---------------------------------------------------------------------------- one sample


def binomial_critical_lower(n: int, p0: float, alpha: float) -> int:
    """The largest count ``c`` with P(X <= c | n, p0) <= alpha (-1 when even 0 is too likely):
    the exact one-sided test of ``p = p0`` against ``p < p0`` rejects when X <= c."""
    _check_p(p0)
    lo, hi = -1, n  # cdf(lo) = 0 <= alpha; find the last c with cdf(c) <= alpha
    if binom_cdf(n, n, p0) <= alpha:
        return n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if binom_cdf(mid, n, p0) <= alpha:
            lo = mid
        else:
            hi = mid
    return lo


def binomial_power_lower(n: int, p0: float, p1: float, alpha: float) -> float:
    """Power of the exact one-sided binomial test of ``p0`` (rejecting when X <= c) when the
    true proportion is ``p1``."""
    return binom_cdf(binomial_critical_lower(n, p0, alpha), n, p1)


def binomial_size(alpha_one_sided: float, power: float, p0: float, p1: float) -> float:
    """The normal-approximation sample size of the one-sided one-sample test of ``p0`` against
    ``p1`` (not rounded): ((z_a sqrt(p0 q0) + z_b sqrt(p1 q1)) / (p0 - p1))^2."""
    _check_p(p0)
    _check_p(p1)
    if p0 == p1:
        return math.inf
    za, zb = z_quantile(1 - alpha_one_sided), z_quantile(power)
    root = za * math.sqrt(p0 * (1 - p0)) + zb * math.sqrt(p1 * (1 - p1))
    return (root / (p0 - p1)) ** 2


# ---------------------------------------------------------------------------- McNemar


class _McNemarCritical:
    """Critical counts of the exact McNemar test, grown as needed: ``k[m]`` is the largest
    number of discordant items in the less frequent direction that is still significant
    among ``m`` discordant items (-1: none is)."""

    def __init__(self, alpha: float, two_sided: bool) -> None:
        self.alpha = alpha
        self.factor = 2.0 if two_sided else 1.0
        self.k = [-1]  # m = 0: nothing is significant

    def significant(self, k: int, m: int) -> bool:
        # mcnemar_exact: p = min(1, 2 * P(X <= k)) with X ~ Binomial(m, 1/2); p < alpha.
        return k >= 0 and self.factor * binom_cdf(k, m, 0.5) < self.alpha

    def upto(self, m: int) -> list[int]:
        while len(self.k) <= m:
            size = len(self.k)
            k = self.k[-1]
            # one more discordant item moves the critical count up by at most one
            if self.significant(k + 1, size):
                k += 1
            self.k.append(k)
        return self.k


_CRITICAL: dict[tuple[float, bool], _McNemarCritical] = {}


def mcnemar_critical(m: int, alpha: float = 0.05, *, two_sided: bool = True) -> int:
    """The largest ``k`` such that ``k`` items one way and ``m - k`` the other are significant
    for ``mcnemar_exact`` at ``alpha`` (p < alpha); -1 when no split of ``m`` is."""
    if m < 0:
        raise ValueError(f"m must be >= 0, got {m}")
    table = _CRITICAL.setdefault((alpha, two_sided), _McNemarCritical(alpha, two_sided))
    return table.upto(m)[m]


def mcnemar_power_conditional(
    m: int, p_regress: float, p_improve: float, alpha: float = 0.05, *, two_sided: bool = True
) -> float:
    """Power of the exact McNemar test to find a drop, given ``m`` discordant items: the
    probability that the improvements are few enough, Binomial(m, p_improve / (p_regress +
    p_improve)) <= the critical count."""
    psi = p_regress + p_improve
    if m == 0 or psi <= 0:
        return 0.0
    k = mcnemar_critical(m, alpha, two_sided=two_sided)
    return binom_cdf(k, m, p_improve / psi)


class _McNemarPower:
    """The unconditional power of the exact McNemar test for one pair of discordant shares,
    with the conditional power of each number of discordant items kept (it does not depend
    on ``n``), so that a scan over ``n`` computes each once."""

    def __init__(
        self,
        p_regress: float,
        p_improve: float,
        alpha: float,
        two_sided: bool,
        either_direction: bool,
    ) -> None:
        _check_p(p_regress)
        _check_p(p_improve)
        psi = p_regress + p_improve
        if psi > 1 + 1e-12:
            raise ValueError(f"p_regress + p_improve must be <= 1, got {psi}")
        self.psi = min(psi, 1.0)
        self.share_improve = p_improve / psi if psi > 0 else 0.0
        self.either = either_direction
        self.critical = _CRITICAL.setdefault((alpha, two_sided), _McNemarCritical(alpha, two_sided))
        self.memo: dict[int, float] = {}

    def conditional(self, m: int) -> float:
        power = self.memo.get(m)
        if power is None:
            k = self.critical.upto(m)[m]
            power = 0.0
            if k >= 0:
                power = binom_cdf(k, m, self.share_improve)
                if self.either:
                    power += binom_cdf(k, m, 1.0 - self.share_improve)
            self.memo[m] = power
        return power

    def power(self, n: int) -> float:
        psi = self.psi
        if n <= 0 or psi <= 0:
            return 0.0
        if psi >= 1.0:
            return self.conditional(n)
        # Sum over m outwards from the mode until the weights are negligible.
        mode = min(n, int((n + 1) * psi))
        at_mode = binom_pmf(mode, n, psi)
        total = at_mode * self.conditional(mode)
        odds = psi / (1.0 - psi)
        weight, m = at_mode, mode  # downwards: pmf(m - 1) = pmf(m) * m / (n - m + 1) / odds
        while m > 0 and weight >= _NEGLIGIBLE:
            weight *= m / (n - m + 1) / odds
            m -= 1
            total += weight * self.conditional(m)
        weight, m = at_mode, mode  # upwards: pmf(m + 1) = pmf(m) * (n - m) / (m + 1) * odds
        while m < n and weight >= _NEGLIGIBLE:
            weight *= (n - m) / (m + 1) * odds
            m += 1
            total += weight * self.conditional(m)
        return min(1.0, total)


def mcnemar_power(
    n: int,
    p_regress: float,
    p_improve: float,
    alpha: float = 0.05,
    *,
    two_sided: bool = True,
    either_direction: bool = False,
) -> float:
    """Unconditional power of the exact McNemar test on ``n`` paired items (the gate's
    ``sig`` rule: a drop that ``mcnemar_exact`` finds significant at ``alpha``).

    ``p_regress``: the share of items right in the baseline and wrong now; ``p_improve``:
    wrong in the baseline and right now. The number of discordant items is
    Binomial(n, p_regress + p_improve); given ``m`` of them, the test rejects when the
    improvements are at most the critical count. ``either_direction`` also counts
    significant results in the other direction (as two-sided power is often quoted).
    """
    return _McNemarPower(p_regress, p_improve, alpha, two_sided, either_direction).power(n)


def connor_size(p_regress: float, p_improve: float, alpha: float, power: float) -> float:
    """Connor's (1987) normal-approximation number of pairs for McNemar's test (not rounded):
    ((z_{1-a/2} sqrt(psi) + z_{1-b} sqrt(psi - delta^2)) / delta)^2, with psi the
    discordant share and delta the difference of the two discordant shares."""
    psi = p_regress + p_improve
    delta = p_regress - p_improve
    if delta == 0:
        return math.inf
    za, zb = z_quantile(1 - alpha / 2), z_quantile(power)
    return ((za * math.sqrt(psi) + zb * math.sqrt(max(0.0, psi - delta * delta))) / delta) ** 2


# ---------------------------------------------------------------------------- sample size


def sample_size(
    power_at: Callable[[int], float],
    target: float,
    *,
    start: int = 1,
    max_n: int = MAX_ITEMS,
    stable: bool = True,
) -> int | None:
    """The number of items at which ``power_at`` reaches ``target``; None beyond ``max_n``.

    With ``stable`` (the default): the smallest ``n`` from which on the power stays at or
    above the target, checked over a window of half as many items again (at least 50)
    beyond it. The crossing is found by doubling from ``start`` and bisection, then every
    size in the window is checked and the answer moved past the last one short of the
    target. Without ``stable``: the first ``n >= start`` that reaches the target (a scan).
    """
    n = max(1, min(start, max_n))
    while n > 1 and power_at(n) >= target:  # the start was not below the answer
        n //= 2
    if not stable:
        while n <= max_n and power_at(n) < target:
            n += 1
        return n if n <= max_n else None
    lo, hi = n, n
    while power_at(hi) < target:  # double until the target is reached
        if hi >= max_n:
            return None
        lo, hi = hi, min(max_n, 2 * hi)
    if power_at(lo) >= target:  # only when lo == 1
        return lo
    while hi - lo > 1:  # power_at(lo) < target <= power_at(hi)
        mid = (lo + hi) // 2
        if power_at(mid) >= target:
            hi = mid
        else:
            lo = mid
    answer = hi
    m = hi + 1
    while m <= min(max_n, answer + max(50, answer // 2)):
        if power_at(m) < target:
            answer = m + 1
        m += 1
    return answer if answer <= max_n else None


def _start(approx: float) -> int:
    """Where a scan may begin: well below a normal approximation of the answer."""
    if not math.isfinite(approx):
        return 1
    return max(1, int(approx * 0.5))


def binomial_sample_size(
    p0: float,
    p1: float,
    alpha: float,
    power: float,
    *,
    stable: bool = True,
    max_n: int = MAX_ITEMS,
) -> int | None:
    """Items for the exact one-sided binomial test of ``p0`` to reject ``p1 < p0`` with
    ``power`` at level ``alpha`` (None when ``p1 >= p0`` or more than ``max_n``)."""
    if not p1 < p0:
        return None
    approx = binomial_size(alpha, power, p0, p1)
    return sample_size(
        lambda n: binomial_power_lower(n, p0, p1, alpha),
        power,
        start=_start(approx),
        max_n=max_n,
        stable=stable,
    )


def mcnemar_sample_size(
    p_regress: float,
    p_improve: float,
    alpha: float,
    power: float,
    *,
    two_sided: bool = True,
    either_direction: bool = False,
    stable: bool = True,
    max_n: int = MAX_ITEMS,
) -> int | None:
    """Paired items for the exact McNemar test to find a drop with ``power`` (None when there
    is no drop, ``p_regress <= p_improve``, or more than ``max_n`` items)."""
    if not p_regress > p_improve:
        return None
    approx = connor_size(p_regress, p_improve, alpha if two_sided else 2 * alpha, power)
    gate = _McNemarPower(p_regress, p_improve, alpha, two_sided, either_direction)
    return sample_size(
        gate.power,
        power,
        start=_start(approx),
        max_n=max_n,
        stable=stable,
    )
