"""The benchmark specs without published data here (MMLU-Pro, GPQA, ARC, HellaSwag, CMMLU,
TruthfulQA MC1, MBPP), checked on made-up fixtures in each dataset's real layout
(``fixtures/`` is a data directory): the spec loads, its items and ids, the exact prompt,
the gold, and that a scripted model preferring the gold scores 1 and one preferring
another option scores 0."""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval._errors import DataError, SpecError
from pytest_llmeval.dataset import Item, load_items
from pytest_llmeval.eval import ItemResult, PreparedItem, TaskRunner
from pytest_llmeval.model import (
    Backend,
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
)
from pytest_llmeval.task import DateWindow, TaskSpec, load_task_spec

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
DATA = [FIXTURES]

NEW_TASKS = (
    "mmlu_pro",
    "gpqa",
    "arc_challenge",
    "arc_easy",
    "hellaswag",
    "cmmlu",
    "truthfulqa_mc1",
    "truthfulqa_mc2",
    "mbpp",
    "livecodebench",
    "longbench",
)
# Tasks whose item score is 1 for the gold choice and 0 otherwise (not mc2's probability mass).
MC_TASKS = tuple(
    t for t in NEW_TASKS if t not in ("mbpp", "livecodebench", "longbench", "truthfulqa_mc2")
)

EXPECTED_IDS = {
    "mmlu_pro": ["mmlu_pro-101", "mmlu_pro-102", "mmlu_pro-103", "mmlu_pro-104"],
    "gpqa": [f"gpqa-recFixture0000{i}" for i in range(1, 6)],
    "arc_challenge": [f"arc_challenge-Fixture_100{i}" for i in range(1, 5)],
    "arc_easy": [f"arc_easy-FixtureEasy_{i}" for i in range(1, 4)],
    "hellaswag": [f"hellaswag-000{i}" for i in range(4)],
    "cmmlu": [
        "cmmlu-agronomy-0000",
        "cmmlu-agronomy-0001",
        "cmmlu-world_history-0000",
        "cmmlu-world_history-0001",
    ],
    "truthfulqa_mc1": [f"truthfulqa_mc1-000{i}" for i in range(3)],
    "truthfulqa_mc2": [f"truthfulqa_mc2-000{i}" for i in range(3)],
    "mbpp": ["mbpp-11", "mbpp-12", "mbpp-13"],
    # fix001_a (2023-05-20) is outside the window; 1999F is on its first day.
    "livecodebench": [
        "livecodebench-test5-fix101_a",
        "livecodebench-test5-1999F",
        "livecodebench-test6-9001",
    ],
    "longbench": [
        "longbench-narrativeqa-fixnqa0001",
        "longbench-qasper-fixqas0001",
        "longbench-multifieldqa_en-fixmfq0001",
        "longbench-hotpotqa-fixhot0001",
        "longbench-hotpotqa-fixhot0002",
        "longbench-2wikimqa-fix2wk0001",
        "longbench-musique-fixmus0001",
    ],
}

# task: (suite markers and capability markers, catalog capability, catalog style, metric)
EXPECTED_META = {
    "mmlu_pro": (("regression", "knowledge"), "knowledge", "multiple_choice", "acc"),
    "gpqa": (("release", "knowledge"), "knowledge", "multiple_choice", "acc"),
    "arc_challenge": (("reasoning",), "reasoning", "multiple_choice", "acc_norm"),
    "arc_easy": (("reasoning",), "reasoning", "multiple_choice", "acc_norm"),
    "hellaswag": (("reasoning",), "reasoning", "multiple_choice", "acc_norm"),
    "cmmlu": (("chinese", "knowledge"), "chinese", "multiple_choice", "acc"),
    "truthfulqa_mc1": (("knowledge",), "knowledge", "multiple_choice", "acc"),
    "truthfulqa_mc2": (("knowledge",), "knowledge", "multiple_choice", "mc2"),
    "mbpp": (("code",), "code", "execution", "pass@1"),
    "livecodebench": (("release", "code"), "code", "execution", "pass@1"),
    "longbench": (("release", "long_context"), "long_context", "generative", "f1"),
}


class ScriptedBackend:
    """A Backend whose answers come from functions of the request."""

    def __init__(
        self,
        logprob: Callable[[LoglikelihoodRequest], float] | None = None,
        text: Callable[[GenerateRequest], str] | None = None,
    ) -> None:
        self._logprob = logprob
        self._text = text
        self.ll_requests: list[LoglikelihoodRequest] = []
        self.gen_requests: list[GenerateRequest] = []

    @property
    def batch_size(self) -> int:
        return 8

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        assert self._logprob is not None, "no log-likelihood requests expected"
        self.ll_requests.extend(requests)
        return [
            LoglikelihoodResult(logprob=self._logprob(r), is_greedy=False, n_tokens=1)
            for r in requests
        ]

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        assert self._text is not None, "no generate requests expected"
        self.gen_requests.extend(requests)
        return [
            GenerateResult(text=self._text(r), n_tokens=1, finish_reason="stop") for r in requests
        ]

    def chat_template(self):  # type: ignore[no-untyped-def]
        return None

    def info(self) -> Mapping[str, Any]:
        return {"model": "scripted"}


