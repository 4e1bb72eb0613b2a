"""Prompt-lookup drafts for greedy decoding: guesses of a sequence's next tokens, taken
from what follows the latest earlier occurrence of its last few tokens (in its prompt or
its own output).

The backend checks a row's draft in the same decode step as the row's next token (one
forward pass over the token and the draft) and keeps the drafted tokens the model itself
would have chosen, up to the first one it would not: the output is the greedy output, and
a step yields one to ``1 + k`` tokens. Few-shot prompts and the loops small models fall
into repeat a great deal, which is what makes the guesses right (the idea of Saxena's
"prompt lookup decoding", also in transformers' ``prompt_lookup_num_tokens`` and vLLM's
n-gram speculation). Pure Python, no torch.
"""

from __future__ import annotations

from collections.abc import Iterable


class PromptLookup:
    """The tokens of one sequence and an index of its n-grams (``min_ngram`` to
    ``max_ngram`` tokens), each mapped to where its latest occurrence's continuation
    starts. Tokens are added with :meth:`extend`; :meth:`draft` looks the sequence's last
    n-gram up, longest first."""

    def __init__(self, tokens: Iterable[int], max_ngram: int = 4, min_ngram: int = 2) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"n-gram sizes {min_ngram}..{max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.tokens: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}
        self.extend(tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        seq, index = self.tokens, self._index
        for token in tokens:
            # The n-grams ending just before this token now have a known continuation.
            end = len(seq)
            for n in range(self.min_ngram, self.max_ngram + 1):
                if end >= n:
                    index[tuple(seq[end - n : end])] = end
            seq.append(token)

    def draft(self, k: int) -> list[int]:
        """Up to ``k`` tokens that followed the latest earlier occurrence of the sequence's
        last n-gram (the longest that occurred before); empty when none did."""
        if k <= 0:
            return []
        seq = self.tokens
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if len(seq) < n:
                continue
            start = self._index.get(tuple(seq[-n:]))
            if start is not None:
                return seq[start : start + k]
        return []
