"""Contamination checks: cheap probes that run as tests, and a corpus n-gram scan.

Plain Python (no torch, no pytest wiring): the probes take a :class:`~pytest_llmeval.model.Backend`
and task items; the scan streams a corpus against a benchmark's n-grams.
"""

from pytest_llmeval.contamination._membership import (
    MembershipReport,
    MembershipScore,
    membership_probe,
    membership_scores,
    min_k,
)
from pytest_llmeval.contamination._probes import (
    OrderTestReport,
    PairedItem,
    PairedReport,
    canonical_order_test,
    number_rewrite_probe,
    option_shuffle_probe,
)
from pytest_llmeval.contamination._rewrite import (
    CalculationError,
    NumberRewrite,
    calculations,
    evaluate,
    option_orders,
    permute_options,
    recheck,
    rewrite_numbers,
)

__all__ = [
    "CalculationError",
    "MembershipReport",
    "MembershipScore",
    "NumberRewrite",
    "OrderTestReport",
    "PairedItem",
    "PairedReport",
    "calculations",
    "canonical_order_test",
    "evaluate",
    "membership_probe",
    "membership_scores",
    "min_k",
    "number_rewrite_probe",
    "option_orders",
    "option_shuffle_probe",
    "permute_options",
    "recheck",
    "rewrite_numbers",
]
