"""The lm-evaluation-harness parity harness (``tools/lmeval_tasks.py``,
``tools/lmeval_compare.py``, ``python -m tools.parity``).

Without a model: the harness task YAMLs, built by lm-eval itself, ask byte for byte what our
specs ask on real items of each task type, and the comparison's criteria catch a context
that differs, a log-likelihood off by more than the tolerance and a different output. With
the default model: a small real run of both tools passes every criterion. Skipped when
lm-eval is not installed (``pip install -e ".[parity]"``; CI does not install it)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lm_eval", reason="lm-eval not installed: pip install -e '.[parity]'")

from pytest_llmeval.eval import ChatSettings, TaskRunner
from pytest_llmeval.model import (
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
)
from pytest_llmeval.task import load_task_spec
from tools.lmeval_compare import (
    ForwardStats,
    LmevalRun,
    Models,
    OursRun,
    RecordingBackend,
    Timing,
    compare_generation,
    compare_multiple_choice,
    diagnose_divergence,
    first_difference,
    run_lmeval,
    summarize,
    worst_items,
)
from tools.lmeval_tasks import (
    LMEVAL_FILTERS,
    REPO,
    TaskSet,
    build_lmeval_tasks,
    lmeval_requests,
    lmeval_task_yaml,
    load_spec,
    select_items,
    write_task_set,
)

# college_mathematics-0008's first option is the text "None", which pandas reads as a
# missing value unless told otherwise.
SUBJECTS = ("abstract_algebra", "college_mathematics")


@pytest.fixture(autouse=True, scope="module")
def _offline() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield


BBH_SUBTASKS = ("boolean_expressions", "date_understanding", "web_of_lies")


def _task_set(shared: Path, tmp: Path, task_type: str, n: int, **kw: Any) -> TaskSet:
    subsets = {"gsm8k": None, "bbh": BBH_SUBTASKS}.get(task_type, SUBJECTS)
    return write_task_set(task_type, [shared], tmp, n, subsets=subsets, **kw)


@pytest.mark.parametrize("task_type", ["mmlu", "mmlu_continuation"])
def test_mmlu_contexts_and_continuations_are_byte_identical(
    shared_benchmarks: Path, tmp_path: Path, task_type: str
) -> None:
    task_set = _task_set(shared_benchmarks, tmp_path, task_type, 18)
    assert task_set.limit == 9 and len(task_set.items) == 18
    requests = lmeval_requests(task_set, build_lmeval_tasks(task_set))
    runner = TaskRunner(task_set.spec, [shared_benchmarks])
    for item in task_set.items:
        p = runner.prepare(item)
        args = requests[item.id]
        assert [a[0] for a in args] == [p.prompt] * 4, item.id
        assert [a[1] for a in args] == [" " + c for c in p.choices], item.id
    none_option = requests[f"{task_type}-college_mathematics-0008"]
    expected = " A" if task_type == "mmlu" else " None"
    assert none_option[0][1] == expected
    if task_type == "mmlu":
        assert "\nA. None\n" in none_option[0][0]
    assert (
        "The following are questions (with answers) about college mathematics.\n\n"
        if task_type == "mmlu_continuation"
        else "The following are multiple choice questions (with answers) about college"
    ) in none_option[0][0]


def test_gsm8k_context_and_generation_settings(shared_benchmarks: Path, tmp_path: Path) -> None:
    task_set = _task_set(shared_benchmarks, tmp_path, "gsm8k", 3, max_new_tokens=32)
    assert [i.id for i in task_set.items] == ["gsm8k-0000", "gsm8k-0001", "gsm8k-0002"]
    requests = lmeval_requests(task_set, build_lmeval_tasks(task_set))
    runner = TaskRunner(task_set.spec, [shared_benchmarks])
    for item in task_set.items:
        ((context, kwargs),) = requests[item.id]
        assert context == runner.prepare(item).prompt
        assert context.count("\nA: ") == 8
        assert kwargs["until"] == ["Q:", "\n\n"]
        assert kwargs["max_gen_toks"] == 32 and kwargs["do_sample"] is False


def test_bbh_contexts_and_generation_settings(shared_benchmarks: Path, tmp_path: Path) -> None:
    """BBH: the published chain-of-thought prompt file of each subtask (its canary header
    dropped) as the harness task's description, then the question: byte for byte ours."""
    task_set = _task_set(shared_benchmarks, tmp_path, "bbh", 6, max_new_tokens=32)
    assert task_set.limit == 2 and len(task_set.items) == 6
    requests = lmeval_requests(task_set, build_lmeval_tasks(task_set))
    runner = TaskRunner(task_set.spec, [shared_benchmarks])
    for item in task_set.items:
        ((context, kwargs),) = requests[item.id]
        assert context == runner.prepare(item).prompt, item.id
        assert "canary" not in context and context.count("\nA: Let's think step by step.") == 4
        assert kwargs["until"] == ["\n\nQ:", "\nQ:"]
        assert kwargs["max_gen_toks"] == 32 and kwargs["do_sample"] is False


