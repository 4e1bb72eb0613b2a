"""IFEval: rule-based instruction-following checks, scored strictly and loosely.

Implements the verifiable instructions of Zhou et al. (2023), "Instruction-Following
Evaluation for Large Language Models", with the reference implementation's semantics
and without nltk or langdetect (see :mod:`._text` and :mod:`._language` for the
heuristics that replace them). Imports neither pytest nor torch.

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
from pytest_llmeval.ifeval._language import detect_language
from pytest_llmeval.ifeval._text import count_sentences, count_words, split_sentences, word_tokens

__all__ = [
    "CONSTRAINED_RESPONSES",
    "INSTRUCTIONS",
    "RELATIONS",
    "CheckFn",
    "IFEvalResult",
    "Instruction",
    "InstructionResult",
    "aggregate",
    "check_instruction",
    "clean_kwargs",
    "compare",
    "count_sentences",
    "count_words",
    "detect_language",
    "evaluate_item",
    "get_instruction",
    "loose_variants",
    "split_sentences",
    "word_tokens",
]
