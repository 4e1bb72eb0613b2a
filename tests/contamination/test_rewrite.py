"""Item rewrites: option orders and GSM8K-style number rewrites with recomputed answers."""

from __future__ import annotations

import json
import random
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmeval.contamination import (
    CITIES,
    CalculationError,
    calculations,
    evaluate,
    option_orders,
    permute_options,
    recheck,
    rewrite_entities,
    rewrite_numbers,
)
from pytest_llmeval.contamination._rewrite import (
    FEMALE_NAMES,
    MALE_NAMES,
    number_kind,
    same_kind_number,
)

# --------------------------------------------------------------------------- options


@given(n=st.integers(2, 10), data=st.data())
def test_orders_move_the_gold_and_are_reproducible(n: int, data: st.DataObject) -> None:
    gold = data.draw(st.integers(0, n - 1))
    k = data.draw(st.integers(1, 4))
    orders = option_orders(n, gold, k, seed=7, item_id="x-1")
    assert orders == option_orders(n, gold, k, seed=7, item_id="x-1")
    assert len(set(orders)) == len(orders)
    assert len(orders) == (1 if n == 2 else k)  # two options have a single other order
    for order in orders:
        assert sorted(order) == list(range(n))
        assert order.index(gold) != gold


@given(
    options=st.lists(st.text(min_size=1, max_size=8), min_size=2, max_size=8, unique=True),
    data=st.data(),
)
def test_a_permutation_keeps_the_gold_option(options: list[str], data: st.DataObject) -> None:
    gold = data.draw(st.integers(0, len(options) - 1))
    as_text = data.draw(st.booleans())
    doc = {"choices": options, "answer": str(gold) if as_text else gold, "question": "q"}
    for order in option_orders(len(options), gold, 3, seed=1, item_id="i"):
        new = permute_options(doc, "choices", "answer", order)
        assert sorted(new["choices"]) == sorted(options)
        assert new["choices"][int(new["answer"])] == options[gold]
        assert isinstance(new["answer"], str) == as_text
        assert new["question"] == "q"


def test_orders_differ_by_seed_and_item() -> None:
    a = option_orders(4, 0, 3, seed=1, item_id="a")
    assert a != option_orders(4, 0, 3, seed=2, item_id="a")
    assert a != option_orders(4, 0, 3, seed=1, item_id="b")
    with pytest.raises(ValueError, match="at least two options"):
        option_orders(1, 0, 1, seed=1, item_id="a")
    with pytest.raises(ValueError, match="not an order"):
        permute_options({"c": ["a", "b"], "g": 0}, "c", "g", [0, 0])


# --------------------------------------------------------------------------- arithmetic


@pytest.mark.parametrize(
    ("expr", "value"),
    [("48/2", 24), ("3*20-15-25", 20), ("1,200*3", 3600), (".5*100", 50), ("2**3+1", 9)],
)
def test_evaluate_is_exact_arithmetic(expr: str, value: int) -> None:
    assert evaluate(expr) == value
    assert evaluate("1/3") == Fraction(1, 3)


@pytest.mark.parametrize(
    "expr", ["__import__('os')", "x+1", "2**100", "1/0", "abs(-1)", "1 if 1 else 2"]
)
def test_evaluate_refuses_anything_else(expr: str) -> None:
    with pytest.raises(CalculationError):
        evaluate(expr)


# --------------------------------------------------------------------------- numbers

APPLES_Q = "Tom has 15 apples and buys 9 more. He gives 6 to Ann. How many apples does he have?"
APPLES_S = "He has 15+9=<<15+9=24>>24 apples.\nThen 24-6=<<24-6=18>>18 are left.\n#### 18"


def test_rewrite_changes_the_question_and_recomputes_the_answer() -> None:
    rewrite = rewrite_numbers(APPLES_Q, APPLES_S, seed=1234, item_id="apples")
    assert rewrite is not None
    new = {Fraction(a): Fraction(b) for a, b in rewrite.changes}
    assert set(new) == {15, 9, 6}
    a, b, c = (new[Fraction(x)] for x in (15, 9, 6))
    assert rewrite.question == (
        f"Tom has {a} apples and buys {b} more. He gives {c} to Ann. How many apples does he have?"
    )
    assert Fraction(rewrite.answer) == a + b - c > 0
    assert rewrite.answer != "18"
    assert recheck(rewrite.solution) == a + b - c
    assert calculations(rewrite.solution) == [
        (f"{a}+{b}", str(a + b)),
        (f"{a + b}-{c}", str(a + b - c)),
    ]
    assert rewrite == rewrite_numbers(APPLES_Q, APPLES_S, seed=1234, item_id="apples")


