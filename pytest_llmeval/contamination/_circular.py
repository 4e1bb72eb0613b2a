"""CircularEval (OpenCompass): each multiple-choice item asked in every rotation of its options.

An item with ``n`` options is asked ``n`` times, its options rotated cyclically: rotation
``r`` shows the published option ``(i + r) mod n`` at position ``i`` (rotation 0 is the
published order), the gold index following its option (:func:`permute_options`). An item
counts for CircularEval accuracy only when it is answered right in every rotation, which
removes most lucky guesses and position biases; accuracy in the published order and the
mean over rotations are reported beside it.

As a contamination probe it asks whether the published order is special: an item answered
right in exactly one rotation is answered right in the published one more often than
chance if the model recalls the published item (its answer letter) rather than the
content.

- Without a reference (:attr:`CircularReport.p_value`): the one-sided exact
  (Poisson-binomial) test of that count against chance, where chance for an item is the
  share of the items' published golds at the letter its gold has in its one right
  rotation (:func:`~._letters.rotation_chances`; ``1/n`` when the golds are uniform or
  unknown). It assumes that an item's published order is a draw of its gold letter from
  the benchmark's own letter shares, independent of the item: orders that carry meaning
  (numbers in ascending order, "All of the above" last) break it, so pass only items
  whose option order is arbitrary. Against ``1/n`` a model that always answers one
  letter, which reads nothing, fired on MMLU (its golds are not uniform); against the
  shares it is right in the published rotation exactly as often as chance says.
- With a reference model's report on the same items (:func:`circular_vs_reference`): the
  one-sided exact McNemar test on the "right only in the published order" indicator, paired
  by item id; no assumption about the orders is needed, only that the two models see the
  same items.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from pytest_llmeval.contamination._letters import rotation_chances
from pytest_llmeval.contamination._probes import option_fields, results_by_id, variant_item
from pytest_llmeval.contamination._reference import ReferenceComparison, compare_indicator
from pytest_llmeval.contamination._rewrite import gold_index, option_texts, permute_options
from pytest_llmeval.dataset import Item
from pytest_llmeval.eval import ItemResult, TaskRunner
from pytest_llmeval.model import Backend
from pytest_llmeval.scorer import binomial_upper_tail, wilson_interval


def rotation_orders(n_options: int) -> list[tuple[int, ...]]:
    """The ``n_options`` cyclic rotations of an option list: ``orders[r][i]`` is the
    published index of the option shown at position ``i`` in rotation ``r``
    (``(i + r) mod n``); rotation 0 is the published order."""
    if n_options < 2:
        raise ValueError(f"need at least two options, got {n_options}")
    return [tuple((i + r) % n_options for i in range(n_options)) for r in range(n_options)]


@dataclass(frozen=True)
class CircularItem:
    """One item in every rotation: right or wrong per rotation (index 0 = published order),
    the published index of the option chosen in each (None when none was) and of the gold
    (None when unknown: the chance of the published rotation is then ``1/n``)."""

    item_id: str
    n_options: int
    correct: tuple[bool, ...]
    chosen: tuple[int | None, ...]
    gold: int | None = None

    @property
    def right_rotation(self) -> int | None:
        """The one rotation answered right (None unless exactly one is)."""
        return self.correct.index(True) if self.right_once else None

    @property
    def circular_correct(self) -> bool:
        """Right in every rotation."""
        return all(self.correct)

    @property
    def right_once(self) -> bool:
        """Right in exactly one rotation."""
        return sum(self.correct) == 1

    @property
    def only_published(self) -> bool:
        """Right in the published order and wrong in every other rotation."""
        return self.correct[0] and not any(self.correct[1:])


def poisson_binomial_upper_tail(k: int, probabilities: Sequence[Fraction]) -> float:
    """``P(X >= k)`` for X the number of successes of independent trials with the given
    success probabilities: exactly :func:`binomial_upper_tail` when they are all equal,
    else by dynamic programming over the trials (floats; a tail below the float range
    reads 0)."""
    n = len(probabilities)
    if not 0 <= k <= n + 1:
        raise ValueError(f"need 0 <= k <= n + 1, got k={k}, n={n}")
    if k == 0:
        return 1.0
    if len(set(probabilities)) <= 1:
        return binomial_upper_tail(k, n, probabilities[0]) if n else 0.0
    # dist[j]: P(j successes so far) for j < k; dist[k]: P(at least k).
    dist = [1.0] + [0.0] * k
    for p in probabilities:
        q = float(p)
        reached = dist[k] + dist[k - 1] * q
        for j in range(k - 1, 0, -1):
            dist[j] = dist[j] * (1 - q) + dist[j - 1] * q
        dist[0] *= 1 - q
        dist[k] = reached
    return min(1.0, max(dist[k], 0.0))


@dataclass(frozen=True)
class CircularReport:
    """CircularEval over a task's items.

    Accuracies, each with a Wilson 95% interval over the ``n`` items: in the published
    order, CircularEval (right in every rotation), and the mean over rotations (per item
    the share of its rotations answered right, averaged; its interval takes the item
    count as ``n``, which is conservative since a per-item share in [0, 1] with mean ``p``
    varies at most as much as a 0/1 answer does).

    ``right_once`` / ``right_once_published``: items right in exactly one rotation, and
    those of them where that rotation is the published one; ``p_value`` tests the latter
    against chance under exchangeable option orders (the gold letters' own shares when
    every item's gold is known, else ``1/n``; see the module docstring).
    ``skipped``: items with fewer than two options; ``failed``: items with a rotation the
    backend did not score (an error, a prompt that does not fit), by id with the reason;
    both are left out.
    """

    task: str
    items: tuple[CircularItem, ...]
    skipped: tuple[str, ...] = ()
    failed: tuple[tuple[str, str], ...] = field(default=())

    @property
    def n(self) -> int:
        return len(self.items)

    def _rate(self, successes: float) -> float:
        return successes / self.n if self.n else float("nan")

    @property
    def published_accuracy(self) -> float:
        return self._rate(sum(1 for i in self.items if i.correct[0]))

    @property
    def published_interval(self) -> tuple[float, float]:
        return wilson_interval(sum(1 for i in self.items if i.correct[0]), self.n)

    def _rotation_share(self) -> float:
        return sum(sum(i.correct) / len(i.correct) for i in self.items)

    @property
    def mean_accuracy(self) -> float:
        """Mean over items of the share of their rotations answered right."""
        return self._rate(self._rotation_share())

    @property
    def mean_interval(self) -> tuple[float, float]:
        return wilson_interval(self._rotation_share(), self.n)

    @property
    def circular_accuracy(self) -> float:
        return self._rate(sum(1 for i in self.items if i.circular_correct))

    @property
    def circular_interval(self) -> tuple[float, float]:
        return wilson_interval(sum(1 for i in self.items if i.circular_correct), self.n)

    @property
    def right_once(self) -> int:
        return sum(1 for i in self.items if i.right_once)

    @property
    def right_once_published(self) -> int:
        return sum(1 for i in self.items if i.only_published)

    @property
    def letter_balanced(self) -> bool:
        """Chance is taken from the items' gold letter shares (every gold is known)."""
        return bool(self.items) and all(i.gold is not None for i in self.items)

    def _chances(self) -> list[Fraction]:
        """Per item right once, the chance its one right rotation is the published one."""
        once = [i for i in self.items if i.right_once]
        if not self.letter_balanced:
            return [Fraction(1, i.n_options) for i in once]
        return rotation_chances(
            [(i.n_options, i.gold or 0, i.right_rotation or 0) for i in once],
            [(i.n_options, i.gold or 0) for i in self.items],
        )

    @property
    def expected_published(self) -> float:
        """Of the items right once, how many would have it in the published order by chance
        (the sum of their chances)."""
        return float(sum(self._chances()))

    @property
    def p_value(self) -> float:
        """One-sided exact test: P(at least ``right_once_published`` of the ``right_once``
        items have their one right rotation at the published order | each does with its
        chance, independently). Valid under exchangeable option orders only."""
        return poisson_binomial_upper_tail(self.right_once_published, self._chances())

    def to_dict(self) -> dict[str, Any]:
        return {
            "probe": "circular_eval",
            "task": self.task,
            "n": self.n,
            "published_accuracy": self.published_accuracy,
            "published_interval": list(self.published_interval),
            "mean_accuracy": self.mean_accuracy,
            "mean_interval": list(self.mean_interval),
            "circular_accuracy": self.circular_accuracy,
            "circular_interval": list(self.circular_interval),
            "right_once": self.right_once,
            "right_once_published": self.right_once_published,
            "expected_published": self.expected_published,
            "chance": "gold letter shares" if self.letter_balanced else "1/n",
            "p_value": self.p_value,
            "skipped": list(self.skipped),
            "failed": [list(f) for f in self.failed],
            "items": [
                {
                    "item_id": i.item_id,
                    "n_options": i.n_options,
                    "correct": list(i.correct),
                    "chosen": list(i.chosen),
                    "gold": i.gold,
                    "circular_correct": i.circular_correct,
                    "only_published": i.only_published,
                }
                for i in self.items
            ],
        }


def _problem(result: ItemResult) -> str | None:
    """Why a rotation was not scored: its error, or a prompt that does not fit."""
    if result.error is not None:
        return result.error
    if "context_overflow" in (result.details or {}):
        return "the prompt does not fit the context window"
    return None


def circular_probe(runner: TaskRunner, items: Sequence[Item], backend: Backend) -> CircularReport:
    """Ask each multiple-choice item (the spec's ``contamination.options`` / ``.gold``
    fields) in every cyclic rotation of its options, all rotations in one batched
    :meth:`TaskRunner.run` (variants with ids ``<id>~rot<r>``); see the module docstring."""
    options_field, gold_field = option_fields(runner)
    kept: list[tuple[Item, list[tuple[int, ...]]]] = []
    variants: list[Item] = []
    skipped: list[str] = []
    for item in items:
        n_options = len(option_texts(item.doc, options_field))
        if n_options < 2:
            skipped.append(item.id)
            continue
        orders = rotation_orders(n_options)
        kept.append((item, orders))
        for r, order in enumerate(orders):
            doc = permute_options(item.doc, options_field, gold_field, order)
            variants.append(variant_item(item, doc, f"rot{r}"))
    results = results_by_id(runner.run(variants, backend)) if variants else {}
    scored: list[CircularItem] = []
    failed: list[tuple[str, str]] = []
    for item, orders in kept:
        rotated = [results[f"{item.id}~rot{r}"] for r in range(len(orders))]
        errors = [e for e in map(_problem, rotated) if e is not None]
        if errors:
            failed.append((item.id, errors[0]))
            continue
        scored.append(
            CircularItem(
                item_id=item.id,
                n_options=len(orders),
                correct=tuple(r.correct for r in rotated),
                gold=gold_index(item.doc, gold_field, len(orders)),
                chosen=tuple(
                    order[r.pred] if r.pred is not None else None
                    for order, r in zip(orders, rotated, strict=True)
                ),
            )
        )
    return CircularReport(
        task=runner.spec.name, items=tuple(scored), skipped=tuple(skipped), failed=tuple(failed)
    )


def circular_vs_reference(test: CircularReport, ref: CircularReport) -> ReferenceComparison:
    """The tested model's items right only in the published order against a reference
    model's on the same items (paired by item id), one-sided exact McNemar: ``b`` = items
    right only as published for the tested model and not for the reference, ``c`` = the
    reverse, ``p = P(X >= b | X ~ Binomial(b + c, 1/2))``. Needs no assumption about the
    option orders, since both models see the same ones."""
    if test.task != ref.task:
        raise ValueError(f"reports of different tasks: {test.task!r} and {ref.task!r}")
    return compare_indicator(
        "circular_eval",
        "only_published",
        {i.item_id: i.only_published for i in test.items},
        {i.item_id: i.only_published for i in ref.items},
    )
