"""A task's verdict as its own test case (``record._junit.gate_case``): its outcome under
each status and policy, and the message that says why."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_llmeval.record._junit import gate_case


def _row(status: str, failed: bool, policy: str = "point", **extra: Any) -> dict[str, Any]:
    return {
        "task": "colors",
        "metric": "acc",
        "n": 4,
        "score": 0.75,
        "ci_low": 0.3006,
        "ci_high": 0.9544,
        "floor": 0.5,
        "status": status,
        "policy": policy,
        "failed": failed,
        **extra,
    }


@pytest.mark.parametrize(
    ("status", "failed", "policy", "outcome", "start"),
    [
        ("pass", False, "point", "passed", ""),
        ("fail", True, "point", "failed", "gate failed: acc 0.7500 [95% CI 0.3006, 0.9544] is"),
        ("undecided", True, "strict", "failed", "gate failed: acc 0.7500 [95% CI"),
        ("undecided", False, "lenient", "skipped", "undecided: the floor 0.5000 lies inside"),
        ("undecided", False, "point", "skipped", "undecided: the floor 0.5000 lies inside"),
        ("error", True, "point", "failed", "gate failed: the task's status is error"),
        ("incomplete", True, "point", "failed", "gate failed: the task's status is incomplete"),
        ("skipped", False, "point", "skipped", "every item of the task was skipped"),
    ],
)
def test_a_gate_fails_exactly_when_its_verdict_fails_the_run(
    status: str, failed: bool, policy: str, outcome: str, start: str
) -> None:
    got, message, props = gate_case(_row(status, failed, policy))
    assert got == outcome
    assert message.startswith(start)
    assert dict(props)["status"] == status and dict(props)["policy"] == policy
    if status == "undecided":
        assert f"--llm-set gate.policy={policy}" in message


def test_a_task_without_a_floor_is_a_skipped_gate_that_says_how_to_add_one() -> None:
    outcome, message, props = gate_case(_row("no floor", False, floor=None))
    assert outcome == "skipped"
    assert message.startswith("no floor") and "--llm-set gate.floors_from=RUN_DIR" in message
    assert dict(props)["floor"] == ""
    assert [name for name, _ in props] == [
        "task",
        "metric",
        "n",
        "score",
        "ci_low",
        "ci_high",
        "floor",
        "status",
        "policy",
    ]
