"""Contamination verdicts that hold on clean models: every test against a null that fits.

A verdict says "this model may have seen these items"; it is only worth printing if it
stays silent on models that did not. Two nulls are used, and a verdict is never given
without one of them:

- **a reference model** (``probe.reference_model``): any local model that is clean for the
  items (the base model before fine-tuning, an older checkpoint, a model of the same
  family). The model under test and the reference answer the same items; a verdict needs
  the model under test to differ from the reference in the direction contamination
  predicts, item by item (one-sided exact McNemar on paired binary outcomes, the sign test
  on paired differences). Whatever the benchmark's own quirks do to a clean model (options
  published in a non-random order, familiar phrasing), they do to the reference too.
- **the item's own rewrites**, where no reference is given: for the canonical-order test
  only items whose options are exchangeable (:func:`exchangeability`: no numbers, no
  options that refer to other options, no fixed grids or ordered scales, no duplicates);
  for membership scores the item as published against the same item rewritten, with a
  threshold read off the rewrites, which no model can have seen in that form.

Item-level flags (:func:`membership_flags`) come with a threshold chosen for a stated
false-positive rate on known-clean controls, the estimated false-positive rate, and a
task-level test on the paired differences; :func:`handling` turns flagged items into an
exclusion list and the scores on all, clean and flagged items, and applies the policy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import lru_cache
from typing import Any

from pytest_llmeval.contamination._circular import CircularReport, circular_vs_reference
from pytest_llmeval.contamination._guessing import GuessingReport, guessing_vs_reference
from pytest_llmeval.contamination._letters import letter_balanced
from pytest_llmeval.contamination._membership import ItemMembership
from pytest_llmeval.contamination._probes import OrderTestReport, PairedReport
from pytest_llmeval.contamination._reference import ReferenceComparison
from pytest_llmeval.contamination._validation import validation as validation_of
from pytest_llmeval.contamination._validation import validation_note
from pytest_llmeval.scorer import (
    binomial_upper_tail,
    mcnemar_one_sided,
    signed_rank_upper_tail,
    wilson_interval,
)

# --------------------------------------------------------------------------- exchangeability

_NUMBER = re.compile(r"\d")
_REFERS = re.compile(
    r"\b(all|none|both|neither|any)\b(\s+of)?(\s+the)?\s+(above|below|these|those|options|"
    r"answers|choices|statements)\b|^\W*(both|neither|all|none)\b\W*$|^\W*(both|neither)\b.*"
    r"\b(and|nor)\b|\b[A-Ea-e]\)?\s+(and|or|&)\s+\(?[A-Ea-e]\b|\b(option|answer|choice)s?\s+"
    r"\(?[A-Ea-e1-5]\b",
    re.IGNORECASE,
)
_ROMAN = re.compile(r"^\W*(?:\b(?:I|II|III|IV|V|VI)\b[\s,;&]*(?:and|or|only)?[\s,;&]*)+\W*$")
_GRID_WORDS = {"true", "false", "wrong", "not wrong", "yes", "no", "correct", "incorrect"}
_SCALE_WORDS = {
    "never", "rarely", "seldom", "sometimes", "often", "usually", "always",
    "increase", "increases", "increased", "decrease", "decreases", "decreased",
    "unchanged", "same", "constant", "higher", "lower", "more", "less", "fewer",
    "low", "medium", "moderate", "high", "agree", "disagree", "neutral",
    "none", "some", "most", "all", "small", "large", "larger", "smaller",
}  # fmt: skip

EXCHANGEABILITY_RULES: dict[str, str] = {
    "numeric": "half or more of the options hold a number (datasets list them ascending)",
    "refers_to_options": "an option refers to other options (all/none of the above, "
    "both/neither, 'A and C', roman-numeral statement sets)",
    "fixed_grid": "the options are a fixed grid of True/False, Wrong/Not wrong combinations",
    "ordered_scale": "short options on an ordered scale (never...always, increase/decrease)",
    "duplicate_options": "two options have the same text",
}


def exchangeability(options: Sequence[str]) -> str | None:
    """Why the published order of ``options`` may not be a random one (a key of
    :data:`EXCHANGEABILITY_RULES`), or None when nothing suggests an order.

    The canonical-order test assumes that a clean model finds every order of an item's
    options equally likely; datasets break it when they list numbers ascending, put "all
    of the above" last or write option grids in a fixed order, and a clean model prefers
    the published order on those items. Without a reference model the test keeps only the
    items no rule excludes."""
    return _exchangeability(tuple(str(o) for o in options))


@lru_cache(maxsize=1 << 16)
def _exchangeability(options: tuple[str, ...]) -> str | None:
    """:func:`exchangeability`, cached (the validation experiment asks about the same
    items in thousands of draws)."""
    texts = [o.strip() for o in options]
    norm = [re.sub(r"[^\w\s]", " ", t.lower()).split() for t in texts]
    if len({" ".join(n) for n in norm}) < len(texts):
        return "duplicate_options"
    if sum(1 for t in texts if _NUMBER.search(t)) * 2 >= len(texts):
        return "numeric"
    if any(_REFERS.search(t) or _ROMAN.match(t) for t in texts):
        return "refers_to_options"
    parts = [[p.strip(" .").lower() for p in t.split(",")] for t in texts]
    if all(len(p) >= 2 and all(x in _GRID_WORDS for x in p) for p in parts):
        return "fixed_grid"
    if all(0 < len(n) <= 3 and any(w in _SCALE_WORDS for w in n) for n in norm):
        return "ordered_scale"
    return None


# --------------------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class ContaminationVerdict:
    """A task-level verdict: the test, its null, its numbers, and whether it fired."""

    probe: str
    task: str
    null: str  # "reference model <name>" or what the no-reference null is
    test: str  # the statistical test
    n: int
    p_value: float
    alpha: float
    summary: str  # the numbers in words
    detail: Mapping[str, Any] = field(default_factory=dict)
    # The verdict's name in the validation experiment (``canonical_order_vs_reference``,
    # ``option_shuffle``, ...): its message states where it was validated.
    validated_as: str = ""
    # The prompts and dtype this verdict was computed under (``conditions_text``; empty
    # when unknown): its message says when they are not among the validated ones.
    conditions: str = ""
    # How many items were probed (the plugin stamps it; 0 when unknown): the unit of the
    # validated range, which was measured on random draws of that many items. ``n`` is the
    # test's own count (items with exchangeable options, right in exactly one rotation,
    # with a rewrite), fewer.
    items: int = 0

    @property
    def fired(self) -> bool:
        return self.n > 0 and self.p_value < self.alpha

    @property
    def validation(self) -> str:
        """The range of n and the models its false-alarm rate was measured on, and whether
        this verdict's n lies in it (:func:`~._validation.validation_note`)."""
        if not self.validated_as:
            return ""
        return validation_note(
            self.validated_as, self.items or self.n, conditions=self.conditions, task=self.task
        )

    @property
    def validation_pools(self) -> tuple[str, ...]:
        """The pools its false-alarm rate was measured on, one by one (model, role, the
        benchmarks with the most items measured on each, conditions): the message names
        their kinds, the record lists them."""
        found = validation_of(self.validated_as) if self.validated_as else None
        return found.pools if found is not None else ()

    def message(self) -> str:
        verdict = "possible contamination" if self.fired else "no sign of contamination"
        validated = f"; {self.validation}" if self.validated_as else ""
        return (
            f"{self.task} {self.probe}: {verdict}: {self.summary} ({self.test} against "
            f"{self.null}, p={self.p_value:.2g}, alpha={self.alpha}){validated}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "task": self.task,
            "null": self.null,
            "test": self.test,
            "n": self.n,
            "p_value": self.p_value,
            "alpha": self.alpha,
            "fired": self.fired,
            "summary": self.summary,
            "conditions": self.conditions or None,
            "message": self.message(),
            "validation": self.validation or None,
            "validation_pools": list(self.validation_pools),
            "detail": dict(self.detail),
        }


