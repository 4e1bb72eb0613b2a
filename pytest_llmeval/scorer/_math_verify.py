"""MATH answers judged by ``math-verify`` (HuggingFace), the field's reference judge.

lighteval's MATH tasks and open-r1's accuracy reward score MATH-500 with math-verify:
``parse`` the gold answer and the model's whole output, then ``verify(gold, prediction)``
(symbolic and numeric equivalence with sympy). :func:`math_verify_judge` does the same,
with lighteval's extraction settings for MATH:

- **prediction**: the whole output (math-verify extracts the answer itself), with
  ``LatexExtractionConfig(boxed_match_priority=0)`` (a ``\\boxed{}`` answer first, then
  "final answer is" and other LaTeX) and ``ExprExtractionConfig()`` (plain expressions);
- **gold**: the spec's target wrapped in ``\\boxed{...}`` and parsed as LaTeX, which is how
  a MATH solution carries its final answer (the MATH-500 ``answer`` field is that boxed
  content; docs/PARITY.md measures the two against each other).

**Timeouts.** math-verify bounds each parse and comparison with ``signal.alarm`` (5 s
by default), which works only in the main thread of the main interpreter. pytest and
pytest-xdist workers score items in their main thread (measured with xdist 3.8), so the
reference's own timeouts apply. Called from another thread, :func:`math_verify_judge`
raises :class:`RuntimeError` rather than run without a timeout (a pathological answer
can keep sympy busy for minutes) or answer "wrong" silently. SIGALRM is math-verify's
while it runs: do not combine it with ``pytest-timeout --timeout-method=signal``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# math-verify's defaults, kept explicit: they are part of what a score means.
PARSE_TIMEOUT_S = 5
VERIFY_TIMEOUT_S = 5


@dataclass(frozen=True)
class MathVerifyJudgement:
    """The judge's decision and what it parsed (for the item's record)."""

    correct: bool
    extracted: str | None  # the text math-verify took as the answer, if any
    pred_parsed: tuple[str, ...]
    gold_parsed: tuple[str, ...]

    def details(self) -> dict[str, Any]:
        return {"pred_parsed": list(self.pred_parsed), "gold_parsed": list(self.gold_parsed)}


def _require_main_thread() -> None:
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "compare: math_verify must score in the main thread: math-verify's timeouts use "
            f"signal.alarm, and this is thread {threading.current_thread().name!r}"
        )


def parse_gold(gold: str) -> list[Any]:
    """math-verify's parse of a gold answer (the content of a MATH ``\\boxed{}``)."""
    from math_verify import LatexExtractionConfig, parse

    _require_main_thread()
    return list(
        parse(
            f"\\boxed{{{gold}}}",
            extraction_config=[LatexExtractionConfig()],
            parsing_timeout=PARSE_TIMEOUT_S,
        )
    )


def parse_prediction(output: str) -> list[Any]:
    """math-verify's parse of a model output, with lighteval's MATH extraction settings."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    _require_main_thread()
    return list(
        parse(
            output,
            extraction_config=[
                LatexExtractionConfig(boxed_match_priority=0),
                ExprExtractionConfig(),
            ],
            parsing_timeout=PARSE_TIMEOUT_S,
        )
    )


def math_verify_judge(output: str, golds: Sequence[str]) -> MathVerifyJudgement:
    """Whether ``output`` answers any of ``golds``, according to math-verify.

    ``output`` is the model's whole output (after any thinking block is stripped): the
    extraction is math-verify's own. Raises :class:`RuntimeError` off the main thread.
    """
    from math_verify import verify

    pred = parse_prediction(output)
    extracted = str(pred[-1]) if pred else None
    gold_parsed: list[Any] = []
    correct = False
    for gold in golds:
        parsed = parse_gold(gold)
        gold_parsed.extend(parsed)
        if pred and parsed and verify(parsed, pred, timeout_seconds=VERIFY_TIMEOUT_S):
            correct = True
            break
    return MathVerifyJudgement(
        correct=correct,
        extracted=extracted,
        pred_parsed=tuple(str(p) for p in pred),
        gold_parsed=tuple(str(g) for g in gold_parsed),
    )
