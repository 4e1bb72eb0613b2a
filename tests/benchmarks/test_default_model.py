"""The shipped specs with data in ``../shared/benchmarks`` on the default model, one item each.

``tests/test_e2e_smoke.py`` covers GSM8K and MMLU; this reads one real item of each other
task with local data (C-Eval, BBH, HumanEval, IFEval, MATH-500), run through pytest as a
user would in the session's shared run (tests/default_run.py), and checks what each scorer
produced on it: the prompt shape (few-shot blocks), the model's output, the scorer's
details. Scores of single items are not checked.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from default_run import ITEMS as RUN_ITEMS
from default_run import PROBE_TEST, DefaultRun

from pytest_llmeval.record import read_summary

REPO = Path(__file__).resolve().parents[2]

# The one item of each task other than GSM8K and MMLU in the session's shared run of the
# default model (tests/default_run.py: a short prompt or an early stop keeps it cheap).
ITEMS = {task: RUN_ITEMS[task][0] for task in ("ceval", "bbh", "humaneval", "ifeval", "math500")}


def _records(run: Path, task: str) -> list[dict[str, Any]]:
    lines = (run / "tasks" / f"{task}_output.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_default_model_on_one_item_of_each_task_with_local_data(default_run: DefaultRun) -> None:
    result, run = default_run.result, default_run.run
    text = result.stdout.str()
    assert result.ret == 0, text
    result.stdout.fnmatch_lines(
        [
            "bbh*1/6511*exact_match*",
            "ceval*1/1346*acc*",
            "humaneval*1/164*pass@1*",
            "ifeval*1/541*prompt_level_strict_acc*",
            "math500*1/500*exact_match*",
        ]
    )
    records = {task: _records(run, task) for task in ITEMS}
    assert {task: [r["item_id"] for r in rs] for task, rs in records.items()} == {
        task: [item] for task, item in ITEMS.items()
    }
    (ceval,) = records["ceval"]
    assert ceval["prompt"].count("答案：") == 6  # 5 dev shots + the question
    assert len(ceval["fewshot_ids"]) == 5
    mass = sum(math.exp(lp) for lp in ceval["logprobs"])
    assert 0.0 < mass <= 1.0 + 1e-6
    (bbh,) = records["bbh"]
    assert bbh["prompt"].count("\nA: Let's think step by step.") == 4  # 3 cot shots + question
    assert bbh["fewshot_ids"][0].startswith("boolean_expressions.txt#")  # file + digest
    assert bbh["output"].strip()
    (code,) = records["humaneval"]
    assert code["details"]["status"] in ("passed", "failed", "timeout", "memory", "killed")
    assert code["details"]["status"] != "error", code["details"]  # the sandbox itself ran
    (ifeval,) = records["ifeval"]
    checks = ifeval["details"]
    assert checks["instruction_ids"], checks
    assert len(checks["strict"]) == len(checks["loose"]) == len(checks["instruction_ids"])
    (math500,) = records["math500"]
    assert math500["messages"][-1]["content"].startswith("Problem:\n")
    assert math500["finish_reason"] in ("stop", "length", "eos")
    # The default model is an instruct model with a chat template: every task was prompted
    # through it (the default --llm-set prompt.chat_template=auto), as the record and summary say.
    for task, (record,) in records.items():
        assert record["prompt"].startswith("<|im_start|>system\n"), task
        assert record["messages"][-1]["role"] == "user", task
    config = json.loads((run / "eval_config.json").read_text())
    assert {t: c["chat_template"]["source"] for t, c in config["tasks"].items()} == dict.fromkeys(
        RUN_ITEMS, "tokenizer"
    )
    assert "prompts: chat template (tokenizer, sha256 " in text
    summary = read_summary(run / "metrics_summary.json")
    assert sorted(summary) == sorted(RUN_ITEMS)


def test_contamination_probes_on_the_default_model(default_run: DefaultRun) -> None:
    """Every shipped probe on real MMLU, C-Eval and GSM8K items with the default model (4
    items each, in the shared run): each runs end to end and writes its report; a failure
    must be a verdict, not an error."""
    result, run = default_run.result, default_run.run
    text = result.stdout.str()
    outcomes = default_run.outcomes(PROBE_TEST)
    assert len(outcomes) == 10, outcomes
    # Without --llm-set probe.reference_model the canonical-order test, TS-Guessing and the
    # membership flags have no null that holds at every n (docs/CONTAMINATION.md), and
    # number and entity rewrites were never measured on known-clean items: skipped with
    # their numbers, reports written. Option shuffling and CircularEval (golds weighed in
    # their own letter shares) give their verdicts.
    assert sorted(p for p, o in outcomes.items() if o == "skipped") == [
        "ceval-canonical_order",
        "ceval-membership",
        "gsm8k-entity_rewrite",
        "gsm8k-membership",
        "gsm8k-number_rewrite",
        "mmlu-canonical_order",
        "mmlu-membership",
        "mmlu-ts_guessing",
    ], outcomes
    assert {outcomes["mmlu-option_shuffle"], outcomes["mmlu-circular"]} <= {"passed", "failed"}
    result.stdout.fnmatch_lines(
        ["*gsm8k number_rewrite: no verdict: its false-alarm rate on known-clean items has*"]
    )
    assert "error" not in outcomes.values(), text
    for line in result.stdout.lines:
        if line.startswith("FAILED") and PROBE_TEST in line:
            assert "possible contamination" in line, line
    result.stdout.fnmatch_lines(["*llmeval contamination probes*"])
    reports = {p.stem: json.loads(p.read_text()) for p in run.glob("contamination/*.json")}
    assert sorted(reports) == sorted(outcomes)  # every probe wrote its report
    for name, report in reports.items():
        # every verdict names its null; every probe without one says why
        assert report["verdict"]["null"] if report.get("verdict") else report["no_verdict"], name
    result.stdout.fnmatch_lines(
        ["*mmlu membership: no verdict without --llm-set probe.reference_model*"]
    )
    result.stdout.fnmatch_lines(
        [
            "*mmlu canonical_order: no verdict without --llm-set probe.reference_model: the "
            "test cannot tell*"
        ]
    )
    assert reports["mmlu-membership"]["handling"]["scores"]["all"]["n"] == 4
    assert reports["mmlu-option_shuffle"]["n"] == 4
    # The prompts the probe ran under, as the user runs it (the spec's 5 shots, the chat
    # template on by default): named in the verdict, checked against its validated ones.
    shuffle = reports["mmlu-option_shuffle"]["verdict"]
    assert shuffle["conditions"] == "5-shot prompts through the chat template, float32"
    assert reports["mmlu-canonical_order"]["n"] == 4
    assert len(reports["mmlu-canonical_order"]["items"][0]["shuffled"]) == 3
    # GSM8K's first 4 items: 0000 and 0002 have safe number rewrites (0001 uses only the
    # unit constant 2, 0003 its 3 and 60); 0000 (Janet) and 0003 (James) name people.
    assert reports["gsm8k-number_rewrite"]["skipped"] == ["gsm8k-0001", "gsm8k-0003"]
    assert reports["gsm8k-entity_rewrite"]["skipped"] == ["gsm8k-0001", "gsm8k-0002"]
    numbers = reports["gsm8k-number_rewrite"]["items"][0]["detail"]
    assert numbers["changes"] == [["16", numbers["changes"][0][1]]]  # Janet's 16 eggs


@pytest.fixture(scope="module")
def default_backend(default_model: str) -> Any:
    """The default model in this process (batch size 8)."""
    from pytest_llmeval.model import ModelSettings, load_backend

    return load_backend(ModelSettings(model=default_model, batch_size=8))


def test_membership_and_guided_completion_on_the_default_model(
    shared_benchmarks: Path, default_backend: Any
) -> None:
    """Min-K% / Min-K%++ and guided completion on real MMLU and GSM8K items with the default
    model (in process): the scores are finite log-probability statistics, one per item and
    rewrite, and the completions are real text."""
    from pytest_llmeval.contamination import guided_completion_probe, membership_probe
    from pytest_llmeval.dataset import first_n, load_items
    from pytest_llmeval.eval import TaskRunner
    from pytest_llmeval.task import load_task_spec

    backend = default_backend
    data = [shared_benchmarks]
    mmlu = load_task_spec(REPO / "benchmarks" / "mmlu.yaml")
    runner = TaskRunner(mmlu, data)
    items = first_n(load_items(mmlu, data), 4)
    report = membership_probe(runner, items, backend)
    assert (report.reference, len(report.published), len(report.rewritten)) == (
        "option_shuffle",
        4,
        4,
    )
    for score in (*report.published, *report.rewritten):
        assert score.n_tokens > 20
        assert score.min_k < score.mean_logprob < 0  # the least likely 20% lie below the mean
        assert math.isfinite(score.min_k_plus_plus)
    assert 0.0 <= report.auroc_min_k <= 1.0
    gsm8k = load_task_spec(REPO / "benchmarks" / "gsm8k.yaml")
    guided = guided_completion_probe(
        TaskRunner(gsm8k, data),
        first_n(load_items(gsm8k, data), 2),
        backend,
        benchmark="GSM8K",
        max_new_tokens=16,
    )
    assert guided.n == 2
    assert all(i.guided_output.strip() and i.unguided_output.strip() for i in guided.items)
    assert all(0.0 <= i.guided_rouge_l <= 1.0 for i in guided.items)


def test_shared_prefixes_give_the_unshared_results_on_real_items(
    shared_benchmarks: Path, default_backend: Any
) -> None:
    """Reusing the few-shot block's states (and a question's context for its options) gives
    the numbers of scoring every row from scratch: real 5-shot MMLU items with letter and
    option-text continuations, and 8-shot GSM8K generations."""
    from dataclasses import replace

    from pytest_llmeval.dataset import first_n, load_items
    from pytest_llmeval.eval import TaskRunner
    from pytest_llmeval.model import GenerateRequest, LoglikelihoodRequest
    from pytest_llmeval.task import load_task_spec

    backend = default_backend
    data = [shared_benchmarks]
    mmlu = load_task_spec(REPO / "benchmarks" / "mmlu.yaml")
    runner = TaskRunner(mmlu, data)
    # Round-robin over subjects: rows continuing different few-shot blocks share batches.
    prepared = [runner.prepare(item) for item in first_n(load_items(mmlu, data), 2)]
    requests = [
        LoglikelihoodRequest(p.prompt, " " + cont, shared_prefix=p.shared_prefix)
        for p in prepared
        for cont in [*p.choices, *p.item.doc["choices"]]
    ]
    gsm8k = load_task_spec(REPO / "benchmarks" / "gsm8k.yaml")
    runner = TaskRunner(gsm8k, data)
    # GSM8K prompts and two MMLU prompts (other prefixes) in one generation batch.
    generations = [
        GenerateRequest(p.prompt, 24, stop=("Q:", "\n\n"), shared_prefix=p.shared_prefix)
        for p in [*(runner.prepare(item) for item in load_items(gsm8k, data)[:3]), *prepared[:2]]
    ]
    shared = backend.loglikelihood(requests), backend.generate(generations)
    assert backend._prefixes  # the few-shot blocks were cached
    backend._share = False
    try:
        plain = (
            backend.loglikelihood([replace(r, shared_prefix=0) for r in requests]),
            backend.generate([replace(g, shared_prefix=0) for g in generations]),
        )
    finally:
        backend._share = True
    for a, b in zip(shared[0], plain[0], strict=True):
        assert abs(a.logprob - b.logprob) < 1e-4
        assert (a.is_greedy, a.n_tokens) == (b.is_greedy, b.n_tokens)
    assert [g.text for g in shared[1]] == [g.text for g in plain[1]]
    assert all(g.n_tokens > 0 for g in shared[1])
    # The backend's own greedy loop gives what transformers' generate gives (one request
    # at a time: no padding), cut at the same stop sequences.
    import torch

    for request, result in zip(generations[:2], shared[1][:2], strict=True):
        ids = backend.tokenizer(request.context, return_tensors="pt").input_ids
        with torch.inference_mode():
            out = backend.model.generate(ids, max_new_tokens=24, do_sample=False, num_beams=1)
        text = backend.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        cut = min((text.find(s) for s in request.stop if s in text), default=len(text))
        assert result.text == text[:cut]
