"""Perturbation probes on scripted models whose behaviour is known: one that memorised the
canonical items, one that knows the answers, one that guesses."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval._errors import SpecError
from pytest_llmeval.contamination import (
    canonical_order_test,
    entity_rewrite_probe,
    number_rewrite_probe,
    option_shuffle_probe,
)
from pytest_llmeval.dataset import Item, load_items
from pytest_llmeval.eval import TaskRunner
from pytest_llmeval.model import (
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
)
from pytest_llmeval.task import TaskSpec, task_spec_from_dict

QUIZ = [
    {
        "question": f"Capital number {i}?",
        "choices": [f"right{i}", f"w{i}a", f"w{i}b", f"w{i}c"],
        "answer": "0",
    }
    for i in range(12)
]
MC_SPEC: dict[str, Any] = {
    "task": "quiz",
    "dataset": {"path": "quiz.jsonl"},
    "prompt": {
        "template": "{{ question }}\nA. {{ choices[0] }}\nB. {{ choices[1] }}\n"
        "C. {{ choices[2] }}\nD. {{ choices[3] }}\nAnswer:"
    },
    "mode": "multiple_choice",
    "multiple_choice": {"choices": ["A", "B", "C", "D"], "gold": "{{ answer }}"},
    "contamination": {"options": "choices", "gold": "answer"},
}
CANONICAL = {
    f"Capital number {i}?": f"A. right{i}\nB. w{i}a\nC. w{i}b\nD. w{i}c" for i in range(12)
}


class Scripted:
    def __init__(
        self,
        logprob: Callable[[LoglikelihoodRequest], float] | None = None,
        text: Callable[[GenerateRequest], str] | None = None,
    ) -> None:
        self._logprob, self._text = logprob, text

    @property
    def batch_size(self) -> int:
        return 4

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        assert self._logprob is not None
        return [LoglikelihoodResult(self._logprob(r), False, 1) for r in requests]

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        assert self._text is not None
        return [GenerateResult(self._text(r), 1, "stop") for r in requests]

    def chat_template(self):  # type: ignore[no-untyped-def]
        return None

    def info(self) -> Mapping[str, Any]:
        return {"model": "scripted"}


def _task(
    tmp_path: Path, spec: dict[str, Any], name: str, rows: list[dict[str, Any]]
) -> tuple[TaskSpec, list[Item]]:
    (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = task_spec_from_dict(spec)
    return task, load_items(task, [tmp_path])


def _options(context: str) -> dict[str, str]:
    return dict(re.findall(r"\n([ABCD])\. (\S+)", context))


def memoriser(r: LoglikelihoodRequest) -> float:
    """Knows each question's canonical letter: A, whatever the options now say."""
    return 0.0 if r.continuation.strip() == "A" else -3.0


def knower(r: LoglikelihoodRequest) -> float:
    """Picks the right option by its text, wherever it is."""
    return 0.0 if _options(r.context).get(r.continuation.strip(), "").startswith("right") else -3.0


def test_memorised_canonical_answers_drop_under_shuffling(tmp_path: Path) -> None:
    spec, items = _task(tmp_path, MC_SPEC, "quiz.jsonl", QUIZ)
    runner = TaskRunner(spec, [tmp_path])
    report = option_shuffle_probe(runner, items, Scripted(logprob=memoriser), k=2, seed=5)
    assert report.n == 12
    assert report.canonical_accuracy == 1.0
    assert report.rewritten_accuracy == 0.0  # the gold always moves away from A
    assert (report.b, report.c) == (12, 0)
    assert report.p_value == pytest.approx(2 / 2**12)
    assert report.only_canonical == 1.0
    assert not any(i.detail["consistent"] for i in report.items)
    data = report.to_dict()
    assert data["probe"] == "option_shuffle" and len(data["items"]) == 12
    assert report.items[0].detail["orders"] == [list(o) for o in report.items[0].detail["orders"]]


def test_a_model_that_knows_the_answers_is_consistent(tmp_path: Path) -> None:
    spec, items = _task(tmp_path, MC_SPEC, "quiz.jsonl", QUIZ)
    report = option_shuffle_probe(
        TaskRunner(spec, [tmp_path]), items, Scripted(logprob=knower), k=3
    )
    assert report.canonical_accuracy == report.rewritten_accuracy == 1.0
    assert (report.b, report.c, report.p_value, report.only_canonical) == (0, 0, 1.0, 0.0)
    assert all(i.detail["consistent"] for i in report.items)
    assert all(set(i.detail["chosen_original_option"]) == {0} for i in report.items)


