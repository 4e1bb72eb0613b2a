"""The terminal summary: one row per task, then item details when asked for."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval.gate import TaskDecision
from pytest_llmeval.record import decoding_lines, deselected_lines, prompt_lines

from ._collect import describe
from ._session import LlmEvalSession

AUTO_SHOW_MAX_ITEMS = 5
ERRORS_SHOWN = 5


def _pct(x: float) -> str:
    return "  n/a" if math.isnan(x) else f"{100 * x:5.1f}"


def write_probes(session: LlmEvalSession, tr: Any) -> None:
    """One line per contamination probe (its verdict with its null, or why it has none),
    and for membership flags that fired or flagged items the scores on all, clean and
    flagged items and the policy. From this process or xdist workers alike."""
    if not session.probe_summaries:
        return
    tr.write_sep("=", "llmeval contamination probes")
    colours = {"possible contamination": "red", "no sign of contamination": "green"}
    for summary in session.probe_summaries:
        tr.write_line(summary["text"], **{colours.get(summary["outcome"], "yellow"): True})
        for line in summary["details"]:
            tr.write_line(f"    {line}")
    if not session.decisions:
        # No scored task, so no summary table carried the tasks that did not run (a run of
        # probes alone deselects its tasks' items): they follow the probes, as in summary.md.
        write_not_run(session, tr)


def write_summary(session: LlmEvalSession, tr: Any) -> None:
    """The summary after a run: the task table, the floors, what the scores were computed
    with, notes per task, the tasks that fail, warnings, the baseline comparison, the
    failure classes, the harness's own results, the item budget and where the records are."""
    if not session.decisions:
        return
    _write_task_table(session, tr)
    write_not_run(session, tr)
    write_floors(session, tr)
    _write_settings(session, tr)
    _write_task_notes(session, tr)
    _write_floor_failures(session, tr)
    _write_run_warnings(session, tr)
    _write_baseline(session, tr)
    write_failures(session, tr)
    _write_lmeval_and_plan(session, tr)
    _write_record_paths(session, tr)


def _write_task_table(session: LlmEvalSession, tr: Any) -> None:
    """One row per task (its other metrics and repeats below it), and whether the scores
    cover only part of the tasks."""
    tr.write_sep("=", "llmeval summary")
    header = (
        f"{'task':<16} {'items':>11} {'metric':<11} {'score':>6} {'95% CI':>13} "
        f"{'floor':>6} {'status':<10} {'time':>8}"
    )
    tr.write_line(header)
    partial = False
    for v in session.decisions:
        items = f"{v.n}/{v.total}"
        partial = partial or (
            v.status != "skipped" and v.n + len(session.tallies[v.task].not_fitting) < v.total
        )
        ci = f"[{_pct(v.estimate.ci_low).strip()},{_pct(v.estimate.ci_high).strip()}]"
        if not v.n:  # no item was scored: no interval (the empty one spans 0-100)
            ci = "-"
        floor = "-" if v.floor is None else _pct(v.floor)
        markup = (
            {"red": True}
            if v.failed
            else {"green": True}
            if v.status == "pass"
            else {"yellow": True}
            if v.status == "undecided"
            else {}
        )
        tr.write_line(
            f"{v.task:<16} {items:>11} {v.metric:<11} {_pct(v.score):>6} {ci:>13} "
            f"{floor:>6} {v.status:<10} {v.seconds:7.1f}s",
            **markup,
        )
        for name, est in session.tallies[v.task].metric_estimates().items():
            ci = f"[{_pct(est.ci_low).strip()},{_pct(est.ci_high).strip()}]"
            tr.write_line(f"{'':<16} {'':>11} {name:<11} {_pct(est.value):>6} {ci:>13}")
        if v.repeats:
            runs = ", ".join(_pct(r).strip() for r in v.repeats)
            tr.write_line(
                f"{'':<16} {len(v.repeats)} repeats: median {_pct(v.score).strip()}, "
                f"spread {100 * v.spread:.1f} points ({runs})"
            )
    if partial:
        tr.write_line(
            "partial: scores cover only the selected items (--llm-limit or -k), not whole tasks",
            yellow=True,
        )


def write_not_run(session: LlmEvalSession, tr: Any) -> None:
    """One line per skipped task (its reason and what to pass), one line naming the tasks
    that ``-k``/``-m`` deselected: a task that did not run is never a bare ``s``."""
    skipped = [n for n in session.not_run if n.state == "skipped"]
    for n in skipped:
        tr.write_line(f"SKIPPED {n.task}: {n.reason}; to run it: {n.fix}", yellow=True)
    deselected = [n.task for n in session.not_run if n.state == "deselected"]
    probed = (str(s["task"]) for s in session.probe_summaries)
    for line in deselected_lines(deselected, probed):
        tr.write_line(line)


