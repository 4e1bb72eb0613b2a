"""Min-K% / Min-K%++ membership scores and their AUROC against rewritten items."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_llmeval._errors import ModelError
from pytest_llmeval.contamination import membership_probe, membership_scores, min_k
from pytest_llmeval.dataset import load_items
from pytest_llmeval.eval import TaskRunner
from pytest_llmeval.model import (
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
)
from pytest_llmeval.scorer import auroc
from pytest_llmeval.task import task_spec_from_dict


def test_min_k_is_the_mean_of_the_lowest_fraction() -> None:
    values = [-1.0, -5.0, -2.0, -9.0, -3.0, -0.5, -4.0, -6.0, -7.0, -8.0]
    assert min_k(values, 0.2) == pytest.approx((-9.0 - 8.0) / 2)
    assert min_k(values, 1.0) == pytest.approx(sum(values) / 10)
    assert min_k([-2.0], 0.2) == -2.0  # at least one token
    assert min_k([], 0.2) != min_k([], 0.2)  # NaN
    with pytest.raises(ValueError, match="fraction"):
        min_k(values, 0.0)


@given(st.lists(st.floats(-50, 0), min_size=1, max_size=40), st.floats(0.05, 1.0))
def test_min_k_is_at_most_the_mean(values: list[float], fraction: float) -> None:
    assert min_k(values, fraction) <= sum(values) / len(values) + 1e-9


def test_auroc_known_values() -> None:
    assert auroc([3.0, 4.0], [1.0, 2.0]) == 1.0
    assert auroc([1.0, 2.0], [3.0, 4.0]) == 0.0
    assert auroc([1.0, 3.0], [2.0, 4.0]) == 0.25
    assert auroc([2.0], [2.0]) == 0.5  # ties count one half
    assert auroc([1.0, 2.0, 2.0], [2.0, 0.0]) == pytest.approx((0.5 + 1 + 0.5 + 1 + 1 + 0) / 6)


class Familiar:
    """A model that finds the published texts (those in ``seen``) more likely."""

    def __init__(self, seen: set[str]) -> None:
        self.seen = seen
        self.requests: list[LoglikelihoodRequest] = []

    @property
    def batch_size(self) -> int:
        return 4

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        self.requests.extend(requests)
        out = []
        for r in requests:
            base = -1.0 if r.continuation in self.seen else -3.0
            tokens = tuple(base - 0.1 * i for i in range(10))
            out.append(
                LoglikelihoodResult(sum(tokens), False, 10, tokens, tuple(t + 2 for t in tokens))
            )
        return out

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        raise AssertionError("not used")

    def chat_template(self):  # type: ignore[no-untyped-def]
        return None

    def info(self) -> Mapping[str, Any]:
        return {}


def test_membership_probe_separates_familiar_texts(tmp_path: Path) -> None:
    rows = [
        {
            "question": f"Tom has {a} apples and buys {b} more. How many?",
            "answer": f"{a}+{b}=<<{a}+{b}={a + b}>>{a + b}\n#### {a + b}",
        }
        for a, b in [(15, 9), (21, 13), (33, 8), (40, 17)]
    ]
    (tmp_path / "w.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = task_spec_from_dict(
        {
            "task": "w",
            "dataset": {"path": "w.jsonl"},
            "prompt": {"template": "Q: {{ question }}\nA:"},
            "mode": "generate",
            "generate": {"target": "{{ answer | after('####') }}", "compare": "numeric"},
            "contamination": {"question": "question", "solution": "answer"},
        }
    )
    items = load_items(spec, [tmp_path])
    runner = TaskRunner(spec, [tmp_path])
    seen = {f"Q: {r['question']}\nA: {r['answer'].rsplit('#### ', 1)[1]}" for r in rows}
    backend = Familiar(seen)
    report = membership_probe(runner, items, backend, fraction=0.2)
    assert (report.reference, len(report.published), len(report.rewritten)) == (
        "number_rewrite",
        4,
        4,
    )
    assert report.auroc_min_k == report.auroc_min_k_plus_plus == 1.0
    assert all(r.token_detail and r.context == "" for r in backend.requests)
    assert {r.continuation for r in backend.requests[:4]} == seen
    assert report.published[0].min_k == pytest.approx(((-1.8) + (-1.9)) / 2)
    assert report.to_dict()["auroc_min_k"] == 1.0
    scores = membership_scores([("x", "text")], backend, fraction=1.0)
    assert scores[0].n_tokens == 10


class TopOneOnly(Familiar):
    """A backend that has per-token log-probabilities but no z-scores (a served model)."""

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        return [
            LoglikelihoodResult(r.logprob, r.is_greedy, r.n_tokens, r.token_logprobs)
            for r in super().loglikelihood(requests)
        ]

    def chat_template(self):  # type: ignore[no-untyped-def]
        return None

    def info(self) -> Mapping[str, Any]:
        return {"backend": "openai"}


def test_membership_scores_fail_clearly_without_zscores() -> None:
    with pytest.raises(ModelError, match=r"openai backend .* no z-scores, which Min-K%\+\+"):
        membership_scores([("x", "text")], TopOneOnly(set()))
