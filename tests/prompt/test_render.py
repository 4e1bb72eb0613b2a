"""Prompt rendering: strict templates, list rendering, the few-shot block, real prompts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_llmeval.prompt import (
    TemplateRenderProblem,
    TemplateSyntaxProblem,
    check_template,
    render,
    render_list,
)

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
SHARED = REPO / ".." / "shared" / "benchmarks"


def _shared() -> Path:
    if not SHARED.is_dir():
        pytest.skip(
            f"shared benchmark data not found at {SHARED} (shared/benchmarks beside the repo)"
        )
    return SHARED


# --------------------------------------------------------------------------- render


def test_render_fields() -> None:
    assert render("Q: {{ question }}\nA:", {"question": "why?"}) == "Q: why?\nA:"
    assert render("{{ choices[1] }}", {"choices": ["x", "y"]}) == "y"
    assert render("line\n", {}) == "line\n"


def test_render_no_autoescape() -> None:
    assert render("{{ q }}", {"q": "<b> & 'x'"}) == "<b> & 'x'"


def test_undefined_field_names_available_fields() -> None:
    with pytest.raises(TemplateRenderProblem) as info:
        render("{{ questoin }}", {"question": "q", "answer": "a"})
    text = str(info.value)
    assert "'questoin' is undefined" in text
    assert "the document has fields: answer, question" in text


def test_undefined_in_condition_raises() -> None:
    with pytest.raises(TemplateRenderProblem, match="'missing' is undefined"):
        render("{% if missing %}x{% endif %}", {"a": 1})


def test_undefined_with_empty_doc() -> None:
    with pytest.raises(TemplateRenderProblem, match=r"fields: \(none\)"):
        render("{{ x }}", {})


def test_sandbox_blocks_unsafe_access() -> None:
    with pytest.raises(TemplateRenderProblem):
        render("{{ x.__class__.__mro__ }}", {"x": "s"})
    with pytest.raises(TemplateRenderProblem):
        render("{% set _ = xs.append(1) %}{{ xs }}", {"xs": []})


def test_check_template() -> None:
    check_template("{{ a }} {% for x in xs %}{{ x }}{% endfor %}")
    with pytest.raises(TemplateSyntaxProblem, match="line 2"):
        check_template("ok\n{{ a ")


def test_after_filter() -> None:
    doc = {"answer": "work 3 + 4 = 7\n#### 7"}
    assert render("{{ answer | after('####') }}", doc) == " 7"
    assert render("{{ answer | after('####') | trim }}", doc) == "7"
    assert render("{{ 'a#b#c' | after('#') }}", {}) == "c"
    assert render("{{ 'no marker' | after('####') }}", {}) == "no marker"
    assert render("{{ n | after('.') }}", {"n": 3.25}) == "25"


def test_render_list_expression() -> None:
    doc = {"choices": ["red", "green", 3]}
    assert render_list("{{ choices }}", doc) == ["red", "green", "3"]
    assert render_list("  {{ choices[:2] }} ", doc) == ["red", "green"]
    assert render_list("{{ options }}", {"options": ("x", "y")}) == ["x", "y"]


def test_render_list_literal() -> None:
    assert render_list("['yes', 'no']", {}) == ["yes", "no"]
    assert render_list('["{{ a }}", "{{ b }}"]', {"a": "x", "b": "y"}) == ["x", "y"]
    # A field holding the text of a list is parsed as a literal.
    assert render_list("{{ raw }}", {"raw": json.dumps(["p", "q"])}) == ["p", "q"]


@pytest.mark.parametrize(
    ("template", "doc"),
    [("{{ x }}", {"x": "plain text"}), ("{{ n }}", {"n": 5}), ("{{ missing }}", {"x": 1})],
)
def test_render_list_failures(template: str, doc: dict[str, object]) -> None:
    with pytest.raises(TemplateRenderProblem):
        render_list(template, doc)
