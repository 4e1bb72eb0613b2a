"""Evaluation: turning selected items into backend requests and scored item results."""

from pytest_llmeval.eval._failures import (
    FAILURE_CLASSES,
    ClassifiedFailure,
    FailureReport,
    analyse_failures,
    classify,
)
from pytest_llmeval.eval._run import (
    ChatSettings,
    ItemResult,
    PreparedItem,
    TaskRunner,
    true_probability_mass,
)

__all__ = [
    "FAILURE_CLASSES",
    "ChatSettings",
    "ClassifiedFailure",
    "FailureReport",
    "ItemResult",
    "PreparedItem",
    "TaskRunner",
    "analyse_failures",
    "classify",
    "true_probability_mass",
]
