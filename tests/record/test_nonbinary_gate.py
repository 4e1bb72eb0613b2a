"""Metrics with partial scores (F1, MC2): the baseline gate tests the per-item scores with
a paired sign-flip test, and JUnit/the ``wrong`` outcome do not take ``correct`` (a
threshold at 0.5 there) for a fact."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval.gate import sign_flip_test
from pytest_llmeval.record._compare import compare_runs, load_run
from pytest_llmeval.record._junit import compact_properties, wrong_answer
from pytest_llmeval.scorer import mcnemar_exact


def _record(task: str, i: int, score: float) -> dict[str, Any]:
    return {
        "task": task,
        "item_id": f"{task}-{i:04d}",
        "correct": score > 0.5,  # the runner's threshold for F1 and MC2
        "score": score,
        "prompt": f"Question {i}",
        "target": "an answer",
    }


def _write_run(path: Path, task: str, scores: list[float]) -> Path:
    (path / "tasks").mkdir(parents=True)
    (path / "eval_config.json").write_text(json.dumps({"tasks": {task: {"metric": "f1"}}}))
    lines = [json.dumps(_record(task, i, s)) for i, s in enumerate(scores)]
    (path / "tasks" / f"{task}_output.jsonl").write_text("\n".join(lines) + "\n")
    return path


def _compare(run: Path, baseline: Path, gate: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_llmeval.record",
            "compare",
            str(run),
            str(baseline),
            "--fail",
            gate,
        ],
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_drop_in_f1_that_flips_no_item_over_one_half_fails_the_sig_gate(
    tmp_path: Path,
) -> None:
    """Every item loses F1 (0.9 -> 0.6) but stays above 0.5: McNemar on ``correct`` saw no
    flipped item (p = 1) and passed a 30-point drop."""
    baseline = _write_run(tmp_path / "base", "squad", [0.9] * 40)
    run = _write_run(tmp_path / "run", "squad", [0.6] * 40)
    done = _compare(run, baseline, "sig")
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "GATE (sig): squad dropped 30.0 points (90.0 -> 60.0, p=1.0e-04 (paired sign-flip test "
        "on the scores), 40 items scored lower) is significant (p < 0.05)"
    ) in done.stdout
    assert "paired sign-flip test on the per-item scores: squad" in done.stdout


def test_small_f1_changes_across_one_half_are_not_a_significant_drop(tmp_path: Path) -> None:
    """Twelve items move from 0.51 to 0.49 and twelve from 0.30 to 0.31: ``correct`` flips
    on twelve items and back on none, which McNemar called significant (p = 0.0005); on
    the scores the change is half a point, as many items up as down."""
    baseline = _write_run(tmp_path / "base", "squad", [0.51] * 12 + [0.3] * 12)
    run = _write_run(tmp_path / "run", "squad", [0.49] * 12 + [0.31] * 12)
    assert mcnemar_exact(12, 0) < 0.001  # what the old gate computed from `correct`
    done = _compare(run, baseline, "sig")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "GATE" not in done.stdout
    (delta,) = compare_runs(load_run(run), load_run(baseline)).tasks
    assert delta.test == "sign-flip" and delta.dropped and not delta.significant
    assert delta.p_value > 0.05


def test_reports_name_the_sign_flip_test_and_lower_scores(tmp_path: Path) -> None:
    """summary.md and report.html said "exact McNemar test" for every task and "correct in
    the baseline, wrong now" for an F1 drop whose items all stayed correct: a partial-score
    task names its own test, and its flips are items that scored lower or higher."""
    from pytest_llmeval.record._report import browser_data, prepare_report, render_report
    from pytest_llmeval.record._summary import _comparison_section

    baseline = _write_run(tmp_path / "base", "squad", [0.9] * 20)
    run = _write_run(tmp_path / "run", "squad", [0.6] * 20)
    comparison = compare_runs(load_run(run), load_run(baseline))
    markdown = "\n".join(_comparison_section(comparison, 5))
    assert "p-value: paired sign-flip test on the per-item scores (squad)" in markdown
    assert "squad: 20 items scored lower than in the baseline" in markdown
    assert "McNemar" not in markdown and "wrong now" not in markdown
    model = prepare_report(run, baseline)
    assert model.comparison is not None
    (row,) = model.comparison.rows
    assert row.test == "sign-flip" and not row.binary
    page = render_report(model)
    assert "20 scored lower</a>" in page and "correct → wrong" not in page
    assert "20 scored lower than in the baseline:" in page
    (task,) = browser_data(load_run(run), model.comparison, model.tasks)["tasks"]
    assert task["flips"] and task["flips_scored"]
    # A binary task keeps McNemar's words, beside a partial one in the same comparison.
    mixed = _write_run(tmp_path / "mixed-base", "mmlu", [1.0] * 12 + [0.0] * 3)
    now = _write_run(tmp_path / "mixed-run", "mmlu", [0.0] * 10 + [1.0] * 5)
    binary = compare_runs(load_run(now), load_run(mixed))
    markdown = "\n".join(_comparison_section(binary, 5))
    assert "p-value: exact McNemar test (" in markdown
    assert "mmlu: 10 items correct in the baseline, wrong now" in markdown
    page = render_report(prepare_report(now, mixed))
    assert "10 correct → wrong</a>" in page and " <small>sign-flip</small>" not in page


def test_binary_scores_keep_the_exact_mcnemar_test(tmp_path: Path) -> None:
    baseline = _write_run(tmp_path / "base", "mmlu", [1.0] * 12 + [0.0] * 3)
    run = _write_run(tmp_path / "run", "mmlu", [0.0] * 10 + [1.0] * 5)
    (delta,) = compare_runs(load_run(run), load_run(baseline)).tasks
    assert delta.test == "mcnemar"
    assert len(delta.regressed) == 10 and len(delta.improved) == 3
    assert delta.p_value == mcnemar_exact(10, 3)


def test_sign_flip_test_by_hand_and_on_binary_differences() -> None:
    # d = (0.5, -0.2, 0.3): of the 8 sign patterns, |sum| >= 0.6 for 4 (1.0, 0.6, -0.6, -1.0).
    assert sign_flip_test([0.5, -0.2, 0.3, 0.0]) == 0.5
    assert sign_flip_test([0.0, 0.0]) == 1.0
    # On +-1 differences the exact enumeration is the exact McNemar test.
    for b, c in itertools.product(range(7), repeat=2):
        if b + c:
            differences = [-1.0] * b + [1.0] * c
            assert sign_flip_test(differences) == pytest.approx(mcnemar_exact(b, c), abs=1e-12)


@pytest.mark.parametrize(
    ("score", "correct", "shown", "wrong"),
    [
        (0.6, True, "partial", None),
        (0.4, False, "partial", None),
        (
            0.0,
            False,
            "false",
            "wrong: extracted 'x', target 'an answer' (the task's floor decides the run)",
        ),
        (1.0, True, "true", None),
    ],
)
def test_junit_says_partial_for_a_partial_score(
    score: float, correct: bool, shown: str, wrong: str | None
) -> None:
    result = {**_record("squad", 0, score), "correct": correct, "extracted": "x"}
    props = dict(compact_properties({"llmeval_task": "squad", "llmeval_result": result}))
    assert props["correct"] == shown
    assert props["score"] == repr(score)
    assert wrong_answer(result) == wrong
