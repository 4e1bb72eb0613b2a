"""Failure classes of failed items, and the ordering of the sampled ones."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_llmeval.eval import analyse_failures, classify


def rec(item_id: str = "t-0", **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "item_id": item_id,
        "correct": False,
        "target": "18",
        "finish_reason": "stop",
    }
    return {**base, **fields}


@pytest.mark.parametrize(
    ("record", "kind"),
    [
        (rec(output="I think so.", extracted=None), "extraction_failure"),
        (rec(output="The answer is eighteen.", extracted="eighteen"), "format_failure"),
        (rec(output="The answer is 16.", extracted="16"), "wrong_answer"),
        (rec(output="16 + 2 = ", extracted="2", finish_reason="length"), "truncated"),
        (rec(choices=["A", "B"], extracted="A"), "wrong_answer"),
        (rec(output="x", extracted="f()", details={"status": "timeout"}), "execution_timeout"),
        (
            rec(
                output="x", extracted="f()", details={"status": "failed", "reason": "NameError: y"}
            ),
            "execution_error",
        ),
        (
            rec(
                output="x",
                extracted="f()",
                details={"status": "failed", "reason": "AssertionError"},
            ),
            "wrong_answer",
        ),
        (rec(output="text", extractor="ifeval"), "wrong_answer"),
        (
            rec(output="```\n\nProse only.", extracted="", details={"status": "failed"}),
            "extraction_failure",
        ),
    ],
)
def test_classify(record: dict[str, Any], kind: str) -> None:
    assert classify(record, compare="numeric") == kind


def test_answer_in_output_is_listed_first_and_sampling_is_seeded() -> None:
    records = [rec(f"t-{i}", output=f"maybe {i}", extracted=str(i)) for i in range(20)]
    records.append(rec("t-99", output="So 18 it is, final.", extracted=None))
    records.append(rec("t-ok", correct=True, output="18", extracted="18"))
    report = analyse_failures("t", records, n=21, compare="numeric")
    assert report.n_items == 22
    assert report.n_failed == 21
    assert report.distribution == {"extraction_failure": 1, "wrong_answer": 20}
    assert report.samples[0].item_id == "t-99"
    assert report.samples[0].answer_in_output
    assert report.answer_in_output == 2  # t-99, and t-18 whose output "maybe 18" holds it
    again = analyse_failures("t", records, n=5, compare="numeric")
    assert [s.item_id for s in again.samples] == [
        s.item_id for s in analyse_failures("t", records, n=5, compare="numeric").samples
    ]
    assert analyse_failures("t", records, n=0).samples == []
