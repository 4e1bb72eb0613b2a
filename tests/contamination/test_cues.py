"""Behavioural cues of recall and the guided-completion probe."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval.contamination import (
    behavioural_cues,
    guided_completion_probe,
    longest_shared_run,
    rouge_l,
    scan_output,
)
from pytest_llmeval.dataset import load_items
from pytest_llmeval.eval import ItemResult, TaskRunner
from pytest_llmeval.model import (
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
)
from pytest_llmeval.task import task_spec_from_dict


@pytest.mark.parametrize(
    ("output", "kinds"),
    [
        ("This is a GSM8K problem, so the answer is 5.", {"benchmark_name"}),
        ("As in the mmlu test set, the answer is B.", {"benchmark_name", "split"}),
        ("This question is from a math benchmark.", {"source"}),
        ("Problem #17 asks for the total.", {"item_number"}),
        ("She sells 16-3-4=<<16-3-4=9>>9 eggs.", {"answer_format"}),
        ("The answer is 18 because 9 * 2 = 18.", set()),
        ("The arc of the story is sad; math is hard.", set()),  # not ARC, not MATH-500
    ],
)
def test_scan_output_finds_recall_cues(output: str, kinds: set[str]) -> None:
    assert {c.kind for c in scan_output(output)} == kinds


def test_verbatim_continuation_of_the_reference() -> None:
    reference = "Janet sells 16 - 3 - 4 = 9 duck eggs a day. She makes 9 * 2 = $18 every day."
    copied = "Well: Janet sells 16 - 3 - 4 = 9 duck eggs a day, so she makes money."
    cues = scan_output(copied, reference)
    assert [c.kind for c in cues] == ["verbatim"]
    assert cues[0].text == "janet sells 16 3 4 9 duck eggs a day"
    assert scan_output("She has 9 eggs to sell each day.", reference) == []
    assert longest_shared_run(["a", "b", "c", "d"], ["x", "b", "c", "y"]) == ["b", "c"]


def test_behavioural_cues_report_counts_items() -> None:
    def result(item_id: str, output: str) -> ItemResult:
        return ItemResult("t", item_id, None, False, 0.0, "p", "1", [], output=output)

    report = behavioural_cues(
        "gsm8k",
        [result("a", "From the GSM8K test split: 3"), result("b", "It is 4."), result("c", "")],
    )
    assert report.n == 2
    assert report.counts == {"benchmark_name": 1, "split": 1}
    assert list(report.to_dict()["items"]) == ["a"]


def test_rouge_l() -> None:
    assert rouge_l(["a", "b", "c", "d"], ["a", "b", "c", "d"]) == 1.0
    assert rouge_l(["a", "x", "c"], ["a", "b", "c"]) == pytest.approx(2 / 3)
    assert rouge_l([], ["a"]) == 0.0
    assert rouge_l(["d", "c", "b", "a"], ["a", "b", "c", "d"]) == pytest.approx(0.25)


class Recaller:
    """Completes items verbatim only when told the benchmark's name."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    @property
    def batch_size(self) -> int:
        return 4

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        raise AssertionError("not used")

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        out = []
        for r in requests:
            first = r.context.split("\n\n", 1)[1]
            full = next(t for t in self.texts if t.startswith(first))
            guided = "WordBench dataset" in r.context
            text = full[len(first) :] if guided else " something else entirely here"
            out.append(GenerateResult(text, 5, "stop"))
        return out

    def chat_template(self):  # type: ignore[no-untyped-def]
        return None

    def info(self) -> Mapping[str, Any]:
        return {}


def test_guided_completion_detects_name_triggered_recall(tmp_path: Path) -> None:
    rows = [
        {"q": f"Item {i}: a farmer has {i + 10} cows and {i + 3} goats in the barn"}
        for i in range(10)
    ]
    (tmp_path / "w.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = task_spec_from_dict(
        {
            "task": "w",
            "dataset": {"path": "w.jsonl"},
            "prompt": {"template": "{{ q }}"},
            "mode": "generate",
            "generate": {"target": "x"},
        }
    )
    runner = TaskRunner(spec, [tmp_path])
    items = load_items(spec, [tmp_path])
    report = guided_completion_probe(
        runner, items, Recaller([r["q"] for r in rows]), benchmark="WordBench"
    )
    assert report.n == 10
    assert report.mean("guided_rouge_l") == 1.0
    assert report.mean("unguided_rouge_l") < 0.3
    assert (report.guided_wins, report.unguided_wins) == (10, 0)
    assert report.p_value == pytest.approx(2**-10)
    assert report.to_dict()["probe"] == "guided_completion"
