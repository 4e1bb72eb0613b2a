"""Perturbation probes: ask the same items in another form and compare, item by item.

A model that learned a benchmark's items, rather than the skill, does worse when the surface
changes and the task does not: options in another order, other numbers in a word problem.
Each probe runs the canonical items and their rewrites through the same :class:`TaskRunner`
and backend and reports paired statistics: accuracy on both forms, the exact McNemar test
on the discordant pairs, and the items solved only in the canonical form.

- :func:`option_shuffle_probe` (multiple choice): ``k`` orders per item, gold moved;
- :func:`canonical_order_test` (multiple choice): is the published option order more likely
  under the model than shuffled orders? Under no contamination every order is exchangeable,
  so the canonical one is the most likely with probability ``1 / (k + 1)`` (one-sided exact
  binomial test);
- :func:`number_rewrite_probe` (GSM8K-style): new numbers, answers recomputed;
- :func:`entity_rewrite_probe`: other person names and cities, answers unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

from pytest_llmeval._errors import SpecError
from pytest_llmeval.contamination._rewrite import (
    OptionFields,
    gold_index,
    option_texts,
    permute_options,
    rewrite_entities,
    rewrite_numbers,
    shuffled_orders,
)
from pytest_llmeval.dataset import Item
from pytest_llmeval.eval import ItemResult, TaskRunner
from pytest_llmeval.model import Backend, LoglikelihoodRequest
from pytest_llmeval.scorer import binomial_upper_tail, mcnemar_exact


@dataclass(frozen=True)
class PairedItem:
    """One item in its canonical form and its rewrites."""

    item_id: str
    canonical_correct: bool
    rewritten_correct: tuple[bool, ...]
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def only_canonical(self) -> bool:
        """Right as published, wrong in every rewrite."""
        return self.canonical_correct and not any(self.rewritten_correct)


@dataclass(frozen=True)
class PairedReport:
    """A probe's paired comparison over the items it could rewrite.

    ``b`` / ``c``: items right canonically and wrong in the first rewrite, and the reverse
    (the discordant pairs of McNemar's test); ``p_value`` is its exact two-sided p-value.
    ``skipped`` lists the items the probe could not rewrite.
    """

    probe: str
    task: str
    seed: int
    items: tuple[PairedItem, ...]
    skipped: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        return len(self.items)

    @property
    def canonical_accuracy(self) -> float:
        return _mean([float(i.canonical_correct) for i in self.items])

    @property
    def rewritten_accuracy(self) -> float:
        """Mean over items of the share of their rewrites answered right."""
        return _mean(
            [
                _mean([float(x) for x in i.rewritten_correct])
                for i in self.items
                if i.rewritten_correct
            ]
        )

    @property
    def drop(self) -> float:
        return self.canonical_accuracy - self.rewritten_accuracy

    @property
    def b(self) -> int:
        return sum(1 for i in self.items if i.canonical_correct and not i.rewritten_correct[0])

    @property
    def c(self) -> int:
        return sum(1 for i in self.items if not i.canonical_correct and i.rewritten_correct[0])

    @property
    def p_value(self) -> float:
        return mcnemar_exact(self.b, self.c)

    @property
    def only_canonical(self) -> float:
        """Share of items right only in their canonical form."""
        return _mean([float(i.only_canonical) for i in self.items])

    def to_dict(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "task": self.task,
            "seed": self.seed,
            "n": self.n,
            "canonical_accuracy": self.canonical_accuracy,
            "rewritten_accuracy": self.rewritten_accuracy,
            "drop": self.drop,
            "mcnemar_b": self.b,
            "mcnemar_c": self.c,
            "p_value": self.p_value,
            "only_canonical": self.only_canonical,
            "skipped": list(self.skipped),
            "items": [asdict(i) for i in self.items],
        }


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _probe_field(runner: TaskRunner, name: str) -> str:
    value = getattr(runner.spec.probes, name)
    if isinstance(value, tuple):
        return ",".join(value)
    if value is None:
        raise SpecError(
            runner.spec.source,
            f"contamination.{name}",
            "is required by this probe (the document field it rewrites)",
        )
    return str(value)


def option_fields(runner: TaskRunner) -> tuple[OptionFields, str]:
    """The spec's option field(s) and gold field, or a SpecError naming the missing one."""
    _probe_field(runner, "options")
    gold = _probe_field(runner, "gold")
    options = runner.spec.probes.options
    assert options is not None
    return options, gold


def variant_item(item: Item, doc: dict[str, Any], tag: str) -> Item:
    """A rewritten copy of ``item`` with document ``doc``, its id tagged ``ID~TAG``."""
    return Item(id=f"{item.id}~{tag}", index=item.index, doc=doc, subset=item.subset)


# --------------------------------------------------------------------------- options


def option_shuffle_probe(
    runner: TaskRunner, items: Sequence[Item], backend: Backend, *, k: int = 1, seed: int = 1234
) -> PairedReport:
    """Ask each multiple-choice item with its options in ``k`` other orders (the gold option
    always moved). An item is consistent when the model picks the same option text in every
    order; its detail records the orders and the chosen original option per order."""
    options_field, gold_field = option_fields(runner)
    canonical = runner.run(items, backend)
    variants: list[Item] = []
    orders: dict[str, list[tuple[int, ...]]] = {}
    for item in items:
        orders[item.id] = shuffled_orders(
            item.doc, options_field, gold_field, k, seed=seed, item_id=item.id
        )
        for j, order in enumerate(orders[item.id]):
            doc = permute_options(item.doc, options_field, gold_field, order)
            variants.append(variant_item(item, doc, f"order{j}"))
    permuted = results_by_id(runner.run(variants, backend))
    paired = []
    for item, result in zip(items, canonical, strict=True):
        chosen = [result.pred]
        correct = []
        for j, order in enumerate(orders[item.id]):
            r = permuted[f"{item.id}~order{j}"]
            correct.append(r.correct)
            chosen.append(order[r.pred] if r.pred is not None else None)
        paired.append(
            PairedItem(
                item_id=item.id,
                canonical_correct=result.correct,
                rewritten_correct=tuple(correct),
                detail={
                    "gold": gold_index(
                        item.doc, gold_field, len(option_texts(item.doc, options_field))
                    ),
                    "orders": [list(o) for o in orders[item.id]],
                    "chosen_original_option": chosen,
                    "consistent": len(set(chosen)) == 1,
                },
            )
        )
    return PairedReport("option_shuffle", runner.spec.name, seed, tuple(paired))


def results_by_id(results: Sequence[ItemResult]) -> dict[str, ItemResult]:
    """The results of a run keyed by item id."""
    return {r.item_id: r for r in results}


@dataclass(frozen=True)
class OrderTestReport:
    """The canonical-order likelihood test: per item, the log-likelihood of the question
    with its options in the published order and in ``k`` shuffled orders."""

    task: str
    seed: int
    k: int
    canonical_logprobs: tuple[float, ...]
    shuffled_logprobs: tuple[tuple[float, ...], ...]
    item_ids: tuple[str, ...]

    @property
    def n(self) -> int:
        return len(self.item_ids)

    @property
    def canonical_first(self) -> int:
        """Items whose canonical order is strictly the most likely."""
        return sum(
            1
            for c, s in zip(self.canonical_logprobs, self.shuffled_logprobs, strict=True)
            if all(c > x for x in s)
        )

    @property
    def p_value(self) -> float:
        """One-sided: P(at least this many canonical-first items | exchangeable orders)."""
        return binomial_upper_tail(self.canonical_first, self.n, Fraction(1, self.k + 1))

    @property
    def mean_margin(self) -> float:
        """Mean over items of canonical log-likelihood minus the mean shuffled one (nats)."""
        return _mean(
            [
                c - _mean(list(s))
                for c, s in zip(self.canonical_logprobs, self.shuffled_logprobs, strict=True)
            ]
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "probe": "canonical_order",
            "task": self.task,
            "seed": self.seed,
            "k": self.k,
            "n": self.n,
            "canonical_first": self.canonical_first,
            "expected_by_chance": self.n / (self.k + 1),
            "p_value": self.p_value,
            "mean_margin_nats": self.mean_margin,
            "items": [
                {"item_id": i, "canonical": c, "shuffled": list(s)}
                for i, c, s in zip(
                    self.item_ids, self.canonical_logprobs, self.shuffled_logprobs, strict=True
                )
            ],
        }


def canonical_order_test(
    runner: TaskRunner, items: Sequence[Item], backend: Backend, *, k: int = 3, seed: int = 1234
) -> OrderTestReport:
    """Score the question text (the item's own template, options included) in its canonical
    option order and in ``k`` other orders, each as a continuation of the task's description
    and few-shot block; see the module docstring for the test."""
    options_field, gold_field = option_fields(runner)
    requests: list[LoglikelihoodRequest] = []
    counts = []
    for item in items:
        prepared = runner.prepare(item)
        context = prepared.prompt[: prepared.shared_prefix]  # up to the question
        # Any orders but the published one do; the gold-moving ones are distinct and seeded.
        shuffles = shuffled_orders(
            item.doc, options_field, gold_field, k, seed=seed, item_id=f"{item.id}#order-test"
        )
        texts = [prepared.question]
        for order in shuffles:
            doc = permute_options(item.doc, options_field, gold_field, order)
            texts.append(runner.prepare(variant_item(item, doc, "order")).question)
        requests.extend(LoglikelihoodRequest(context=context, continuation=t) for t in texts)
        counts.append(len(texts))
    results = backend.loglikelihood(requests)
    canonical, shuffled, pos = [], [], 0
    for n in counts:
        lls = [r.logprob for r in results[pos : pos + n]]
        pos += n
        canonical.append(lls[0])
        shuffled.append(tuple(lls[1:]))
    return OrderTestReport(
        task=runner.spec.name,
        seed=seed,
        k=k,
        canonical_logprobs=tuple(canonical),
        shuffled_logprobs=tuple(shuffled),
        item_ids=tuple(i.id for i in items),
    )


# --------------------------------------------------------------------------- numbers


def number_rewrite_probe(
    runner: TaskRunner, items: Sequence[Item], backend: Backend, *, seed: int = 1234
) -> PairedReport:
    """Ask each GSM8K-style item with new numbers (answer recomputed from its annotated
    calculations); items without a valid rewrite are skipped and listed."""
    question_field = _probe_field(runner, "question")
    solution_field = _probe_field(runner, "solution")
    kept: list[Item] = []
    variants: list[Item] = []
    rewrites = {}
    skipped = []
    for item in items:
        rewrite = rewrite_numbers(
            str(item.doc[question_field]), str(item.doc[solution_field]), seed=seed, item_id=item.id
        )
        if rewrite is None:
            skipped.append(item.id)
            continue
        kept.append(item)
        rewrites[item.id] = rewrite
        doc = {**item.doc, question_field: rewrite.question, solution_field: rewrite.solution}
        variants.append(variant_item(item, doc, "numbers"))
    canonical = runner.run(kept, backend) if kept else []
    rewritten = results_by_id(runner.run(variants, backend)) if variants else {}
    paired = []
    for item, result in zip(kept, canonical, strict=True):
        r = rewritten[f"{item.id}~numbers"]
        rw = rewrites[item.id]
        paired.append(
            PairedItem(
                item_id=item.id,
                canonical_correct=result.correct,
                rewritten_correct=(r.correct,),
                detail={
                    "changes": [list(c) for c in rw.changes],
                    "rewritten_question": rw.question,
                    "rewritten_answer": rw.answer,
                    "canonical_extracted": result.extracted,
                    "rewritten_extracted": r.extracted,
                },
            )
        )
    return PairedReport("number_rewrite", runner.spec.name, seed, tuple(paired), tuple(skipped))


# --------------------------------------------------------------------------- entities


def entity_rewrite_probe(
    runner: TaskRunner, items: Sequence[Item], backend: Backend, *, seed: int = 1234
) -> PairedReport:
    """Ask each item with its person names and cities swapped (the ``question`` field of the
    spec's ``contamination:`` block; the answer is unchanged); items that name none are
    skipped and listed."""
    question_field = _probe_field(runner, "question")
    kept, variants, skipped = [], [], []
    changes: dict[str, tuple[tuple[str, str], ...]] = {}
    for item in items:
        rewrite = rewrite_entities(str(item.doc[question_field]), seed=seed, item_id=item.id)
        if rewrite is None:
            skipped.append(item.id)
            continue
        kept.append(item)
        changes[item.id] = rewrite.changes
        variants.append(variant_item(item, {**item.doc, question_field: rewrite.text}, "entities"))
    canonical = runner.run(kept, backend) if kept else []
    rewritten = results_by_id(runner.run(variants, backend)) if variants else {}
    paired = [
        PairedItem(
            item_id=item.id,
            canonical_correct=result.correct,
            rewritten_correct=(rewritten[f"{item.id}~entities"].correct,),
            detail={"changes": [list(c) for c in changes[item.id]]},
        )
        for item, result in zip(kept, canonical, strict=True)
    ]
    return PairedReport("entity_rewrite", runner.spec.name, seed, tuple(paired), tuple(skipped))
