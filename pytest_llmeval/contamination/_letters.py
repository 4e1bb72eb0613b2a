"""Gold letters in the benchmark's own shares: the null of option shuffling and CircularEval.

Clean models have letter habits (SmolLM2-135M-Instruct, zero-shot, answers "A" on 98.7% of
MMLU items), and benchmarks do not put their golds at every letter equally often (MMLU's
test split: A 23.0%, B 24.6%, C 25.6%, D 26.8%). A probe that compares the published gold
letter with a uniformly moved one then measures the habit against the benchmark's skew: a
model that always answers D, which reads nothing, fires option shuffling on half of all
5,000-item MMLU draws. Both probes therefore weigh every letter as the benchmark does:

- **option shuffling** (:func:`letter_balanced`): an item counts for the test only when a
  seeded coin keeps it, with probability ``share(moved letter) / max share`` (the shares of
  the probed items' published golds, per option count). The kept items' (published,
  moved) gold letters are then exchangeable: a pair ``(a, b)`` is kept as often as
  ``(b, a)``, so any habit that depends on the letter alone adds as many "right only as
  published" items as "right only moved", whatever the benchmark's skew.
- **CircularEval** (:func:`rotation_chances`): of the items right in exactly one rotation,
  the published one is that rotation with probability ``share(letter the gold has in
  it)`` rather than ``1/n``: a published order whose gold letter is drawn from the
  benchmark's shares (and not from the item) puts its gold at that letter that often.

The shares are those of the items under test (their published golds), so for a model that
always answers one letter both tests are exact for every sample: nothing is compared with
a share the sample does not have. With equal shares both reduce to the uniform tests
(every item kept; ``1/n``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from fractions import Fraction
from functools import lru_cache

from pytest_llmeval.contamination._rewrite import item_rng

Shares = dict[int, dict[int, Fraction]]


def letter_shares(golds: Iterable[tuple[int, int]]) -> Shares:
    """``(n_options, gold index)`` of each item -> per option count, each gold position's
    share of those items (positions never gold are absent: share 0)."""
    counts: dict[int, Counter[int]] = {}
    for n_options, gold in golds:
        if not 0 <= gold < n_options:
            raise ValueError(f"gold index {gold} out of range for {n_options} options")
        counts.setdefault(n_options, Counter())[gold] += 1
    return {
        n: {g: Fraction(c, sum(per.values())) for g, c in sorted(per.items())}
        for n, per in sorted(counts.items())
    }


def share(shares: Shares, n_options: int, position: int) -> Fraction:
    """A gold position's share among the items with ``n_options`` options (0 when none)."""
    return shares.get(n_options, {}).get(position, Fraction(0))


def letter_balanced(items: Sequence[tuple[str, int, int, int]], *, seed: int) -> list[bool]:
    """Which option-shuffled items count: ``(item id, n_options, published gold, moved
    gold)`` of each -> kept or not. An item is kept when its seeded uniform draw (seed,
    item id) falls below ``share(moved gold) / max share`` of its option count, the shares
    being those of these items' published golds (see the module docstring)."""
    shares = letter_shares((n, gold) for _, n, gold, _ in items)
    keep = {
        (n, position): float(p / max(per.values()))
        for n, per in shares.items()
        for position, p in per.items()
    }
    return [_coin(seed, i) < keep.get((n, moved), 0.0) for i, n, _, moved in items]


@lru_cache(maxsize=1 << 16)
def _coin(seed: int, item_id: str) -> float:
    """An item's seeded uniform draw for :func:`letter_balanced` (cached: the validation
    experiment scores the same items in thousands of draws)."""
    return item_rng(seed, item_id, "letter-balance").random()


def rotation_chances(
    items: Sequence[tuple[int, int, int]], golds: Iterable[tuple[int, int]]
) -> list[Fraction]:
    """For each item right in exactly one rotation, ``(n_options, published gold, that
    rotation)``: the chance that the published order is that rotation when published gold
    letters follow the shares of ``golds`` (``(n_options, gold)`` of every item under
    test). Rotation ``r`` puts the gold at position ``(gold - r) mod n``."""
    shares = letter_shares(golds)
    return [share(shares, n, (gold - r) % n) for n, gold, r in items]