@pytest.fixture(scope="module")
def default_backend(default_model: str):  # type: ignore[no-untyped-def]
    from pytest_llmeval.model import ModelSettings, load_backend

    return load_backend(ModelSettings(model=default_model))


@pytest.mark.parametrize("multiturn", [True, False])
@pytest.mark.parametrize("task_type", ["mmlu", "mmlu_continuation", "gsm8k"])
def test_chat_contexts_are_byte_identical(  # type: ignore[no-untyped-def]
    shared_benchmarks: Path, tmp_path: Path, default_backend, task_type: str, multiturn: bool
) -> None:
    """lm-eval with --apply_chat_template (--fewshot_as_multiturn or not) and a system
    instruction builds the same contexts and continuations as our runner under the default
    model's chat template."""
    chat = ChatSettings(mode="on", system_prompt="You answer exams.", multiturn=multiturn)
    task_set = _task_set(shared_benchmarks, tmp_path, task_type, 6, chat=chat)
    requests = lmeval_requests(
        task_set, build_lmeval_tasks(task_set), tokenizer=default_backend.tokenizer
    )
    runner = TaskRunner(task_set.spec, [shared_benchmarks], chat)
    runner.bind(default_backend)
    for item in task_set.items:
        p = runner.prepare(item)
        assert p.prompt.startswith("<|im_start|>system\nYou answer exams.")
        assert p.prompt.endswith("<|im_start|>assistant\n")
        args = requests[item.id]
        assert [a[0] for a in args] == [p.prompt] * len(args), item.id
        if task_type != "gsm8k":
            assert [a[1] for a in args] == list(p.choices), item.id  # no delimiter in chat
    turns = p.prompt.count("<|im_start|>user")
    assert turns == (task_set.spec.fewshot.k + 1 if multiturn else 1)


def test_harness_yaml_reads_every_csv_cell_as_text(shared_benchmarks: Path, tmp_path: Path) -> None:
    task_set = _task_set(shared_benchmarks, tmp_path, "mmlu", 2)
    text = (task_set.yaml_dir / "llmeval_parity_mmlu_college_mathematics.yaml").read_text()
    assert "question: !function 'builtins.str'" in text
    assert 'doc_to_text: "{{question.strip()}}\\nA. {{choice0}}' in text
    assert "keep_default_na: false" in text
    assert str(shared_benchmarks.resolve() / "mmlu/dev/college_mathematics_dev.csv") in text


def test_selection_takes_the_first_items_of_every_subject(shared_benchmarks: Path) -> None:
    spec = load_spec("mmlu")
    items, k = select_items(spec, [shared_benchmarks], 5, SUBJECTS)
    assert k == 3
    assert [i.id for i in items] == [
        f"mmlu-{s}-000{j}" for s in ("abstract_algebra", "college_mathematics") for j in range(3)
    ]
    everything, k = select_items(spec, [shared_benchmarks], 200)
    assert k == 4 and len(everything) == 204  # 51 subjects here
    with pytest.raises(ValueError, match="no subset"):
        select_items(spec, [shared_benchmarks], 5, ("astrology",))
    assert load_spec("gsm8k", max_new_tokens=7).generate.max_new_tokens == 7  # type: ignore[union-attr]


# --------------------------------------------------------------------------- criteria


class _Scripted:
    """Log-likelihood -(index of the choice) - 0.5, greedy output "The answer is 18."."""

    batch_size = 8

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        return [
            LoglikelihoodResult(logprob=-(i % 4) - 0.5, is_greedy=i % 4 == 0, n_tokens=1)
            for i, _ in enumerate(requests)
        ]

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        return [GenerateResult("The answer is 18.", 6, "stop") for _ in requests]

    def chat_template(self):  # type: ignore[no-untyped-def]
        return None

    def info(self) -> Mapping[str, Any]:
        return {}


