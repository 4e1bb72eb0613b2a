"""One named metric (``generate.metrics``) on one output: its own extraction, its own
comparison. Shared by the runner and the lm-eval parity harness, which scores the
harness's outputs with it to tell a scorer difference from an output difference."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_llmeval.scorer._exact_match import lmeval_exact_match
from pytest_llmeval.scorer._extract import answers_match, extract
from pytest_llmeval.task import ExactMatchOptions, MetricSpec


def score_metric(
    metric: MetricSpec, text: str, references: Sequence[str], *, truncated: bool = False
) -> tuple[float, str | None]:
    """1.0 or 0.0 (a match with any reference) and the metric's extracted answer."""
    answer = extract(text, metric.extract, truncated=truncated).answer
    if metric.compare == "exact_match":
        options = metric.exact_match or ExactMatchOptions()
        hit = any(lmeval_exact_match(answer, ref, options) for ref in references)
    else:
        hit = any(answers_match(answer, ref, metric.compare) for ref in references)
    return float(hit), answer
