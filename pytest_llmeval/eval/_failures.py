"""Failure analysis: why did the failed items of a task fail?

Every failed item gets one class:

- ``truncated``: generation hit its token budget (``finish_reason == "length"``);
- ``extraction_failure``: no answer (or no code) could be parsed from the output;
- ``format_failure``: an answer was parsed but not in a comparable form (e.g. not a number
  for a numeric task);
- ``execution_timeout`` / ``execution_error``: generated code timed out, or crashed for a
  reason other than a failed assertion;
- ``wrong_answer``: a comparable answer, and wrong (or a failed assertion, or a wrong
  choice, or an instruction not followed);
- ``unfinished_thinking``: a reasoning model opened its thinking block and never closed it
  (with thinking stripped, such an output has no answer); cut at the budget, it is
  ``truncated``.

Independently, ``answer_in_output`` says whether the output contains the target at all. A
failed item whose output contains the right answer points at the evaluation (prompt,
stop sequences, extraction) rather than at the model, so those are listed first.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_llmeval.scorer import numbers, parse_number

FAILURE_CLASSES = (
    "extraction_failure",
    "format_failure",
    "truncated",
    "execution_timeout",
    "execution_error",
    "wrong_answer",
    "unfinished_thinking",
)


@dataclass(frozen=True)
class ClassifiedFailure:
    item_id: str
    kind: str
    answer_in_output: bool
    extracted: str | None
    target: str
    output_tail: str


@dataclass(frozen=True)
class FailureReport:
    task: str
    n_items: int
    n_failed: int
    distribution: dict[str, int] = field(default_factory=dict)
    samples: list[ClassifiedFailure] = field(default_factory=list)
    answer_in_output: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "n_items": self.n_items,
            "n_failed": self.n_failed,
            "distribution": self.distribution,
            "answer_in_output": self.answer_in_output,
            "samples": [s.__dict__ for s in self.samples],
        }


def _contains_answer(output: str, target: str, compare: str | None) -> bool:
    target = target.strip()
    if not target or not output:
        return False
    if compare == "numeric":
        want = parse_number(target)
        if want is not None:
            return any(parse_number(n) == want for n in numbers(output))
    pattern = r"(?<![\w])" + re.escape(target) + r"(?![\w])"
    return re.search(pattern, output, flags=re.IGNORECASE) is not None


def classify(record: Mapping[str, Any], compare: str | None = None) -> str:
    """The failure class of one failed item record (see the module docstring)."""
    details = record.get("details") or {}
    status = details.get("status") if isinstance(details, Mapping) else None
    if record.get("finish_reason") == "length":
        return "truncated"
    if isinstance(details, Mapping) and details.get("thinking") == "unfinished":
        return "unfinished_thinking"
    if record.get("choices"):
        return "wrong_answer"
    if status is not None:  # code execution
        if not str(record.get("extracted") or "").strip():
            return "extraction_failure"  # no code came out of the output at all
        reason = str(details.get("reason", ""))
        # the sandbox's wall clock, or a test's own time limit (the LiveCodeBench judge's
        # per-test limit, which the harness raises as TimeoutError)
        if status == "timeout" or (status == "failed" and "TimeoutError" in reason):
            return "execution_timeout"
        if status == "failed" and "AssertionError" in str(details.get("reason", "")):
            return "wrong_answer"
        return "execution_error"
    if record.get("extractor") == "ifeval":
        return "wrong_answer"
    extracted = record.get("extracted")
    if extracted is None or not str(extracted).strip():
        return "extraction_failure"
    if compare == "numeric" and parse_number(str(extracted)) is None:
        return "format_failure"
    return "wrong_answer"


def analyse_failures(
    task: str,
    records: Sequence[Mapping[str, Any]],
    n: int,
    seed: int = 1234,
    compare: str | None = None,
) -> FailureReport:
    """Classify every failed item; sample ``n`` of them (seeded) to show, answer-in-output
    first."""
    failed = [r for r in records if not r.get("correct")]
    classified = []
    for r in failed:
        output = str(r.get("output") or "")
        kind = classify(r, compare)
        in_output = r.get("output") is not None and _contains_answer(
            output, str(r.get("target", "")), compare
        )
        classified.append(
            ClassifiedFailure(
                item_id=str(r["item_id"]),
                kind=kind,
                answer_in_output=in_output,
                extracted=r.get("extracted"),
                target=str(r.get("target", "")),
                output_tail=output[-300:],
            )
        )
    distribution = Counter(c.kind for c in classified)
    ordered = sorted(classified, key=lambda c: c.item_id)
    sample = random.Random(seed).sample(ordered, min(n, len(ordered))) if n > 0 else []
    sample.sort(
        key=lambda c: (
            not (c.answer_in_output and c.kind != "wrong_answer"),
            not c.answer_in_output,
            c.item_id,
        )
    )
    return FailureReport(
        task=task,
        n_items=len(records),
        n_failed=len(failed),
        distribution={k: distribution[k] for k in FAILURE_CLASSES if distribution[k]},
        samples=sample,
        answer_in_output=sum(c.answer_in_output for c in classified),
    )
