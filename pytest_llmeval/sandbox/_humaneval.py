"""HumanEval-style functional checks: a prompt, a completion, a test with ``check``."""

from __future__ import annotations

import ast
import re
import warnings

from pytest_llmeval.sandbox._result import ExecutionResult, Limits
from pytest_llmeval.sandbox._run import execute


def _validate_entry_point(entry_point: str) -> None:
    if not (isinstance(entry_point, str) and entry_point.isidentifier()):
        raise ValueError(f"entry_point must be a Python identifier, not {entry_point!r}")


def defines(code: str, name: str) -> bool:
    """Whether ``code`` has a top-level ``def name(`` (or ``async def``)."""
    return (
        re.search(rf"^(?:async[ \t]+)?def[ \t]+{re.escape(name)}[ \t]*\(", code, re.M) is not None
    )


def _parses(code: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _import_lines(prompt: str) -> str:
    lines = [
        line
        for line in prompt.splitlines()
        if line.startswith(("import ", "from ")) and _parses(line)
    ]
    return "\n".join(lines) + "\n" if lines else ""


def solution_source(prompt: str, completion: str, entry_point: str) -> str:
    """The code under test: the prompt continued by the completion, or, when the completion
    is a whole definition of ``entry_point``, the prompt followed by that definition (which
    replaces the prompt's; the prompt's imports and helpers stay available). A prompt that
    does not parse on its own contributes only its import lines then."""
    if defines(completion, entry_point) and not completion.startswith((" ", "\t")):
        head = prompt if _parses(prompt) else _import_lines(prompt)
        if head and not head.endswith("\n\n"):
            head += "\n" if head.endswith("\n") else "\n\n"
        return head + completion
    return prompt + completion


def build_program(prompt: str, completion: str, test: str, entry_point: str) -> str:
    """The whole HumanEval-style program: solution, test, then ``check(entry_point)``.

    For a completion that continues the prompt's function body this is
    ``prompt + completion + "\\n" + test + "\\ncheck(entry_point)\\n"``; for a completion that
    repeats the whole function (as chat models do), see :func:`solution_source`.
    :func:`check_completion` runs exactly these three parts, each compiled on its own.
    """
    _validate_entry_point(entry_point)
    solution, test_part, call = _units(prompt, completion, test, entry_point)
    return f"{solution}\n{test_part}\n{call}"


def _units(prompt: str, completion: str, test: str, entry_point: str) -> tuple[str, str, str]:
    return solution_source(prompt, completion, entry_point), test, f"check({entry_point})\n"


def check_completion(
    prompt: str,
    completion: str,
    test: str,
    entry_point: str,
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 1024,
    max_processes: int = 32,
    max_file_mb: int = 16,
    max_output_bytes: int = 64_000,
) -> ExecutionResult:
    """Run a HumanEval-style check of ``completion`` in the sandbox.

    The program is :func:`build_program`'s, run as three units in one namespace: the
    solution, the test (which defines ``check``), and ``check(entry_point)``. It passes only
    if ``check`` returned and the program then exited with status 0: an exit before that
    (``sys.exit(0)``, ``os._exit(0)``, ...) fails, and so does a completion that changed the
    builtins the tests use. The limits are :func:`run_program`'s.

    Pass the completion through :func:`extract_code` first when it is raw model output.
    """
    _validate_entry_point(entry_point)
    limits = Limits(timeout_s, memory_mb, max_processes, max_file_mb, max_output_bytes)
    solution, test_part, call = _units(prompt, completion, test, entry_point)
    units = [("solution.py", solution), ("test.py", test_part), ("check.py", call)]
    return execute(units, limits, check=True)