def _spec(task: str) -> TaskSpec:
    return load_task_spec(BENCHMARKS / f"{task}.yaml")


def _prepared(task: str) -> tuple[TaskSpec, list[Item], list[PreparedItem]]:
    spec = _spec(task)
    items = load_items(spec, DATA)
    runner = TaskRunner(spec, DATA)
    return spec, items, [runner.prepare(item) for item in items]


def _run_preferring(task: str, pick: Callable[[PreparedItem], int]) -> list[ItemResult]:
    """Run a multiple-choice task on a model that gives the choice ``pick(item)`` log-prob 0
    and every other choice -5 (so it wins under acc and acc_norm alike)."""
    spec, items, prepared = _prepared(task)
    delim = spec.prompt.target_delimiter
    table = {
        (p.prompt, delim + choice): (0.0 if i == pick(p) else -5.0)
        for p in prepared
        for i, choice in enumerate(p.choices)
    }
    backend = ScriptedBackend(logprob=lambda r: table[(r.context, r.continuation)])
    assert isinstance(backend, Backend)
    results = TaskRunner(spec, DATA).run(items, backend)
    assert len(backend.ll_requests) == sum(len(p.choices) for p in prepared)
    return results


# --------------------------------------------------------------------------- all specs


@pytest.mark.parametrize("task", NEW_TASKS)
def test_spec_loads_with_markers_and_catalog(task: str) -> None:
    spec = _spec(task)
    markers, capability, style, metric = EXPECTED_META[task]
    assert spec.name == task
    assert spec.markers == markers
    assert spec.catalog.capability == capability
    assert spec.catalog.style == style
    assert spec.metric == metric
    assert spec.floor is None  # no floor until a model has been measured
    assert spec.dataset.hub is not None
    assert spec.description


@pytest.mark.parametrize("task", NEW_TASKS)
def test_items_load_from_fixtures_with_expected_ids(task: str) -> None:
    items = load_items(_spec(task), DATA)
    assert [i.id for i in items] == EXPECTED_IDS[task]


@pytest.mark.parametrize("task", MC_TASKS)
def test_gold_preferring_model_scores_one_and_other_option_zero(task: str) -> None:
    right = _run_preferring(task, lambda p: p.gold or 0)
    assert [r.score for r in right] == [1.0] * len(right)
    assert all(r.pred == r.gold == r.pred_norm for r in right)
    wrong = _run_preferring(task, lambda p: ((p.gold or 0) + 1) % len(p.choices))
    assert [r.score for r in wrong] == [0.0] * len(wrong)


def test_saturation_notes() -> None:
    assert "saturated" in _spec("hellaswag").catalog.saturation.lower()
    assert "no successor" in _spec("hellaswag").catalog.saturation
    assert _spec("hellaswag").catalog.successor is None
    assert "saturated" in _spec("arc_easy").catalog.saturation.lower()
    assert _spec("mmlu").catalog.successor == "mmlu_pro"
    assert _spec("mbpp").catalog.successor == "livecodebench"


# --------------------------------------------------------------------------- MMLU-Pro


def test_mmlu_pro_prompt_five_shot_from_validation_with_ten_letters() -> None:
    _, items, prepared = _prepared("mmlu_pro")
    first = prepared[0]
    assert first.fewshot_ids == ("0", "1", "2", "3", "4")  # the first 5 validation rows
    prompt = first.prompt
    assert prompt.startswith("What is 3 + 4?\nA. 5\nB. 6\nC. 7\nD. 8\nAnswer: C\n\n")
    assert prompt.count("Answer:") == 6
    assert len(re.findall(r"\nAnswer: [A-J]\n\n", prompt)) == 5
    assert "sixth example" not in prompt
    assert "\nJ. Sinitic\nAnswer: A\n\n" in prompt  # a 10-option exemplar
    assert prompt.endswith(
        "A bakery packs 12 muffins per box. How many boxes does it need for 150 muffins?\n"
        "A. 8\nB. 9\nC. 10\nD. 11\nE. 12\nF. 13\nG. 14\nH. 15\nI. 16\nJ. 17\nAnswer:"
    )
    assert first.choices == tuple("ABCDEFGHIJ")
    assert (first.gold, first.target) == (5, "F")
    # As many letters as options; the gold is the answer letter's position.
    assert [len(p.choices) for p in prepared] == [10, 4, 7, 10]
    assert [p.gold for p in prepared] == [it.doc["answer_index"] for it in items]
    assert prepared[3].target == "J"
    assert prepared[1].prompt.endswith("C. Carbon dioxide\nD. Helium\nAnswer:")
    # The few-shot block is the same for every item (no per-category few-shot).
    block = prompt[: prompt.index("A bakery")]
    assert all(p.prompt.startswith(block) for p in prepared)


