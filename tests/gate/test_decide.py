"""A task's decision as a plain function (gate/_decide.py): each status from a tally of item
records, with no pytest run behind it."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_llmeval.gate import (
    STATUSES,
    SummaryLayoutError,
    TaskTally,
    decide_task,
    summary_document,
    summary_tasks,
)


def _tally(scores: list[float], floor: float | None = 0.5, **fields: Any) -> TaskTally:
    tally = TaskTally(name="t", metric="acc", floor=floor, total_items=100, **fields)
    tally.results = {f"t-{i:04d}": {"score": s} for i, s in enumerate(scores)}
    tally.selected = max(tally.selected, len(scores))
    return tally


@pytest.mark.parametrize(
    ("scores", "floor", "status", "fails"),
    [
        ([1.0] * 40, 0.5, "pass", False),  # the whole interval above the floor
        ([0.0] * 40, 0.5, "fail", True),  # the whole interval below it
        ([1.0] * 6 + [0.0] * 4, 0.5, "undecided", False),  # straddles it; 60% clears it
        ([1.0] * 4 + [0.0] * 6, 0.5, "undecided", True),  # straddles it; 40% is below it
        ([1.0] * 10, None, "no floor", False),
    ],
)
def test_a_scored_task_is_decided_by_its_floor_and_interval(
    scores: list[float], floor: float | None, status: str, fails: bool
) -> None:
    decision = decide_task(_tally(scores, floor), selected=len(scores), policy="point")
    assert (decision.status, decision.floor_fails, decision.failed) == (status, fails, fails)
    assert decision.n == len(scores) and decision.score == pytest.approx(sum(scores) / len(scores))


def test_the_policy_decides_whether_an_undecided_floor_fails() -> None:
    scores = [1.0] * 6 + [0.0] * 4
    strict = decide_task(_tally(scores), selected=10, policy="strict")
    lenient = decide_task(_tally([1.0] * 4 + [0.0] * 6), selected=10, policy="lenient")
    assert (strict.status, strict.failed) == ("undecided", True)
    assert (lenient.status, lenient.failed) == ("undecided", False)


def test_errors_skips_and_missing_items() -> None:
    errored = _tally([1.0] * 5, errors=["t-0001: boom"])
    assert decide_task(errored, selected=5, policy="point").status == "error"
    unstable = _tally([1.0] * 5, nondeterministic=["t-0002"])
    assert decide_task(unstable, selected=5, policy="point").status == "error"
    skipped = _tally([], selected=3, skipped=3)
    assert decide_task(skipped, selected=3, policy="point").status == "skipped"
    # 5 of 8 selected items scored: incomplete, and it fails the run
    short = decide_task(_tally([1.0] * 5), selected=8, policy="point")
    assert (short.status, short.selected, short.failed) == ("incomplete", 8, True)
    # items that do not fit the window are not missing
    fitted = _tally([1.0] * 40, not_fitting={"t-0099": {}, "t-0098": {}})
    assert decide_task(fitted, selected=42, policy="point").status == "pass"
    # interrupted under xdist: which items ran is not known
    unknown = decide_task(_tally([1.0] * 40), selected=0, policy="point", interrupted_unknown=True)
    assert unknown.status == "incomplete"


def test_a_floor_with_no_scored_item_is_an_error_that_says_why() -> None:
    tally = _tally([], selected=2, not_fitting={"t-0000": {"context_window": 2048}})
    decision = decide_task(tally, selected=2, policy="point")
    assert decision.status == "error"
    assert tally.errors == [
        "none of its 1 selected items fits the context window (2048 tokens), so no score "
        "holds its floor 0.5"
    ]
    again = decide_task(tally, selected=2, policy="point")  # said once
    assert again.status == "error" and len(tally.errors) == 1


def test_every_status_a_decision_gives_is_one_of_the_statuses() -> None:
    """One spelling of each gate value: whatever decides, the status is in STATUSES."""
    cases = [
        decide_task(_tally(s, f), selected=len(s) + extra, policy=p)
        for s in ([1.0] * 40, [0.0] * 40, [1.0, 0.0] * 20, [])
        for f in (None, 0.2, 0.5, 0.9)
        for extra in (0, 3)
        for p in ("point", "strict", "lenient")
    ]
    assert {d.status for d in cases} <= set(STATUSES)
    assert {"pass", "fail", "undecided", "incomplete", "no floor"} <= {d.status for d in cases}


def test_a_summary_is_read_in_the_layout_written_before_and_in_the_current_one() -> None:
    """metrics_summary.json: ``{"schema": 2, "tasks": ...}`` with ``status``; a run written
    before it (the bare task mapping, ``verdict``, ``FAIL``) reads as the same entries."""
    entries = {
        "gsm8k": {"n": 10, "score": 0.1, "status": "fail", "floor": 0.5},
        "mmlu": {"n": 0, "status": "skipped", "reason": "no data"},
    }
    written = summary_document(entries)
    assert written["schema"] == 2 and summary_tasks(written) == entries
    before = {
        "gsm8k": {"n": 10, "score": 0.1, "verdict": "FAIL", "floor": 0.5},
        "mmlu": {"n": 0, "verdict": "skipped", "reason": "no data"},
    }
    assert summary_tasks(before) == entries
    assert summary_tasks({}) == {}
    # a task named "tasks" in a layout-1 file is still a task
    assert summary_tasks({"tasks": {"n": 1, "verdict": "pass"}}) == {
        "tasks": {"n": 1, "status": "pass"}
    }
    with pytest.raises(SummaryLayoutError, match="schema 3: this version"):
        summary_tasks({"schema": 3, "tasks": {}})
    with pytest.raises(SummaryLayoutError, match="'tasks' is list"):
        summary_tasks({"schema": 2, "tasks": []})
