"""What a wrong answer and a task's gate are to pytest and its reporters.

A wrong answer is a failure as JUnit XML and pytest-html read it (``record/_junit.py``
turns the passed call into a failed one on the controller), but not as pytest counts
failures: it must not change the exit status, nor stop a run under ``-x`` or
``--maxfail``; the task gates decide the exit status (``pytest_sessionfinish``).

The order of ``pytest_runtest_logreport``'s implementations does it. pluggy calls
tryfirst ones first, then the others, and within each the last registered first.
pytest's ``Session`` counts ``report.failed`` (and sets ``shouldfail`` at ``--maxfail``,
which cannot be unset) in a tryfirst implementation; the reporters (terminal, JUnit XML,
pytest-html, trylast) are plain ones registered at configure time. :class:`Presenter` is a
plain one registered at the session's start, after them: it runs after the ``Session``
counted the report as passed and before every reporter. (``--lf`` and ``--sw``, plain
ones too, see the failure: ``--lf`` reruns wrong answers, ``--sw`` stops at the first.)
Under pytest-xdist the controller's ``DSession`` counts ``rep.failed`` in
``_handlefailures`` right after the hook returns (``worker_testreport``): the presenter
takes one off ``DSession.countfailures`` for a wrong answer, so that the count stays.

:func:`gate_reports` makes each task's gate its own test case, fed through
``pytest_runtest_logreport`` at the end of the session, before JUnit XML and pytest-html
write their files.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmeval.record import gate_case, present_report

if TYPE_CHECKING:
    from pytest_llmeval.gate import TaskDecision

# The last part of a gate's node id: SPEC::TASK::gate.
GATE_NAME = "gate"
# The presenter's name in the plugin manager.
PRESENTER = "llmeval-presenter"


class Presenter:
    """Gives each item report its compact properties and a wrong answer its failure (see
    the module docstring), and remembers where each task's items live, for its gate."""

    def __init__(self, config: pytest.Config, strict: bool) -> None:
        self.config = config
        self.strict = strict
        # task -> (the node id of its items' parent, their file as a report location)
        self.task_places: dict[str, tuple[str, str]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if getattr(report, "llmeval_gate", False):
            return
        props = dict(report.user_properties)
        task = props.get("llmeval_task")
        if not isinstance(task, str):
            return
        if task not in self.task_places and "::" in report.nodeid:
            self.task_places[task] = (report.nodeid.rpartition("::")[0], report.location[0])
        present_report(report, props, strict=self.strict)
        if getattr(report, "llmeval_wrong", False):
            dsession = self.config.pluginmanager.getplugin("dsession")
            if dsession is not None and hasattr(dsession, "countfailures"):
                # xdist counts rep.failed right after this hook: net zero for a wrong answer.
                dsession.countfailures -= 1


def gate_reports(
    decisions: Iterable[TaskDecision], places: dict[str, tuple[str, str]]
) -> list[pytest.TestReport]:
    """Each task's gate as a test's setup, call and teardown reports (a skipped gate: its
    skipped setup and its teardown), node id ``SPEC::TASK::gate``, with the decision's
    score, interval, floor, status and policy as properties. ``llmeval_gate`` marks them
    for the terminal and for the plugin's own report hooks, which do not tally them."""
    reports: list[pytest.TestReport] = []
    for decision in decisions:
        parent, path = places.get(decision.task, (decision.task, decision.task))
        outcome, message, props = gate_case(decision.row())
        gate = _GateCase(f"{parent}::{decision.task}::{GATE_NAME}", path, decision.task, props)
        if outcome == "skipped":
            reports.append(gate.report("setup", "skipped", (path, 0, f"Skipped: {message}")))
        else:
            reports.append(gate.report("setup", "passed"))
            reports.append(gate.report("call", outcome, message or None))
        reports.append(gate.report("teardown", "passed"))
    return reports


class _GateCase:
    """One gate's node id, location and properties, for its reports."""

    def __init__(self, nodeid: str, path: str, task: str, props: list[tuple[str, str]]) -> None:
        self.nodeid, self.path, self.task, self.props = nodeid, path, task, props

    def report(self, when: str, outcome: str, longrepr: Any = None) -> pytest.TestReport:
        return pytest.TestReport(
            self.nodeid,
            (self.path, None, f"{self.task}::{GATE_NAME}"),
            {GATE_NAME: 1, self.task: 1},
            outcome,  # type: ignore[arg-type]
            longrepr,
            when,  # type: ignore[arg-type]
            user_properties=self.props,
            llmeval_gate=True,
        )


def report_gates(config: pytest.Config, decisions: Iterable[TaskDecision]) -> None:
    """Feed each task's gate through ``pytest_runtest_logreport`` (run from the plugin's
    tryfirst ``pytest_sessionfinish``: JUnit XML and pytest-html write their files in
    theirs, afterwards)."""
    presenter = config.pluginmanager.getplugin(PRESENTER)
    places = presenter.task_places if isinstance(presenter, Presenter) else {}
    for report in gate_reports(decisions, places):
        config.hook.pytest_runtest_logreport(report=report)
