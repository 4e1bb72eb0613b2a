"""Token-overlap F1 (SQuAD normalisation), as LongBench's qa_f1_score."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_llmeval.scorer import best_f1, normalize_answer, token_f1


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("The River Aster.", "river aster"),
        ("  an   apple, a pear!  ", "apple pear"),
        ("Theatre (the) then", "theatre then"),
        ("", ""),
    ],
)
def test_normalisation(text: str, normal: str) -> None:
    assert normalize_answer(text) == normal


@pytest.mark.parametrize(
    ("prediction", "reference", "f1"),
    [
        ("Ilse Varga", "Ilse Varga", 1.0),
        ("It was Ilse Varga.", "Ilse Varga", 2 * (2 / 4) * 1 / (2 / 4 + 1)),  # P 1/2, R 1
        ("Aster river", "the river Aster", 1.0),  # order does not matter, articles dropped
        ("green green", "green", 2 * 0.5 * 1 / 1.5),  # repeated tokens count once each
        ("blue", "green", 0.0),
        ("", "green", 0.0),
        ("the", "a", 1.0),  # both empty after normalisation
    ],
)
def test_known_values(prediction: str, reference: str, f1: float) -> None:
    assert token_f1(prediction, reference) == pytest.approx(f1)


def test_best_over_references_and_no_prediction() -> None:
    assert best_f1("Aster", ["Lindau", "the river Aster"]) == pytest.approx(2 * 1 * 0.5 / 1.5)
    assert best_f1(None, ["x"]) == 0.0
    assert best_f1("x", []) == 0.0


words = st.lists(st.sampled_from(["red", "blue", "The", "cat", "a", "7", "x-ray"]), max_size=8)


@given(words, words)
def test_f1_is_symmetric_and_bounded(a: list[str], b: list[str]) -> None:
    x, y = " ".join(a), " ".join(b)
    assert 0.0 <= token_f1(x, y) <= 1.0
    assert token_f1(x, y) == pytest.approx(token_f1(y, x))


@given(words)
def test_f1_of_a_text_with_itself_is_one(a: list[str]) -> None:
    assert token_f1(" ".join(a), " ".join(a)) == 1.0
