"""Comparison of a run with a baseline run, and gates on the result.

Plain Python (no pytest, no torch): reads two run directories, pairs their items, tests
each task's change on the items both runs scored (the exact McNemar test where every
shared item scored 0 or 1, the paired sign-flip permutation test on the per-item score
differences where a metric gives partial scores: F1, MC2; see docs/GATES.md), and lists
the settings and environment fields that differ. ``parse_gate`` / ``gate_failures`` turn a
comparison into pass/fail lines in the spirit of ``--benchmark-compare-fail``.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal

from pytest_llmeval._errors import LlmEvalError
from pytest_llmeval.record._env import DRIFT_LIBRARIES, flatten
from pytest_llmeval.record._rundir import iter_item_lines
from pytest_llmeval.scorer import mcnemar_exact

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


class _Absent:
    """A field that one of the two runs does not have (distinct from a JSON null)."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "(absent)"

    def __bool__(self) -> bool:
        return False


ABSENT: Any = _Absent()


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
    metrics = _read_json_object(metrics_file) if metrics_file.is_file() else {}
    items: dict[str, dict[str, dict[str, Any]]] = {}
    if tasks_dir.is_dir():
        for file in sorted(tasks_dir.glob(f"*{OUTPUT_SUFFIX}")):
            task = file.name[: -len(OUTPUT_SUFFIX)]
            if task and file.is_file():
                items[task] = _read_items(file)
    return RunRecord(path=path, config=config, metrics=metrics, items=items)


# ---------------------------------------------------------------------------- statistics


# ---------------------------------------------------------------------------- comparison


@dataclass
class TaskDelta:
    """A task's change on the items both runs scored (scores as proportions, 0..1)."""

    task: str
    n_shared: int
    baseline_score: float
    current_score: float
    delta: float  # current - baseline; NaN when no items are shared
    p_value: float
    significant: bool
    # Binary scores: correct in the baseline and wrong now (and the reverse); partial
    # scores: items that score lower now (higher).
    regressed: list[str] = field(default_factory=list)
    improved: list[str] = field(default_factory=list)
    only_in_baseline: int = 0
    only_in_current: int = 0
    # The test behind p_value: "mcnemar" (every shared score 0 or 1) or "sign-flip"
    # (partial scores: the paired permutation test on the score differences).
    test: str = "mcnemar"

    @property
    def binary(self) -> bool:
        return self.test == "mcnemar"

    @property
    def delta_points(self) -> float:
        """The change in percentage points."""
        return 100.0 * self.delta

    @property
    def dropped(self) -> bool:
        return self.n_shared > 0 and self.delta < 0


@dataclass
class ConfigDiff:
    """A field that differs; ``ABSENT`` when a run does not have it."""

    field: str
    baseline: Any
    current: Any


@dataclass
class Comparison:
    """A run compared with a baseline run."""

    baseline_path: Path
    tasks: list[TaskDelta]
    config_diffs: list[ConfigDiff]  # settings that affect scores
    env_diffs: list[ConfigDiff]  # environment (library versions, CUDA, GPUs, weights digest)
    alpha: float = 0.05
    current_path: Path | None = None

    @property
    def differs(self) -> bool:
        """Whether the two runs were made with different settings or environments."""
        return bool(self.config_diffs or self.env_diffs)


def _is_correct(record: Mapping[str, Any]) -> bool:
    correct = record.get("correct")
    if correct is None:
        return _score(record) >= 1.0
    return bool(correct)


def _score(record: Mapping[str, Any]) -> float:
    score = record.get("score")
    if isinstance(score, (int, float)):
        return float(score)
    return 1.0 if record.get("correct") else 0.0


def _scored(record: Mapping[str, Any]) -> bool:
    details = record.get("details")
    overflow = isinstance(details, Mapping) and details.get("context_overflow")
    return not record.get("error") and not overflow