def _runs(task_set: TaskSet, lm_values: Any) -> tuple[OursRun, LmevalRun]:
    """Our run on the scripted backend and a harness run whose per-request answers are
    ``lm_values(item_id, index, ours)`` and whose arguments are the harness's own."""
    backend = RecordingBackend(_Scripted(), Timing())
    results = TaskRunner(task_set.spec, task_set.data_dirs).run(task_set.items, backend)
    requests = lmeval_requests(task_set, build_lmeval_tasks(task_set))
    names = {item_id: key for key, item_id in task_set.item_ids.items()}
    samples = {}
    for r in results:
        ours: list[Any] = (
            [(lp, g) for lp, g in zip(r.logprobs, r.is_greedy, strict=True)]
            if r.choices
            else [r.output]
        )
        resps = [[lm_values(r.item_id, i, v)] for i, v in enumerate(ours)]
        samples[r.item_id] = {
            "task": names[r.item_id][0],
            "doc_id": names[r.item_id][1],
            "arguments": requests[r.item_id],
            "resps": resps,
            "filtered": {},
            "metrics": {"none": {"acc": r.acc, "acc_norm": r.acc_norm}},
        }
    ours_run = OursRun(
        timing=Timing(),
        forward=ForwardStats(),
        results=results,
        ll_requests=backend.ll_requests,
        gen_requests=backend.gen_requests,
    )
    return ours_run, LmevalRun(timing=Timing(), forward=ForwardStats(), samples=samples, scores={})


def _failed(task_set: TaskSet, records: Sequence[Mapping[str, Any]]) -> list[str]:
    _, criteria = summarize(task_set, records, task_set.requested)
    return [c.name for c in criteria if not c.passed]


def test_criteria_catch_log_likelihood_and_argmax_differences(
    shared_benchmarks: Path, tmp_path: Path
) -> None:
    task_set = _task_set(shared_benchmarks, tmp_path, "mmlu_continuation", 2)
    close = _runs(task_set, lambda item, i, v: (v[0] + 5e-5, v[1]))
    assert _failed(task_set, compare_multiple_choice(task_set, *close)) == []

    def off(item: str, i: int, v: tuple[float, bool]) -> tuple[float, bool]:
        if item.endswith("abstract_algebra-0000") and i == 3:
            return (0.0, v[1])  # now the most likely choice
        return v

    records = compare_multiple_choice(task_set, *_runs(task_set, off))
    assert _failed(task_set, records) == ["argmax identical", "max |delta ll| < 0.0001"]
    assert [r["item_id"] for r in records if r["pred"] != r["lmeval_pred"]] == [
        "mmlu_continuation-abstract_algebra-0000"
    ]


def test_criteria_catch_a_context_that_differs(shared_benchmarks: Path, tmp_path: Path) -> None:
    task_set = _task_set(shared_benchmarks, tmp_path, "mmlu", 1)
    ours, lm = _runs(task_set, lambda item, i, v: v)
    first = task_set.items[0].id
    lm.samples[first]["arguments"] = [
        (ctx.replace("Answer:", "Answer :"), cont) for ctx, cont in lm.samples[first]["arguments"]
    ]
    records = compare_multiple_choice(task_set, ours, lm)
    assert _failed(task_set, records) == ["contexts byte-identical"]
    assert records[0]["context_first_difference"] == first_difference(
        ours.ll_requests[0].context, lm.samples[first]["arguments"][0][0]
    )


def test_criteria_catch_a_different_output(shared_benchmarks: Path, tmp_path: Path) -> None:
    task_set = _task_set(shared_benchmarks, tmp_path, "gsm8k", 2, max_new_tokens=16)
    same = _runs(task_set, lambda item, i, v: v)
    records = compare_generation(task_set, *same, count_tokens=len)
    assert _failed(task_set, records) == []
    assert all(r["correct"] and r["lmeval_correct"] for r in records[:1])  # gsm8k-0000: 18
    other = _runs(task_set, lambda item, i, v: "The answer is 17." if item == "gsm8k-0001" else v)
    records = compare_generation(task_set, *other, count_tokens=len)
    assert _failed(task_set, records) == [
        "outputs identical (greedy)",
        "extracted answers identical",
    ]
    assert records[1]["output_first_difference"] == 15

    class CharTokens:  # the harness model's tokenizer, one token per character
        def tok_encode(self, text: str) -> list[int]:
            return [ord(c) for c in text]

        def tok_decode(self, tokens: Sequence[int]) -> str:
            return "".join(chr(t) for t in tokens)

    models = Models(_Scripted(), CharTokens(), None, None, {}, Path())  # type: ignore[arg-type]
    diagnose_divergence(records, other[0].gen_requests, models)
    assert "divergence" not in records[0]
    assert records[1]["divergence"] == {
        "token_index": 15,
        "ours_token": "8",
        "lmeval_token": "7",
        "ours_token_logprob": -0.5,
        "lmeval_token_logprob": -1.5,
        "logprob_margin": 1.0,
    }


