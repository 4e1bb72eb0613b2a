"""Prompt-lookup drafts (``model/_lookup.py``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_llmeval.model._lookup import PromptLookup


def test_the_latest_earlier_occurrence_of_the_longest_ngram_is_drafted() -> None:
    seq = PromptLookup([1, 2, 3, 4, 9, 2, 3, 5, 6, 7, 2, 3], max_ngram=3, min_ngram=2)
    # (2, 3) last occurred before at 5..6, followed by 5, 6, 7.
    assert seq.draft(3) == [5, 6, 7]
    assert seq.draft(1) == [5]
    seq.extend([5, 6, 1, 2, 3, 4])
    # (2, 3, 4) occurred at 1..3 (followed by 9): longer n-grams first.
    assert seq.draft(2) == [9, 2]
    assert seq.draft(0) == []


def test_nothing_is_drafted_without_an_earlier_occurrence() -> None:
    assert PromptLookup([1, 2, 3, 4]).draft(4) == []
    assert PromptLookup([]).draft(4) == []
    with pytest.raises(ValueError):
        PromptLookup([1], max_ngram=1, min_ngram=2)


@given(st.lists(st.integers(0, 4), max_size=60), st.integers(1, 6))
def test_a_draft_is_what_followed_a_match_of_the_tail(tokens: list[int], k: int) -> None:
    """Against a brute-force search: the longest n-gram (4 down to 2) whose latest
    earlier occurrence exists, and up to k tokens after that occurrence."""
    expected: list[int] = []
    for n in range(4, 1, -1):
        if len(tokens) < n:
            continue
        tail = tokens[-n:]
        starts = [s for s in range(len(tokens) - n) if tokens[s : s + n] == tail]
        if starts:
            begin = starts[-1] + n
            expected = tokens[begin : begin + k]
            break
    lookup = PromptLookup(tokens[: len(tokens) // 2])
    lookup.extend(tokens[len(tokens) // 2 :])
    assert lookup.draft(k) == expected
