"""Extracting the completion from model output: fences, prose, several blocks, raw
continuations, whole definitions; and that extraction never raises."""

from __future__ import annotations

import ast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmeval.sandbox import STOP_SEQUENCES, build_program, extract_code

# A made-up problem in HumanEval's shape (not from the benchmark).
PROMPT = (
    "from typing import List\n"
    "\n"
    "\n"
    "def scale(values: List[int], factor: int) -> List[int]:\n"
    '    """Multiply every value by factor.\n'
    "    >>> scale([1, 2], 3)\n"
    "    [3, 6]\n"
    '    """\n'
)
ENTRY = "scale"
BODY = "    return [v * factor for v in values]\n"
FULL = "def scale(values, factor):\n    return [v * factor for v in values]\n"


def runs_correctly(code: str) -> bool:
    """Whether prompt + extracted code + a test make a program that compiles and redefines
    nothing it should not. Compiled only: extracted code is never run in the test process
    (tests/sandbox/test_sandbox.py runs such programs in the sandbox)."""
    test = "def check(f):\n    assert f([1, 2], 3) == [3, 6]\n"
    compile(build_program(PROMPT, code, test, ENTRY), "program.py", "exec")
    return True


# ------------------------------------------------------------------ fenced blocks


@pytest.mark.parametrize(
    "text",
    [
        f"```python\n{FULL}```",
        f"```py\n{FULL}```",
        f"```Python3\n{FULL}```",
        f"```\n{FULL}```",
        f"~~~python\n{FULL}~~~",
        f"````python\n{FULL}````",
        f"Sure! Here is the function:\n\n```python\n{FULL}```\n\nIt multiplies each value.",
        f"```python\n{FULL}",  # cut off before the closing fence
        f"  ```python\n{FULL}  ```",
    ],
)
def test_fenced_block(text: str) -> None:
    code = extract_code(text, PROMPT, ENTRY)
    assert code.strip() == FULL.strip()
    assert runs_correctly(code)


def test_demo_code_in_the_block_is_dropped() -> None:
    text = (
        "```python\nimport math\n\n"
        f"{FULL}\n"
        "print(scale([1], 2))\n"
        "assert scale([1], 2) == [2]\n"
        "if __name__ == '__main__':\n    print(scale([3], 3))\n"
        "```"
    )
    code = extract_code(text, PROMPT, ENTRY)
    assert code == f"import math\n\n{FULL}"
    assert runs_correctly(code)


def test_prefers_the_block_that_defines_the_entry_point() -> None:
    text = (
        "Usage:\n```python\nprint(scale([1, 2], 3))\n```\n"
        "Helper for something else:\n```python\ndef other():\n    return 1\n```\n"
        f"The solution:\n```python\n{FULL}```\n"
        "Output:\n```text\n[3, 6]\n```\n"
    )
    assert extract_code(text, PROMPT, ENTRY).strip() == FULL.strip()


def test_python_blocks_win_over_other_languages() -> None:
    text = "```bash\npip install nothing\n```\n```python\nx = 1\n```"
    assert extract_code(text).strip() == "x = 1"


def test_without_entry_point_the_first_block_with_a_def() -> None:
    text = "```python\nx = 1\n```\n```python\ndef f():\n    return 2\n```"
    assert extract_code(text).strip() == "def f():\n    return 2"


def test_block_holding_only_a_body_is_a_continuation() -> None:
    text = f"```python\n{BODY}```"
    code = extract_code(text, PROMPT, ENTRY)
    assert code.rstrip() == BODY.rstrip()
    assert runs_correctly(code)


def test_reasoning_is_ignored() -> None:
    wrong = "def scale(v, f):\n    return None\n"
    text = f"<think>maybe\n```python\n{wrong}```\n</think>\n```python\n{FULL}```"
    assert extract_code(text, PROMPT, ENTRY).strip() == FULL.strip()


# ------------------------------------------------------------------ whole definitions


def test_whole_definition_without_fence_with_prose_around() -> None:
    text = (
        "Here is my answer.\n\n"
        "def helper(x, f):\n    return x * f\n\n"
        "Explanation: the helper multiplies.\n"
        "def scale(values, factor):\n    return [helper(v, factor) for v in values]\n\n"
        "print(scale([1, 2], 3))\n"
        "Output: [3, 6]\n"
        "This runs in O(n) time.\n"
    )
    code = extract_code(text, PROMPT, ENTRY)
    assert "Explanation" not in code and "print" not in code and "Output" not in code
    assert "def helper" in code and "def scale" in code
    assert runs_correctly(code)