def _write_settings(session: LlmEvalSession, tr: Any) -> None:
    """What the scores were computed with: the prompts, an exclusion list, an agreement
    check."""
    configs = {v.task: session.tallies[v.task].config for v in session.decisions}
    for line in prompt_lines(configs):
        tr.write_line(f"prompts: {line}")
    for line in decoding_lines(configs):
        tr.write_line(f"decoding: {line}")
    if session.options.exclude is not None:
        tr.write_line(
            f"excluded: the {len(session.excluded)} item ids listed in {session.options.exclude} "
            f"(sha256 {str(session.exclude_sha256)[:12]}); scores are on the reduced sets",
            yellow=True,
        )
    if session.agreement is not None:
        from pytest_llmeval.eval.agreement import summary_line

        tr.write_line(
            f"{summary_line(session.agreement)} "
            f"({session.options.agreement}, sha256 {str(session.agreement_sha256)[:12]})"
        )


def _write_task_notes(session: LlmEvalSession, tr: Any) -> None:
    """What a task's score does not show: outputs with cues of recall, subsets without rows,
    items that do not fit the context window (each kind for every task, in that order)."""
    decisions = session.decisions
    for v in decisions:
        cues = session.tallies[v.task].recall_cues
        if cues:
            kinds: dict[str, int] = {}
            for found in cues.values():
                for kind in {c.split(":", 1)[0] for c in found}:
                    kinds[kind] = kinds.get(kind, 0) + 1
            listed = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
            tr.write_line(
                f"{v.task}: {len(cues)} outputs show cues of recall ({listed}): listed in "
                "metrics_summary.json; see docs/CONTAMINATION.md",
                yellow=True,
            )
    for v in decisions:
        empty = session.tallies[v.task].empty_subsets
        if empty:  # a subset without rows gives no item: say which subsets the score covers
            ran = session.tallies[v.task].subsets_ran()
            listed = ", ".join(f"{name} {n}" for name, n in ran.items()) or "none"
            tr.write_line(
                f"{v.task}: scored items of {len(ran)} subset(s): {listed}; "
                f"{len(empty)} subset(s) have no rows, not scored: "
                + ", ".join(f"{name} ({where})" for name, where in empty.items()),
                yellow=True,
            )
    for v in decisions:
        not_fitting = session.tallies[v.task].not_fitting
        if not_fitting:
            window = next(iter(not_fitting.values())).get("context_window")
            tr.write_line(
                f"{v.task}: {len(not_fitting)} of {v.selected} items do not fit the context "
                f"window ({window} tokens) and are not scored: listed in metrics_summary.json",
                yellow=True,
            )


def _write_floor_failures(session: LlmEvalSession, tr: Any) -> None:
    """A line for each task that fails its floor, has errors or did not run all its items."""
    for v in session.decisions:
        if v.floor is not None and v.status in ("fail", "undecided") and v.floor_fails:
            tr.write_line(
                f"FAIL {v.task}: {v.metric} {v.score:.4f} "
                + (
                    f"is below its floor {v.floor}"
                    if v.score < v.floor
                    else f"does not clear its floor {v.floor} with confidence"
                )
                + f" ({status_reason(v)}; policy {v.policy})",
                red=True,
            )
        elif v.status == "error":
            tally = session.tallies[v.task]
            for line in tally.nondeterministic:
                tr.write_line(f"ERROR {v.task}: non-deterministic item {line}", red=True)
            for line in tally.errors[:ERRORS_SHOWN]:
                tr.write_line(f"ERROR {v.task}: {line}", red=True)
            if len(tally.errors) > ERRORS_SHOWN:
                tr.write_line(
                    f"ERROR {v.task}: {len(tally.errors) - ERRORS_SHOWN} more item(s) could "
                    "not be evaluated (all listed in metrics_summary.json)",
                    red=True,
                )
        elif v.status == "incomplete":
            tr.write_line(
                f"INCOMPLETE {v.task}: only {v.n} of {v.selected} selected items ran", red=True
            )


