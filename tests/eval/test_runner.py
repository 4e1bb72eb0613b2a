"""TaskRunner bookkeeping: request order, choice grouping, acc vs acc_norm, extraction, results.

The backend here is a scripted stand-in that answers from tables written in each test:
these tests check how the runner builds requests and maps answers back, not a model.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval._errors import DataError, SpecError
from pytest_llmeval.dataset import load_items
from pytest_llmeval.eval import ItemResult, TaskRunner
from pytest_llmeval.model import (
    Backend,
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
)
from pytest_llmeval.task import TaskSpec, task_spec_from_dict


class ScriptedBackend:
    """Answers requests from functions given by the test, and records every request."""

    def __init__(
        self,
        logprob: Callable[[LoglikelihoodRequest], float] | None = None,
        text: Callable[[GenerateRequest], str | tuple[str, str]] | None = None,
        drop_last: bool = False,
    ) -> None:
        self._logprob = logprob
        self._text = text
        self._drop_last = drop_last
        self.ll_requests: list[LoglikelihoodRequest] = []
        self.gen_requests: list[GenerateRequest] = []
        self.calls = 0

    @property
    def batch_size(self) -> int:
        return 4

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        assert self._logprob is not None, "this test expects no loglikelihood requests"
        self.calls += 1
        self.ll_requests.extend(requests)
        out = []
        for r in requests:
            lp = self._logprob(r)
            out.append(
                LoglikelihoodResult(logprob=lp, is_greedy=lp > -1.0, n_tokens=len(r.continuation))
            )
        return out[:-1] if self._drop_last else out

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        assert self._text is not None, "this test expects no generate requests"
        self.calls += 1
        self.gen_requests.extend(requests)
        out = []
        for r in requests:
            reply = self._text(r)
            text, reason = reply if isinstance(reply, tuple) else (reply, "stop")
            out.append(GenerateResult(text=text, n_tokens=len(text.split()), finish_reason=reason))
        return out[:-1] if self._drop_last else out

    def chat_template(self):  # type: ignore[no-untyped-def]
        return None

    def info(self) -> Mapping[str, Any]:
        return {"model": "scripted", "batch_size": self.batch_size}


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


MC_ROWS = [
    {"question": "Which colour is the sky?", "choices": ["red", "blue", "green"], "label": 1},
    {"question": "Which is a fruit?", "choices": ["pear", "brick"], "label": 0},
    {"question": "Pick the long one.", "choices": ["a", "bbbbbbbb"], "label": 1},
]


def _mc_spec(tmp_path: Path, metric: str = "acc", **mc: Any) -> TaskSpec:
    _jsonl(tmp_path / "mc" / "test.jsonl", MC_ROWS)
    return task_spec_from_dict(
        {
            "task": "toy_mc",
            "dataset": {"path": "mc/test.jsonl"},
            "prompt": {
                "description": "Quiz.\n\n",
                "template": "{{ question }}\nAnswer:",
                "target": "{{ choices[label] }}",
            },
            "fewshot": {
                "k": 1,
                "examples": [
                    {"id": "shot", "question": "Two plus two?", "choices": ["4", "5"], "label": 0}
                ],
            },
            "mode": "multiple_choice",
            "multiple_choice": {
                "choices": "{{ choices }}",
                "gold": "{{ label }}",
                "metric": metric,
                **mc,
            },
        },
        source="toy_mc.yaml",
    )


GEN_ROWS = [
    {"question": "3 + 4?", "answer": "3 + 4 = 7\n#### 7"},
    {"question": "10 - 2?", "answer": "#### 8"},
    {"question": "Half of 1,000?", "answer": "#### 500"},
    {"question": "Unanswerable?", "answer": "#### 1"},
]


def _gen_spec(tmp_path: Path) -> TaskSpec:
    _jsonl(tmp_path / "gen" / "test.jsonl", GEN_ROWS)
    return task_spec_from_dict(
        {
            "task": "toy_gen",
            "dataset": {"path": "gen/test.jsonl"},
            "prompt": {
                "template": "Q: {{ question }}\nA:",
                "target": "{{ answer | after('####') }}",
            },
            "mode": "generate",
            "generate": {
                "target": "{{ answer | after('####') }}",
                "max_new_tokens": 5,
                "stop": ["Q:", "\n\n"],
                "extract": [{"kind": "regex", "pattern": r"answer is (-?[\d,]+)"}, "last_number"],
                "compare": "numeric",
            },
        },
        source="toy_gen.yaml",
    )


def test_scripted_backend_satisfies_protocol() -> None:
    assert isinstance(ScriptedBackend(), Backend)


# --------------------------------------------------------------------------- multiple choice


def test_mc_requests_are_context_delimiter_choice_in_item_order(tmp_path: Path) -> None:
    spec = _mc_spec(tmp_path)
    items = load_items(spec, [tmp_path])
    backend = ScriptedBackend(logprob=lambda r: -1.0)
    TaskRunner(spec, [tmp_path]).run(items, backend)
    assert backend.calls == 1
    fewshot = "Quiz.\n\nTwo plus two?\nAnswer: 4\n\n"
    expected = [
        (fewshot + row["question"] + "\nAnswer:", " " + choice)
        for row in MC_ROWS
        for choice in row["choices"]
    ]
    assert [(r.context, r.continuation) for r in backend.ll_requests] == expected


def test_mc_results_map_back_to_items(tmp_path: Path) -> None:
    spec = _mc_spec(tmp_path)
    items = load_items(spec, [tmp_path])
    # Each item prefers a different choice: item 0 -> green (wrong), item 1 -> pear (right),
    # item 2 -> "a" (wrong for acc).
    table = {
        "Which colour": {" red": -5.0, " blue": -3.0, " green": -2.0},
        "Which is a fruit": {" pear": -0.5, " brick": -7.0},
        "Pick the long": {" a": -2.0, " bbbbbbbb": -4.0},
    }

    def logprob(r: LoglikelihoodRequest) -> float:
        question = next(q for q in table if q in r.context.rsplit("\n\n", 1)[-1])
        return table[question][r.continuation]

    results = TaskRunner(spec, [tmp_path]).run(items, ScriptedBackend(logprob=logprob))
    assert [r.item_id for r in results] == ["toy_mc-0000", "toy_mc-0001", "toy_mc-0002"]
    assert [r.pred for r in results] == [2, 0, 0]
    assert [r.gold for r in results] == [1, 0, 1]
    assert [r.correct for r in results] == [False, True, False]
    assert [r.score for r in results] == [0.0, 1.0, 0.0]
    assert [r.extracted for r in results] == ["green", "pear", "a"]
    assert results[0].choices == ["red", "blue", "green"]
    assert results[0].logprobs == [-5.0, -3.0, -2.0]
    assert results[1].is_greedy == [True, False]
    assert results[0].target == "blue"
    assert results[0].fewshot_ids == ["shot"]
    assert results[0].task == "toy_mc"
    assert results[0].subset is None
    assert results[0].extractor == "loglikelihood (acc)"
    assert results[0].output is None
    assert all(r.seconds >= 0 for r in results)


@pytest.mark.parametrize(("metric", "score"), [("acc", 0.0), ("acc_norm", 1.0)])
def test_acc_norm_divides_by_choice_length(tmp_path: Path, metric: str, score: float) -> None:
    spec = _mc_spec(tmp_path, metric=metric)
    items = [i for i in load_items(spec, [tmp_path]) if i.id == "toy_mc-0002"]
    # " a": -2/1 = -2 per char; " bbbbbbbb": -4/8 = -0.5 per char -> acc picks a, acc_norm picks b.
    backend = ScriptedBackend(logprob=lambda r: -2.0 if r.continuation == " a" else -4.0)
    (result,) = TaskRunner(spec, [tmp_path]).run(items, backend)
    assert (result.pred, result.pred_norm, result.gold) == (0, 1, 1)
    assert (result.acc, result.acc_norm) == (0.0, 1.0)
    assert result.score == score
    assert result.correct is bool(score)
    assert result.extracted == ("a" if metric == "acc" else "bbbbbbbb")
    assert result.extractor == f"loglikelihood ({metric})"


def test_mc_ties_pick_first_choice(tmp_path: Path) -> None:
    spec = _mc_spec(tmp_path)
    items = load_items(spec, [tmp_path])[:1]
    (result,) = TaskRunner(spec, [tmp_path]).run(items, ScriptedBackend(logprob=lambda r: -1.0))
    assert result.pred == 0


def test_mc_gold_as_choice_text(tmp_path: Path) -> None:
    spec = _mc_spec(tmp_path, gold="{{ choices[label] }}")
    items = load_items(spec, [tmp_path])
    runner = TaskRunner(spec, [tmp_path])
    assert [runner.prepare(i).gold for i in items] == [1, 0, 1]


@pytest.mark.parametrize(
    ("gold", "fragment"),
    [("{{ label + 5 }}", "out of range"), ("{{ 'zebra' }}", "neither an index")],
)
def test_mc_bad_gold_names_field_and_item(tmp_path: Path, gold: str, fragment: str) -> None:
    spec = _mc_spec(tmp_path, gold=gold)
    item = load_items(spec, [tmp_path])[0]
    with pytest.raises(SpecError) as info:
        TaskRunner(spec, [tmp_path]).prepare(item)
    text = str(info.value)
    assert "toy_mc.yaml: field 'multiple_choice.gold'" in text
    assert "item toy_mc-0000" in text
    assert fragment in text


def test_template_error_names_field_and_item(tmp_path: Path) -> None:
    spec = _mc_spec(tmp_path)
    item = load_items(spec, [tmp_path])[0]
    del item.doc["question"]
    with pytest.raises(SpecError, match=r"field 'prompt.template': item toy_mc-0000: 'question'"):
        TaskRunner(spec, [tmp_path]).prepare(item)


def test_short_backend_answer_is_an_error(tmp_path: Path) -> None:
    spec = _mc_spec(tmp_path)
    items = load_items(spec, [tmp_path])
    backend = ScriptedBackend(logprob=lambda r: -1.0, drop_last=True)
    with pytest.raises(DataError, match="backend returned 6 results for 7 requests"):
        TaskRunner(spec, [tmp_path]).run(items, backend)


# --------------------------------------------------------------------------- generate


def test_generate_results(tmp_path: Path) -> None:
    spec = _gen_spec(tmp_path)
    items = load_items(spec, [tmp_path])
    replies = {
        "3 + 4?": ("3 + 4 = 7. The answer is 7.", "stop"),
        "10 - 2?": ("10 - 2 = 9", "eos"),
        "Half of 1,000?": ("The answer is 1,000 / 2 = 500", "length"),
        "Unanswerable?": ("no idea", "stop"),
    }
    backend = ScriptedBackend(text=lambda r: replies[r.context.split("Q: ")[-1][: -len("\nA:")]])
    results = TaskRunner(spec, [tmp_path]).run(items, backend)

    assert [r.context for r in backend.gen_requests] == [
        f"Q: {row['question']}\nA:" for row in GEN_ROWS
    ]
    assert all(r.max_new_tokens == 5 and r.stop == ("Q:", "\n\n") for r in backend.gen_requests)
    assert [r.item_id for r in results] == [f"toy_gen-{i:04d}" for i in range(4)]
    assert [r.target for r in results] == ["7", "8", "500", "1"]
    assert [r.output for r in results] == [text for text, _ in replies.values()]
    assert [r.extracted for r in results] == ["7", "9", "1,000", None]
    assert [r.extractor for r in results] == ["regex", "last_number", "regex", None]
    assert [r.correct for r in results] == [True, False, False, False]
    assert [r.score for r in results] == [1.0, 0.0, 0.0, 0.0]
    assert [r.finish_reason for r in results] == ["stop", "eos", "length", "stop"]
    assert [r.n_output_tokens for r in results] == [9, 5, 8, 2]
    assert all(r.fewshot_ids == [] and r.choices == [] and r.pred is None for r in results)


def test_generate_selected_items_only(tmp_path: Path) -> None:
    spec = _gen_spec(tmp_path)
    items = load_items(spec, [tmp_path])
    chosen = [items[3], items[1]]
    backend = ScriptedBackend(text=lambda r: "The answer is 8")
    results = TaskRunner(spec, [tmp_path]).run(chosen, backend)
    assert [r.item_id for r in results] == ["toy_gen-0003", "toy_gen-0001"]
    assert [r.correct for r in results] == [False, True]
    assert TaskRunner(spec, [tmp_path]).run([], ScriptedBackend(text=lambda r: "")) == []


def test_short_generate_answer_is_an_error(tmp_path: Path) -> None:
    spec = _gen_spec(tmp_path)
    items = load_items(spec, [tmp_path])
    with pytest.raises(DataError, match="backend returned 3 results for 4 requests"):
        TaskRunner(spec, [tmp_path]).run(items, ScriptedBackend(text=lambda r: "1", drop_last=True))


# --------------------------------------------------------------------------- results


def test_item_result_round_trip(tmp_path: Path) -> None:
    spec = _mc_spec(tmp_path)
    items = load_items(spec, [tmp_path])
    results = TaskRunner(spec, [tmp_path]).run(
        items, ScriptedBackend(logprob=lambda r: -len(r.continuation))
    )
    gen = TaskRunner(_gen_spec(tmp_path), [tmp_path]).run(
        load_items(_gen_spec(tmp_path), [tmp_path]),
        ScriptedBackend(text=lambda r: "The answer is 7"),
    )
    for result in [*results, *gen]:
        data = result.to_dict()
        assert json.loads(json.dumps(data)) == data
        again = ItemResult.from_dict(json.loads(json.dumps(data)))
        assert again == result
        assert again.prompt_sha256 == result.prompt_sha256
        assert len(result.prompt_sha256) == 64


class StreamingBackend(ScriptedBackend):
    """A scripted backend that streams: results come last request first."""

    def generate_stream(
        self, requests: Sequence[GenerateRequest]
    ) -> Iterator[tuple[int, GenerateResult]]:
        results = self.generate(requests)
        yield from reversed(list(enumerate(results)))


def _answer(r: GenerateRequest) -> str:
    return "The answer is 7." if "3 + 4" in r.context else "no idea"


def test_stream_yields_results_as_the_backend_finishes_them(tmp_path: Path) -> None:
    spec = _gen_spec(tmp_path)
    items = load_items(spec, [tmp_path])
    streamed = list(TaskRunner(spec, [tmp_path]).stream(items, StreamingBackend(text=_answer)))
    batched = TaskRunner(spec, [tmp_path]).run(items, ScriptedBackend(text=_answer))
    assert [r.item_id for r in streamed] == [i.id for i in reversed(items)]
    strip = ("seconds",)
    by_id = {r.item_id: {k: v for k, v in r.to_dict().items() if k not in strip} for r in batched}
    for r in streamed:
        assert {k: v for k, v in r.to_dict().items() if k not in strip} == by_id[r.item_id]
    assert [r.correct for r in batched] == [True, False, False, False]


class ShuffledChoices(ScriptedBackend):
    """A scripted backend that streams log-likelihoods in a shuffled order (seed 3), the
    choices of different items interleaved, as an engine's rows finish."""

    def loglikelihood_stream(
        self, requests: Sequence[LoglikelihoodRequest]
    ) -> Iterator[tuple[int, LoglikelihoodResult]]:
        import random

        results = list(enumerate(self.loglikelihood(requests)))
        random.Random(3).shuffle(results)
        yield from results


