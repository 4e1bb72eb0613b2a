"""Membership scores: how familiar an item's text is to the model.

- **Min-K%** (Shi et al., 2023): the mean log-probability of the ``k`` fraction of the
  text's tokens that the model finds least likely. Text seen in training has fewer very
  unlikely tokens, so a higher score suggests membership.
- **Min-K%++** (Zhang et al., 2024): the same over each token's log-probability
  standardised by the mean and standard deviation of log-probabilities under the model's
  next-token distribution at that position, which removes much of the dependence on how
  predictable the text is in general.

Absolute values mean little across texts; they are compared with a reference set of text
the model cannot have seen in that form: :func:`membership_probe` scores each item as
published and in its rewritten form (number rewrites, or shuffled options) and reports the
AUROC of telling them apart (0.5: no difference; towards 1: the published texts are more
familiar).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pytest_llmeval._errors import ModelError
from pytest_llmeval.contamination._rewrite import (
    permute_options,
    rewrite_numbers,
    shuffled_orders,
)
from pytest_llmeval.dataset import Item
from pytest_llmeval.eval import TaskRunner
from pytest_llmeval.model import Backend, LoglikelihoodRequest
from pytest_llmeval.scorer import auroc


def min_k(values: Sequence[float], fraction: float) -> float:
    """Mean of the ``ceil(fraction * n)`` smallest values (NaN for no values)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if not values:
        return float("nan")
    count = max(1, math.ceil(fraction * len(values)))
    lowest = sorted(values)[:count]
    return sum(lowest) / count


@dataclass(frozen=True)
class MembershipScore:
    item_id: str
    n_tokens: int
    min_k: float
    min_k_plus_plus: float
    mean_logprob: float  # the plain average token log-probability (the baseline)


def membership_scores(
    texts: Sequence[tuple[str, str]], backend: Backend, *, fraction: float = 0.2
) -> list[MembershipScore]:
    """Min-K% and Min-K%++ of each ``(item_id, text)``, the text scored from the start."""
    requests = [LoglikelihoodRequest("", text, token_detail=True) for _, text in texts]
    results = backend.loglikelihood(requests)
    for (item_id, _), r in zip(texts, results, strict=True):
        if r.token_logprobs and len(r.token_zscores) != len(r.token_logprobs):
            # Min-K%++ would silently be NaN: say why instead.
            backend_name = backend.info().get("backend", type(backend).__name__)
            raise ModelError(
                f"membership scores of {item_id}: the {backend_name} backend gives per-token "
                "log-probabilities but no z-scores, which Min-K%++ needs (they take the "
                "model's full next-token distribution; a completions server returns top-k "
                "log-probabilities only). Run membership probes with --llm-backend=hf."
            )
    return [
        MembershipScore(
            item_id=item_id,
            n_tokens=r.n_tokens,
            min_k=min_k(r.token_logprobs, fraction),
            min_k_plus_plus=min_k(r.token_zscores, fraction),
            mean_logprob=r.logprob / max(1, r.n_tokens),
        )
        for (item_id, _), r in zip(texts, results, strict=True)
    ]


@dataclass(frozen=True)
class MembershipReport:
    """Scores of items as published and of their rewrites, and the AUROC per score."""

    task: str
    fraction: float
    reference: str
    published: tuple[MembershipScore, ...]
    rewritten: tuple[MembershipScore, ...]

    @property
    def auroc_min_k(self) -> float:
        return auroc([s.min_k for s in self.published], [s.min_k for s in self.rewritten])

    @property
    def auroc_min_k_plus_plus(self) -> float:
        return auroc(
            [s.min_k_plus_plus for s in self.published],
            [s.min_k_plus_plus for s in self.rewritten],
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "probe": "membership",
            "task": self.task,
            "fraction": self.fraction,
            "reference": self.reference,
            "n": len(self.published),
            "auroc_min_k": self.auroc_min_k,
            "auroc_min_k_plus_plus": self.auroc_min_k_plus_plus,
            "published": [asdict(s) for s in self.published],
            "rewritten": [asdict(s) for s in self.rewritten],
        }


def item_text(runner: TaskRunner, item: Item) -> str:
    """An item's text as the benchmark publishes it: its question template and its answer."""
    prepared = runner.prepare(item)
    return f"{prepared.question} {prepared.target}".strip()


