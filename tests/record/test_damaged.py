"""A run whose records were damaged after it ended (an output file truncated, ``tasks/``
deleted, ``metrics_summary.json`` deleted) is never reported as finished: the report says
*damaged* with what is missing, ``record report`` prints it and exits 1, and ``record
compare``, ``diff`` and ``floors`` refuse it (exit 2). The run is a real one: the plugin on
two small tasks against the scripted OpenAI-compatible server (no torch)."""

from __future__ import annotations

import json
import shutil
from html import unescape
from pathlib import Path

import pytest
from openai_fake import FakeServer
from tiny_projects import COLORS

from pytest_llmeval.record import prepare_report, read_summary
from pytest_llmeval.record.__main__ import main as record_main
from pytest_llmeval.record._rundir import run_damage

ARITH = [{"q": f"what is {i} plus one?", "a": str(i + 1)} for i in range(6)]
GEN_SPEC = """\
task: arith
dataset: {path: arith.jsonl}
prompt:
  template: "Question: {{ q }}\\nAnswer:"
  target: "{{ a }}"
mode: generate
generate:
  target: "{{ a }}"
  max_new_tokens: 4
  stop: ["\\n"]
  extract: [last_number]
  compare: numeric
"""
MC_SPEC = """\
task: colors
dataset: {path: colors.jsonl}
prompt:
  template: "{{ question }}\\nAnswer:"
mode: multiple_choice
multiple_choice:
  choices: "{{ options }}"
  gold: "{{ label }}"
"""