def test_canonical_order_is_flagged_when_the_model_prefers_it(tmp_path: Path) -> None:
    spec, items = _task(tmp_path, MC_SPEC, "quiz.jsonl", QUIZ)
    runner = TaskRunner(spec, [tmp_path])

    def recalls_order(r: LoglikelihoodRequest) -> float:
        question = r.continuation.split("\n", 1)[0]
        return -10.0 if CANONICAL[question] in r.continuation else -12.0

    report = canonical_order_test(runner, items, Scripted(logprob=recalls_order), k=3)
    assert (report.n, report.canonical_first) == (12, 12)
    assert report.p_value == pytest.approx(0.25**12)
    assert report.mean_margin == pytest.approx(2.0)
    # Every order equally likely: never strictly first, p-value 1.
    flat = canonical_order_test(runner, items, Scripted(logprob=lambda r: -5.0), k=3)
    assert (flat.canonical_first, flat.p_value) == (0, 1.0)
    # The context is the same for all orders of an item; only the question text changes.
    seen: list[LoglikelihoodRequest] = []
    canonical_order_test(runner, items[:1], Scripted(logprob=lambda r: seen.append(r) or 0.0), k=3)
    assert len({r.context for r in seen}) == 1 and len({r.continuation for r in seen}) == 4


GSM_SPEC: dict[str, Any] = {
    "task": "word",
    "dataset": {"path": "word.jsonl"},
    "prompt": {"template": "Q: {{ question }}\nA:"},
    "mode": "generate",
    "generate": {
        "target": "{{ answer | after('####') }}",
        "extract": [{"kind": "regex", "pattern": r"answer is (\d+)"}],
        "compare": "numeric",
    },
    "contamination": {"question": "question", "solution": "answer"},
}
WORD = [
    {
        "question": f"Tom has {a} apples and buys {b} more. How many apples does he have?",
        "answer": f"{a}+{b}=<<{a}+{b}={a + b}>>{a + b}\n#### {a + b}",
    }
    for a, b in [(15, 9), (21, 13), (33, 8), (40, 17), (55, 26), (61, 19)]
] + [{"question": "Half of 2 apples?", "answer": "2/2=<<2/2=1>>1\n#### 1"}]


def _solve(r: GenerateRequest) -> str:
    a, b = (int(x) for x in re.findall(r"\d+", r.context)[:2])
    return f" The answer is {a + b}."


def test_number_rewrites_catch_recalled_answers(tmp_path: Path) -> None:
    spec, items = _task(tmp_path, GSM_SPEC, "word.jsonl", WORD)
    runner = TaskRunner(spec, [tmp_path])
    original = {row["question"]: row["answer"].rsplit("#### ", 1)[1] for row in WORD}

    def recaller(r: GenerateRequest) -> str:
        question = r.context[3:].split("\nA:")[0]
        return f" The answer is {original.get(question, '0')}."

    report = number_rewrite_probe(runner, items, Scripted(text=recaller), seed=9)
    assert report.skipped == ("word-0006",)  # only a unit constant to change
    assert report.n == 6
    assert (report.canonical_accuracy, report.rewritten_accuracy) == (1.0, 0.0)
    assert report.p_value == pytest.approx(2 / 2**6)
    solver = number_rewrite_probe(runner, items, Scripted(text=_solve), seed=9)
    assert (solver.canonical_accuracy, solver.rewritten_accuracy, solver.p_value) == (1.0, 1.0, 1.0)
    detail = solver.items[0].detail
    assert detail["rewritten_answer"] == detail["rewritten_extracted"]
    assert detail["rewritten_question"] != WORD[0]["question"]


def test_probes_name_the_missing_spec_field(tmp_path: Path) -> None:
    spec, items = _task(tmp_path, {**MC_SPEC, "contamination": None}, "quiz.jsonl", QUIZ)
    with pytest.raises(SpecError, match=r"contamination.options.*is required by this probe"):
        option_shuffle_probe(TaskRunner(spec, [tmp_path]), items, Scripted(logprob=knower))


def test_entity_rewrites_keep_answers_and_catch_name_recall(tmp_path: Path) -> None:
    rows = [
        {
            "question": f"Janet has {a} apples and Tom gives her {b} more. How many?",
            "answer": f"#### {a + b}",
        }
        for a, b in [(15, 9), (21, 13), (33, 8), (40, 17), (55, 26)]
    ] + [{"question": "A farmer has 5 cows and buys 2. How many?", "answer": "#### 7"}]
    spec, items = _task(tmp_path, GSM_SPEC, "word.jsonl", rows)
    runner = TaskRunner(spec, [tmp_path])
    solver = entity_rewrite_probe(runner, items, Scripted(text=_solve), seed=2)
    assert solver.skipped == ("word-0005",)
    assert (solver.canonical_accuracy, solver.rewritten_accuracy) == (1.0, 1.0)

    def only_janet(r: GenerateRequest) -> str:  # "knows" the items only with their names
        return _solve(r) if "Janet" in r.context else " The answer is 0."

    recall = entity_rewrite_probe(runner, items, Scripted(text=only_janet), seed=2)
    assert (recall.b, recall.c, recall.rewritten_accuracy) == (5, 0, 0.0)
    assert dict(recall.items[0].detail["changes"])["Janet"] != "Janet"
