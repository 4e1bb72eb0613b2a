"""Reasoning output: the thinking block removed before extraction, both texts recorded, a
block never closed its own failure class; stop sequences never cut inside the block."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from test_runner import ScriptedBackend, _gen_spec

from pytest_llmeval.dataset import load_items
from pytest_llmeval.eval import ChatSettings, TaskRunner, classify
from pytest_llmeval.model import ChatTemplate, GenerateRequest, cut_at_stop, stop_hit
from pytest_llmeval.scorer import strip_thinking
from pytest_llmeval.task import ThinkingSpec

MARKERS = ("<think>", "</think>")


@pytest.mark.parametrize(
    ("text", "prompt", "expected"),
    [
        ("<think>a\n\nb</think>\n  The answer is 7.", "", ("The answer is 7.", "stripped")),
        ("<think>x</think>one</think>two", "", ("two", "stripped")),
        ("reasoning without a start</think>It is 3.", "", ("It is 3.", "stripped")),
        ("<think>still thinking", "", ("", "unfinished")),
        ("still thinking, opened by the prompt", "...<think>\n", ("", "unfinished")),
        ("The answer is 7.", "Q: <think> in a few-shot example\nA:", ("The answer is 7.", None)),
    ],
)
def test_strip_thinking(text: str, prompt: str, expected: tuple[str, str | None]) -> None:
    assert strip_thinking(text, prompt, *MARKERS) == expected


@pytest.mark.parametrize(
    ("text", "opened", "hit", "cut"),
    [
        ("<think>a\n\nb", False, False, "<think>a\n\nb"),
        ("<think>a\n\nb</think>c\n\nd", False, True, "<think>a\n\nb</think>c"),
        ("a\n\nb</think>c", True, False, "a\n\nb</think>c"),
        ("a\n\nb", True, False, "a\n\nb"),
        ("no block\n\nhere", False, True, "no block"),
    ],
)
def test_stop_sequences_apply_after_the_block(text: str, opened: bool, hit: bool, cut: str) -> None:
    assert stop_hit(text, ["\n\n"], MARKERS, opened) is hit
    assert cut_at_stop(text, ["\n\n"], MARKERS, opened) == (cut, hit)
    # Without markers, as before: the first stop sequence anywhere.
    assert cut_at_stop("a\n\nb</think>c", ["\n\n"]) == ("a", True)
    # An empty stop sequence stops nothing, in both (stop_hit found it in every text, so
    # a generation ended at its first token, uncut).
    assert stop_hit("abc", [""]) is False and cut_at_stop("abc", [""]) == ("abc", False)


def test_runner_strips_before_extraction_and_records_both(tmp_path: Path) -> None:
    spec = _gen_spec(tmp_path)
    replies = {
        "3 + 4?": ("<think>3 + 4\n\n= 7</think>\nThe answer is 7.", "stop"),
        "10 - 2?": ("<think>10 - 2 is 8, the answer is 8 so", "length"),
        "Half of 1,000?": ("<think>half... The answer is 500, or", "eos"),
        "Unanswerable?": ("The answer is 1.", "stop"),
    }
    backend = ScriptedBackend(text=lambda r: replies[r.context.split("Q: ")[-1][: -len("\nA:")]])
    runner = TaskRunner(spec, [tmp_path], ChatSettings(strip_thinking=True))
    results = runner.run(load_items(spec, [tmp_path]), backend)
    assert all(r.thinking == MARKERS and not r.thinking_open for r in backend.gen_requests)
    assert [r.output for r in results] == [text for text, _ in replies.values()]
    assert [r.output_stripped for r in results] == ["The answer is 7.", "", "", "The answer is 1."]
    assert [r.extracted for r in results] == ["7", None, None, "1"]
    assert [r.correct for r in results] == [True, False, False, True]
    assert [(r.details or {}).get("thinking") for r in results] == [
        "stripped",
        "unfinished",
        "unfinished",
        None,
    ]
    # Cut at the budget it is truncated; ended without closing its thought, its own class.
    assert [classify(r.to_dict()) for r in results[1:3]] == ["truncated", "unfinished_thinking"]
    assert runner.prompt_record()["thinking"] == {
        "strip": True,
        "start": "<think>",
        "end": "</think>",
    }


def test_without_stripping_nothing_changes(tmp_path: Path) -> None:
    spec = _gen_spec(tmp_path)
    backend = ScriptedBackend(text=lambda r: "<think>x</think>The answer is 7.")
    results = TaskRunner(spec, [tmp_path]).run(load_items(spec, [tmp_path])[:1], backend)
    assert backend.gen_requests[0].thinking is None
    assert results[0].output_stripped is None
    assert results[0].extracted == "7"  # the regex found it in the raw text


class OpensThinking(ScriptedBackend):
    """A chat backend whose template's generation prompt opens the thinking block."""

    def chat_template(self) -> ChatTemplate:
        def render(messages: Sequence[Mapping[str, str]]) -> str:
            turns = "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages)
            return turns + "<assistant><reasoning>\n"

        return ChatTemplate(source="tokenizer", sha256="0" * 64, render=render)

    def info(self) -> Mapping[str, Any]:
        return {"model": "scripted"}


def test_spec_markers_and_a_block_opened_by_the_template(tmp_path: Path) -> None:
    spec = _gen_spec(tmp_path)
    assert spec.generate is not None
    spec = dataclasses.replace(
        spec,
        generate=dataclasses.replace(
            spec.generate,
            thinking=ThinkingSpec(strip=True, start="<reasoning>", end="</reasoning>"),
        ),
    )
    backend = OpensThinking(
        text=lambda r: (
            "so 3 + 4 = 7</reasoning>The answer is 7." if "3 + 4" in r.context else "still going"
        )
    )
    runner = TaskRunner(spec, [tmp_path], ChatSettings(mode="on"))
    results = runner.run(load_items(spec, [tmp_path])[:2], backend)
    request: GenerateRequest = backend.gen_requests[0]
    assert request.thinking == ("<reasoning>", "</reasoning>") and request.thinking_open
    assert [r.correct for r in results] == [True, False]
    assert [(r.details or {}).get("thinking") for r in results] == ["stripped", "unfinished"]
