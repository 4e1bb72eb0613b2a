"""MATH final answers: boxed extraction, Minerva-style extraction, normalisation, equivalence.

The MATH-500 checks read the shared benchmark data beside the checkout (skipped without it);
no dataset item is copied here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_llmeval.scorer import (
    extract_math_answer,
    last_boxed,
    math_equal,
    normalize_math_answer,
)

MATH500 = Path(__file__).resolve().parents[2] / ".." / "shared" / "benchmarks" / "math500"

# --------------------------------------------------------------------------- last_boxed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so $x = \boxed{5}$.", "5"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{\left( 3, \frac{\pi}{2} \right)}", r"\left( 3, \frac{\pi}{2} \right)"),
        (r"first \boxed{1}, then \boxed{2}", "2"),
        (r"the set is \boxed{\{1, 2\}}", r"\{1, 2\}"),  # escaped braces do not count
        (r"$\boxed 7$", "7"),  # space form, up to the next $
        ("\\boxed 12\nmore text", "12"),
        (r"\fbox{x^2}", "x^2"),
        (r"\boxed{ 3 }", "3"),
        (r"\boxed{\boxed{5}}", r"\boxed{5}"),  # the outer box wins
        (r"\boxed{3} and later, truncated: \boxed{4", "3"),  # an unclosed box is skipped
        (r"\boxed{}", ""),
        ("no box at all: 42", None),
        (r"\boxed{12", None),
        (r"\boxedfoo{1}", None),
        ("", None),
    ],
)
def test_last_boxed(text: str, expected: str | None) -> None:
    assert last_boxed(text) == expected


# --------------------------------------------------------------------------- extraction

COT_SEVERAL_BOXES = r"""We need $f(2)$. First, $f(1) = \boxed{3}$ as a check.
Then $f(2) = 2 f(1) + \frac{1}{2} = 6 + \frac{1}{2}$, so
$$f(2) = \boxed{\frac{13}{2}}.$$"""

COT_NESTED = r"""Solving $x^2 - 2x - 18 = 0$ with the quadratic formula gives
\[x = \frac{2 \pm \sqrt{4 + 72}}{2} = 1 \pm \sqrt{19}.\]
The solutions are $\boxed{1 + \sqrt{19}, 1 - \sqrt{{19}}}$."""

COT_MINERVA = r"""Problem:
Find $\frac{1}{2} + \frac{1}{3}$.

