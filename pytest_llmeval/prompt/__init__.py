"""Prompt building: templates, few-shot examples, conversations for chat templates."""

from pytest_llmeval.prompt._chat import (
    CHAT_MODES,
    Message,
    as_dicts,
    as_plain_text,
    build_messages,
    chat_template_problem,
    check_chat_template,
    fold_system,
    maybe_delimit,
    messages_from_json,
    render_chat_template,
    single_turn,
    system_message,
)
from pytest_llmeval.prompt._render import (
    TemplateRenderProblem,
    TemplateSyntaxProblem,
    check_template,
    render,
    render_list,
)

__all__ = [
    "CHAT_MODES",
    "Message",
    "TemplateRenderProblem",
    "TemplateSyntaxProblem",
    "as_dicts",
    "as_plain_text",
    "build_messages",
    "chat_template_problem",
    "check_chat_template",
    "check_template",
    "fold_system",
    "maybe_delimit",
    "messages_from_json",
    "render",
    "render_chat_template",
    "render_list",
    "single_turn",
    "system_message",
]
