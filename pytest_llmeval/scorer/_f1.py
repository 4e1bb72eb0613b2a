"""Token-overlap F1 between a generated answer and reference answers (SQuAD style).

The normalisation is the one SQuAD's evaluation script introduced and LongBench's
``qa_f1_score`` reuses: lowercase, drop punctuation, drop the articles a/an/the, collapse
whitespace; tokens are the whitespace-separated words. F1 is the harmonic mean of precision
and recall of the multiset of shared tokens; an item's score is the best F1 over its
references.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, no punctuation, no articles, single spaces."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def token_f1(prediction: str, reference: str) -> float:
    """F1 of the normalised tokens of ``prediction`` against ``reference`` (0 when either
    has no tokens, unless both are empty: then 1)."""
    pred = normalize_answer(prediction).split()
    ref = normalize_answer(reference).split()
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def best_f1(prediction: str | None, references: Sequence[str]) -> float:
    """The best :func:`token_f1` over ``references`` (0 for no prediction)."""
    if prediction is None or not references:
        return 0.0
    return max(token_f1(prediction, ref) for ref in references)
