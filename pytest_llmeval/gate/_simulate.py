"""Do gates of the planned size catch a planted drop at the promised rate? A simulation on a
real run record.

Each draw takes ``n`` items from a reference run's items of a task (with replacement, so the
pool stands for the task's population of items, at the pool's score ``p0``), copies their
records, and plants a drop in the copy: each right item turns wrong with probability
``(churn / 2 + drop) / p0`` and each wrong item turns right with probability
``(churn / 2) / (1 - p0)`` (``churn`` 0: only right items flip, a pure drop). The copy is
then gated exactly as a run would be:

- **paired**: ``paired_delta`` of the copy against the drawn items (what ``compare_runs``
  runs per task), then ``gate_failures`` with the ``sig`` rule (exact McNemar, p < alpha),
  the code ``gate.baseline_rule`` runs;
- **floor, fresh items** (the plan's model): the floor the rule makes from a reference of
  ``n`` items at ``p0``; the copy's own score and 95% interval against it under the policy;
- **floor, same items** (what a CI run on the reference's ``--llm-limit`` does): the floor
  made from the drawn items' own score and interval (rounded as ``floors`` writes it), the
  copy of those same items against it.

False alarms: the same draws with ``drop`` 0 (the churn alone). Rates are over ``draws``
draws with a seeded generator; their Monte Carlo standard error is given.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_llmeval.scorer import accuracy

from ._baseline import Comparison, gate_failures, paired_delta, parse_gate
from ._plan import ALPHA, floor_at, floor_gate_fail_probability, paired_shares
from ._power import mcnemar_power
from ._verdict import FloorRule, policy_fails


@dataclass(frozen=True)
class Simulated:
    """Detection and false-alarm rates of one gate at one size, with the plan's promise."""

    gate: str  # "paired" | "floor (fresh items)" | "floor (same items)"
    n: int
    drop: float
    churn: float
    draws: int
    detected: float
    false_alarms: float
    promised_power: float | None
    promised_false_alarms: float | None

    @property
    def stderr(self) -> float:
        """Monte Carlo standard error of the detection rate."""
        p = self.detected
        return math.sqrt(p * (1 - p) / self.draws) if self.draws else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "stderr": self.stderr}


def plant(
    correct: Sequence[bool], drop: float, churn: float, p0: float, rng: random.Random
) -> list[bool]:
    """A copy of ``correct`` with a drop planted: right items flip to wrong with probability
    ``(churn/2 + drop) / p0``, wrong ones to right with ``(churn/2) / (1 - p0)``."""
    to_wrong = (churn / 2 + drop) / p0 if p0 > 0 else 0.0
    to_right = (churn / 2) / (1 - p0) if p0 < 1 else 0.0
    if to_wrong > 1 + 1e-12 or to_right > 1 + 1e-12:
        raise ValueError(
            f"a score of {100 * p0:.1f}% cannot lose {100 * drop:g} points with "
            f"{100 * churn:.1f}% churn"
        )
    return [(rng.random() >= to_wrong) if c else (rng.random() < to_right) for c in correct]


def _record(ids: Sequence[str], correct: Sequence[bool]) -> dict[str, dict[str, Any]]:
    pairs = zip(ids, correct, strict=True)
    return {i: {"item_id": i, "correct": c, "score": 1.0 if c else 0.0} for i, c in pairs}


def _paired_fails(task: str, ids: list[str], base: list[bool], cur: list[bool]) -> bool:
    # compare_runs of two runs that differ only in these items: one task, no differing
    # settings, compared at compare_runs' alpha (0.05)
    delta = paired_delta(task, _record(ids, base), _record(ids, cur), 0.05)
    comparison = Comparison(Path("baseline"), [delta], [], [], current_path=Path("current"))
    return bool(gate_failures(comparison, parse_gate("sig")))


def simulate(
    pool: Sequence[bool],
    gate: str,
    n: int,
    drop: float,
    *,
    churn: float = 0.0,
    draws: int = 2000,
    seed: int = 0,
    rule: FloorRule | None = None,
    policy: str = "point",
    alpha: float = ALPHA,
    task: str = "task",
) -> Simulated:
    """Rates of ``gate`` ("paired", "floor-fresh" or "floor-same") at ``n`` items over
    ``draws`` draws from ``pool`` (the reference's per-item correctness)."""
    if not pool:
        raise ValueError("an empty pool of items")
    rule = rule or FloorRule("lcb")
    rng = random.Random(seed)
    p0 = sum(pool) / len(pool)
    ids = [f"{task}-{j:06d}" for j in range(n)]
    fresh_floor = floor_at(rule, p0, n, alpha)
    detected = alarms = 0
    for _ in range(draws):
        base = [pool[rng.randrange(len(pool))] for _ in range(n)]
        outcomes = []
        for planted_drop in (drop, 0.0):
            cur = plant(base, planted_drop, churn, p0, rng)
            if gate == "paired":
                fails = _paired_fails(task, ids, base, cur)
            else:
                est = accuracy(cur)
                if gate == "floor-fresh":
                    floor = fresh_floor
                elif gate == "floor-same":
                    ref = accuracy(base)
                    floor = rule.floor(ref.value, ref.ci_low)
                else:
                    raise ValueError(f"unknown gate {gate!r}: paired, floor-fresh, floor-same")
                fails = policy_fails(policy, est.value, est.ci_low, est.ci_high, floor)
            outcomes.append(fails)
        detected += outcomes[0]
        alarms += outcomes[1]
    promised: float | None = None
    promised_alarms: float | None = None
    if gate == "paired":
        shares = paired_shares(p0, drop, churn)
        if shares is not None:
            promised = mcnemar_power(n, *shares, alpha)
            promised_alarms = mcnemar_power(n, churn / 2, churn / 2, alpha)
    elif gate == "floor-fresh":
        promised = floor_gate_fail_probability(n, p0 - drop, fresh_floor, policy, alpha)
        promised_alarms = floor_gate_fail_probability(n, p0, fresh_floor, policy, alpha)
    names = {"paired": "paired", "floor-fresh": "floor (fresh items)"}
    return Simulated(
        gate=names.get(gate, "floor (same items)"),
        n=n,
        drop=drop,
        churn=churn,
        draws=draws,
        detected=detected / draws,
        false_alarms=alarms / draws,
        promised_power=promised,
        promised_false_alarms=promised_alarms,
    )
