"""The ``llm_probe`` fixture: contamination probes as tests, with a verdict per task.

Every verdict is computed against a null that fits the data (``contamination._verdicts``):
the reference model (``probe.reference_model``) when one is given, else the items' own
rewrites. A probe whose null without a reference was measured to fire on clean models
(canonical order, CircularEval, membership, TS-Guessing) reports its numbers and gives no
verdict without one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmeval import _json as strict_json
from pytest_llmeval._errors import LlmEvalError

if TYPE_CHECKING:
    from pytest_llmeval.contamination import ContaminationVerdict, Handling
    from pytest_llmeval.dataset import Item
    from pytest_llmeval.eval import TaskRunner
    from pytest_llmeval.settings import Settings

    from ._session import LlmEvalSession

PROBES = (
    "option_shuffle",
    "canonical_order",
    "number_rewrite",
    "entity_rewrite",
    "membership",
    "ts_guessing",
    "circular",
)


def _why_not_given(verdict: ContaminationVerdict) -> str | None:
    """Why the plugin does not give ``verdict`` (None when it does): its false-alarm rate on
    known-clean items was never measured (``validation.json`` has no entry for it), or only
    where it cannot fire, or it is above its level at some measured n."""
    from pytest_llmeval.contamination import validation

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
    from dataclasses import replace

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
    from dataclasses import replace

    verdict = outcome.verdict
    why = _why_not_given(verdict) if verdict is not None else None
    if verdict is None or why is None:
        return outcome
    from pytest_llmeval.contamination import validation

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


def paired_verdict(report: Any, alpha: float) -> ContaminationVerdict:
    """Number and entity rewrites: the published form answered better than its rewrite,
    one-sided exact McNemar on the discordant pairs (option shuffling has its own:
    :func:`~pytest_llmeval.contamination.option_shuffle_verdict`)."""
    from pytest_llmeval.contamination import ContaminationVerdict
    from pytest_llmeval.scorer import mcnemar_one_sided

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


#: The probe settings a test's ``@pytest.mark.llm_probe(...)`` may set.
MARKER_SETTINGS = ("items", "alpha", "fpr")


def probe_settings(settings: Settings, marker: Mapping[str, Any]) -> tuple[int, float, float]:
    """A probe test's items, level and target false-positive rate: the project's settings,
    over them the test's ``llm_probe`` marker, and over both ``--llm-set`` (a one-off for
    every probe of the run, as pytest-benchmark's options over its marker)."""
    from pytest_llmeval.settings import BY_NAME, SettingError

    unknown = sorted(set(marker) - set(MARKER_SETTINGS))
    if unknown:
        raise pytest.UsageError(
            f"@pytest.mark.llm_probe: unknown argument(s) {', '.join(unknown)} (it takes "
            f"{', '.join(MARKER_SETTINGS)}; the reference model is the setting "
            "probe.reference_model)"
        )
    values = []
    for key in MARKER_SETTINGS:
        name = f"probe.{key}"
        value = settings[name]
        if key in marker and settings.source(name) != "--llm-set":
            try:
                value = BY_NAME[name].parse(marker[key], "@pytest.mark.llm_probe")
            except SettingError as exc:
                raise pytest.UsageError(str(exc)) from None
        values.append(value)
    return int(values[0]), float(values[1]), float(values[2])


