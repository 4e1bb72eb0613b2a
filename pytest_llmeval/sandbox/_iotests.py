"""Input/output tests (LiveCodeBench style): a whole program judged on test cases.

Two kinds of test case, as in LiveCodeBench's data:

- ``stdin``: the program reads the case's ``input`` from standard input and must print its
  ``output`` (compared line by line, whitespace-trimmed, tokens that differ compared as
  decimal numbers);
- ``functional`` (LeetCode): the program defines ``class Solution`` with the method
  ``func_name``; each line of ``input`` is one JSON argument and ``output`` is the JSON
  result.

The judge runs in the sandbox only (:func:`check_io_program`): the program's source is a
string constant of the first unit, and the harness (the second unit) compiles and
executes it per case with ``sys.stdin``/``sys.stdout`` replaced (``open(0)`` reads the
case's input too) and ``SystemExit`` with status 0 treated as the program's normal end.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
import pickle
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pytest_llmeval.sandbox._result import ExecutionResult, Limits
from pytest_llmeval.sandbox._run import execute

TestKind = Literal["stdin", "functional"]


@dataclass(frozen=True)
class IOTest:
    """One test case: ``input`` and expected ``output`` as text, and how to run it."""

    input: str
    output: str
    kind: TestKind = "stdin"


class IOTestError(ValueError):
    """Test cases that cannot be decoded."""


class _StringOnlyUnpickler(pickle.Unpickler):
    """Unpickles plain data only: any class or function reference is refused, so a crafted
    data file cannot run code (LiveCodeBench pickles a JSON string)."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: only plain data")


def _decode_compressed(text: str) -> Any:
    try:
        raw = zlib.decompress(base64.b64decode(text.encode("ascii"), validate=True))
        payload = _StringOnlyUnpickler(io.BytesIO(raw)).load()
    except (binascii.Error, zlib.error, UnicodeEncodeError, ValueError) as exc:
        raise IOTestError(f"neither JSON nor base64/zlib/pickle encoded: {exc}") from None
    except pickle.UnpicklingError as exc:
        raise IOTestError(str(exc)) from None
    if not isinstance(payload, str):
        raise IOTestError(f"the encoded payload is a {type(payload).__name__}, not JSON text")
    return json.loads(payload)


def parse_io_tests(text: str) -> list[IOTest]:
    """Test cases from LiveCodeBench's encodings: a JSON list of ``{"input", "output",
    "testtype"}`` objects, or that JSON pickled, zlib-compressed and base64-encoded (its
    ``private_test_cases``). Empty text gives no tests. Raises :class:`IOTestError`."""
    text = text.strip()
    if not text:
        return []
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = _decode_compressed(text)
    if isinstance(value, str):  # JSON text inside a JSON string
        value = json.loads(value)
    if not isinstance(value, list):
        raise IOTestError(f"expected a list of test cases, got {type(value).__name__}")
    tests = []
    for i, case in enumerate(value):
        if not isinstance(case, dict) or "input" not in case or "output" not in case:
            raise IOTestError(f"test case {i} needs 'input' and 'output'")
        kind = case.get("testtype", "stdin")
        if kind not in ("stdin", "functional"):
            raise IOTestError(f"test case {i}: unknown testtype {kind!r}")
        tests.append(IOTest(input=str(case["input"]), output=str(case["output"]), kind=kind))
    return tests