def _task_delta(
    task: str,
    base: Mapping[str, Mapping[str, Any]],
    cur: Mapping[str, Mapping[str, Any]],
    alpha: float,
) -> TaskDelta:
    # Items that were not scored (an error, a prompt over the window) are not compared.
    base = {i: r for i, r in base.items() if _scored(r)}
    cur = {i: r for i, r in cur.items() if _scored(r)}
    shared = [i for i in cur if i in base]
    binary = all(_score(r[i]) in (0.0, 1.0) for r in (base, cur) for i in shared)
    if binary:
        regressed = sorted(i for i in shared if _is_correct(base[i]) and not _is_correct(cur[i]))
        improved = sorted(i for i in shared if not _is_correct(base[i]) and _is_correct(cur[i]))
    else:
        # Partial scores (F1, MC2): whether an item is "correct" is a threshold, not a
        # fact, so the change is tested on the score differences themselves.
        regressed = sorted(i for i in shared if _score(cur[i]) < _score(base[i]))
        improved = sorted(i for i in shared if _score(cur[i]) > _score(base[i]))
    n = len(shared)
    if n:
        base_score = math.fsum(_score(base[i]) for i in shared) / n
        cur_score = math.fsum(_score(cur[i]) for i in shared) / n
        delta = cur_score - base_score
    else:
        base_score = cur_score = delta = math.nan
    if binary:
        p = mcnemar_exact(len(regressed), len(improved))
    else:
        p = sign_flip_test([_score(cur[i]) - _score(base[i]) for i in shared])
    return TaskDelta(
        task=task,
        n_shared=n,
        baseline_score=base_score,
        current_score=cur_score,
        delta=delta,
        p_value=p,
        significant=p < alpha,
        regressed=regressed,
        improved=improved,
        only_in_baseline=sum(1 for i in base if i not in cur),
        only_in_current=len(cur) - n,
        test="mcnemar" if binary else "sign-flip",
    )


# Exact enumeration of the sign patterns up to this many non-zero differences (2**16);
# then this many random patterns (seeded: a gate gives the same p-value every time) up to
# SIGN_FLIP_SAMPLED differences; beyond, the normal limit of the sign-flip distribution.
SIGN_FLIP_EXACT = 16
SIGN_FLIP_RESAMPLES = 10_000
SIGN_FLIP_SAMPLED = 200
SIGN_FLIP_SEED = 20260101


def sign_flip_test(differences: Sequence[float]) -> float:
    """Two-sided p-value of the paired sign-flip permutation test (Fisher-Pitman) that the
    mean of per-item score ``differences`` (current - baseline) is zero.

    Under the null each item's two scores are exchangeable, so each difference is as
    likely to have either sign; the p-value is the share of the ``2**m`` sign patterns of
    the ``m`` non-zero differences whose sum is at least as far from zero as the observed
    one. Enumerated exactly up to :data:`SIGN_FLIP_EXACT` non-zero differences, then
    estimated from :data:`SIGN_FLIP_RESAMPLES` seeded random patterns as
    ``(1 + hits) / (1 + resamples)`` (never 0, Phipson and Smyth 2010) up to
    :data:`SIGN_FLIP_SAMPLED`; beyond, from the distribution's normal limit (mean 0,
    variance ``sum(d**2)``: a sum of many independent symmetric terms). On 0/1 scores
    the differences are +-1 and this is the McNemar test. 1.0 without a non-zero
    difference.
    """
    nonzero = [float(d) for d in differences if d != 0]
    m = len(nonzero)
    if m == 0:
        return 1.0
    observed = abs(math.fsum(nonzero))
    # A little slack so that float sums equal to the observed one count as reaching it.
    reach = observed - 1e-9 * max(1.0, observed)
    if m <= SIGN_FLIP_EXACT:
        hits = sum(
            1
            for signs in itertools.product((1.0, -1.0), repeat=m)
            if abs(math.fsum(s * d for s, d in zip(signs, nonzero, strict=True))) >= reach
        )
        return hits / float(1 << m)
    if m > SIGN_FLIP_SAMPLED:
        spread = math.sqrt(math.fsum(d * d for d in nonzero))
        return math.erfc(observed / (spread * math.sqrt(2.0)))
    rng = random.Random(SIGN_FLIP_SEED)
    hits = 0
    for _ in range(SIGN_FLIP_RESAMPLES):
        bits = rng.getrandbits(m)
        total = 0.0
        for k, d in enumerate(nonzero):
            total += d if (bits >> k) & 1 else -d
        if abs(total) >= reach:
            hits += 1
    return (1 + hits) / (1 + SIGN_FLIP_RESAMPLES)


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
        _task_delta(t, baseline.items.get(t, {}), current.items.get(t, {}), alpha) for t in tasks
    ]
    return Comparison(
        baseline_path=baseline.path,
        tasks=deltas,
        config_diffs=_config_diffs(baseline.config, current.config, volatile),
        env_diffs=_env_diffs(baseline.config, current.config),
        alpha=alpha,
        current_path=current.path,
    )


