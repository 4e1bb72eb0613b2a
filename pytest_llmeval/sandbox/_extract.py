"""Getting the Python completion out of model output.

Three shapes of output are recognised:

- **fenced blocks** (```` ```python ````, ```` ``` ````, ``~~~``; an unclosed fence runs to the
  end): the block that defines ``entry_point`` wins, else the first Python (or untagged)
  block with a ``def``, else the first block; prose around the blocks is ignored;
- **whole definitions** (``def entry_point(`` at column 0, as chat models answer): the
  top-level imports, definitions, classes and constants are kept, in order; prose lines
  between them and demo code (``if __name__ == "__main__":``, ``print(...)``, asserts, calls
  of the entry point, ``input()``) are dropped. :func:`build_program` puts such a completion
  after the prompt, so that it replaces the prompt's stub;
- **raw continuations** of the prompt's function body (base models): kept as they are, cut
  at the first stop sequence of lm-evaluation-harness's HumanEval task (``\\nclass``,
  ``\\ndef``, ``\\n#``, ``\\nif``, ``\\nprint``) or a closing fence; if prompt + completion
  still does not parse, at the first line at column 0.

``<think>...</think>`` reasoning is removed first. :func:`extract_code` never raises.

:func:`extract_program` is for whole programs (LiveCodeBench), where top-level statements
such as ``print(...)`` and ``input()`` are the program itself: the last Python (or
untagged) fenced block that parses, else the last such block; without fences, the longest
leading run of lines that parses.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass

from pytest_llmeval.sandbox._humaneval import defines

STOP_SEQUENCES = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")

_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})[ \t]*([^`\n]*?)[ \t]*$")
_PYTHON_TAGS = frozenset({"", "python", "py", "python3", "py3", "ipython"})
_ANY_DEF = re.compile(r"^(?:async[ \t]+)?def[ \t]+\w+[ \t]*\(", re.M)
_INLINE_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n?(.*?)```", re.S | re.I)
_CONTINUATION_LINE = re.compile(r"^(?:[)\]}]|else\b|elif\b|except\b|finally\b|case\b)")
_DEMO_CALLS = frozenset({"print", "input", "main", "testmod", "pprint"})
_MAX_MERGE = 8  # segments tried together before one counts as prose
_MAX_CUTS = 16  # stop positions tried before falling back to the first
_MAX_PROSE_LINES = 64  # trailing lines dropped, at most, to find a program that parses


@dataclass(frozen=True)
class _Block:
    tag: str
    code: str


def extract_code(text: str, prompt: str | None = None, entry_point: str | None = None) -> str:
    """The Python completion in model output ``text`` (see the module docstring).

    ``prompt`` (the code the model continues) and ``entry_point`` (the function under test)
    make the choice better; both are optional. Never raises: on unexpected input the text
    comes back unchanged.
    """
    if not isinstance(text, str):
        return ""
    try:
        return _extract(text, prompt, entry_point)
    except Exception:
        return text


def extract_program(text: str) -> str:
    """The whole Python program in model output ``text`` (see the module docstring).
    Never raises: on unexpected input the text comes back unchanged."""
    if not isinstance(text, str):
        return ""
    try:
        text = _strip_thinking(text.replace("\r\n", "\n"))
        blocks = _fenced_blocks(text)
        pool = [b for b in blocks if b.tag in _PYTHON_TAGS] or blocks
        if pool:
            parsing = [b for b in pool if _parse(b.code) is not None]
            return (parsing or pool)[-1].code.rstrip() + "\n"
        lines = text.split("\n")
        for end in range(len(lines), max(0, len(lines) - _MAX_PROSE_LINES) - 1, -1):
            code = "\n".join(lines[:end]).rstrip()
            if code and _parse(code) is not None:
                return code + "\n"
        return text
    except Exception:
        return text


def _extract(text: str, prompt: str | None, entry_point: str | None) -> str:
    text = _strip_thinking(text.replace("\r\n", "\n"))
    blocks = [] if _continues_before_fence(text) else _fenced_blocks(text)
    if blocks:
        code = _choose(blocks, entry_point)
    elif "```" in text and _INLINE_FENCE.search(text):
        match = _INLINE_FENCE.search(text)
        code = match.group(1) if match else text
    else:
        code = text
    if _is_whole_definition(code, entry_point):
        return _clean_definitions(code, entry_point)
    return _cut_continuation(code, prompt)


def _strip_thinking(text: str) -> str:
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    return text


def _continues_before_fence(text: str) -> bool:
    """Whether the text starts as an (indented) function body before its first fence: then
    that fence closes the completion rather than opening a block."""
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if _FENCE.match(line):
            first = _first_code_line("\n".join(lines[:index]))
            return bool(first) and first[0].isspace()
    return False


def _fenced_blocks(text: str) -> list[_Block]:
    blocks: list[_Block] = []
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, info = opening.group(1), opening.group(2)
        tag = info.split()[0].lower() if info.split() else ""
        body: list[str] = []
        index += 1
        while index < len(lines):
            closing = _FENCE.match(lines[index])
            if (
                closing is not None
                and closing.group(1)[0] == fence[0]
                and len(closing.group(1)) >= len(fence)
                and not closing.group(2)
            ):
                break
            body.append(lines[index])
            index += 1
        index += 1
        code = "\n".join(body)
        if code.strip():
            blocks.append(_Block(tag, code + "\n"))
    return blocks


def _choose(blocks: list[_Block], entry_point: str | None) -> str:
    pool = [block for block in blocks if block.tag in _PYTHON_TAGS] or blocks
    if entry_point:
        for block in pool:
            if defines(block.code, entry_point):
                return block.code
    for block in pool:
        if _ANY_DEF.search(block.code):
            return block.code
    return pool[0].code


def _first_code_line(code: str) -> str:
    for line in code.split("\n"):
        if line.strip():
            return line
    return ""


def _is_whole_definition(code: str, entry_point: str | None) -> bool:
    if entry_point:
        return defines(code, entry_point)
    first = _first_code_line(code)
    return bool(first) and not first[0].isspace() and _ANY_DEF.search(code) is not None


def _parse(code: str) -> ast.Module | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None


def _segments(code: str) -> list[list[str]]:
    """Split at lines that start at column 0 (a new top-level statement, or prose)."""
    segments: list[list[str]] = []
    for line in code.split("\n"):
        starts = bool(line) and not line[0].isspace() and not _CONTINUATION_LINE.match(line)
        after_decorator = bool(segments) and _last_code(segments[-1]).startswith("@")
        if (starts and not after_decorator) or not segments:
            segments.append([line])
        else:
            segments[-1].append(line)
    return segments


def _last_code(lines: list[str]) -> str:
    for line in reversed(lines):
        if line.strip():
            return line
    return ""


def _clean_definitions(code: str, entry_point: str | None) -> str:
    """Keep the parseable top-level code that is not prose or demo, in order."""
    segments = _segments(code)
    kept: list[str] = []
    index = 0
    while index < len(segments):
        for end in range(index + 1, min(len(segments), index + _MAX_MERGE) + 1):
            chunk = "\n".join(line for segment in segments[index:end] for line in segment)
            tree = _parse(chunk)
            if tree is not None:
                kept.extend(_keep_statements(tree, chunk.split("\n"), entry_point))
                index = end
                break
        else:
            index += 1  # not code (prose), or code that never parses
    result = "\n\n".join(kept)
    if result and (entry_point is None or defines(result, entry_point)):
        return result + "\n"
    return code


def _keep_statements(tree: ast.Module, lines: list[str], entry_point: str | None) -> list[str]:
    kept: list[str] = []
    for node in tree.body:
        if _is_demo(node, entry_point):
            continue
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        last = node.end_lineno or node.lineno
        kept.append("\n".join(lines[first - 1 : last]).rstrip())
    return kept


def _called_names(node: ast.AST) -> set[str]:
    names: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            if isinstance(sub.func, ast.Name):
                names.add(sub.func.id)
            elif isinstance(sub.func, ast.Attribute):
                names.add(sub.func.attr)
    return names


def _is_main_guard(node: ast.If) -> bool:
    test = node.test
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
    )


def _is_demo(node: ast.stmt, entry_point: str | None) -> bool:
    """Top-level code that shows the solution off rather than being part of it."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return False
    if isinstance(node, (ast.Assert, ast.Pass, ast.Raise, ast.Delete)):
        return True
    if isinstance(node, ast.If) and _is_main_guard(node):
        return True
    if isinstance(node, ast.AnnAssign) and node.value is None:
        return True  # "Output: 5" in prose parses as an annotation
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return True
    demo_calls = _DEMO_CALLS | ({entry_point} if entry_point else set())
    if isinstance(node, ast.Expr) and not isinstance(node.value, ast.Call):
        return True
    return bool(_called_names(node) & demo_calls)


def _cut_continuation(code: str, prompt: str | None) -> str:
    """Cut at the first stop sequence after which the program still parses (lm-eval cuts at
    the first one, even inside a string); failing that, before the first line at column 0;
    failing that, at the first stop sequence."""
    stops = sorted(
        {
            found.start()
            for stop in (*STOP_SEQUENCES, "\n```", "\n~~~")
            for found in re.finditer(re.escape(stop), code)
        }
    )
    for cut in [*stops[:_MAX_CUTS], len(code)]:
        if _program_parses(prompt, code[:cut]):
            return code[:cut]
    first = code[: stops[0]] if stops else code
    column_zero = re.search(r"\n(?=\S)", first)
    if column_zero is not None and _program_parses(prompt, first[: column_zero.start()]):
        return first[: column_zero.start()]
    return first


def _program_parses(prompt: str | None, body: str) -> bool:
    if prompt is not None:
        return _parse(prompt + body) is not None
    if not body.strip():
        return True
    return _parse("def _body():\n" + body) is not None