# --------------------------------------------------------------------------- own scorers


class _NoMeter:
    """Stands in for the forward-pass meter: a scripted model has no forward passes."""

    @contextmanager
    def measure(self) -> Iterator[ForwardStats]:
        yield ForwardStats()


def _scripted_lmeval(reply: Callable[[str], str]) -> Any:
    """An lm-eval model (its ``LM`` interface) answering every generation with
    ``reply(context)``: lm-eval's own filters and ``process_results`` then score it."""
    from lm_eval.api.model import LM

    class ScriptedLM(LM):  # type: ignore[misc]
        def loglikelihood(self, requests: Any, disable_tqdm: bool = False) -> Any:
            raise AssertionError("no log-likelihood requests expected")

        def loglikelihood_rolling(self, requests: Any, disable_tqdm: bool = False) -> Any:
            raise AssertionError("no rolling requests expected")

        def generate_until(self, requests: Any, disable_tqdm: bool = False) -> list[str]:
            return [reply(r.args[0]) for r in requests]

    return ScriptedLM()


class _Replying(_Scripted):
    def __init__(self, reply: Callable[[str], str]) -> None:
        self.reply = reply

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        return [GenerateResult(self.reply(r.context), 6, "stop") for r in requests]


# Replies by the question's opening words: the first three GSM8K test items (targets 18, 3,
# 70000) and what each of lm-eval's filters makes of the reply.
GSM8K_REPLIES = {
    "Janet": " She sells 16 - 3 - 4 = 9 eggs, 9 * 2 = 18. The answer is 18.",
    "A robe": " It takes 2 + 1 = 3 bolts. The answer is 3",  # strict: "The answer is 3" + ?
    "Josh": " The profit is $70,000. The answer is $70,000.",  # strict: "$" not allowed
}


def _reply(context: str) -> str:
    question = context.rsplit("Q: ", 1)[-1]
    return next(text for start, text in GSM8K_REPLIES.items() if question.startswith(start))


def _gsm8k_with_own_scorers(task_set: TaskSet) -> list[dict[str, Any]]:
    """Ours (the scripted backend) and lm-eval's real ``evaluate`` (a scripted LM, its own
    filters and metrics, logged samples) on the same replies, compared item by item."""
    backend = RecordingBackend(_Replying(_reply), Timing())
    results = TaskRunner(task_set.spec, task_set.data_dirs).run(task_set.items, backend)
    ours = OursRun(
        timing=Timing(),
        forward=ForwardStats(),
        results=results,
        ll_requests=[],
        gen_requests=backend.gen_requests,
    )
    models = Models(None, _scripted_lmeval(_reply), None, _NoMeter(), {}, Path())  # type: ignore[arg-type]
    lm = run_lmeval(task_set, models)
    return compare_generation(task_set, ours, lm, count_tokens=len)


