"""Live progress (``--llm-progress``): the backends' loops report, the plugin shows items
done / total per task on the terminal, in one process and under xdist, and never inside
pytest's own records (an item's captured output, JUnit XML).

Runs of the tiny project (``tests/tiny_projects.py``: ``arith``, 5 generative items;
``colors``, 4 multiple-choice items) in a subprocess; a log (pipe) gets plain lines, a
pseudo-terminal the in-place line. No assertion on time: only on what is shown."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_llmeval.compute import ProgressBoard, TaskProgress
from pytest_llmeval.plugin._progress import PREFIX

pytest.importorskip("torch")

PLAIN = re.compile(r"^\[llmeval progress\] (\w+): (\d+)/(\d+) items", re.M)


def _args(model: Path, *extra: str) -> list[str]:
    return [
        f"--llm-model={model}",
        "--llm-data-dir=.",
        "--llm-output=runs",
        "--llm-batch-size=2",
        "-p",
        "no:cacheprovider",
        *extra,
    ]


def _plain_lines(out: str) -> dict[str, list[tuple[int, int]]]:
    """Each task's plain progress lines as (done, total), in order."""
    found: dict[str, list[tuple[int, int]]] = {}
    for task, done, total in PLAIN.findall(out):
        found.setdefault(task, []).append((int(done), int(total)))
    return found


def _in_a_terminal(cwd: Path, args: list[str]) -> str:
    """pytest run with its standard output a pseudo-terminal (what a user's shell gives
    it); everything it wrote, escape sequences included."""
    master, slave = pty.openpty()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "160", "PY_COLORS": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *args],
        cwd=cwd,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal (EIO)
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=600)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


# ----------------------------------------------------------------------- a log (pipe)


