"""Rewrites of benchmark items that keep the task and change its surface.

- :func:`option_orders` / :func:`permute_options`: multiple-choice options in another order,
  the right answer moved (the gold index follows its option).
- :func:`rewrite_entities`: person names and cities swapped for others (answer unchanged);
- :func:`rewrite_numbers`: a GSM8K-style problem with new numbers of the same kind (digit
  count, roundness: :func:`same_kind_number`); the answer is recomputed
  by re-executing the solution's annotated calculations (``<<48/2=24>>``) with the new
  values, and a rewrite is kept only when every recomputed step stays valid (positive
  where it was, an integer where it was).

Everything is deterministic given the seed and the item id, so a probe's rewrites can be
recorded and reproduced.
"""

from __future__ import annotations

import ast
import operator
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

Doc = Mapping[str, Any]


def item_rng(seed: int, item_id: str, salt: str) -> random.Random:
    """The generator of one item's rewrite: the same for the same seed, item and salt."""
    # A string seed is hashed with SHA-512 by random.Random: stable across runs and machines.
    return random.Random(f"{seed}\x00{salt}\x00{item_id}")


# --------------------------------------------------------------------------- options


def option_orders(
    n_options: int, gold: int, k: int, *, seed: int, item_id: str
) -> list[tuple[int, ...]]:
    """``k`` distinct orders of ``n_options`` options, each moving the gold option away from
    its position. ``order[i]`` is the original index of the option shown at position ``i``.
    Fewer than ``k`` come back when fewer exist (two options have one)."""
    if n_options < 2:
        raise ValueError(f"need at least two options, got {n_options}")
    if not 0 <= gold < n_options:
        raise ValueError(f"gold index {gold} out of range for {n_options} options")
    rng = item_rng(seed, item_id, "options")
    orders: list[tuple[int, ...]] = []
    for _ in range(200 * max(1, k)):
        if len(orders) == k:
            break
        order = list(range(n_options))
        rng.shuffle(order)
        if order.index(gold) != gold and tuple(order) not in orders:
            orders.append(tuple(order))
    return orders


OptionFields = str | Sequence[str]


def option_texts(doc: Doc, options: OptionFields) -> list[str]:
    """An item's option texts: one list field (``choices``) or one field per option
    (C-Eval's ``A``, ``B``, ``C``, ``D`` columns)."""
    if isinstance(options, str):
        return [str(o) for o in doc[options]]
    return [str(doc[name]) for name in options]


def gold_index(doc: Doc, gold_field: str, n_options: int) -> int:
    """The right option's index: an integer, its string (CSV), or a letter ``A``, ``B``, ..."""
    raw = doc[gold_field]
    text = str(raw).strip()
    if text.isdigit():
        index = int(text)
    elif len(text) == 1 and text.isalpha():
        index = ord(text.upper()) - ord("A")
    else:
        raise ValueError(f"{gold_field}={raw!r} is neither an option index nor a letter")
    if not 0 <= index < n_options:
        raise ValueError(f"{gold_field}={raw!r} is out of range for {n_options} options")
    return index


def permute_options(
    doc: Doc, options: OptionFields, gold_field: str, order: Sequence[int]
) -> dict[str, Any]:
    """The document with its options in ``order`` and the gold following its option, written
    back in the form the data had (an int, a digit string as CSV files have, or a letter)."""
    texts = option_texts(doc, options)
    if sorted(order) != list(range(len(texts))):
        raise ValueError(f"{list(order)} is not an order of {len(texts)} options")
    raw_gold = doc[gold_field]
    gold = gold_index(doc, gold_field, len(texts))
    new_gold = list(order).index(gold)
    out = dict(doc)
    if isinstance(options, str):
        out[options] = [doc[options][i] for i in order]
    else:
        for position, name in enumerate(options):
            out[name] = doc[options[order[position]]]
    if isinstance(raw_gold, str) and not raw_gold.strip().isdigit():
        out[gold_field] = chr(ord("A") + new_gold)
    else:
        out[gold_field] = str(new_gold) if isinstance(raw_gold, str) else new_gold
    return out