@pytest.mark.parametrize(
    ("question", "solution", "why"),
    [
        ("A box has 12 eggs.", "It has <<12=12>>12.\n#### 12", "no arithmetic"),
        ("Sam reads 6 pages and 6 more.", "6+6=<<6+6=12>>12\n12+6=<<12+6=18>>18\n#### 18", "ok"),
        (  # 5 has no other of its kind (a single significant 5): it stays, nothing changes
            "Sam reads 5 pages and 5 more.",
            "5+5=<<5+5=10>>10\n10+5=<<10+5=15>>15\n#### 15",
            "nothing of its kind",
        ),
        ("Ann has 8 pens and 8 pencils.", "8+8=<<8+8=16>>16\n16*8=<<16*8=128>>128\n#### 128", "ok"),
        (  # 13 is a question number and an earlier result: which one does 13+13 use?
            "Bo has 5 cats, 8 dogs and 13 birds.",
            "5+8=<<5+8=13>>13\n13+13=<<13+13=26>>26\n#### 26",
            "ambiguous",
        ),
        ("Bo has 6 cats and buys 6 more.", "6+6=<<6+6=12>>12\n12/2=<<12/2=6>>6\n#### 6", "ok"),
        ("Half of 2 apples.", "2/2=<<2/2=1>>1\n#### 1", "unit constant only"),
        ("Ed has 7 and 9.", "7+9=<<7+9=17>>17\n#### 17", "wrong annotation"),
        ("Ed has 11 and 9.", "11+9=<<11+9=20>>20\n#### 21", "final not calculated"),
    ],
)
def test_unsafe_rewrites_are_refused(question: str, solution: str, why: str) -> None:
    rewrite = rewrite_numbers(question, solution, seed=3, item_id="q")
    if why == "ok":
        assert rewrite is not None and recheck(rewrite.solution) == Fraction(rewrite.answer)
    else:
        assert rewrite is None, why


@settings(max_examples=60, deadline=None)
@given(
    a=st.integers(11, 500),
    b=st.integers(11, 500),
    c=st.integers(5, 9),
    seed=st.integers(0, 10**6),
)
def test_rewritten_answer_matches_re_executing_the_calculations(
    a: int, b: int, c: int, seed: int
) -> None:
    if len({a, b, c, a + b, (a + b) * c}) < 5:
        return
    question = f"A farm has {a} cows and {b} goats. Each animal eats {c} kg a day. How much in all?"
    solution = (
        f"There are {a}+{b}=<<{a}+{b}={a + b}>>{a + b} animals.\n"
        f"They eat {a + b}*{c}=<<{a + b}*{c}={(a + b) * c}>>{(a + b) * c} kg.\n#### {(a + b) * c}"
    )
    rewrite = rewrite_numbers(question, solution, seed=seed, item_id="farm")
    if rewrite is None:
        return
    new = {Fraction(x): Fraction(y) for x, y in rewrite.changes}
    na, nb, nc = (new.get(Fraction(v), Fraction(v)) for v in (a, b, c))
    assert Fraction(rewrite.answer) == (na + nb) * nc
    assert recheck(rewrite.solution) == Fraction(rewrite.answer)
    assert f"{na} cows and {nb} goats" in rewrite.question


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (7, (1, 0, False)),
        (5, (1, 0, True)),
        (20, (2, 1, False)),
        (25, (2, 0, True)),
        (150, (3, 1, True)),
        (1200, (4, 2, False)),
        (37, (2, 0, False)),
    ],
)
def test_number_kind(value: int, kind: tuple[int, int, bool]) -> None:
    assert number_kind(value) == kind


