"""Where each contamination verdict was validated, and what a run outside that says.

A verdict's false-alarm rate depends on the number of items: a null that is slightly
wrong passes at 50 items and fires with certainty at 5,000. So every verdict carries the
range of n and the models its false-alarm rate on clean items was measured on
(docs/contamination-experiment/scaling.md), read from ``validation.json`` beside this
module, which ``python -m tools.contamination_experiment scaling --validation-out`` writes
from the same measurements as the tables. A run outside that range says so in the
verdict's message instead of extrapolating; so does a run whose prompts or dtype are not
among the conditions it was measured under (:func:`conditions_text`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

VALIDATION_FILE = Path(__file__).with_name("validation.json")
TABLES = "docs/contamination-experiment/scaling.md"


@dataclass(frozen=True)
class Validation:
    """One verdict's measured false alarms on clean items: the smallest and largest n,
    the pools (model, task, role), the largest rate at any n, and whether it stayed at or
    under alpha everywhere (a whole pool's single verdict included)."""

    verdict: str
    n_min: int
    n_max: int
    pools: tuple[str, ...]
    max_rate: float
    worst: str  # where the largest rate was seen
    holds: bool
    alpha: float
    conditions: tuple[str, ...] = ()  # the prompts and dtype of its pools
    # Pools where it was measured but cannot fire (a McNemar test with too few discordant
    # pairs): when these are all there is, it is not validated.
    cannot_fire_on: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()  # the benchmarks of its pools (empty in an older file)
    # The most items measured under each of its conditions (empty in an older file).
    n_max_by_conditions: Mapping[str, int] = field(default_factory=dict)
    # The kinds of model of its pools in a few words (untouched models, in-domain
    # fine-tunes, position-only models): the message names these, the record and the
    # tables every pool. Empty in an older file: the message then lists the pools.
    models: str = ""
    # Its power where it was measured: per planted model, its conditions, the share of
    # each draw planted and the rate at each n (empty in an older file).
    power: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def from_dict(
        cls, verdict: str, data: Mapping[str, Any], alpha: float, conditions: str = ""
    ) -> Validation:
        """``conditions``: the file's one line for all verdicts, for a file written before
        each verdict had its own list."""
        own = data.get("conditions", [conditions] if conditions else [])
        return cls(
            verdict=verdict,
            n_min=int(data["n_min"]),
            n_max=int(data["n_max"]),
            pools=tuple(str(p) for p in data["pools"]),
            max_rate=float(data["max_rate"]),
            worst=str(data["worst"]),
            holds=bool(data["holds"]),
            alpha=alpha,
            conditions=(own,) if isinstance(own, str) else tuple(str(c) for c in own),
            cannot_fire_on=tuple(str(p) for p in data.get("cannot_fire_on", ())),
            tasks=tuple(str(t) for t in data.get("tasks", ())),
            n_max_by_conditions={
                str(c): int(n) for c, n in (data.get("n_max_by_conditions") or {}).items()
            },
            models=str(data.get("models") or ""),
            power=tuple(p for p in data.get("power") or () if isinstance(p, Mapping)),
        )

    def power_text(self, n: int, conditions: str = "") -> str:
        """Its measured power at the run's ``n`` (the largest size measured at or under it,
        else the smallest): under the run's ``conditions`` where it was measured there,
        with the range under the other conditions beside it; empty where never measured.
        A pass reads against this: a verdict that found none of a known contamination at
        this n under these prompts says little by passing."""
        rows = [
            (str(p.get("model")), seen_conditions(self.verdict, str(p.get("conditions", ""))), p)
            for p in self.power
            if p.get("rates")
        ]
        if not rows:
            return ""
        sizes = sorted({int(k) for _, _, p in rows for k in p["rates"]})
        at = max((k for k in sizes if k <= n), default=sizes[0])
        share = float(rows[0][2].get("share", 0.1))
        rated = [(m, c, float(p["rates"][str(at)])) for m, c, p in rows if str(at) in p["rates"]]
        conditions = seen_conditions(self.verdict, conditions)
        here = [(m, r) for m, c, r in rated if c == conditions]
        other = [r for m, c, r in rated if c != conditions]
        parts = []
        if here:
            parts.append(
                f"under {conditions}: "
                + ", ".join(f"{100 * r:.1f}% ({m})" for m, r in sorted(here, key=lambda x: x[1]))
            )
        if other:
            low, high = 100 * min(other), 100 * max(other)
            span = f"{low:.1f}%" if low == high else f"{low:.1f}-{high:.1f}%"
            tunes = f"{len(other)} fine-tune{'s' if len(other) > 1 else ''}"
            parts.append(f"{'under other prompts ' if here else ''}{span} ({tunes})")
        return (
            f"power where {share:.0%} of draws of {at} items were memorised by an in-domain "
            "fine-tune: " + "; ".join(parts)
        )

    @property
    def vacuous(self) -> bool:
        """Measured only on pools where it cannot fire: its 0% says nothing."""
        return not self.pools and bool(self.cannot_fire_on)

    def describe(self, n: int, conditions: str = "", task: str = "") -> str:
        """The validated range in words, and whether ``n``, the number of items probed (the
        unit of the experiment's random draws, not a test's own count of usable items), and
        the run's ``conditions`` (:func:`conditions_text`) and ``task``, when given, lie in
        it."""
        if self.vacuous:
            return (
                "false alarms on clean items measured only where the test cannot fire ("
                + "; ".join(self.cannot_fire_on)
                + f"): not validated ({TABLES})"
            )
        # What of the conditions reaches the statistic (membership: the dtype alone).
        measured = tuple(dict.fromkeys(seen_conditions(self.verdict, c) for c in self.conditions))
        conditions = seen_conditions(self.verdict, conditions)
        n_max_by_conditions: dict[str, int] = {}
        for under, most in self.n_max_by_conditions.items():
            under = seen_conditions(self.verdict, under)
            n_max_by_conditions[under] = max(most, n_max_by_conditions.get(under, 0))
        if self.models:
            # The kinds of model, the benchmarks and the conditions with the most items
            # under each: the range in a line; the pools one by one are in the record.
            under = "; ".join(
                f"{c} (up to {n} items)" for c, n in n_max_by_conditions.items()
            ) or "; ".join(measured)
            text = (
                "false alarms on clean items measured on draws of "
                f"n={self.n_min}..{self.n_max} items"
                + (f" of {', '.join(self.tasks)}" if self.tasks else "")
                + f" from {self.models}"
                + (f", under {under}" if under else "")
            )
        else:  # an older file: every pool; under several conditions each label names its own
            only = f", with {measured[0]}" if len(measured) == 1 else ""
            text = (
                "false alarms on clean items measured on draws of "
                f"n={self.n_min}..{self.n_max} items from {'; '.join(self.pools)}{only}"
            )
        text += f": at most {100 * self.max_rate:.1f}% ({self.worst})"
        if not self.holds:
            text += f": above its level alpha={self.alpha}"
        if n > self.n_max:
            text += (
                f"; this run has n={n} items, above the validated range: its false-alarm rate at "
                "this n is not measured"
            )
        elif n < self.n_min:
            text += f"; this run has n={n} items, below the validated range"
        if conditions and measured and conditions not in measured:
            text += f"; this run has {conditions}: its false-alarm rate under those is not measured"
        elif n <= self.n_max and n > n_max_by_conditions.get(conditions, self.n_max):
            text += (
                f"; this run has n={n} items with {conditions}, measured under those up to "
                f"{n_max_by_conditions[conditions]} items: its false-alarm rate at this n "
                "under these prompts is not measured"
            )
        if task and self.tasks and task not in self.tasks:
            text += (
                f"; {task} is not among the benchmarks it was measured on: its false-alarm "
                "rate on this task's items is not measured"
            )
        power = self.power_text(n, conditions)
        if power:
            text += f"; {power}"
        return f"{text} ({TABLES})"


@cache
def _load(path: Path) -> tuple[float, str, dict[str, Any]]:
    if not path.is_file():
        return 0.0, "", {}
    data = json.loads(path.read_text())
    return float(data["alpha"]), str(data.get("conditions", "")), dict(data["verdicts"])


def validation(verdict: str, *, path: Path | None = None) -> Validation | None:
    """The measured validation of ``verdict`` (the experiment's name: ``canonical_order``,
    ``canonical_order_vs_reference``, ``option_shuffle``, ...), or None when it was never
    measured on known-clean items. ``path``: another validation file than the package's."""
    alpha, conditions, verdicts = _load(path or VALIDATION_FILE)
    data = verdicts.get(verdict)
    if data is None:
        return None
    # Each verdict's own conditions (its pools'); a file written before they were per
    # verdict has one line for all.
    return Validation.from_dict(verdict, data, alpha, str(data.get("conditions", conditions)))


def validation_note(
    verdict: str, n: int, *, conditions: str = "", task: str = "", path: Path | None = None
) -> str:
    """What the message of ``verdict`` on ``n`` items of ``task`` (run under
    ``conditions``, when known) says about its validation."""
    found = validation(verdict, path=path)
    if found is None:
        return (
            "not validated: its false-alarm rate on known-clean items has not been measured "
            f"at any n ({TABLES})"
        )
    return found.describe(n, conditions, task)


# Membership scores an item's own text with no context (``membership_scores``: an empty
# prompt), so the few-shot block and chat template of a run or a pool never reach its
# statistic; the dtype does. Its conditions are compared on that alone.
PROMPT_FREE = ("membership",)  # verdict names (``validated_as``) starting so
NO_PROMPT = "the item's text scored without a prompt"


def seen_conditions(verdict: str, conditions: str) -> str:
    """The part of ``conditions`` (:func:`conditions_text`) that reaches ``verdict``'s
    statistic: all of it, but for a verdict scoring text without a prompt
    (:data:`PROMPT_FREE`) its dtype alone."""
    if not conditions or not verdict.startswith(PROMPT_FREE):
        return conditions
    return f"{NO_PROMPT}, {conditions.rsplit(', ', 1)[-1]}"


def conditions_text(shots: int, chat_template: bool, dtype: str | None) -> str:
    """A probe's measurement conditions in words, the same for a run and for the
    experiment's pools: ``5-shot prompts through the chat template, float32``."""
    return (
        f"{f'{shots}-shot' if shots else 'zero-shot'} prompts "
        f"{'through the chat template' if chat_template else 'without a chat template'}, "
        f"{dtype or 'dtype unknown'}"
    )
