"""A generation's text, decoded as it grows, at a cost per token that does not grow.

Stop sequences are checked after every generated token against the text so far. Decoding
the whole output again at each token costs O(n) per token, O(n^2) per sequence: measured
with SmolLM2's tokenizer, 11 ms per decode at 16k tokens, about 90 s of one CPU core per
16k-token row, serial with the model's steps (a reasoning model at batch 64 would spend
more time decoding its text than running on the GPU).

:class:`IncrementalText` keeps the text of the tokens up to a settled point and decodes only
the tokens after it, with a few tokens of context before it (the method of incremental
detokenizers, TGI's and vLLM's): a tokenizer's decoder treats the start of a sequence
differently (SentencePiece's Metaspace drops the first token's space, WordPiece joins
``##`` pieces), and a token may end inside a UTF-8 character (byte-level BPE, byte
fallback), which decodes to U+FFFD until the rest of it arrives. The text after the settled
point is the decode of ``context + new tokens`` minus the decode of ``context``; the settled
point moves on only where that decode is whole (no U+FFFD at its end). The context must
hold a token the decoder sees: special tokens are skipped before decoding, so a context of
``<unk>`` or padding alone would leave the next token first, and Metaspace would drop its
space; the context reaches back until its text is not empty. The final result is
still decoded whole (``HFBackend._result``); this text only decides when a stop sequence
has appeared. ``tests/model/test_detok.py`` checks it equals the whole decode after every
token, on byte-level, SentencePiece-style and WordPiece tokenizers and on random token
sequences.
"""

from __future__ import annotations

from typing import Any

#: Tokens of context decoded before the settled point (TGI and vLLM use 5 to 6).
CONTEXT_TOKENS = 6
#: The settled point moves when this many tokens wait after it (bounds each decode).
SETTLE_EVERY = 16
_REPLACEMENT = "\ufffd"


class IncrementalText:
    """The decoded text of a growing token list (``decode(tokens, skip_special_tokens=True)``
    of ``tokenizer``), updated by :meth:`extend`."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self.tokens: list[int] = []
        self._settled = 0  # tokens whose text is in self._head
        self._head = ""  # the text of tokens[:settled]
        self._start = 0  # where the context before the settled point starts
        self._context = ""  # the decode of tokens[start:settled]
        self.text = ""

    def _decode(self, tokens: list[int]) -> str:
        return str(self._tokenizer.decode(tokens, skip_special_tokens=True))

    def extend(self, new: list[int]) -> str:
        """Append ``new`` tokens; the whole text so far."""
        self.tokens.extend(new)
        if self._settled == 0:
            tail = self._decode(self.tokens)
            self.text = tail
            self._maybe_settle(tail)
            return self.text
        context = self._context
        window = self._decode(self.tokens[self._start :])
        if not window.startswith(context):
            # The decoder joined the context with what follows (a cleanup rule, a merge
            # across the boundary): start over from the whole sequence, once.
            self._settled, self._head = 0, ""
            return self.extend([])
        self.text = self._head + window[len(context) :]
        self._maybe_settle(window)
        return self.text

    def _maybe_settle(self, window: str) -> None:
        """Move the settled point to the end when enough tokens wait and their text is
        whole (no partial character at its end), with the context before it."""
        if len(self.tokens) - self._settled < SETTLE_EVERY or window.endswith(_REPLACEMENT):
            return
        self._head = self.text
        self._settled = len(self.tokens)
        start = max(0, self._settled - CONTEXT_TOKENS)
        context = self._decode(self.tokens[start : self._settled])
        while not context and start > 0:
            # Nothing the decoder sees (special tokens, skipped): reach further back, so
            # that the tokens after the settled point are not decoded as the first ones.
            start = max(0, start - CONTEXT_TOKENS)
            context = self._decode(self.tokens[start : self._settled])
        self._start, self._context = start, context
