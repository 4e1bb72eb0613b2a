"""One contamination probe of a task, run and decided: what the ``llm_probe`` fixture runs
(the plugin wires it into pytest, resumes its model calls and writes its report).

:func:`run_probe` runs the probe on the model (and on the reference model when one is
given, ``probe.reference_model``) and decides its verdict against a null that fits the
data (``_verdicts``): the reference when there is one, else the items' own rewrites. A
verdict is given only where its false-alarm rate on known-clean items was measured to hold
(``validation.json``) and the test had items to count; otherwise the :class:`ProbeOutcome`
carries the reason and the verdict not given, for inspection. A probe whose null without a
reference was measured to fire on clean models (canonical order, CircularEval on some
pools, membership, TS-Guessing) gives no verdict without one. Plain Python: no pytest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pytest_llmeval.scorer import mcnemar_one_sided

from ._circular import circular_probe
from ._guessing import ts_guessing_probe
from ._membership import membership_records, rewrite_kind
from ._probes import (
    canonical_order_test,
    entity_rewrite_probe,
    number_rewrite_probe,
    option_fields,
    option_shuffle_probe,
)
from ._rewrite import option_texts
from ._validation import conditions_text, seen_conditions, validation, validation_note
from ._verdicts import (
    ContaminationVerdict,
    Handling,
    circular_verdict,
    guessing_verdict,
    handling,
    membership_flags,
    moved_answers,
    option_shuffle_verdict,
    order_verdict,
)

if TYPE_CHECKING:
    from pytest_llmeval.dataset import Item
    from pytest_llmeval.eval import TaskRunner
    from pytest_llmeval.model import Backend

#: The probes a test can run, by name (``llm_probe.run(task, probe)``).
PROBES = (
    "option_shuffle",
    "canonical_order",
    "number_rewrite",
    "entity_rewrite",
    "membership",
    "ts_guessing",
    "circular",
)


@dataclass
class ProbeContext:
    """What one probe of a task runs on: the task's runner and the items probed, the model
    and the reference model (each a callable that gives the backend when first asked: the
    plugin loads the reference lazily and keeps every call for resume), the reference's
    name as verdicts state it, the seed of every random draw, the verdict's level
    (``alpha``) and the membership flags' target false-positive rate (``fpr``), the dtype
    the model ran in, and right/wrong as published per item id (shared by the task's
    probes, filled as they run)."""

    runner: TaskRunner
    items: list[Item]
    model: Callable[[], Backend]
    reference: Callable[[], Backend | None]
    reference_name: Callable[[], str]
    seed: int
    alpha: float
    fpr: float
    dtype: str | None = None
    correct: dict[str, bool] = field(default_factory=dict)
    k: int | None = None  # orders, perturbations or rotations per item (the probe's default)


def run_probe(probe: str, ctx: ProbeContext) -> ProbeOutcome:
    """Run ``probe`` (one of :data:`PROBES`) on ``ctx`` and give its outcome: its report,
    and its verdict where one is given (else why not, with the verdict for inspection)."""
    if probe not in PROBES:
        raise ValueError(f"unknown probe {probe!r}; known: {', '.join(PROBES)}")
    outcome: ProbeOutcome = _RUN[probe](ctx)
    # Not validated is the reason that holds whatever the items; then nothing counted.
    return _only_if_counted(_only_if_validated(outcome))


def _why_not_given(verdict: ContaminationVerdict) -> str | None:
    """Why the plugin does not give ``verdict`` (None when it does): its false-alarm rate on
    known-clean items was never measured (``validation.json`` has no entry for it), or only
    where it cannot fire, or it is above its level at some measured n."""
    found = validation(verdict.validated_as)
    if found is None:
        return (
            "its false-alarm rate on known-clean items has never been measured, so a firing "
            "could not be told from what a clean model does"
        )
    if found.vacuous:
        return (
            "its false alarms on known-clean items were measured only where it cannot fire "
            f"({'; '.join(found.cannot_fire_on)}), so a firing could not be told from what a "
            "clean model does"
        )
    if not found.holds:
        return (
            f"this test fires above its level on known-clean items ({found.worst}), so it "
            "cannot tell contamination from what a clean model does"
        )
    return None


def _inspection(verdict: ContaminationVerdict) -> str:
    """A verdict that is not given, in the words of one that is: its numbers, its test and
    null, and its p-value (the skip message's "for inspection" part)."""
    return f"{verdict.summary} ({verdict.test} against {verdict.null}, p={verdict.p_value:.2g})"


def _only_if_counted(outcome: ProbeOutcome) -> ProbeOutcome:
    """No verdict from a test that had nothing to count (``n == 0``: no item right in
    exactly one rotation, none kept for letter balance, none with exchangeable options):
    "no sign of contamination" would read as a finding. Skipped with its numbers."""
    verdict = outcome.verdict
    if verdict is None or verdict.n > 0:
        return outcome
    reason = (
        f"{outcome.task} {outcome.probe}: no verdict: the test had no item to count on the "
        f"{verdict.items or 'probed'} items; for inspection: {_inspection(verdict)}"
    )
    return replace(outcome, verdict=None, inspection=verdict, no_verdict=reason)


def _only_if_validated(outcome: ProbeOutcome) -> ProbeOutcome:
    """No verdict from a test that fires above its level on known-clean items at some
    measured n (``validation.json``: an untouched model, or an in-domain fine-tune against
    its base), nor from one never measured there: its firing could not be told from what a
    clean model does. Skipped with its numbers, as the probes without a null are; its
    report is still written."""
    verdict = outcome.verdict
    why = _why_not_given(verdict) if verdict is not None else None
    if verdict is None or why is None:
        return outcome
    # The validated range and conditions, where there is one to state (a verdict never
    # measured has only the reason above).
    measured = f"; {verdict.validation}" if validation(verdict.validated_as) else ""
    reason = (
        f"{outcome.task} {outcome.probe}: no verdict: {why}; for inspection: "
        f"{_inspection(verdict)}{measured}"
    )
    return replace(outcome, verdict=None, inspection=verdict, no_verdict=reason)


@dataclass(frozen=True)
class ProbeOutcome:
    """A probe's report (its ``to_dict()`` is written to the run directory), its verdict
    and, for membership flags, what to do about the flagged items."""

    task: str
    probe: str
    report: Any
    verdict: ContaminationVerdict | None
    handling: Handling | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Why there is no verdict (the probe has no null that fits without a reference model):
    # the test is skipped with this reason, the report is still written.
    no_verdict: str | None = None
    # The verdict that is not given, for inspection: its numbers, test, null and p, which
    # the reason quotes and the report's table shows (the report's own top-level numbers
    # are those of the probe, e.g. the order test on all items, not on exchangeable ones).
    inspection: ContaminationVerdict | None = None

    def to_dict(self, alpha: float) -> dict[str, Any]:
        data = dict(self.report.to_dict()) if hasattr(self.report, "to_dict") else {}
        data.update({"probe": self.probe, "task": self.task, "alpha": alpha, **self.extra})
        if self.verdict is not None:
            data["verdict"] = self.verdict.to_dict()
            data["p_value"] = self.verdict.p_value  # the verdict's, which decides
            data.setdefault("n", self.verdict.n)
        if self.handling is not None:
            data["handling"] = self.handling.to_dict()
        if self.no_verdict is not None:
            data["no_verdict"] = self.no_verdict
        if self.inspection is not None:
            # Its own message reads as an outcome ("no sign of contamination", "possible
            # contamination"): whoever reads the JSON sees first that it was not given.
            inspected = self.inspection.to_dict()
            inspected["given"] = False
            inspected["message"] = f"not given (see no_verdict); read alone: {inspected['message']}"
            data["inspection"] = inspected
            # As for a verdict: the p its reason quotes, not the probe's own (the order
            # test's over all items); the probe's stays beside it.
            if "p_value" in data and data["p_value"] != self.inspection.p_value:
                data["probe_p_value"] = data["p_value"]
            data["p_value"] = self.inspection.p_value
        return data

    def summary(self) -> dict[str, Any]:
        """What the terminal and the Markdown summary say of this probe: ``outcome``
        (possible contamination, no sign of contamination, no verdict), its line (the
        verdict's message, or why there is none) and, for membership flags that fired or
        flagged items, the scores and the handling."""
        verdict = self.verdict
        details: list[str] = []
        if verdict is None:
            outcome, text = "no verdict", self.no_verdict or f"{self.task} {self.probe}: no verdict"
        else:
            outcome = "possible contamination" if verdict.fired else "no sign of contamination"
            text = verdict.message()
            if self.handling is not None and (verdict.fired or self.handling.flagged):
                details.append("scores: " + "; ".join(s.describe() for s in self.handling.scores))
                details.append(f"handling: {self.handling.policy}")
        return {
            "task": self.task,
            "probe": self.probe,
            "outcome": outcome,
            "p_value": verdict.p_value if verdict is not None else None,
            "n": verdict.n if verdict is not None else None,
            "text": text,
            "details": details,
        }


def _not_given(
    task: str,
    probe: str,
    report: Any,
    verdict: ContaminationVerdict,
    reason: str,
    plan: Handling | None = None,
) -> ProbeOutcome:
    """The outcome of a probe whose verdict is not given: its report, why not, and the
    verdict for inspection."""
    return ProbeOutcome(task, probe, report, None, plan, no_verdict=reason, inspection=verdict)


def paired_verdict(report: Any, alpha: float) -> ContaminationVerdict:
    """Number and entity rewrites: the published form answered better than its rewrite,
    one-sided exact McNemar on the discordant pairs (option shuffling has its own:
    :func:`~pytest_llmeval.contamination.option_shuffle_verdict`)."""
    return ContaminationVerdict(
        probe=report.probe,
        task=report.task,
        null="the same items rewritten",
        test="one-sided exact McNemar",
        n=report.n,
        p_value=mcnemar_one_sided(report.b, report.c),
        alpha=alpha,
        summary=(
            f"accuracy {100 * report.canonical_accuracy:.1f}% as published, "
            f"{100 * report.rewritten_accuracy:.1f}% rewritten on {report.n} items "
            f"(b={report.b} right only as published, c={report.c} only rewritten)"
        ),
        validated_as=report.probe,
    )


def _stamp(ctx: ProbeContext, verdict: ContaminationVerdict) -> ContaminationVerdict:
    """``verdict`` with the prompts and dtype it was computed under and the number of
    items probed: its message says when they are not among those its false-alarm rate
    was measured under, or outside the numbers of items it was measured on."""
    runner = ctx.runner
    ran = conditions_text(runner.shots, runner.template is not None, ctx.dtype)
    # What reached the statistic: membership scores the item's text without a prompt.
    return replace(
        verdict, conditions=seen_conditions(verdict.validated_as, ran), items=len(ctx.items)
    )


def _published_correct(ctx: ProbeContext) -> dict[str, bool]:
    """Right/wrong of each item as published (cached per task: probes share them)."""
    known = ctx.correct
    missing = [i for i in ctx.items if i.id not in known]
    if missing:
        for r in ctx.runner.run(missing, ctx.model()):
            known[r.item_id] = bool(r.correct)
    return {i.id: known[i.id] for i in ctx.items}


def _option_shuffle(ctx: ProbeContext) -> ProbeOutcome:
    runner, items, k = ctx.runner, ctx.items, ctx.k
    seed = ctx.seed
    report = option_shuffle_probe(runner, items, ctx.model(), k=k or 1, seed=seed)
    ctx.correct.update({i.item_id: i.canonical_correct for i in report.items})
    answers = moved_answers(report)
    verdict = option_shuffle_verdict(runner.spec.name, answers, ctx.alpha, seed=seed)
    verdict = _stamp(ctx, verdict)
    golds = {(a.n_options, a.gold) for a in answers}
    if answers and len(golds) == len({n for n, _ in golds}):
        # Every published gold at one letter: no moved gold can sit where published
        # ones do, so a letter habit cannot be told from a memory (none is kept).
        reason = (
            f"{runner.spec.name} option_shuffle: no verdict: every published gold of the "
            f"{report.n} items probed sits at the same letter, so no moved gold can be "
            "weighed against it and a letter habit cannot be told from a memorised "
            f"answer; for inspection: {_inspection(verdict)}"
        )
        return _not_given(runner.spec.name, "option_shuffle", report, verdict, reason)
    return ProbeOutcome(runner.spec.name, "option_shuffle", report, verdict)


def _canonical_order(ctx: ProbeContext) -> ProbeOutcome:
    runner, items, k = ctx.runner, ctx.items, ctx.k
    seed = ctx.seed
    report = canonical_order_test(runner, items, ctx.model(), k=k or 3, seed=seed)
    ref_backend = ctx.reference()
    ref_report = (
        canonical_order_test(runner, items, ref_backend, k=k or 3, seed=seed)
        if ref_backend is not None
        else None
    )
    fields, _ = option_fields(runner)
    options = {i.id: option_texts(i.doc, fields) for i in items}
    verdict = _stamp(
        ctx,
        order_verdict(
            report,
            options,
            ctx.alpha,
            reference=ref_report,
            reference_name=ctx.reference_name(),
        ),
    )
    if ref_report is None:
        # Measured (docs/contamination-experiment/scaling.md): published option orders
        # carry natural orders (alphabetical, by length, chronological, logical) that
        # the exchangeability rules do not remove and clean models prefer; against
        # 1/(k+1) the test fires on untouched models of two families at a few hundred
        # items. It cannot tell a memorised order from a natural one without a model
        # that shares the natural-order preference: a reference.
        reason = (
            f"{runner.spec.name} canonical_order: no verdict without "
            "--llm-set probe.reference_model: the test cannot tell a memorised option "
            "order from "
            "a natural one (alphabetical, by length, chronological), which clean models "
            f"prefer too; for inspection: {_inspection(verdict)}; {verdict.validation}"
        )
        return _not_given(runner.spec.name, "canonical_order", report, verdict, reason)
    extra = {"reference_report": ref_report.to_dict()}
    return ProbeOutcome(runner.spec.name, "canonical_order", report, verdict, extra=extra)


def _number_rewrite(ctx: ProbeContext) -> ProbeOutcome:
    runner, items = ctx.runner, ctx.items
    report = number_rewrite_probe(runner, items, ctx.model(), seed=ctx.seed)
    ctx.correct.update({i.item_id: i.canonical_correct for i in report.items})
    verdict = _stamp(ctx, paired_verdict(report, ctx.alpha))
    return ProbeOutcome(runner.spec.name, "number_rewrite", report, verdict)


def _entity_rewrite(ctx: ProbeContext) -> ProbeOutcome:
    runner, items = ctx.runner, ctx.items
    report = entity_rewrite_probe(runner, items, ctx.model(), seed=ctx.seed)
    verdict = _stamp(ctx, paired_verdict(report, ctx.alpha))
    return ProbeOutcome(runner.spec.name, "entity_rewrite", report, verdict)


def _membership(ctx: ProbeContext) -> ProbeOutcome:
    runner, items, k = ctx.runner, ctx.items, ctx.k
    model = ctx.model()
    mine = membership_records(runner, items, model, perturbations=k or 3, seed=ctx.seed)
    ref_backend = ctx.reference()
    ref = (
        membership_records(runner, items, ref_backend, perturbations=k or 3, seed=ctx.seed)
        if ref_backend is not None
        else None
    )
    flags = membership_flags(
        runner.spec.name,
        mine,
        reference=ref,
        reference_name=ctx.reference_name(),
        fpr=ctx.fpr,
        rewrites=rewrite_kind(runner),
    )
    verdict = _stamp(ctx, flags.verdict(ctx.alpha))
    correct = _published_correct(ctx)
    plan = handling(
        runner.spec.name,
        correct,
        flags.flagged,
        # No policy from a verdict that will not be given (below, and
        # _only_if_validated).
        verdict_fired=verdict.fired and ref is not None and _why_not_given(verdict) is None,
        successor=runner.spec.catalog.successor,
    )
    if ref is None:
        # Measured: published texts are more familiar than their rewrites to clean
        # models too (numbers and orders people chose read more naturally), so the sign
        # test against rewrites fires on untouched models above its level
        # (docs/CONTAMINATION.md). The flags are kept for inspection, no verdict.
        reason = (
            f"{runner.spec.name} membership: no verdict without --llm-set "
            "probe.reference_model "
            f"(against rewrites alone it fires on clean models above its level); for "
            f"inspection: {_inspection(verdict)}; {verdict.validation}"
        )
        return _not_given(runner.spec.name, "membership", flags, verdict, reason, plan)
    why = _why_not_given(verdict)
    if why is not None and flags.rewrites == "options":
        # Measured on both families' in-domain fine-tunes (docs/CONTAMINATION.md, "The
        # reference-paired verdicts on a second family" and "Longer pools"): a
        # fine-tune learns the natural orders options are published in, so against
        # option-order rewrites it finds items it never saw more familiar than their
        # controls, and the reference cannot cancel that.
        reason = (
            f"{runner.spec.name} membership: no verdict: {why}; against option-order "
            "rewrites a model fine-tuned on text like the benchmark's finds items it "
            "never saw more familiar in their published (natural) option order, so "
            "the test cannot tell a memorised item from a learned option-order style; "
            f"for inspection: {_inspection(verdict)}; {verdict.validation}"
        )
        return _not_given(runner.spec.name, "membership", flags, verdict, reason, plan)
    return ProbeOutcome(runner.spec.name, "membership", flags, verdict, plan)


def _ts_guessing(ctx: ProbeContext) -> ProbeOutcome:
    runner, items = ctx.runner, ctx.items
    seed = ctx.seed
    report = ts_guessing_probe(runner, items, ctx.model(), seed=seed)
    ref_backend = ctx.reference()
    if ref_backend is None:
        # What the verdict it would have with a reference was validated on: a user
        # deciding whether to find one should know it is not validated either.
        with_ref = validation_note("ts_guessing_vs_reference", report.n, task=runner.spec.name)
        reason = (
            f"{runner.spec.name} ts_guessing: exact-match rate "
            f"{100 * report.exact_match_rate:.1f}% on {report.n} items; no verdict without "
            "--llm-set probe.reference_model (free-text guessing has no honest chance level); "
            f"against a reference (exact matches, paired McNemar): {with_ref}"
        )
        return ProbeOutcome(runner.spec.name, "ts_guessing", report, None, no_verdict=reason)
    ref = ts_guessing_probe(runner, items, ref_backend, seed=seed)
    verdict = _stamp(
        ctx,
        guessing_verdict(report, ref, ctx.alpha, reference_name=ctx.reference_name()),
    )
    extra = {"reference_report": ref.to_dict()}
    return ProbeOutcome(runner.spec.name, "ts_guessing", report, verdict, extra=extra)


def _circular(ctx: ProbeContext) -> ProbeOutcome:
    runner, items = ctx.runner, ctx.items
    report = circular_probe(runner, items, ctx.model())
    ref_backend = ctx.reference()
    ref = circular_probe(runner, items, ref_backend) if ref_backend is not None else None
    fields, _ = option_fields(runner)
    verdict = _stamp(
        ctx,
        circular_verdict(
            report,
            ctx.alpha,
            options={i.id: option_texts(i.doc, fields) for i in items},
            reference=ref,
            reference_name=ctx.reference_name(),
        ),
    )
    # Without a reference: the exact test against 1/n on exchangeable items, given when
    # its false alarms hold the level on known-clean items (validation.json: two
    # families, MMLU and C-Eval, 50 items to the whole pools); _only_if_validated
    # decides, as for every verdict.
    return ProbeOutcome(runner.spec.name, "circular", report, verdict)


_RUN: dict[str, Callable[[ProbeContext], ProbeOutcome]] = {
    "option_shuffle": _option_shuffle,
    "canonical_order": _canonical_order,
    "number_rewrite": _number_rewrite,
    "entity_rewrite": _entity_rewrite,
    "membership": _membership,
    "ts_guessing": _ts_guessing,
    "circular": _circular,
}
