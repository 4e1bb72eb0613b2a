"""CircularEval on scripted models whose behaviour is known (one that recalls each item's
published answer letter, one that knows the answers, one that always says A), its
statistics by hand, and a real run on a tiny random model."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval.contamination import (
    CircularItem,
    CircularReport,
    circular_probe,
    circular_vs_reference,
    permute_options,
    poisson_binomial_upper_tail,
    rotation_orders,
)
from pytest_llmeval.dataset import Item, load_items
from pytest_llmeval.eval import TaskRunner
from pytest_llmeval.model import (
    ChatTemplate,
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    ModelSettings,
    load_backend,
)
from pytest_llmeval.scorer import binomial_upper_tail, wilson_interval
from pytest_llmeval.task import TaskSpec, task_spec_from_dict

LETTERS = "ABCD"
# Item i: the right option is "right<i>", published at position i % 4.
QUIZ: list[dict[str, Any]] = []
for _i in range(12):
    _options = [f"w{_i}a", f"w{_i}b", f"w{_i}c"]
    _options.insert(_i % 4, f"right{_i}")
    QUIZ.append({"question": f"Item {_i}?", "choices": _options, "answer": str(_i % 4)})
PUBLISHED_LETTER = {row["question"]: LETTERS[int(row["answer"])] for row in QUIZ}
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


class Scripted:
    def __init__(self, logprob: Callable[[LoglikelihoodRequest], float]) -> None:
        self._logprob = logprob
        self.contexts: list[str] = []

    @property
    def batch_size(self) -> int:
        return 4

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        self.contexts.extend(r.context for r in requests)
        return [LoglikelihoodResult(self._logprob(r), False, 1) for r in requests]

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        raise AssertionError("CircularEval scores this task by log-likelihood")

    def chat_template(self) -> ChatTemplate | None:
        return None

    def info(self) -> Mapping[str, Any]:
        return {"model": "scripted"}


def _task(tmp_path: Path, rows: list[dict[str, Any]] = QUIZ) -> tuple[TaskSpec, list[Item]]:
    (tmp_path / "quiz.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = task_spec_from_dict(MC_SPEC)
    return spec, load_items(spec, [tmp_path])


def _question(context: str) -> str:
    return context.split("\n", 1)[0]


def recaller(r: LoglikelihoodRequest) -> float:
    """Answers each question with its published answer letter, whatever the options say."""
    return 0.0 if r.continuation.strip() == PUBLISHED_LETTER[_question(r.context)] else -3.0


def knower(r: LoglikelihoodRequest) -> float:
    options = dict(re.findall(r"\n([ABCD])\. (\S+)", r.context))
    return 0.0 if options[r.continuation.strip()].startswith("right") else -3.0


def says_a(r: LoglikelihoodRequest) -> float:
    return 0.0 if r.continuation.strip() == "A" else -3.0


def test_rotations() -> None:
    assert rotation_orders(4) == [(0, 1, 2, 3), (1, 2, 3, 0), (2, 3, 0, 1), (3, 0, 1, 2)]
    assert rotation_orders(2) == [(0, 1), (1, 0)]
    with pytest.raises(ValueError, match="two options"):
        rotation_orders(1)
    doc = {"choices": ["g", "x", "y", "z"], "answer": "0"}
    golds = [permute_options(doc, "choices", "answer", o)["answer"] for o in rotation_orders(4)]
    assert golds == ["0", "3", "2", "1"]  # the gold follows its option, kept a string


def test_recalling_the_published_letters_is_right_only_as_published(tmp_path: Path) -> None:
    spec, items = _task(tmp_path)
    backend = Scripted(recaller)
    report = circular_probe(TaskRunner(spec, [tmp_path]), items, backend)
    assert report.n == 12 and report.skipped == () and report.failed == ()
    assert all(i.correct == (True, False, False, False) for i in report.items)
    assert report.published_accuracy == 1.0 and report.circular_accuracy == 0.0
    assert report.mean_accuracy == 0.25
    assert (report.right_once, report.right_once_published) == (12, 12)
    assert report.expected_published == 3.0
    assert report.p_value == pytest.approx(0.25**12)
    assert report.published_interval == wilson_interval(12, 12)
    assert report.circular_interval == wilson_interval(0, 12)
    assert report.mean_interval == wilson_interval(3.0, 12)
    # Rotation r shows published option (i + r) mod 4 at position i; the recaller always
    # takes the published gold's position, whose option differs in every rotation.
    gold = int(QUIZ[5]["answer"])
    assert report.items[5].chosen == tuple((gold + r) % 4 for r in range(4))
    # Every rotation was asked: 12 items x 4 rotations x 4 choices.
    assert len(backend.contexts) == 12 * 4 * 4
    shown = {c for c in backend.contexts if c.startswith("Item 1?")}
    assert len(shown) == 4
    assert "Item 1?\nA. right1\nB. w1b\nC. w1c\nD. w1a\nAnswer:" in shown  # rotation 1
    data = report.to_dict()
    assert data["probe"] == "circular_eval" and data["right_once_published"] == 12
    assert data["items"][0]["correct"] == [True, False, False, False]
    assert data["items"][0]["only_published"] is True
    assert json.loads(json.dumps(data)) == data


def test_a_model_that_knows_the_answers_is_circular_correct(tmp_path: Path) -> None:
    spec, items = _task(tmp_path)
    report = circular_probe(TaskRunner(spec, [tmp_path]), items, Scripted(knower))
    assert report.circular_accuracy == report.published_accuracy == report.mean_accuracy == 1.0
    assert (report.right_once, report.right_once_published, report.p_value) == (0, 0, 1.0)
    assert all(i.circular_correct and not i.only_published for i in report.items)
    assert all(set(i.chosen) == {int(QUIZ[k]["answer"])} for k, i in enumerate(report.items))


def test_position_bias_is_right_once_where_the_gold_is_a(tmp_path: Path) -> None:
    """Always A: right in the one rotation that brings the gold to A, which is the
    published one for the items whose gold is A (3 of 12): the test then reflects the
    gold positions, uniform here."""
    spec, items = _task(tmp_path)
    report = circular_probe(TaskRunner(spec, [tmp_path]), items, Scripted(says_a))
    assert (report.right_once, report.right_once_published) == (12, 3)
    for k, item in enumerate(report.items):
        gold = int(QUIZ[k]["answer"])
        assert item.correct == tuple(r == gold for r in range(4))
    assert report.published_accuracy == 0.25 and report.circular_accuracy == 0.0
    expected = 1 - (0.75**12 + 12 * 0.25 * 0.75**11 + 66 * 0.25**2 * 0.75**10)
    assert report.p_value == pytest.approx(expected)
    assert report.p_value == pytest.approx(binomial_upper_tail(3, 12, Fraction(1, 4)))


def test_items_without_two_options_are_skipped_and_unscored_ones_failed(
    tmp_path: Path,
) -> None:
    rows = [*QUIZ[:3], {"question": "Lonely?", "choices": ["only"], "answer": "0"}]
    spec, items = _task(tmp_path, rows)

    class Overflowing(Scripted):
        def loglikelihood(
            self, requests: Sequence[LoglikelihoodRequest]
        ) -> list[LoglikelihoodResult]:
            # Item 1's rotation 3 shows "w1c" first: its requests fail.
            return [
                LoglikelihoodResult(0.0, False, 1, error="an empty continuation")
                if r.context.startswith("Item 1?\nA. w1c")
                else LoglikelihoodResult(knower(r), False, 1)
                for r in requests
            ]

    report = circular_probe(TaskRunner(spec, [tmp_path]), items, Overflowing(knower))
    assert report.skipped == (items[3].id,)
    assert [f[0] for f in report.failed] == [items[1].id]
    assert "an empty continuation" in report.failed[0][1]
    assert [i.item_id for i in report.items] == [items[0].id, items[2].id]


def test_poisson_binomial_tail() -> None:
    assert poisson_binomial_upper_tail(2, [Fraction(1, 2), Fraction(1, 4)]) == pytest.approx(1 / 8)
    assert poisson_binomial_upper_tail(1, [Fraction(1, 2), Fraction(1, 4)]) == pytest.approx(5 / 8)
    assert poisson_binomial_upper_tail(0, [Fraction(1, 2)]) == 1.0
    assert poisson_binomial_upper_tail(3, [Fraction(1, 2), Fraction(1, 4)]) == 0.0
    probs = [Fraction(1, 3), Fraction(1, 4), Fraction(1, 5), Fraction(1, 4)]
    # By enumeration of the 16 outcomes.
    exact = Fraction(0)
    for mask in range(16):
        hits = [bool(mask >> j & 1) for j in range(4)]
        if sum(hits) >= 2:
            term = Fraction(1)
            for p, hit in zip(probs, hits, strict=True):
                term *= p if hit else 1 - p
            exact += term
    assert poisson_binomial_upper_tail(2, probs) == pytest.approx(float(exact), rel=1e-12)
    equal = [Fraction(1, 4)] * 12
    assert poisson_binomial_upper_tail(5, equal) == binomial_upper_tail(5, 12, Fraction(1, 4))


def _item(item_id: str, correct: Sequence[bool]) -> CircularItem:
    return CircularItem(item_id, len(correct), tuple(correct), (None,) * len(correct))


def test_mixed_option_counts_use_each_items_chance() -> None:
    report = CircularReport(
        "quiz", (_item("a", [True, False]), _item("b", [True, False, False, False]))
    )
    assert (report.right_once, report.right_once_published) == (2, 2)
    assert report.expected_published == 0.75
    assert report.p_value == pytest.approx(1 / 8)  # 1/2 * 1/4


def test_circular_vs_reference_pairs_the_only_published_indicator() -> None:
    only = [True, False, False, False]
    never = [False, True, True, True]
    test = CircularReport("quiz", tuple(_item(f"q{k}", only) for k in range(7)))
    # q0-q4: only published for the tested model alone (b = 5); q5, q6: for both; q7 in
    # the reference only.
    ref_items = [_item(f"q{k}", never) for k in range(5)] + [
        _item("q5", only),
        _item("q6", only),
        _item("q7", only),
    ]
    result = circular_vs_reference(test, CircularReport("quiz", tuple(ref_items)))
    assert (result.n_paired, result.b, result.c) == (7, 5, 0)
    assert result.p_value == pytest.approx(1 / 32)
    assert result.unpaired == ("q7",)
    reverse = circular_vs_reference(
        CircularReport("quiz", tuple(ref_items)), CircularReport("quiz", test.items)
    )
    assert (reverse.b, reverse.c, reverse.p_value) == (0, 5, 1.0)
    with pytest.raises(ValueError, match="different tasks"):
        circular_vs_reference(test, CircularReport("other", ()))


def test_real_run_on_a_tiny_random_model(tmp_path: Path, tiny_model_dir: Path) -> None:
    spec, items = _task(tmp_path, QUIZ[:3])
    backend = load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=4))
    runner = TaskRunner(spec, [tmp_path])
    report = circular_probe(runner, items, backend)
    assert report.n == 3 and report.failed == ()
    published = runner.run(items, backend)
    for item, plain in zip(report.items, published, strict=True):
        assert len(item.correct) == len(item.chosen) == 4
        # Rotation 0 is the published item: the same prompt, the same answer.
        assert item.correct[0] is plain.correct
        assert item.chosen[0] == plain.pred
        # Whatever the model picks, it is right exactly where it picks the gold.
        gold = int(QUIZ[report.items.index(item)]["answer"])
        assert item.correct == tuple(c == gold for c in item.chosen)
    assert circular_probe(runner, items, backend) == report  # deterministic