def membership_probe(
    runner: TaskRunner,
    items: Sequence[Item],
    backend: Backend,
    *,
    fraction: float = 0.2,
    seed: int = 1234,
) -> MembershipReport:
    """Min-K% and Min-K%++ of each item as published and rewritten once (number rewrites
    when the spec names a question and solution, else shuffled options:
    :func:`rewritten_docs`); items without a rewrite are left out of both sets."""
    records = membership_records(
        runner, items, backend, perturbations=1, seed=seed, fraction=fraction
    )
    kept = [r for r in records if r.perturbed]
    return MembershipReport(
        task=runner.spec.name,
        fraction=fraction,
        reference="number_rewrite" if runner.spec.probes.solution else "option_shuffle",
        published=tuple(r.published for r in kept),
        rewritten=tuple(r.perturbed[0] for r in kept),
    )


@dataclass(frozen=True)
class ItemMembership:
    """An item's membership scores as published and for each of its rewrites."""

    item_id: str
    published: MembershipScore
    perturbed: tuple[MembershipScore, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "item_id": self.item_id,
            "published": asdict(self.published),
            "perturbed": [asdict(s) for s in self.perturbed],
        }

    @classmethod
    def from_dict(cls, item_id: str, data: Mapping[str, Any]) -> ItemMembership:
        def score(d: Mapping[str, Any], name: str) -> MembershipScore:
            return MembershipScore(
                item_id=name,
                n_tokens=int(d["n_tokens"]),
                min_k=float(d["min_k"]),
                min_k_plus_plus=float(d["min_k_plus_plus"]),
                mean_logprob=float(d["mean_logprob"]),
            )

        return cls(
            item_id=item_id,
            published=score(data["published"], item_id),
            perturbed=tuple(score(d, f"{item_id}~m{j}") for j, d in enumerate(data["perturbed"])),
        )


def rewrite_kind(runner: TaskRunner) -> str:
    """What :func:`rewritten_docs` changes for this task: ``numbers`` (a question and a
    worked solution) or ``options`` (their order)."""
    probes = runner.spec.probes
    return "numbers" if probes.question and probes.solution else "options"


def rewritten_docs(
    runner: TaskRunner, item: Item, count: int, *, seed: int
) -> list[dict[str, Any]]:
    """Up to ``count`` distinct rewrites of an item that no one published: number rewrites
    (seeds ``seed``, ``seed + 1``, ...) when the spec names a question and a worked
    solution, else gold-moving option orders (seeded by the item id)."""
    probes = runner.spec.probes
    docs: list[dict[str, Any]] = []
    if rewrite_kind(runner) == "numbers":
        assert probes.question and probes.solution
        seen: set[str] = set()
        for j in range(count):
            rw = rewrite_numbers(
                str(item.doc[probes.question]),
                str(item.doc[probes.solution]),
                seed=seed + j,
                item_id=item.id,
            )
            if rw is None or rw.question in seen:
                continue
            seen.add(rw.question)
            docs.append({**item.doc, probes.question: rw.question, probes.solution: rw.solution})
    elif probes.options and probes.gold:
        orders = shuffled_orders(
            item.doc, probes.options, probes.gold, count, seed=seed, item_id=f"{item.id}#membership"
        )
        docs = [permute_options(item.doc, probes.options, probes.gold, o) for o in orders]
    return docs


def membership_records(
    runner: TaskRunner,
    items: Sequence[Item],
    backend: Backend,
    *,
    perturbations: int = 3,
    seed: int = 1234,
    fraction: float = 0.2,
) -> list[ItemMembership]:
    """Min-K%, Min-K%++ and the mean log-probability of every item's text as published and
    of up to ``perturbations`` rewrites of it (:func:`rewritten_docs`)."""
    published = [(i.id, item_text(runner, i)) for i in items]
    variants: list[tuple[int, str, str]] = []
    for n, item in enumerate(items):
        for j, doc in enumerate(rewritten_docs(runner, item, perturbations, seed=seed)):
            variant = Item(id=f"{item.id}~m{j}", index=item.index, doc=doc, subset=item.subset)
            variants.append((n, variant.id, item_text(runner, variant)))
    scored = membership_scores(published, backend, fraction=fraction)
    rewritten = membership_scores([(v, t) for _, v, t in variants], backend, fraction=fraction)
    per_item: list[list[MembershipScore]] = [[] for _ in items]
    for (n, _, _), score in zip(variants, rewritten, strict=True):
        per_item[n].append(score)
    return [
        ItemMembership(item_id=i.id, published=s, perturbed=tuple(p))
        for i, s, p in zip(items, scored, per_item, strict=True)
    ]
