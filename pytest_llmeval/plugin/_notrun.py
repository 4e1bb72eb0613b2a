"""The tasks a run collected but did not run, each with why and what to pass.

A task whose data is not installed, whose scorer's extra is missing, whose items are all
excluded, or that has no model to run on is skipped as a whole; a task that ``-k``/``-m``
leave out is deselected. Without this list such a task is a bare ``s`` (or nothing) in the
terminal and is absent from the records, so a reader cannot tell a task that was never
measured from one that was never asked for. The states are built on the controller from
item reports and collection notes, so they hold under xdist too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pytest

# What the user passes (or does) so that a task skipped for this kind of reason runs.
FIXES = {
    "data": "install its data: --llm-data-dir=DIR (or LLMEVAL_DATA_DIR) with its folder",
    "judge": "install the scorer's extra named in the reason",
    "empty": "fill its data file, or narrow --llm-set run.exclude=FILE",
    "model": "pass --llm-model=PATH (or set llm_model in the ini file)",
    "window": "a model with a larger context window, or the spec's overflow policy",
    "deselected": "select it with -k or -m (this run's expressions leave it out)",
}
NO_MODEL = "no model to evaluate"
SKIPPED_PREFIX = "Skipped: "


@dataclass(frozen=True)
class NotRun:
    """A collected task that ran no item: ``state`` is ``skipped`` or ``deselected``."""

    task: str
    state: str
    reason: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return {"task": self.task, "state": self.state, "reason": self.reason, "fix": self.fix}


def skip_reason(report: pytest.TestReport) -> str | None:
    """The reason of a report skipped at setup (a skip marker or ``pytest.skip``), or None.

    Only setup skips say why a task did not run: a call skip is an item that ran (a wrong
    answer, a prompt too long for the window), which the task's score accounts for."""
    if report.when != "setup" or not report.skipped:
        return None
    longrepr = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr or "")
    return reason.removeprefix(SKIPPED_PREFIX).strip() or "skipped"


def fix_for(kind: str | None, reason: str) -> str:
    """What to pass so the task runs, from the kind of its stand-in item (``data``,
    ``judge``, ``empty``) or, for benchmark items skipped at setup, from the reason."""
    if kind in FIXES:
        return FIXES[kind]
    if reason.startswith(NO_MODEL):
        return FIXES["model"]
    if "context window" in reason:
        return FIXES["window"]
    return "see the reason"


def tasks_not_run(
    skipped: Iterable[tuple[str, str | None, Mapping[str, int]]],
    deselected: Iterable[str],
) -> list[NotRun]:
    """The skipped tasks (name, kind of its stand-in item or None, each setup skip reason
    with its count), then the deselected ones, each once, sorted by name."""
    out = []
    for task, kind, reasons in sorted(skipped, key=lambda s: s[0]):
        reason = max(reasons, key=lambda r: reasons[r]) if reasons else "skipped"
        if len(reasons) > 1:
            reason += f" (and {len(reasons) - 1} other reason(s))"
        out.append(NotRun(task, "skipped", reason, fix_for(kind, reason)))
    named = {n.task for n in out}
    for task in sorted(set(deselected) - named):
        out.append(NotRun(task, "deselected", "deselected by -k/-m", FIXES["deselected"]))
    return out