def test_gsm8k_named_metrics_agree_with_lm_evals_own_scores(
    shared_benchmarks: Path, tmp_path: Path
) -> None:
    """lm-eval's own strict-match / flexible-extract exact_match per item (its real filters
    and metric, from its gsm8k-cot.yaml) equal our strict_match / flexible_extract."""
    task_set = _task_set(shared_benchmarks, tmp_path, "gsm8k", 3, max_new_tokens=16)
    records = _gsm8k_with_own_scorers(task_set)
    assert _failed(task_set, records) == []
    scores = {
        r["item_id"]: {k: (m["ours"], m["lmeval"]) for k, m in r["metrics"].items()}
        for r in records
    }
    assert scores == {
        "gsm8k-0000": {"strict_match": (1.0, 1.0), "flexible_extract": (1.0, 1.0)},
        # "The answer is 3" at the very end: lm-eval's pattern needs one more character.
        "gsm8k-0001": {"strict_match": (0.0, 0.0), "flexible_extract": (1.0, 1.0)},
        "gsm8k-0002": {"strict_match": (0.0, 0.0), "flexible_extract": (1.0, 1.0)},
    }
    assert records[0]["metrics"]["strict_match"]["lmeval_extracted"] == "18"
    assert records[2]["metrics"]["strict_match"]["lmeval_extracted"] == "[invalid]"
    assert records[2]["metrics"]["strict_match"]["ours_extracted"] is None
    summary, _ = summarize(task_set, records, task_set.requested)
    assert summary["metrics"]["strict_match"] == {
        "lmeval_filter": "strict-match",
        "items": 3,
        "ours": 1 / 3,
        "lmeval": 1 / 3,
        "agree": 3,
        "scorer_agree": 3,
        "extracted_agree": 3,
        "disagreeing_items": [],
    }


def test_a_scorer_difference_is_caught(shared_benchmarks: Path, tmp_path: Path) -> None:
    """Our strict_match without lm-eval's final "\\.$" removal: the same outputs, but our
    score differs from lm-eval's own on the item whose strict answer is "18." (the old
    harness graded lm-eval's outputs with our scorer and could not see this)."""
    task_set = _task_set(shared_benchmarks, tmp_path, "gsm8k", 3, max_new_tokens=16)
    gen = task_set.spec.generate
    assert gen is not None
    strict = gen.metrics[0]
    assert strict.exact_match is not None
    changed = dataclasses.replace(
        strict,
        exact_match=dataclasses.replace(
            strict.exact_match, regexes_to_ignore=strict.exact_match.regexes_to_ignore[:-1]
        ),
    )
    spec = dataclasses.replace(
        task_set.spec, generate=dataclasses.replace(gen, metrics=(changed, *gen.metrics[1:]))
    )
    task_set = dataclasses.replace(task_set, spec=spec)
    replies_18 = " 9 * 2 = 18. The answer is 18. Done."
    try:
        GSM8K_REPLIES["Janet"], old = replies_18, GSM8K_REPLIES["Janet"]
        records = _gsm8k_with_own_scorers(task_set)
    finally:
        GSM8K_REPLIES["Janet"] = old
    assert _failed(task_set, records) == [
        "strict_match = lm-eval's strict-match exact_match (per item)",
        "strict_match scorer on lm-eval's outputs = its strict-match",
    ]
    summary, _ = summarize(task_set, records, task_set.requested)
    assert summary["metrics"]["strict_match"]["disagreeing_items"] == ["gsm8k-0000"]
    (line,) = [w for w in worst_items(task_set, records) if "strict_match" in w]
    assert line.startswith("gsm8k-0000: strict_match ours 0.0 ('18.') vs lm-eval strict-match 1.0")


def test_gsm8k_named_metrics_are_lm_evals_filters() -> None:
    """Our GSM8K spec's strict_match / flexible_extract use the patterns and exact_match
    options of lm-eval's gsm8k-cot.yaml (read from the installed lm-eval)."""
    cot = lmeval_task_yaml("gsm8k/gsm8k-cot.yaml")
    gen = load_spec("gsm8k").generate
    assert gen is not None
    (em,) = cot["metric_list"]
    for metric in gen.metrics:
        (lm_filter,) = [f for f in cot["filter_list"] if f["name"] == LMEVAL_FILTERS[metric.name]]
        regex, take_first = lm_filter["filter"]
        assert take_first == {"function": "take_first"}
        (step,) = metric.extract
        assert step.pattern == regex["regex_pattern"]
        assert step.which == ("last" if regex.get("group_select", 0) == -1 else "first")
        assert step.group == "any"
        assert metric.compare == "exact_match" and metric.exact_match is not None
        assert list(metric.exact_match.regexes_to_ignore) == em["regexes_to_ignore"]
        assert metric.exact_match.ignore_case is em["ignore_case"]
        assert metric.exact_match.ignore_punctuation is em["ignore_punctuation"]