def _first(report: OrderTestReport) -> dict[str, bool]:
    return {
        item: all(c > x for x in s)
        for item, c, s in zip(
            report.item_ids, report.canonical_logprobs, report.shuffled_logprobs, strict=True
        )
    }


def order_verdict(
    report: OrderTestReport,
    options: Mapping[str, Sequence[str]],
    alpha: float,
    *,
    reference: OrderTestReport | None = None,
    reference_name: str = "the reference model",
) -> ContaminationVerdict:
    """The canonical-order test against a null that fits.

    With ``reference`` (the same items, orders and prompts under a clean model): per item,
    is the published order the most likely one under each model; one-sided exact McNemar on
    the pairs where they disagree (b: the model under test prefers the published order and
    the reference does not). Without: only exchangeable items (:func:`exchangeability`),
    one-sided exact binomial test of the count of published-first items against
    ``1 / (k + 1)``."""
    test_first = _first(report)
    if reference is not None:
        ref_first = _first(reference)
        shared = [i for i in report.item_ids if i in ref_first]
        b = sum(1 for i in shared if test_first[i] and not ref_first[i])
        c = sum(1 for i in shared if ref_first[i] and not test_first[i])
        n_test = sum(test_first[i] for i in shared)
        n_ref = sum(ref_first[i] for i in shared)
        return ContaminationVerdict(
            probe="canonical_order",
            task=report.task,
            null=reference_name,
            test="one-sided exact McNemar, paired by item",
            n=len(shared),
            p_value=mcnemar_one_sided(b, c),
            alpha=alpha,
            summary=(
                f"the published option order is the most likely of {report.k + 1} for "
                f"{n_test} of {len(shared)} items under the model and {n_ref} under the "
                f"reference (b={b} only under the model, c={c} only under the reference)"
            ),
            detail={"b": b, "c": c, "model_first": n_test, "reference_first": n_ref},
            validated_as="canonical_order_vs_reference",
        )
    excluded: dict[str, str] = {}
    for item in report.item_ids:
        rule = exchangeability(options[item])
        if rule is not None:
            excluded[item] = rule
    kept = [i for i in report.item_ids if i not in excluded]
    first = sum(test_first[i] for i in kept)
    by_rule: dict[str, int] = {}
    for rule in excluded.values():
        by_rule[rule] = by_rule.get(rule, 0) + 1
    p_value = binomial_upper_tail(first, len(kept), Fraction(1, report.k + 1)) if kept else 1.0
    return ContaminationVerdict(
        probe="canonical_order",
        task=report.task,
        null=f"exchangeable option orders ({len(kept)} of {report.n} items kept)",
        test="one-sided exact binomial",
        n=len(kept),
        p_value=p_value,
        alpha=alpha,
        summary=(
            f"the published option order is the most likely of {report.k + 1} for {first} "
            f"of {len(kept)} items with exchangeable options (chance "
            f"{len(kept) / (report.k + 1):.1f})"
            if kept
            else "no item has exchangeable options: no verdict"
        ),
        detail={"first": first, "kept": kept, "excluded": excluded, "excluded_by_rule": by_rule},
        validated_as="canonical_order",
    )