# The judge, run inside the sandbox as the test unit. Its helpers are bound as keyword
# defaults of `check`, so a program that rebinds this module's globals (through
# `sys.modules["__main__"]`) does not change how its output is judged.
_HARNESS = r"""
import builtins as _builtins
import io as _io
import json as _json
import sys as _sys
import time as _time
from decimal import Decimal as _Decimal, InvalidOperation as _InvalidOperation

_PRELUDE = (
    "from typing import *\n"
    "from collections import *\n"
    "from itertools import *\n"
    "from functools import *\n"
    "from heapq import *\n"
    "from bisect import *\n"
    "import math, string, re, sys, collections, itertools, functools, heapq, bisect\n"
)


def _same_output(expected, got):
    exp = [line.strip() for line in expected.strip().splitlines()]
    out = [line.strip() for line in got.strip().splitlines()]
    if exp == out:
        return True
    if len(exp) != len(out):
        return False
    for e_line, o_line in zip(exp, out):
        e_tok, o_tok = e_line.split(), o_line.split()
        if len(e_tok) != len(o_tok):
            return False
        for a, b in zip(e_tok, o_tok):
            if a == b:
                continue
            try:
                if _Decimal(a) != _Decimal(b):
                    return False
            except (_InvalidOperation, ValueError):
                return False
    return True


def _tuples_as_lists(value):
    if isinstance(value, (list, tuple)):
        return [_tuples_as_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _tuples_as_lists(v) for k, v in value.items()}
    return value


def _show(text, limit=200):
    text = str(text)
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _run_stdin(code, data):
    real_open = _builtins.open
    stdin = _io.TextIOWrapper(_io.BytesIO(data.encode()), encoding="utf-8")
    buffer = _io.BytesIO()
    stdout = _io.TextIOWrapper(buffer, encoding="utf-8", write_through=True)

    def open(file, mode="r", *args, **kwargs):
        if file == 0:
            return _io.BytesIO(data.encode()) if "b" in mode else _io.StringIO(data)
        return real_open(file, mode, *args, **kwargs)

    saved = _sys.stdin, _sys.stdout
    _sys.stdin, _sys.stdout = stdin, stdout
    try:
        exec(code, {"__name__": "__main__", "open": open})
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise AssertionError(f"the program exited with status {exc.code!r}") from None
    finally:
        stdout.flush()
        _sys.stdin, _sys.stdout = saved
    return buffer.getvalue().decode("utf-8", "replace")


def check(
    source,
    *,
    _tests=TESTS,
    _func_name=FUNC_NAME,
    _per_test=PER_TEST_S,
    _same=_same_output,
    _tuples_as_lists=_tuples_as_lists,
    _show=_show,
    _run_stdin=_run_stdin,
    _loads=_json.loads,
    _clock=_time.monotonic,
    _prelude=_PRELUDE,
):
    code = compile(_prelude + source, "solution.py", "exec")
    solution = None
    if any(kind == "functional" for _, _, kind in _tests):
        namespace = {"__name__": "solution"}
        exec(code, namespace)
        solution = namespace.get("Solution")
        if solution is None:
            raise AssertionError("the program defines no class Solution")
    for number, (given, expected, kind) in enumerate(_tests, 1):
        started = _clock()
        if kind == "functional":
            args = [_loads(line) for line in given.split("\n") if line.strip()]
            got = getattr(solution(), _func_name)(*args)
            if _tuples_as_lists(got) != _tuples_as_lists(_loads(expected)):
                raise AssertionError(
                    f"test {number}: expected {_show(expected)}, got {_show(_tuples_as_lists(got))}"
                )
        else:
            got = _run_stdin(code, given)
            if not _same(expected, got):
                raise AssertionError(
                    f"test {number}: expected {_show(expected)}, got {_show(got)}"
                )
        if _clock() - started > _per_test:
            raise TimeoutError(f"test {number}: time limit of {_per_test} s exceeded")
"""


def check_io_program(
    source: str,
    tests: Sequence[IOTest],
    *,
    func_name: str = "",
    per_test_timeout_s: float = 6.0,
    memory_mb: int = 1024,
    max_processes: int = 32,
    max_file_mb: int = 16,
    max_output_bytes: int = 64_000,
) -> ExecutionResult:
    """Judge the whole program ``source`` on ``tests`` in the sandbox.

    Passes when every case gives its expected output, each within ``per_test_timeout_s``;
    the run as a whole gets ``per_test_timeout_s`` per case plus one second. Functional
    cases need ``func_name`` (the method of ``Solution`` to call). A program ending with
    ``sys.exit(0)`` ends its case normally; any other way of leaving early (``os._exit``)
    fails, as in :func:`check_completion`.
    """
    if not tests:
        raise ValueError("no test cases to judge the program on")
    if any(t.kind == "functional" for t in tests) and not func_name.isidentifier():
        raise ValueError(f"functional tests need a method name, not {func_name!r}")
    if not (math.isfinite(per_test_timeout_s) and per_test_timeout_s > 0):
        raise ValueError(f"per_test_timeout_s must be positive, not {per_test_timeout_s}")
    limits = Limits(
        per_test_timeout_s * len(tests) + 1.0,
        memory_mb,
        max_processes,
        max_file_mb,
        max_output_bytes,
    )
    cases = [[t.input, t.output, t.kind] for t in tests]
    harness = (
        f"TESTS = tuple(tuple(case) for case in __import__('json').loads({json.dumps(cases)!r}))\n"
        f"FUNC_NAME = {func_name!r}\n"
        f"PER_TEST_S = {float(per_test_timeout_s)!r}\n" + _HARNESS
    )
    units = [
        ("program_source.py", f"SOURCE = {source!r}\n"),
        ("judge.py", harness),
        ("run.py", "check(SOURCE)\n"),
    ]
    return execute(units, limits, check=True)
