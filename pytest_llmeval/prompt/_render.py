"""Prompt rendering: Jinja2 templates over a document, plus the fixed few-shot block.

Templates run in Jinja's immutable sandbox with undefined variables as errors, so a
typo in a field name fails loudly instead of rendering an empty string.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateSyntaxProblem(ValueError):
    """A template does not parse."""


class TemplateRenderProblem(ValueError):
    """A template failed to render for a document (e.g. an unknown field)."""


def _after(value: str, marker: str) -> str:
    """Text after the last ``marker`` (the whole text when absent)."""
    return str(value).rsplit(marker, 1)[-1]


def _seeded_permutation(values: Iterable[Any], seed: object) -> list[Any]:
    """``values`` shuffled by a permutation that depends only on ``seed`` and their number.

    Position ``i`` is ranked by the SHA-256 hex digest of ``f"{seed}\\x00{i}"`` (UTF-8), so
    the order is the same on every machine and Python version, and two lists of the same
    length get the same permutation with the same seed: ``[0, 1, 2, 3] |
    seeded_permutation(id)`` tells where each element of a 4-item list went. Used to shuffle
    answer options per item (GPQA) without relying on a global random state.
    """
    items = list(values)
    keys = [hashlib.sha256(f"{seed}\x00{i}".encode()).hexdigest() for i in range(len(items))]
    return [items[i] for i in sorted(range(len(items)), key=keys.__getitem__)]


def _called_function(code: str) -> str:
    """The function a line of Python test code calls: the first call of a plain name, in
    source order, that is not a builtin (``assert set(common(a, b)) == {1}`` gives
    ``common``), else the first call of a plain name. Used to find the function under test
    in an assert (MBPP). Code that does not parse or calls no plain name is a template error.
    """
    text = str(code).strip()
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        raise jinja2.exceptions.FilterArgumentError(
            f"called_function: not Python code: {text[:80]!r}"
        ) from None
    calls = sorted(
        (node.lineno, node.col_offset, node.func.id)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    )
    if not calls:
        raise jinja2.exceptions.FilterArgumentError(
            f"called_function: no function call in {text[:80]!r}"
        )
    for _, _, name in calls:
        if not hasattr(builtins, name):
            return name
    return calls[0][2]


def _from_json(text: str) -> Any:
    """Parse a JSON string field (LiveCodeBench's ``metadata``); empty text gives ``{}``."""
    text = str(text).strip()
    if not text:
        return {}
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise jinja2.exceptions.FilterArgumentError(f"from_json: {exc}: {text[:80]!r}") from None


_ENV = ImmutableSandboxedEnvironment(
    undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
)
_ENV.filters["after"] = _after
_ENV.filters["seeded_permutation"] = _seeded_permutation
_ENV.filters["called_function"] = _called_function
_ENV.filters["from_json"] = _from_json


@lru_cache(maxsize=512)
def _compile(template: str) -> jinja2.Template:
    try:
        return _ENV.from_string(template)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateSyntaxProblem(f"{exc.message} (line {exc.lineno})") from None


@lru_cache(maxsize=512)
def _compile_expression(expression: str) -> Any:
    """One expression compiled once (a list template is evaluated for every item of a
    task at collection: compiling it anew each time was half of collecting MMLU)."""
    return _ENV.compile_expression(expression, undefined_to_none=False)


def check_template(template: str) -> None:
    """Raise TemplateSyntaxProblem if ``template`` does not parse."""
    _compile(template)


def render(template: str, doc: Mapping[str, Any]) -> str:
    """Render ``template`` with the fields of ``doc``."""
    try:
        return _compile(template).render(**doc)
    except jinja2.UndefinedError as exc:
        fields = ", ".join(sorted(str(k) for k in doc)) or "(none)"
        raise TemplateRenderProblem(f"{exc.message}; the document has fields: {fields}") from None
    except jinja2.TemplateError as exc:
        raise TemplateRenderProblem(str(exc)) from None
    except Exception as exc:  # a method called in a template failed on this document's data
        raise TemplateRenderProblem(f"{type(exc).__name__}: {exc}") from None


def render_list(template: str, doc: Mapping[str, Any]) -> list[str]:
    """Render a template that yields a list (``"{{ choices }}"``).

    A template that is exactly one expression returns that object when it is a list;
    otherwise the rendered text is parsed as a Python/JSON list literal.
    """
    stripped = template.strip()
    if stripped.startswith("{{") and stripped.endswith("}}") and stripped.count("{{") == 1:
        try:
            value = _compile_expression(stripped[2:-2].strip())(**doc)
        except jinja2.UndefinedError as exc:
            raise TemplateRenderProblem(exc.message or str(exc)) from None
        except jinja2.TemplateError as exc:
            raise TemplateRenderProblem(str(exc)) from None
        except Exception as exc:  # a method called in the expression failed on this data
            raise TemplateRenderProblem(f"{type(exc).__name__}: {exc}") from None
        if isinstance(value, (list, tuple)):
            return [str(v) for v in value]
    text = render(template, doc)
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise TemplateRenderProblem(f"does not render a list: {text[:80]!r}") from None
    if not isinstance(value, (list, tuple)):
        raise TemplateRenderProblem(f"does not render a list: {text[:80]!r}")
    return [str(v) for v in value]
