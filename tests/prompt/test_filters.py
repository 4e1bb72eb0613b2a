"""The Jinja filters for benchmark specs: ``seeded_permutation`` and ``called_function``."""

from __future__ import annotations

import hashlib

import pytest

from pytest_llmeval.prompt import TemplateRenderProblem, render, render_list


def test_seeded_permutation_is_fixed_by_seed_and_length() -> None:
    doc = {"xs": ["a", "b", "c", "d"], "seed": "rec123"}
    shuffled = render_list("{{ xs | seeded_permutation(seed) }}", doc)
    assert sorted(shuffled) == ["a", "b", "c", "d"]
    assert render_list("{{ xs | seeded_permutation(seed) }}", doc) == shuffled
    # The same permutation moves positions of any list of that length.
    where = render_list("{{ [0, 1, 2, 3] | seeded_permutation(seed) }}", doc)
    assert shuffled == [doc["xs"][int(i)] for i in where]
    gold = render("{{ ([0, 1, 2, 3] | seeded_permutation(seed)).index(3) }}", doc)
    assert shuffled[int(gold)] == "d"


def test_seeded_permutation_documented_algorithm() -> None:
    # Position i is ranked by sha256(f"{seed}\x00{i}"): reproducible outside Python.
    keys = [hashlib.sha256(f"s\x00{i}".encode()).hexdigest() for i in range(5)]
    expected = [str(i) for i in sorted(range(5), key=keys.__getitem__)]
    assert render_list("{{ [0, 1, 2, 3, 4] | seeded_permutation('s') }}", {}) == expected


def test_seeded_permutation_varies_with_seed() -> None:
    orders = {
        tuple(render_list("{{ [0, 1, 2, 3] | seeded_permutation(s) }}", {"s": f"item-{n}"}))
        for n in range(40)
    }
    assert len(orders) > 10
    assert {o.index("3") for o in orders} == {0, 1, 2, 3}
    assert render_list("{{ [] | seeded_permutation('x') }}", {}) == []


@pytest.mark.parametrize(
    ("code", "name"),
    [
        ('assert count_vowels("banana") == 3', "count_vowels"),
        ("assert set(common(a, b)) == set((4, 5))", "common"),
        ("assert math.isclose(area(3), 5.0, rel_tol=0.001)", "area"),
        ("assert max_chain([Pair(5, 24), Pair(15, 25)], 2) == 3", "max_chain"),
        ("assert (fn(1)==2) ", "fn"),
        ("  assert f(1) == g(2)", "f"),
        ("assert sorted([3, 1]) == [1, 3]", "sorted"),  # only builtins: the first one
    ],
)
def test_called_function(code: str, name: str) -> None:
    assert render("{{ code | called_function }}", {"code": code}) == name


@pytest.mark.parametrize("code", ["assert x == 1", "assert (", "obj.method(1)"])
def test_called_function_without_a_call_is_a_render_error(code: str) -> None:
    with pytest.raises(TemplateRenderProblem, match="called_function"):
        render("{{ code | called_function }}", {"code": code})
