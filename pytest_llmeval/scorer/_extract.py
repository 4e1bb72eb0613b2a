"""Answer extraction from raw model output, and answer comparison.

Every function here is total: any text in, an answer or ``None`` out, never an exception.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from pytest_llmeval.task import Extractor

# A number as people write it in answers: -1,234.50  3/4  .5  1e3 is not matched (rare in answers).
_NUMBER = re.compile(
    # A minus sign counts only where it cannot be a hyphen or an operator ("pages 10-15").
    r"(?:(?<![\w.])-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|(?:(?<![\w.])-)?\.\d+"
)
_EXPONENT = re.compile(r"[eE]([+-]?\d+)")


@dataclass(frozen=True)
class Extraction:
    """An extracted answer and the extractor step that found it (``None`` when none did)."""

    answer: str | None
    step: int | None = None
    kind: str | None = None


def numbers(text: str) -> list[str]:
    """All numbers in ``text`` in order, as written (commas kept)."""
    return _NUMBER.findall(text)


def _choice_letter(text: str, letters: str, which: str) -> str | None:
    allowed = re.escape(letters)
    patterns = [
        rf"(?i:answer is)[:\s]*\(?([{allowed}])\b",
        rf"(?i:answer):\s*\(?([{allowed}])\b",
        rf"\(([{allowed}])\)",
        rf"(?:^|\s)([{allowed}])[.):](?:\s|$)",
        rf"(?:^|\s)([{allowed}])(?:\s|$)",
    ]
    for pat in patterns:
        found = re.findall(pat, text)
        if found:
            return str(found[-1] if which == "last" else found[0])
    return None


def _findall_answer(pattern: str, text: str, which: str) -> str | None:
    """The answer lm-evaluation-harness's regex filter takes: the first or last item of
    ``re.findall`` (a match's group, or the whole match without groups); of several groups
    the first non-empty one, none when all are empty (its fallback); stripped."""
    found = re.findall(pattern, text)
    if not found:
        return None
    chosen = found[-1] if which == "last" else found[0]
    if isinstance(chosen, tuple):
        chosen = next((g for g in chosen if g), None)
        if chosen is None:
            return None
    return str(chosen).strip()


def _apply(step: Extractor, text: str) -> str | None:
    if step.kind == "strip":
        stripped = text.strip()
        return stripped or None
    if step.kind in ("last_number", "first_number"):
        found = numbers(text)
        if not found:
            return None
        return found[-1] if step.kind == "last_number" else found[0]
    if step.kind == "regex" and step.group == "any":
        assert step.pattern is not None
        return _findall_answer(step.pattern, text, step.which)
    if step.kind == "regex":
        assert step.pattern is not None and isinstance(step.group, int)
        matches = list(re.finditer(step.pattern, text))
        if not matches:
            return None
        match = matches[-1] if step.which == "last" else matches[0]
        value = match.group(step.group)
        return value.strip() if value is not None else None
    if step.kind == "choice_letter":
        return _choice_letter(text, step.letters, step.which)
    if step.kind == "boxed":
        from pytest_llmeval.scorer._math import extract_math_answer

        return extract_math_answer(text)
    raise ValueError(f"unknown extractor kind {step.kind!r}")


def extract(text: str, steps: Sequence[Extractor], *, truncated: bool = False) -> Extraction:
    """Run the extraction steps in order; the first that finds an answer wins.

    ``truncated``: the output was cut at its token budget; steps marked ``if_finished``
    are then skipped.
    """
    for i, step in enumerate(steps):
        if truncated and step.if_finished:
            continue
        answer = _apply(step, text)
        if answer is not None:
            return Extraction(answer=answer, step=i, kind=step.kind)
    return Extraction(answer=None)


def parse_number(text: str) -> Fraction | None:
    """Parse a written number exactly, or None: ``$1,234.50``, ``\\$12`` (LaTeX), ``-3``,
    ``3/4``, ``12.``."""
    cleaned = text.strip().replace(",", "").replace("\\$", "").replace("$", "").replace("%", "")
    cleaned = cleaned.rstrip(".")
    cleaned = cleaned.replace("\u2212", "-").strip()
    if not cleaned or len(cleaned) > 64:
        return None
    # Fraction accepts exponents ("1e999999999"): a huge one would take minutes to expand
    # and overflow float() in answers_match. Answers never need them; refuse large ones.
    if "_" in cleaned or any(abs(int(e)) > 100 for e in _EXPONENT.findall(cleaned)):
        return None
    try:
        if "/" in cleaned:
            num, _, den = cleaned.partition("/")
            value = Fraction(num.strip()) / Fraction(den.strip())
        else:
            value = Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None
    return value


def answers_match(predicted: str | None, target: str, how: str) -> bool:
    """Compare an extracted answer with the target.

    ``how`` is ``numeric``, ``exact``, ``exact_ignore_case`` or ``math`` (MATH answer
    equivalence after normalisation).
    """
    if predicted is None:
        return False
    if how == "numeric":
        a, b = parse_number(predicted), parse_number(target)
        if a is None or b is None:
            return predicted.strip() == target.strip()
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9) if a != b else True
    if how == "exact":
        return predicted.strip() == target.strip()
    if how == "exact_ignore_case":
        return predicted.strip().casefold() == target.strip().casefold()
    if how == "math":
        from pytest_llmeval.scorer._math import math_equal

        return math_equal(predicted, target)
    if how == "math_verify":
        raise ValueError(
            "math_verify judges a whole output, not an extracted answer: "
            "use pytest_llmeval.scorer.math_verify_judge"
        )
    raise ValueError(f"unknown comparison {how!r}")
