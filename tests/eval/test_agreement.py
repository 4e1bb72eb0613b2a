"""The agreement record of two backends: backend specs, the per-task summary, the CLI."""

from __future__ import annotations

import pytest

from pytest_llmeval.eval import ItemResult
from pytest_llmeval.eval.agreement import compare_results, main, parse_backend, summary_line
from pytest_llmeval.model import ModelSettings


def test_backend_specs() -> None:
    base = ModelSettings(model="", seed=7, concurrency=3)
    hf = parse_backend("hf:smollm2-135m", base)
    assert (hf.backend, hf.model, hf.seed) == ("hf", "smollm2-135m", 7)
    served = parse_backend("openai:http://user@host:8000/v1@my-model", base)
    assert (served.backend, served.base_url, served.model, served.concurrency) == (
        "openai",
        "http://user@host:8000/v1",
        "my-model",
        3,
    )
    for bad in ("smollm2-135m", "openai:http://host/v1", "tgi:x", "hf:"):
        with pytest.raises(ValueError, match=r"expected|unknown backend"):
            parse_backend(bad, base)


def _mc(item: str, logprobs: list[float], gold: int) -> ItemResult:
    pred = max(range(len(logprobs)), key=lambda i: logprobs[i])
    return ItemResult(
        task="t",
        item_id=item,
        subset=None,
        correct=pred == gold,
        score=float(pred == gold),
        prompt="p",
        target="ABC"[gold],
        fewshot_ids=[],
        extracted="ABC"[pred],
        choices=["A", "B", "C"],
        logprobs=logprobs,
        pred=pred,
        gold=gold,
    )


def _gen(item: str, output: str, answer: str, correct: bool) -> ItemResult:
    return ItemResult(
        task="t",
        item_id=item,
        subset=None,
        correct=correct,
        score=float(correct),
        prompt="p",
        target="4",
        fewshot_ids=[],
        output=output,
        extracted=answer,
        finish_reason="stop",
    )


def test_multiple_choice_summary() -> None:
    a = [_mc("i0", [-1.0, -2.0, -3.0], 0), _mc("i1", [-1.0, -2.0, -3.0], 1)]
    b = [_mc("i0", [-1.1, -2.0, -3.0], 0), _mc("i1", [-2.5, -2.0, -3.0], 1)]
    summary = compare_results(a, b)["summary"]
    assert summary["items"] == 2
    assert summary["same_prediction"] == summary["same_correctness"] == 0.5
    assert (summary["score_a"], summary["score_b"], summary["difference"]) == (0.5, 1.0, 0.5)
    assert (summary["correct_only_a"], summary["correct_only_b"]) == (0, 1)
    assert summary["mcnemar_p"] == 1.0
    assert summary["mean_abs_dlogprob"] == pytest.approx((0.1 + 1.5) / 6)
    assert summary["max_abs_dlogprob"] == pytest.approx(1.5)


def test_generation_summary_and_line() -> None:
    a = [_gen("g0", " 2+2=4", "4", True), _gen("g1", " 5", "5", False)]
    b = [_gen("g0", " 2+2 = 4", "4", True), _gen("g1", " 5", "5", False)]
    compared = compare_results(a, b)
    summary = compared["summary"]
    assert (summary["identical_output"], summary["same_prediction"]) == (0.5, 1.0)
    assert [i["identical_output"] for i in compared["items"]] == [False, True]
    line = summary_line(
        {"a": {"spec": "hf:m"}, "b": {"spec": "openai:u@m"}, "summary": {"t": summary}}
    )
    assert line == (
        "agreement hf:m (A) vs openai:u@m (B): t 2 items: same prediction 100.0%, "
        "score 50.0% vs 50.0% (McNemar p 1), identical outputs 50.0%"
    )
    with pytest.raises(ValueError, match="same items"):
        compare_results(a, b[::-1])


def test_cli_rejects_bad_backend_specs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--task", "x.yaml", "--a", "hf:m", "--b", "tgi:x", "--out", "o.json"])
    assert exc.value.code == 2
    assert "unknown backend 'tgi'" in capsys.readouterr().err
