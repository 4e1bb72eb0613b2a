"""Tasks that ran no item are listed with their state and reason (issue 30, item 3): a
task whose data is not installed, or with no model to run on, is skipped; one that -k/-m
leave out is deselected. Checked in the terminal summary, summary.md,
metrics_summary.json and report.html of real pytester runs of the tiny project."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
import tiny_projects

from pytest_llmeval.record import read_summary


def _args(*extra: str) -> list[str]:
    return ["--llm-data-dir=.", "-p", "no:cacheprovider", "--llm-output=out", *extra]


def _run_dir(pytester: pytest.Pytester) -> Path:
    (run,) = sorted(p for p in (pytester.path / "out").iterdir() if p.is_dir())
    return run


def test_a_task_without_data_is_listed_everywhere_with_its_reason(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    tiny_projects.write_project(pytester)
    tiny_projects.write_absent_task(pytester)
    result = pytester.runpytest(
        *_args(f"--llm-model={tiny_model_dir}", "--llm-set=prompt.chat_template=off")
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*llmeval summary*",
            "absent * 0/0 * skipped *",
            "SKIPPED absent: *benchmark data not installed*no 'absent_bench' folder*; "
            "to run it: install its data: --llm-data-dir=DIR (or LLMEVAL_DATA_DIR)*",
        ]
    )
    run = _run_dir(pytester)

    metrics = read_summary(run / "metrics_summary.json")
    assert metrics["absent"]["status"] == "skipped"
    assert metrics["absent"]["n"] == 0
    assert "no 'absent_bench' folder" in metrics["absent"]["reason"]
    assert metrics["absent"]["fix"].startswith("install its data: --llm-data-dir=DIR")
    assert metrics["arith"]["status"] != "skipped"  # the tasks that ran keep their entries

    markdown = (run / "summary.md").read_text()
    assert "**Tasks not run**:" in markdown
    (line,) = [x for x in markdown.splitlines() if x.startswith("- `absent` skipped:")]
    assert "no 'absent_bench' folder" in line and "to run it: install its data" in line
    assert "| absent |" not in markdown  # not a row of the verdict table: it has no score

    page = (run / "report.html").read_text()
    section = re.search(r'<section id="not-run">(.*?)</section>', page, re.S)
    assert section is not None
    cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", section.group(1), re.S)]
    assert cells[0] == "absent" and "no 'absent_bench' folder" in cells[1]
    assert cells[2].startswith("install its data")
    # A reference run with a skipped task still gives floors for the tasks that ran.
    floors = pytester.runpytest(
        *_args(f"--llm-model={tiny_model_dir}", f"--llm-set=gate.floors_from={run}", "-k", "colors")
    )
    assert floors.ret == pytest.ExitCode.OK, floors.stdout.str()
    floors.stdout.fnmatch_lines(["  colors: *floor rule lcb95 from run*"])


def test_deselected_tasks_are_named_once(pytester: pytest.Pytester, tiny_model_dir: Path) -> None:
    tiny_projects.write_project(pytester)
    tiny_projects.write_absent_task(pytester)
    result = pytester.runpytest(
        *_args(
            f"--llm-model={tiny_model_dir}",
            "--llm-set=prompt.chat_template=off",
            "-k",
            "arith or absent",
        )
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["SKIPPED absent: *", "deselected by -k/-m (1): colors"])
    markdown = (_run_dir(pytester) / "summary.md").read_text()
    assert "- deselected by `-k`/`-m` (1): colors" in markdown
    # A single item chosen with -k: its task is selected, the other is deselected.
    one = pytester.runpytest(*_args(f"--llm-model={tiny_model_dir}", "-k", "arith-0001"))
    one.stdout.fnmatch_lines(["deselected by -k/-m (2): absent, colors"])


def test_without_a_model_each_task_says_what_to_pass(pytester: pytest.Pytester) -> None:
    tiny_projects.write_project(pytester)
    tiny_projects.write_absent_task(pytester)
    result = pytester.runpytest(*_args())
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["SKIPPED absent: *benchmark data not installed*"])
    for task in ("arith", "colors"):
        result.stdout.fnmatch_lines(
            [
                f"SKIPPED {task}: no model to evaluate: pass --llm-model=PATH*; to run it: pass "
                "--llm-model=PATH (or set llm_model in the ini file)"
            ]
        )
    assert not (pytester.path / "out").exists()  # nothing ran: no run record


@pytest.mark.browser
def test_the_tasks_not_run_fit_the_page_at_800_px(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    """The reason holds a long data path: at 800 px it wraps inside the section."""
    from tools.chromium import Chromium, find_chromium

    executable = find_chromium()
    if executable is None:
        pytest.skip("no Chromium on this machine: apt-get install chromium")
    tiny_projects.write_project(pytester)
    tiny_projects.write_absent_task(pytester)
    result = pytester.runpytest(*_args(f"--llm-model={tiny_model_dir}", "-k", "colors or absent"))
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    page_file = _run_dir(pytester) / "report.html"
    with Chromium.launch(executable) as browser:
        for width in (800, 1400):
            page = browser.new_page(width, 900)
            page.goto(page_file.resolve().as_uri())
            page.wait_for("document.documentElement.getAttribute('data-ready')")
            layout = page.evaluate(
                """(() => {
                  const vw = document.documentElement.clientWidth;
                  const s = document.querySelector('#not-run');
                  return {scroll: document.documentElement.scrollWidth - vw,
                          right: s.getBoundingClientRect().right - vw,
                          text: s.innerText};
                })()"""
            )
            assert layout["scroll"] <= 0 and layout["right"] <= 0.5, (width, layout)
            assert "absent" in layout["text"] and "to run it" in layout["text"]


def test_deselected_tasks_whose_probes_ran_have_their_own_line() -> None:
    """A task whose scored items -k/-m left out but whose contamination probes ran is not
    one that never ran: it gets its own line, in the terminal (which uses the same lines)
    and in summary.md."""
    from pytest_llmeval.record import deselected_lines, markdown_summary

    assert deselected_lines(["arc", "mmlu"], ["mmlu"]) == [
        "deselected by -k/-m (1): arc",
        "contamination probes only, their scored items deselected by -k/-m (1): mmlu",
    ]
    assert deselected_lines(["arc"], ["mmlu"]) == ["deselected by -k/-m (1): arc"]
    assert deselected_lines(["mmlu"], ["mmlu", "mmlu"], code="`") == [
        "contamination probes only, their scored items deselected by `-k`/`-m` (1): mmlu"
    ]
    assert deselected_lines([], ["mmlu"]) == []
    not_run = [{"task": t, "state": "deselected"} for t in ("arc", "mmlu")]
    probe = {"task": "mmlu", "probe": "circular", "outcome": "no verdict", "text": "..."}
    markdown = markdown_summary("run", [], None, None, not_run=not_run, probes=[probe])
    assert "- deselected by `-k`/`-m` (1): arc" in markdown
    assert "- contamination probes only, their scored items deselected by `-k`/`-m` (1): mmlu" in (
        markdown
    )
