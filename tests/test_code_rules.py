"""Plain rules the package's code keeps: no function over :data:`MAX_LINES` lines.

The functions that were longer when the rule came are listed with their length then: each
may only shrink, and leaves the list once it fits (a listed function that fits, or is
gone, fails until its line is removed)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "pytest_llmeval"
MAX_LINES = 80
#: ``module::function`` (methods by their own name) -> its length in lines, to shrink.
LONG_FUNCTIONS: dict[str, int] = {}


def function_lengths() -> dict[str, int]:
    """Every function of the package longer than :data:`MAX_LINES`, with its length."""
    long: dict[str, int] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        module = path.relative_to(PACKAGE_DIR).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    key = f"{module}::{node.name}"
                    long[key] = max(lines, long.get(key, 0))
    return long


def test_no_function_is_longer_than_the_limit_or_than_it_was() -> None:
    found = function_lengths()
    new = {name: n for name, n in found.items() if name not in LONG_FUNCTIONS}
    assert new == {}, f"functions over {MAX_LINES} lines: split them: {new}"
    grown = {n: (found[n], LONG_FUNCTIONS[n]) for n in found if found[n] > LONG_FUNCTIONS[n]}
    assert grown == {}, f"listed long functions grew (now, then): {grown}"
    fits = sorted(set(LONG_FUNCTIONS) - set(found))
    assert fits == [], f"now within {MAX_LINES} lines or gone: remove from LONG_FUNCTIONS: {fits}"


def test_test_modules_have_unique_names() -> None:
    """The test folders have no ``__init__.py``: pytest imports each test module by its
    basename (rootdir-relative ``importmode=prepend``), so two with one name collide
    ("import file mismatch") and one of them is never collected."""
    tests = Path(__file__).resolve().parent
    seen: dict[str, list[str]] = {}
    for path in sorted(tests.rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(tests)))
    twice = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert twice == {}, f"test modules with the same name: {twice}"