def _write_run_warnings(session: LlmEvalSession, tr: Any) -> None:
    """Saturated gates, stable against fresh scores, the warnings about limits."""
    for v in session.decisions:
        tally = session.tallies[v.task]
        if tally.saturation and v.floor is not None and v.status in ("pass", "fail"):
            advice = f" Consider {tally.successor} as the gate." if tally.successor else ""
            tr.write_line(
                f"WARNING {v.task} is a saturated gate: {tally.saturation}{advice}", yellow=True
            )
    for line in stable_vs_fresh(session):
        tr.write_line(line, yellow=True)
    for line in session.limit_warnings:
        tr.write_line(f"WARNING {line}", yellow=True)


def _write_baseline(session: LlmEvalSession, tr: Any) -> None:
    """The comparison with --llm-baseline and the gate's failures."""
    if session.comparison is not None:
        from pytest_llmeval.record import format_comparison

        tr.write_sep("-", f"llmeval baseline: {session.options.baseline}")
        for line in format_comparison(session.comparison):
            tr.write_line(line)
    for failure in session.gate_failures:
        tr.write_line(f"BASELINE GATE ({session.options.baseline_fail}): {failure}", red=True)


def _write_lmeval_and_plan(session: LlmEvalSession, tr: Any) -> None:
    """The lm-evaluation-harness results, and the item budget (plan.json)."""
    if session.lmeval_results is not None:
        from ._session import lmeval_lines

        for line in lmeval_lines(session.lmeval_results):
            tr.write_line(line)
    if session.plans:
        from pytest_llmeval.gate import PlanSettings, format_plan

        tr.write_sep("-", "llmeval item budget (plan.json)")
        settings = PlanSettings(
            rule=session.options.floor_rule, policy=session.options.floor_policy
        )
        for line in format_plan(session.plans, settings):
            tr.write_line(line)


def no_floor_hint(decisions: Sequence[TaskDecision], run: Path) -> list[str]:
    """When tasks were scored and none has a floor, the run decided nothing: say so, and
    how to make floors of it (the README's "A gate that decides")."""
    scored = [v for v in decisions if v.status != "skipped"]
    if not scored or any(v.floor is not None for v in scored):
        return []
    return [
        "no task has a floor: this run gates nothing (exit status 0 whatever the scores). "
        "To gate on it, make it the reference:",
        f"  rerun with --llm-set gate.floors_from={run} (each floor: the lower end of this "
        "run's 95% "
        "interval),",
        f"  or write them into your ini: python -m pytest_llmeval.record floors {run} "
        "--write=pyproject.toml",
    ]


def _write_record_paths(session: LlmEvalSession, tr: Any) -> None:
    """Where the run record and its report are (or why the report is missing)."""
    if session.run is not None:
        stopped = f" (interrupted: {session.interrupted}; resumable)" if session.interrupted else ""
        tr.write_line(f"run record: {session.run.path}{stopped}")
        if session.report_path is not None:
            tr.write_line(f"run report: {session.report_path}")
        if not session.interrupted:
            for line in no_floor_hint(session.decisions, session.run.path):
                tr.write_line(line, yellow=True)
        if session.report_error is not None:
            tr.write_line(
                f"WARNING report.html was not written ({session.report_error}); the records are "
                "complete: rebuild it with python -m pytest_llmeval.record report "
                f"{session.run.path}",
                yellow=True,
            )


def write_warnings(session: LlmEvalSession, tr: Any) -> None:
    """Floors and exclusions that matched nothing (found at collection)."""
    for line in session.notes.get("warnings", []):
        tr.write_line(f"WARNING {line}", yellow=True)


def status_reason(v: TaskDecision) -> str:
    """Why a task has its status: its 95% interval against the floor."""
    assert v.floor is not None
    ci = f"[{_pct(v.estimate.ci_low).strip()}, {_pct(v.estimate.ci_high).strip()}]"
    floor = _pct(v.floor).strip()
    if v.status == "pass":
        return f"pass: the 95% interval {ci} clears {floor}"
    if v.status == "fail":
        return f"fail: the 95% interval {ci} lies below {floor}"
    return f"undecided: {floor} lies inside the 95% interval {ci}"


def write_floors(session: LlmEvalSession, tr: Any) -> None:
    """One line per task with a floor: its status against the interval and where it came
    from (the rule and the reference run, an option, the spec)."""
    from pytest_llmeval.gate import POLICY_TEXT
    from pytest_llmeval.record import floor_source_text

    floored = [v for v in session.decisions if v.floor is not None and v.status != "skipped"]
    if not floored:
        return
    policy = session.options.floor_policy
    tr.write_line(f"floors (policy {policy}: {POLICY_TEXT[policy]}):")
    for v in floored:
        if v.status in ("pass", "fail", "undecided"):
            outcome = status_reason(v)
            if v.status == "undecided":
                outcome += ": fails" if v.floor_fails else ": passes"
        else:
            outcome = v.status
        tr.write_line(
            f"  {v.task}: {outcome}; floor {floor_source_text(v.floor_source)}",
            **({"red": True} if v.failed else {}),
        )