@given(value=st.integers(2, 10**7), seed=st.integers(0, 10**6))
def test_a_new_number_is_of_the_same_kind_and_near(value: int, seed: int) -> None:
    new = same_kind_number(value, random.Random(seed))
    if new is None:  # only a single significant 5 has no other of its kind
        assert str(value).rstrip("0") == "5"
        return
    assert new != value and number_kind(new) == number_kind(value)
    digits = len(str(value))
    low, high = max(value // 2, 10 ** (digits - 1), 2), min(2 * value, 10**digits - 1)
    step = 10 ** number_kind(value)[1]
    near = any(
        c != value and number_kind(c) == number_kind(value)
        for c in range(-(-low // step) * step, high + 1, step)
    )
    if near:  # within half to twice the value where it has one of its kind there
        assert low <= new <= high


def test_real_gsm8k_rewrites_keep_how_round_the_numbers_are(shared_benchmarks: Path) -> None:
    """Published problems use round numbers; a rewrite that made them less round would be
    harder for a model that saw neither, and the probe would read that as contamination."""
    rows = [
        json.loads(line)
        for line in (shared_benchmarks / "gsm8k" / "test.jsonl").read_text().splitlines()[:300]
    ]
    kinds: dict[str, list[tuple[int, int, bool]]] = {"published": [], "rewritten": []}
    for i, row in enumerate(rows):
        rewrite = rewrite_numbers(
            row["question"], row["answer"], seed=1234, item_id=f"gsm8k-{i:04d}"
        )
        for old, new in rewrite.changes if rewrite else ():
            kinds["published"].append(number_kind(int(old)))
            kinds["rewritten"].append(number_kind(int(new)))
    assert len(kinds["published"]) > 150
    assert kinds["published"] == kinds["rewritten"]


def test_real_gsm8k_rewrites_recheck(shared_benchmarks: Path) -> None:
    rows = [
        json.loads(line)
        for line in (shared_benchmarks / "gsm8k" / "test.jsonl").read_text().splitlines()[:300]
    ]
    done = 0
    for i, row in enumerate(rows):
        rewrite = rewrite_numbers(
            row["question"], row["answer"], seed=1234, item_id=f"gsm8k-{i:04d}"
        )
        if rewrite is None:
            continue
        done += 1
        assert recheck(rewrite.solution) == Fraction(rewrite.answer), i
        assert rewrite.answer != row["answer"].rsplit("####", 1)[1].strip().replace(",", "")
        assert rewrite.question != row["question"]
        for _, new in rewrite.changes:
            assert new in rewrite.question
    assert done >= 120  # about half of GSM8K has a safe rewrite


# --------------------------------------------------------------------------- entities


def test_entity_rewrite_swaps_names_consistently_within_gender() -> None:
    text = "Janet has 5 apples. Janet's brother Tom gives her 3 more in Paris. Tomas watches."
    rewrite = rewrite_entities(text, seed=1, item_id="a")
    assert rewrite is not None
    changes = dict(rewrite.changes)
    assert set(changes) == {"Janet", "Tom", "Paris"}  # not "Tomas": whole words only
    assert changes["Janet"] in FEMALE_NAMES and changes["Tom"] in MALE_NAMES
    assert changes["Paris"] in CITIES
    new = rewrite.text
    assert new.count(changes["Janet"]) == 2 and "Janet" not in new
    assert (
        f"{changes['Janet']}'s brother {changes['Tom']} gives her 3 more in {changes['Paris']}"
        in new
    )
    assert "Tomas watches." in new
    assert rewrite == rewrite_entities(text, seed=1, item_id="a")
    assert rewrite_entities("A farmer has 5 cows.", seed=1, item_id="b") is None


@given(st.sampled_from(FEMALE_NAMES), st.sampled_from(MALE_NAMES), st.integers(0, 1000))
def test_entity_rewrite_never_reuses_a_name_of_the_text(her: str, him: str, seed: int) -> None:
    text = f"{her} and {him} share 10 pears; {her} eats 2."
    rewrite = rewrite_entities(text, seed=seed, item_id="x")
    assert rewrite is not None
    changes = dict(rewrite.changes)
    assert changes[her] not in (her, him) and changes[him] not in (her, him)
    assert rewrite.text.endswith(f"{changes[her]} eats 2.")