# --------------------------------------------------------------------------- GPQA


def _clean(text: str) -> str:
    """lm-eval's gpqa zeroshot preprocess."""
    return text.strip().replace(" [title]", ". ").replace("  ", " ")


def _gpqa_options(prompt: str) -> list[str]:
    return re.findall(r"^\([ABCD]\) (.*)$", prompt, re.M)


def test_gpqa_prompt_and_shuffled_gold() -> None:
    _, items, prepared = _prepared("gpqa")
    for item, p in zip(items, prepared, strict=True):
        doc = item.doc
        assert p.prompt.startswith(
            "What is the correct answer to this question:" + doc["Question"] + "\nChoices:\n(A) "
        )
        assert p.prompt.endswith("\nAnswer:")
        assert p.fewshot_ids == ()
        assert p.choices == ("(A)", "(B)", "(C)", "(D)")
        options = _gpqa_options(p.prompt)
        answers = [doc["Correct Answer"]] + [doc[f"Incorrect Answer {i}"] for i in (1, 2, 3)]
        assert sorted(options) == sorted(_clean(a) for a in answers)
        assert p.gold is not None
        assert options[p.gold] == _clean(doc["Correct Answer"])
        assert p.target == f"({'ABCD'[p.gold]})"
    # Answers are cleaned as lm-eval does (strip, double spaces).
    assert "(B) An aldehyde\n" in prepared[1].prompt
    assert "Topoisomerase I\n" in prepared[2].prompt
    # The right answer is not always in the same place ...
    assert len({p.gold for p in prepared}) > 1
    # ... and its place is a fixed function of the item: the same in a fresh run, and the
    # same when the item is prepared alone.
    again = [TaskRunner(_spec("gpqa"), DATA).prepare(item) for item in reversed(items)]
    assert [(p.prompt, p.gold) for p in reversed(again)] == [(p.prompt, p.gold) for p in prepared]
    assert [p.gold for p in prepared] == [2, 0, 3, 3, 0]


# --------------------------------------------------------------------------- ARC


def test_arc_prompts_option_text_and_labels() -> None:
    _, _, prepared = _prepared("arc_challenge")
    first = prepared[0]
    assert (
        first.prompt
        == "Question: Which tool is best for measuring the mass of a small rock?\nAnswer:"
    )
    assert first.choices == ("a ruler", "a balance", "a thermometer", "a graduated cylinder")
    assert (first.gold, first.target) == (1, "a balance")
    assert prepared[1].gold == 0  # labels 1-4, answerKey "1"
    assert len(prepared[2].choices) == 5 and prepared[2].target == "wind"
    assert len(prepared[3].choices) == 2
    _, _, easy = _prepared("arc_easy")
    assert [p.target for p in easy] == ["roots", "ice", "Mercury"]
    assert all(p.fewshot_ids == () for p in [*prepared, *easy])


def test_arc_acc_norm_divides_by_choice_length() -> None:
    # A model giving every choice the same total log-likelihood picks the longest choice under
    # acc_norm (the per-character average is least negative).
    spec = _spec("arc_challenge")
    items = load_items(spec, DATA)[:1]
    results = TaskRunner(spec, DATA).run(items, ScriptedBackend(logprob=lambda r: -3.0))
    assert results[0].pred == 0
    assert results[0].pred_norm == 3  # "a graduated cylinder"
    assert results[0].score == 0.0


# --------------------------------------------------------------------------- HellaSwag


def _lm_eval_preprocess(text: str) -> str:
    """lm-evaluation-harness's hellaswag preprocess (with its regex)."""
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def test_hellaswag_preprocessing_matches_lm_eval() -> None:
    _, items, prepared = _prepared("hellaswag")
    for item, p in zip(items, prepared, strict=True):
        doc = item.doc
        ctx = doc["ctx_a"] + " " + doc["ctx_b"].capitalize()
        assert p.prompt == _lm_eval_preprocess(doc["activity_label"] + ": " + ctx)
        assert list(p.choices) == [_lm_eval_preprocess(e) for e in doc["endings"]]
        assert p.gold == int(doc["label"])
        assert p.fewshot_ids == ()
    assert prepared[0].prompt == (
        "Washing dishes: A man stands at a kitchen sink full of plates. He Turns on the tap and"
    )
    assert prepared[1].prompt == (
        "Home and Garden: How to repot a cactus. Put on thick gloves. "
        "Cactus spines can break off in your skin."
    )
    assert prepared[1].choices[0] == " Tip the pot on its side. Slide the cactus out gently."
    assert not any("[" in c for p in prepared for c in (p.prompt, *p.choices))


def test_hellaswag_label_may_be_a_string_as_on_the_hub() -> None:
    spec = _spec("hellaswag")
    item = load_items(spec, DATA)[2]
    hub_item = Item(id=item.id, index=item.index, doc={**item.doc, "label": "2"})
    assert TaskRunner(spec, DATA).prepare(hub_item).gold == 2


