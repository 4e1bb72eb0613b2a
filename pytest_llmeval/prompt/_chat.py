"""Conversations for chat models: the messages a task's prompt becomes under a chat template.

The structure follows lm-evaluation-harness (``--apply_chat_template``,
``--fewshot_as_multiturn``, ``--system_instruction``) so that the rendered prompts are the
same text, byte for byte:

- the system message is the run's system prompt, the spec's system prompt and the task
  description, each joined to the next by the few-shot separator unless one side already
  has whitespace at the seam (lm-eval's ``maybe_delimit``); no system message when all are
  empty (the template may then insert its own default);
- each few-shot example is a user turn (its question) and an assistant turn (its target);
- the item's question is the last user turn; the template's generation prompt opens the
  assistant turn.

Single-turn (``multiturn=False``): the few-shot turns and the question are joined into one
user message as plain text (question, target delimiter, target, few-shot separator, ...),
lm-eval's ``multiturn_to_singleturn``. A verbatim few-shot text block (BBH's published
prompts) cannot be split into turns: it is always part of the user message.

An assistant prefix (a spec's ``chat_form.prompt.assistant_prefix``, lm-eval's
``gen_prefix``) is a last, open assistant turn: single-turn keeps it apart from the user
message, and the template renders it as a turn the model continues (transformers'
``continue_final_message``).

The same messages render as plain text when no chat template applies (``as_plain_text``),
which is exactly the prompt of a run without chat template.

Rendering itself belongs to the model (its tokenizer's template, or the server's): see
:class:`pytest_llmeval.model.ChatTemplate`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Role = Literal["system", "user", "assistant"]
CHAT_MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class Message:
    """One turn of a conversation. ``delimiter`` is what follows the content when the
    conversation is written as plain text (the target delimiter after a question, the
    few-shot separator after an answer); it is never part of a chat message."""

    role: Role
    content: str
    delimiter: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


def maybe_delimit(prefix: str | None, suffix: str | None, delimiter: str) -> str:
    """``prefix + delimiter + suffix``, without the delimiter when either side is empty or
    has whitespace at the seam (lm-eval's rule for the system message)."""
    if not prefix:
        return suffix or ""
    if not suffix:
        return prefix
    if prefix[-1].isspace() or suffix[0].isspace():
        return prefix + suffix
    return prefix + delimiter + suffix


def build_messages(
    *,
    system: str,
    examples: Sequence[tuple[str, str]],
    question: str,
    target_delimiter: str,
    fewshot_separator: str,
    fewshot_text: str | None = None,
    assistant_prefix: str = "",
) -> tuple[Message, ...]:
    """The conversation of one item (see the module docstring): ``system`` (already joined
    from the system prompts and the description, may be empty), the few-shot ``examples``
    as (question, target) pairs, or a verbatim ``fewshot_text`` block, and the item's
    ``question``; an ``assistant_prefix`` opens the assistant's turn after it (the model
    continues that turn: lm-eval's ``gen_prefix``)."""
    messages: list[Message] = []
    if system:
        messages.append(Message("system", system))
    if fewshot_text is not None:
        messages.append(Message("user", fewshot_text + question))
    else:
        for q, a in examples:
            messages.append(Message("user", q, target_delimiter))
            messages.append(Message("assistant", a, fewshot_separator))
        messages.append(Message("user", question))
    if assistant_prefix:
        messages.append(Message("assistant", assistant_prefix))
    return tuple(messages)


def system_message(parts: Sequence[str | None], separator: str) -> str:
    """The system message from its parts in order (run-wide system prompt, the spec's
    system prompt, the description), joined as lm-eval joins its system instruction and
    description."""
    text = ""
    for part in parts:
        text = maybe_delimit(text, part, separator)
    return text


def single_turn(messages: Sequence[Message]) -> tuple[Message, ...]:
    """The few-shot turns and the question as one user message (the system message kept):
    lm-eval's ``multiturn_to_singleturn``."""
    if not messages:
        return ()
    system = [m for m in messages[:1] if m.role == "system"]
    rest = list(messages[len(system) :])
    opened = [rest.pop()] if len(rest) > 1 and rest[-1].role == "assistant" else []
    if not rest:
        return tuple(system)
    text = "".join(m.content + m.delimiter for m in rest[:-1]) + rest[-1].content
    return (*system, Message("user", text), *opened)


def as_plain_text(messages: Sequence[Message]) -> str:
    """The conversation as the raw prompt of a run without chat template: every content
    followed by its delimiter (the last one's dropped)."""
    if not messages:
        return ""
    return "".join(m.content + m.delimiter for m in messages[:-1]) + messages[-1].content


def as_dicts(messages: Sequence[Message]) -> list[dict[str, str]]:
    return [m.to_dict() for m in messages]


def fold_system(messages: Sequence[Message], separator: str) -> tuple[Message, ...]:
    """For templates that refuse a system role (Gemma's raise "System role not supported"):
    the system text becomes the start of the first user message, joined with ``separator``
    (lm-eval drops the system message instead, losing a task's description)."""
    if not messages or messages[0].role != "system":
        return tuple(messages)
    system, rest = messages[0], list(messages[1:])
    if not rest or rest[0].role != "user":
        return (Message("user", system.content), *rest)
    first = rest[0]
    merged = Message(
        "user", maybe_delimit(system.content, first.content, separator), first.delimiter
    )
    return (merged, *rest[1:])


def messages_from_json(data: Any) -> tuple[Message, ...]:
    """Messages back from records (``[{"role": ..., "content": ...}, ...]``)."""
    out = []
    for entry in data or ():
        if isinstance(entry, Mapping) and entry.get("role") in ("system", "user", "assistant"):
            out.append(Message(entry["role"], str(entry.get("content", ""))))
    return tuple(out)


def _chat_template_env() -> Any:
    """The Jinja environment transformers renders chat templates in (``apply_chat_template``:
    a sandboxed environment with ``trim_blocks``, ``lstrip_blocks``, loop controls, the
    ``{% generation %}`` block, its ``tojson`` filter and its ``raise_exception`` and
    ``strftime_now`` functions)."""
    import json
    from datetime import datetime

    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.parser import Parser
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class _Generation(Extension):
        """transformers' ``{% generation %}...{% endgeneration %}`` (it marks the assistant's
        tokens); its body is kept as it is."""

        tags = {"generation"}  # noqa: RUF012 (a set, as jinja2.ext.Extension declares it)

        def parse(self, parser: Parser) -> list[nodes.Node]:
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, "jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def check_chat_template(source: str) -> None:
    """Compile a chat template as transformers does (see :func:`_chat_template_env`),
    without a model; raises ``ValueError`` with the line and Jinja's message on a syntax
    error. Nothing is rendered: names the template reads are only known when it renders
    (:func:`chat_template_problem`)."""
    import jinja2

    try:
        _chat_template_env().from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"line {exc.lineno}: {(exc.message or '').rstrip('.')}") from None


