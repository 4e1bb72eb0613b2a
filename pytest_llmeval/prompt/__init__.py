"""Prompt building: templates, few-shot blocks."""

from pytest_llmeval.prompt._render import (
    FewShotBlock,
    TemplateRenderProblem,
    TemplateSyntaxProblem,
    build_fewshot_block,
    check_template,
    render,
    render_list,
)

__all__ = [
    "FewShotBlock",
    "TemplateRenderProblem",
    "TemplateSyntaxProblem",
    "build_fewshot_block",
    "check_template",
    "render",
    "render_list",
]
