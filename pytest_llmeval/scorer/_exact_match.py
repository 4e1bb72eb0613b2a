"""lm-evaluation-harness's ``exact_match`` metric, for metrics that report its scores.

lm-eval compares a filtered answer with the reference after removing each of
``regexes_to_ignore`` (``re.sub`` with an empty replacement, in order, on both strings),
lower-casing, and dropping punctuation or digits when asked. Its implementation holds the
strings in NumPy ``<U`` arrays, which cannot keep trailing NUL characters; they are
dropped here too (after each step, where lm-eval stores the strings again), and a lower
case longer than the array's width is cut to it, as NumPy's fixed-width lower-casing
does. Checked against lm-eval's own function in the tests.
"""

from __future__ import annotations

import re
import string

from pytest_llmeval.task import ExactMatchOptions

_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)
_NO_DIGITS = str.maketrans("", "", string.digits)


def _prepare(text: str, options: ExactMatchOptions) -> str:
    # ``width``: the NumPy array's width, the stored string's length with its trailing NULs.
    width = len(text)
    for pattern in options.regexes_to_ignore:  # each result is stored (NULs lost) again
        text = re.sub(pattern, "", text)
        width = len(text)
        text = text.rstrip("\x00")
    text = text.rstrip("\x00")
    if options.ignore_case:  # a lower case longer than the array's width ("İ") is cut
        text = text.lower()[:width]
    if options.ignore_punctuation:
        text = text.translate(_NO_PUNCTUATION)
    if options.ignore_numbers:
        text = text.translate(_NO_DIGITS)
    return text.rstrip("\x00")


def lmeval_exact_match(prediction: str | None, reference: str, options: ExactMatchOptions) -> bool:
    """Whether ``prediction`` equals ``reference`` under lm-eval's ``exact_match`` options.

    ``None`` (no answer extracted) never matches: lm-eval compares its filter's fallback
    text ``[invalid]`` instead, which matches no numeric or textual reference.
    """
    if prediction is None:
        return False
    return _prepare(prediction, options) == _prepare(reference, options)