@dataclass(frozen=True)
class MovedAnswer:
    """One option-shuffled item: its option count, the gold's position as published and
    in the moved order, and right or wrong in each."""

    item_id: str
    n_options: int
    gold: int
    moved_gold: int
    published_correct: bool
    moved_correct: bool


def moved_answers(report: PairedReport) -> list[MovedAnswer]:
    """The first moved order of each item of an option-shuffling report
    (:func:`~._probes.option_shuffle_probe` records the orders and the gold)."""
    out = []
    for item in report.items:
        order = list(item.detail["orders"][0])
        gold = int(item.detail["gold"])
        out.append(
            MovedAnswer(
                item.item_id,
                len(order),
                gold,
                order.index(gold),
                bool(item.canonical_correct),
                bool(item.rewritten_correct[0]),
            )
        )
    return out


def option_shuffle_verdict(
    task: str, answers: Sequence[MovedAnswer], alpha: float, *, seed: int
) -> ContaminationVerdict:
    """Option shuffling: right as published and wrong with the gold moved more often than
    the reverse (one-sided exact McNemar), on the items a seeded coin keeps so that the
    moved golds sit at each letter in the published golds' shares
    (:func:`~._letters.letter_balanced`): a letter habit then adds as many items to one
    side as to the other, whatever the benchmark's skew."""
    keep = letter_balanced(
        [(a.item_id, a.n_options, a.gold, a.moved_gold) for a in answers], seed=seed
    )
    kept = [a for a, k in zip(answers, keep, strict=True) if k]
    b = sum(1 for a in kept if a.published_correct and not a.moved_correct)
    c = sum(1 for a in kept if a.moved_correct and not a.published_correct)
    n = len(answers)
    published = sum(a.published_correct for a in answers) / n if n else float("nan")
    moved = sum(a.moved_correct for a in answers) / n if n else float("nan")
    return ContaminationVerdict(
        probe="option_shuffle",
        task=task,
        null=(
            "the same items with their options moved, the moved golds in the published "
            f"golds' letter shares ({len(kept)} of {n} items kept)"
        ),
        test="one-sided exact McNemar",
        n=len(kept),
        p_value=mcnemar_one_sided(b, c),
        alpha=alpha,
        summary=(
            f"accuracy {100 * published:.1f}% as published, {100 * moved:.1f}% with the "
            f"gold moved on {n} items; of the {len(kept)} kept, b={b} right only as "
            f"published, c={c} right only moved"
        ),
        detail={"b": b, "c": c, "kept": len(kept)},
        validated_as="option_shuffle",
    )


