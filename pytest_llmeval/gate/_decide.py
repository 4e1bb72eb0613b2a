"""A task's decision, from what a run saw of its items: the tally of its item records
(:class:`TaskTally`, folded from pytest's reports, so that it works under xdist), and the
status its floor and the run give it (:func:`decide_task`: one of :data:`STATUSES`) with
whether the floor fails the run under the policy, and the task entries of a run's
``metrics_summary.json`` in either of its layouts (:func:`summary_tasks`). Plain Python:
the plugin folds the reports and prints; this decides."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_llmeval.scorer import Estimate, accuracy

from ._verdict import interval_status, policy_fails

#: A task's gate status, one spelling each: the interval against the floor (``pass``,
#: ``fail``, ``undecided``), or why there is no such decision.
STATUSES = ("pass", "fail", "undecided", "error", "incomplete", "no floor", "skipped")
#: The statuses that fail a run whatever the policy (``fail`` and ``undecided`` fail it
#: where the floor policy says so: :attr:`TaskDecision.failed`).
FAILING = ("error", "incomplete")
#: The layout of ``metrics_summary.json`` this version writes: ``{"schema": 2, "tasks":
#: {task: entry}}``, each entry's gate status under ``status``. Layout 1 (runs before
#: 2026-12-08) is the bare ``{task: entry}``, the status under ``verdict`` and a failed
#: floor spelled ``FAIL``; :func:`summary_tasks` reads both.
SUMMARY_SCHEMA = 2


class SummaryLayoutError(ValueError):
    """A ``metrics_summary.json`` whose layout this version cannot read."""


def summary_document(tasks: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """What ``metrics_summary.json`` holds for these task entries (the current layout)."""
    return {"schema": SUMMARY_SCHEMA, "tasks": {name: dict(e) for name, e in tasks.items()}}


def summary_tasks(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The task entries of a parsed ``metrics_summary.json``, in the current layout
    whichever layout the file has: a layout-1 file's entries get ``status`` (from
    ``verdict``, ``FAIL`` read as ``fail``). Raises :class:`SummaryLayoutError` for a
    layout newer than this version's or a ``tasks`` that is not an object."""
    if "schema" not in data:  # layout 1: the tasks at the top
        return {n: _layout_1_entry(e) for n, e in data.items() if isinstance(e, Mapping)}
    schema = data["schema"]
    if schema != SUMMARY_SCHEMA:
        raise SummaryLayoutError(
            f"schema {schema!r}: this version of pytest-llmeval reads layouts 1 and "
            f"{SUMMARY_SCHEMA} (upgrade it to read this run)"
        )
    found = data.get("tasks")
    if not isinstance(found, Mapping):
        raise SummaryLayoutError(f"'tasks' is {type(found).__name__}, not an object")
    return {name: dict(entry) for name, entry in found.items() if isinstance(entry, Mapping)}


def _layout_1_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in entry.items() if k != "verdict"}
    if "verdict" in entry:
        status = entry["verdict"]
        out["status"] = "fail" if status == "FAIL" else status
    return out


def _no_score(tally: TaskTally) -> str:
    """Why a task with a floor has no score to hold to it."""
    if tally.not_fitting:
        window = next(iter(tally.not_fitting.values())).get("context_window")
        return (
            f"none of its {len(tally.not_fitting)} selected items fits the context window "
            f"({window} tokens), so no score holds its floor {tally.floor}"
        )
    return f"no item was scored, so no score holds its floor {tally.floor}"