def shuffled_orders(
    doc: Doc, options: OptionFields, gold_field: str, k: int, *, seed: int, item_id: str
) -> list[tuple[int, ...]]:
    """``k`` seeded orders of a document's options that move its gold option
    (:func:`option_orders` for the document's option count and gold index)."""
    n_options = len(option_texts(doc, options))
    gold = gold_index(doc, gold_field, n_options)
    return option_orders(n_options, gold, k, seed=seed, item_id=item_id)


# --------------------------------------------------------------------------- numbers

_CALC = re.compile(r"<<([^<>=]+)=([^<>]+)>>")
# A number in prose: not part of a word ("3rd", "A4") or a time ("8:30"), commas allowed.
_PROSE_NUMBER = re.compile(r"(?<![\w.:/])(\d{1,3}(?:,\d{3})+|\d+)(?![\w:/]|\.\d)")
_CALC_SHOWN = re.compile(r"<<([^<>=]+)=([^<>]+)>>(\d[\d,]*(?:\.\d+)?)?")
_EXPR_NUMBER = re.compile(r"\d+(?:\.\d+)?|\.\d+")
_OPS: dict[type[ast.AST], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


# Values that calculations also use as unit or word constants ("half" = /2, "a dozen" = 12,
# minutes per hour, percent, ...): a question number with such a value is left unchanged, since
# a calculation's 2 may be the question's 2 or the "half" of its prose.
UNIT_CONSTANTS = frozenset(
    Fraction(v) for v in (2, 3, 4, 7, 10, 12, 24, 30, 31, 52, 60, 100, 365, 1000)
)


class CalculationError(ValueError):
    """An annotated calculation that is not plain arithmetic, or whose result is off."""


def evaluate(expr: str) -> Fraction:
    """Exact value of an arithmetic expression (numbers, + - * / // % **, parentheses);
    anything else raises :class:`CalculationError`."""
    try:
        tree = ast.parse(expr.replace(",", "").strip(), mode="eval")
    except SyntaxError as exc:
        raise CalculationError(f"not arithmetic: {expr!r}") from exc

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return Fraction(str(node.value))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow) and (right.denominator != 1 or abs(right) > 8):
                raise CalculationError(f"unsupported power in {expr!r}")
            if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
                raise CalculationError(f"division by zero in {expr!r}")
            return Fraction(_OPS[type(node.op)](left, right))
        raise CalculationError(f"not arithmetic: {expr!r}")

    return walk(tree)


def calculations(solution: str) -> list[tuple[str, str]]:
    """The annotated calculations of a worked solution, ``[(expression, result), ...]``."""
    return [(m.group(1), m.group(2)) for m in _CALC.finditer(solution)]


def final_answer(solution: str) -> str | None:
    """The text after the last ``####`` (GSM8K's final answer), commas removed."""
    if "####" not in solution:
        return None
    return solution.rsplit("####", 1)[1].strip().replace(",", "")


def _parse(value: str) -> Fraction | None:
    try:
        return Fraction(value.replace(",", "").strip())
    except (ValueError, ZeroDivisionError):
        return None