class ProbeRunner:
    """Runs a probe on a collected task's first ``probe.items`` items (after
    ``run.exclude``) with the session's model (and the reference model when given),
    records the report in the run directory and checks its verdict."""

    def __init__(
        self, session: LlmEvalSession, backend: Any, marker: Mapping[str, Any] | None = None
    ) -> None:
        self.session = session
        self.backend = backend
        self.items, self.alpha, self.fpr = probe_settings(session.options.settings, marker or {})
        self._reference: Any = None
        self._reference_error: str | None = None  # why it could not be loaded (not retried)
        self._reference_record: dict[str, Any] | None = None
        self._correct: dict[str, dict[str, bool]] = {}  # task -> item id -> right as published
        # The running probe's models, their calls kept chunk by chunk (_chunked).
        self._running: tuple[TaskRunner, str] | None = None
        self._wrapped: dict[str, Any] = {}
        self._resumed: dict[str, list[str]] = {}
        self._probed = 0  # items the running probe was given

    # ------------------------------------------------------------------ reference model

    def reference(self) -> Any | None:
        """The reference backend (loaded once), or None without ``--llm-set "
        "probe.reference_model``."""
        name = self.session.options.reference_model
        if name is None:
            return None
        if self._reference_error is not None:
            pytest.fail(self._reference_error, pytrace=False)
        if self._reference is None:
            from dataclasses import replace

            from pytest_llmeval.model import load_backend

            from ._evaluator import load_failure

            settings = replace(self.session.options.model_settings(), model=name)
            try:
                self._reference = load_backend(settings)
            except Exception as exc:  # as for the model: one line, not a chained traceback
                self._reference_error = load_failure(exc, "--llm-set probe.reference_model", name)
            if self._reference_error is not None:
                pytest.fail(self._reference_error, pytrace=False)
            self._reference_record = self._describe_reference(name)
        return self._reference

    def _describe_reference(self, name: str) -> dict[str, Any]:
        from pathlib import Path

        from pytest_llmeval.record import HashCache, model_fingerprint

        info = dict(self._reference.info())
        path = info.get("model_path")
        record: dict[str, Any] = {"model": name, "model_path": path}
        if path and Path(str(path)).is_dir():
            cache = HashCache()
            record["sha256"] = model_fingerprint(Path(str(path)), cache)["sha256"]
            cache.save()
        else:
            record["sha256"] = None
            record["sha256_reason"] = "not a local model directory (served model)"
        return record

    def _reference_name(self) -> str:
        rec = self._reference_record or {}
        digest = rec.get("sha256")
        short = f" (sha256 {digest[:12]})" if digest else ""
        return f"reference model {rec.get('model')}{short}"

    # ------------------------------------------------------------------ running

    def run(
        self, task: str, probe: str, *, n: int | None = None, k: int | None = None
    ) -> ProbeOutcome:
        from pytest_llmeval.dataset import first_n, load_items

        if probe not in PROBES:
            raise ValueError(f"unknown probe {probe!r}; known: {', '.join(PROBES)}")
        runner = self.session.runners.get(task)
        if runner is None and task in self.session.broken_specs:
            # Its spec was found but cannot be collected: the probe fails with the reason
            # (a skip would read as a probe this run did not ask for).
            pytest.fail(
                f"{task} {probe}: its spec cannot be collected: {self.session.broken_specs[task]}",
                pytrace=False,
            )
        if runner is None:
            pytest.skip(f"task {task!r} is not collected (run the probes with its spec)")
        rewrite_problem = getattr(runner, "rewrite_problem", None)
        problem = rewrite_problem() if rewrite_problem is not None else None
        if problem is not None:
            pytest.skip(f"{task} {probe}: no verdict: {problem}")
        opts = self.session.options
        try:
            # An lm-eval task's documents are the harness's (its contamination: block in
            # the lmeval spec names their fields).
            lmeval_items = getattr(runner, "items", None)
            items = (
                lmeval_items
                if lmeval_items is not None
                else load_items(runner.spec, opts.data_dirs)
            )
        except LlmEvalError as exc:
            pytest.skip(str(exc))
        loaded = len(items)
        items = [i for i in items if i.id not in self.session.excluded]
        chosen = first_n(items, n or self.items)
        if not chosen:  # never a verdict on nothing
            if lmeval_items is not None and not loaded:
                why = "its lm-eval task gave no documents"
            else:  # an empty data file, or every item excluded: said as for its tests
                from ._collect import no_items_reason

                why = no_items_reason(self.session, runner.spec, loaded)
            pytest.skip(f"{task} {probe}: no item to probe: {why}")
        self._running, self._wrapped, self._resumed = (runner, probe), {}, {}
        self._probed = len(chosen)
        outcome: ProbeOutcome = getattr(self, f"_{probe}")(runner, chosen, k)
        # Not validated is the reason that holds whatever the items; then nothing counted.
        outcome = _only_if_counted(_only_if_validated(outcome))
        outcome.extra["requests"] = self._chunk_counts()
        self.session.add_probe(self._payload(outcome, self.alpha))
        return outcome

    # ------------------------------------------------------------------ resume

    def _model(self) -> Any:
        """The session's model for the running probe, its calls kept chunk by chunk."""
        return self._chunked("model", self.backend)

    def _ref(self) -> Any | None:
        """The reference model for the running probe (None without one), likewise."""
        ref = self.reference()
        return None if ref is None else self._chunked("reference", ref)

    def _chunked(self, role: str, backend: Any) -> Any:
        """``backend`` with the running probe's calls cut into fixed chunks
        (``contamination._resume``), each appended to
        ``contamination/requests/<task>-<probe>[-reference].jsonl`` in the run directory
        as it is computed and, unless ``run.resume=false``, taken from an interrupted run's
        file of the same key (``record.model_call_key``: the model, its settings and the
        backend code) instead of computed again."""
        if role not in self._wrapped:
            from pytest_llmeval.contamination import ChunkedBackend, NoStore

            wrapped = ChunkedBackend(backend, NoStore())
            wrapped.store = self._store(role, backend, wrapped.chunk)
            self._wrapped[role] = wrapped
        return self._wrapped[role]

    def _store(self, role: str, backend: Any, chunk: int) -> Any:
        from pytest_llmeval.contamination import NoStore
        from pytest_llmeval.record import RequestChunks, model_call_key, resumable_chunks

        assert self._running is not None
        runner, probe = self._running
        session, opts = self.session, self.session.options
        if role == "reference":
            sha256 = (self._reference_record or {}).get("sha256")
            revision = None
        else:
            sha256 = session.evaluator.model_settings.get("model_sha256")
            revision = opts.model_revision
        if session.is_worker or (sha256 is None and revision is None):
            # An xdist worker writes no run directory; a served model without a stated
            # revision has nothing that tells a redeployed one apart. Chunked all the
            # same: the same numbers.
            return NoStore()
        key = model_call_key(backend.info(), sha256, revision, {"role": role, "chunk": chunk})
        name = f"{runner.spec.name}-{probe}" + ("-reference" if role == "reference" else "")
        found, sources = resumable_chunks(opts.output, name, key) if opts.resume else ({}, [])
        run = session.run_dir()
        self._resumed[role] = [str(s.resolve()) for s in sources]
        # Marked superseded when this session ends (it holds their chunks now).
        session.resumed_from.update(str(s) for s in sources)
        return RequestChunks(run.path, name, key, found)

    def _chunk_counts(self) -> dict[str, Any]:
        """What the running probe computed and reused, per model (the report's
        ``requests``; reuse also goes to eval.log)."""
        assert self._running is not None
        runner, probe = self._running
        counts: dict[str, Any] = {}
        for role, wrapped in self._wrapped.items():
            counts[role] = {**wrapped.counts.to_dict(), "reused_from": self._resumed.get(role, [])}
            if wrapped.counts.reused and not self.session.is_worker:
                self.session.run_dir().log(
                    f"contamination {runner.spec.name} {probe} ({role}): "
                    f"{wrapped.counts.reused} requests reused from "
                    f"{', '.join(self._resumed.get(role, []))}, "
                    f"{wrapped.counts.computed} computed"
                )
        return counts

    def _payload(self, outcome: ProbeOutcome, alpha: float) -> dict[str, Any]:
        """The outcome as plain data (it may travel from an xdist worker): the report to
        write, the flagged items' exclusion list when the verdict fired, and the summary."""
        import json
        import uuid

        extra = {"reference": self._reference_record} if self._reference_record else {}
        report = json.loads(strict_json.dumps({**outcome.to_dict(alpha), **extra}))
        flagged = None
        fired = outcome.verdict is not None and outcome.verdict.fired
        if fired and outcome.handling is not None and outcome.handling.flagged:
            flagged = outcome.handling.exclusion_list(
                (
                    f"{outcome.task}: items flagged by {outcome.probe} "
                    f"({outcome.report.score}, {outcome.report.null})",
                    f"target false-positive rate {outcome.report.fpr}; use with --llm-set "
                    "run.exclude",
                )
            )
        return {
            "id": uuid.uuid4().hex,
            "report": report,
            "flagged": flagged,
            "summary": outcome.summary(),
        }

    def _stamp(self, runner: TaskRunner, verdict: ContaminationVerdict) -> ContaminationVerdict:
        """``verdict`` with the prompts and dtype it was computed under and the number of
        items probed: its message says when they are not among those its false-alarm rate
        was measured under, or outside the numbers of items it was measured on."""
        from dataclasses import replace

        from pytest_llmeval.contamination import conditions_text, seen_conditions

        dtype = self.backend.info().get("dtype")
        ran = conditions_text(runner.shots, runner.template is not None, dtype and str(dtype))
        # What reached the statistic: membership scores the item's text without a prompt.
        return replace(
            verdict, conditions=seen_conditions(verdict.validated_as, ran), items=self._probed
        )

    def _published_correct(self, runner: TaskRunner, items: list[Item]) -> dict[str, bool]:
        """Right/wrong of each item as published (cached per task: probes share them)."""
        known = self._correct.setdefault(runner.spec.name, {})
        missing = [i for i in items if i.id not in known]
        if missing:
            for r in runner.run(missing, self._model()):
                known[r.item_id] = bool(r.correct)
        return {i.id: known[i.id] for i in items}

    def _option_shuffle(self, runner: TaskRunner, items: list[Item], k: int | None) -> ProbeOutcome:
        from pytest_llmeval.contamination import (
            moved_answers,
            option_shuffle_probe,
            option_shuffle_verdict,
        )

        seed = self.session.options.seed
        report = option_shuffle_probe(runner, items, self._model(), k=k or 1, seed=seed)
        self._correct.setdefault(runner.spec.name, {}).update(
            {i.item_id: i.canonical_correct for i in report.items}
        )
        answers = moved_answers(report)
        verdict = option_shuffle_verdict(runner.spec.name, answers, self.alpha, seed=seed)
        verdict = self._stamp(runner, verdict)
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
            return ProbeOutcome(
                runner.spec.name,
                "option_shuffle",
                report,
                None,
                no_verdict=reason,
                inspection=verdict,
            )
        return ProbeOutcome(runner.spec.name, "option_shuffle", report, verdict)

    def _canonical_order(
        self, runner: TaskRunner, items: list[Item], k: int | None
    ) -> ProbeOutcome:
        from pytest_llmeval.contamination import (
            canonical_order_test,
            option_fields,
            option_texts,
            order_verdict,
        )

        seed = self.session.options.seed
        report = canonical_order_test(runner, items, self._model(), k=k or 3, seed=seed)
        ref_backend = self._ref()
        ref_report = (
            canonical_order_test(runner, items, ref_backend, k=k or 3, seed=seed)
            if ref_backend is not None
            else None
        )
        fields, _ = option_fields(runner)
        options = {i.id: option_texts(i.doc, fields) for i in items}
        verdict = self._stamp(
            runner,
            order_verdict(
                report,
                options,
                self.alpha,
                reference=ref_report,
                reference_name=self._reference_name(),
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
            return ProbeOutcome(
                runner.spec.name,
                "canonical_order",
                report,
                None,
                no_verdict=reason,
                inspection=verdict,
            )
        extra = {"reference_report": ref_report.to_dict()}
        return ProbeOutcome(runner.spec.name, "canonical_order", report, verdict, extra=extra)

    def _number_rewrite(self, runner: TaskRunner, items: list[Item], k: int | None) -> ProbeOutcome:
        from pytest_llmeval.contamination import number_rewrite_probe

        report = number_rewrite_probe(runner, items, self._model(), seed=self.session.options.seed)
        self._correct.setdefault(runner.spec.name, {}).update(
            {i.item_id: i.canonical_correct for i in report.items}
        )
        verdict = self._stamp(runner, paired_verdict(report, self.alpha))
        return ProbeOutcome(runner.spec.name, "number_rewrite", report, verdict)

    def _entity_rewrite(self, runner: TaskRunner, items: list[Item], k: int | None) -> ProbeOutcome:
        from pytest_llmeval.contamination import entity_rewrite_probe

        report = entity_rewrite_probe(runner, items, self._model(), seed=self.session.options.seed)
        verdict = self._stamp(runner, paired_verdict(report, self.alpha))
        return ProbeOutcome(runner.spec.name, "entity_rewrite", report, verdict)

    def _membership(self, runner: TaskRunner, items: list[Item], k: int | None) -> ProbeOutcome:
        from pytest_llmeval.contamination import (
            handling,
            membership_flags,
            membership_records,
            rewrite_kind,
        )

        opts = self.session.options
        model = self._model()
        mine = membership_records(runner, items, model, perturbations=k or 3, seed=opts.seed)
        ref_backend = self._ref()
        ref = (
            membership_records(runner, items, ref_backend, perturbations=k or 3, seed=opts.seed)
            if ref_backend is not None
            else None
        )
        flags = membership_flags(
            runner.spec.name,
            mine,
            reference=ref,
            reference_name=self._reference_name(),
            fpr=self.fpr,
            rewrites=rewrite_kind(runner),
        )
        verdict = self._stamp(runner, flags.verdict(self.alpha))
        correct = self._published_correct(runner, items)
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
            return ProbeOutcome(
                runner.spec.name,
                "membership",
                flags,
                None,
                plan,
                no_verdict=reason,
                inspection=verdict,
            )
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
            return ProbeOutcome(
                runner.spec.name,
                "membership",
                flags,
                None,
                plan,
                no_verdict=reason,
                inspection=verdict,
            )
        return ProbeOutcome(runner.spec.name, "membership", flags, verdict, plan)

    def _ts_guessing(self, runner: TaskRunner, items: list[Item], k: int | None) -> ProbeOutcome:
        from pytest_llmeval.contamination import (
            guessing_verdict,
            ts_guessing_probe,
            validation_note,
        )

        seed = self.session.options.seed
        report = ts_guessing_probe(runner, items, self._model(), seed=seed)
        ref_backend = self._ref()
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
        verdict = self._stamp(
            runner,
            guessing_verdict(report, ref, self.alpha, reference_name=self._reference_name()),
        )
        extra = {"reference_report": ref.to_dict()}
        return ProbeOutcome(runner.spec.name, "ts_guessing", report, verdict, extra=extra)

    def _circular(self, runner: TaskRunner, items: list[Item], k: int | None) -> ProbeOutcome:
        from pytest_llmeval.contamination import (
            circular_probe,
            circular_verdict,
            option_fields,
            option_texts,
        )

        report = circular_probe(runner, items, self._model())
        ref_backend = self._ref()
        ref = circular_probe(runner, items, ref_backend) if ref_backend is not None else None
        fields, _ = option_fields(runner)
        verdict = self._stamp(
            runner,
            circular_verdict(
                report,
                self.alpha,
                options={i.id: option_texts(i.doc, fields) for i in items},
                reference=ref,
                reference_name=self._reference_name(),
            ),
        )
        # Without a reference: the exact test against 1/n on exchangeable items, given when
        # its false alarms hold the level on known-clean items (validation.json: two
        # families, MMLU and C-Eval, 50 items to the whole pools); _only_if_validated
        # decides, as for every verdict.
        return ProbeOutcome(runner.spec.name, "circular", report, verdict)

    # ------------------------------------------------------------------ verdict

    def check(self, outcome: ProbeOutcome) -> None:
        """Fail the calling test with the verdict when it fires (with the scores on all,
        clean and flagged items and the policy for membership flags)."""
        if outcome.verdict is None:
            pytest.skip(outcome.no_verdict or f"{outcome.task} {outcome.probe}: no verdict")
        if not outcome.verdict.fired:
            return
        lines = [outcome.verdict.message()]
        if outcome.handling is not None:
            lines.append("scores: " + "; ".join(s.describe() for s in outcome.handling.scores))
            lines.append(f"handling: {outcome.handling.policy}")
            if outcome.handling.flagged:
                lines.append(
                    f"flagged items: contamination/{outcome.task}-flagged.txt in the run "
                    "directory (--llm-set run.exclude format)"
                )
        pytest.fail("\n".join(lines), pytrace=False)