def test_on_shows_each_task_with_its_total_outside_captured_output_and_junit(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:
    write_project(pytester)
    result = pytester.runpytest_subprocess(
        *_args(
            tiny_model_dir,
            "--llm-progress=on",
            "-rA",
            "--junitxml=junit.xml",
            "-o",
            "junit_logging=all",
        )
    )
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, out
    lines = _plain_lines(out)
    # From the first chunk (0 done) to the end, with the task's own total.
    assert lines["arith"][0] == (0, 5) and lines["arith"][-1] == (5, 5), out
    assert lines["colors"][0] == (0, 4) and lines["colors"][-1] == (4, 4), out
    assert all(total == 5 for _, total in lines["arith"])
    dones = [done for done, _ in lines["arith"]]
    assert dones == sorted(dones)
    assert re.search(r"arith: 5/5 items \(100%\), .*done in", out)
    # Written with pytest's capture suspended: not an item's captured output (-rA shows
    # those of passed items), not in JUnit XML's system-out (junit_logging=all).
    passes = out.split("= PASSES =", 1)
    assert len(passes) == 2, out
    assert PREFIX not in passes[1]
    assert PREFIX not in (pytester.path / "junit.xml").read_text(encoding="utf-8")
    # pytest's own lines are whole: each file's line of outcomes still ends the run's
    # progress with its percentage, and the summary is there.
    assert re.search(r"^arith\.yaml w+ +\[ *\d+%\]$", out, re.M), out
    assert re.search(r"^colors\.yaml [.w]+ +\[100%\]$", out, re.M), out
    assert "llmeval summary" in out


def test_on_under_xdist_the_controller_shows_the_workers_progress(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:
    pytest.importorskip("xdist")
    write_project(pytester)
    result = pytester.runpytest_subprocess(
        *_args(tiny_model_dir, "--llm-progress=on", "-n", "1", "--junitxml=junit.xml")
    )
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, out
    lines = _plain_lines(out)
    # The controller reads the workers' files: the end of each task arrives whatever
    # lines it polled in between.
    assert lines["arith"][-1] == (5, 5), out
    assert lines["colors"][-1] == (4, 4), out
    assert {total for _, total in lines["arith"]} == {5}
    assert PREFIX not in (pytester.path / "junit.xml").read_text(encoding="utf-8")
    # The folder of progress files is gone with the run.
    assert "llmeval summary" in out


def test_off_and_auto_in_a_log_show_none_for_short_tasks(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:
    """``off`` never; ``auto`` in a log only once a task has run 30 s (these take less)."""
    write_project(pytester)
    for extra in (["--llm-progress=off"], ["-o", "llm_progress=off", "-v"]):
        result = pytester.runpytest_subprocess(*_args(tiny_model_dir, *extra))
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        assert PREFIX not in result.stdout.str()


def test_a_bad_value_is_a_usage_error(pytester: pytest.Pytester, write_project) -> None:
    write_project(pytester)
    result = pytester.runpytest_subprocess("--llm-model=smollm2-135m", "--llm-progress=maybe")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--llm-progress (ini llm_progress): expected one of auto|on|off*"]
    )


# ----------------------------------------------------------------------- a terminal


def test_auto_in_a_terminal_draws_in_place_and_gives_the_line_back(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:
    write_project(pytester)
    out = _in_a_terminal(pytester.path, _args(tiny_model_dir))
    assert "llmeval summary" in out, out
    # The status line is drawn over the current line and erased to its end ...
    assert re.search(r"\r\[llmeval progress\] arith: \d/5 items[^\r\n]*\x1b\[K", out), out
    assert re.search(r"\r\[llmeval progress\] colors: \d/4 items[^\r\n]*\x1b\[K", out), out
    # ... and before pytest writes again, it goes and pytest's text comes back: never a
    # line of its own in the output.
    assert not re.search(r"^\[llmeval progress\]", out, re.M)
    assert "\r\x1b[Karith.yaml " in out
    # What the screen shows at the end: pytest's lines as without progress.
    screen = _screen(out)
    assert re.search(r"^arith\.yaml w+ +\[ *\d+%\]$", screen, re.M), screen
    assert PREFIX not in screen


@pytest.mark.parametrize("extra", [["-q"], ["--llm-progress=off"]])
def test_quiet_and_off_in_a_terminal_show_none(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project, extra: list[str]
) -> None:
    write_project(pytester)
    out = _in_a_terminal(pytester.path, _args(tiny_model_dir, *extra))
    assert "wrong" in out, out  # the run ran (its summary line)
    assert PREFIX not in out


def _screen(raw: str) -> str:
    """The text a terminal shows for ``raw`` (carriage returns and erase-to-end-of-line
    applied, line by line)."""
    lines = []
    for line in raw.replace("\r\n", "\n").split("\n"):
        shown = ""
        for part in line.split("\r"):
            # each part writes from the line's start; \x1b[K erases from the cursor on
            cursor = 0
            for i, piece in enumerate(part.split("\x1b[K")):
                if i:
                    shown = shown[:cursor]
                shown = shown[:cursor] + piece + shown[cursor + len(piece) :]
                cursor += len(piece)
        lines.append(shown)
    return "\n".join(lines)


# ----------------------------------------------------------------------- the loops


def test_the_hf_backend_reports_each_loglikelihood_batch_and_generated_row(
    tiny_model_dir: Path,
) -> None:
    from pytest_llmeval.model import (
        GenerateRequest,
        LoglikelihoodRequest,
        ModelSettings,
        load_backend,
        progress_to,
    )

    backend = load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=2, device="cpu"))
    seen: list[tuple[int, int]] = []
    requests = [LoglikelihoodRequest(f"question {i}:", f" answer {i}") for i in range(5)]
    with progress_to(lambda done, total: seen.append((done, total))):
        backend.loglikelihood(requests)
    assert seen == [(2, 5), (4, 5), (5, 5)]  # 5 rows in batches of 2
    seen.clear()
    with progress_to(lambda done, total: seen.append((done, total))):
        backend.generate([GenerateRequest(f"count {i}:", max_new_tokens=3) for i in range(3)])
    assert seen == [(1, 3), (2, 3), (3, 3)]  # one report per finished row
    seen.clear()
    backend.loglikelihood(requests)  # nobody listening: nothing reported anywhere
    assert seen == []


def test_a_chunk_counts_shares_of_its_items_and_a_task_ends_with_its_results() -> None:
    shown: list[tuple[list[str], bool]] = []
    board = ProgressBoard(
        lambda tasks, important: shown.append(([t.line() for t in tasks], important))
    )
    board.begin("mmlu", 10)
    assert shown[-1] == (["mmlu: 0/10 items (0%)"], True)
    from pytest_llmeval.model import report_progress

    with board.chunk("mmlu", 4):  # 4 items; the backend reports its rows (16)
        report_progress(8, 16)
        assert board.tasks["mmlu"].whole == 2
        report_progress(16, 16)  # the rows are done, the results not yet
        assert not board.tasks["mmlu"].finished
    board.add("mmlu", 4)
    assert board.tasks["mmlu"].whole == 4
    board.add("mmlu", 6, reused=True)
    assert board.tasks["mmlu"].finished and shown[-1][1] is True
    assert shown[-1][0][0].startswith("mmlu: 10/10 items (100%)")


def test_the_line_says_rate_and_time_left() -> None:
    progress = TaskProgress("gsm8k", total=1000, done=250, elapsed=50.0)
    assert progress.line() == "gsm8k: 250/1000 items (25%), 5.0 items/s, 2m30s left"
    slow = TaskProgress("humaneval", total=10, done=2, elapsed=20.0)
    assert slow.line() == "humaneval: 2/10 items (20%), 10.0 s/item, 1m20s left"
