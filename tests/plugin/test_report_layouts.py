"""report.html for every run layout the plugin writes: one process, ``-n 2``, one task per
process combined with ``run.dir``, an interrupted run and the run that resumed it; a
report that cannot be built leaves the run as it is; pytest-html's report gets the summary
and each item's prompt, output, extracted answer and target."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tiny_projects import KILL_CONFTEST

from pytest_llmeval.record import prepare_report
from pytest_llmeval.record.__main__ import main as record_main

pytest.importorskip("torch")


BROKEN_REPORT_CONFTEST = """
import pytest_llmeval.record as record
def broken(*args, **kwargs):
    raise RuntimeError("a bug in the report")
record.write_report = broken
"""


def _args(model: Path, *extra: str) -> list[str]:
    return [f"--llm-model={model}", "--llm-data-dir=.", "-p", "no:cacheprovider", *extra]


def _runs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir())


def _lines(run: Path, task: str) -> list[dict[str, Any]]:
    text = (run / "tasks" / f"{task}_output.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def _items(run: Path) -> dict[str, dict[str, Any]]:
    """The browser's items of a run's report data, by task and id."""
    data = prepare_report(run).browser
    return {t["name"]: {i["id"]: i for i in t["items"]} for t in data["tasks"]}


def _check(run: Path) -> str:
    """The run's report exists and lists every recorded item; its text."""
    html = (run / "report.html").read_text(encoding="utf-8")
    items = _items(run)
    for task in ("arith", "colors"):
        if (run / "tasks" / f"{task}_output.jsonl").exists():
            assert set(items[task]) == {r["item_id"] for r in _lines(run, task)}
            assert f'href="#items/{task}"' in html
    return html


@pytest.mark.two_workers
def test_single_process_and_xdist_runs_have_the_same_report_data(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    single = pytester.runpytest_subprocess(*_args(tiny_model_dir, "--llm-output=one"))
    assert single.ret == 0
    (one,) = _runs(pytester.path / "one")
    single.stdout.fnmatch_lines([f"run report: *{one.name}/report.html"])
    _check(one)
    xdist = pytester.runpytest_subprocess(*_args(tiny_model_dir, "--llm-output=two", "-n", "2"))
    assert xdist.ret == 0
    (two,) = _runs(pytester.path / "two")
    _check(two)
    assert _items(two) == _items(one)
    rows = {t.name: (t.n, t.score, t.status) for t in prepare_report(two).tasks}
    assert rows == {t.name: (t.n, t.score, t.status) for t in prepare_report(one).tasks}


def test_one_task_per_process_combined_into_one_report(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    for task in ("arith", "colors"):
        result = pytester.runpytest_subprocess(
            *_args(tiny_model_dir, "--llm-set=run.dir=combined", "-k", task)
        )
        assert result.ret == 0
    run = pytester.path / "combined"
    _check(run)
    assert [t.name for t in prepare_report(run).tasks] == ["arith", "colors"]
    assert all(t.status == "pass" for t in prepare_report(run).tasks)


def test_interrupted_and_resumed_runs_have_reports(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    pytester.makeconftest(KILL_CONFTEST)
    args = _args(tiny_model_dir, "--llm-output=out", "--llm-batch-size=2", "-k", "arith")
    monkeypatch.setenv("KILL_AFTER", "3")
    assert pytester.runpytest_subprocess(*args).ret == -9  # SIGKILL: no report written
    (interrupted,) = _runs(pytester.path / "out")
    assert not (interrupted / "report.html").exists()
    assert record_main(["report", str(interrupted)]) == 0  # rebuilt from its records alone
    html = _check(interrupted)
    assert "interrupted" in html and "no summary" in html
    (row,) = prepare_report(interrupted).tasks
    assert row.n == 3 and not row.from_summary

    monkeypatch.delenv("KILL_AFTER")
    assert pytester.runpytest_subprocess(*args).ret == 0
    resumed = next(r for r in _runs(pytester.path / "out") if r != interrupted)
    html = _check(resumed)
    (row,) = prepare_report(resumed).tasks
    assert row.reused == 3 and row.n == 5 and row.from_summary
    assert "3 reused" in html
    # the interrupted run, rebuilt again, now says which run reused its items
    assert record_main(["report", str(interrupted)]) == 0
    text = (interrupted / "report.html").read_text(encoding="utf-8")
    assert "were reused by the later run" in text and resumed.name in text


def test_a_report_that_cannot_be_built_is_a_warning_not_a_failure(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    pytester.makeconftest(BROKEN_REPORT_CONFTEST)
    result = pytester.runpytest_subprocess(*_args(tiny_model_dir, "--llm-output=out"))
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["*WARNING report.html was not written (RuntimeError: a bug in the report)*"]
    )
    (run,) = _runs(pytester.path / "out")
    assert not (run / "report.html").exists()
    assert (run / "metrics_summary.json").exists() and (run / "summary.md").exists()
    assert "report.html not written: RuntimeError" in (run / "eval.log").read_text()


def test_pytest_html_gets_the_summary_and_item_extras(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("pytest_html")
    write_project(pytester)
    for extra in ((), ("-n", "1")):
        html_file = pytester.path / f"pytest-html{len(extra)}.html"
        result = pytester.runpytest_subprocess(
            *_args(tiny_model_dir, "--llm-output=out", f"--html={html_file}", *extra)
        )
        assert result.ret == 0
        text = html_file.read_text(encoding="utf-8")
        assert "llmeval summary" in text and "run report with plots" in text.lower()
        # each item's prompt, output, extracted answer and target (escaped, inside the
        # report's JSON data)
        for marker in ("Question: what is two plus three?", "extracted answer", "target"):
            assert marker in text, marker
        assert "choices (log-likelihood)" in text
    plain = pytester.runpytest_subprocess(*_args(tiny_model_dir, "-p", "no:html", "-k", "colors"))
    assert plain.ret == 0  # the plugin without pytest-html