# --------------------------------------------------------------------------- CMMLU


def test_cmmlu_prompt_chinese_subject_and_five_shot() -> None:
    _, _, prepared = _prepared("cmmlu")
    first = prepared[0]
    assert first.prompt.startswith(
        "以下是关于农学的单项选择题，请直接给出正确答案的选项。\n\n"
        "水稻属于哪一类作物？\nA. 粮食作物\n"
    )
    assert first.fewshot_ids == tuple(f"agronomy-{i}" for i in range(5))
    assert first.prompt.count("答案：") == 6
    assert len(re.findall(r"\n答案： [ABCD]\n\n", first.prompt)) == 5
    assert first.prompt.endswith(
        "小麦的果实在植物学上称为？\nA. 颖果\nB. 浆果\nC. 核果\nD. 荚果\n答案："
    )
    # The question is stripped, as lm-eval's Question.strip().
    assert prepared[1].prompt.endswith(
        "\n\n下列哪种作物属于豆科？\nA. 玉米\nB. 大豆\nC. 高粱\nD. 甘蔗\n答案："
    )
    assert [p.gold for p in prepared] == [0, 1, 1, 0]
    assert all(p.choices == ("A", "B", "C", "D") for p in prepared)
    assert prepared[2].prompt.startswith("以下是关于世界历史的单项选择题")
    assert prepared[2].fewshot_ids == tuple(f"world_history-{i}" for i in range(5))


def test_cmmlu_description_names_every_subject_in_chinese() -> None:
    from pytest_llmeval.prompt import render

    description = _spec("cmmlu").prompt.description
    assert render(description, {"subset": "made_up"}) == (
        "以下是关于made_up的单项选择题，请直接给出正确答案的选项。\n\n"
    )
    # The 67 subjects of lm-eval's table, each with its Chinese name.
    names = re.findall(r"'(\w+)': '([^']+)'", description)
    assert len(names) == 67
    for english, chinese in names:
        assert render(description, {"subset": english}).startswith(f"以下是关于{chinese}的")


# --------------------------------------------------------------------------- C-Eval

CEVAL_DESCRIPTION = "以下是中国关于{}考试的单项选择题，请选出其中的正确答案。\n\n"


def test_ceval_prompt_names_every_local_subject_in_chinese(shared_benchmarks: Path) -> None:
    """The 52 subjects of the local val split each have a Chinese name in the table, and
    each subject's prompt opens with C-Eval's description naming it (never the English file
    name)."""
    spec = load_task_spec(BENCHMARKS / "ceval.yaml")
    names = dict(re.findall(r"'(\w+)': '([^']+)'", spec.prompt.description))
    items = load_items(spec, [shared_benchmarks])
    first = {i.subset: i for i in reversed(items)}
    assert len(first) == 52 and sorted(first) == sorted(names)
    runner = TaskRunner(spec, [shared_benchmarks])
    for subset, item in sorted(first.items()):
        assert subset is not None
        prompt = runner.prepare(item).prompt
        assert prompt.startswith(CEVAL_DESCRIPTION.format(names[subset])), subset
        assert subset not in prompt
    prompt = runner.prepare(first["advanced_mathematics"]).prompt
    assert prompt.startswith(CEVAL_DESCRIPTION.format("高等数学"))
    assert len(re.findall(r"\n答案：[ABCD]\n\n", prompt)) == 5  # C-Eval's own "答案：A"


def test_ceval_subject_without_a_chinese_name_is_an_error(tmp_path: Path) -> None:
    """A subject file the table does not name fails, naming the spec, its field and the
    subject; it does not fall back to the English name."""
    for split in ("val", "dev"):
        folder = tmp_path / "ceval" / split
        folder.mkdir(parents=True)
        (folder / f"astrology_{split}.csv").write_text(
            "id,question,A,B,C,D,answer\n"
            + "".join(f"{i},问题{i},甲,乙,丙,丁,A\n" for i in range(5)),
            encoding="utf-8",
        )
    spec = load_task_spec(BENCHMARKS / "ceval.yaml")
    items = load_items(spec, [tmp_path])
    with pytest.raises(SpecError) as info:
        TaskRunner(spec, [tmp_path]).prepare(items[0])
    assert info.value.field == "prompt.description"
    assert info.value.source.endswith("ceval.yaml")
    assert "astrology" in str(info.value)


# --------------------------------------------------------------------------- TruthfulQA


TRUTHFULQA_PREAMBLE = (
    "Q: What is human life expectancy in the United States?\n"
    "A: Human life expectancy in the United States is 78 years.\n\n"
    "Q: Who was president of the United States in 1955?\n"
    "A: Dwight D. Eisenhower was president of the United States in 1955.\n\n"
    "Q: Which party did he belong to?\n"
    "A: He belonged to the Republican Party.\n\n"
    "Q: What is the square root of banana?\n"
    "A: I have no comment.\n\n"
    "Q: How does a telescope work?\n"
    "A: Telescopes use lenses or mirrors to focus light and make objects appear closer.\n\n"
    "Q: Where were the 1992 Olympics held?\n"
    "A: The 1992 Olympics were held in Barcelona, Spain."
)


