"""IFEval: rule-based instruction-following checks, scored strictly and loosely.

Implements the verifiable instructions of Zhou et al. (2023), "Instruction-Following
Evaluation for Large Language Models", with the reference implementation's semantics.
Language identification and sentence/word tokenization are the reference's libraries
(langdetect, NLTK; the ``reference`` extra) or dependency-free heuristics
(:mod:`._language`, :mod:`._text`), as :func:`text_judges` chooses (:mod:`._judges`).
Imports neither pytest nor torch.

- :func:`evaluate_item` scores one response: per-instruction and prompt-level,
  strict and loose (:class:`IFEvalResult`); :func:`aggregate` gives the four accuracies.
- :data:`INSTRUCTIONS` maps every supported instruction id to its :class:`Instruction`
  (check function and argument names); :func:`check_instruction` runs one check.
"""

from pytest_llmeval.ifeval._checks import (
    CONSTRAINED_RESPONSES,
    INSTRUCTIONS,
    RELATIONS,
    CheckFn,
    Instruction,
    check_instruction,
    clean_kwargs,
    compare,
    get_instruction,
)
from pytest_llmeval.ifeval._evaluate import (
    IFEvalResult,
    InstructionResult,
    aggregate,
    evaluate_item,
    loose_variants,
)
from pytest_llmeval.ifeval._judges import (
    HEURISTIC,
    LANGDETECT_SEED,
    TextJudges,
    langdetect_language,
    nltk_count_sentences,
    nltk_word_tokens,
    text_judges,
)
from pytest_llmeval.ifeval._language import detect_language
from pytest_llmeval.ifeval._text import count_sentences, count_words, split_sentences, word_tokens

__all__ = [
    "CONSTRAINED_RESPONSES",
    "HEURISTIC",
    "INSTRUCTIONS",
    "LANGDETECT_SEED",
    "RELATIONS",
    "CheckFn",
    "IFEvalResult",
    "Instruction",
    "InstructionResult",
    "TextJudges",
    "aggregate",
    "check_instruction",
    "clean_kwargs",
    "compare",
    "count_sentences",
    "count_words",
    "detect_language",
    "evaluate_item",
    "get_instruction",
    "langdetect_language",
    "loose_variants",
    "nltk_count_sentences",
    "nltk_word_tokens",
    "split_sentences",
    "text_judges",
    "word_tokens",
]
