"""math-verify as MATH judge: known equivalent and non-equivalent answers (hand-written)."""

from __future__ import annotations

import pytest

pytest.importorskip("math_verify")

from pytest_llmeval.scorer import math_verify_judge
from pytest_llmeval.scorer._judges import require_judge


@pytest.mark.parametrize(
    ("output", "gold"),
    [
        ("so the answer is \\boxed{\\frac{1}{2}}", "0.5"),
        ("\\boxed{\\dfrac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}"),
        ("\\boxed{(3, \\frac{\\pi}{2})}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("The final answer is $\\frac{14}{3}$.", "\\frac{14}{3}"),
        ("\\boxed{\\text{Evelyn}}", "\\text{Evelyn}"),
        ("\\boxed{x^2+2x+1}", "(x+1)^2"),
        ("\\boxed{[1, 3)}", "[1,3)"),
        ("\\boxed{90^\\circ}", "90"),
    ],
)
def test_equivalent(output: str, gold: str) -> None:
    verdict = math_verify_judge(output, [gold])
    assert verdict.correct, verdict


@pytest.mark.parametrize(
    ("output", "gold"),
    [
        ("\\boxed{\\frac{1}{3}}", "0.5"),
        ("\\boxed{(1, 3)}", "[1,3)"),
        ("\\boxed{x^2+1}", "(x+1)^2"),
        ("no answer here", "5"),
        ("", "5"),
    ],
)
def test_not_equivalent(output: str, gold: str) -> None:
    verdict = math_verify_judge(output, [gold])
    assert not verdict.correct, verdict


def test_the_boxed_answer_wins_over_earlier_numbers() -> None:
    verdict = math_verify_judge("We try 3, then 4; finally \\boxed{7}.", ["7"])
    assert verdict.correct and verdict.extracted == "7"


def test_any_of_several_references() -> None:
    assert math_verify_judge("\\boxed{2}", ["1", "2"]).correct


def test_installed_judge_passes_its_self_check() -> None:
    require_judge("math_verify", "spec.yaml", "generate.compare")
