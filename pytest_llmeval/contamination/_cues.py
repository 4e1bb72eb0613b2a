"""Behavioural cues of recall in generations, and the guided-completion probe.

:func:`scan_output` looks for signs that a model recognises an item rather than solves it:
naming a benchmark ("this is from GSM8K"), saying where the question comes from, naming a
split or an item number, reproducing the benchmark's own answer format (GSM8K's
``<<48/2=24>>`` calculator annotations, which its prompts never show), or continuing the
item's reference text verbatim (a long shared n-gram with the held-back solution).

:func:`guided_completion_probe` follows Golchin and Surdeanu (2023): give the model the
first half of an item once with the benchmark's name and split ("guided") and once
without, and compare how much of the true second half each completion reproduces (ROUGE-L
F1 and exact token prefix). A guided completion that is reliably closer than the unguided
one means the name unlocks memory of the items.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from pytest_llmeval.contamination._ngram import normalize
from pytest_llmeval.dataset import Item
from pytest_llmeval.eval import ItemResult, TaskRunner
from pytest_llmeval.model import Backend, GenerateRequest
from pytest_llmeval.scorer import binomial_upper_tail

BENCHMARK_NAMES = (
    "MMLU",
    "MMLU-Pro",
    "CMMLU",
    "C-Eval",
    "GSM8K",
    "GSM-8K",
    "HumanEval",
    "MBPP",
    "BIG-Bench",
    "BBH",
    "HellaSwag",
    "TruthfulQA",
    "IFEval",
    "GPQA",
    "LiveCodeBench",
    "LongBench",
    "MATH-500",
    "ARC-Challenge",
    "ARC-Easy",
    "AI2 Reasoning Challenge",
    "Massive Multitask Language Understanding",
)
_NAME = re.compile(
    r"(?<![\w-])(?:" + "|".join(re.escape(n) for n in BENCHMARK_NAMES) + r")(?![\w-])", re.I
)
_SOURCE = re.compile(
    r"\b(?:this|the) (?:question|problem|example|item|task) (?:is|comes|was taken) from\b"
    r"|\bfrom the (?:[\w-]+ )?(?:benchmark|dataset)\b",
    re.I,
)
_SPLIT = re.compile(r"\b(?:test|train(?:ing)?|validation|dev) (?:set|split)\b", re.I)
_ITEM_NUMBER = re.compile(
    r"\b(?:question|problem|item|example|task)\s*(?:#|no\.?|number)\s*\d+", re.I
)
_CALCULATOR = re.compile(r"<<[^<>=]+=[^<>]+>>")


@dataclass(frozen=True)
class Cue:
    kind: str  # benchmark_name | source | split | item_number | answer_format | verbatim
    text: str


def scan_output(output: str, reference: str = "", *, n: int = 8) -> list[Cue]:
    """The cues of recall in one output; ``reference`` is the item's held-back text (its
    reference solution), checked for a shared run of ``n`` normalised tokens."""
    cues = [Cue("benchmark_name", m.group(0)) for m in _NAME.finditer(output)]
    cues += [Cue("source", m.group(0)) for m in _SOURCE.finditer(output)]
    cues += [Cue("split", m.group(0)) for m in _SPLIT.finditer(output)]
    cues += [Cue("item_number", m.group(0)) for m in _ITEM_NUMBER.finditer(output)]
    cues += [Cue("answer_format", m.group(0)) for m in _CALCULATOR.finditer(output)]
    if reference:
        shared = longest_shared_run(normalize(output), normalize(reference))
        if len(shared) >= n:
            cues.append(Cue("verbatim", " ".join(shared)))
    return cues


def longest_shared_run(a: Sequence[str], b: Sequence[str]) -> list[str]:
    """The longest run of consecutive tokens that ``a`` and ``b`` share."""
    best, best_end = 0, 0
    previous = [0] * (len(b) + 1)
    for i in range(1, len(a) + 1):
        current = [0] * (len(b) + 1)
        for j in range(1, len(b) + 1):
            if a[i - 1] == b[j - 1]:
                current[j] = previous[j - 1] + 1
                if current[j] > best:
                    best, best_end = current[j], i
        previous = current
    return list(a[best_end - best : best_end])


@dataclass(frozen=True)
class CueReport:
    task: str
    n: int
    items: dict[str, list[Cue]]

    @property
    def counts(self) -> dict[str, int]:
        """Items with at least one cue of each kind."""
        out: dict[str, int] = {}
        for cues in self.items.values():
            for kind in {c.kind for c in cues}:
                out[kind] = out.get(kind, 0) + 1
        return dict(sorted(out.items()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "probe": "behavioural_cues",
            "task": self.task,
            "n": self.n,
            "items_with_cues": self.counts,
            "items": {k: [asdict(c) for c in v] for k, v in self.items.items() if v},
        }


def behavioural_cues(
    task: str, results: Sequence[ItemResult], references: dict[str, str] | None = None
) -> CueReport:
    """Scan the generations of a run (``ItemResult.output``) for cues of recall."""
    refs = references or {}
    items = {
        r.item_id: scan_output(r.output or "", refs.get(r.item_id, "")) for r in results if r.output
    }
    return CueReport(task=task, n=len(items), items=items)


# --------------------------------------------------------------------------- guided


def rouge_l(candidate: Sequence[str], reference: Sequence[str]) -> float:
    """ROUGE-L F1: from the longest common subsequence of the two token lists."""
    if not candidate or not reference:
        return 0.0
    previous = [0] * (len(reference) + 1)
    for token in candidate:
        current = [0]
        for j, ref in enumerate(reference, 1):
            current.append(
                previous[j - 1] + 1 if token == ref else max(previous[j], current[j - 1])
            )
        previous = current
    lcs = previous[-1]
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(candidate), lcs / len(reference)
    return 2 * precision * recall / (precision + recall)


def _prefix_match(candidate: Sequence[str], reference: Sequence[str]) -> int:
    count = 0
    for a, b in zip(candidate, reference, strict=False):
        if a != b:
            break
        count += 1
    return count


@dataclass(frozen=True)
class GuidedItem:
    item_id: str
    guided_rouge_l: float
    unguided_rouge_l: float
    guided_prefix: int
    unguided_prefix: int
    guided_output: str
    unguided_output: str


@dataclass(frozen=True)
class GuidedReport:
    task: str
    benchmark: str
    split: str
    items: tuple[GuidedItem, ...]

    @property
    def n(self) -> int:
        return len(self.items)

    @property
    def guided_wins(self) -> int:
        return sum(1 for i in self.items if i.guided_rouge_l > i.unguided_rouge_l)

    @property
    def unguided_wins(self) -> int:
        return sum(1 for i in self.items if i.guided_rouge_l < i.unguided_rouge_l)

    @property
    def p_value(self) -> float:
        """One-sided sign test: guided completions closer more often than by chance (ties
        left out)."""
        trials = self.guided_wins + self.unguided_wins
        return binomial_upper_tail(self.guided_wins, trials, Fraction(1, 2)) if trials else 1.0

    def mean(self, name: str) -> float:
        values = [float(getattr(i, name)) for i in self.items]
        return sum(values) / len(values) if values else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {
            "probe": "guided_completion",
            "task": self.task,
            "benchmark": self.benchmark,
            "split": self.split,
            "n": self.n,
            "guided_rouge_l": self.mean("guided_rouge_l"),
            "unguided_rouge_l": self.mean("unguided_rouge_l"),
            "guided_prefix": self.mean("guided_prefix"),
            "unguided_prefix": self.mean("unguided_prefix"),
            "guided_wins": self.guided_wins,
            "unguided_wins": self.unguided_wins,
            "p_value": self.p_value,
            "items": [asdict(i) for i in self.items],
        }


def guided_completion_probe(
    runner: TaskRunner,
    items: Sequence[Item],
    backend: Backend,
    *,
    benchmark: str,
    split: str = "test",
    max_new_tokens: int = 48,
) -> GuidedReport:
    """Complete the first half of each item's question text with and without naming the
    benchmark and split; score both against the true second half (normalised tokens)."""
    halves = []
    for item in items:
        words = runner.prepare(item).question.split()
        cut = len(words) // 2
        halves.append((item.id, " ".join(words[:cut]), " ".join(words[cut:])))
    requests = []
    for _, first, _ in halves:
        guided = (
            f"You are given the first part of an instance from the {split} split of the "
            f"{benchmark} dataset. Complete it exactly as it appears in the dataset.\n\n{first}"
        )
        unguided = f"Complete the following text.\n\n{first}"
        requests += [
            GenerateRequest(guided, max_new_tokens, ("\n\n",)),
            GenerateRequest(unguided, max_new_tokens, ("\n\n",)),
        ]
    outputs = backend.generate(requests)
    out = []
    for index, (item_id, _, second) in enumerate(halves):
        guided_text, unguided_text = outputs[2 * index].text, outputs[2 * index + 1].text
        ref = normalize(second)
        g, u = normalize(guided_text), normalize(unguided_text)
        out.append(
            GuidedItem(
                item_id=item_id,
                guided_rouge_l=rouge_l(g[: len(ref)], ref),
                unguided_rouge_l=rouge_l(u[: len(ref)], ref),
                guided_prefix=_prefix_match(g, ref),
                unguided_prefix=_prefix_match(u, ref),
                guided_output=guided_text,
                unguided_output=unguided_text,
            )
        )
    return GuidedReport(task=runner.spec.name, benchmark=benchmark, split=split, items=tuple(out))
