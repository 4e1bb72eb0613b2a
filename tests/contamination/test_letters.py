"""The letter-balanced nulls of option shuffling and CircularEval (contamination/_letters.py).

A model that always answers one letter reads nothing, so it cannot have seen an item; on a
benchmark whose golds are not uniform over the letters, the uniform nulls fired on it. The
tests build such benchmarks, check that the balanced nulls stay silent on every letter
habit, that the uniform ones did fire (so the tests can fail), and that a model that
remembers the published answer letters is still caught."""

from __future__ import annotations

import random
from collections.abc import Set
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmeval.contamination import (
    CircularItem,
    CircularReport,
    MovedAnswer,
    PairedItem,
    PairedReport,
    letter_balanced,
    letter_shares,
    moved_answers,
    option_orders,
    option_shuffle_verdict,
    rotation_chances,
)
from pytest_llmeval.contamination._circular import poisson_binomial_upper_tail
from pytest_llmeval.scorer import mcnemar_one_sided

SEED = 1234


def _golds(shares: list[float], n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return rng.choices(range(len(shares)), weights=shares, k=n)


def _answers(
    golds: list[int], answer: object, remembered: set[int] = frozenset()
) -> list[MovedAnswer]:  # type: ignore[assignment]
    """Option shuffling's outcomes for a model that answers position ``answer(position of
    the gold)``, except on ``remembered`` items, where it answers the published
    gold letter whatever the order."""
    out = []
    for i, gold in enumerate(golds):
        item_id = f"q-{i:05d}"
        order = option_orders(4, gold, 1, seed=SEED, item_id=item_id)[0]
        moved = list(order).index(gold)
        if i in remembered:
            pub, mov = True, moved == gold
        else:
            pub, mov = answer(gold) == gold, answer(moved) == moved
        out.append(MovedAnswer(item_id, 4, gold, moved, pub, mov))
    return out


def _circular(golds: list[int], letter: int, remembered: Set[int] = frozenset()) -> CircularReport:
    """CircularEval of a model that always answers ``letter`` (rotation r puts the gold at
    (gold - r) mod 4), except on ``remembered`` items: right only in the published order."""
    items = []
    for i, gold in enumerate(golds):
        if i in remembered:
            correct = (True, False, False, False)
        else:
            correct = tuple((gold - r) % 4 == letter for r in range(4))
        items.append(CircularItem(f"q-{i:05d}", 4, correct, (None,) * 4, gold))
    return CircularReport("quiz", tuple(items))


def test_letter_shares_are_per_option_count_and_name_a_bad_gold() -> None:
    shares = letter_shares([(4, 0), (4, 0), (4, 3), (4, 1), (3, 2)])
    assert shares == {
        3: {2: Fraction(1)},
        4: {0: Fraction(1, 2), 1: Fraction(1, 4), 3: Fraction(1, 4)},
    }
    with pytest.raises(ValueError, match="gold index 4 out of range for 4 options"):
        letter_shares([(4, 4)])


def test_uniform_golds_give_the_uniform_tests() -> None:
    """Equal shares keep every item and give every rotation 1/n: the tests as they were."""
    golds = [i % 4 for i in range(400)]
    keep = letter_balanced([(f"q-{i}", 4, g, (g + 1) % 4) for i, g in enumerate(golds)], seed=1)
    assert all(keep)
    chances = rotation_chances([(4, g, 1) for g in golds], [(4, g) for g in golds])
    assert set(chances) == {Fraction(1, 4)}


@settings(max_examples=60, deadline=None)
@given(
    shares=st.lists(st.integers(0, 20), min_size=4, max_size=4).filter(lambda s: sum(s) > 0),
    n=st.integers(1, 3000),
    letter=st.integers(0, 3),
    seed=st.integers(0, 1000),
)
def test_a_letter_habit_is_right_as_published_exactly_as_often_as_chance_says(
    shares: list[int], n: int, letter: int, seed: int
) -> None:
    """For a model that always answers one letter, CircularEval's expected count of
    published rotations is its observed count, for any sample and any skew: the test
    cannot fire on it (against 1/n it did: 1,500 of 3,000 at chance 750)."""
    golds = _golds([float(s) for s in shares], n, seed)
    report = _circular(golds, letter)
    assert report.letter_balanced
    assert report.expected_published == pytest.approx(report.right_once_published)
    assert report.p_value > 0.4


@pytest.mark.parametrize("letter", range(4))
@pytest.mark.parametrize("shares", [[1, 1, 1, 2], [3, 1, 1, 1], [23.0, 24.6, 25.6, 26.8]])
def test_option_shuffling_stays_silent_on_a_letter_habit_that_the_uniform_null_flags(
    shares: list[float], letter: int
) -> None:
    """5,000 items, skewed golds: the model that always answers one letter passes in every
    one of 10 samples; the uniform McNemar over all items fires on the letter the golds
    favour (at MMLU's own 26.8% D it did on half of all 5,000-item draws)."""
    uniform_fired = 0
    for seed in range(10):
        answers = _answers(_golds(shares, 5000, seed), lambda position: letter)
        verdict = option_shuffle_verdict("quiz", answers, 0.01, seed=SEED)
        assert not verdict.fired, verdict.summary
        b = sum(a.published_correct and not a.moved_correct for a in answers)
        c = sum(a.moved_correct and not a.published_correct for a in answers)
        uniform_fired += mcnemar_one_sided(b, c) < 0.01
    if shares[letter] == max(shares) and shares != [23.0, 24.6, 25.6, 26.8]:
        assert uniform_fired == 10


def test_a_model_that_remembers_answer_letters_is_still_caught() -> None:
    """A tenth of 2,000 items remembered by their published answer letter, an A habit on
    the rest, MMLU's gold shares: both probes fire."""
    golds = _golds([23.0, 24.6, 25.6, 26.8], 2000, 7)
    remembered = set(range(0, 2000, 10))
    shuffled = option_shuffle_verdict(
        "quiz", _answers(golds, lambda position: 0, remembered), 0.01, seed=SEED
    )
    assert shuffled.fired, shuffled.summary
    circular = _circular(golds, 0, remembered)
    assert circular.p_value < 1e-6
    # with nothing remembered neither does
    assert not option_shuffle_verdict("quiz", _answers(golds, lambda p: 0), 0.01, seed=SEED).fired
    assert _circular(golds, 0).p_value > 0.4


def test_kept_items_have_exchangeable_gold_letters() -> None:
    """Over many items the kept (published, moved) letter pairs come as often one way as
    the other: the count of (a, b) is within sampling error of the count of (b, a)."""
    golds = _golds([1, 1, 1, 3], 40000, 3)
    items = []
    for i, gold in enumerate(golds):
        order = option_orders(4, gold, 1, seed=SEED, item_id=f"q-{i}")[0]
        items.append((f"q-{i}", 4, gold, list(order).index(gold)))
    kept = [it for it, k in zip(items, letter_balanced(items, seed=SEED), strict=True) if k]
    pairs: dict[tuple[int, int], int] = {}
    for _, _, g, m in kept:
        pairs[(g, m)] = pairs.get((g, m), 0) + 1
    for (a, b), count in pairs.items():
        mirror = pairs.get((b, a), 0)
        assert abs(count - mirror) < 4.5 * (count + mirror) ** 0.5, ((a, b), count, mirror)
    # D holds half the golds: a moved gold at D is always kept, one at A..C a third of the
    # time, so 1/2 * 1/3 (gold D) + 1/2 * (1/3 + 2/3 * 1/3) (gold A..C) = 4/9 are kept.
    assert len(kept) / len(items) == pytest.approx(4 / 9, abs=0.01)


def test_moved_answers_read_the_probe_report() -> None:
    report = PairedReport(
        "option_shuffle",
        "quiz",
        SEED,
        (
            PairedItem("a", True, (False,), {"gold": 2, "orders": [[2, 0, 1, 3]]}),
            PairedItem("b", False, (True,), {"gold": 0, "orders": [[1, 2, 3, 0]]}),
        ),
    )
    assert moved_answers(report) == [
        MovedAnswer("a", 4, 2, 0, True, False),
        MovedAnswer("b", 4, 0, 3, False, True),
    ]
    verdict = option_shuffle_verdict("quiz", moved_answers(report), 0.01, seed=SEED)
    assert verdict.detail["kept"] == verdict.n <= 2
    assert "letter shares" in verdict.null


def test_the_poisson_binomial_tail_matches_a_direct_sum_with_letter_chances() -> None:
    chances = [Fraction(1, 3), Fraction(1, 6), Fraction(1, 2), Fraction(1, 6)]
    total = Fraction(0)
    for mask in range(16):
        if bin(mask).count("1") >= 2:
            p = Fraction(1)
            for j, q in enumerate(chances):
                p *= q if mask >> j & 1 else 1 - q
            total += p
    assert poisson_binomial_upper_tail(2, chances) == pytest.approx(float(total))
