"""The pytest plugin (entry point ``llmeval``): all pytest wiring lives in this package.

Importing it imports no torch or transformers: ``pytest --help`` stays fast and runs
that never touch a model never load one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval._errors import LlmEvalError
from pytest_llmeval.task import CAPABILITIES

from ._collect import (
    SESSION_KEY,
    EvalItem,
    LmEvalOptionTasks,
    collect_file,
    get_session,
    report_spec_errors,
    task_of,
)
from ._drift import DriftCheck
from ._options import add_options
from ._outcomes import PRESENTER, Presenter, report_gates
from ._probe import ProbeRunner
from ._session import LlmEvalSession, SelectedItem
from ._terminal import (
    report_teststatus,
    write_catalog,
    write_details,
    write_probes,
    write_summary,
    write_warnings,
)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "llmeval: a benchmark item evaluated by pytest-llmeval")
    # Items carry xdist_group marks (one group per task); register the name for runs
    # without pytest-xdist so that --strict-markers and warnings stay quiet.
    config.addinivalue_line("markers", "xdist_group(name): pytest-xdist scheduling group")
    config.addinivalue_line("markers", "regression: part of the regression suite (gates merges)")
    config.addinivalue_line("markers", "release: part of the release suite")
    config.addinivalue_line("markers", "contamination: a contamination probe")
    config.addinivalue_line(
        "markers",
        "llm_probe(items=N, alpha=A, fpr=F): the contamination probe settings of one test "
        "(over the project's probe settings; --llm-set wins over it)",
    )
    config.addinivalue_line(
        "markers",
        "environment: the environment drift check (syrupy snapshot of versions and hashes)",
    )
    for capability in CAPABILITIES:
        config.addinivalue_line("markers", f"{capability}: capability dimension {capability}")
    llm = LlmEvalSession(config)
    if llm.options.hub:
        # An environment variable, so that xdist workers (started later) inherit it.
        os.environ["LLMEVAL_ALLOW_HUB"] = "1"
    config.stash[SESSION_KEY] = llm
    # The session object receives item reports itself (pytest_runtest_logreport).
    config.pluginmanager.register(llm, "llmeval-session")
    from ._html import HtmlExtras, html_wanted

    if llm.options.lmeval_tasks:
        config.pluginmanager.register(LmEvalOptionTasks(config), "llmeval-lmeval-tasks")
    if html_wanted(config):  # pytest-html (optional extra 'html') with --html=FILE
        config.pluginmanager.register(HtmlExtras(llm), "llmeval-html")


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist, plain ``-n N`` (``--dist load``) and ``--dist loadgroup``: each task's
    items go to one worker, so its model loads once there and its batches stay full
    (``_schedule.py``). Another ``--dist`` mode chosen explicitly is left to xdist."""
    if config.getvalue("dist") not in ("load", "loadgroup"):
        return None
    from ._schedule import make_scheduler

    return make_scheduler(config, log)


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Register the controller's item presenter after the reporters (``_outcomes.py``:
    a wrong answer is a failure to them, after pytest's own failure count)."""
    llm = get_session(session.config)
    if not llm.is_worker and not session.config.pluginmanager.has_plugin(PRESENTER):
        presenter = Presenter(session.config, strict=llm.options.strict)
        session.config.pluginmanager.register(presenter, PRESENTER)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    return collect_file(file_path, parent)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    llm = get_session(config)
    report_spec_errors(config, items)  # a broken spec: an error if selected, else a warning
    if llm.options.catalog:  # show the catalog, run nothing
        config.hook.pytest_deselected(items=list(items))
        items[:] = []
    selected: list[SelectedItem] = [item for item in items if isinstance(item, EvalItem)]
    llm.set_selection(selected)
    if not llm.options.catalog:  # tasks -k/-m left out whole: listed as deselected
        gone = llm.deselected_tasks - {task_of(item) for item in items}
        if gone:
            llm.notes["deselected_tasks"] = sorted(gone)
    llm.check_collection(selected)


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        llm = get_session(items[0].config)
        gone = {id(i) for i in items}
        llm.deselected_tasks.update(t for t in map(task_of, items) if t is not None)
        for task, selected in llm.selected.items():
            llm.selected[task] = [i for i in selected if id(i) not in gone]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Runs before the terminal reporter prints its summary, so verdicts are ready for it.
    llm = get_session(session.config)
    llm.evaluator.close()  # every item has run: stop the model's engine, if it has one
    if llm.is_worker:
        return
    if llm.options.catalog and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK
    llm.interrupted = interruption(session, exitstatus, llm)
    if llm.interrupted:
        llm.keep_computed_ahead()
    llm.adopt_own_environment()
    decisions = llm.decide()
    failed = any(v.failed for v in decisions) or bool(llm.gate_failures)
    if failed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    # Each task's gate as its own test case, for JUnit XML and pytest-html (they write
    # their files in their own pytest_sessionfinish, after this tryfirst one).
    report_gates(session.config, decisions)