@dataclass
class TaskTally:
    """What the controller has seen of one task (from reports, so it works under xdist)."""

    name: str
    metric: str
    floor: float | None
    total_items: int
    source: str = ""
    saturation: str = ""
    successor: str | None = None
    capability: str | None = None
    freshness: str = "stable"
    selected: int = 0
    skipped: int = 0
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    nondeterministic: list[str] = field(default_factory=list)
    # Items whose prompt does not fit the model's context window: reported, not scored.
    not_fitting: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Items scored on a prompt cut to fit the window (the spec's overflow policy).
    truncated: list[str] = field(default_factory=list)
    # Generations that show behavioural cues of recall (a benchmark's name, a split, ...).
    recall_cues: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)
    # Where the floor came from (the spec, an option, a reference run with its rule).
    floor_source: dict[str, Any] | None = None
    # An lm-evaluation-harness task: how the harness aggregates it and its groups.
    lmeval: dict[str, Any] | None = None
    # Whether the task has subsets, and those whose data has no rows (subset -> its file).
    has_subsets: bool = False
    empty_subsets: dict[str, str] = field(default_factory=dict)
    # Why its items were skipped at setup (reason -> count), and the kind of its stand-in
    # item when it runs none (data, judge, empty: ``_collect._no_items``): ``_notrun``.
    skip_reasons: dict[str, int] = field(default_factory=dict)
    no_items: str | None = None

    def subsets_ran(self) -> dict[str, int]:
        """The scored items of each subset (the subsets that ran, in their order)."""
        counts: dict[str, int] = {}
        for r in self.results.values():
            if r.get("subset") is not None:
                counts[str(r["subset"])] = counts.get(str(r["subset"]), 0) + 1
        return counts

    def estimate(self) -> Estimate:
        """The task's score and its interval, over the item scores of the median repeat
        (:meth:`median_repeat`; the only one without ``run.repeat``): the score the
        summary shows, the floor is checked on and the interval are of one set of answers
        (the interval was the first repeat's beside the median's score)."""
        k = self.median_repeat()
        scores = [(r.get("repeat_scores") or [r["score"]])[k] for r in self.results.values()]
        return accuracy(scores)

    def median_repeat(self) -> int:
        """Which repeat's task score is the median of the repeats' (of an even number, the
        lower of the middle two): 0 without repeats."""
        scores = self.repeat_scores()
        if len(scores) < 2:
            return 0
        return sorted(range(len(scores)), key=lambda k: (scores[k], k))[(len(scores) - 1) // 2]

    def metric_estimates(self) -> dict[str, Estimate]:
        """Each named metric (``generate.metrics``) over the scored items that carry it,
        in the order the spec names them."""
        scores: dict[str, list[float]] = {}
        for r in self.results.values():
            for name, value in (r.get("metrics") or {}).items():
                scores.setdefault(name, []).append(float(value["score"]))
        return {name: accuracy(values) for name, values in scores.items()}

    def repeat_scores(self) -> list[float]:
        """The task score of each repeat (one entry when --llm-set run.repeat is 1)."""
        per_item = [r.get("repeat_scores") or [r["score"]] for r in self.results.values()]
        if not per_item:
            return []
        repeats = min(len(s) for s in per_item)
        return [sum(s[k] for s in per_item) / len(per_item) for k in range(repeats)]


@dataclass(frozen=True)
class TaskDecision:
    task: str
    n: int
    selected: int
    total: int
    metric: str
    estimate: Estimate
    score: float  # the estimate, or the median over repeats
    repeats: tuple[float, ...]
    floor: float | None
    seconds: float
    status: str  # one of STATUSES
    policy: str = "point"
    floor_fails: bool = False  # the floor fails the run under the policy
    floor_source: dict[str, Any] | None = None

    @property
    def failed(self) -> bool:
        return self.status in FAILING or self.floor_fails

    @property
    def spread(self) -> float:
        return max(self.repeats) - min(self.repeats) if self.repeats else float("nan")

    def row(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "n": self.n,
            "total": self.total,
            "metric": self.metric,
            "score": self.score,
            "ci_low": self.estimate.ci_low,
            "ci_high": self.estimate.ci_high,
            "floor": self.floor,
            "status": self.status,
            "seconds": self.seconds,
            "policy": self.policy,
            "failed": self.failed,
            "floor_source": self.floor_source,
        }


def decide_task(
    tally: TaskTally, *, selected: int, policy: str, interrupted_unknown: bool = False
) -> TaskDecision:
    """The decision of one task. ``selected``: the items selected for it (an interrupted
    run's decision covers them all, not only those that ran); ``interrupted_unknown``: the
    run was interrupted and which of the task's items ran is not known (under xdist), so
    it is incomplete. A task with a floor and no scored item gets an error saying why."""
    est = tally.estimate()
    repeats = tuple(tally.repeat_scores())
    n = len(tally.results)
    selected = max(tally.selected, selected)
    if n == 0 and tally.floor is not None and tally.selected > tally.skipped and not tally.errors:
        why = _no_score(tally)
        if why not in tally.errors:
            tally.errors.append(why)
    if tally.errors or tally.nondeterministic:
        status = "error"
    elif tally.selected and tally.skipped == tally.selected:
        status = "skipped"
    elif n < selected - tally.skipped - len(tally.not_fitting) or interrupted_unknown:
        status = "incomplete"
    elif tally.floor is None:
        status = "no floor"
    else:
        status = interval_status(est.ci_low, est.ci_high, tally.floor)
    score = est.value  # of the median repeat, with its interval
    floor_fails = status in ("pass", "fail", "undecided") and policy_fails(
        policy, score, est.ci_low, est.ci_high, float(tally.floor or 0)
    )
    return TaskDecision(
        task=tally.name,
        n=n,
        selected=selected,
        total=tally.total_items,
        metric=tally.metric,
        estimate=est,
        score=score,
        repeats=repeats if len(repeats) > 1 else (),
        floor=tally.floor,
        seconds=tally.seconds,
        status=status,
        policy=policy,
        floor_fails=floor_fails,
        floor_source=tally.floor_source,
    )