def write_details(session: LlmEvalSession, tr: Any) -> None:
    show = session.options.show
    results = [r for t in session.tallies.values() for r in t.results.values()]
    if show == "none" or not results:
        return
    if show == "auto":
        if len(results) > AUTO_SHOW_MAX_ITEMS:
            return
    elif show == "wrong":
        results = [r for r in results if not r["correct"]]
    for r in results:
        tr.write_sep("-", f"llmeval item {r['item_id']}")
        tr.write_line(describe(r))


def report_teststatus(report: pytest.TestReport) -> tuple[str, Any, Any] | None:
    """Wrong answers are their own outcome: visible (yellow), but not failures (unless
    --llm-set gate.strict=true). The controller reports them as failed with the reason
    (``record._junit``), so that JUnit XML and pytest-html count them as not passed; the
    plugin keeps them out of pytest's failure count (``_outcomes.py``). A task's gate (its
    own test case at the session's end) is counted on the last line by its outcome
    (``gate failed``, ``gate passed``, ``gate skipped``) without a progress letter: the
    llmeval summary above it shows each task's status."""
    if getattr(report, "llmeval_gate", False):
        if report.when == "call" or (report.when == "setup" and report.skipped):
            return f"gate {report.outcome}", "", ""
        return "", "", ""
    if report.when == "call" and getattr(report, "llmeval_wrong", False):
        return "wrong", "w", ("WRONG", {"yellow": True})
    if report.when != "call" or not report.passed:
        return None
    for name, value in report.user_properties:
        if name == "llmeval_result" and isinstance(value, dict) and not value.get("correct"):
            return "wrong", "w", ("WRONG", {"yellow": True})
    return None


def stable_vs_fresh(session: LlmEvalSession) -> list[str]:
    """For each capability where a stable and a fresh task both ran: their scores side by
    side. A stable score far above the fresh one is a sign of contamination (or of a harder
    fresh set); the contamination probes and the n-gram scan tell which."""
    by_capability: dict[str, dict[str, list[str]]] = {}
    for v in session.decisions:
        tally = session.tallies[v.task]
        if tally.capability and v.n and not math.isnan(v.score):
            groups = by_capability.setdefault(tally.capability, {})
            groups.setdefault(tally.freshness, []).append(f"{v.task} {_pct(v.score).strip()}%")
    return [
        f"{capability}: stable {', '.join(groups['stable'])} vs fresh {', '.join(groups['fresh'])}"
        " (a stable score far above the fresh one suggests contamination; see -m contamination)"
        for capability, groups in sorted(by_capability.items())
        if groups.get("stable") and groups.get("fresh")
    ]


def write_catalog(session: LlmEvalSession, tr: Any) -> None:
    rows = session.catalog_rows()
    tr.write_sep("=", "llmeval capability catalog")
    if not rows:
        tr.write_line("no task specs collected")
        return
    columns = ("task", "capability", "style", "freshness", "markers", "items")
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}
    tr.write_line("  ".join(c.ljust(widths[c]) for c in columns) + "  notes")
    for r in rows:
        tr.write_line("  ".join(r[c].ljust(widths[c]) for c in columns) + "  " + r["notes"])


def write_failures(session: LlmEvalSession, tr: Any) -> None:
    """The failure classes per task, then the sampled failed items (answer in output first)."""
    for report in session.failure_reports:
        if not report.n_failed:
            continue
        tr.write_sep("-", f"llmeval failures: {report.task}")
        dist = ", ".join(
            f"{k} {v} ({100 * v / report.n_failed:.0f}%)" for k, v in report.distribution.items()
        )
        tr.write_line(f"{report.n_failed} of {report.n_items} items failed: {dist}")
        if report.answer_in_output:
            tr.write_line(
                f"{report.answer_in_output} failed item(s) contain the target in their output: "
                "check the extraction and stop sequences first",
                yellow=True,
            )
        for s in report.samples:
            flag = " [target in output]" if s.answer_in_output else ""
            tr.write_line(
                f"  {s.item_id}: {s.kind}{flag}: extracted {s.extracted!r}, target {s.target!r}"
            )
