"""A task's decision as a plain function (gate/_decide.py): each status from a tally of item
records, with no pytest run behind it."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_llmeval.gate import TaskTally, decide_task


def _tally(scores: list[float], floor: float | None = 0.5, **fields: Any) -> TaskTally:
    tally = TaskTally(name="t", metric="acc", floor=floor, total_items=100, **fields)
    tally.results = {f"t-{i:04d}": {"score": s} for i, s in enumerate(scores)}
    tally.selected = max(tally.selected, len(scores))
    return tally


@pytest.mark.parametrize(
    ("scores", "floor", "status", "fails"),
    [
        ([1.0] * 40, 0.5, "pass", False),  # the whole interval above the floor
        ([0.0] * 40, 0.5, "FAIL", True),  # the whole interval below it
        ([1.0] * 6 + [0.0] * 4, 0.5, "undecided", False),  # straddles it; 60% clears it
        ([1.0] * 4 + [0.0] * 6, 0.5, "undecided", True),  # straddles it; 40% is below it
        ([1.0] * 10, None, "no floor", False),
    ],
)
def test_a_scored_task_is_decided_by_its_floor_and_interval(
    scores: list[float], floor: float | None, status: str, fails: bool
) -> None:
    verdict = decide_task(_tally(scores, floor), selected=len(scores), policy="point")
    assert (verdict.status, verdict.floor_fails, verdict.failed) == (status, fails, fails)
    assert verdict.n == len(scores) and verdict.score == pytest.approx(sum(scores) / len(scores))


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
    verdict = decide_task(tally, selected=2, policy="point")
    assert verdict.status == "error"
    assert tally.errors == [
        "none of its 1 selected items fits the context window (2048 tokens), so no score "
        "holds its floor 0.5"
    ]
    again = decide_task(tally, selected=2, policy="point")  # said once
    assert again.status == "error" and len(tally.errors) == 1
