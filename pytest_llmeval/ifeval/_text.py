"""Counting words, sentences and capitalised words the way IFEval's checks need them.

The reference implementation counts words with ``nltk``'s ``RegexpTokenizer(r"\\w+")``
(reproduced exactly by :func:`count_words`), sentences with nltk's pre-trained English
Punkt model and capitalised words with ``nltk.word_tokenize``. nltk is not a dependency
here, so :func:`count_sentences` and :func:`word_tokens` are documented heuristics that
follow Punkt's and the Treebank tokenizer's behaviour on ordinary prose.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+")

# Abbreviations after which a period does not end a sentence (a small stand-in for the
# abbreviation types learnt by Punkt's English model). Lower case, without the final period.
ABBREVIATIONS = frozenset(
    {
        "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "inc", "ltd", "co", "corp",
        "gen", "col", "lt", "sgt", "capt", "rev", "hon", "dept", "univ", "mt", "ft", "approx",
        "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
        "fig", "vol", "pp", "al", "cf",
    }
)  # fmt: skip

# A candidate sentence end: a run of terminators, any closing quotes or brackets, then
# whitespace and the next token (Punkt only breaks where a further token follows).
_BOUNDARY = re.compile(r"([.!?]+)[\"'”’)\]]*\s+(?=(\S))")


def count_words(text: str) -> int:
    """Number of ``\\w+`` runs, exactly as the reference's ``RegexpTokenizer(r"\\w+")``."""
    return len(_WORD.findall(text))


def _is_boundary(token: str, terminators: str, next_char: str) -> bool:
    """Whether the terminators ending ``token`` end a sentence, given the next character."""
    if "!" in terminators or "?" in terminators:
        return True
    if len(terminators) > 1:  # an ellipsis ends a sentence only before a capital
        return next_char.isupper()
    stem = token[: -len(terminators)] if token.endswith(terminators) else token
    stem = stem.lstrip("\"'“‘([*_")
    lowered = stem.lower()
    if lowered in ABBREVIATIONS:
        return False
    if len(stem) == 1 and stem.isalpha():  # an initial: "J. Smith"
        return False
    if "." in stem and all(part.isalpha() and len(part) <= 2 for part in stem.split(".")):
        return False  # "e.g.", "i.e.", "U.S."
    if stem.isdigit():  # "1. First point" breaks, "in 1990. and" does not
        return not next_char.islower()
    return True


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences with a Punkt-like heuristic.

    A sentence ends at ``.``, ``!`` or ``?`` (optionally followed by closing quotes or
    brackets) when whitespace and another token follow. Like Punkt, newlines alone do not
    end a sentence, ``!`` and ``?`` always do, and a period does not after a known
    abbreviation (:data:`ABBREVIATIONS`), an initial, a dotted acronym (``e.g.``,
    ``U.S.``) or a number followed by a lower-case word; an ellipsis ends a sentence
    only before a capital letter. Whitespace-only pieces are dropped.
    """
    sentences: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        token_end = match.end(1)
        token_start = token_end
        while token_start > start and not text[token_start - 1].isspace():
            token_start -= 1
        token = text[token_start:token_end]
        if _is_boundary(token, match.group(1), match.group(2)):
            sentences.append(text[start : match.start(2)].strip())
            start = match.start(2)
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]


def count_sentences(text: str) -> int:
    """Number of sentences according to :func:`split_sentences`."""
    return len(split_sentences(text))


_WORD_TOKEN = re.compile(r"\w+(?:[-.']\w+)*")
# Where a contraction splits: before "n't", or before an apostrophe not preceded by an "n".
_CONTRACTION = re.compile(r"(?=[nN]'[tT])|(?<![nN])(?=')")


def word_tokens(text: str) -> list[str]:
    """Word tokens in the manner of the Treebank tokenizer (``nltk.word_tokenize``).

    Punctuation is not a word; hyphenated words and dotted abbreviations stay one token
    (``well-known``, ``U.S``); contractions split before the apostrophe, with ``n't`` kept
    together (``DON'T`` -> ``DO``, ``N'T``; ``IT'S`` -> ``IT``, ``'S``).
    """
    tokens: list[str] = []
    for token in _WORD_TOKEN.findall(text.replace("’", "'")):
        tokens.extend(part for part in _CONTRACTION.split(token) if part)
    return tokens
