"""Scoring: answer extraction, comparison and task statistics."""

from pytest_llmeval.scorer._exact_match import lmeval_exact_match
from pytest_llmeval.scorer._extract import (
    Extraction,
    answers_match,
    extract,
    numbers,
    parse_number,
)
from pytest_llmeval.scorer._f1 import best_f1, normalize_answer, token_f1
from pytest_llmeval.scorer._judges import judge_label, require_judge
from pytest_llmeval.scorer._math import (
    extract_math_answer,
    last_boxed,
    math_equal,
    normalize_math_answer,
)
from pytest_llmeval.scorer._math_verify import MathVerifyJudgement, math_verify_judge
from pytest_llmeval.scorer._metrics import (
    Z95,
    Estimate,
    accuracy,
    auroc,
    binomial_upper_tail,
    mcnemar_exact,
    mcnemar_one_sided,
    paired_difference,
    signed_rank_upper_tail,
    wilson_interval,
)
from pytest_llmeval.scorer._named import score_metric
from pytest_llmeval.scorer._thinking import THINKING_STATES, strip_thinking, thinking_opened

__all__ = [
    "THINKING_STATES",
    "Z95",
    "Estimate",
    "Extraction",
    "MathVerifyJudgement",
    "accuracy",
    "answers_match",
    "auroc",
    "best_f1",
    "binomial_upper_tail",
    "extract",
    "extract_math_answer",
    "judge_label",
    "last_boxed",
    "lmeval_exact_match",
    "math_equal",
    "math_verify_judge",
    "mcnemar_exact",
    "mcnemar_one_sided",
    "normalize_answer",
    "normalize_math_answer",
    "numbers",
    "paired_difference",
    "parse_number",
    "require_judge",
    "score_metric",
    "signed_rank_upper_tail",
    "strip_thinking",
    "thinking_opened",
    "token_f1",
    "wilson_interval",
]