def interruption(session: pytest.Session, exitstatus: int, llm: LlmEvalSession) -> str | None:
    """Why the run stopped before its end, or None: Ctrl-C or a signal, ``-x`` or
    ``--maxfail``, an internal error, or selected benchmark items that never ran."""
    status = int(exitstatus)
    if status == pytest.ExitCode.INTERRUPTED:
        return f"interrupted ({session.shouldstop or 'KeyboardInterrupt or a stop request'})"
    if status == pytest.ExitCode.INTERNAL_ERROR:
        return "an internal error stopped the run"
    if session.shouldfail:
        return f"stopped early ({session.shouldfail})"
    if session.shouldstop:
        return f"stopped early ({session.shouldstop})"
    selected = {item.nodeid for items in llm.selected.values() for item in items}
    missing = len(selected - llm.done_nodeids)
    if missing > 0:
        return f"{missing} selected benchmark item(s) never ran"
    return None


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    llm = get_session(config)
    if llm.is_worker:
        return
    if llm.options.catalog:
        write_catalog(llm, terminalreporter)
    write_details(llm, terminalreporter)
    write_summary(llm, terminalreporter)
    write_probes(llm, terminalreporter)
    write_warnings(llm, terminalreporter)


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> Any:
    return report_teststatus(report)


@pytest.fixture(scope="session")
def llm_model(pytestconfig: pytest.Config) -> Any:
    """The model under evaluation (a :class:`pytest_llmeval.model.Backend`), loaded once per
    process and shared with the YAML benchmark items."""
    llm = get_session(pytestconfig)
    if llm.options.model is None:
        pytest.skip("no model to evaluate: pass --llm-model=PATH")
    try:
        return llm.evaluator.backend()
    except LlmEvalError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def llm_drift(pytestconfig: pytest.Config) -> DriftCheck:
    """What must not drift between runs of this environment (library versions, CUDA, the
    model's SHA256, dtype, device type, and per collected task its config and prompt
    hashes), with ``assert_matches(snapshot)`` for a syrupy snapshot test."""
    llm = get_session(pytestconfig)
    if llm.options.model is None:
        pytest.skip("no model to evaluate: pass --llm-model=PATH")
    return DriftCheck.for_session(llm)


@pytest.fixture(scope="session")
def llm_probe(
    request: pytest.FixtureRequest, pytestconfig: pytest.Config, llm_model: Any
) -> ProbeRunner:
    """Contamination probes on collected tasks with the model under evaluation:
    ``report = llm_probe.run("mmlu", "option_shuffle")`` then ``llm_probe.check(report)``
    (fails with the verdict at ``probe.alpha``); reports go to the run directory. A test's
    ``@pytest.mark.llm_probe(items=200, alpha=0.05, fpr=0.05)`` sets its own."""
    marker = request.node.get_closest_marker("llm_probe")
    return ProbeRunner(get_session(pytestconfig), llm_model, marker.kwargs if marker else None)


__all__ = ["DriftCheck", "EvalItem", "LlmEvalSession", "ProbeRunner"]