# ---------------------------------------------------------------------------- gates

GATE_FORMS = (
    "drop:N (a task's score drops by more than N percentage points; N may end in % or pt)",
    "drop:N:sig (drops by more than N points and the drop is significant)",
    "sig (a task's score drops significantly)",
    "config (the settings differ from the baseline's)",
    "env (the environment differs from the baseline's)",
)

_DROP = re.compile(r"drop:(?P<n>\d+(?:\.\d*)?|\.\d+)\s*(?:%|pts?|points?)?(?P<sig>:sig)?")


@dataclass(frozen=True)
class GateRule:
    """One rule of a gate expression."""

    kind: Literal["drop", "sig", "config", "env"]
    points: float | None = None  # for "drop": the largest drop tolerated, in points
    significant: bool = False  # for "drop": only a significant drop violates it

    def __str__(self) -> str:
        if self.kind == "drop":
            return f"drop:{self.points:g}" + (":sig" if self.significant else "")
        return self.kind


_SIMPLE_RULES = {kind: GateRule(kind=kind) for kind in ("sig", "config", "env")}


def parse_gate(expr: str) -> list[GateRule]:
    """Parse a comma-separated gate expression such as ``"drop:2,config"``.

    Raises ``ValueError`` naming the accepted forms when a rule is not one of them.
    """
    forms = "; ".join(GATE_FORMS)
    rules: list[GateRule] = []
    parts = [p.strip().lower() for p in expr.split(",")]
    if not any(parts):
        raise ValueError(f"empty gate expression {expr!r}; accepted rules: {forms}")
    for part in parts:
        if part in _SIMPLE_RULES:
            rules.append(_SIMPLE_RULES[part])
            continue
        match = _DROP.fullmatch(re.sub(r"\s*:\s*", ":", part))
        if match is None:
            raise ValueError(
                f"invalid gate rule {part!r} in {expr!r}; accepted rules, comma-separated: {forms}"
            )
        rules.append(
            GateRule(kind="drop", points=float(match["n"]), significant=bool(match["sig"]))
        )
    return rules


def format_p(p: float) -> str:
    if math.isnan(p):
        return "-"
    return f"{p:.1e}" if p < 0.001 else f"{p:.3f}"


def format_value(value: Any) -> str:
    if value is ABSENT:
        return "(absent)"
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def format_diff(diff: ConfigDiff) -> str:
    return f"{diff.field}: {format_value(diff.baseline)} -> {format_value(diff.current)}"


def _drop_line(t: TaskDelta) -> str:
    if t.binary:
        how = f"p={format_p(t.p_value)}, {len(t.regressed)} items flipped correct->wrong"
    else:
        how = (
            f"p={format_p(t.p_value)} (paired sign-flip test on the scores), "
            f"{len(t.regressed)} items scored lower"
        )
    return (
        f"{t.task} dropped {-t.delta_points:.1f} points "
        f"({100 * t.baseline_score:.1f} -> {100 * t.current_score:.1f}, {how})"
    )


def gate_failures(comparison: Comparison, rules: Iterable[GateRule]) -> list[str]:
    """One line per violated rule and task; empty when the gate passes."""
    failures: list[str] = []
    alpha = comparison.alpha
    for rule in rules:
        if rule.kind == "config":
            if comparison.config_diffs:
                failures.append(
                    "settings differ from the baseline: "
                    + "; ".join(format_diff(d) for d in comparison.config_diffs)
                )
        elif rule.kind == "env":
            if comparison.env_diffs:
                failures.append(
                    "environment differs from the baseline: "
                    + "; ".join(format_diff(d) for d in comparison.env_diffs)
                )
        else:
            for t in comparison.tasks:
                if not t.dropped:
                    continue
                if rule.kind == "sig":
                    if t.significant:
                        failures.append(f"{_drop_line(t)} is significant (p < {alpha:g})")
                    continue
                assert rule.points is not None
                if -t.delta_points > rule.points and (t.significant or not rule.significant):
                    line = f"{_drop_line(t)} > {rule.points:.1f}"
                    if rule.significant:
                        line += f" and significant (p < {alpha:g})"
                    failures.append(line)
    return failures


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