def test_truthfulqa_mc1_prompt_is_lm_eval_qa_preamble() -> None:
    _, items, prepared = _prepared("truthfulqa_mc1")
    for item, p in zip(items, prepared, strict=True):
        assert p.prompt == TRUTHFULQA_PREAMBLE + "\n\nQ: " + item.doc["question"] + "\nA:"
        assert list(p.choices) == item.doc["mc1_targets"]["choices"]
        assert p.gold == 0
    assert [len(p.choices) for p in prepared] == [4, 3, 5]


def test_truthfulqa_mc2_scores_probability_mass_of_true_answers() -> None:
    spec, items, prepared = _prepared("truthfulqa_mc2")
    mc1 = _prepared("truthfulqa_mc1")[2]
    for item, p, p1 in zip(items, prepared, mc1, strict=True):
        assert p.prompt == p1.prompt  # same preamble and question as MC1
        assert list(p.choices) == item.doc["mc2_targets"]["choices"]
        assert p.labels == tuple(bool(x) for x in item.doc["mc2_targets"]["labels"])
    # Log-probabilities log(1), log(2), log(3), ... per choice: the item's score is the mass of
    # the true choices over the mass of all, computed here by hand.
    table = {
        (p.prompt, " " + c): math.log(i + 1) for p in prepared for i, c in enumerate(p.choices)
    }
    results = TaskRunner(spec, DATA).run(
        items, ScriptedBackend(logprob=lambda r: table[(r.context, r.continuation)])
    )
    for p, r in zip(prepared, results, strict=True):
        weights = [i + 1 for i in range(len(p.choices))]
        expected = sum(w for w, t in zip(weights, p.labels, strict=True) if t) / sum(weights)
        assert r.score == pytest.approx(expected, rel=1e-12)
        assert r.correct == (expected > 0.5)
    assert results[0].score == pytest.approx(3 / 6)  # labels 1, 1, 0: weights 1 + 2 of 6


def test_mc2_needs_labels_and_labels_need_mc2(tmp_path: Path) -> None:
    src = (BENCHMARKS / "truthfulqa_mc2.yaml").read_text()
    no_labels = tmp_path / "a.yaml"
    no_labels.write_text(src.replace('  labels: "{{ mc2_targets.labels }}"\n', ""))
    with pytest.raises(SpecError, match=r"a.yaml.*multiple_choice.labels.*needs labels"):
        load_task_spec(no_labels)
    not_mc2 = tmp_path / "b.yaml"
    not_mc2.write_text(src.replace("metric: mc2", "metric: acc"))
    with pytest.raises(SpecError, match=r"b.yaml.*multiple_choice.labels.*only used by metric mc2"):
        load_task_spec(not_mc2)


def test_mc2_label_count_mismatch_names_the_item(tmp_path: Path) -> None:
    data = tmp_path / "truthful_qa" / "multiple_choice"
    data.mkdir(parents=True)
    row = {
        "question": "Q?",
        "mc1_targets": {"choices": ["a", "b"], "labels": [1, 0]},
        "mc2_targets": {"choices": ["a", "b", "c"], "labels": [1, 0]},
    }
    (data / "validation.jsonl").write_text(json.dumps(row) + "\n")
    spec = _spec("truthfulqa_mc2")
    [item] = load_items(spec, [tmp_path])
    with pytest.raises(SpecError, match=r"multiple_choice.labels.*truthfulqa_mc2-0000.*one 1/0"):
        TaskRunner(spec, [tmp_path]).prepare(item)


# --------------------------------------------------------------------------- MBPP


def _mbpp_run(reply: Callable[[Item], str]) -> tuple[list[ItemResult], ScriptedBackend]:
    spec = _spec("mbpp")
    items = load_items(spec, DATA)
    by_prompt = {TaskRunner(spec, DATA).prepare(item).prompt: item for item in items}
    backend = ScriptedBackend(text=lambda r: reply(by_prompt[r.context]))
    return TaskRunner(spec, DATA).run(items, backend), backend


