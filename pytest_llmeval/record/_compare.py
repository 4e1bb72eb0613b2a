"""Comparison of a run with a baseline run.

Plain Python (no pytest, no torch): reads two run directories, pairs their items and tests
each task's change on the items both runs scored (``gate.paired_delta``), lists the
settings and environment fields that differ, and prints the comparison. The gate on the
result (``parse_gate`` / ``gate_failures``) is in ``gate/_baseline.py``.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from pytest_llmeval._errors import LlmEvalError
from pytest_llmeval.gate import (
    ABSENT,
    Comparison,
    ConfigDiff,
    SummaryLayoutError,
    format_diff,
    format_p,
    paired_delta,
    summary_tasks,
)
from pytest_llmeval.record._env import DRIFT_LIBRARIES, flatten
from pytest_llmeval.record._rundir import iter_item_lines

CONFIG_FILE = "eval_config.json"
METRICS_FILE = "metrics_summary.json"
TASKS_DIR = "tasks"
OUTPUT_SUFFIX = "_output.jsonl"

# Fields of eval_config.json that do not affect scores (or are compared as environment).
# Each pattern is dotted; a segment is an fnmatch pattern that never spans a dot; a
# leading "**." lets the pattern start at any depth. A key is volatile when a pattern
# matches it or one of its parents.
VOLATILE_FIELDS: tuple[str, ...] = (
    "environment",  # compared separately, see ENV_FIELDS
    "run_dir",
    "output",
    "output_dir",
    "data_dirs",
    # where each setting was given (its values that change scores are in the task configs
    # and the framework, compared there)
    "settings",
    "model_info.model_path",
    "**.model_path",
    # environment facts that the config repeats (compared as environment when a run has
    # no "environment" snapshot, see CONFIG_ENV_FIELDS)
    "model_info.device_name",
    "model_info.torch",
    "model_info.transformers",
    "framework.torch",
    "framework.transformers",
    # where a served model was reached and how hard (the served model is compared)
    "framework.base_url",
    "framework.concurrency",
    "framework.max_retries",
    # a record of how two backends agree, attached to the run: metadata, not a setting
    "agreement",
    # per-task bookkeeping: the floor gates the score but does not change it; the selection
    # is what the shared-item pairing accounts for; the spec file's location is not content
    "tasks.*.floor",
    "tasks.*.selected",
    "tasks.*.source",
    # digests that fold in library versions: those are compared as environment instead;
    # every setting the config hash covers is compared field by field above
    "tasks.*.config_hash",
    "tasks.*.resumed_from",
    # the resume key folds in the code's git commit; per-worker facts are environment
    "tasks.*.resume_key",
    "workers",
    "**.*timestamp*",
    "**.*_at",
    "**.started",
    "**.finished",
    "**.date",
    "**.time",
    "**.*_time",
    "**.*hostname*",
    "**.host",
    "**.*duration*",
    "**.seconds",
    "**.*_seconds",
    "**.elapsed*",
    "**.*_dir",
    "**.*_dirs",
)

# Fields of eval_config.json's "environment" compared as environment differences.
ENV_FIELDS: tuple[str, ...] = (
    # the score-relevant libraries (pytest or syrupy upgrades do not change scores)
    *(f"libraries.{name}" for name in DRIFT_LIBRARIES),
    "cuda.cuda",
    "cuda.gpus",
    "model.sha256",
)
# Fields of eval_config.json compared as environment when either run has no "environment"
# snapshot (older records).
CONFIG_ENV_FIELDS: tuple[str, ...] = (
    "model_info.torch",
    "model_info.transformers",
    "model_info.device_name",
    "framework.torch",
    "framework.transformers",
)


# ---------------------------------------------------------------------------- run records


@dataclass
class RunRecord:
    """One run directory as read back: its config, task summaries and item results."""

    path: Path
    config: dict[str, Any]
    metrics: dict[str, Any]
    items: dict[str, dict[str, dict[str, Any]]]  # task -> item id -> item result


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise LlmEvalError(f"{path}: cannot be read: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise LlmEvalError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise LlmEvalError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def _read_items(path: Path) -> dict[str, dict[str, Any]]:
    """Item results of one task file; the last line of an item wins, broken lines are skipped."""
    return {str(record["item_id"]): record for record in iter_item_lines(path)}


def read_summary(path: Path) -> dict[str, dict[str, Any]]:
    """The task entries of the ``metrics_summary.json`` at ``path``, in the current layout
    whichever layout it was written in (:func:`gate.summary_tasks`). Raises
    ``LlmEvalError`` naming the file when it cannot be read."""
    try:
        return summary_tasks(_read_json_object(path))
    except SummaryLayoutError as exc:
        raise LlmEvalError(f"{path}: {exc}") from None


def load_run(path: Path) -> RunRecord:
    """Read a run directory (``eval_config.json``, ``tasks/*_output.jsonl``,
    ``metrics_summary.json``). Raises ``LlmEvalError`` when ``path`` is not one."""
    path = Path(path)
    config_file = path / CONFIG_FILE
    tasks_dir = path / TASKS_DIR
    if not path.is_dir() or not (config_file.is_file() or tasks_dir.is_dir()):
        raise LlmEvalError(
            f"{path}: not a run directory (no {CONFIG_FILE} and no {TASKS_DIR}/); "
            "pass the directory a run wrote under its output folder"
        )
    config = _read_json_object(config_file) if config_file.is_file() else {}
    metrics_file = path / METRICS_FILE
    metrics = read_summary(metrics_file) if metrics_file.is_file() else {}
    items: dict[str, dict[str, dict[str, Any]]] = {}
    if tasks_dir.is_dir():
        for file in sorted(tasks_dir.glob(f"*{OUTPUT_SUFFIX}")):
            task = file.name[: -len(OUTPUT_SUFFIX)]
            if task and file.is_file():
                items[task] = _read_items(file)
    return RunRecord(path=path, config=config, metrics=metrics, items=items)


# ---------------------------------------------------------------------------- comparison


def _pattern_matches(pattern: str, parts: Sequence[str]) -> bool:
    anywhere = pattern.startswith("**.")
    segments = pattern[3:].split(".") if anywhere else pattern.split(".")
    starts = range(len(parts) - len(segments) + 1) if anywhere else range(1)
    for start in starts:
        window = parts[start : start + len(segments)]
        if len(window) == len(segments) and all(
            fnmatchcase(part, seg) for part, seg in zip(window, segments, strict=True)
        ):
            return True
    return False


def matches_any(key: str, patterns: Iterable[str]) -> bool:
    """Whether a dotted key (or one of its parents) matches one of the dotted patterns."""
    parts = key.split(".")
    return any(_pattern_matches(p, parts) for p in patterns)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 5 == 5.0, but true != 1 and NaN == NaN."""
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def _diffs(
    base: Mapping[str, Any], cur: Mapping[str, Any], keep: Iterable[str] | None = None
) -> list[ConfigDiff]:
    keys = sorted(set(base) | set(cur))
    if keep is not None:
        patterns = tuple(keep)
        keys = [k for k in keys if matches_any(k, patterns)]
    return [
        ConfigDiff(k, base.get(k, ABSENT), cur.get(k, ABSENT))
        for k in keys
        if not (k in base and k in cur and _same(base[k], cur[k]))
    ]


def _config_diffs(
    base: Mapping[str, Any], cur: Mapping[str, Any], volatile: Sequence[str]
) -> list[ConfigDiff]:
    base_tasks = base.get("tasks") if isinstance(base.get("tasks"), Mapping) else {}
    cur_tasks = cur.get("tasks") if isinstance(cur.get("tasks"), Mapping) else {}
    assert isinstance(base_tasks, Mapping) and isinstance(cur_tasks, Mapping)
    # A task that only one run has is reported as a task (n_shared=0), not as settings.
    one_sided = tuple(f"tasks.{t}" for t in set(base_tasks) ^ set(cur_tasks))

    def relevant(flat: Mapping[str, Any]) -> dict[str, Any]:
        return {
            k: v
            for k, v in flat.items()
            if not matches_any(k, volatile) and not matches_any(k, one_sided)
        }

    return _diffs(relevant(flatten(base)), relevant(flatten(cur)))


def _env_diffs(base: Mapping[str, Any], cur: Mapping[str, Any]) -> list[ConfigDiff]:
    base_env = base.get("environment")
    cur_env = cur.get("environment")
    diffs = _diffs(
        flatten(base_env if isinstance(base_env, Mapping) else {}, "environment."),
        flatten(cur_env if isinstance(cur_env, Mapping) else {}, "environment."),
        keep=[f"environment.{f}" for f in ENV_FIELDS],
    )
    if not (isinstance(base_env, Mapping) and isinstance(cur_env, Mapping)):
        diffs += _diffs(flatten(base), flatten(cur), keep=CONFIG_ENV_FIELDS)
    return diffs


def compare_runs(
    current: RunRecord,
    baseline: RunRecord,
    alpha: float = 0.05,
    *,
    volatile: Sequence[str] = VOLATILE_FIELDS,
) -> Comparison:
    """Pair the two runs' items per task and list the settings and environment that differ.

    Each task is compared on the items both runs scored (the last result of each item);
    tasks that only one run has are reported with ``n_shared=0``.
    """
    tasks = sorted(set(current.items) | set(baseline.items))
    deltas = [
        paired_delta(t, baseline.items.get(t, {}), current.items.get(t, {}), alpha) for t in tasks
    ]
    return Comparison(
        baseline_path=baseline.path,
        tasks=deltas,
        config_diffs=_config_diffs(baseline.config, current.config, volatile),
        env_diffs=_env_diffs(baseline.config, current.config),
        alpha=alpha,
        current_path=current.path,
    )


# ---------------------------------------------------------------------------- terminal


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.1f}"


def format_comparison(comparison: Comparison, max_items: int = 20) -> list[str]:
    """Terminal lines: a per-task table, the flipped items, then settings and environment."""
    lines = [f"compared with baseline {comparison.baseline_path}"]
    width = max([16, *(len(t.task) for t in comparison.tasks)])
    lines.append(
        f"{'task':<{width}} {'shared':>7} {'baseline':>8} {'current':>8} {'delta':>7} "
        f"{'p-value':>8} {'regressed':>9} {'improved':>8}"
    )
    for t in comparison.tasks:
        if t.n_shared == 0:
            if t.only_in_baseline and t.only_in_current:
                where = "no items in common"
            elif t.only_in_baseline:
                where = "only in the baseline"
            else:
                where = "only in this run"
            lines.append(f"{t.task:<{width}} {0:>7} {'-':>8} {'-':>8} {'-':>7} ({where})")
            continue
        delta = f"{t.delta_points:+.1f}"
        mark = " *" if t.significant else ""
        lines.append(
            f"{t.task:<{width}} {t.n_shared:>7} {_pct(t.baseline_score):>8} "
            f"{_pct(t.current_score):>8} {delta:>7} {format_p(t.p_value):>8} "
            f"{len(t.regressed):>9} {len(t.improved):>8}{mark}"
        )
    significant = [t for t in comparison.tasks if t.significant and t.n_shared]
    if any(t.binary for t in significant):
        lines.append(f"* significant at p < {comparison.alpha:g} (exact McNemar test)")
    partial = [t.task for t in significant if not t.binary]
    if partial:
        lines.append(
            f"* significant at p < {comparison.alpha:g} (paired sign-flip test on the "
            f"per-item scores: {', '.join(partial)})"
        )
    for t in comparison.tasks:
        if t.n_shared and (t.only_in_baseline or t.only_in_current):
            lines.append(
                f"{t.task}: compared on {t.n_shared} shared items "
                f"({t.only_in_baseline} only in the baseline, {t.only_in_current} only in "
                "this run)"
            )
        labels = (
            ("regressed (correct -> wrong)", "improved (wrong -> correct)")
            if t.binary
            else ("scored lower", "scored higher")
        )
        for label, ids in zip(labels, (t.regressed, t.improved), strict=True):
            if not ids:
                continue
            shown = ids[:max_items]
            more = f" ... and {len(ids) - len(shown)} more" if len(ids) > len(shown) else ""
            lines.append(f"{t.task}: {len(ids)} {label}:")
            lines.extend(
                textwrap.wrap(
                    ", ".join(shown) + more,
                    width=100,
                    initial_indent="    ",
                    subsequent_indent="    ",
                    break_on_hyphens=False,
                )
            )
    if comparison.config_diffs:
        lines.append(
            "WARNING: settings differ from the baseline; score changes may come from them:"
        )
        lines.extend(f"    {format_diff(d)}" for d in comparison.config_diffs)
    if comparison.env_diffs:
        lines.append("environment differs from the baseline:")
        lines.extend(f"    {format_diff(d)}" for d in comparison.env_diffs)
    return lines