def circular_verdict(
    report: CircularReport,
    alpha: float,
    *,
    options: Mapping[str, Sequence[str]] | None = None,
    reference: CircularReport | None = None,
    reference_name: str = "the reference model",
) -> ContaminationVerdict:
    """CircularEval as a contamination test: items right only in the published rotation.

    With ``reference``: one-sided exact McNemar on that indicator, paired by item. Without:
    among the items right in exactly one rotation, is it the published one more often than
    chance (the share of the kept items' golds at the letter the gold has in that
    rotation: :func:`~._letters.rotation_chances`)? Only valid for exchangeable options,
    so only the items ``options`` shows to be exchangeable are kept
    (:func:`exchangeability`; all items when ``options`` is None)."""
    acc = (
        f"accuracy {100 * report.published_accuracy:.1f}% as published, CircularEval "
        f"{100 * report.circular_accuracy:.1f}%"
    )
    if reference is not None:
        cmp = circular_vs_reference(report, reference)
        return _versus_reference(
            "circular",
            report.task,
            cmp,
            "right-only-as-published",
            f"{acc}; right only in the published rotation",
            alpha,
            reference_name,
        )
    kept = report
    if options is not None:
        keep = {i for i, o in options.items() if exchangeability(o) is None}
        kept = replace(report, items=tuple(i for i in report.items if i.item_id in keep))
    return ContaminationVerdict(
        probe="circular",
        task=report.task,
        null=(
            f"exchangeable option orders ({kept.n} of {report.n} items kept), "
            + (
                "gold letters in their own shares"
                if kept.letter_balanced
                else "gold letters uniform"
            )
        ),
        test="one-sided exact test of the published rotation among items right once",
        n=kept.right_once,
        p_value=kept.p_value if kept.right_once else 1.0,
        alpha=alpha,
        summary=(
            f"{acc}; of {kept.right_once} exchangeable items right in exactly one rotation, "
            f"{kept.right_once_published} are right in the published one (chance "
            f"{kept.expected_published:.1f})"
        ),
        validated_as="circular",
    )