def test_mbpp_prompt_three_shot_paper_format() -> None:
    spec, _, prepared = _prepared("mbpp")
    first = prepared[0]
    assert first.fewshot_ids == ("mbpp-prompt-2", "mbpp-prompt-3", "mbpp-prompt-4")
    assert first.prompt.startswith(
        "You are an expert Python programmer, and here is your task: Write a function to find "
        "the similar elements from the given two tuple lists. Your code should pass these "
        "tests:\n\nassert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)\n"
    )
    assert first.prompt.count("[BEGIN]\n") == 4
    assert first.prompt.count("\n[DONE]\n\n") == 3
    assert "[BEGIN]\nimport math\r\ndef is_not_prime(n):\r\n" in first.prompt
    assert first.prompt.endswith(
        "You are an expert Python programmer, and here is your task: Write a function to count "
        "the vowels in a given string. Your code should pass these tests:\n\n"
        'assert count_vowels("banana") == 3\nassert count_vowels("Sky") == 0\n'
        'assert count_vowels("EerIe") == 4\n[BEGIN]\n'
    )
    assert spec.generate is not None
    assert spec.generate.stop == ("[DONE]",)
    assert spec.generate.scorer == "execution"


def test_mbpp_check_and_entry_point() -> None:
    from pytest_llmeval.prompt import render

    spec = _spec("mbpp")
    assert spec.generate is not None and spec.generate.execution is not None
    ex = spec.generate.execution
    items = load_items(spec, DATA)
    assert [render(ex.entry_point, i.doc) for i in items] == [
        "count_vowels",
        "common_sorted",  # `assert set(common_sorted(...))`: the builtin is skipped
        "running_total",
    ]
    assert render(ex.prompt, items[0].doc) == ""
    assert render(ex.test, items[2].doc) == (
        "import math\n\n\ndef check(candidate):\n"
        "    assert running_total([1, 2, 3]) == [1, 3, 6]\n"
        "    assert running_total([]) == []\n"
        "    assert math.isclose(running_total([0.5, 0.25])[-1], 0.75)\n"
    )


def test_mbpp_reference_code_passes_and_wrong_code_fails() -> None:
    right, backend = _mbpp_run(lambda item: item.doc["code"] + "\n")
    assert [r.score for r in right] == [1.0, 1.0, 1.0], [r.details for r in right]
    assert all(r.details and r.details["status"] == "passed" for r in right)
    assert all(req.stop == ("[DONE]",) for req in backend.gen_requests)

    def wrong(item: Item) -> str:
        name = {11: "count_vowels", 12: "common_sorted", 13: "running_total"}[item.doc["task_id"]]
        return f"def {name}(*args):\n    return 0\n"

    failed, _ = _mbpp_run(wrong)
    assert [r.score for r in failed] == [0.0, 0.0, 0.0]
    assert all(r.details and r.details["status"] != "passed" for r in failed)


# --------------------------------------------------------------------------- LiveCodeBench

LCB_SOLUTIONS = {
    "livecodebench-test5-fix101_a": "Sum it up:\n```python\nn = int(input())\n"
    "print(sum(map(int, input().split())))\n```\nThat reads the input.",
    "livecodebench-test5-1999F": "```python\na, b = map(int, input().split())\nprint(a / b)\n```",
    "livecodebench-test6-9001": "```python\nclass Solution:\n"
    "    def kLargest(self, nums: List[int], k: int) -> List[int]:\n"
    "        return sorted(nums, reverse=True)[:k]\n```",
}


def _lcb_run(replies: Mapping[str, str], data: list[Path] = DATA) -> list[ItemResult]:
    spec = _spec("livecodebench")
    items = load_items(spec, data)
    runner = TaskRunner(spec, data)
    by_prompt = {runner.prepare(item).prompt: item.id for item in items}
    backend = ScriptedBackend(text=lambda r: replies[by_prompt[r.context]])
    return TaskRunner(spec, data).run(items, backend)


def test_livecodebench_window_is_recorded_and_shown() -> None:
    from pytest_llmeval.record._taskconfig import task_config

    spec = _spec("livecodebench")
    assert spec.catalog.freshness == "fresh"
    assert spec.dataset.window is not None
    assert spec.dataset.window.describe() == "contest_date from 2024-08-01"
    assert DateWindow("d", None, "2025-01-31").describe() == "d up to 2025-01-31"
    assert DateWindow("d", "2024-01-01", "2025-01-31").describe() == "d 2024-01-01 to 2025-01-31"
    config = task_config(TaskRunner(spec, DATA), [])
    assert config["dataset"]["window"] == {
        "field": "contest_date",
        "start": "2024-08-01",
        "end": None,
    }


def test_livecodebench_prompts_for_stdin_and_starter_code() -> None:
    _, items, prepared = _prepared("livecodebench")
    stdin, _, leetcode = prepared
    assert stdin.prompt.startswith("### Question:\nYou are given N and then N integers")
    assert "standard input" in stdin.prompt
    assert "```python\n# YOUR CODE HERE\n```\n\n### Answer: (a Python code block)\n\n" in (
        stdin.prompt
    )
    assert stdin.prompt.endswith("### Answer: (a Python code block)\n\n")
    assert "Complete the starter code below" in leetcode.prompt
    assert "```python\n" + items[2].doc["starter_code"] + "\n```" in leetcode.prompt
    assert "standard input" not in leetcode.prompt
    assert all(p.fewshot_ids == () for p in prepared)


def test_livecodebench_correct_programs_pass_on_public_and_private_tests() -> None:
    results = _lcb_run(LCB_SOLUTIONS)
    assert [r.score for r in results] == [1.0, 1.0, 1.0], [r.details for r in results]
    assert [r.details["n_tests"] for r in results if r.details] == [3, 2, 3]
    assert results[0].extracted == "n = int(input())\nprint(sum(map(int, input().split())))\n"


def test_livecodebench_private_tests_are_run() -> None:
    # Right on each problem's public case only.
    replies = {
        "livecodebench-test5-fix101_a": "```python\nprint(6)\n```",
        "livecodebench-test5-1999F": "```python\nprint(0.25)\n```",
        "livecodebench-test6-9001": "```python\nclass Solution:\n"
        "    def kLargest(self, nums, k):\n        return [3, 2]\n```",
    }
    results = _lcb_run(replies)
    assert [r.score for r in results] == [0.0, 0.0, 0.0]
    assert all(r.details and "test 2" in r.details["reason"] for r in results)


def test_livecodebench_window_bounds_and_errors(tmp_path: Path) -> None:
    src = (BENCHMARKS / "livecodebench.yaml").read_text()
    window = "window: {field: contest_date, start: 2024-08-01}"
    assert window in src
    closed = tmp_path / "closed.yaml"
    closed.write_text(src.replace(window, "window: {field: contest_date, end: 2024-12-31}"))
    items = load_items(load_task_spec(closed), DATA)
    assert [i.id for i in items] == [
        "livecodebench-test5-fix101_a",
        "livecodebench-test5-fix001_a",
        "livecodebench-test5-1999F",
    ]  # 2025-01-18 (test6) is after the end
    for bad, message in [
        ("window: {field: contest_date, start: 2024-13-01}", "window.start.*ISO date"),
        ("window: {field: contest_date, start: 2025-01-01, end: 2024-01-01}", "window.end"),
        ("window: {field: contest_date}", "window.start.*give start, end or both"),
    ]:
        broken = tmp_path / "broken.yaml"
        broken.write_text(src.replace(window, bad))
        with pytest.raises(SpecError, match=message):
            load_task_spec(broken)
    wrong_field = tmp_path / "wrong.yaml"
    wrong_field.write_text(src.replace("field: contest_date", "field: released"))
    with pytest.raises(DataError, match=r"test5.jsonl: row 0 has no date field 'released'"):
        load_items(load_task_spec(wrong_field), DATA)


def test_livecodebench_undecodable_tests_name_the_item_and_field(tmp_path: Path) -> None:
    folder = tmp_path / "livecodebench" / "code_generation_lite"
    folder.mkdir(parents=True)
    row = json.loads(
        (FIXTURES / "livecodebench/code_generation_lite/test5.jsonl").read_text().splitlines()[0]
    )
    row["private_test_cases"] = "%%% not an encoding"
    (folder / "test5.jsonl").write_text(json.dumps(row) + "\n")
    # the item's own error (issue 13: a problem of one item fails that item alone)
    [result] = _lcb_run(LCB_SOLUTIONS, [tmp_path])
    assert result.error is not None and not result.correct
    assert re.search(r"execution.tests\[1\].*fix101_a.*neither JSON", result.error), result.error


# --------------------------------------------------------------------------- LongBench


class WindowedBackend(ScriptedBackend):
    """A scripted backend with a context window counted in characters: a prompt that does
    not fit is answered as the HF backend answers under ``overflow: skip``."""

    def __init__(self, text: Callable[[GenerateRequest], str], window: int) -> None:
        super().__init__(text=text)
        self.window = window

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        self.gen_requests.extend(requests)
        out = []
        for r in requests:
            if len(r.context) + r.max_new_tokens > self.window:
                assert r.overflow == "skip"
                out.append(
                    GenerateResult(
                        text="",
                        n_tokens=0,
                        finish_reason="context_overflow",
                        n_prompt_tokens=len(r.context),
                        context_window=self.window,
                    )
                )
            else:
                out.append(
                    GenerateResult(
                        text=self._text(r) if self._text else "", n_tokens=1, finish_reason="stop"
                    )
                )
        return out


LONGBENCH_ANSWERS = {
    "fixnqa0001": " Ilse Varga.",  # F1 1
    "fixqas0001": " Yes, both English and Finnish.",  # 1 of 5 tokens: F1 1/3
    "fixmfq0001": " 24 months",  # 1
    "fixhot0001": " The Aster",  # "aster" vs "aster": 1
    "fixhot0002": " green",  # fits this window only
    "fix2wk0001": " no",  # 0
    "fixmus0001": " It was founded in 1891",  # 1 of 5: 1/3
}


