"""The per-run state of the plugin, stored on ``config.stash``.

One object per pytest process. Items ask it for their results, which the
:class:`~pytest_llmeval.compute.Evaluator` computes in batches. On the controller
(or in a run without xdist) it also folds item reports into task tallies, decides floors,
writes the run directory and compares with a baseline.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import math
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from pytest_llmeval import _json as strict_json
from pytest_llmeval._errors import SpecError
from pytest_llmeval.compute import WHOLE_TASK_DIST, Evaluator
from pytest_llmeval.dataset import Item
from pytest_llmeval.eval import FailureReport, ItemResult, TaskRunner, analyse_failures
from pytest_llmeval.gate import (
    TaskDecision,
    TaskTally,
    decide_task,
    gate_failures,
    limit_warning,
    parse_gate,
    summary_document,
    summary_tasks,
)
from pytest_llmeval.record import (
    CONFIG,
    MARKDOWN,
    SUMMARY,
    RunDir,
    mark_superseded,
    new_run_dir,
    output_file,
    skipped_entry,
    summary_entry,
    summary_row,
    write_json_atomic,
)
from pytest_llmeval.task import TaskSpec

from ._notrun import NotRun, skip_reason, tasks_not_run
from ._options import CLI_FLOOR, Options
from ._progress import install as install_progress

if TYPE_CHECKING:
    from pytest_llmeval.gate import Comparison, ReferenceRun, TaskPlan
    from pytest_llmeval.lmeval import LmEvalRunner


class SelectedItem(Protocol):
    """A benchmark item's test as the session sees it (``_collect.EvalItem``): its task,
    its item, why it cannot be evaluated (found at collection, or None), its node id and
    its user properties. The session never imports the collection module (which imports
    it)."""

    task: str
    item: Item
    problem: str | None
    user_properties: list[tuple[str, object]]

    @property
    def nodeid(self) -> str: ...


def _read_exclusions(path: Path | None) -> tuple[frozenset[str], str | None]:
    """Item ids of an exclusion file (the first word of each line; blank lines and ``#``
    comments skipped) and the file's SHA256."""
    if path is None:
        return frozenset(), None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise pytest.UsageError(f"run.exclude: cannot read {path}: {exc}") from None
    ids = []
    for line in data.decode("utf-8", "replace").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            ids.append(line.split()[0])
    return frozenset(ids), hashlib.sha256(data).hexdigest()


def _read_agreement(path: Path | None) -> tuple[dict[str, Any] | None, str | None]:
    """An agreement record (``python -m pytest_llmeval.eval.agreement``) and its SHA256."""
    if path is None:
        return None, None
    from pytest_llmeval._errors import LlmEvalError
    from pytest_llmeval.eval.agreement import read_agreement

    try:
        return read_agreement(path)
    except LlmEvalError as exc:
        raise pytest.UsageError(f"report.agreement: {exc}") from None


def _defined_twice(name: str, first: str, second: str) -> SpecError:
    """Two spec files (or harness tasks) give the same task name: a spec error of the
    second, naming both (collected as that file's error, like any spec error)."""
    return SpecError(
        second,
        "task",
        f"the task name {name!r} is defined twice: in {first} and in {second}; task names "
        "must be unique among the collected specs: rename one of them",
    )


def _item_line(item_id: str, message: str) -> str:
    """An item's error as one line that names the item once."""
    return message if item_id in message else f"{item_id}: {message}"


def _read_reference(path: Path | None) -> ReferenceRun | None:
    """The reference run of ``gate.floors_from``, read at start-up (before any model loads);
    a directory without a finished run's summary is a usage error naming the path."""
    if path is None:
        return None
    from pytest_llmeval._errors import LlmEvalError
    from pytest_llmeval.gate import ReferenceRun
    from pytest_llmeval.record import refuse_damaged

    try:
        refuse_damaged(path, "a floors source")
        return ReferenceRun(path, needed_by="gate.floors_from")
    except LlmEvalError as exc:
        raise pytest.UsageError(f"gate.floors_from: {exc}") from None


# The user property that carries a contamination probe's outcome to the controller.
PROBE_PROPERTY = "llmeval_probe"


