"""Whole programs judged on input/output test cases (LiveCodeBench style), in the sandbox.

The problems are made up; the encodings are LiveCodeBench's (JSON, and JSON text pickled,
zlib-compressed and base64-encoded for private tests).
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmeval.sandbox import (
    IOTest,
    IOTestError,
    check_io_program,
    extract_program,
    parse_io_tests,
)

SUM_TESTS = [IOTest("3\n1 2 3\n", "6\n"), IOTest("2\n5 5\n", "10\n"), IOTest("1\n-7\n", "-7")]
K_LARGEST = [
    IOTest("[3, 1, 2]\n2", "[3, 2]", "functional"),
    IOTest("[1, 9, 9, 4]\n3", "[9, 9, 4]", "functional"),
]
K_LARGEST_OK = (
    "class Solution:\n"
    "    def kLargest(self, nums: List[int], k: int) -> List[int]:\n"
    "        return tuple(sorted(nums, reverse=True)[:k])\n"
)


def encode(cases: list[dict[str, str]]) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


# --------------------------------------------------------------------------- decoding


def test_parse_json_and_compressed_forms() -> None:
    cases = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    assert parse_io_tests(json.dumps(cases)) == [IOTest("1\n", "2\n", "stdin")]
    assert parse_io_tests(encode(cases)) == [IOTest("1\n", "2\n", "stdin")]
    assert parse_io_tests(json.dumps(json.dumps(cases))) == [IOTest("1\n", "2\n", "stdin")]
    assert parse_io_tests("") == []
    assert parse_io_tests(encode([])) == []
    functional = [{"input": "[1]", "output": "1", "testtype": "functional"}]
    assert parse_io_tests(json.dumps(functional))[0].kind == "functional"


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "input": st.text(max_size=30),
                "output": st.text(max_size=30),
                "testtype": st.sampled_from(["stdin", "functional"]),
            }
        ),
        max_size=5,
    )
)
def test_compressed_encoding_round_trips(cases: list[dict[str, str]]) -> None:
    expected = [IOTest(c["input"], c["output"], c["testtype"]) for c in cases]  # type: ignore[arg-type]
    assert parse_io_tests(encode(cases)) == expected


def test_a_pickle_that_references_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    hostile = base64.b64encode(zlib.compress(pickle.dumps(Exploit()))).decode()
    with pytest.raises(IOTestError, match=r"refused to load .*system"):
        parse_io_tests(hostile)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json, not base64 !", "neither JSON nor"),
        ('{"input": "1"}', "expected a list"),
        ('[{"input": "1"}]', "test case 0 needs 'input' and 'output'"),
        ('[{"input": "1", "output": "2", "testtype": "file"}]', "unknown testtype 'file'"),
        (base64.b64encode(zlib.compress(pickle.dumps([1, 2]))).decode(), "a list, not JSON"),
    ],
)
def test_malformed_test_cases_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(IOTestError, match=message):
        parse_io_tests(text)


# --------------------------------------------------------------------------- judging


@pytest.mark.parametrize(
    "program",
    [
        "n = int(input())\nprint(sum(map(int, input().split())))\n",
        "import sys\ndata = sys.stdin.read().split()\nprint(sum(map(int, data[1:])))\n",
        "data = open(0).read().split()\nprint(sum(map(int, data[1:])))\n",
        "import sys\nd = sys.stdin.buffer.read().split()\n"
        "sys.stdout.write(str(sum(map(int, d[1:]))))\n",
        "import sys\ninput = sys.stdin.readline\nn = int(input())\n"
        "print(sum(map(int, input().split())))\nsys.exit(0)\n",
        "def main():\n    n = int(input())\n    print(sum(map(int, input().split())))\n\n"
        "if __name__ == '__main__':\n    main()\n",
    ],
    ids=["input", "stdin.read", "open0", "buffer", "readline-exit0", "main-guard"],
)
def test_correct_stdin_programs_pass(program: str) -> None:
    result = check_io_program(program, SUM_TESTS)
    assert result.status == "passed", result.reason


def test_wrong_output_names_the_test() -> None:
    # Right on the first (public-looking) case only: every case is run.
    result = check_io_program("input()\ninput()\nprint(6)\n", SUM_TESTS)
    assert result.status == "failed"
    assert "test 2: expected '10\\n', got '6\\n'" in result.reason


def test_numeric_tokens_compare_as_decimals_and_lines_must_match() -> None:
    tests = [IOTest("1 4\n", "0.25\n")]
    assert check_io_program("print('0.250')", tests).status == "passed"
    assert check_io_program("print(' 0.25  \\n')", tests).status == "passed"
    assert check_io_program("print(0.2501)", tests).status == "failed"
    assert check_io_program("print(0.25)\nprint(1)", tests).status == "failed"
    assert check_io_program("print('a')", [IOTest("", "A")]).status == "failed"


def test_non_zero_exit_fails() -> None:
    result = check_io_program("import sys\nprint(6)\nsys.exit(3)\n", SUM_TESTS[:1])
    assert result.status == "failed"
    assert "exited with status 3" in result.reason


def test_functional_cases_call_the_solution_method() -> None:
    result = check_io_program(K_LARGEST_OK, K_LARGEST, func_name="kLargest")
    assert result.status == "passed", result.reason  # a tuple counts as the JSON list
    wrong = K_LARGEST_OK.replace("[:k]", "[:k + 1]")
    result = check_io_program(wrong, K_LARGEST, func_name="kLargest")
    assert result.status == "failed"
    assert "test 1: expected '[3, 2]', got '[3, 2, 1]'" in result.reason
    plain_function = "def kLargest(nums, k):\n    return nums\n"
    result = check_io_program(plain_function, K_LARGEST, func_name="kLargest")
    assert "defines no class Solution" in result.reason


def test_invalid_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="no test cases"):
        check_io_program("print(1)", [])
    with pytest.raises(ValueError, match="functional tests need a method name"):
        check_io_program(K_LARGEST_OK, K_LARGEST)
    with pytest.raises(ValueError, match="per_test_timeout_s"):
        check_io_program("print(1)", SUM_TESTS, per_test_timeout_s=0)


def test_an_endless_program_times_out_within_its_budget() -> None:
    started = time.monotonic()
    result = check_io_program("while True:\n    pass\n", SUM_TESTS, per_test_timeout_s=1.0)
    assert result.status == "timeout"
    assert time.monotonic() - started < 3 * 1.0 + 1.0 + 5.0  # 3 cases, 1 s each, + 1 s


def test_a_slow_case_fails_on_the_per_case_limit() -> None:
    """A right program that sleeps 1.5 s on the second case only (within the run's budget,
    over the case's) fails on that case's time limit, classed as a timeout: it was raised
    as an AssertionError and classed a wrong answer (and the program here was wrong on the
    first case, so the limit was never reached)."""
    from pytest_llmeval.eval import classify

    program = (
        "import time\nn = int(input())\nif n == 2:\n    time.sleep(1.5)\n"
        "print(sum(map(int, input().split())))\n"
    )
    assert check_io_program(program.replace("1.5", "0"), SUM_TESTS).status == "passed"
    result = check_io_program(program, SUM_TESTS, per_test_timeout_s=1.0)
    assert result.status == "failed"
    assert "test 2: time limit of 1.0 s exceeded" in result.reason
    record = {
        "output": "x",
        "extracted": program,
        "details": {"status": result.status, "reason": result.reason},
    }
    assert classify(record) == "execution_timeout"


@pytest.mark.parametrize(
    "attack",
    [
        "import os\nos._exit(0)\n",
        "import __main__\n__main__._same_output = lambda a, b: True\nprint(1)\n",
        "import __main__\n__main__.check = lambda source: None\nprint(1)\n",
        "import sys\nsys.modules['__main__'].TESTS = ()\nprint(1)\n",
    ],
    ids=["os._exit", "patch-comparison", "patch-check", "patch-tests"],
)
def test_tampering_with_the_judge_is_not_a_pass(attack: str) -> None:
    result = check_io_program(attack, SUM_TESTS)
    assert result.status == "failed"  # judged and failed (not an error of the sandbox)


def test_writes_outside_the_working_directory_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "keep.txt"
    target.write_text("keep me\n")
    tmp_path.chmod(0o755)
    target.chmod(0o644)
    result = check_io_program(f"open({str(target)!r}, 'w').write('gone')\nprint(6)\n", SUM_TESTS)
    assert result.status == "failed"
    assert target.read_text() == "keep me\n"


# --------------------------------------------------------------------------- extraction


def test_extract_program_takes_the_last_python_block() -> None:
    text = (
        "Here is my idea:\n```python\nprint('draft'\n```\nFixed version:\n"
        "```python\nn = int(input())\nprint(n)\n```\nThis reads n and prints it."
    )
    assert extract_program(text) == "n = int(input())\nprint(n)\n"


def test_extract_program_keeps_top_level_statements_and_handles_open_fences() -> None:
    assert extract_program("```py\nimport sys\nprint(input())\n") == "import sys\nprint(input())\n"
    raw = "n = int(input())\nprint(n * 2)\nThis program doubles n."
    assert extract_program(raw) == "n = int(input())\nprint(n * 2)\n"
    assert extract_program("<think>use ```python\nx```</think>print(1)") == "print(1)\n"
    assert extract_program("```text\nsample\n```\n```python\nprint(2)\n```") == "print(2)\n"