def test_whole_definition_keeps_decorators_imports_and_constants() -> None:
    text = (
        "import functools\nLIMIT = 10\n\n"
        "@functools.lru_cache(maxsize=None)\ndef double(x):\n    return 2 * x\n\n"
        "def scale(values, factor):\n    return [v * factor for v in values][:LIMIT]\n"
    )
    code = extract_code(text, PROMPT, ENTRY)
    assert code.startswith("import functools\n\nLIMIT = 10\n\n@functools.lru_cache")
    assert runs_correctly(code)


def test_echoed_prompt_with_body() -> None:
    code = extract_code(PROMPT + BODY + "\n\nprint(scale([1], 2))\n", PROMPT, ENTRY)
    assert "print" not in code
    assert runs_correctly(code)


def test_build_program_uses_a_whole_definition_after_the_prompt() -> None:
    program = build_program(PROMPT, FULL, "def check(f):\n    pass\n", ENTRY)
    assert program.startswith(PROMPT)
    assert program.index(FULL) > len(PROMPT) - 1
    assert program.endswith("check(scale)\n")


def test_build_program_for_a_continuation_is_the_humaneval_concatenation() -> None:
    test = "def check(f):\n    pass\n"
    assert (
        build_program(PROMPT, BODY, test, ENTRY) == PROMPT + BODY + "\n" + test + "\ncheck(scale)\n"
    )


def test_build_program_rejects_a_bad_entry_point() -> None:
    with pytest.raises(ValueError):
        build_program(PROMPT, BODY, "", "scale); import os; (")


# ------------------------------------------------------------------ raw continuations


@pytest.mark.parametrize(
    "tail",
    [
        "\n\ndef main():\n    print(scale([1], 2))\n",
        "\n\nclass Helper:\n    pass\n",
        "\n# test it\nprint(scale([1], 2))\n",
        "\nif __name__ == '__main__':\n    main()\n",
        "\nprint(scale([1, 2], 3))\n",
        "\n```\nThat is all.",
    ],
)
def test_raw_continuation_is_cut_at_stop_sequences(tail: str) -> None:
    code = extract_code(BODY + tail, PROMPT, ENTRY)
    assert code.rstrip("\n") == BODY.rstrip("\n")  # blank lines before the stop stay
    assert runs_correctly(code)


def test_stop_sequences_are_lm_evals() -> None:
    assert STOP_SEQUENCES == ("\nclass", "\ndef", "\n#", "\nif", "\nprint")


def test_raw_continuation_is_kept_as_is() -> None:
    body = (
        "    out = []\n\n"
        "    for v in values:\n"
        "        out.append(v * factor)  # scale\n"
        "    return out\n"
    )
    assert extract_code(body, PROMPT, ENTRY) == body


def test_raw_continuation_followed_by_prose() -> None:
    code = extract_code(BODY + "This returns each value times the factor.\n", PROMPT, ENTRY)
    assert code.rstrip() == BODY.rstrip()
    assert runs_correctly(code)


def test_stop_sequence_inside_a_string_does_not_cut() -> None:
    body = '    note = """\nif the values are empty\n"""\n    return [v * factor for v in values]\n'
    code = extract_code(body + "\ndef unrelated():\n    pass\n", PROMPT, ENTRY)
    assert code == body
    assert runs_correctly(code)


def test_raw_continuation_without_prompt() -> None:
    assert extract_code(BODY + "\nprint(1)\n") == BODY


# ------------------------------------------------------------------ totality


@pytest.mark.parametrize(
    "text", ["", "\n\n", "```", "```python", "~~~\n~~~", "def", "\x00", "```\n\x00\n```"]
)
def test_degenerate_inputs(text: str) -> None:
    assert isinstance(extract_code(text, PROMPT, ENTRY), str)
    assert isinstance(extract_code(text), str)


_CODEISH = st.text(
    alphabet=st.sampled_from(
        list("def scale(x):\n    return x\n```python~~~#if print class\t'\"()[]{}:=@<>/think\\")
    ),
    max_size=400,
)


@settings(deadline=None, max_examples=150)
@given(
    text=st.one_of(st.text(max_size=400), _CODEISH),
    prompt=st.one_of(st.none(), st.text(max_size=60)),
)
def test_never_raises(text: str, prompt: str | None) -> None:
    for entry in (None, ENTRY):
        assert isinstance(extract_code(text, prompt, entry), str)


@settings(deadline=None, max_examples=50)
@given(
    st.lists(
        st.sampled_from(["x = 1", "def f():\n    return 1", "print(f())", "Some prose.", ""]),
        max_size=8,
    )
)
def test_whole_definitions_extract_to_valid_python(lines: list[str]) -> None:
    text = "\n".join(lines)
    code = extract_code(text)
    if "def f" in text and code != text:
        ast.parse(code)