def render_chat_template(
    source: str,
    messages: Sequence[Mapping[str, str]],
    *,
    add_generation_prompt: bool = True,
    **context: Any,
) -> str:
    """A chat template's text for ``messages``, as transformers' ``apply_chat_template``
    renders it (``tools`` and ``documents`` None; ``context``: the tokenizer's special
    tokens, ``bos_token``, ``eos_token``), without a tokenizer. Raises what the template
    raises (Jinja's ``TemplateError``, its ``raise_exception``)."""
    template = _chat_template_env().from_string(source)
    return str(
        template.render(
            messages=[dict(m) for m in messages],
            tools=None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **context,
        )
    )


#: What :func:`chat_template_problem` renders: a user message, alone and after a system
#: message, with placeholders for the special tokens (the model's are not known before it
#: loads).
PROBE_USER = "User sentinel 5"
PROBE_SYSTEM = "System sentinel 3"
PROBE_TOKENS: dict[str, Any] = {"bos_token": "<s>", "eos_token": "</s>"}


def _clip(text: str, limit: int = 160) -> str:
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


def chat_template_problem(source: str) -> str | None:
    """What makes a (compiling) chat template unusable for prompts, or None: rendered with
    its generation prompt (:func:`render_chat_template`), a user message must come out in
    the text, alone and after a system message. A template that never reads ``messages``
    (a system prompt saved as the template by mistake) would give every item the same
    prompt. After a system message the template may refuse (Gemma's raise) or drop the
    system text: the task runner then folds it into the user message, which renders
    alone; but it must not drop the user message while keeping the system's."""
    user = {"role": "user", "content": PROBE_USER}
    try:
        alone = render_chat_template(source, [user], **PROBE_TOKENS)
    except Exception as exc:  # what the model's load would fail with at the first item
        return f"it does not render a user message: {type(exc).__name__}: {exc}"
    if PROBE_USER not in alone:
        return (
            f"it does not write the conversation: for a user message {PROBE_USER!r} it "
            f"rendered {_clip(alone)}, so every item would get the same prompt"
        )
    system = {"role": "system", "content": PROBE_SYSTEM}
    try:
        with_system = render_chat_template(source, [system, user], **PROBE_TOKENS)
    except Exception:  # refuses a system message: the runner folds it into the user's
        return None
    if PROBE_SYSTEM in with_system and PROBE_USER not in with_system:
        return (
            f"after a system message it drops the user message: for {PROBE_SYSTEM!r} and "
            f"{PROBE_USER!r} it rendered {_clip(with_system)}"
        )
    return None