def task_meta(
    spec: TaskSpec, total_items: int, floor_source: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What the controller needs to know of a task; travels in every item report."""
    return {
        "floor": spec.floor,
        "floor_source": floor_source,
        "metric": spec.metric,
        "total_items": total_items,
        "source": spec.source,
        "saturation": spec.catalog.saturation,
        "successor": spec.catalog.successor,
        "capability": spec.catalog.capability,
        "freshness": spec.catalog.freshness,
        **({"lmeval": _lmeval_meta(spec)} if spec.lmeval is not None else {}),
    }


def lmeval_lines(results: dict[str, Any]) -> list[str]:
    """One line per harness group: its metrics over the subtasks that ran."""
    lines = []
    for name, group in sorted((results.get("groups") or {}).items()):
        metrics = ", ".join(
            f"{k}={v:.4f}" for k, v in group.items() if "," in k and isinstance(v, float)
        )
        ran = f"{group['ran']}/{group['subtasks']} subtasks, n={group['sample_len']}"
        lines.append(f"lm-eval group {name}: {metrics or 'no aggregate metric'} ({ran})")
    return lines


def _lmeval_meta(spec: TaskSpec) -> dict[str, Any] | None:
    from pytest_llmeval.lmeval import lmeval_meta

    return lmeval_meta(spec)


class LlmEvalSession:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.options = Options.from_config(config)
        # Model-generated code runs only with the kernel's filesystem isolation, unless the
        # user opted out (the sandbox then refuses nothing and records what it lacked).
        from pytest_llmeval.sandbox import allow_unisolated

        allow_unisolated(self.options.allow_unisolated_code)
        self.is_worker = hasattr(config, "workerinput")
        self.specs: dict[str, TaskSpec] = {}
        self.total_items: dict[str, int] = {}
        self.runners: dict[str, TaskRunner] = {}
        self.selected: dict[str, list[SelectedItem]] = {}
        self.evaluator = Evaluator(self.options, config.rootpath)
        self.evaluator.progress = install_progress(config, self.options.progress)  # display
        # A worker streams a generative task's whole selection only when xdist gives it
        # all of the task's items (a dist mode that spreads them would compute them twice).
        dist = config.getvalue("dist") if self.is_worker else None
        self.evaluator.whole_tasks = not self.is_worker or dist in WHOLE_TASK_DIST
        self.environment_sent = False
        self.task_config_sent: set[str] = set()
        # controller side
        self.tallies: dict[str, TaskTally] = {}
        self.environment: dict[str, Any] = {}
        self.run: RunDir | None = None
        self.decisions: list[TaskDecision] = []
        # The llm_probe fixture's outcomes, as ProbeOutcome.summary() gives them (from this
        # process or an xdist worker), for the terminal and the Markdown summary.
        self.probe_summaries: list[dict[str, Any]] = []
        self._probes_kept: set[str] = set()
        self.current_item: pytest.Item | None = None  # the test running in this process
        self.comparison: Comparison | None = None
        # lm-evaluation-harness tasks and groups, as the harness aggregates them.
        self.lmeval_results: dict[str, Any] | None = None
        self.gate_failures: list[str] = []
        self.resumed_from: set[str] = set()
        self.failure_reports: list[FailureReport] = []
        # report.html of the run (or why it could not be written: a warning, never a failure)
        self.report_path: Path | None = None
        self.report_error: str | None = None
        self.started = _dt.datetime.now()
        self.excluded, self.exclude_sha256 = _read_exclusions(self.options.exclude)
        self.exclusions_matched: set[str] = set()
        # Found at collection (each process): warnings for the summary, and on an xdist
        # worker an option error that stops it before the model loads.
        self.notes: dict[str, list[str]] = {}
        self.stop_reason: str | None = None
        # Found while collecting spec files: warnings (a subset whose data has no rows, a
        # spec whose error the run does not select), and each spec error by file node id.
        self.collect_warnings: list[str] = []
        self.task_warnings: dict[str, list[str]] = {}  # shown when the task is selected
        self.spec_errors: dict[str, str] = {}
        self.broken_specs: dict[str, str] = {}  # task name -> its spec's collection error
        # Controller: each process's environment (xdist workers by id), and why the run
        # stopped before its end (None: it ran to the end).
        self.environments: dict[str, dict[str, Any]] = {}
        self.interrupted: str | None = None
        self.done_nodeids: set[str] = set()  # benchmark items that ran (or were skipped)
        # floors: where each registered task's floor came from, and the tasks whose floor
        # --llm-set gate.floors_from could not make (an error only if the task is selected)
        self.floor_sources: dict[str, dict[str, Any]] = {}
        self.floor_errors: dict[str, str] = {}
        self.reference = _read_reference(self.options.floors_from)
        self.floor_block: str | None = None
        self.plans: list[TaskPlan] = []
        self.limit_warnings: list[str] = []
        # The collected tasks that ran no item (skipped, deselected): known after decide().
        self.not_run: list[NotRun] = []
        self.deselected_tasks: set[str] = set()  # tasks with items that -k/-m deselected
        self.agreement, self.agreement_sha256 = _read_agreement(self.options.agreement)
        if self.options.baseline_fail and not self.is_worker:
            try:
                parse_gate(self.options.baseline_fail)
            except ValueError as exc:
                raise pytest.UsageError(f"--llm-set gate.baseline_rule: {exc}") from None

    # ---------------------------------------------------------------- collection

    def register_task(self, spec: TaskSpec) -> TaskSpec:
        spec = self._apply_floor(spec)
        existing = self.specs.get(spec.name)
        if existing is not None and existing.source != spec.source:
            raise _defined_twice(spec.name, existing.source, spec.source)
        self.specs[spec.name] = spec
        self.runners[spec.name] = TaskRunner(
            spec, self.options.data_dirs, self.options.chat_settings()
        )
        return spec

    def register_lmeval(self, spec: TaskSpec) -> list[LmEvalRunner]:
        """The runners of the harness's leaf tasks for an ``lmeval`` spec, each registered
        as a task of its own (floor applied: ``--llm-floor lmeval-<task>=X`` or the spec's)."""
        from pytest_llmeval.dataset import hub_allowed
        from pytest_llmeval.lmeval import expand

        runners = expand(
            spec,
            self.options.data_dirs,
            self.options.chat_settings(),
            limit=self.options.limit,
            allow_hub=hub_allowed(),
        )
        out: list[LmEvalRunner] = []
        for runner in runners:
            leaf = self._apply_floor(runner.spec)
            existing = self.specs.get(leaf.name)
            if existing is not None and existing.source == leaf.source:
                continue  # reached again (a task named and in a named group): once
            if existing is not None:
                raise _defined_twice(leaf.name, existing.source, leaf.source)
            assert leaf.lmeval is not None and leaf.lmeval.metric is not None
            metric = leaf.lmeval.metric.partition(",")[0]
            aggregation = leaf.lmeval.aggregation.get(metric)
            if leaf.floor is not None and aggregation != "mean":
                raise pytest.UsageError(
                    f"{leaf.source}: a floor for {leaf.name} is checked against the mean of "
                    f"its per-document {leaf.lmeval.metric}, but lm-eval aggregates that "
                    f"metric with {aggregation!r}: the mean is not the task's score. Gate on "
                    "a mean-aggregated metric (lmeval.metric) or drop the floor"
                )
            runner.spec = leaf
            self.specs[leaf.name] = leaf
            self.runners[leaf.name] = runner
            out.append(runner)
        return out

    def _apply_floor(self, spec: TaskSpec) -> TaskSpec:
        """The task's floor: ``--llm-floor`` on the command line, else ``gate.floors_from``,
        else the ini's ``llm_floors``, else the spec's; its source is kept for the records."""
        name = spec.name
        given = self.options.floor_sources.get(name)
        if given is not None and given["from"] == CLI_FLOOR:
            self.floor_sources[name] = dict(given)
            return replace(spec, floor=self.options.floors[name])
        if self.reference is not None:
            from pytest_llmeval._errors import LlmEvalError

            try:
                made = self.reference.floor(name, self.options.floor_rule)
            except LlmEvalError as exc:
                self.floor_errors[name] = str(exc)
            else:
                self.floor_sources[name] = made.to_dict()
                return replace(spec, floor=made.floor)
        if given is not None:
            self.floor_sources[name] = dict(given)
            return replace(spec, floor=self.options.floors[name])
        if spec.floor is not None:
            self.floor_sources[name] = {"from": "spec", "path": spec.source}
        return spec

    def catalog_rows(self) -> list[dict[str, str]]:
        """One row per collected task for ``--llm-show=catalog``."""
        rows = []
        for name, spec in sorted(self.specs.items()):
            cat = spec.catalog
            rows.append(
                {
                    "task": name,
                    "capability": cat.capability or "-",
                    "style": cat.style
                    or ("multiple_choice" if spec.mode == "multiple_choice" else "generative"),
                    "freshness": cat.freshness,
                    "markers": ",".join(spec.markers) or "-",
                    "items": str(self.total_items.get(name, "not installed")),
                    "notes": " ".join(
                        part
                        for part in (
                            cat.saturation,
                            f"Successor: {cat.successor}." if cat.successor else "",
                            f"Window: {spec.dataset.window.describe()}."
                            if spec.dataset.window
                            else "",
                        )
                        if part
                    ),
                }
            )
        return rows

    def set_selection(self, items: list[SelectedItem]) -> None:
        """The benchmark items selected to run (after -k, -m and deselection), by task."""
        self.selected = {}
        for item in items:
            # An item with a problem found at collection fails alone: never in a batch.
            if item.problem is None:
                self.selected.setdefault(item.task, []).append(item)
        if self.options.run_dir is not None and not self.is_worker:
            self._check_run_dir_tasks()
        missing = [self.floor_errors[t] for t in sorted(self.selected) if t in self.floor_errors]
        if missing:  # before any item runs, so before a model loads
            message = "gate.floors_from: " + "; ".join(missing)
            if not self.is_worker:
                raise pytest.UsageError(message)
            # An xdist worker cannot end the run with a usage error (xdist reports it as an
            # internal error without the message): every item fails at setup instead, with
            # the message, and no model is loaded.
            self.floor_block = message

    def _check_run_dir_tasks(self) -> None:
        """``run.dir`` combines one task per process into one run: a task whose items
        that directory already holds (an earlier process's) would get a second set of item
        records beside the first, under a summary of the second alone. Refused before any
        model loads, naming what to do."""
        assert self.options.run_dir is not None
        held = [
            task
            for task in sorted(self.selected)
            if (self.options.run_dir / output_file(task)).is_file()
            and (self.options.run_dir / output_file(task)).stat().st_size > 0
        ]
        if held:
            files = ", ".join(output_file(t) for t in held)
            raise pytest.UsageError(
                f"--llm-set run.dir={self.options.run_dir} already holds the items of "
                f"{', '.join(held)} ({files}, from an earlier run): a run directory records "
                "each task once. To run it again, give a new directory (or remove that one), "
                "or leave the option out for a new run under --llm-output"
            )

    def check_collection(self, items: list[SelectedItem]) -> None:
        """After collection (``items``: the benchmark items selected): floors and
        exclusions that match nothing. A floor given on the command line for a task that
        was not collected is an option error (before any model loads); one from the ini
        file, and exclusion ids that match no item, are warnings in the summary (ini floors
        are project-wide; exclusion lists are often shared between tasks)."""
        unknown = sorted(set(self.options.floors) - set(self.specs))
        tasks = ", ".join(sorted(self.specs)) or "none"
        given = [
            t for t in unknown if self.options.floor_sources.get(t, {}).get("from") == CLI_FLOOR
        ]
        if given:
            message = (
                f"--llm-floor: no task named {', '.join(repr(t) for t in given)} was "
                f"collected (tasks: {tasks}); check the name, or collect its spec file"
            )
            if not self.is_worker:
                raise pytest.UsageError(message)
            self.stop_reason = message  # a worker cannot raise here: its items fail
        warnings = [
            *self.collect_warnings,
            *(
                f"llm_floors (ini): no collected task named {t!r} (tasks: {tasks}); "
                "its floor holds nothing in this run"
                for t in unknown
                if t not in given
            ),
        ]
        floored = [t for t in sorted(self.selected) if self.specs[t].floor is not None]
        # (floors given on the command line without a model are a usage error: _options)
        if self.options.model is None and floored and not self.config.option.collectonly:
            shown = ", ".join(
                f"{t} {self.specs[t].floor} ({self.floor_sources.get(t, {}).get('from', 'spec')})"
                for t in floored
            )
            warnings.append(
                f"no model to evaluate (--llm-model is not set): the floors of {shown} "
                "were not checked; their items are skipped"
            )
        if self.options.backend == "openai" and self.options.model_revision is None:
            warnings.append(
                f"--llm-model={self.options.model} is served by {self.options.base_url} and "
                "no revision of its weights is known (the server reports none): resume across "
                "server restarts cannot tell a redeployed model apart; pass "
                "--llm-set openai.model_revision=COMMIT-OR-DIGEST, or "
                "--llm-set run.resume=false"
            )
        unmatched = sorted(self.excluded - self.exclusions_matched)
        if unmatched and self.options.exclude is not None:
            shown = ", ".join(unmatched[:5]) + (", ..." if len(unmatched) > 5 else "")
            warnings.append(
                f"--llm-set run.exclude {self.options.exclude}: {len(unmatched)} of "
                f"{len(self.excluded)} ids match no item of the collected tasks ({shown})"
            )
            self.notes["unmatched_exclusions"] = unmatched
        if warnings:
            self.notes["warnings"] = warnings
        if items and self.notes:  # the notes reach the controller with the first report
            items[0].user_properties.append(("llmeval_notes", self.notes))

    # ---------------------------------------------------------------- compute side

    def result_for(self, item: SelectedItem) -> tuple[ItemResult, list[str]]:
        """This item's result (computed with the next pending items of its task)."""
        selected = self.selected.get(item.task, [item])
        # The selection is only listed on a cache miss (once per batch, not once per item).
        return self.evaluator.results(
            self.runners[item.task], item.item, lambda: [it.item for it in selected]
        )

    def properties_for(self, item: SelectedItem, result: ItemResult, log: list[str]) -> list[Any]:
        """User properties that carry an item's outcome to the controller."""
        props: list[Any] = [("llmeval_result", result.to_dict())]
        if log:
            props.append(("llmeval_log", log))
        # What the run moved in the backend's record: the decode step that ran ("none"
        # until a generation runs in this process), the batch sizes probed per width.
        changed = self.evaluator.backend_info_changed()
        if changed is not None and self.environment_sent:
            worker = (self.evaluator.environment or {}).get("worker") or "main"
            props.append(("llmeval_backend_update", {"worker": worker, "fields": changed}))
        if not self.environment_sent and self.evaluator.environment is not None:
            self.environment_sent = True
            props.append(("llmeval_environment", self.evaluator.environment))
        if item.task not in self.task_config_sent:
            self.task_config_sent.add(item.task)
            state = self.evaluator.states[item.task]
            props.append(
                (
                    "llmeval_task_config",
                    {
                        **state.config,
                        "config_hash": state.config_hash,
                        "prompt_hash": state.prompt_hash,
                        # Recorded facts, outside the config hash: resume compares each
                        # item's own digests instead (record/_resume.py).
                        "data_files": state.data_files,
                        "resume_key": state.resume_key,
                        "resume_settings": state.resume_settings,
                        "resumed_from": state.resumed_from,
                    },
                )
            )
        return props

    # ---------------------------------------------------------------- controller side

    def run_dir(self) -> RunDir:
        if self.run is None:
            if self.options.run_dir is not None:
                path = self.options.run_dir
            else:
                from pytest_llmeval.record import git_info

                git = git_info(self.config.rootpath) or {}
                path = new_run_dir(
                    self.options.output,
                    self.options.model or "none",
                    git.get("short"),
                    self.started,
                )
            self.run = RunDir(path)
            # This process's lease: the run is live (never resumed from, never superseded)
            # until the session ends and records how it ended.
            self.run.claim([str(a) for a in self.config.invocation_params.args])
            self.run.log(
                f"run started {self.started:%Y-%m-%dT%H:%M:%S} (first result now): "
                f"model={self.options.model} args={self.config.invocation_params.args}"
            )
        return self.run

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Fold one item report (from this process or an xdist worker) into its task.

        Under xdist this runs on the workers and on the controller; only the controller
        (or a run without xdist) keeps tallies and writes records. It runs first, on the
        item's whole properties; ``_outcomes.Presenter`` then gives the reporters (terminal,
        JUnit XML, pytest-html) its compact properties and a wrong answer as failed, after
        pytest's own count of failures (``record._junit``).
        """
        if self.is_worker:
            return
        if any(name == PROBE_PROPERTY for name, _ in report.user_properties):
            self._fold_probes(report)
        props = dict(report.user_properties)
        notes = props.get("llmeval_notes")
        if isinstance(notes, dict):
            self.notes.update(notes)
        self._fold(report, props)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.current_item = item

    # ---------------------------------------------------------------- contamination probes

    def add_probe(self, payload: dict[str, Any]) -> None:
        """A probe's outcome (``ProbeRunner``: its report, flagged items and summary) on the
        running test's properties, with which it reaches the controller under xdist; the
        controller (or this process without xdist) writes it when the test reports
        (:meth:`_fold_probes`). A probe run outside a test is kept at once."""
        item = self.current_item
        if item is None:
            self._keep_probe(payload)
            return
        if self.is_worker and not self.environment_sent and self.evaluator.environment:
            # A run of probes alone: no item result carries the model's environment.
            self.environment_sent = True
            item.user_properties.append(("llmeval_environment", self.evaluator.environment))
        item.user_properties.append((PROBE_PROPERTY, payload))

    def _fold_probes(self, report: pytest.TestReport) -> None:
        """Write the probe outcomes a test's report carries (once: every phase's report
        has them) and give the reporters compact properties in their place: JUnit XML
        writes every property."""
        compact: list[tuple[str, object]] = []
        for name, value in report.user_properties:
            if name == "llmeval_environment" and isinstance(value, dict):
                self._adopt_environment(value)
            if name != PROBE_PROPERTY or not isinstance(value, dict):
                compact.append((name, value))
                continue
            if value["id"] not in self._probes_kept:
                self._probes_kept.add(value["id"])
                self._keep_probe(value)
            summary = value["summary"]
            compact.append(("probe", f"{summary['task']} {summary['probe']}"))
            compact.append(("probe_outcome", summary["outcome"]))
            if summary.get("p_value") is not None:
                compact.append(("probe_p_value", f"{summary['p_value']:.3g}"))
            # The verdict's whole line (its null, its validated range): a passed test case
            # has no message of its own in JUnit XML.
            compact.append(("probe_message", summary["text"]))
        report.user_properties = [p for p in compact if p[0] != "llmeval_environment"]

    def _keep_probe(self, payload: dict[str, Any]) -> None:
        """Write a probe's report (``contamination/<task>-<probe>.json``) and its flagged
        items (``contamination/<task>-flagged.txt``, ``run.exclude`` format) into the
        run directory, and keep its summary for the terminal and the Markdown summary."""
        folder = self.run_dir().path / "contamination"
        folder.mkdir(exist_ok=True)
        task, probe = payload["summary"]["task"], payload["summary"]["probe"]
        (folder / f"{task}-{probe}.json").write_text(strict_json.dumps(payload["report"], indent=1))
        if payload.get("flagged"):
            (folder / f"{task}-flagged.txt").write_text(payload["flagged"])
        self.probe_summaries.append(payload["summary"])

    def _fold(self, report: pytest.TestReport, props: dict[str, Any]) -> None:
        task = props.get("llmeval_task")
        meta = props.get("llmeval_meta")
        if not isinstance(task, str) or not isinstance(meta, dict):
            return
        tally = self.tallies.get(task)
        if tally is None:
            tally = self.tallies[task] = TaskTally(
                name=task,
                metric=str(meta["metric"]),
                floor=meta["floor"],
                floor_source=meta.get("floor_source"),
                total_items=int(meta["total_items"]),
                source=str(meta.get("source", "")),
                saturation=str(meta.get("saturation") or ""),
                successor=meta.get("successor"),
                capability=meta.get("capability"),
                freshness=str(meta.get("freshness") or "stable"),
                lmeval=meta.get("lmeval"),
                has_subsets=bool(meta.get("subsets")),
                empty_subsets=dict(meta.get("empty_subsets") or {}),
                no_items=meta.get("no_items"),
            )
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.done_nodeids.add(report.nodeid)
        if report.when == "setup":
            tally.selected += 1
            if report.skipped:
                tally.skipped += 1
                why = skip_reason(report)
                if why is not None:
                    tally.skip_reasons[why] = tally.skip_reasons.get(why, 0) + 1
        if report.when == "call":
            self._record_call(tally, props, report.duration)
        if report.failed and "llmeval_result" not in props:
            lines = report.longreprtext.strip().splitlines()
            why = lines[0][:300] if lines else f"{report.when} failed"
            tally.errors.append(_item_line(report.nodeid.rpartition("::")[2], why))

    def _adopt_environment(self, environment: dict[str, Any]) -> None:
        # Each process sends its own (xdist workers may differ: device, host).
        self.environments[str(environment.get("worker") or "main")] = environment
        if not self.environment:
            self.environment = environment

    def _record_call(self, tally: TaskTally, props: dict[str, Any], duration: float) -> None:
        environment = props.get("llmeval_environment")
        if isinstance(environment, dict):
            self._adopt_environment(environment)
        update = props.get("llmeval_backend_update")
        if isinstance(update, dict) and isinstance(update.get("fields"), dict):
            sent = self.environments.get(str(update.get("worker")))
            if sent is not None and isinstance(sent.get("backend"), dict):
                sent["backend"].update(update["fields"])
        task_config = props.get("llmeval_task_config")
        if isinstance(task_config, dict):
            tally.config = task_config
        for line in props.get("llmeval_log") or []:
            self.run_dir().log(str(line))
        tally.seconds += duration
        result = props.get("llmeval_result")
        if isinstance(result, dict) and result.get("error"):
            # Not scored, but recorded: the item line says what went wrong.
            tally.errors.append(_item_line(str(result["item_id"]), str(result["error"])))
            self.run_dir().append_item(tally.name, result)
            return
        if isinstance(result, dict):
            if result.get("reused_from") and Path(str(result["reused_from"])).is_dir():
                self.resumed_from.add(str(result["reused_from"]))
            if (result.get("details") or {}).get("truncated_prompt_tokens"):
                tally.truncated.append(result["item_id"])
            overflow = (result.get("details") or {}).get("context_overflow")
            if overflow:
                tally.not_fitting[result["item_id"]] = overflow
                self.run_dir().append_item(tally.name, result)
                return
            tally.results[result["item_id"]] = result
            if result.get("output"):
                from pytest_llmeval.contamination import scan_output

                cues = scan_output(str(result["output"]))
                if cues:
                    tally.recall_cues[result["item_id"]] = [f"{c.kind}: {c.text}" for c in cues]
            if result.get("determinism") not in (None, "ok"):
                tally.nondeterministic.append(f"{result['item_id']}: {result['determinism']}")
            self.run_dir().append_item(tally.name, result)

    def eval_config(self) -> dict[str, Any]:
        """``eval_config.json`` (``record.run_config``) from the options and what the
        processes reported."""
        from pytest_llmeval.record import run_config

        opts = self.options
        excluded = None
        if opts.exclude is not None:
            excluded = {
                "file": str(opts.exclude),
                "sha256": self.exclude_sha256,
                "ids": sorted(self.excluded),
                "unmatched": self.notes.get("unmatched_exclusions", []),
            }
        agreement = None
        if opts.agreement is not None and self.agreement is not None:
            agreement = {
                "file": str(opts.agreement),
                "sha256": self.agreement_sha256,
                "a": (self.agreement.get("a") or {}).get("spec"),
                "b": (self.agreement.get("b") or {}).get("spec"),
                "limit": self.agreement.get("limit"),
                "summary": self.agreement.get("summary"),
            }
        asked = {
            "model": opts.model,
            "dtype": opts.dtype,
            "device": opts.device,
            "batch_size": opts.batch_size,
            "limit": opts.limit,
            "seed": opts.seed,
            "repeat": opts.repeat,
            "check_determinism": opts.check_determinism,
            "data_dirs": opts.data_dirs,
            "allow_unisolated_code": opts.allow_unisolated_code,
            "settings": {
                "profiles": list(opts.settings.profiles),
                "given": opts.settings.as_record(),
            },
        }
        tasks = {
            name: {
                **t.config,
                "floor": t.floor,
                "source": t.source,
                "total_items": t.total_items,
                "selected": t.selected,
            }
            for name, t in self.tallies.items()
        }
        return run_config(
            asked=asked,
            environment=self.environment,
            environments=self.environments,
            tasks=tasks,
            started=self.started.isoformat(timespec="seconds"),
            excluded=excluded,
            agreement=agreement,
        )

    def adopt_own_environment(self) -> None:
        """A run whose model loaded in this process but whose benchmark items never reported
        it (contamination probes alone, the drift snapshot test) records this process's
        environment: the model's SHA256, the backend and its engine."""
        own = self.evaluator.environment
        if not self.environment and own is not None:
            self.environment = own
            self.environments.setdefault(str(own.get("worker") or "main"), own)

    def keep_computed_ahead(self) -> None:
        """An interrupted run (no xdist: the results are in this process): results that
        were computed ahead of their items (a generative task's stream, a batch) but never
        reported go to ``tasks/<task>_ahead.jsonl``, where a rerun's resume finds them;
        they are not part of this run's scores."""
        ahead = self.evaluator.take_computed_ahead()
        if not ahead:
            return
        run = self.run_dir()
        by_task: dict[str, int] = {}
        for result in ahead:
            run.append_item(result.task, result.to_dict(), ahead=True)
            by_task[result.task] = by_task.get(result.task, 0) + 1
        for task, n in sorted(by_task.items()):
            run.log(
                f"{task}: kept {n} result(s) computed ahead of items that did not run "
                "(a rerun reuses them)"
            )

    def decide(self) -> list[TaskDecision]:
        decisions = [
            decide_task(
                self.tallies[name],
                selected=len(self.selected.get(name, ())),
                policy=self.options.floor_policy,
                interrupted_unknown=bool(self.interrupted) and name not in self.selected,
            )
            for name in sorted(self.tallies)
        ]
        self.decisions = decisions
        self.not_run = tasks_not_run(
            [
                (v.task, self.tallies[v.task].no_items, self.tallies[v.task].skip_reasons)
                for v in decisions
                if v.status == "skipped"
            ],
            self.notes.get("deselected_tasks") or [],
        )
        if self.run is not None:  # anything was recorded: the record is completed
            with self.run.merge_lock():
                self._finish_record()
            status = "interrupted" if self.interrupted else "finished"
            self.run.log(f"run {status}" + (f": {self.interrupted}" if self.interrupted else ""))
            self.run.release(status, self.interrupted)
            # After the lease is released, so that the page reads how the run ended (a run
            # another process still writes under --llm-set run.dir reads as live).
            with self.run.merge_lock():
                self._write_report()
        return decisions

    def _finish_record(self) -> None:
        assert self.run is not None
        from pytest_llmeval.record import records_entry

        config = self.eval_config()
        summary: dict[str, Any] = {}
        if self.options.run_dir is not None:  # combining runs: keep the other tasks
            # (read, merged and written under the directory's merge lock: several
            # processes may finish at once)
            previous_config = self.run.read_json(CONFIG) or {}
            config["tasks"] = {**previous_config.get("tasks", {}), **config["tasks"]}
            summary = summary_tasks(self.run.read_json(SUMMARY) or {})
        self.run.write_json(CONFIG, config)
        not_run = {n.task: n for n in self.not_run}
        for v in self.decisions:
            if v.status != "skipped":
                tally = self.tallies[v.task]
                summary[v.task] = summary_entry(v, tally, records_entry(self.run.path, v.task))
            elif v.task in not_run and v.task not in summary:
                # Listed with why and what to pass (a task another process of a combined
                # run scored keeps its entry).
                summary[v.task] = skipped_entry(v, not_run[v.task].reason, not_run[v.task].fix)
        self._compare_with_baseline()
        self._analyse_failures()
        self._plan()
        self._lmeval_scores()
        write_json_atomic(self.run.path / SUMMARY, summary_document(summary))
        from pytest_llmeval.record import append_github_step_summary, markdown_summary

        rows = [v.row() for v in self.decisions if v.status != "skipped"]
        task_configs = {t: tally.config for t, tally in self.tallies.items()}

        def markdown(rows: list[dict[str, Any]], configs: Mapping[str, Any]) -> str:
            return markdown_summary(
                f"pytest-llmeval: {self.options.model}",
                rows,
                self.environment or None,
                self.comparison,
                task_configs=configs,
                notes=self.limit_warnings,
                not_run=[n.to_dict() for n in self.not_run],
                probes=self.probe_summaries,
                interrupted=self.interrupted,
            )

        here = markdown(rows, task_configs)
        # A combined run (--llm-set run.dir): summary.md covers every task the directory
        # holds, as metrics_summary.json does (it showed the last process's alone); the CI
        # step summary, appended to by each process, gets this process's tasks once.
        others = [
            summary_row(task, entry)
            for task, entry in summary.items()
            if task not in {v.task for v in self.decisions} and entry.get("status") != "skipped"
        ]
        whole = (
            markdown(
                sorted([*others, *rows], key=lambda r: str(r["task"])),
                {**config["tasks"], **task_configs},
            )
            if others
            else here
        )
        (self.run.path / MARKDOWN).write_text(whole, encoding="utf-8")
        append_github_step_summary(here, os.environ)
        if self.resumed_from:
            mark_superseded([Path(p) for p in self.resumed_from], self.run.path)
        self.run.log(
            "scores: "
            + ", ".join(
                f"{v.task} {v.metric}={v.score:.4f} ({v.status})"
                for v in self.decisions
                if not math.isnan(v.score)
            )
        )

    def _lmeval_scores(self) -> None:
        """lm-evaluation-harness tasks: every metric of each task and group as the harness
        aggregates it, into ``lmeval_results.json`` (the floors gate the per-item mean of
        each task's primary metric, which is the harness's score for mean-aggregated
        metrics)."""
        assert self.run is not None
        leaves = {
            name: (tally.lmeval, [r for r in tally.results.values() if not r.get("error")])
            for name, tally in self.tallies.items()
            if tally.lmeval
        }
        if not leaves:
            return
        from pytest_llmeval.lmeval import lmeval_results

        self.lmeval_results = lmeval_results(leaves)
        write_json_atomic(self.run.path / "lmeval_results.json", self.lmeval_results)
        for line in lmeval_lines(self.lmeval_results):
            self.run.log(line)

    def _write_report(self) -> None:
        """``report.html`` from the records just written. The records are the result: a
        report that cannot be built is a warning line, never a crash or a failed run."""
        assert self.run is not None
        try:
            from pytest_llmeval.record import write_report

            self.report_path = write_report(self.run.path, self.options.baseline)
        except Exception as exc:  # any bug in the report must leave the run as it is
            self.report_error = f"{type(exc).__name__}: {exc}"
            self.run.log(f"report.html not written: {self.report_error}")

    def _plan(self) -> None:
        """``report.plan=true``: the item budget of each task (``plan.json``); with ``--llm-limit``
        and a gate, a warning for each task whose gate cannot catch a 5-point drop at the
        size that ran."""
        gated = {
            v.task
            for v in self.decisions
            if v.floor is not None or (self.options.baseline_fail and self.comparison)
        }
        if not self.options.plan and not (self.options.limit is not None and gated):
            return
        from pytest_llmeval.gate import PlanSettings, parse_floor_rule, plan_task

        churn: dict[str, float] = {}
        if self.comparison is not None:
            for t in self.comparison.tasks:
                if t.n_shared:
                    churn[t.task] = (len(t.regressed) + len(t.improved)) / t.n_shared
        summary_of = {v.task: {"metric": v.metric, "total_items": v.total} for v in self.decisions}
        base = self.options.baseline.name if self.options.baseline else ""
        if self.options.plan:
            settings = PlanSettings(rule=self.options.floor_rule, policy=self.options.floor_policy)
            self.plans = [
                plan_task(
                    v.task,
                    self.tallies[v.task].results,
                    summary_of[v.task],
                    settings,
                    churn=churn.get(v.task),
                    churn_source=f"items that differ between this run and {base}"
                    if v.task in churn
                    else None,
                )
                for v in self.decisions
                if v.n and v.status != "skipped"
            ]
            assert self.run is not None
            write_json_atomic(
                self.run.path / "plan.json",
                {"settings": settings.to_dict(), "tasks": [p.to_dict() for p in self.plans]},
            )
        if self.options.limit is None:
            return
        for v in self.decisions:
            if v.task not in gated or not v.n:
                continue
            source = v.floor_source or {}
            rule = self.options.floor_rule
            reference = None
            if source.get("from") == "reference run":
                rule = parse_floor_rule(str(source.get("rule", "lcb")))
                if isinstance(source.get("score"), (int, float)):
                    reference = (float(source["score"]), f"the score of {source.get('run')}")
            warning = limit_warning(
                v.task,
                list(self.tallies[v.task].results.values()),
                floor=v.floor is not None,
                paired=bool(self.options.baseline_fail and self.comparison),
                rule=rule,
                policy=self.options.floor_policy,
                churn=churn.get(v.task),
                reference=reference,
            )
            if warning:
                self.limit_warnings.append(warning)

    def _analyse_failures(self) -> None:
        if self.options.failures <= 0 or self.run is None:
            return
        for name, tally in sorted(self.tallies.items()):
            compare = (tally.config.get("generation") or {}).get("compare")
            self.failure_reports.append(
                analyse_failures(
                    name,
                    list(tally.results.values()),
                    self.options.failures,
                    seed=self.options.seed,
                    compare=compare,
                )
            )
        write_json_atomic(
            self.run.path / "failures.json", [r.to_dict() for r in self.failure_reports]
        )

    def _compare_with_baseline(self) -> None:
        if self.options.baseline is None or self.run is None:
            return
        from pytest_llmeval.record import compare_runs, load_run

        current = load_run(self.run.path)
        baseline = load_run(self.options.baseline)
        self.comparison = compare_runs(current, baseline)
        if self.options.baseline_fail:
            self.gate_failures = gate_failures(
                self.comparison, parse_gate(self.options.baseline_fail)
            )