def _real_run(pytester: pytest.Pytester, server: FakeServer) -> Path:
    """One run of the plugin on the two tasks; its run directory."""
    for name, rows in (("arith", ARITH), ("colors", COLORS)):
        (pytester.path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (pytester.path / "arith.yaml").write_text(GEN_SPEC)
    (pytester.path / "colors.yaml").write_text(MC_SPEC)
    result = pytester.runpytest(
        "--llm-backend=openai",
        f"--llm-set=openai.base_url={server.url}",
        "--llm-model=toy",
        "--llm-data-dir=.",
        "--llm-output=runs",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == 0, result.stdout.str()
    (run,) = (p for p in (pytester.path / "runs").iterdir() if p.is_dir())
    return run


def _truncate_half(run: Path) -> str:
    path = run / "tasks" / "arith_output.jsonl"
    data = path.read_bytes()
    lines = data.count(b"\n")
    path.write_bytes(data[: len(data) // 2])
    found = path.read_bytes().count(b"\n")
    # the parts of the message, around the digests: "*" stands for them
    return f"arith: tasks/arith_output.jsonl: expected {lines} lines (sha256 *found {found} lines"


def _delete_tasks(run: Path) -> str:
    shutil.rmtree(run / "tasks")
    return "arith: tasks/arith_output.jsonl: expected 6 lines"


def _delete_summary(run: Path) -> str:
    (run / "metrics_summary.json").unlink()
    return "metrics_summary.json: expected the run's summary (processes/"


DAMAGES = {
    "truncated": _truncate_half,
    "tasks deleted": _delete_tasks,
    "no summary": _delete_summary,
}


def test_an_intact_run_records_its_output_files_and_reads_as_finished(
    pytester: pytest.Pytester, fake_openai: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _real_run(pytester, fake_openai)
    summary = read_summary(run / "metrics_summary.json")
    for task, n in (("arith", 6), ("colors", 4)):
        records = summary[task]["records"]
        data = (run / "tasks" / f"{task}_output.jsonl").read_bytes()
        assert records["file"] == f"tasks/{task}_output.jsonl"
        assert records["lines"] == n == data.count(b"\n")
        assert len(records["sha256"]) == 64
    assert run_damage(run) == []
    assert record_main(["report", str(run)]) == 0
    assert "report written" in capsys.readouterr().out
    html = (run / "report.html").read_text()
    assert '<span class="badge ok">finished</span>' in html and ">damaged<" not in html
    assert record_main(["compare", str(run), str(run)]) == 0
    assert record_main(["diff", str(run), str(run)]) == 0


@pytest.mark.parametrize("how", sorted(DAMAGES))
def test_a_damaged_run_is_reported_damaged_and_refused(
    pytester: pytest.Pytester,
    fake_openai: FakeServer,
    capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    run = _real_run(pytester, fake_openai)
    intact = run.with_name(run.name + "-intact")
    shutil.copytree(run, intact)
    what = DAMAGES[how](run)
    capsys.readouterr()

    # the report is written, says damaged with what is missing; the command exits 1
    assert record_main(["report", str(run)]) == 1
    out, err = capsys.readouterr()
    assert f"report written: {run / 'report.html'}" in out
    assert err.startswith(f"error: {run}: damaged run record (")
    for part in what.split("*"):
        assert part in err
    assert "restore the run directory from an intact copy (e.g. the CI artifact) or rerun" in err
    assert f"the report says damaged: {run / 'report.html'}" in err
    html = (run / "report.html").read_text()
    header = unescape(html.split("</header>")[0])
    assert ">damaged</span>" in header and ">finished</span>" not in header
    assert what.split("*")[0] in header
    model = prepare_report(run)
    assert model.state == "damaged" and not model.finished
    if how == "no summary":  # no score from the lines that are left is the run's score
        assert {row.status for row in model.tasks} == {"damaged"}
        assert all(row.score != row.score for row in model.tasks)  # NaN: shown as -
        assert "No task score is shown" in model.notes[0]

    # used as a baseline, as a run to compare, in a diff, or as a floors source: refused
    for argv, role in (
        (["compare", str(intact), str(run)], "a baseline"),
        (["compare", str(run), str(intact)], "the run to compare"),
        (["diff", str(intact), str(run)], "run B of a diff"),
        (["floors", str(run)], "a floors source"),
        (["report", str(intact), "--baseline", str(run)], "a baseline"),
    ):
        assert record_main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"error: {run}: damaged run record (")
        assert what.split("*")[0] in err
        assert err.rstrip().endswith(f"it is not used as {role}")
    assert record_main(["compare", str(intact), str(intact)]) == 0


def test_the_plugin_refuses_a_damaged_baseline_or_floors_source(
    pytester: pytest.Pytester, fake_openai: FakeServer
) -> None:
    run = _real_run(pytester, fake_openai)
    what = _truncate_half(run).split("*")[0]
    for option, named, role in (
        ("--llm-baseline", "--llm-baseline (ini llm_baseline)", "a baseline"),
        ("--llm-set=gate.floors_from", "gate.floors_from", "a floors source"),
    ):
        result = pytester.runpytest(
            "--llm-backend=openai",
            f"--llm-set=openai.base_url={fake_openai.url}",
            "--llm-model=toy",
            "--llm-data-dir=.",
            "--llm-output=later",
            f"{option}={run}",
            "-p",
            "no:cacheprovider",
        )
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        err = result.stderr.str()
        assert f"{named}: {run}: damaged run record ({what}" in err
        assert f"or rerun it; it is not used as {role}" in err
    assert not (pytester.path / "later").exists()


def test_runs_under_xdist_and_tasks_combined_with_run_dir_are_intact(
    pytester: pytest.Pytester, fake_openai: FakeServer
) -> None:
    # What the summary records is what the files hold when the last writer ends: under -n 1
    # (the controller writes every line) and with one process per task (--llm-set run.dir)
    run = _real_run(pytester, fake_openai)  # writes the project too
    common = (
        "--llm-backend=openai",
        f"--llm-set=openai.base_url={fake_openai.url}",
        "--llm-model=toy",
        "--llm-data-dir=.",
        "-p",
        "no:cacheprovider",
    )
    assert pytester.runpytest(*common, "--llm-output=xdist", "-n", "1").ret == 0
    (xdist,) = (p for p in (pytester.path / "xdist").iterdir() if p.is_dir())
    combined = pytester.path / "combined"
    for task in ("arith", "colors"):
        assert pytester.runpytest(*common, f"--llm-set=run.dir={combined}", "-k", task).ret == 0
    for path in (run, xdist, combined):
        summary = read_summary(path / "metrics_summary.json")
        assert sorted(summary) == ["arith", "colors"]
        assert run_damage(path) == [], path
        assert prepare_report(path).state == "finished"
