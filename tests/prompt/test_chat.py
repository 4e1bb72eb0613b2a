"""Conversations for chat templates: lm-eval's message structure, and the plain-text
rendering that is exactly a run's prompt without chat template."""

from __future__ import annotations

import pytest

from pytest_llmeval.prompt import (
    Message,
    as_dicts,
    as_plain_text,
    build_messages,
    fold_system,
    maybe_delimit,
    single_turn,
    system_message,
)

EXAMPLES = (("Q: one?\nA:", "1"), ("Q: two?\nA:", "2"))


def _messages(system: str = "Intro.\n\n", text: str | None = None) -> tuple[Message, ...]:
    return build_messages(
        system=system,
        examples=() if text is not None else EXAMPLES,
        question="Q: three?\nA:",
        target_delimiter=" ",
        fewshot_separator="\n\n",
        fewshot_text=text,
    )


def test_plain_text_is_description_fewshot_block_and_question() -> None:
    assert as_plain_text(_messages()) == "Intro.\n\nQ: one?\nA: 1\n\nQ: two?\nA: 2\n\nQ: three?\nA:"


def test_plain_text_custom_delimiters_and_no_examples() -> None:
    messages = build_messages(
        system="",
        examples=(("x", "y"),),
        question="z",
        target_delimiter="=>",
        fewshot_separator="|",
    )
    assert as_plain_text(messages) == "x=>y|z"
    alone = build_messages(
        system="Intro: ", examples=(), question="q", target_delimiter=" ", fewshot_separator="\n"
    )
    assert as_plain_text(alone) == "Intro: q"


def test_multiturn_structure() -> None:
    assert as_dicts(_messages()) == [
        {"role": "system", "content": "Intro.\n\n"},
        {"role": "user", "content": "Q: one?\nA:"},
        {"role": "assistant", "content": "1"},
        {"role": "user", "content": "Q: two?\nA:"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "Q: three?\nA:"},
    ]


def test_single_turn_joins_examples_and_question_as_plain_text() -> None:
    assert as_dicts(single_turn(_messages())) == [
        {"role": "system", "content": "Intro.\n\n"},
        {"role": "user", "content": "Q: one?\nA: 1\n\nQ: two?\nA: 2\n\nQ: three?\nA:"},
    ]
    assert as_dicts(single_turn(_messages(system=""))) == [
        {"role": "user", "content": "Q: one?\nA: 1\n\nQ: two?\nA: 2\n\nQ: three?\nA:"}
    ]


def test_verbatim_fewshot_text_stays_in_the_user_turn() -> None:
    messages = _messages(system="", text="Q: a\nA: b\n\n")
    assert as_dicts(messages) == [{"role": "user", "content": "Q: a\nA: b\n\nQ: three?\nA:"}]


@pytest.mark.parametrize(
    ("prefix", "suffix", "joined"),
    [
        ("Be brief.", "Intro.", "Be brief.\n\nIntro."),
        ("Be brief.\n", "Intro.", "Be brief.\nIntro."),
        ("Be brief.", " Intro.", "Be brief. Intro."),
        ("", "Intro.", "Intro."),
        ("Be brief.", "", "Be brief."),
        (None, None, ""),
    ],
)
def test_maybe_delimit_follows_lm_eval(prefix: str | None, suffix: str | None, joined: str) -> None:
    assert maybe_delimit(prefix, suffix, "\n\n") == joined


def test_system_message_joins_run_spec_and_description() -> None:
    assert system_message(["Run.", None, "Spec.", "Intro.\n\n"], "\n\n") == (
        "Run.\n\nSpec.\n\nIntro.\n\n"
    )
    assert system_message([None, "", ""], "\n\n") == ""


def test_fold_system_into_first_user_turn() -> None:
    folded = fold_system(_messages(), "\n\n")
    assert folded[0] == Message("user", "Intro.\n\nQ: one?\nA:", " ")
    assert [m.role for m in folded] == ["user", "assistant", "user", "assistant", "user"]
    assert fold_system(_messages(system=""), "\n\n") == _messages(system="")
