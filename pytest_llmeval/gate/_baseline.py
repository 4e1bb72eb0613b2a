"""The paired baseline gate: what a comparison with a baseline run found, per task and in
the settings, and the rules that fail on it (in the spirit of ``--benchmark-compare-fail``).

Plain Python (no pytest, no torch, no run directories: ``record`` reads the two runs and
builds the :class:`Comparison`). Each task's change is tested on the items both runs
scored (:func:`paired_delta`): the exact McNemar test where every shared item scored 0 or
1, the paired sign-flip permutation test on the per-item score differences where a metric
gives partial scores (F1, MC2; see docs/GATES.md). ``parse_gate`` / ``gate_failures`` turn
a comparison into pass/fail lines.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pytest_llmeval.scorer import mcnemar_exact


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


def _item_correct(record: Mapping[str, Any]) -> bool:
    correct = record.get("correct")
    if correct is None:
        return item_score(record) >= 1.0
    return bool(correct)


def item_score(record: Mapping[str, Any]) -> float:
    """An item record's score as a proportion: its ``score``, else 1/0 from ``correct``."""
    score = record.get("score")
    if isinstance(score, (int, float)):
        return float(score)
    return 1.0 if record.get("correct") else 0.0


def item_scored(record: Mapping[str, Any]) -> bool:
    """False for an item whose prompt did not fit the context window (reported, not scored)
    and for an item that could not be evaluated (its record carries the ``error``): the
    comparison leaves both out."""
    details = record.get("details")
    overflow = isinstance(details, Mapping) and details.get("context_overflow")
    return not record.get("error") and not overflow


def paired_delta(
    task: str,
    base: Mapping[str, Mapping[str, Any]],
    cur: Mapping[str, Mapping[str, Any]],
    alpha: float,
) -> TaskDelta:
    """A task's change from ``base`` to ``cur`` (item id -> item record) on the items both
    scored, with the paired test that fits: the exact McNemar test where every shared item
    scored 0 or 1, the sign-flip test on the score differences otherwise."""
    # Items that were not scored (an error, a prompt over the window) are not compared.
    base = {i: r for i, r in base.items() if item_scored(r)}
    cur = {i: r for i, r in cur.items() if item_scored(r)}
    shared = [i for i in cur if i in base]
    binary = all(item_score(r[i]) in (0.0, 1.0) for r in (base, cur) for i in shared)
    if binary:
        regressed = sorted(
            i for i in shared if _item_correct(base[i]) and not _item_correct(cur[i])
        )
        improved = sorted(i for i in shared if not _item_correct(base[i]) and _item_correct(cur[i]))
    else:
        # Partial scores (F1, MC2): whether an item is "correct" is a threshold, not a
        # fact, so the change is tested on the score differences themselves.
        regressed = sorted(i for i in shared if item_score(cur[i]) < item_score(base[i]))
        improved = sorted(i for i in shared if item_score(cur[i]) > item_score(base[i]))
    n = len(shared)
    if n:
        base_score = math.fsum(item_score(base[i]) for i in shared) / n
        cur_score = math.fsum(item_score(cur[i]) for i in shared) / n
        delta = cur_score - base_score
    else:
        base_score = cur_score = delta = math.nan
    if binary:
        p = mcnemar_exact(len(regressed), len(improved))
    else:
        p = sign_flip_test([item_score(cur[i]) - item_score(base[i]) for i in shared])
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
