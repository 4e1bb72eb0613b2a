"""The generative scorers beyond answer matching: code execution, IFEval rules, MATH
equivalence, and published few-shot prompt files (BBH), with a scripted backend.

The scripted backend stands in for the model's text only; the scoring runs for real (code
in the sandbox, IFEval checks, MATH normalisation)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from test_runner import ScriptedBackend

from pytest_llmeval import SpecError, load_task_spec
from pytest_llmeval.dataset import load_items
from pytest_llmeval.eval import TaskRunner
from pytest_llmeval.task import task_spec_from_dict

REPO = Path(__file__).resolve().parents[2]

PROBLEM = {
    "task_id": "Toy/0",
    "prompt": 'def add(a: int, b: int) -> int:\n    """Return the sum of a and b."""\n',
    "entry_point": "add",
    "test": (
        "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n"
    ),
}


def _code_task(tmp_path: Path) -> tuple[TaskRunner, list[Any]]:
    (tmp_path / "toy.jsonl").write_text(json.dumps(PROBLEM) + "\n")
    spec = load_task_spec(REPO / "benchmarks" / "humaneval.yaml")
    spec = task_spec_from_dict(
        {
            "task": "toy_code",
            "dataset": {"path": "toy.jsonl", "id_field": "task_id"},
            "prompt": {"template": "{{ prompt }}"},
            "mode": "generate",
            "generate": {
                "max_new_tokens": 64,
                "stop": list(spec.generate.stop) if spec.generate else [],
                "scorer": "execution",
                "execution": {"timeout_s": 5},
            },
        }
    )
    return TaskRunner(spec, [tmp_path]), load_items(spec, [tmp_path])


@pytest.mark.parametrize(
    ("completion", "passed", "status"),
    [
        ("    return a + b\n", True, "passed"),
        ("```python\ndef add(a, b):\n    return a + b\n```\nThis adds.", True, "passed"),
        ("    return a - b\n", False, "failed"),
        ("    while True:\n        pass\n", False, "timeout"),
        ("    import sys\n    sys.exit(0)\n", False, "failed"),
    ],
)
def test_execution_scorer_runs_code_in_the_sandbox(
    tmp_path: Path, completion: str, passed: bool, status: str | None
) -> None:
    runner, items = _code_task(tmp_path)
    backend = ScriptedBackend(text=lambda r: completion)
    (result,) = runner.run(items, backend)
    assert result.correct is passed
    assert result.details is not None
    if status:
        assert result.details["status"] == status
    # Unless the user allowed it, code runs only in the kernel's read-only filesystem view.
    assert {"mountns", "readonly_fs"} <= set(result.details["isolation"])
    assert result.extractor == "code"
    assert result.extracted  # the code that ran is recorded


def test_ifeval_scorer_on_real_items(tmp_path: Path) -> None:
    shared = REPO.parent / "shared" / "benchmarks"
    if not shared.is_dir():
        pytest.skip("../shared/benchmarks not found")
    spec = load_task_spec(REPO / "benchmarks" / "ifeval.yaml")
    items = [
        i
        for i in load_items(spec, [shared])
        if list(i.doc["instruction_id_list"]) == ["punctuation:no_comma"]
    ][:1]
    if not items:
        pytest.skip("no single no_comma item in this copy")
    runner = TaskRunner(spec, [shared])
    good = runner.run(items, ScriptedBackend(text=lambda r: "A reply without any such mark."))
    bad = runner.run(items, ScriptedBackend(text=lambda r: "A reply, with a comma."))
    assert good[0].correct and not bad[0].correct
    assert bad[0].details is not None
    assert bad[0].details["strict"] == [False]
    assert bad[0].details["instruction_ids"] == ["punctuation:no_comma"]


def test_math_scorer_uses_boxed_answers_and_equivalence(tmp_path: Path) -> None:
    (tmp_path / "m.jsonl").write_text(
        json.dumps({"problem": "Half of one?", "answer": "\\frac{1}{2}"}) + "\n"
    )
    base = load_task_spec(REPO / "benchmarks" / "math500.yaml")
    assert base.generate is not None
    spec = task_spec_from_dict(
        {
            "task": "toy_math",
            "dataset": {"path": "m.jsonl"},
            "prompt": {"template": "{{ problem }}"},
            "mode": "generate",
            "generate": {"target": "{{ answer }}", "extract": ["boxed"], "compare": "math"},
        }
    )
    runner = TaskRunner(spec, [tmp_path])
    items = load_items(spec, [tmp_path])
    for text, ok in [
        ("So x = 1/2, hence \\boxed{0.5}.", True),
        ("The final answer is $\\dfrac12$.", True),
        ("\\boxed{\\frac{1}{3}}", False),
        ("no answer at all", False),
    ]:
        (result,) = runner.run(items, ScriptedBackend(text=lambda r, t=text: t))
        assert result.correct is ok, text


def test_bbh_prompt_uses_the_published_cot_file_verbatim() -> None:
    shared = REPO.parent / "shared" / "benchmarks"
    if not shared.is_dir():
        pytest.skip("../shared/benchmarks not found")
    spec = load_task_spec(REPO / "benchmarks" / "bbh.yaml")
    items = [i for i in load_items(spec, [shared]) if i.subset == "date_understanding"][:1]
    runner = TaskRunner(spec, [shared])
    prepared = runner.prepare(items[0])
    cot = (shared / "bbh" / "cot-prompts" / "date_understanding.txt").read_text()
    body = cot.split("-----\n", 1)[1].strip("\n")
    assert prepared.prompt.startswith(body)
    assert "canary" not in prepared.prompt
    assert prepared.prompt.endswith("A: Let's think step by step.")
    assert prepared.fewshot_ids[0].startswith("date_understanding.txt#")
    (result,) = runner.run(
        items,
        ScriptedBackend(
            text=lambda r: f" Tomorrow is later. So the answer is {items[0].doc['target']}.\n"
        ),
    )
    assert result.correct


def test_scorer_spec_errors_name_the_field() -> None:
    base = {
        "task": "t",
        "dataset": {"path": "x.jsonl"},
        "prompt": {"template": "{{ q }}"},
        "mode": "generate",
    }
    with pytest.raises(SpecError, match=r"generate\.scorer"):
        task_spec_from_dict({**base, "generate": {"scorer": "vibes"}})
    with pytest.raises(SpecError, match=r"generate\.execution\.timeout_s"):
        task_spec_from_dict(
            {**base, "generate": {"scorer": "execution", "execution": {"timeout_s": -1}}}
        )
    with pytest.raises(SpecError, match=r"generate\.target"):
        task_spec_from_dict({**base, "generate": {"scorer": "match"}})
    with pytest.raises(SpecError, match=r"catalog\.capability"):
        task_spec_from_dict({**base, "generate": {"target": "a"}, "catalog": {"capability": "x"}})


@pytest.mark.skipif(os.geteuid() != 0, reason="as root the sandbox looks for an interpreter")
def test_code_the_sandbox_did_not_run_is_an_error_not_a_wrong_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sandbox that cannot run the program (here: no interpreter an unprivileged user can
    run; likewise no filesystem isolation) makes the item an error with the sandbox's reason,
    never a wrong answer that would read as pass@1 = 0."""
    from pytest_llmeval.sandbox import PYTHON_ENV, _identity

    monkeypatch.setattr(_identity, "_python_cache", {})
    monkeypatch.setenv(PYTHON_ENV, "/nonexistent/python3")
    runner, items = _code_task(tmp_path)
    (result,) = runner.run(items, ScriptedBackend(text=lambda r: "    return a + b\n"))
    assert result.error is not None
    assert (
        "item toy_code-Toy_0: the generated code was not run: sandbox unavailable" in result.error
    )
    assert PYTHON_ENV in result.error
    assert result.correct is False
