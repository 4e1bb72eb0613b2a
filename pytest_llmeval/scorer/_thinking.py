"""Reasoning output: the answer after a model's thinking block.

Reasoning models write ``<think> ... </think>`` before their answer (the markers are
configurable). With stripping on, extraction sees only the text after the last end marker,
with its leading whitespace removed (lm-evaluation-harness's ``think_end_token`` rule). A
generation that opened a thinking block (in its output, or through a chat template whose
generation prompt opens it) and never closed it has no answer: that is its own failure
class, not a wrong answer extracted from half a thought.
"""

from __future__ import annotations

THINKING_STATES = ("stripped", "unfinished")


def thinking_opened(prompt: str, start: str) -> bool:
    """Whether the prompt itself opens the thinking block (a generation prompt ending in
    ``<think>``)."""
    return bool(start) and prompt.rstrip().endswith(start)


def strip_thinking(text: str, prompt: str, start: str, end: str) -> tuple[str, str | None]:
    """``(answer text, state)``: the text after the last ``end`` marker (state
    ``stripped``); ``("", "unfinished")`` when a block was opened and never closed; the
    text unchanged (state None) when there is no thinking block."""
    if end and end in text:
        return text.rsplit(end, 1)[-1].lstrip(), "stripped"
    if (start and start in text) or thinking_opened(prompt, start):
        return "", "unfinished"
    return text, None
