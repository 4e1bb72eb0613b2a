"""The run report: ``report.html``, one self-contained page per run directory.

Plain Python (no pytest, no torch). Everything is read from the run's records
(``eval_config.json``, ``metrics_summary.json``, ``tasks/*_output.jsonl``, ``failures.json``,
``contamination/*.json``), from a baseline run's records, and from the summaries of earlier
runs in the same output folder; nothing is recomputed from a model. The page needs no
network: its style, script and data are inline, the charts are SVG written here.

- :func:`prepare_report` reads the records into a :class:`ReportModel` (the data the page
  shows; tested without a browser);
- :func:`render_report` turns that into the HTML text;
- :func:`write_report` does both and writes ``<run>/report.html`` (or ``out``).

The item browser is the only part drawn by the page's script, from a JSON block
(:func:`browser_data`): items, their prompts with the shared few-shot block stored once per
group (:func:`split_prompts`), outputs or per-choice log-likelihoods, failure classes, flips.
All record text is untrusted (a model can write ``</script>``): the template escapes it, the
JSON block escapes ``<``, ``>`` and ``&``, and the script only ever sets ``textContent``.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_llmeval._errors import LlmEvalError
from pytest_llmeval.gate import (
    Comparison,
    SummaryLayoutError,
    format_diff,
    item_score,
    item_scored,
    summary_tasks,
)
from pytest_llmeval.record._compare import RunRecord, compare_runs, load_run
from pytest_llmeval.record._report_charts import (
    bars_svg,
    delta_svg,
    history_svg,
    interval_svg,
    pair_svg,
    pct,
    strip_svg,
)
from pytest_llmeval.record._rundir import (
    DAMAGE_FIX,
    PROCESSES,
    Damage,
    output_file,
    run_damage,
    run_state,
)
from pytest_llmeval.record._summary import floor_source_text
from pytest_llmeval.scorer import accuracy, paired_difference

REPORT = "report.html"
ASSETS = "_report_assets"
HISTORY_LIMIT = 20  # earlier runs shown per task
DETAILS_LIMIT = 4000  # characters of an item's scorer details shown in the browser
FLIPPED_SHOWN = 40  # flipped item links listed per task (all are filterable in the browser)
DIFFS_SHOWN = 12  # config/environment differences listed before the rest is folded
NOT_SCORED = "not_scored"  # an item whose prompt did not fit the context window
ITEM_ERROR = "error"  # an item that could not be evaluated (its record says why)

# ---------------------------------------------------------------------------- the model


@dataclass
class SubRow:
    """A row under its task in the task table: a named metric beside the primary score
    (GSM8K's ``strict_match``, ``flexible_extract``) or one subset's score (an MMLU subject,
    a BBH subtask), as lm-evaluation-harness prints them; proportions, NaN where none."""

    name: str
    kind: str  # "metric" or "subset"
    n: int
    score: float
    ci_low: float
    ci_high: float


@dataclass
class TaskRow:
    """One task in the task table (scores as proportions; NaN where there is none)."""

    name: str
    metric: str
    n: int
    total: int | None
    score: float
    ci_low: float
    ci_high: float
    floor: float | None
    status: str  # gate.STATUSES, or why there is none (no summary, damaged)
    seconds: float | None
    partial: bool
    from_summary: bool  # False: computed here from item records (interrupted run)
    repeats: list[float] = field(default_factory=list)
    spread: float | None = None
    not_fitting: int = 0
    reused: int = 0
    recall_cues: int = 0
    errors: int = 0  # items that could not be evaluated (not scored)
    truncated: int = 0  # items scored on a prompt cut to fit the window
    # A floor's status against the interval: the policy that decides what an undecided
    # status does, whether the task failed the run (metrics_summary.json's ``failed``;
    # None in records written before it existed) and where the floor came from.
    policy: str | None = None
    recorded_failed: bool | None = None
    floor_source: str | None = None
    damaged: bool = False  # its item records do not match the summary (record.run_damage)
    # Named metrics, then per-subset scores: rows under the task (see SubRow).
    subrows: list[SubRow] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        if self.recorded_failed is not None:
            return self.recorded_failed
        return self.status in ("fail", "error", "incomplete")


@dataclass
class DeltaRow:
    """A task compared with the baseline on the items both runs scored."""

    task: str
    n_shared: int
    baseline_score: float
    current_score: float
    delta: float
    ci_low: float  # paired 95% interval of the per-item differences
    ci_high: float
    p_value: float
    significant: bool
    regressed: list[str]
    improved: list[str]
    only_in_baseline: int
    only_in_current: int
    # What the interval is when the normal one says nothing (see paired_interval): None
    # for the normal paired interval; else a sentence, and ci_low/ci_high are then the
    # exact bound (no discordant pairs) or NaN (not enough pairs to bound).
    interval_note: str | None = None
    # The test behind p_value (TaskDelta.test): "mcnemar" where every shared score is 0 or
    # 1 (regressed: correct in the baseline, wrong now), "sign-flip" for partial scores
    # (regressed: scored lower now).
    test: str = "mcnemar"

    @property
    def binary(self) -> bool:
        return self.test == "mcnemar"


@dataclass
class ComparisonView:
    baseline_name: str
    baseline_path: str
    alpha: float
    rows: list[DeltaRow]
    config_diffs: list[str]
    env_diffs: list[str]


@dataclass
class ProbeRow:
    """One contamination probe report (``contamination/<task>-<probe>.json``)."""

    file: str
    task: str
    probe: str
    order_test: bool
    n: int
    p_value: float
    alpha: float
    flagged: bool
    canonical_accuracy: float = math.nan
    rewritten_accuracy: float = math.nan
    b: int = 0
    c: int = 0
    only_canonical: float = math.nan
    canonical_first: int = 0
    expected_by_chance: float = math.nan
    k: int = 0
    mean_margin: float = math.nan
    skipped: int = 0
    items: list[dict[str, Any]] = field(default_factory=list)
    # The fixture's verdict in words and its null, and for membership flags the scores on
    # all, clean and flagged items and the handling policy.
    summary: str = ""
    null: str = ""
    scores: list[str] = field(default_factory=list)
    policy: str = ""
    # Why the fixture gave no verdict (skipped: no null that fits without a reference).
    no_verdict: str = ""
    # Where a given verdict's false-alarm rate was measured (its pools, n and conditions)
    # and whether this run lies inside that, as its message says it.
    validation: str = ""
    validation_pools: list[str] = field(default_factory=list)  # the same, pool by pool
    # The order test's items in its verdict (exchangeable ones; 0: all ``n``).
    order_n: int = 0
    # A probe without a verdict and without a test to inspect (TS-Guessing without a
    # reference): its own numbers in words.
    result: str = ""

    @property
    def canonical_first_share(self) -> float:
        n = self.order_n or self.n
        return self.canonical_first / n if n else math.nan

    @property
    def chance_share(self) -> float:
        return 1.0 / (self.k + 1) if self.k > 0 else math.nan


@dataclass
class FailureView:
    """``failures.json`` of one task (``report.failures``)."""

    task: str
    n_items: int
    n_failed: int
    distribution: dict[str, int]
    answer_in_output: int
    samples: list[dict[str, Any]]

    @property
    def bars(self) -> list[tuple[str, float]]:
        """The classes, most frequent first, as chart bars."""
        ranked = sorted(self.distribution.items(), key=lambda kv: (-kv[1], kv[0]))
        return [(kind.replace("_", " "), float(count)) for kind, count in ranked]


@dataclass
class HistoryPoint:
    run: str
    started: str
    score: float
    ci_low: float
    ci_high: float
    n: int
    total: int | None
    same_config: bool
    current: bool = False
    selection: str | None = None  # a debug selection (-k, node ids): see run_selection


@dataclass
class HistorySeries:
    """One task's trend: only runs over the same item set as this run (the digest of the
    task's item ids, :func:`item_set_digest`), so that a 1-item ``-k`` run and a 10-item
    run never share a line; the runs left out are counted."""

    task: str
    points: list[HistoryPoint]
    earlier_found: int  # earlier runs with this task (points shows at most HISTORY_LIMIT)
    item_set: str = ""  # the digest's first 12 hex digits
    n_items: int = 0
    other_sets: int = 0  # earlier runs of this task over other item sets, left out
    other_debug: int = 0  # of those, debug selections (-k, node ids)
    selection: str | None = None  # this run's own debug selection, if any

    @property
    def left_out(self) -> str:
        """The runs not on the trend, in words ("" when none)."""
        if not self.other_sets:
            return ""
        debug = f", {self.other_debug} of them -k/node-id selections" if self.other_debug else ""
        return f"{self.other_sets} earlier run(s) over other item sets left out{debug}"


@dataclass
class ReportModel:
    """What the page shows. Built from records only (see :func:`prepare_report`)."""

    title: str
    run_name: str
    run_path: str
    started: str | None
    finished: bool
    superseded_by: str | None
    facts: list[tuple[str, str]]
    config_json: str
    tasks: list[TaskRow]
    comparison: ComparisonView | None
    probes: list[ProbeRow]
    failures: list[FailureView]
    history: list[HistorySeries]
    history_dir: str | None
    browser: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    # How the run ended, from its leases (record._rundir.run_state): finished, live (still
    # written by a process), interrupted (resumable), superseded (interrupted, its items
    # reused by a later run); with the reason an interrupted run gave.
    state: str = "finished"
    state_reason: str | None = None
    # Records that are missing or do not match what the run recorded (state "damaged").
    damage: list[str] = field(default_factory=list)
    # The tasks the run skipped: (task, reason, what to pass), see :func:`tasks_not_run`.
    not_run: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        return any(t.partial for t in self.tasks)

    @property
    def repeats(self) -> list[TaskRow]:
        return [t for t in self.tasks if t.repeats]


# ---------------------------------------------------------------------------- helpers


def _num(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _get(mapping: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(mapping, Mapping):
            return None
        mapping = mapping.get(key)
    return mapping


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _summary_or_none(path: Path) -> dict[str, dict[str, Any]] | None:
    """The task entries of another run's ``metrics_summary.json`` (either layout), or None
    when it cannot be read (that run is left out of the history)."""
    data = _read_json(path)
    if not isinstance(data, dict):
        return None
    try:
        return summary_tasks(data)
    except SummaryLayoutError:
        return None


def fmt_p(value: Any) -> str:
    x = _num(value)
    if math.isnan(x):
        return "-"
    return f"{x:.1e}" if x < 0.001 else f"{x:.3f}"


def _jsonable(value: Any) -> Any:
    """JSON without NaN/infinity (``JSON.parse`` rejects them): those become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def script_json(data: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``: no ``<``, ``>`` or ``&``
    can end the element or start markup (they are written as ``\\u003c`` etc.)."""
    text = json.dumps(_jsonable(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


# ---------------------------------------------------------------------------- tasks


def _estimate_row(name: str, kind: str, scores: Sequence[float]) -> SubRow:
    est = accuracy(list(scores))
    return SubRow(name, kind, est.n, est.value, est.ci_low, est.ci_high)


def _spec_order(rows: list[SubRow], task_config: Any) -> list[SubRow]:
    """Named metrics in the order the spec names them (``eval_config.json`` keeps it; the
    summary's keys are sorted)."""
    named = _get(task_config, "generation", "metrics")
    order = [str(_get(m, "name")) for m in named] if isinstance(named, list) else []
    return sorted(rows, key=lambda r: order.index(r.name) if r.name in order else len(order))


def metric_rows(
    summary: Any, scored: Sequence[Mapping[str, Any]], task_config: Any = None
) -> list[SubRow]:
    """The named metrics of a task (``generate.metrics``): as ``metrics_summary.json``
    recorded them, or, without a summary, from the scored item records (the same mean and
    interval the plugin computes, ``scorer.accuracy``); in the spec's order."""
    return _spec_order(_metric_rows(summary, scored), task_config)


def _metric_rows(summary: Any, scored: Sequence[Mapping[str, Any]]) -> list[SubRow]:
    recorded = _get(summary, "metrics")
    if isinstance(recorded, Mapping) and recorded:
        rows = []
        for name, m in recorded.items():
            ci = _get(m, "ci95") or [math.nan, math.nan]
            rows.append(
                SubRow(
                    str(name),
                    "metric",
                    _int(_get(m, "n")) or 0,
                    _num(_get(m, "mean")),
                    _num(ci[0]) if len(ci) > 0 else math.nan,
                    _num(ci[1]) if len(ci) > 1 else math.nan,
                )
            )
        return rows
    scores: dict[str, list[float]] = {}
    for r in scored:
        for name, value in (r.get("metrics") or {}).items():
            if math.isfinite(_num(_get(value, "score"))):
                scores.setdefault(str(name), []).append(_num(value["score"]))
    return [_estimate_row(name, "metric", v) for name, v in scores.items()]


def subset_rows(scored: Sequence[Mapping[str, Any]]) -> list[SubRow]:
    """Per-subset scores (MMLU subjects, BBH subtasks) from the scored item records, in name
    order, each with its n and interval (``scorer.accuracy``: Wilson for 0/1 scores). A
    task whose items carry no subset has none."""
    scores: dict[str, list[float]] = {}
    for r in scored:
        if r.get("subset") is not None:
            scores.setdefault(str(r["subset"]), []).append(item_score(r))
    return [_estimate_row(name, "subset", scores[name]) for name in sorted(scores)]


def task_rows(run: RunRecord) -> list[TaskRow]:
    """The task table: from ``metrics_summary.json`` where the run wrote one; a task with item
    records but no summary (an interrupted run) is computed from its scored items, without a
    status."""
    tasks = sorted(set(run.metrics) | set(run.items))
    rows = []
    for name in tasks:
        summary = run.metrics.get(name)
        records = run.items.get(name, {})
        scored = [r for r in records.values() if item_scored(r)]
        reused = sum(1 for r in records.values() if r.get("reused_from"))
        task_config = _get(run.config, "tasks", name) or {}
        if isinstance(summary, Mapping):
            ci = summary.get("ci95") or [math.nan, math.nan]
            repeats = [float(x) for x in summary.get("repeats") or [] if _num(x) == _num(x)]
            rows.append(
                TaskRow(
                    name=name,
                    metric=str(summary.get("metric") or task_config.get("metric") or "score"),
                    n=_int(summary.get("n")) or 0,
                    total=_int(summary.get("total_items")),
                    score=_num(summary.get("score")),
                    ci_low=_num(ci[0]) if len(ci) > 0 else math.nan,
                    ci_high=_num(ci[1]) if len(ci) > 1 else math.nan,
                    floor=None if summary.get("floor") is None else _num(summary["floor"]),
                    status=str(summary.get("status") or "-"),
                    seconds=_num(summary.get("seconds")),
                    partial=bool(summary.get("partial")),
                    from_summary=True,
                    repeats=repeats,
                    spread=None if summary.get("spread") is None else _num(summary["spread"]),
                    not_fitting=_int(_get(summary, "not_fitting", "n")) or 0,
                    reused=reused,
                    recall_cues=_int(_get(summary, "recall_cues", "n")) or 0,
                    errors=_int(_get(summary, "errors", "n")) or 0,
                    truncated=_int(_get(summary, "truncated", "n")) or 0,
                    policy=str(summary["policy"]) if summary.get("policy") else None,
                    recorded_failed=(
                        bool(summary["failed"]) if isinstance(summary.get("failed"), bool) else None
                    ),
                    floor_source=(
                        floor_source_text(summary.get("floor_source"))
                        if summary.get("floor") is not None and "floor_source" in summary
                        else None
                    ),
                    subrows=metric_rows(summary, scored, task_config) + subset_rows(scored),
                )
            )
            continue
        estimate = accuracy([item_score(r) for r in scored])
        errors = sum(1 for r in records.values() if r.get("error"))
        total = _int(task_config.get("total_items"))
        seconds = math.fsum(_num(r.get("seconds")) for r in records.values() if "seconds" in r)
        rows.append(
            TaskRow(
                name=name,
                metric=str(task_config.get("metric") or "score"),
                n=len(scored),
                total=total,
                score=estimate.value,
                ci_low=estimate.ci_low if scored else math.nan,
                ci_high=estimate.ci_high if scored else math.nan,
                floor=None if task_config.get("floor") is None else _num(task_config["floor"]),
                status="no summary",
                seconds=seconds if records else None,
                partial=total is None or len(records) < total,
                from_summary=False,
                not_fitting=len(records) - len(scored) - errors,
                reused=reused,
                errors=errors,
                truncated=sum(1 for r in scored if _get(r, "details", "truncated_prompt_tokens")),
                subrows=metric_rows(None, scored, task_config) + subset_rows(scored),
            )
        )
    return rows


# ---------------------------------------------------------------------------- environment


def _short(value: Any, n: int = 12) -> str:
    return str(value)[:n]


def environment_facts(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The environment and config headline, as (label, value) pairs; absent fields are left
    out."""
    env = config.get("environment") if isinstance(config.get("environment"), Mapping) else {}
    backend = _get(env, "backend") or {}
    facts: list[tuple[str, str]] = []

    def add(label: str, value: Any) -> None:
        if value not in (None, "", [], {}):
            facts.append((label, str(value)))

    model = config.get("model") or _get(backend, "model")
    add("model", model)
    sha = config.get("model_sha256") or _get(env, "model", "sha256")
    if sha:
        add("model SHA256", f"{_short(sha)}… (weights, config and tokenizer files)")
    elif config.get("model_sha256_reason"):
        add("model SHA256", f"none: {config['model_sha256_reason']}")
    weights = config.get("weights_sha256") or _get(env, "model", "weights_sha256")
    if weights:
        add("weights SHA256", f"{_short(weights)}…")
    framework = config.get("framework") if isinstance(config.get("framework"), Mapping) else {}
    backend_name = _get(framework, "backend") or _get(backend, "backend")
    if backend_name == "openai":
        add("backend", f"openai at {_get(framework, 'base_url')}")
    else:
        add("backend", backend_name)
    add("dtype", config.get("dtype") or _get(backend, "dtype"))
    device = config.get("device") or _get(backend, "device")
    device_name = _get(backend, "device_name")
    if device and device_name and device_name != device:
        device = f"{device} ({device_name})"
    add("device", device)
    batch = config.get("batch_size") or _get(backend, "batch_size")
    source = _get(backend, "batch_size_source")
    add("batch size", f"{batch} ({source})" if batch and source else batch)
    libraries = _get(env, "libraries") or {}
    libs = []
    for name in ("python", "torch", "transformers", "pytest-llm-evaluation", "pytest"):
        version = _get(libraries, name) or (
            _get(framework, name) if name in ("torch", "transformers") else None
        )
        if version:
            libs.append(f"{name} {version}")
    add("libraries", ", ".join(libs))
    cuda = _get(env, "cuda", "cuda")
    if cuda:
        gpus = _get(env, "cuda", "gpus") or []
        add("CUDA", f"{cuda}" + (f", {len(gpus)} GPU(s)" if gpus else ""))
    git = _get(env, "git", "code") or _get(env, "git")
    if isinstance(git, Mapping) and (git.get("commit") or git.get("short")):
        text = _short(git.get("short") or git.get("commit"), 7)
        if git.get("dirty"):
            text += " (uncommitted changes)"
        if git.get("branch"):
            text += f" on {git['branch']}"
        add("git commit", text)
    add("seed", config.get("seed"))
    add("limit", config.get("limit"))
    if _int(config.get("repeat")) and config["repeat"] > 1:
        add("repeats", config["repeat"])
    excluded = config.get("excluded_items")
    if isinstance(excluded, Mapping):
        ids = excluded.get("ids") or []
        add("excluded items", f"{len(ids)} (sha256 {_short(excluded.get('sha256'))})")
    add("started", config.get("started"))
    return facts


# ---------------------------------------------------------------------------- comparison


def no_change_bound(n: int, alpha: float = 0.05) -> float:
    """The largest change (as a proportion) that ``n`` pairs without one discordant pair
    leave open: the exact (Clopper-Pearson) two-sided upper limit for a share observed as
    0 of ``n``, ``1 - (alpha/2)**(1/n)``; a change can be no larger than the share of items
    that change, with 0/1 or partial scores in [0, 1]. 30.8 points for 10 pairs, 3.6 for
    100."""
    return 1.0 - (alpha / 2) ** (1.0 / n) if n > 0 else math.nan


def paired_interval(
    differences: Sequence[float], low: float, high: float
) -> tuple[float, float, str | None]:
    """The paired interval the report shows, and a note where the normal one
    (``scorer.paired_difference``: mean +- 1.96 standard errors) would read as certainty
    or cannot be formed. Every pair equal (all differences 0): no discordant pairs, McNemar
    p = 1 in the gate (``gate/_baseline.py``), and the exact bound of
    :func:`no_change_bound` instead of [+0.0, +0.0]; every pair changed by the same amount
    (no spread): from that amount times the exact lower bound on the share of items that
    changed, to the amount; fewer than 2 pairs: not enough pairs to bound the change."""
    n = len(differences)
    if n < 2:
        return math.nan, math.nan, f"{n} shared item(s): not enough pairs to bound the change"
    if all(d == 0 for d in differences):
        bound = no_change_bound(n)
        return (
            -bound,
            bound,
            f"no discordant pairs: all {n} shared items scored the same in both runs "
            f"(the paired test: p = 1); {n} pairs bound the change only to "
            f"±{100 * bound:.1f} points (exact 95%)",
        )
    if len(set(differences)) == 1:  # every pair moved the same way by the same amount
        step, bound = differences[0], no_change_bound(n)
        ends = sorted((step * (1.0 - bound), step))
        return (
            ends[0],
            ends[1],
            f"all {n} shared items changed by {100 * step:+.1f} points: no spread for a "
            f"normal interval; exact 95% bound on the share that changed",
        )
    return low, high, None


def comparison_view(
    comparison: Comparison, current: RunRecord, baseline: RunRecord
) -> ComparisonView:
    """Per task: the delta on the shared items with its paired 95% interval, McNemar's p and
    the flipped items; then the settings and environment fields that differ."""
    rows = []
    for t in comparison.tasks:
        # the items both runs scored, as compare_runs counts them (errors and prompts over
        # the window are not compared)
        base = {i: r for i, r in baseline.items.get(t.task, {}).items() if item_scored(r)}
        cur = {i: r for i, r in current.items.get(t.task, {}).items() if item_scored(r)}
        shared = [i for i in cur if i in base]
        before, after = [item_score(base[i]) for i in shared], [item_score(cur[i]) for i in shared]
        paired = paired_difference(before, after)
        low, high, note = paired_interval(
            [y - x for x, y in zip(before, after, strict=True)], paired.ci_low, paired.ci_high
        )
        rows.append(
            DeltaRow(
                task=t.task,
                n_shared=t.n_shared,
                baseline_score=t.baseline_score,
                current_score=t.current_score,
                delta=t.delta,
                ci_low=low,
                ci_high=high,
                p_value=t.p_value,
                significant=t.significant,
                regressed=list(t.regressed),
                improved=list(t.improved),
                only_in_baseline=t.only_in_baseline,
                only_in_current=t.only_in_current,
                interval_note=note,
                test=t.test,
            )
        )
    return ComparisonView(
        baseline_name=baseline.path.name,
        baseline_path=str(baseline.path),
        alpha=comparison.alpha,
        rows=rows,
        # short differences first: `fewshot.k: 5 -> 1` before the lists of ids it changed
        config_diffs=sorted((format_diff(d) for d in comparison.config_diffs), key=len),
        env_diffs=sorted((format_diff(d) for d in comparison.env_diffs), key=len),
    )


# ---------------------------------------------------------------------------- probes


def probe_flagged(report: Mapping[str, Any], alpha: float) -> bool:
    """The verdict rule of the ``llm_probe`` fixture (``contamination/_decide.py``) on a report's
    JSON: a paired probe flags a task when the published form is answered better and the
    exact McNemar p is below alpha; the order test when its binomial p is below alpha.
    Reports that carry the fixture's own verdict (``verdict.fired``) are taken at their
    word: the null behind it (a reference model, exchangeable items) is not in the JSON's
    top-level numbers."""
    if report.get("no_verdict"):  # the fixture skipped it: no null that fits
        return False
    verdict = report.get("verdict")
    if isinstance(verdict, Mapping) and "fired" in verdict:
        return bool(verdict["fired"])
    n = _int(report.get("n")) or 0
    p = _num(report.get("p_value"))
    if not n or math.isnan(p) or p >= alpha:
        return False
    if report.get("probe") == "canonical_order":
        return True
    return _num(report.get("drop")) > 0


def probe_rows(run_path: Path) -> list[ProbeRow]:
    folder = run_path / "contamination"
    rows: list[ProbeRow] = []
    if not folder.is_dir():
        return rows
    for file in sorted(folder.glob("*.json")):
        data = _read_json(file)
        if not isinstance(data, Mapping) or "probe" not in data:
            continue
        alpha = _num(data.get("alpha"))
        alpha = 0.01 if math.isnan(alpha) else alpha
        order = data.get("probe") == "canonical_order"
        row = ProbeRow(
            file=file.name,
            task=str(data.get("task", "?")),
            probe=str(data["probe"]),
            order_test=order,
            n=_int(data.get("n")) or 0,
            p_value=_num(data.get("p_value")),
            alpha=alpha,
            flagged=probe_flagged(data, alpha),
        )
        row.no_verdict = str(data.get("no_verdict") or "")
        # The verdict, or the one not given that its reason quotes: their numbers, not the
        # probe's top-level ones (the order test's on all items, not exchangeable ones).
        given = data.get("verdict")
        if isinstance(given, Mapping):  # a verdict not given: its reason already says it
            row.validation = str(given.get("validation") or "")
            row.validation_pools = [str(p) for p in given.get("validation_pools") or ()]
        verdict = given or data.get("inspection")
        if isinstance(verdict, Mapping):
            row.summary = str(verdict.get("summary", ""))
            row.null = f"{verdict.get('test', '')} against {verdict.get('null', '')}"
            row.p_value = _num(verdict.get("p_value"))
        elif data.get("probe") == "ts_guessing" and "exact_match_rate" in data:
            row.result = (
                f"exact-match rate {100 * _num(data.get('exact_match_rate')):.1f}% on {row.n} items"
            )
        plan = data.get("handling")
        if isinstance(plan, Mapping):
            row.policy = str(plan.get("policy", ""))
            for name, sc in (plan.get("scores") or {}).items():
                if isinstance(sc, Mapping) and sc.get("n"):
                    low, high = (sc.get("interval") or [math.nan, math.nan])[:2]
                    row.scores.append(
                        f"{name} {100 * _num(sc.get('score')):.1f}% "
                        f"[{100 * _num(low):.1f}, {100 * _num(high):.1f}] (n={sc.get('n')})"
                    )
        if order:
            row.canonical_first = _int(data.get("canonical_first")) or 0
            row.expected_by_chance = _num(data.get("expected_by_chance"))
            row.k = _int(data.get("k")) or 0
            row.mean_margin = _num(data.get("mean_margin_nats"))
            detail = verdict.get("detail") if isinstance(verdict, Mapping) else None
            first = (detail or {}).get("first", (detail or {}).get("model_first"))
            if first is not None and isinstance(verdict, Mapping):
                # the share the verdict tested: of its items (exchangeable, or shared)
                row.canonical_first = _int(first) or 0
                row.order_n = _int(verdict.get("n")) or 0
        elif "canonical_accuracy" in data:  # a paired probe (option shuffle, rewrites)
            row.canonical_accuracy = _num(data.get("canonical_accuracy"))
            row.rewritten_accuracy = _num(data.get("rewritten_accuracy"))
            row.b = _int(data.get("mcnemar_b")) or 0
            row.c = _int(data.get("mcnemar_c")) or 0
            row.only_canonical = _num(data.get("only_canonical"))
            row.skipped = len(data.get("skipped") or [])
            row.items = [
                {
                    "id": str(i.get("item_id")),
                    "canonical": bool(i.get("canonical_correct")),
                    "rewritten": [bool(x) for x in i.get("rewritten_correct") or []],
                }
                for i in data.get("items") or []
                if isinstance(i, Mapping)
            ]
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------- failures


def failure_views(run_path: Path) -> list[FailureView]:
    data = _read_json(run_path / "failures.json")
    if not isinstance(data, list):
        return []
    views = []
    for entry in data:
        if not isinstance(entry, Mapping):
            continue
        distribution = entry.get("distribution") or {}
        views.append(
            FailureView(
                task=str(entry.get("task", "?")),
                n_items=_int(entry.get("n_items")) or 0,
                n_failed=_int(entry.get("n_failed")) or 0,
                distribution={str(k): int(v) for k, v in distribution.items() if _int(v)},
                answer_in_output=_int(entry.get("answer_in_output")) or 0,
                samples=[
                    {
                        "item_id": str(s.get("item_id", "?")),
                        "kind": str(s.get("kind", "?")),
                        "answer_in_output": bool(s.get("answer_in_output")),
                        "extracted": s.get("extracted"),
                        "target": str(s.get("target", "")),
                    }
                    for s in entry.get("samples") or []
                    if isinstance(s, Mapping)
                ],
            )
        )
    return views


# ---------------------------------------------------------------------------- history


def _model_identity(config: Mapping[str, Any]) -> tuple[str, str] | None:
    sha = config.get("model_sha256") or _get(config, "environment", "model", "sha256")
    if sha:
        return ("sha256", str(sha))
    model = config.get("model")
    return ("name", str(model)) if model else None


def _started(config: Mapping[str, Any], path: Path) -> str:
    started = config.get("started")
    if isinstance(started, str) and started:
        return started
    try:  # run directories are named <YYYYMMDD-HHMMSS>_<model>_<commit>
        return _dt.datetime.strptime(path.name[:15], "%Y%m%d-%H%M%S").isoformat()
    except ValueError:
        return ""


def item_set_digest(ids: Iterable[str]) -> str:
    """What defines a trend's item set: SHA256 of the task's item ids (each once, sorted,
    one per line), first 12 hex digits. Runs with the same ``--llm-limit`` and selection
    of the same data share it; a ``-k`` run of a few items, another limit or other data
    do not."""
    text = "\n".join(sorted(set(ids)))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


_ITEM_ID = re.compile(r'"item_id": "([^"\\]*)"')


def _recorded_ids(run: Path, task: str) -> list[str]:
    """The item ids in an earlier run's output file of a task (only the ids are kept).

    The plugin writes each record with ``json.dumps(..., sort_keys=True)``, so the id is
    read from its ``"item_id": "..."`` field without parsing the line (a full MMLU file is
    56 MB: 0.2 s this way, 1.1 s parsed; inside a JSON string a quote is always escaped,
    so record text cannot fake the field); a line where it is not found exactly once (an
    id with an escape, a nested ``item_id`` key, another writer) is parsed."""
    ids = []
    try:
        with (run / output_file(task)).open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                found = _ITEM_ID.findall(line)
                if len(found) == 1 and line.startswith("{"):  # one: no nested item_id key
                    ids.append(found[0])
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(record, Mapping) and record.get("item_id") is not None:
                    ids.append(str(record["item_id"]))
    except OSError:
        return []
    return ids


def selection_of(args: Sequence[str]) -> str | None:
    """A debug selection in a run's command line, as its leases recorded it: ``-k EXPR``
    (any form), ``--deselect``, or node ids of a spec's items (``spec.yaml::item``; a node
    id in a ``.py`` file, a contamination probe, selects no task items). None for a run of
    whole specs (``--llm-limit`` alone is not a debug selection: its items are the first N)."""
    found = []
    for k, arg in enumerate(args):
        if arg in ("-k", "--keyword") and k + 1 < len(args):
            found.append(f"-k {args[k + 1]}")
        elif arg.startswith("--keyword="):
            found.append(f"-k {arg.split('=', 1)[1]}")
        elif arg.startswith("-k") and len(arg) > 2 and not arg.startswith("--"):
            found.append(f"-k {arg[2:]}")
        elif arg == "--deselect" or arg.startswith("--deselect="):
            found.append("--deselect")
        elif "::" in arg and not arg.startswith("-") and not arg.split("::")[0].endswith(".py"):
            found.append(f"node id {arg}")  # a spec's item; a probe's (.py) selects no items
    return "; ".join(found) or None


def run_selection(run: Path) -> str | None:
    """The debug selection of a run, from the command lines its leases recorded
    (``processes/*.json``, ``args``); None when no process selected items that way."""
    folder = run / PROCESSES
    try:
        files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    except OSError:
        return None
    for file in files:
        args = _get(_read_json(file), "args")
        if isinstance(args, list):
            found = selection_of([str(a) for a in args])
            if found:
                return found
    return None


def _earlier_runs(
    run: RunRecord, history_dir: Path, started: str
) -> list[tuple[str, Path, dict[str, Any], dict[str, Any]]] | None:
    """The finished runs in ``history_dir`` made with ``run``'s model before it, oldest
    first, as (started, folder, eval_config, metrics_summary); None when ``run`` names no
    model or there is no such folder."""
    identity = _model_identity(run.config)
    if identity is None or not history_dir.is_dir():
        return None
    try:
        candidates = sorted(p for p in history_dir.iterdir() if p.is_dir())
    except OSError:
        return None
    earlier: list[tuple[str, Path, dict[str, Any], dict[str, Any]]] = []
    for path in candidates:
        if path.resolve() == run.path.resolve():
            continue
        metrics = _summary_or_none(path / "metrics_summary.json")
        config = _read_json(path / "eval_config.json")
        if metrics is None or not isinstance(config, dict):
            continue
        if run_state(path)[0] != "finished":  # interrupted runs write a summary too
            continue
        if _model_identity(config) != identity:
            continue
        when = _started(config, path)
        if started and when and when >= started:
            continue
        earlier.append((when, path, config, metrics))
    earlier.sort(key=lambda e: (e[0], e[1].name))
    return earlier


def history_series(
    run: RunRecord, rows: Sequence[TaskRow], history_dir: Path, limit: int = HISTORY_LIMIT
) -> list[HistorySeries]:
    """Scores of the earlier finished runs in ``history_dir`` made with the same model (same
    weights digest, or the same name when a run has none) for each task of this run, over
    the same item set (:func:`item_set_digest`); runs over other item sets (other limits,
    ``-k`` debug runs) are counted, not drawn."""
    started = _started(run.config, run.path)
    earlier = _earlier_runs(run, history_dir, started)
    if earlier is None:
        return []
    selections = {path: run_selection(path) for _, path, _, _ in earlier}
    own_selection = run_selection(run.path)
    series = []
    for row in rows:
        if math.isnan(row.score):
            continue
        own_ids = list(run.items.get(row.name, {}))
        digest = item_set_digest(own_ids)
        current_hash = _get(run.config, "tasks", row.name, "config_hash")
        points = []
        other_sets = other_debug = 0
        for when, path, config, metrics in earlier:
            entry = metrics.get(row.name)
            if not isinstance(entry, Mapping) or math.isnan(_num(entry.get("score"))):
                continue
            if item_set_digest(_recorded_ids(path, row.name)) != digest:
                other_sets += 1
                other_debug += selections[path] is not None
                continue
            ci = entry.get("ci95") or [math.nan, math.nan]
            points.append(
                HistoryPoint(
                    run=path.name,
                    started=when,
                    score=_num(entry.get("score")),
                    ci_low=_num(ci[0]),
                    ci_high=_num(ci[1]),
                    n=_int(entry.get("n")) or 0,
                    total=_int(entry.get("total_items")),
                    same_config=_get(config, "tasks", row.name, "config_hash") == current_hash,
                    selection=selections[path],
                )
            )
        if not points and not other_sets:
            continue
        found = len(points)
        points = points[-limit:]
        points.append(
            HistoryPoint(
                run=run.path.name,
                started=started,
                score=row.score,
                ci_low=row.ci_low,
                ci_high=row.ci_high,
                n=row.n,
                total=row.total,
                same_config=True,
                current=True,
                selection=own_selection,
            )
        )
        series.append(
            HistorySeries(
                task=row.name,
                points=points,
                earlier_found=found,
                item_set=digest,
                n_items=len(set(own_ids)),
                other_sets=other_sets,
                other_debug=other_debug,
                selection=own_selection,
            )
        )
    return series


# ---------------------------------------------------------------------------- item browser


@dataclass(frozen=True)
class Prefix:
    """A prompt prefix shared by a group of items: description and few-shot block."""

    text: str
    fewshot_ids: tuple[str, ...]
    # Few-shot examples counted in the prefix: the assistant turns before the item's own
    # turn of a chat prompt with few-shot turns; None where they are text in one message.
    turns: int | None = None
    chat: bool = False  # the prefix begins with a chat template's header/system message


def prefix_label(prefix: Prefix, fewshot: Any) -> str:
    """What the fold holds, in words, for its summary line. Few-shot text from a file (BBH's
    cot-prompts: one id for a text of several examples) is named as such, with the spec's
    ``fewshot.k``, rather than counted as one example."""
    ids = prefix.fewshot_ids
    shown = ", ".join(ids)
    shown = shown if len(shown) <= 120 else shown[:119] + "…"
    head = "chat header, " if prefix.chat else ""
    text_file = _get(fewshot, "text_file")
    if text_file and len(ids) == 1:
        k = _int(_get(fewshot, "k"))
        shots = f"{k}-shot text (the spec's fewshot.k)" if k else "few-shot text"
        return f"{head}description and {shots} from {ids[0].split('#')[0]}"
    if prefix.turns is not None:
        return (
            f"system message and {prefix.turns} few-shot example(s) as chat turns "
            f"({shown}); the item's own turn follows"
        )
    return f"{head}description and few-shot block: {len(ids)} example(s) ({shown})"


def _common_prefix(texts: Sequence[str]) -> str:
    """The longest string every text starts with (character by character)."""
    if not texts:
        return ""
    low, high = min(texts), max(texts)  # the common prefix of all is that of these two
    n = 0
    while n < min(len(low), len(high)) and low[n] == high[n]:
        n += 1
    return low[:n]


_TAG_BEFORE_ROLE = re.compile(r"(<[^<>\s]*>|<\|?|\[)$")  # <|im_start|>, <start_of_turn>, <|


def _find_content(prompt: str, content: str, end: int | None = None) -> tuple[int, int] | None:
    """Where a message's content sits in the rendered prompt (the last place before ``end``):
    templates print it as written or trimmed (Llama-3's ``| trim``)."""
    for text in (content, content.strip()):
        if text:
            at = prompt.rfind(text, 0, len(prompt) if end is None else end)
            if at >= 0:
                return at, at + len(text)
    return None


def _turn_start(gap: str, role: str) -> int:
    """The offset in ``gap`` (the text between the previous message's content and this
    message's content) where this message's turn begins: before the role header's opening
    tag (``<|im_start|>user``, ``<|start_header_id|>user``, ``<start_of_turn>user``,
    ``<|user|>``) or at the start of the header's line (``### User:``). The previous turn's
    end-of-turn token (``<|im_end|>``, ``<|eot_id|>``) stays with the previous turn. Without
    the role's name in the gap (``[INST]``-style templates), the whole gap is the header."""
    at = gap.lower().rfind(role.lower())
    if at < 0:
        return len(gap)
    head = gap[:at]
    tag = _TAG_BEFORE_ROLE.search(head)
    if tag:
        return tag.start()
    newline = head.rfind("\n")
    return newline + 1 if newline >= 0 else at


@dataclass(frozen=True)
class ChatSplit:
    """A chat-rendered prompt seen through its conversation (the record's ``messages``).

    ``turn``: where the item's own user turn begins (header included); ``content``: where
    that turn's text begins and ends; ``multiturn``: the few-shot examples are earlier
    user/assistant turns (``prompt.fewshot_multiturn=true``) rather than text inside the one user
    message."""

    turn: int
    content: tuple[int, int]
    multiturn: bool


def chat_split(prompt: str, messages: Any) -> ChatSplit | None:
    """Find the item's own turn in a prompt rendered by a chat template (any family: the
    positions come from the messages' contents, not from one template's markers). None for
    a completion prompt, or where the last user message cannot be found in the prompt."""
    if not isinstance(messages, list) or not messages:
        return None
    turns = [m for m in messages if isinstance(m, Mapping) and isinstance(m.get("content"), str)]
    users = [i for i, m in enumerate(turns) if m.get("role") == "user"]
    if not users:
        return None
    last = users[-1]
    found = _find_content(prompt, str(turns[last]["content"]))
    if found is None:
        return None
    start = found[0]
    earlier = [str(m["content"]) for m in turns[:last] if str(m["content"]).strip()]
    previous_end = 0
    if earlier:
        prev = _find_content(prompt, earlier[-1], start)
        previous_end = prev[1] if prev else 0
    gap = prompt[previous_end:start]
    turn = previous_end + _turn_start(gap, str(turns[last].get("role") or "user"))
    multiturn = any(turns[i].get("role") == "assistant" for i in range(last))
    return ChatSplit(turn=turn, content=found, multiturn=multiturn)


def _fold_end(
    prompts: Sequence[str], chats: Sequence[ChatSplit | None], separator: str | None
) -> list[int]:
    """Per prompt of one group (same subset, same few-shot ids), where its folded prefix
    ends (0: nothing folded).

    A chat prompt with few-shot turns is cut where the item's own user turn begins, so the
    fold holds the system message and every example turn and the item's question stays in
    view. Otherwise (a completion prompt, or a chat prompt whose one user message holds the
    examples) the cut is just after the last few-shot separator in the group's common
    prefix (in a group of one: in the prompt), searched inside the item's user message for
    a chat prompt; without a separator, a group of several is cut at its common prefix."""
    if chats and all(c is not None and c.multiturn for c in chats):
        return [c.turn for c in chats if c is not None]
    common = _common_prefix(prompts)
    low, high = 0, len(common)
    if all(c is not None for c in chats):
        low = max(c.content[0] for c in chats if c is not None)
        high = min([high] + [c.content[1] for c in chats if c is not None])
    end = 0
    cut = common.rfind(separator, low, high) if separator and high > low else -1
    if cut >= 0:
        end = cut + len(separator or "")
    elif len(prompts) > 1 and low == 0:
        end = len(common)
    end = min(end, min(len(p) for p in prompts))
    return [end] * len(prompts)


def split_prompts(
    records: Sequence[Mapping[str, Any]], separator: str | None
) -> tuple[list[Prefix], list[tuple[int, str]]]:
    """Split each prompt into a shared prefix (description and few-shot examples) and the
    rest, so that the page folds the few-shot block and stores it once.

    Items are grouped by subset and few-shot ids (one group, one few-shot block); where the
    fold ends is :func:`_fold_end`'s rule (chat prompts: at the item's own turn). Items
    without few-shot examples keep their whole prompt. Returns the prefixes (each distinct
    text once) and, per record, ``(prefix index or -1, rest)``; ``prefix + rest`` is the
    prompt.
    """
    groups: dict[tuple[Any, tuple[str, ...]], list[int]] = {}
    for index, record in enumerate(records):
        ids = tuple(str(i) for i in record.get("fewshot_ids") or [])
        if ids and isinstance(record.get("prompt"), str):
            groups.setdefault((record.get("subset"), ids), []).append(index)
    prefixes: list[Prefix] = []
    known: dict[Prefix, int] = {}
    split: list[tuple[int, str]] = [(-1, str(r.get("prompt") or "")) for r in records]
    for (_, ids), members in groups.items():
        prompts = [str(records[i]["prompt"]) for i in members]
        chats = [
            chat_split(p, records[i].get("messages")) for i, p in zip(members, prompts, strict=True)
        ]
        ends = _fold_end(prompts, chats, separator)
        for i, prompt, chat, end in zip(members, prompts, chats, ends, strict=True):
            if end <= 0:
                continue
            turns = None
            if chat is not None and chat.multiturn:
                turns = sum(
                    1
                    for m in records[i].get("messages") or []
                    if isinstance(m, Mapping) and m.get("role") == "assistant"
                )
            prefix = Prefix(prompt[:end], ids, turns, chat is not None)
            if prefix not in known:
                known[prefix] = len(prefixes)
                prefixes.append(prefix)
            split[i] = (known[prefix], prompt[end:])
    return prefixes, split


def _round(values: Iterable[Any], digits: int = 4) -> list[float | None]:
    out: list[float | None] = []
    for v in values:
        x = _num(v)
        out.append(round(x, digits) if math.isfinite(x) else None)
    return out


def _details_text(details: Any) -> str | None:
    if not isinstance(details, Mapping) or not details:
        return None
    text = json.dumps(_jsonable(details), ensure_ascii=False, indent=1, sort_keys=True)
    if len(text) > DETAILS_LIMIT:
        text = (
            text[:DETAILS_LIMIT] + f"\n… (cut at {DETAILS_LIMIT:,} of {len(text):,} characters; "
            "the full record is in the task's output file)"
        )
    return text


def item_entry(
    record: Mapping[str, Any],
    prefix: int,
    rest: str,
    subsets: dict[str, int],
    compare: str | None,
    flips: Mapping[str, str],
) -> dict[str, Any]:
    """One item as the browser reads it (short keys: the page of a full MMLU run holds
    14,042 of them)."""
    # The evaluation stack loads only where a report is built, not with the package.
    from pytest_llmeval.eval import classify

    item_id = str(record.get("item_id"))
    entry: dict[str, Any] = {"id": item_id, "q": rest, "t": str(record.get("target", ""))}
    if prefix >= 0:
        entry["pf"] = prefix
    subset = record.get("subset")
    if subset is not None:
        entry["s"] = subsets.setdefault(str(subset), len(subsets))
    scored = item_scored(record)
    if record.get("error"):
        entry["st"] = ITEM_ERROR
        entry["er"] = str(record["error"])
    elif not scored:
        entry["st"] = NOT_SCORED
    else:
        correct = bool(record.get("correct"))
        entry["ok"] = 1 if correct else 0
        score = _num(record.get("score"))
        if math.isfinite(score) and score not in (0.0, 1.0):
            entry["sc"] = round(score, 4)
        if not correct:
            entry["fc"] = classify(record, compare)
    if record.get("choices"):
        entry["ch"] = [str(c) for c in record["choices"]]
        entry["lp"] = _round(record.get("logprobs") or [])
        for key, short in (("pred", "pr"), ("gold", "g"), ("pred_norm", "pn")):
            if _int(record.get(key)) is not None:
                entry[short] = record[key]
    if record.get("output") is not None:
        entry["o"] = str(record["output"])
    for key, short in (
        ("extracted", "x"),
        ("extractor", "xr"),
        ("finish_reason", "fr"),
        ("n_output_tokens", "nt"),
        ("reused_from", "ru"),
    ):
        if record.get(key) is not None:
            entry[short] = record[key]
    if record.get("determinism") not in (None, "ok"):
        entry["de"] = str(record["determinism"])
    if record.get("repeat_scores"):
        entry["rs"] = _round(record["repeat_scores"])
    details = _details_text(record.get("details"))
    if details:
        entry["d"] = details
    if item_id in flips:
        entry["fl"] = flips[item_id]
    named = record.get("metrics")
    if isinstance(named, Mapping) and named:  # GSM8K's strict_match, flexible_extract
        entry["nm"] = [
            [str(name), _round([_get(m, "score")])[0], _get(m, "extracted")]
            for name, m in named.items()
        ]
    return entry


def browser_data(
    run: RunRecord, comparison: ComparisonView | None, rows: Sequence[TaskRow]
) -> dict[str, Any]:
    """The JSON block the item browser reads: per task its items (in record order), the
    shared prompt prefixes, subsets, the failure classes present, and flips."""
    # The evaluation stack loads only where a report is built, not with the package.
    from pytest_llmeval.eval import FAILURE_CLASSES

    flips: dict[str, dict[str, str]] = {}
    partial: set[str] = set()  # tasks compared on partial scores: flips are lower/higher
    if comparison is not None:
        for d in comparison.rows:
            if not d.binary:
                partial.add(d.task)
            flips[d.task] = {
                **dict.fromkeys(d.regressed, "regressed"),
                **dict.fromkeys(d.improved, "improved"),
            }
    metrics = {r.name: r.metric for r in rows}
    tasks = []
    for name in sorted(run.items):
        records = list(run.items[name].values())
        task_config = _get(run.config, "tasks", name) or {}
        separator = _get(task_config, "prompt", "fewshot_separator")
        compare = _get(task_config, "generation", "compare")
        prefixes, split = split_prompts(records, separator if isinstance(separator, str) else None)
        subsets: dict[str, int] = {}
        items = [
            item_entry(
                r,
                prefix,
                rest,
                subsets,
                compare if isinstance(compare, str) else None,
                flips.get(name, {}),
            )
            for r, (prefix, rest) in zip(records, split, strict=True)
        ]
        order = [m.name for m in _spec_order(metric_rows(None, records), task_config)]
        for entry in items:  # named metrics in the spec's order, as in the task table
            if "nm" in entry:
                entry["nm"].sort(key=lambda m: order.index(m[0]) if m[0] in order else len(order))
        present = {str(i["fc"]) for i in items if "fc" in i}
        tasks.append(
            {
                "name": name,
                "metric": metrics.get(name, ""),
                "subsets": list(subsets),
                "prefixes": [
                    {
                        "t": p.text,
                        "ids": list(p.fewshot_ids),
                        "lb": prefix_label(p, _get(task_config, "fewshot")),
                    }
                    for p in prefixes
                ],
                "classes": [c for c in FAILURE_CLASSES if c in present]
                + sorted(present - set(FAILURE_CLASSES)),
                "flips": bool(flips.get(name)),
                "flips_scored": name in partial,
                "items": items,
            }
        )
    return {
        "baseline": comparison.baseline_name if comparison else None,
        "tasks": tasks,
    }


# ---------------------------------------------------------------------------- tasks not run


def tasks_not_run(run: RunRecord) -> list[tuple[str, str, str]]:
    """The tasks the run collected and skipped (``metrics_summary.json`` entries with
    status ``skipped``: its data not installed, no model, ...): (task, reason, what to
    pass), so that the page says why a task has no score."""
    out = []
    for name, entry in sorted(run.metrics.items()):
        if isinstance(entry, Mapping) and entry.get("status") == "skipped":
            out.append((str(name), str(entry.get("reason") or "-"), str(entry.get("fix") or "-")))
    return out


# ---------------------------------------------------------------------------- prepare


def _mark_damaged(
    rows: list[TaskRow], damage: Sequence[Damage], has_summary: bool, ended: str
) -> str:
    """Mark the rows of a damaged run (in place): a score from the surviving lines alone is
    not the run's, so it is not shown; a task whose summary holds is marked. Returns the
    page's note on the damage."""
    damaged_tasks = {d.task for d in damage}
    for i, row in enumerate(rows):
        if not row.from_summary:  # a score from surviving lines is not the run's score
            rows[i] = dataclasses.replace(
                row,
                score=math.nan,
                ci_low=math.nan,
                ci_high=math.nan,
                status="damaged",
                damaged=True,
                subrows=[],
            )
        elif row.name in damaged_tasks:
            rows[i] = dataclasses.replace(row, damaged=True)
    shown = (
        " No task score is shown: without its summary, a score computed from the lines "
        "that are left would not be the run's."
        if not has_summary
        else " Task scores are as its summary recorded them; the item browser shows only "
        "the item records that are left."
    )
    return (
        f"This run's records are damaged{ended}: {len(damage)} file(s) missing or not "
        f"matching what the run recorded (listed above).{shown} {DAMAGE_FIX[0].upper()}"
        f"{DAMAGE_FIX[1:]}."
    )


def _state_note(
    state: str, reason: str | None, has_items: bool, has_summary: bool, superseded: bool
) -> str | None:
    """The page's note on a run that is still written or was interrupted (None for a
    finished or damaged one: a damaged run has its own note)."""
    computed = (
        " Task scores are computed here from its item records; no floor was checked."
        if not has_summary
        else " Its summary covers the items that ran before it stopped."
    )
    if state == "live":
        return (
            "This run is still being written: a process holds its lease. The page shows "
            "the records so far." + (computed if has_items else "")
        )
    if state == "interrupted" and not has_items and not has_summary:
        return (
            "This run has no item records and no metrics_summary.json: it ran only "
            "contamination probes, or it stopped before its first result."
        )
    if state == "interrupted":
        why = f" ({reason})" if reason else ""
        resumable = "" if superseded else " Its finished items are offered for resume."
        return f"This run was interrupted{why}." + computed + resumable
    return None


def prepare_report(
    run: Path | RunRecord,
    baseline: Path | RunRecord | None = None,
    *,
    history_dir: Path | None = None,
    history_limit: int = HISTORY_LIMIT,
    alpha: float = 0.05,
) -> ReportModel:
    """Read a run directory (and a baseline run, and earlier runs in ``history_dir``,
    default: the folder holding the run) into the data the report shows."""
    record = run if isinstance(run, RunRecord) else load_run(Path(run))
    path = record.path
    rows = task_rows(record)
    view: ComparisonView | None = None
    if baseline is not None:
        base = baseline if isinstance(baseline, RunRecord) else load_run(Path(baseline))
        view = comparison_view(compare_runs(record, base, alpha), record, base)
    if history_dir is None:
        history_dir = path.resolve().parent
    state, reason = run_state(path)
    superseded = path / "superseded_by.txt"
    if state == "superseded":  # only an interrupted run's items are reused
        state = "interrupted"
    has_summary = (path / "metrics_summary.json").is_file()
    notes = []
    damage = run_damage(path)
    if damage:
        ended = f" (its leases: {state}{f', {reason}' if reason else ''})"
        state, reason = "damaged", "; ".join(str(d) for d in damage)
        notes.append(_mark_damaged(rows, damage, has_summary, ended))
    finished = state == "finished"
    note = _state_note(state, reason, any(record.items.values()), has_summary, superseded.is_file())
    if note:
        notes.append(note)
    model = record.config.get("model") or "?"
    started = record.config.get("started")
    return ReportModel(
        title=f"pytest-llmeval: {model}",
        run_name=path.name,
        run_path=str(path),
        started=str(started) if started else None,
        finished=finished,
        superseded_by=(
            superseded.read_text(encoding="utf-8", errors="replace").strip()
            if superseded.is_file()
            else None
        ),
        facts=environment_facts(record.config),
        config_json=json.dumps(
            _jsonable(record.config), indent=1, sort_keys=True, ensure_ascii=False
        ),
        tasks=rows,
        comparison=view,
        probes=probe_rows(path),
        failures=failure_views(path),
        history=history_series(record, rows, history_dir, history_limit),
        history_dir=str(history_dir),
        browser=browser_data(record, view, rows),
        notes=notes,
        state=state,
        state_reason=reason if state in ("interrupted", "damaged") else None,
        damage=[str(d) for d in damage],
        not_run=tasks_not_run(record),
    )


# ---------------------------------------------------------------------------- render


def _asset(name: str) -> str:
    return (resources.files("pytest_llmeval.record") / ASSETS / name).read_text(encoding="utf-8")


def render_report(model: ReportModel) -> str:
    """The report as one HTML document (style, script and data inline; no network)."""
    import jinja2
    from markupsafe import Markup

    env = jinja2.Environment(
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True
    )
    env.filters["pct"] = pct
    env.filters["p"] = fmt_p
    env.globals.update(
        interval_svg=lambda *a, **k: Markup(interval_svg(*a, **k)),
        delta_svg=lambda *a, **k: Markup(delta_svg(*a, **k)),
        bars_svg=lambda *a, **k: Markup(bars_svg(*a, **k)),
        pair_svg=lambda *a, **k: Markup(pair_svg(*a, **k)),
        strip_svg=lambda *a, **k: Markup(strip_svg(*a, **k)),
        history_svg=lambda *a, **k: Markup(history_svg(*a, **k)),
        isfinite=math.isfinite,
        FLIPPED_SHOWN=FLIPPED_SHOWN,
        DIFFS_SHOWN=DIFFS_SHOWN,
    )
    template = env.from_string(_asset("report.html.j2"))
    script = _asset("report.js")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    delta_scale = 0.0
    if model.comparison is not None:
        for row in model.comparison.rows:
            for v in (row.delta, row.ci_low, row.ci_high):
                if math.isfinite(v):
                    delta_scale = max(delta_scale, abs(100 * v))
    delta_scale = max(5.0, math.ceil(delta_scale / 5) * 5)
    return template.render(
        m=model,
        css=Markup(_asset("report.css")),
        script=Markup(script),
        script_hash=f"sha256-{digest}",
        data=Markup(script_json(model.browser)),
        delta_scale=delta_scale,
    )


def write_report(
    run: Path,
    baseline: Path | None = None,
    *,
    out: Path | None = None,
    history_dir: Path | None = None,
) -> Path:
    """Build the report of a run directory from its records and write it to
    ``<run>/report.html`` (or ``out``). Returns the path written."""
    run = Path(run)
    model = prepare_report(run, baseline, history_dir=history_dir)
    text = render_report(model)
    target = Path(out) if out is not None else run / REPORT
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise LlmEvalError(f"{target}: cannot write the report: {exc}") from exc
    return target
