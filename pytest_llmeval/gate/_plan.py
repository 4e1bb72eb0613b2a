"""The item budget of a gate: how many items it needs to catch a given drop.

For each task of a reference run and each drop (in points), two gates:

- **Floor** (absolute): the floor made by a rule from a reference run of ``n`` items with
  the reference's score ``p0`` (rule ``lcb``: the lower end of that run's 95% Wilson
  interval; ``margin:m``: ``p0 - m``), checked on a run of ``n`` items under a policy. The
  run's number right is Binomial(n, p0 - drop): a fresh sample of items from the task, the
  floor a fixed number. Power: the chance the gate fails; false alarms: the chance it
  fails a model whose score is still ``p0``. Both exact (binomial sums).
- **Paired** (``gate.baseline_rule = "sig"``): the exact McNemar test on the items both runs
  share. It sees only the discordant items, so what it needs depends on how many items a
  change flips: ``pure`` assumes the change flips only the lost items (``p_regress =
  drop``, ``p_improve = 0``: the fewest items any paired gate can need); an observed
  discordance ``psi0`` (the share of items two real runs disagree on) is taken as churn in
  both directions, with the drop on top (``p_regress = psi0/2 + drop``, ``p_improve =
  psi0/2``).

Time: the reference run's mean seconds per item (its ``seconds`` fields) times the items.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_llmeval.scorer import wilson_interval

from ._power import (
    MAX_ITEMS,
    binom_cdf,
    binomial_size,
    connor_size,
    mcnemar_power,
    mcnemar_sample_size,
    sample_size,
    z_quantile,
)
from ._verdict import FloorRule, check_policy, pass_threshold

DROPS = (0.02, 0.05)
POWER = 0.8
ALPHA = 0.05  # two-sided: the 95% intervals of the verdicts, the `sig` gate's p < 0.05


def floor_at(rule: FloorRule, p0: float, n: int, alpha: float = ALPHA) -> float:
    """The floor ``rule`` makes from a reference of ``n`` items scoring ``p0`` (unrounded)."""
    if rule.kind == "margin":
        return max(0.0, p0 - rule.margin)
    return wilson_interval(p0 * n, n, z_quantile(1 - alpha / 2))[0]


def floor_gate_fail_probability(
    n: int, p_true: float, floor: float, policy: str, alpha: float = ALPHA
) -> float:
    """The chance that a run of ``n`` items, each right with probability ``p_true``, fails
    ``floor`` under ``policy`` (95% Wilson interval for ``alpha`` 0.05)."""
    threshold = pass_threshold(n, floor, policy, z_quantile(1 - alpha / 2))
    return binom_cdf(threshold - 1, n, min(1.0, max(0.0, p_true)))


def floor_gate_power(
    n: int, p0: float, drop: float, rule: FloorRule, policy: str, alpha: float = ALPHA
) -> float:
    """Power of a floor made by ``rule`` from ``n`` reference items at ``p0`` to fail a run of
    ``n`` items whose true score is ``p0 - drop``."""
    return floor_gate_fail_probability(n, p0 - drop, floor_at(rule, p0, n, alpha), policy, alpha)


@dataclass(frozen=True)
class Need:
    """Items one gate needs for one drop; ``items`` is None with a ``reason`` when no
    number of items will do (or more than the search bound)."""

    gate: str  # "floor" | "paired"
    drop: float
    items: int | None
    power: float | None = None  # at ``items``
    false_alarm: float | None = None  # floor: at ``items``, for a model still at p0
    discordance: float | None = None  # paired: the psi0 assumed ("pure": 0 churn)
    assumption: str = ""  # paired: "pure drop" | "observed vs <run>"
    approx: float | None = None  # the normal approximation, for comparison
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and v != ""}


def floor_need(
    p0: float,
    drop: float,
    rule: FloorRule,
    policy: str,
    power: float = POWER,
    alpha: float = ALPHA,
    max_n: int = MAX_ITEMS,
) -> Need:
    """Items a floor gate needs to decide: to fail a model whose score dropped by ``drop``
    with probability ``power`` and to pass a model still at ``p0`` with probability
    ``power`` too (stable from there on)."""
    check_policy(policy)
    if p0 - drop < 0:
        return Need("floor", drop, None, reason=f"the score {100 * p0:.1f}% is below the drop")
    if rule.kind == "margin" and drop <= rule.margin:
        return Need(
            "floor",
            drop,
            None,
            reason=f"a {100 * drop:g}-point drop stays above a floor {rule.name} below",
        )
    if rule.kind == "lcb" and policy == "strict":
        return Need(
            "floor",
            drop,
            None,
            reason="with lcb floors the strict policy fails about half the runs of an "
            "unchanged model (its own lower bound is the floor); use margin floors with it",
        )

    def decides(n: int) -> float:
        floor = floor_at(rule, p0, n, alpha)
        detect = floor_gate_fail_probability(n, p0 - drop, floor, policy, alpha)
        keep = 1.0 - floor_gate_fail_probability(n, p0, floor, policy, alpha)
        return min(detect, keep)

    approx = binomial_size(alpha / 2, power, p0, p0 - drop) if drop > 0 else math.inf
    n = sample_size(
        decides,
        power,
        start=max(1, int(0.5 * approx)) if math.isfinite(approx) else 1,
        max_n=max_n,
    )
    if n is None:
        return Need("floor", drop, None, approx=approx, reason=f"more than {max_n} items")
    floor = floor_at(rule, p0, n, alpha)
    return Need(
        "floor",
        drop,
        n,
        power=floor_gate_power(n, p0, drop, rule, policy, alpha),
        false_alarm=floor_gate_fail_probability(n, p0, floor, policy, alpha),
        approx=approx,
    )


def paired_shares(p0: float, drop: float, churn: float) -> tuple[float, float] | None:
    """(p_regress, p_improve) for a drop on top of symmetric churn, or None when the score
    cannot hold them (more regressions than right items, or improvements than wrong)."""
    p_regress, p_improve = churn / 2 + drop, churn / 2
    if p_regress > p0 + 1e-12 or p_improve > 1 - p0 + 1e-12:
        return None
    return p_regress, p_improve


def paired_need(
    p0: float,
    drop: float,
    churn: float,
    assumption: str,
    power: float = POWER,
    alpha: float = ALPHA,
    max_n: int = MAX_ITEMS,
) -> Need:
    """Paired items the exact McNemar gate needs to catch ``drop`` with ``power``."""
    shares = paired_shares(p0, drop, churn)
    if shares is None or drop <= 0:
        return Need(
            "paired",
            drop,
            None,
            discordance=churn,
            assumption=assumption,
            reason=f"a score of {100 * p0:.1f}% cannot lose {_points(drop)}"
            + (f" with {100 * churn:.1f}% churn" if churn else ""),
        )
    p_regress, p_improve = shares
    n = mcnemar_sample_size(p_regress, p_improve, alpha, power, max_n=max_n)
    approx = connor_size(p_regress, p_improve, alpha, power)
    if n is None:
        return Need(
            "paired",
            drop,
            None,
            discordance=churn,
            assumption=assumption,
            approx=approx,
            reason=f"more than {max_n} items",
        )
    return Need(
        "paired",
        drop,
        n,
        power=mcnemar_power(n, p_regress, p_improve, alpha),
        discordance=churn,
        assumption=assumption,
        approx=approx,
    )


def detectable_floor_drop(
    n: int, p0: float, rule: FloorRule, policy: str, power: float = POWER, alpha: float = ALPHA
) -> float | None:
    """The smallest drop (to 0.1 point) a floor gate of ``n`` items catches with ``power``;
    None when not even a drop to 0 is caught."""
    if floor_gate_power(n, p0, p0, rule, policy, alpha) < power:
        return None
    lo, hi = 0, round(1000 * p0)  # in tenths of a point
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if floor_gate_power(n, p0, mid / 1000, rule, policy, alpha) >= power:
            hi = mid
        else:
            lo = mid
    return hi / 1000


@dataclass
class TaskPlan:
    """The item budget of one task."""

    task: str
    metric: str
    n: int
    correct: int
    score: float
    total_items: int | None
    seconds_per_item: float | None
    churn: float | None = None  # observed discordance with a second run, if any
    churn_source: str | None = None
    needs: list[Need] = field(default_factory=list)
    detectable_drop: float | None = None  # floor gate, at this run's own n
    # floor gate, at this run's own n: how often it fails a model still at the run's score
    false_alarm: float | None = None
    reason: str | None = None  # why there is no plan (fractional scores, no items)

    def seconds_for(self, items: int | None) -> float | None:
        if items is None or self.seconds_per_item is None:
            return None
        return items * self.seconds_per_item

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "task": self.task,
            "metric": self.metric,
            "n": self.n,
            "correct": self.correct,
            "score": self.score,
            "total_items": self.total_items,
            "seconds_per_item": self.seconds_per_item,
            "churn": self.churn,
            "churn_source": self.churn_source,
            "detectable_drop_at_n": self.detectable_drop,
            "false_alarm_at_n": self.false_alarm,
            "needs": [
                {**need.to_dict(), "seconds": self.seconds_for(need.items)} for need in self.needs
            ],
        }
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class PlanSettings:
    drops: tuple[float, ...] = DROPS
    power: float = POWER
    alpha: float = ALPHA
    rule: FloorRule = field(default_factory=lambda: FloorRule("lcb"))
    policy: str = "point"
    max_n: int = MAX_ITEMS

    def __post_init__(self) -> None:
        # NaN fails every comparison, so it is refused with the out-of-range values.
        for name in ("power", "alpha"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ValueError(f"{name} must be a probability between 0 and 1, got {value!r}")
        if not self.drops or not all(0 < d < 1 for d in self.drops):
            raise ValueError(f"drops must be proportions between 0 and 1, got {self.drops!r}")
        if self.max_n < 1:
            raise ValueError(f"max_n must be >= 1, got {self.max_n!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "drops_points": [round(100 * d, 6) for d in self.drops],
            "power": self.power,
            "alpha": self.alpha,
            "floor_rule": self.rule.name,
            "floor_policy": self.policy,
            "paired_gate": f"sig (exact McNemar, two-sided p < {self.alpha:g})",
        }


def _binary(scores: Sequence[float]) -> bool:
    return all(s in (0.0, 1.0) for s in scores)


def plan_task(
    task: str,
    items: Mapping[str, Mapping[str, Any]],
    summary: Mapping[str, Any] | None,
    settings: PlanSettings,
    *,
    churn: float | None = None,
    churn_source: str | None = None,
) -> TaskPlan:
    """The plan of one task from its item records (and its summary, for the metric and the
    task's size)."""
    summary = summary or {}
    scores = [float(r.get("score", 1.0 if r.get("correct") else 0.0)) for r in items.values()]
    seconds = [
        float(r["seconds"]) for r in items.values() if isinstance(r.get("seconds"), (int, float))
    ]
    n = len(scores)
    correct = int(sum(scores)) if _binary(scores) else 0
    total = summary.get("total_items")
    plan = TaskPlan(
        task=task,
        metric=str(summary.get("metric") or "score"),
        n=n,
        correct=correct,
        score=math.fsum(scores) / n if n else math.nan,
        total_items=int(total) if isinstance(total, int) else None,
        seconds_per_item=math.fsum(seconds) / len(seconds) if seconds else None,
        churn=churn,
        churn_source=churn_source,
    )
    if n == 0:
        plan.reason = "no scored items"
        return plan
    if not _binary(scores):
        plan.reason = "fractional scores (the plan covers 0/1 scores)"
        return plan
    p0 = plan.score
    for drop in settings.drops:
        plan.needs.append(
            floor_need(
                p0, drop, settings.rule, settings.policy, settings.power, settings.alpha,
                settings.max_n,
            )
        )  # fmt: skip
        plan.needs.append(
            paired_need(p0, drop, 0.0, "pure drop", settings.power, settings.alpha, settings.max_n)
        )
        if churn is not None:
            plan.needs.append(
                paired_need(
                    p0,
                    drop,
                    churn,
                    f"observed churn {100 * churn:.1f}%",
                    settings.power,
                    settings.alpha,
                    settings.max_n,
                )
            )
    plan.detectable_drop = detectable_floor_drop(
        n, p0, settings.rule, settings.policy, settings.power, settings.alpha
    )
    plan.false_alarm = floor_gate_fail_probability(
        n, p0, floor_at(settings.rule, p0, n, settings.alpha), settings.policy, settings.alpha
    )
    return plan


def _points(drop: float) -> str:
    points = round(100 * drop, 6)
    return f"{points:g} point" + ("" if points == 1 else "s")


def _cell(need: Need | None, total: int | None) -> str:
    """Items a gate needs: a count (``!`` when the task has fewer), ``n/a`` or ``-``."""
    if need is None:
        return "-"
    if need.items is None:
        return "n/a"
    return f"{need.items:,}" + ("!" if total is not None and need.items > total else "")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def format_plan(plans: Sequence[TaskPlan], settings: PlanSettings) -> list[str]:
    """Terminal lines: settings, then per task and drop the items each gate needs."""
    lines = [
        f"item budget: {100 * settings.power:g}% power; floor gate: rule {settings.rule.name}, "
        f"policy {settings.policy}, 95% Wilson interval; paired gate: exact McNemar "
        f"(sig, two-sided p < {settings.alpha:g})",
        f"{'task':<12} {'n':>6} {'score':>6} {'drop':>5}  {'floor':>12} {'paired pure':>12} "
        f"{'paired churn':>13}  {'s/item':>6}  time (floor / paired)",
    ]
    notes: list[str] = []
    for plan in plans:
        if plan.reason:
            lines.append(f"{plan.task:<12} {plan.n:>6}  no plan: {plan.reason}")
            continue
        for drop in settings.drops:
            needs = {
                (nd.gate, nd.assumption): nd for nd in plan.needs if math.isclose(nd.drop, drop)
            }
            floor = needs.get(("floor", ""))
            pure = needs.get(("paired", "pure drop"))
            churned = next(
                (nd for key, nd in needs.items() if key[0] == "paired" and key[1] != "pure drop"),
                None,
            )

            paired = churned or pure
            time = (
                f"{_duration(plan.seconds_for(floor.items if floor else None))} / "
                f"{_duration(plan.seconds_for(paired.items if paired else None))}"
            )
            spi = f"{plan.seconds_per_item:.2f}" if plan.seconds_per_item is not None else "-"
            total = plan.total_items
            lines.append(
                f"{plan.task:<12} {plan.n:>6} {100 * plan.score:>5.1f}% {100 * drop:>3g}pt  "
                f"{_cell(floor, total):>12} {_cell(pure, total):>12} "
                f"{_cell(churned, total):>13}  {spi:>6}  {time}"
            )
            for need in (floor, pure, churned):
                if need is not None and need.reason:
                    notes.append(f"{plan.task}, {_points(drop)}, {need.gate}: {need.reason}")
        if plan.churn is not None:
            notes.append(f"{plan.task}: churn {100 * plan.churn:.1f}% ({plan.churn_source})")
        if plan.detectable_drop is not None:
            notes.append(
                f"{plan.task}: at its {plan.n} items a floor gate catches drops of "
                f"{100 * plan.detectable_drop:.1f} points or more"
                + (
                    ""
                    if plan.false_alarm is None
                    else f" and fails an unchanged model in {100 * plan.false_alarm:.1f}% of "
                    "samples"
                )
            )
    if any(
        nd.items is not None and p.total_items is not None and nd.items > p.total_items
        for p in plans
        for nd in p.needs
    ):
        notes.append("!: more items than the task has")
    return lines + notes


#: The drop a run's size is checked against (:func:`limit_warning`): 5 points.
LIMIT_DROP = 0.05


def limit_warning(
    task: str,
    results: list[dict[str, Any]],
    *,
    floor: bool,
    paired: bool,
    rule: FloorRule,
    policy: str,
    churn: float | None,
    reference: tuple[float, str] | None = None,
) -> str | None:
    """A warning when the gates of a task cannot catch a 5-point drop (80% power) at the
    number of items that ran; None when they can, or when the scores are not 0/1.

    The budget is planned at ``reference`` (a score and what it is, e.g. the score of the
    reference run the floor came from: more items than a ``--llm-limit`` run, and a score
    of 0 on 10 items would plan nothing), else at this run's own score."""
    scores = [float(r.get("score", 0.0)) for r in results]
    n = len(scores)
    if not n or any(s not in (0.0, 1.0) for s in scores):
        return None
    p0, at = math.fsum(scores) / n, "this run's score"
    if reference is not None and 0.0 <= reference[0] <= 1.0:
        p0, at = reference
    parts = []
    if floor:
        need = floor_need(p0, LIMIT_DROP, rule, policy)
        if need.items is not None and need.items > n:
            parts.append(f"a floor gate ({rule.name}, policy {policy}) needs {need.items}")
    if paired:
        assumed = "pure drop" if not churn else f"{100 * churn:.1f}% churn as observed"
        need = paired_need(p0, LIMIT_DROP, churn or 0.0, assumed)
        if need.items is not None and need.items > n:
            parts.append(f"a paired baseline gate needs {need.items} ({assumed})")
    if not parts:
        return None
    return (
        f"{task}: {n} items cannot decide a {100 * LIMIT_DROP:g}-point drop: "
        + " and ".join(parts)
        + f" for 80% power at {100 * p0:.1f}% ({at}; --llm-set report.plan=true, docs/GATES.md)"
    )