def guessing_verdict(
    report: GuessingReport,
    reference: GuessingReport,
    alpha: float,
    *,
    reference_name: str = "the reference model",
) -> ContaminationVerdict:
    """TS-Guessing against a reference model: one-sided exact McNemar on exact matches of
    the masked option, paired by item (there is no verdict without a reference)."""
    cmp = guessing_vs_reference(report, reference)
    return _versus_reference(
        "ts_guessing",
        report.task,
        cmp,
        "exact matches",
        "the masked option guessed exactly",
        alpha,
        reference_name,
    )


def _versus_reference(
    probe: str,
    task: str,
    cmp: ReferenceComparison,
    indicator: str,
    what: str,
    alpha: float,
    reference_name: str,
) -> ContaminationVerdict:
    """A per-item indicator of the model against the reference's: one-sided McNemar."""
    return ContaminationVerdict(
        probe=probe,
        task=task,
        null=reference_name,
        test=f"one-sided exact McNemar on {indicator}, paired by item",
        n=cmp.n_paired,
        p_value=cmp.p_value,
        alpha=alpha,
        summary=(
            f"{what}: {cmp.test_count} of {cmp.n_paired} items under the model, "
            f"{cmp.ref_count} under the reference (b={cmp.b}, c={cmp.c})"
        ),
        detail=cmp.to_dict(),
        validated_as=f"{probe}_vs_reference",
    )


# --------------------------------------------------------------------------- membership flags

MEMBERSHIP_SCORES = ("min_k_plus_plus", "min_k", "mean_logprob")


@dataclass(frozen=True)
class FlagReport:
    """Item-level membership flags and the task-level test on them.

    ``values``: per item, the calibrated score (higher: more familiar to the model than
    the null predicts); ``controls``: the same score of known-clean controls (rewrites,
    which no model saw in that form), whose ``1 - fpr`` quantile is the ``threshold``.
    ``control_fpr``: the share of controls above it (the estimated false-positive rate).
    The task-level test, one-sided, of items against their own control: against a
    reference the Wilcoxon signed-rank test of ``differences`` (item minus control), which
    weighs how far each item leans; against rewrites alone the sign test."""

    task: str
    score: str
    mode: str  # "reference" or "rewrites"
    null: str
    fpr: float
    threshold: float
    values: Mapping[str, float]
    controls: tuple[float, ...]
    paired_positive: int
    paired_n: int
    # What the rewrites change: "options" (their order, multiple choice) or "numbers"
    # (worked-solution tasks). Validated apart: an in-domain fine-tune learns a benchmark's
    # numbers in general, which number rewrites do not share.
    rewrites: str = "options"
    # Per item, its value minus its control (the signed-rank test's data).
    differences: tuple[float, ...] = ()

    @property
    def test(self) -> str:
        if self.mode == "reference":
            return "one-sided Wilcoxon signed-rank test, item against its own control"
        return "one-sided exact sign test, item against its own control"

    @property
    def flagged(self) -> list[str]:
        return [i for i, v in self.values.items() if v > self.threshold]

    @property
    def control_fpr(self) -> float:
        if not self.controls:
            return float("nan")
        return sum(1 for v in self.controls if v > self.threshold) / len(self.controls)

    @property
    def p_value(self) -> float:
        if self.mode == "reference":
            # Measured (docs/CONTAMINATION.md, "A paired test that weighs how far items
            # lean"): against a reference the sign test's power at a tenth planted was
            # 19% at 500 MMLU items, the signed-rank test's 89%, at the same false alarms.
            return signed_rank_upper_tail(self.differences)
        return (
            binomial_upper_tail(self.paired_positive, self.paired_n, Fraction(1, 2))
            if self.paired_n
            else 1.0
        )

    def verdict(self, alpha: float) -> ContaminationVerdict:
        flagged = self.flagged
        expected = self.fpr * len(self.values)
        strongest = sorted(flagged, key=lambda i: -self.values[i])[:5]
        named = ", ".join(f"{i} ({self.values[i]:+.2f})" for i in strongest)
        return ContaminationVerdict(
            probe=f"membership_{self.score}",
            task=self.task,
            null=self.null,
            test=self.test,
            n=self.paired_n,
            p_value=self.p_value,
            alpha=alpha,
            summary=(
                f"{self.paired_positive} of {self.paired_n} items score higher than their "
                f"control; {len(flagged)} of {len(self.values)} items flagged at a threshold "
                f"with an estimated false-positive rate of {100 * self.control_fpr:.1f}% "
                f"({expected:.1f} expected by chance)" + (f"; strongest: {named}" if named else "")
            ),
            detail={
                "flagged": flagged,
                "threshold": self.threshold,
                "target_fpr": self.fpr,
                "control_fpr": self.control_fpr,
                "controls": len(self.controls),
            },
            validated_as=f"membership_{self.score}_"
            + ("vs_reference" if self.mode == "reference" else "rewrites")
            + ("_numbers" if self.rewrites == "numbers" else ""),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "score": self.score,
            "mode": self.mode,
            "rewrites": self.rewrites,
            "null": self.null,
            "n": len(self.values),
            "target_fpr": self.fpr,
            "threshold": self.threshold,
            "control_fpr": self.control_fpr,
            "controls": list(self.controls),
            "paired_positive": self.paired_positive,
            "paired_n": self.paired_n,
            "test": self.test,
            "p_value": self.p_value,
            "flagged": self.flagged,
            "values": dict(self.values),
        }