def _format(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    text = f"{float(value):.6f}".rstrip("0").rstrip(".")
    return text


@dataclass(frozen=True)
class NumberRewrite:
    """A problem with new numbers: its question, its solution's calculations redone, the
    recomputed answer, and which question numbers changed (old -> new)."""

    question: str
    solution: str
    answer: str
    changes: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class _Operand:
    kind: str  # "question" | "result" | "constant"
    key: Fraction | int  # the question value, the index of the earlier calculation, or the constant


def _plan(
    question_values: set[Fraction], calcs: list[tuple[str, str]]
) -> list[tuple[str, list[tuple[int, int, _Operand]]]] | None:
    """For each calculation, where each number of its expression comes from; None when a
    number could come from both the question and an earlier result (ambiguous) or when a
    recorded result does not match its expression."""
    plan = []
    results: list[Fraction] = []
    for expr, result in calcs:
        recorded = _parse(result)
        try:
            value = evaluate(expr)
        except CalculationError:
            return None
        if recorded is None or value != recorded:
            return None
        if not any(isinstance(node, ast.BinOp) for node in ast.walk(ast.parse(expr, mode="eval"))):
            return None  # "<<6=6>>": the computation it stands for is not written down
        operands = []
        for m in _EXPR_NUMBER.finditer(expr):
            number = Fraction(m.group(0))
            earlier = [i for i, r in enumerate(results) if r == number]
            in_question = number in question_values
            if earlier and in_question:
                return None
            if earlier:
                operands.append((m.start(), m.end(), _Operand("result", earlier[-1])))
            elif in_question:
                operands.append((m.start(), m.end(), _Operand("question", number)))
            else:
                operands.append((m.start(), m.end(), _Operand("constant", number)))
        plan.append((expr, operands))
        results.append(recorded)
    return plan


def _recompute(
    plan: list[tuple[str, list[tuple[int, int, _Operand]]]], new: Mapping[Fraction, Fraction]
) -> list[tuple[str, Fraction]] | None:
    out: list[tuple[str, Fraction]] = []
    for expr, operands in plan:
        pieces, last = [], 0
        for start, end, op in operands:
            if op.kind == "result":
                assert isinstance(op.key, int)
                value = out[op.key][1]
            elif op.kind == "question":
                assert isinstance(op.key, Fraction)
                value = new.get(op.key, op.key)
            else:
                assert isinstance(op.key, Fraction)
                value = op.key
            pieces.append(expr[last:start])
            pieces.append(f"({_format(value)})" if value < 0 else _format(value))
            last = end
        pieces.append(expr[last:])
        new_expr = "".join(pieces)
        try:
            out.append((new_expr, evaluate(new_expr)))
        except CalculationError:
            return None
    return out


def number_kind(value: int) -> tuple[int, int, bool]:
    """How round a positive integer is: its digit count, its trailing zeros, and whether
    its last significant digit is 5. ``20`` and ``40`` are of a kind, ``25`` and ``35``,
    ``1200`` and ``3700``; ``25`` and ``37`` are not, nor ``50`` and ``60`` (``50`` has no
    other of its kind: it stays)."""
    text = str(value)
    significant = text.rstrip("0")
    return len(text), len(text) - len(significant), significant.endswith("5")


def same_kind_number(value: int, rng: random.Random) -> int | None:
    """A new value of the same kind as ``value`` (:func:`number_kind`: digit count,
    trailing zeros, a last significant 5), within half to twice it where that has one, else
    anywhere with its digit count; None when there is no other of its kind (5, 50, 500).

    Published problems use round numbers (64% of the GSM8K question numbers a uniform
    draw between half and twice the value changed are multiples of 5; 24% of what it drew
    are), and arithmetic on less round numbers may well be harder for a model that never
    saw either form (docs/CONTAMINATION.md#number-rewrites-keep-the-numbers-kind)."""
    kind = number_kind(value)
    digits, zeros, _ = kind
    step = int(10**zeros)
    floor, ceiling = int(10 ** (digits - 1)), int(10**digits) - 1
    if digits == 1:
        floor = 2  # a question's 1 reads as "one" or "a"; 0 is not a number of things
    for low, high in ((max(floor, value // 2), min(ceiling, 2 * value)), (floor, ceiling)):
        start = -(-low // step) * step
        count = (high - start) // step + 1 if high >= start else 0
        if count <= 0:
            continue
        if count <= 4096:
            candidates = [
                c for c in range(start, high + 1, step) if c != value and number_kind(c) == kind
            ]
            if candidates:
                return int(rng.choice(candidates))
            continue
        for _ in range(256):  # a wide range: most draws of the step are of the kind
            c = start + step * rng.randrange(count)
            if c != value and number_kind(c) == kind:
                return c
    return None


def rewrite_numbers(
    question: str, solution: str, *, seed: int, item_id: str, attempts: int = 50
) -> NumberRewrite | None:
    """New integer values for the question numbers that the solution calculates with, the
    answer recomputed; None when no valid rewrite is found (see the module docstring)."""
    calcs = calculations(solution)
    final = final_answer(solution)
    final_value = _parse(final) if final is not None else None
    if not calcs or final_value is None:
        return None
    found = [
        (m.start(1), m.end(1), Fraction(m.group(1).replace(",", "")))
        for m in _PROSE_NUMBER.finditer(question)
    ]
    plan = _plan({v for _, _, v in found}, calcs)
    if plan is None:
        return None
    original = [evaluate(expr) for expr, _ in calcs]
    if final_value not in original:
        return None
    final_index = len(original) - 1 - original[::-1].index(final_value)
    keys = {op.key for _, ops in plan for _, _, op in ops if op.kind == "question"}
    used = sorted(
        v
        for v in keys
        if isinstance(v, Fraction) and v.denominator == 1 and v > 1 and v not in UNIT_CONSTANTS
    )
    # A number with no other of its kind (5, 50, 500) stays; the others change.
    changeable = [v for v in used if same_kind_number(int(v), random.Random(0)) is not None]
    if not changeable:
        return None
    rng = item_rng(seed, item_id, "numbers")
    for _ in range(attempts):
        new: dict[Fraction, Fraction] = {}
        for v in changeable:
            choice = Fraction(same_kind_number(int(v), rng) or v)
            if choice in new.values() or choice in {x for _, _, x in found}:
                continue
            new[v] = choice
        if len(new) != len(changeable):
            continue
        redone = _recompute(plan, new)
        if redone is None or not _valid(original, [r for _, r in redone]):
            continue
        answer = redone[final_index][1]
        if answer == final_value:
            continue  # the answer did not move: not a rewrite worth asking
        return NumberRewrite(
            question=_replace_numbers(question, found, new),
            solution=_rewrite_solution(solution, redone, answer),
            answer=_format(answer),
            changes=tuple((_format(k), _format(v)) for k, v in new.items()),
        )
    return None


def _valid(original: Sequence[Fraction], redone: Sequence[Fraction]) -> bool:
    for old, new in zip(original, redone, strict=True):
        if old > 0 and new <= 0:
            return False
        if old.denominator == 1 and new.denominator != 1:
            return False
        if abs(new) > 10**9:
            return False
    return True


def _replace_numbers(
    question: str, found: list[tuple[int, int, Fraction]], new: Mapping[Fraction, Fraction]
) -> str:
    pieces, last = [], 0
    for start, end, value in found:
        if value in new:
            pieces.append(question[last:start])
            pieces.append(_format(new[value]))
            last = end
    pieces.append(question[last:])
    return "".join(pieces)


def _rewrite_solution(solution: str, redone: list[tuple[str, Fraction]], answer: Fraction) -> str:
    """The solution's calculations with the new expressions and results, the result written
    right after each one, and the new final answer (other prose numbers are left as they
    were: the solution is a record of the recomputation, not shown to the model)."""
    parts = iter(redone)

    def redo(m: re.Match[str]) -> str:
        expr, value = next(parts)
        shown = m.group(3)
        if shown is not None and _parse(shown) == _parse(m.group(2)):
            shown = _format(value)  # the result written right after the annotation
        return f"<<{expr}={_format(value)}>>{shown or ''}"

    body = _CALC_SHOWN.sub(redo, solution.rsplit("####", 1)[0])
    return f"{body}#### {_format(answer)}"


def recheck(solution: str) -> Fraction | None:
    """Re-execute a solution's calculations: the final answer if every recorded result
    equals its expression's value and the final answer is one of them, else None."""
    final = final_answer(solution)
    final_value = _parse(final) if final is not None else None
    values = []
    for expr, result in calculations(solution):
        try:
            value = evaluate(expr)
        except CalculationError:
            return None
        if _parse(result) != value:
            return None
        values.append(value)
    return final_value if final_value is not None and final_value in values else None


# --------------------------------------------------------------------------- entities

#: Female first names swapped by entity rewrites (for one another).
FEMALE_NAMES = (
    "Alice",
    "Amanda",
    "Amy",
    "Angela",
    "Anna",
    "Betty",
    "Carol",
    "Diana",
    "Donna",
    "Elena",
    "Emily",
    "Emma",
    "Grace",
    "Hannah",
    "Helen",
    "Jane",
    "Janet",
    "Jennifer",
    "Jessica",
    "Julia",
    "Julie",
    "Karen",
    "Kate",
    "Laura",
    "Linda",
    "Lisa",
    "Lucy",
    "Maria",
    "Mary",
    "Megan",
    "Michelle",
    "Nancy",
    "Natalie",
    "Olivia",
    "Rachel",
    "Rose",
    "Sarah",
    "Sophia",
    "Susan",
    "Zoe",
)

#: Male first names swapped by entity rewrites (for one another).
MALE_NAMES = (
    "Aaron",
    "Adam",
    "Alan",
    "Albert",
    "Andrew",
    "Anthony",
    "Ben",
    "Benjamin",
    "Bill",
    "Bob",
    "Brian",
    "Carl",
    "Carlos",
    "Charles",
    "Daniel",
    "David",
    "Edward",
    "Eric",
    "Ethan",
    "Frank",
    "Gary",
    "George",
    "Harry",
    "Henry",
    "Jack",
    "Jacob",
    "Jake",
    "James",
    "Jason",
    "Jim",
    "Joe",
    "John",
    "Joseph",
    "Joshua",
    "Kevin",
    "Mark",
    "Matt",
    "Michael",
    "Mike",
    "Nathan",
    "Nick",
    "Paul",
    "Peter",
    "Richard",
    "Robert",
    "Ryan",
    "Scott",
    "Steve",
    "Thomas",
    "Tim",
    "Tom",
    "Tony",
    "William",
)

#: All first names of the entity rewrites.
FIRST_NAMES = FEMALE_NAMES + MALE_NAMES

#: Cities swapped by entity rewrites.
CITIES = (
    "Amsterdam",
    "Athens",
    "Berlin",
    "Boston",
    "Brussels",
    "Chicago",
    "Dallas",
    "Denver",
    "Dublin",
    "Houston",
    "Lisbon",
    "London",
    "Madrid",
    "Miami",
    "Montreal",
    "Oslo",
    "Paris",
    "Prague",
    "Rome",
    "Seattle",
    "Sydney",
    "Tokyo",
    "Toronto",
    "Vienna",
)


@dataclass(frozen=True)
class EntityRewrite:
    """A text with its person names and cities swapped for others of the same kind."""

    text: str
    changes: tuple[tuple[str, str], ...]


def rewrite_entities(text: str, *, seed: int, item_id: str) -> EntityRewrite | None:
    """Swap every first name and city of the built-in lists that ``text`` mentions (as a
    whole word, possessives included) for another of the same kind (a female name for a
    female one, so pronouns still fit) that the text does not use; the same name is always
    replaced by the same new one. None when the text names none of them. The answer of a
    word problem does not depend on who does it, so it is unchanged."""
    rng = item_rng(seed, item_id, "entities")
    changes: dict[str, str] = {}
    for kind in (FEMALE_NAMES, MALE_NAMES, CITIES):
        present = [w for w in kind if re.search(rf"\b{re.escape(w)}\b", text)]
        unused = [w for w in kind if w not in present]
        rng.shuffle(unused)
        for old, new in zip(present, unused, strict=False):
            changes[old] = new
    if not changes:
        return None
    pattern = re.compile(r"\b(" + "|".join(re.escape(w) for w in changes) + r")\b")
    return EntityRewrite(
        text=pattern.sub(lambda m: changes[m.group(1)], text), changes=tuple(changes.items())
    )