def test_multiple_choice_streams_each_item_when_its_choices_are_scored(tmp_path: Path) -> None:
    spec = _mc_spec(tmp_path)
    items = load_items(spec, [tmp_path])
    score = lambda r: -len(r.continuation) - 0.1 * len(r.context)  # noqa: E731
    streamed = list(TaskRunner(spec, [tmp_path]).stream(items, ShuffledChoices(logprob=score)))
    batched = TaskRunner(spec, [tmp_path]).run(items, ScriptedBackend(logprob=score))
    assert sorted(r.item_id for r in streamed) == sorted(i.id for i in items)
    assert [r.item_id for r in streamed] != [i.id for i in items]  # as the rows finished
    strip = ("seconds",)
    by_id = {r.item_id: {k: v for k, v in r.to_dict().items() if k not in strip} for r in batched}
    for r in streamed:
        assert {k: v for k, v in r.to_dict().items() if k not in strip} == by_id[r.item_id]
    assert TaskRunner(spec, [tmp_path]).streams(ShuffledChoices(logprob=score))
    assert not TaskRunner(spec, [tmp_path]).streams(StreamingBackend(logprob=score))


def test_stream_without_a_streaming_backend_runs_a_batch_at_a_time(tmp_path: Path) -> None:
    spec = _gen_spec(tmp_path)
    items = load_items(spec, [tmp_path]) * 2  # 8 items, batch size 4: two calls
    backend = ScriptedBackend(text=_answer)
    results = list(TaskRunner(spec, [tmp_path]).stream(items, backend))
    assert [r.item_id for r in results] == [i.id for i in items]
    assert backend.calls == 2
