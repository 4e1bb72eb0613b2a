"""Strict and loose IFEval scoring of one response, and the four IFEval accuracies.

Following the IFEval paper (Zhou et al., 2023) and its reference ``evaluation_lib.py``:

- **strict**: an instruction is followed when the response is not blank and its check
  passes on the response as is;
- **loose**: it is followed when the check passes on any non-blank variant from
  :func:`loose_variants` (the response with its first and/or last line removed, and each
  of those with every ``*`` removed), which forgives a preamble such as
  ``"Sure! Here it is:"``, a closing remark, or markdown emphasis.

A prompt is followed (strictly or loosely) when all of its instructions are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_llmeval.ifeval._checks import clean_kwargs, get_instruction
from pytest_llmeval.ifeval._judges import HEURISTIC, TextJudges, using


def loose_variants(response: str) -> tuple[str, ...]:
    """The 8 responses the loose criterion tries, in the reference's order: the response,
    without ``*``, without its first line, without its last line, without both, and the
    last three without ``*``."""
    lines = response.split("\n")
    remove_first = "\n".join(lines[1:]).strip()
    remove_last = "\n".join(lines[:-1]).strip()
    remove_both = "\n".join(lines[1:-1]).strip()
    return (
        response,
        response.replace("*", ""),
        remove_first,
        remove_last,
        remove_both,
        remove_first.replace("*", ""),
        remove_last.replace("*", ""),
        remove_both.replace("*", ""),
    )


@dataclass(frozen=True)
class InstructionResult:
    """Whether one instruction was followed, strictly and loosely."""

    instruction_id: str
    strict: bool
    loose: bool


@dataclass(frozen=True)
class IFEvalResult:
    """The per-instruction outcomes of one prompt's response."""

    instructions: tuple[InstructionResult, ...]

    @property
    def instruction_ids(self) -> tuple[str, ...]:
        return tuple(r.instruction_id for r in self.instructions)

    @property
    def strict(self) -> tuple[bool, ...]:
        """Per-instruction strict outcomes, in the prompt's order."""
        return tuple(r.strict for r in self.instructions)

    @property
    def loose(self) -> tuple[bool, ...]:
        """Per-instruction loose outcomes, in the prompt's order."""
        return tuple(r.loose for r in self.instructions)

    @property
    def prompt_strict(self) -> bool:
        """Every instruction followed under the strict criterion."""
        return all(self.strict)

    @property
    def prompt_loose(self) -> bool:
        """Every instruction followed under the loose criterion."""
        return all(self.loose)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able summary: ids, per-instruction outcomes, prompt-level outcomes."""
        return {
            "instruction_ids": list(self.instruction_ids),
            "strict": list(self.strict),
            "loose": list(self.loose),
            "prompt_strict": self.prompt_strict,
            "prompt_loose": self.prompt_loose,
        }


def evaluate_item(
    prompt: str,
    response: str,
    instruction_ids: Sequence[str],
    kwargs: Sequence[Mapping[str, Any]],
    judges: TextJudges = HEURISTIC,
) -> IFEvalResult:
    """Score ``response`` to ``prompt`` against each instruction, strictly and loosely.

    ``kwargs`` is parallel to ``instruction_ids``; ``None`` values are ignored. ``judges``:
    the language identifier and tokenizers the checks use (default: our heuristics, no
    dependency; :func:`~pytest_llmeval.ifeval.text_judges` builds the reference's). Raises
    :class:`ValueError` for an unknown instruction id (naming it), invalid arguments, or
    lists of different lengths. Arguments are validated even for a blank response.
    """
    if len(instruction_ids) != len(kwargs):
        raise ValueError(f"{len(instruction_ids)} instruction ids but {len(kwargs)} kwargs entries")
    with using(judges):
        return _evaluate(prompt, response, instruction_ids, kwargs)


def _evaluate(
    prompt: str,
    response: str,
    instruction_ids: Sequence[str],
    kwargs: Sequence[Mapping[str, Any]],
) -> IFEvalResult:
    variants = [v for v in loose_variants(response)[1:] if v.strip()]
    results = []
    for instruction_id, raw in zip(instruction_ids, kwargs, strict=True):
        args = clean_kwargs(instruction_id, raw)
        check = get_instruction(instruction_id).check
        as_is = check(response, args, prompt)  # always run: it validates the arguments
        strict = bool(response.strip()) and as_is
        loose = strict or any(check(v, args, prompt) for v in variants)
        results.append(InstructionResult(instruction_id, strict=strict, loose=loose))
    return IFEvalResult(instructions=tuple(results))


def aggregate(results: Iterable[IFEvalResult]) -> dict[str, float]:
    """The four IFEval accuracies (``nan`` when there is nothing to average).

    Prompt-level accuracies average over prompts; instruction-level accuracies pool
    every instruction of every prompt.
    """
    prompts = prompt_strict = prompt_loose = 0
    instructions = inst_strict = inst_loose = 0
    for result in results:
        prompts += 1
        prompt_strict += result.prompt_strict
        prompt_loose += result.prompt_loose
        instructions += len(result.instructions)
        inst_strict += sum(result.strict)
        inst_loose += sum(result.loose)

    def ratio(n: int, d: int) -> float:
        return n / d if d else float("nan")

    return {
        "prompt_level_strict_acc": ratio(prompt_strict, prompts),
        "inst_level_strict_acc": ratio(inst_strict, instructions),
        "prompt_level_loose_acc": ratio(prompt_loose, prompts),
        "inst_level_loose_acc": ratio(inst_loose, instructions),
    }