def test_ceval_descriptions_name_the_subjects_as_lm_eval_does() -> None:
    """For each of lm-eval's 52 ceval-valid tasks, our description for that subject is
    lm-eval's with C-Eval's own "考试" ("exam") after the subject's Chinese name: the same
    name for every subject, and no other difference."""
    from pytest_llmeval.prompt import render

    ours = load_task_spec(REPO / "benchmarks" / "ceval.yaml").prompt.description
    group = lmeval_task_yaml("ceval/_ceval-valid.yaml")
    assert len(group["task"]) == 52
    for name in group["task"]:
        theirs = lmeval_task_yaml(f"ceval/{name}.yaml")
        subset = theirs["dataset_name"]
        assert name == f"ceval-valid_{subset}"
        mine = render(ours, {"subset": subset})
        assert mine.replace("考试的单项选择题", "的单项选择题", 1) == theirs["description"], subset


CEVAL_SUBJECTS = ("advanced_mathematics", "mao_zedong_thought", "law")


def test_ceval_contexts_and_continuations_are_byte_identical(
    shared_benchmarks: Path, tmp_path: Path
) -> None:
    """lm-eval builds each subject's requests from its own ceval template and subject
    description (with C-Eval's "考试" and delimiter, as our spec): byte for byte ours."""
    task_set = write_task_set("ceval", [shared_benchmarks], tmp_path, 6, subsets=CEVAL_SUBJECTS)
    assert task_set.limit == 2 and len(task_set.items) == 6
    requests = lmeval_requests(task_set, build_lmeval_tasks(task_set))
    runner = TaskRunner(task_set.spec, [shared_benchmarks])
    for item in task_set.items:
        p = runner.prepare(item)
        args = requests[item.id]
        assert [a[0] for a in args] == [p.prompt] * 4, item.id
        assert [a[1] for a in args] == list(p.choices) == ["A", "B", "C", "D"], item.id
    first = requests["ceval-mao_zedong_thought-0000"][0][0]
    assert first.startswith(
        "以下是中国关于毛泽东思想和中国特色社会主义理论体系概论考试的单项选择题"
    )
    assert first.count("\n答案：") == 6


def test_criteria_catch_an_acc_that_differs_from_lm_evals_own(
    shared_benchmarks: Path, tmp_path: Path
) -> None:
    task_set = _task_set(shared_benchmarks, tmp_path, "mmlu", 2)
    ours, lm = _runs(task_set, lambda item, i, v: v)
    assert _failed(task_set, compare_multiple_choice(task_set, ours, lm)) == []
    first = task_set.items[0].id
    lm.samples[first]["metrics"]["none"]["acc"] = 1.0 - lm.samples[first]["metrics"]["none"]["acc"]
    records = compare_multiple_choice(task_set, ours, lm)
    assert _failed(task_set, records) == ["acc = lm-eval's own acc (per item)"]


# --------------------------------------------------------------------------- real run


def test_parity_cli_on_the_default_model(
    shared_benchmarks: Path, default_model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both tools, 2 MMLU + 2 option-text MMLU + 2 GSM8K items (16 new tokens): every parity
    criterion passes; the report has the per-item records and both tools' timings."""
    from tools.parity import main

    code = main(
        [
            "--items=2",
            # The default task types include BBH, whose subtasks --subjects cannot name.
            "--tasks=mmlu,mmlu_continuation,gsm8k",
            "--subjects=abstract_algebra",
            "--max-new-tokens=16",
            f"--model={default_model}",
            f"--data-dir={shared_benchmarks}",
            f"--out={tmp_path}",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PARITY PASSED" in out
    report = json.loads((tmp_path / "parity.json").read_text())
    assert report["passed"] is True
    tasks = report["tasks"]
    assert list(tasks) == ["mmlu", "mmlu_continuation", "gsm8k"]
    for name, task in tasks.items():
        assert len(task["items"]) == 2, name
        for tool in ("ours", "lmeval"):
            assert task[tool]["timing"]["model_s"] > 0
            assert task[tool]["forward"]["decoder_tokens"] > 0
    assert tasks["mmlu"]["summary"]["max_abs_delta"] < 1e-4
    assert tasks["gsm8k"]["summary"]["outputs_identical"] == 2
    # lm-eval's own per-item scores, compared with ours.
    assert tasks["mmlu"]["summary"]["acc_identical"] == 2
    named = tasks["gsm8k"]["summary"]["metrics"]
    assert list(named) == ["strict_match", "flexible_extract"]
    assert all(m["agree"] == m["scorer_agree"] == 2 for m in named.values())
    assert "strict_match: ours" in out
