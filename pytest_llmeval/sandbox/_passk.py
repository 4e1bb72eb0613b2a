"""The unbiased pass@k estimator (Chen et al. 2021, "Evaluating Large Language Models
Trained on Code")."""

from __future__ import annotations


def pass_at_k(n: int, c: int, k: int) -> float:
    """The probability that at least one of ``k`` samples, drawn without replacement from
    ``n`` samples of which ``c`` are correct, is correct: ``1 - C(n-c, k) / C(n, k)``.

    Computed as ``1 - prod(1 - k/i for i in n-c+1..n)``, which needs no big binomials.
    Requires ``1 <= k <= n`` and ``0 <= c <= n`` (``ValueError`` otherwise).
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an integer, not {value!r}")
    if n < 1:
        raise ValueError(f"n must be at least 1, not {n}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and n={n}, not {k}")
    if not 0 <= c <= n:
        raise ValueError(f"c must be between 0 and n={n}, not {c}")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss
