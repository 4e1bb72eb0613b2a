"""TS-Guessing: masking rules, prompts, scoring and the paired verdict on scripted backends
whose outputs are known; the prompt through chat templates (in-process and server-rendered);
and real generation on tiny random models."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from openai_fake import FakeServer, Reply

from pytest_llmeval._errors import SpecError
from pytest_llmeval.contamination import (
    GuessingItem,
    GuessingReport,
    guessing_vs_reference,
    maskable,
    masked_option,
    normalize_guess,
    ts_guessing_probe,
)
from pytest_llmeval.dataset import Item, load_items
from pytest_llmeval.eval import ChatSettings, TaskRunner
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

# Gold at 0; option 2 is the longest maskable wrong option; option 3 is never maskable.
QUIZ = [
    {
        "question": f"Which one is item {i}?",
        "choices": [f"right answer {i}", "a blue whale", f"a tall green tree {i}", "All of these"],
        "answer": i % 1,  # an int gold index
    }
    for i in range(12)
]
# No maskable wrong option: numbers, a reference to the others, one word.
UNMASKABLE = [
    {
        "question": "How many?",
        "choices": ["seven apples here", "42", "3.5 m/s", "None of the above"],
    },
    {"question": "Which word?", "choices": ["a proper answer", "Paris", "x = 2", "Both A and B"]},
]
for row in UNMASKABLE:
    row["answer"] = 0
MC_SPEC: dict[str, Any] = {
    "task": "quiz",
    "dataset": {"path": "quiz.jsonl"},
    "prompt": {
        "description": "The following are multiple choice questions.\n\n",
        "template": "{{ question }}\nA. {{ choices[0] }}\nB. {{ choices[1] }}\n"
        "C. {{ choices[2] }}\nD. {{ choices[3] }}\nAnswer:",
    },
    "mode": "multiple_choice",
    "multiple_choice": {"choices": ["A", "B", "C", "D"], "gold": "{{ answer }}"},
    "contamination": {"options": "choices", "gold": "answer"},
}


class Scripted:
    """Generates what ``text`` says for each request and records the requests; its chat
    template is ``template`` (None: a base model)."""

    def __init__(
        self, text: Callable[[GenerateRequest], str], template: ChatTemplate | None = None
    ) -> None:
        self._text, self._template = text, template
        self.requests: list[GenerateRequest] = []

    @property
    def batch_size(self) -> int:
        return 4

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        raise AssertionError("TS-Guessing needs no log-likelihoods")

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        self.requests.extend(requests)
        return [GenerateResult(self._text(r), 3, "stop") for r in requests]

    def chat_template(self) -> ChatTemplate | None:
        return self._template

    def info(self) -> Mapping[str, Any]:
        return {"model": "scripted"}


def _task(tmp_path: Path, rows: list[dict[str, Any]]) -> tuple[TaskSpec, list[Item]]:
    (tmp_path / "quiz.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = task_spec_from_dict(MC_SPEC)
    return spec, load_items(spec, [tmp_path])


def _masked_number(prompt: str) -> str:
    return re.search(r"Which one is item (\d+)\?", prompt).group(1)  # type: ignore[union-attr]


# --------------------------------------------------------------------------- rules


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("red blood cells", True),
        ("The Treaty of Versailles in 1919", True),
        ("The right atrium", True),
        ("红细胞", True),  # three CJK characters: three words
        ("Paris", False),  # one word
        ("5 apples", False),  # one content word
        ("42", False),
        ("3.5 m/s", False),
        ("-1/2", False),
        ("sin(x) + cos(x)", False),  # a formula
        ("x = 3 and y = 4", False),
        ("All of the above", False),
        ("None of these", False),
        ("Both of them", False),
        ("Both A and B", False),
        ("Neither A nor B", False),
        ("I and III only", False),
        ("True, False", False),
        ("Wrong, Not wrong", False),
        ("  ", False),
    ],
)
def test_maskable(option: str, expected: bool) -> None:
    assert maskable(option) is expected


def test_the_longest_maskable_wrong_option_is_masked() -> None:
    options = ["the gold answer is longest of all", "a blue whale", "a tall green tree", "42"]
    assert masked_option(options, 0, seed=1, item_id="x") == 2
    # The gold option is never masked, however long.
    assert masked_option(options, 2, seed=1, item_id="x") == 0
    assert masked_option(["a b", "42", "All of the above"], 0, seed=1, item_id="x") is None


def test_ties_are_broken_by_seed_and_item_reproducibly() -> None:
    options = ["gold option text", "blue whale", "green tree", "7"]  # 1 and 2: ten characters
    picks = {masked_option(options, 0, seed=s, item_id="q1") for s in range(40)}
    assert picks == {1, 2}
    for seed in range(5):
        first = masked_option(options, 0, seed=seed, item_id="q1")
        assert all(masked_option(options, 0, seed=seed, item_id="q1") == first for _ in range(3))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('  "The  Cell\'s wall."  ', "the cell's wall"),
        ("“A tall green tree”", "a tall green tree"),
        ("`code span`", "code span"),
        ("(a tall tree)", "a tall tree"),
        ("A\ttall\n tree!!", "a tall tree"),
        ("...", ""),
    ],
)
def test_normalize_guess(text: str, expected: str) -> None:
    assert normalize_guess(text) == expected


# --------------------------------------------------------------------------- the probe


def test_prompt_masks_the_option_and_scores_exact_matches(tmp_path: Path) -> None:
    spec, items = _task(tmp_path, QUIZ + UNMASKABLE)
    runner = TaskRunner(spec, [tmp_path])

    def recalls_even_items(r: GenerateRequest) -> str:
        i = int(_masked_number(r.context))
        if i % 2:
            return " a short green tree"
        # A label, quotes, other case and a trailing period: still the masked option.
        return f' C. "A Tall Green Tree {i}."\nD. All of these'

    backend = Scripted(recalls_even_items)
    report = ts_guessing_probe(runner, items, backend, seed=3)
    assert report.skipped == (items[12].id, items[13].id)
    assert report.n == 12 and report.failed == ()
    assert [i.masked_index for i in report.items] == [2] * 12
    assert [i.exact_match for i in report.items] == [i % 2 == 0 for i in range(12)]
    assert report.exact_matches == 6 and report.exact_match_rate == 0.5
    assert report.exact_match_interval == wilson_interval(6, 12)
    first = report.items[0]
    assert first.masked_letter == "C" and first.masked_text == "a tall green tree 0"
    assert first.guess == '"A Tall Green Tree 0."'
    assert first.rouge_l == 1.0
    assert report.items[1].rouge_l == pytest.approx(2 * 0.75 * 0.6 / 1.35)  # lcs 3 of 4 / 5

    assert len(backend.requests) == 12
    for item, request in zip(report.items, backend.requests, strict=True):
        prompt = request.context
        assert prompt == item.prompt
        assert "[MASK]" in prompt and "\nC. [MASK]\n" in prompt
        assert item.masked_text not in prompt
        number = _masked_number(prompt)
        assert f"A. right answer {number}\nB. a blue whale\n" in prompt
        assert "\nD. All of these\n" in prompt
        assert prompt.startswith("Below is a multiple-choice question")
        assert "exact text of option C" in prompt and prompt.endswith("\n\nOption C:")
        # Not the task's own prompt: no description, no answer cue.
        assert "The following are" not in prompt and "Answer:" not in prompt
        assert request.stop == ("\n",) and request.max_new_tokens == 48
        assert request.messages == ()  # plain text: no chat template

    data = report.to_dict()
    assert data["probe"] == "ts_guessing" and data["verdict"] is None
    assert data["exact_match_rate"] == 0.5 and len(data["items"]) == 12
    assert data["skipped"] == [items[12].id, items[13].id]


def test_masks_are_the_same_across_runs_and_move_with_the_seed(tmp_path: Path) -> None:
    rows = [
        {"question": f"Q{i}?", "choices": ["gold option text", "blue whale", "green tree", "7"]}
        for i in range(30)
    ]
    for row in rows:
        row["answer"] = 0
    spec, items = _task(tmp_path, rows)
    runner = TaskRunner(spec, [tmp_path])
    backend = Scripted(lambda r: "x")

    def masks(seed: int) -> list[int]:
        return [i.masked_index for i in ts_guessing_probe(runner, items, backend, seed=seed).items]

    assert masks(7) == masks(7)
    assert set(masks(7)) == {1, 2}  # a tie: the seeded shuffle picks per item
    assert masks(7) != masks(8)
    expected = [
        masked_option(r["choices"], 0, seed=7, item_id=item.id)
        for r, item in zip(rows, items, strict=True)
    ]
    assert masks(7) == expected


def test_only_the_first_line_counts_and_failures_are_listed(tmp_path: Path) -> None:
    spec, items = _task(tmp_path, QUIZ[:3])

    class Mixed(Scripted):
        def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
            self.requests.extend(requests)
            return [
                GenerateResult("\n\na tall green tree 0\nmore", 5, "length"),
                GenerateResult("", 0, "context_overflow", n_prompt_tokens=9000),
                GenerateResult("", 0, "stop", error="logits are not finite"),
            ]

    report = ts_guessing_probe(TaskRunner(spec, [tmp_path]), items, Mixed(lambda r: ""))
    assert report.n == 1 and report.items[0].exact_match
    assert report.items[0].guess == "a tall green tree 0"
    assert report.failed == (
        (items[1].id, "the prompt does not fit the context window"),
        (items[2].id, "logits are not finite"),
    )


def test_a_question_field_is_needed(tmp_path: Path) -> None:
    spec_data = {**MC_SPEC, "prompt": {"template": "{{ prompt }}\nAnswer:"}}
    row = {"prompt": "Which?", "choices": ["gold text", "a blue whale", "7", "8"], "answer": 0}
    (tmp_path / "quiz.jsonl").write_text(json.dumps(row) + "\n")
    spec = task_spec_from_dict(spec_data)
    items = load_items(spec, [tmp_path])
    runner = TaskRunner(spec, [tmp_path])
    with pytest.raises(SpecError, match="'question'"):
        ts_guessing_probe(runner, items, Scripted(lambda r: ""))
    report = ts_guessing_probe(runner, items, Scripted(lambda r: ""), question_field="prompt")
    assert "Question: Which?\n" in report.items[0].prompt
    assert "\nB. [MASK]\nC. 7\nD. 8\n" in report.items[0].prompt


def test_an_item_whose_task_prompt_does_not_render_fails_alone(tmp_path: Path) -> None:
    rows = [QUIZ[0], {"question": "Two?", "choices": ["gold text", "a blue whale"], "answer": 0}]
    spec, items = _task(tmp_path, rows)  # the template shows choices[2] and choices[3]
    report = ts_guessing_probe(TaskRunner(spec, [tmp_path]), items, Scripted(lambda r: ""))
    assert [i.item_id for i in report.items] == [items[0].id]
    assert [f[0] for f in report.failed] == [items[1].id]
    assert "choices" in report.failed[0][1]


def test_a_task_with_other_labels_keeps_them(tmp_path: Path) -> None:
    spec_data = {
        **MC_SPEC,
        "multiple_choice": {"choices": ["1", "2", "3", "4"], "gold": "{{ answer }}"},
    }
    (tmp_path / "quiz.jsonl").write_text(json.dumps(QUIZ[0]) + "\n")
    spec = task_spec_from_dict(spec_data)
    report = ts_guessing_probe(
        TaskRunner(spec, [tmp_path]), load_items(spec, [tmp_path]), Scripted(lambda r: "")
    )
    prompt = report.items[0].prompt
    assert "\n1. right answer 0\n2. a blue whale\n3. [MASK]\n4. All of these" in prompt
    assert prompt.endswith("Option 3:")


# --------------------------------------------------------------------------- chat templates


def _render(messages: Sequence[Mapping[str, str]]) -> str:
    body = "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages)
    return body + "<assistant>"


def test_the_prompt_goes_through_the_chat_template(tmp_path: Path) -> None:
    spec, items = _task(tmp_path, QUIZ[:2])
    template = ChatTemplate("tokenizer", "0" * 64, _render)
    runner = TaskRunner(spec, [tmp_path], ChatSettings(mode="auto", system_prompt="Be brief."))
    backend = Scripted(lambda r: "a tall green tree 0", template)
    report = ts_guessing_probe(runner, items, backend)
    request = backend.requests[0]
    user = request.messages[1][1]
    assert request.messages[0] == ("system", "Be brief.")
    assert user.startswith("Below is a multiple-choice question") and "C. [MASK]" in user
    assert request.context == _render(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": user}]
    )
    assert report.items[0].prompt == request.context
    assert [i.exact_match for i in report.items] == [True, False]
    # The chat mode decides, as for the task's own prompts: off sends the plain text.
    off = Scripted(lambda r: "", template)
    ts_guessing_probe(TaskRunner(spec, [tmp_path], ChatSettings(mode="off")), items, off)
    assert off.requests[0].messages == () and off.requests[0].context == user


def test_a_template_without_system_role_gets_the_system_text_folded(tmp_path: Path) -> None:
    spec, items = _task(tmp_path, QUIZ[:1])
    template = ChatTemplate("tokenizer", None, _render, system_role=False)
    runner = TaskRunner(spec, [tmp_path], ChatSettings(mode="on", system_prompt="Be brief."))
    backend = Scripted(lambda r: "", template)
    ts_guessing_probe(runner, items, backend)
    (role, content), *rest = backend.requests[0].messages
    assert rest == [] and role == "user"
    assert content.startswith("Be brief.\n\nBelow is a multiple-choice question")


def test_reasoning_blocks_are_stripped_with_the_runner_settings(tmp_path: Path) -> None:
    spec, items = _task(tmp_path, QUIZ[:1])
    runner = TaskRunner(spec, [tmp_path], ChatSettings(strip_thinking=True))
    backend = Scripted(lambda r: "<think>\nhmm\n</think>\na tall green tree 0")
    report = ts_guessing_probe(runner, items, backend)
    assert backend.requests[0].thinking == ("<think>", "</think>")
    assert report.items[0].exact_match and report.items[0].guess == "a tall green tree 0"


def test_a_multiple_choice_task_through_a_server_template(
    tmp_path: Path, fake_openai: FakeServer
) -> None:
    """The task itself cannot be scored through /chat/completions (no log-probabilities);
    the probe, which only generates, can."""
    seen: list[dict[str, Any]] = []

    def reply(body: dict[str, Any]) -> Reply:
        content = body["messages"][-1]["content"]
        if "[MASK]" in content:  # not the backend's chat probe ("Hello", one token)
            seen.append(body)
        text = "a tall green tree 0\nmore" if "item 0?" in content else "?"
        return Reply(
            body={
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 20, "completion_tokens": 5},
            }
        )

    fake_openai.routes["/v1/chat/completions"] = reply
    backend = load_backend(ModelSettings(model="toy", backend="openai", base_url=fake_openai.url))
    spec, items = _task(tmp_path, QUIZ[:2])
    runner = TaskRunner(spec, [tmp_path], ChatSettings(mode="on"))
    report = ts_guessing_probe(runner, items, backend)
    assert [i.exact_match for i in report.items] == [True, False]
    assert len(seen) == 2 and all(len(b["messages"]) == 1 for b in seen)
    for body in seen:  # requests run concurrently: in any order
        assert body["messages"][0]["role"] == "user"
        assert "C. [MASK]" in body["messages"][0]["content"]
        assert body["stop"] == ["\n"] and body["max_tokens"] == 48
    assert report.items[0].prompt.startswith("<user>\nBelow is a multiple-choice question")
    assert not runner._bound  # the probe did not bind the runner to the server's template


# --------------------------------------------------------------------------- verdict


def _report(task: str, matches: Sequence[bool], masked: int = 2) -> GuessingReport:
    return GuessingReport(
        task=task,
        seed=1,
        items=tuple(
            GuessingItem(f"q{i}", masked, "C", "text", "prompt", "out", "g", m, 0.0)
            for i, m in enumerate(matches)
        ),
    )


def test_guessing_vs_reference_is_a_one_sided_paired_test() -> None:
    # q0-q4: test right, ref wrong (b = 5); q5: the reverse (c = 1); q6, q7: both right;
    # q8: both wrong.
    test = _report("quiz", [True] * 5 + [False] + [True, True, False])
    ref = _report("quiz", [False] * 5 + [True] + [True, True, False])
    result = guessing_vs_reference(test, ref)
    assert (result.n_paired, result.b, result.c) == (9, 5, 1)
    assert (result.test_count, result.ref_count) == (7, 3)
    assert result.p_value == pytest.approx(7 / 64)  # P(X >= 5 | Bin(6, 1/2)) = (6 + 1) / 64
    assert result.p_value == pytest.approx(binomial_upper_tail(5, 6, Fraction(1, 2)))
    assert guessing_vs_reference(ref, test).p_value == pytest.approx(63 / 64)
    assert result.to_dict()["mcnemar_b"] == 5


def test_guessing_vs_reference_pairs_by_id_and_checks_the_masks() -> None:
    test = _report("quiz", [True, True, True])
    ref = GuessingReport("quiz", 1, _report("quiz", [False] * 5).items[1:])  # q1..q4
    result = guessing_vs_reference(test, ref)
    assert (result.n_paired, result.b, result.c) == (2, 2, 0)
    assert result.unpaired == ("q0", "q3", "q4")
    assert result.p_value == pytest.approx(1 / 4)
    with pytest.raises(ValueError, match="mask different options"):
        guessing_vs_reference(test, _report("quiz", [True] * 3, masked=1))
    with pytest.raises(ValueError, match="different tasks"):
        guessing_vs_reference(test, _report("other", [True] * 3))


# --------------------------------------------------------------------------- real models


def test_real_generation_on_a_tiny_random_model(tmp_path: Path, tiny_model_dir: Path) -> None:
    spec, items = _task(tmp_path, QUIZ[:3])
    backend = load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=2))
    runner = TaskRunner(spec, [tmp_path], ChatSettings(mode="auto"))
    report = ts_guessing_probe(runner, items, backend, max_new_tokens=6)
    assert report.n == 3 and report.failed == () and report.skipped == ()
    for item in report.items:
        assert item.prompt.endswith("Option C:") and "C. [MASK]" in item.prompt
        assert "\n" not in item.output  # stopped at the newline
        assert item.exact_match is (
            normalize_guess(item.guess) == normalize_guess(item.masked_text)
        )
    again = ts_guessing_probe(runner, items, backend, max_new_tokens=6)
    assert [i.output for i in again.items] == [i.output for i in report.items]  # greedy


@pytest.fixture(scope="module")
def chatml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from chat_families import FAMILIES, build_chat_model

    return build_chat_model(tmp_path_factory.mktemp("chatml"), FAMILIES["chatml"])


def test_real_chat_template_renders_the_guessing_prompt(tmp_path: Path, chatml_dir: Path) -> None:
    spec, items = _task(tmp_path, QUIZ[:2])
    backend = load_backend(ModelSettings(model=str(chatml_dir), batch_size=2))
    runner = TaskRunner(spec, [tmp_path], ChatSettings(mode="auto", system_prompt="Be brief."))
    report = ts_guessing_probe(runner, items, backend, max_new_tokens=6)
    assert report.n == 2
    prompt = report.items[0].prompt
    assert prompt.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n")
    assert prompt.endswith("Option C:<|im_end|>\n<|im_start|>assistant\n")
    assert "C. [MASK]" in prompt and "a tall green tree 0" not in prompt
    # The task's own prompt under the same template: the same rendering around it.
    runner.bind(backend)
    own = runner.prepare(items[0]).prompt
    assert own.startswith("<|im_start|>system\nBe brief.")
    assert own.endswith("<|im_start|>assistant\n")