def _upper_quantile(values: Sequence[float], fpr: float) -> float:
    """The smallest threshold with at most ``fpr`` of ``values`` strictly above it."""
    ordered = sorted(values)
    allowed = math.floor(fpr * len(ordered))
    return ordered[len(ordered) - 1 - allowed] if ordered else math.inf


def membership_flags(
    task: str,
    model: Sequence[ItemMembership],
    *,
    reference: Sequence[ItemMembership] | None = None,
    reference_name: str = "the reference model",
    score: str = "min_k_plus_plus",
    fpr: float = 0.05,
    rewrites: str = "options",
) -> FlagReport:
    """Calibrated membership flags for the items of ``model`` (scored as published and as
    rewritten, :func:`~._membership.membership_records`).

    With ``reference`` (the same texts under a clean model): an item's value is its score
    under the model minus under the reference; the controls are the rewrites' values
    computed the same way. Without: an item's value is its score minus the mean score of
    its rewrites after the first; the first rewrite, compared with the same mean, is its
    control (so an item and its control differ only in which text was published).
    Items without rewrites are left out. ``rewrites``: what the rewrites change,
    ``options`` or ``numbers`` (:func:`~._membership.rewritten_docs`)."""
    if score not in MEMBERSHIP_SCORES:
        raise ValueError(f"unknown score {score!r}; known: {', '.join(MEMBERSHIP_SCORES)}")
    values: dict[str, float] = {}
    controls: list[float] = []
    differences: list[float] = []
    positive = total = 0
    ref = {r.item_id: r for r in reference} if reference is not None else None

    def get(s: Any) -> float:
        return float(getattr(s, score))

    for rec in model:
        if not rec.perturbed:
            continue
        if ref is not None:
            other = ref.get(rec.item_id)
            if other is None or len(other.perturbed) != len(rec.perturbed):
                continue
            value = get(rec.published) - get(other.published)
            mine = [get(a) - get(b) for a, b in zip(rec.perturbed, other.perturbed, strict=True)]
            control = sum(mine) / len(mine)
            controls.extend(mine)
        else:
            if len(rec.perturbed) < 2:
                continue
            base = sum(get(s) for s in rec.perturbed[1:]) / (len(rec.perturbed) - 1)
            value = get(rec.published) - base
            control = get(rec.perturbed[0]) - base
            controls.append(control)
        if math.isnan(value) or math.isnan(control):
            continue
        values[rec.item_id] = value
        if value != control:
            total += 1
            positive += value > control
            differences.append(value - control)
    null = (
        f"{reference_name} on the same texts"
        if ref is not None
        else "the items' own rewrites (published text against rewritten text)"
    )
    return FlagReport(
        task=task,
        score=score,
        mode="reference" if ref is not None else "rewrites",
        null=null,
        fpr=fpr,
        threshold=_upper_quantile(controls, fpr),
        values=values,
        controls=tuple(controls),
        paired_positive=positive,
        paired_n=total,
        rewrites=rewrites,
        differences=tuple(differences),
    )