Solution:
We have $\frac{1}{2} + \frac{1}{3} = \frac{3}{6} + \frac{2}{6} = \frac{5}{6}$.
Final Answer: The final answer is $\frac{5}{6}$. I hope it is correct."""

COT_ANSWER_IS = """There are 4 choices for the first seat and 3 for the second, so
4 * 3 = 12 arrangements. The answer is 12.
"""

COT_LAST_MATH = r"""Adding the two equations gives $2x = 10$, hence $x = 5$"""

COT_NONE = "I am not sure how to approach this problem, sorry."


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (COT_SEVERAL_BOXES, r"\frac{13}{2}"),
        (COT_NESTED, r"1 + \sqrt{19}, 1 - \sqrt{{19}}"),
        (COT_MINERVA, r"\frac{5}{6}"),
        (COT_ANSWER_IS, "12"),
        (COT_LAST_MATH, "5"),  # fallback: the right-hand side of the last $...$
        (COT_NONE, None),
        ("Final Answer: The final answer is 3.5. I hope it is correct.", "3.5"),
        ("The final answer is $(1, 2)$.", "(1, 2)"),
        ("**Final Answer:** 7", "7"),
        ("The answer is: **12**", "12"),
        (r"so the answer is \(\frac{1}{4}\).", r"\frac{1}{4}"),
        (r"The answer is $3$. Wait, no: the answer is $4$.", "4"),  # the last one wins
        (r"The answer is $3$, but \boxed{5}", "5"),  # a box wins over everything
        ("", None),
    ],
)
def test_extract_math_answer(text: str, expected: str | None) -> None:
    assert extract_math_answer(text) == expected


def test_extracted_answers_compare_with_targets() -> None:
    assert math_equal(extract_math_answer(COT_NESTED), r"1 \pm \sqrt{19}")
    assert math_equal(extract_math_answer(COT_MINERVA), r"\dfrac56")
    assert math_equal(extract_math_answer(COT_LAST_MATH), "x=5")
    assert not math_equal(extract_math_answer(COT_NONE), "5")


# --------------------------------------------------------------------------- normalisation


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        # delimiters and boxes
        ("$5$", "5"),
        (r"\(5\)", "5"),
        (r"\boxed{5}", "5"),
        # unicode forms
        ("\u22125", "-5"),
        ("2\u03c0", r"2\pi"),
        # spaces: \!, \, and ordinary spaces go
        (r"11,\! 111,\! 111,\! 100", "11111111100"),
        (r"2 \, x + 1", "2x+1"),
        # \tfrac, \dfrac -> \frac
        (r"\dfrac{17}{50}", r"\frac{17}{50}"),
        (r"\tfrac{1}{3}", r"\frac{1}{3}"),
        # \left / \right
        (r"\left( 3, 4 \right]", "(3,4]"),
        (r"\left\{ 1, 2 \right\}", r"\{1,2\}"),
        # degrees
        (r"106^\circ", "106"),
        (r"30^{\circ}", "30"),
        ("45\u00b0", "45"),
        # money and percent
        (r"\$18.90", "18.90"),
        (r"10\%", "10"),
        ("25%", "25"),
        # units at the end
        (r"15\mbox{ cm}^2", "15"),
        (r"5.4 \text{ cents}", "5.4"),
        (r"\frac{270}7\text{ degrees}", r"\frac{270}{7}"),
        (r"12 \text{cm}", "12"),
        ("30 degrees", "30"),
        ("6 square units", "6"),
        ("2 m", "2m"),  # a one-letter word may be a variable
        (r"\text{ even}", "even"),  # a unit rule never removes the whole answer
        # \text and friends unwrapped
        (r"\text{Evelyn}", "Evelyn"),
        (r"\mbox{east}", "east"),
        (r"\textbf{(C)}", "C"),
        (r"3 \text{ and } 5", "3,5"),
        ("an ellipse", "ellipse"),
        # trailing full stop
        ("42.", "42"),
        # short variable on the left
        ("x = 5", "5"),
        (r"\theta = 30", "30"),
        (r"x \in [-2,7]", "[-2,7]"),
        ("5x - 7y + 11z + 4 = 0", "5x-7y+11z+4=0"),  # not a short variable
        # thousands separators
        ("1,000", "1000"),
        ("1{,}000", "1000"),
        (r"10,\!080", "10080"),
        ("-2,1", "-2,1"),  # a list, not a thousands separator
        # \frac and \sqrt arguments
        (r"\frac12", r"\frac{1}{2}"),
        (r"\frac 34", r"\frac{3}{4}"),
        (r"\frac9{19}", r"\frac{9}{19}"),
        (r"\frac\pi2", r"\frac{\pi}{2}"),
        (r"\sqrt2", r"\sqrt{2}"),
        (r"11\sqrt2", r"11\sqrt{2}"),
        (r"\frac{\sqrt3}{2}", r"\frac{\sqrt{3}}{2}"),
        # one-character scripts
        ("x^{2}", "x^2"),
        ("4210_{5}", "4210_5"),
        # leading zero
        (".5", "0.5"),
        ("-.25", "-0.25"),
        # integer fractions
        ("1/2", r"\frac{1}{2}"),
        ("-3/8", r"-\frac{3}{8}"),
        ("x/2", "x/2"),
        # infinity
        ("(-infinity, 0]", r"(-\infty,0]"),
        (r"(2, +\infty)", r"(2,\infty)"),
        # outer braces
        ("{5}", "5"),
        # case is kept
        ("3R^2", "3R^2"),
        ("", ""),
    ],
)
def test_normalize(raw: str, normalized: str) -> None:
    assert normalize_math_answer(raw) == normalized


# --------------------------------------------------------------------------- equivalence


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (r"\frac{1}{2}", "0.5"),
        ("0.5", "1/2"),
        ("1/2", r"\dfrac12"),
        (r"\frac{1}{2}", r"\dfrac12"),
        (r"10\%", "10"),
        (r"5^\circ", "5"),
        (r"\$18.00", "18"),
        (r"(3, \frac{\pi}{2})", r"\left( 3, \frac{\pi}{2} \right)"),
        ("(1,2)", r"\left( 1, 2 \right)"),
        (r"\frac{\pi}{2}", r"\frac\pi2"),
        (r"\pi/2", r"\frac{\pi}{2}"),
        (r"2\pi", r"2 \pi"),
        (r"x \in [-2,7]", "[-2,7]"),
        (r"(-\infty, 0]", "(-infinity, 0]"),
        (r"(-\infty, 2) \cup (3, \infty)", r"(3,\infty)\cup(-\infty,2)"),
        ("137.5", r"137 \frac{1}{2}"),
        (r"-1\frac{4}{5}", "-1.8"),
        (r"2\sqrt{2}", r"\sqrt{8}"),
        (r"\sqrt[3]{8}", "2"),
        ("2^{10}", "1024"),
        ("3, 5, 7", "7,5,3"),  # a list of values is a set
        (r"\{1\pm\sqrt{5},-2\}", r"-2, 1+\sqrt5, 1-\sqrt5"),
        (r"1 \pm \sqrt{19}", r"1 - \sqrt{19}, 1 + \sqrt{19}"),
        (r"\begin{pmatrix} 1/5 \\ -18/5 \end{pmatrix}", r"\begin{bmatrix}0.2\\-3.6\end{bmatrix}"),
        (".0000672", "6.72/100000"),
        ("58,500", "58500"),
        ("x=5", "5"),
        (r"y = 2x + 3", "2x+3"),
        (r"\text{(B)}", "B"),
        (r"\text{East}", "east"),
        (r"0.3333333333", r"\frac13"),
        (r"15\mbox{ cm}^2", "15 square centimeters"),
        (r"\infty", "infinity"),
    ],
)
def test_equivalent(a: str, b: str) -> None:
    assert math_equal(a, b)
    assert math_equal(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("2", "3"),
        ("x+1", "x-1"),
        ("(1,2)", "(2,1)"),  # tuples are ordered
        ("(1,2]", "(1,2)"),  # interval ends matter
        ("[1,2]", "(1,2)"),
        ("(1,2)", "1,2"),
        ("1,2", "1,2,3"),
        (r"\frac13", "0.333"),  # beyond 1e-6 relative
        ("11111111100", "11111111101"),  # integers compare exactly
        (r"\infty", r"-\infty"),
        ("204", "204_5"),
        ("3R^2", "3r^2"),
        ("2m", "2"),
        (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", r"\begin{pmatrix} 2 \\ 1 \end{pmatrix}"),
        (r"(-\infty, 2) \cup (3, \infty)", r"(-\infty, 2)"),
        ("5", ""),
        ("", ""),
        ("1" * 400, "1" * 399 + "2"),
        ("9" * 400 + ".5", "8" * 400 + ".5"),  # overflow is not a value
    ],
)
def test_not_equivalent(a: str, b: str) -> None:
    assert not math_equal(a, b)
    assert not math_equal(b, a)


def test_no_prediction_is_never_equal() -> None:
    assert not math_equal(None, "5")
    assert not math_equal(None, "")


# --------------------------------------------------------------------------- MATH-500


@pytest.fixture(scope="module")
def math500() -> list[dict[str, Any]]:
    path = MATH500 / "test.jsonl"
    if not path.is_file():
        pytest.skip(f"MATH-500 data not found at {path}")
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_math500_boxed_solution_matches_answer(math500: list[dict[str, Any]]) -> None:
    assert len(math500) == 500
    disagree = [
        item["unique_id"]
        for item in math500
        if not math_equal(last_boxed(item["solution"]), item["answer"])
    ]
    rate = 1 - len(disagree) / len(math500)
    print(f"MATH-500: last_boxed(solution) agrees with answer on {rate:.1%}")
    assert not disagree, disagree


def test_math500_answers_survive_output_formats(math500: list[dict[str, Any]]) -> None:
    """Each gold answer, written the ways models write it, is extracted and matched."""
    failures = []
    for item in math500:
        answer = item["answer"]
        outputs = [
            item["solution"],
            f"Thus the result is ${answer}$.\nFinal Answer: The final answer is ${answer}$. "
            "I hope it is correct.",
            f"Therefore, the answer is ${answer}$.",
            f"We get $\\boxed{{{answer}}}$.",
        ]
        for output in outputs:
            if not math_equal(extract_math_answer(output), answer):
                failures.append((item["unique_id"], output[-80:]))
    assert not failures, failures


def test_math500_normalisation_is_stable(math500: list[dict[str, Any]]) -> None:
    """Normalising a normalised gold answer changes nothing and keeps it equivalent."""
    for item in math500:
        once = normalize_math_answer(item["answer"])
        assert normalize_math_answer(once) == once, item["unique_id"]
        assert math_equal(once, item["answer"]), item["unique_id"]


# --------------------------------------------------------------------------- properties

LATEX_ALPHABET = "\\{}$()[]^_,.=-+/*0123456789 abcdfinprstxy%~!\n"
latexish = st.text(alphabet=LATEX_ALPHABET, max_size=60)
any_text = st.one_of(st.text(max_size=80), latexish)
TOKENS = [
    r"\boxed{",
    r"\frac",
    r"\sqrt",
    r"\pi",
    r"\infty",
    r"\left(",
    r"\right)",
    r"\text{",
    r"\cup",
    r"\pm",
    r"\begin{pmatrix}",
    r"\end{pmatrix}",
    r"\\",
    "&",
    "{",
    "}",
    "$",
    "The final answer is ",
    "1",
    "-",
    ",",
    "/",
    "^",
]
token_text = st.lists(st.sampled_from(TOKENS), max_size=20).map("".join)


@given(st.one_of(any_text, token_text))
def test_never_raises(text: str) -> None:
    boxed = last_boxed(text)
    assert boxed is None or isinstance(boxed, str)
    extracted = extract_math_answer(text)
    assert extracted is None or isinstance(extracted, str)
    assert isinstance(normalize_math_answer(text), str)
    assert isinstance(math_equal(text, text[::-1]), bool)
    assert isinstance(math_equal(extracted, text), bool)


@given(st.one_of(any_text, token_text))
def test_reflexive(text: str) -> None:
    if normalize_math_answer(text):
        assert math_equal(text, text)


def _number_text(n: int, d: int, style: int) -> str:
    if style == 0:
        return str(n)
    if style == 1:
        return f"{n / d:.10f}"
    if style == 2:
        return f"{n}/{d}"
    sign = "-" if n < 0 else ""
    return f"{sign}\\frac{{{abs(n)}}}{{{d}}}"


numeric = st.builds(
    _number_text,
    st.integers(-1000, 1000),
    st.integers(1, 1000),
    st.integers(0, 3),
)


@given(numeric, numeric)
def test_symmetric_on_numbers(a: str, b: str) -> None:
    assert math_equal(a, b) == math_equal(b, a)


@given(st.integers(-1000, 1000), st.integers(1, 1000))
def test_fraction_forms_agree(n: int, d: int) -> None:
    forms = [_number_text(n, d, style) for style in (1, 2, 3)]
    for x in forms:
        for y in forms:
            assert math_equal(x, y), (x, y)