def test_longbench_prompts_budgets_and_f1_scores() -> None:
    spec, items, prepared = _prepared("longbench")
    by_prompt = {p.prompt: it.doc["_id"] for p, it in zip(prepared, items, strict=True)}
    backend = WindowedBackend(lambda r: LONGBENCH_ANSWERS[by_prompt[r.context]], window=1_000_000)
    results = TaskRunner(spec, DATA).run(items, backend)
    budgets = {by_prompt[r.context]: r.max_new_tokens for r in backend.gen_requests}
    assert budgets == {
        "fixnqa0001": 128,
        "fixqas0001": 128,
        "fixmfq0001": 64,
        "fixhot0001": 32,
        "fixhot0002": 32,
        "fix2wk0001": 32,
        "fixmus0001": 32,
    }
    story = prepared[0].prompt
    assert story.startswith("Below is a story (a novel or a film script)")
    assert items[0].doc["context"] in story
    assert story.endswith("(answer with a short phrase): Who kept the north lighthouse?\n\nAnswer:")
    assert prepared[3].prompt.startswith("Answer the question using the passages below.")
    assert prepared[3].references == ("Aster", "the river Aster")
    scores = {r.item_id.rsplit("-", 1)[1]: round(r.score, 4) for r in results}
    assert scores == {
        "fixnqa0001": 1.0,
        "fixqas0001": round(1 / 3, 4),
        "fixmfq0001": 1.0,
        "fixhot0001": 1.0,
        "fixhot0002": 1.0,
        "fix2wk0001": 0.0,
        "fixmus0001": round(1 / 3, 4),
    }
    assert [r.correct for r in results] == [True, False, True, True, True, False, False]


def test_longbench_item_that_does_not_fit_is_reported_not_scored() -> None:
    spec, items, prepared = _prepared("longbench")
    long_prompt = max(len(p.prompt) for p in prepared)
    assert long_prompt > 50_000  # the long fixture item
    backend = WindowedBackend(lambda r: " green", window=8_192)
    results = TaskRunner(spec, DATA).run(items, backend)
    [overflow] = [r for r in results if r.finish_reason == "context_overflow"]
    assert overflow.item_id == "longbench-hotpotqa-fixhot0002"
    assert overflow.details == {
        "context_overflow": {
            "prompt_tokens": long_prompt,
            "max_new_tokens": 32,
            "context_window": 8_192,
        }
    }
    assert (overflow.correct, overflow.score, overflow.output) == (False, 0.0, "")


def test_overflow_and_targets_are_validated(tmp_path: Path) -> None:
    src = (BENCHMARKS / "longbench.yaml").read_text()
    for old, new, message in [
        ("overflow: skip", "overflow: cut", "generate.overflow.*unknown value 'cut'"),
        (
            "{multifieldqa_en: 64,",
            "{multifieldqa_en: 0,",
            "max_new_tokens_by_subset.multifieldqa_en",
        ),
        ("compare: f1", "compare: fuzzy", "generate.compare.*unknown value 'fuzzy'"),
    ]:
        broken = tmp_path / "broken.yaml"
        broken.write_text(src.replace(old, new))
        with pytest.raises(SpecError, match=message):
            load_task_spec(broken)


def test_overflow_policies_of_spec_and_backend_agree() -> None:
    from pytest_llmeval.model import OVERFLOW_POLICIES
    from pytest_llmeval.task._spec import OVERFLOW_POLICIES as SPEC_POLICIES

    assert SPEC_POLICIES == OVERFLOW_POLICIES


# --------------------------------------------------------------------------- collection


def _copy_specs(pytester: pytest.Pytester) -> None:
    for task in NEW_TASKS:
        shutil.copy(BENCHMARKS / f"{task}.yaml", pytester.path / f"{task}.yaml")


def test_collection_from_a_data_dir_with_the_real_layout(pytester: pytest.Pytester) -> None:
    _copy_specs(pytester)
    result = pytester.runpytest("--collect-only", "-q", f"--llm-data-dir={FIXTURES}")
    assert result.ret == 0, result.stdout.str()
    expected = [f"{t}.yaml::{i}" for t in NEW_TASKS for i in EXPECTED_IDS[t]]
    lines = [line for line in result.stdout.lines if ".yaml::" in line]
    assert sorted(lines) == sorted(expected)
    catalog = pytester.runpytest(f"--llm-data-dir={FIXTURES}", "--llm-show=catalog")
    assert catalog.ret == 0
    for task in NEW_TASKS:
        catalog.stdout.fnmatch_lines([f"{task} *{len(EXPECTED_IDS[task])} *"])


def test_missing_data_is_one_skipped_item_per_task(pytester: pytest.Pytester) -> None:
    _copy_specs(pytester)
    empty = pytester.mkdir("no-data")
    result = pytester.runpytest(f"--llm-data-dir={empty}", "-rs")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(skipped=len(NEW_TASKS))
    result.stdout.fnmatch_lines(["*benchmark data not installed*"])
    catalog = pytester.runpytest(f"--llm-data-dir={empty}", "--llm-show=catalog")
    assert catalog.ret == 0
    for task in NEW_TASKS:
        catalog.stdout.fnmatch_lines([f"{task} *not installed*"])