# --------------------------------------------------------------------------- handling

POLICY_SHARE = 0.01


@dataclass(frozen=True)
class SubsetScore:
    name: str
    n: int
    correct: int

    @property
    def score(self) -> float:
        return self.correct / self.n if self.n else float("nan")

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.correct, self.n)

    def describe(self) -> str:
        if not self.n:
            return f"{self.name}: no items"
        low, high = self.interval
        return (
            f"{self.name} {100 * self.score:.1f}% [{100 * low:.1f}, {100 * high:.1f}] "
            f"({self.correct}/{self.n})"
        )


@dataclass(frozen=True)
class Handling:
    """What to do about flagged items: the scores on all, clean and flagged items, the
    exclusion list and the policy applied."""

    task: str
    flagged: tuple[str, ...]
    scores: tuple[SubsetScore, ...]
    policy: str
    successor: str | None

    def exclusion_list(self, header: Sequence[str] = ()) -> str:
        """The flagged ids in ``run.exclude`` format."""
        lines = [f"# {line}" for line in header] + list(self.flagged)
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "flagged": list(self.flagged),
            "scores": {
                s.name: {"n": s.n, "correct": s.correct, "score": s.score, "interval": s.interval}
                for s in self.scores
            },
            "policy": self.policy,
            "successor": self.successor,
        }


def handling(
    task: str,
    correct: Mapping[str, bool],
    flagged: Sequence[str],
    *,
    verdict_fired: bool,
    successor: str | None = None,
) -> Handling:
    """Scores on all, clean and flagged items and the policy: with a task-level verdict,
    under 1% of the items flagged: exclude them (``run.exclude``) and report the clean
    score; more: replace the benchmark (its successor from the catalog when it names
    one). Without a verdict the flags are what the threshold's false-positive rate
    predicts on clean data and nothing is excluded."""
    flagged_set = [i for i in flagged if i in correct]
    clean = [i for i in correct if i not in set(flagged_set)]
    scores = (
        SubsetScore("all", len(correct), sum(correct.values())),
        SubsetScore("clean", len(clean), sum(correct[i] for i in clean)),
        SubsetScore("flagged", len(flagged_set), sum(correct[i] for i in flagged_set)),
    )
    share = len(flagged_set) / len(correct) if correct else 0.0
    if not verdict_fired:
        policy = (
            "no task-level verdict: the flags are within what the threshold's false-positive "
            "rate predicts on clean items; nothing to exclude"
        )
    elif share < POLICY_SHARE:
        policy = (
            f"{100 * share:.1f}% of the items flagged (under {100 * POLICY_SHARE:.0f}%): "
            "exclude them with --llm-set run.exclude and report the clean score next to the "
            "full one"
        )
    else:
        better = f" (the catalog names {successor})" if successor else ""
        policy = (
            f"{100 * share:.1f}% of the items flagged ({100 * POLICY_SHARE:.0f}% or more): "
            f"replace the benchmark with a fresher one{better}; the clean score is reported "
            "for comparison only"
        )
    return Handling(task, tuple(flagged_set), scores, policy, successor)
