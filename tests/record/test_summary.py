"""The Markdown run summary and the GitHub Actions step summary."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pytest_llmeval.gate import Comparison, ConfigDiff, TaskDelta
from pytest_llmeval.record._summary import (
    append_github_step_summary,
    environment_headline,
    markdown_summary,
)

ROWS: list[dict[str, Any]] = [
    {
        "task": "mmlu",
        "n": 200,
        "total": 14042,
        "metric": "acc",
        "score": 0.575,
        "ci_low": 0.5058,
        "ci_high": 0.6414,
        "floor": 0.5,
        "status": "pass",
        "seconds": 12.34,
    },
    {
        "task": "gsm8k",
        "n": 50,
        "total": 50,
        "metric": "exact_match",
        "score": 0.1,
        "ci_low": 0.0435,
        "ci_high": 0.2136,
        "floor": 0.2,
        "status": "fail",
        "seconds": 80.0,
    },
    {
        "task": "arc",
        "n": 0,
        "total": 0,
        "metric": "acc",
        "score": math.nan,
        "ci_low": math.nan,
        "ci_high": math.nan,
        "floor": None,
        "status": "skipped",
        "seconds": math.nan,
    },
]

ENVIRONMENT: dict[str, Any] = {
    "model": {
        "path": "/models/SmolLM2-135M-Instruct.gguf",
        "sha256": "0123456789abcdef" * 4,
        "dtype": "bfloat16",
        "device": "cuda:0",
    },
    "libraries": {"torch": "2.4.1", "transformers": "4.45.2"},
    "cuda": {"cuda": "12.1", "gpus": ["NVIDIA H200"]},
    "git": {"commit": "5c68d43f00e1d2c3b4a5968778695a4b3c2d1e0f", "dirty": True},
}


def comparison() -> Comparison:
    return Comparison(
        baseline_path=Path("/runs/baseline"),
        tasks=[
            TaskDelta(
                task="mmlu",
                n_shared=200,
                baseline_score=0.61,
                current_score=0.575,
                delta=0.575 - 0.61,
                p_value=0.012,
                significant=True,
                regressed=["mmlu-0003", "mmlu-0017"],
                improved=["mmlu-0101"],
            ),
            TaskDelta(
                task="gsm8k",
                n_shared=0,
                baseline_score=math.nan,
                current_score=math.nan,
                delta=math.nan,
                p_value=1.0,
                significant=False,
                only_in_current=50,
            ),
        ],
        config_diffs=[ConfigDiff("tasks.mmlu.fewshot_k", 5, 0)],
        env_diffs=[ConfigDiff("environment.libraries.transformers", "4.45.0", "4.45.2")],
    )


def test_verdict_table() -> None:
    md = markdown_summary("llmeval: SmolLM2", ROWS, None, None)
    lines = md.splitlines()
    assert lines[0] == "## llmeval: SmolLM2"
    assert "| task | items | metric | score | 95% CI | floor | status | time |" in lines
    assert "| mmlu | 200/14042 | acc | 57.5% | 50.6% – 64.1% | 50.0% | ✅ pass | 12.3 s |" in lines
    assert (
        "| gsm8k | 50/50 | exact_match | 10.0% | 4.3% – 21.4% | 20.0% | ❌ fail | 80.0 s |" in lines
    )
    assert "| arc | 0/0 | acc | n/a | n/a | - | skipped | - |" in lines
    assert md.endswith("\n")
    assert "Compared with baseline" not in md
    assert "Environment" not in md


def test_partial_note_only_when_items_were_left_out() -> None:
    md = markdown_summary("run", ROWS, None, None)
    assert "**Partial**" in md
    assert "mmlu 200 of 14042" in md
    assert "gsm8k" not in md.split("**Partial**")[1]
    assert "**Partial**" not in markdown_summary("run", ROWS[1:], None, None)


def test_environment_headline() -> None:
    md = markdown_summary("run", ROWS, ENVIRONMENT, None)
    line = next(line for line in md.splitlines() if line.startswith("**Environment**"))
    assert "model `SmolLM2-135M-Instruct.gguf` (sha256 `0123456789ab`)" in line
    assert "bfloat16 on cuda:0" in line
    assert "torch 2.4.1" in line
    assert "transformers 4.45.2" in line
    assert "CUDA 12.1" in line
    assert "git `5c68d43` (dirty)" in line


def test_environment_headline_tolerates_missing_and_odd_keys() -> None:
    assert environment_headline({}) == ""
    assert environment_headline({"model": "SmolLM2", "torch": "2.4.1"}) == (
        "model `SmolLM2`, torch 2.4.1"
    )
    assert environment_headline({"git": {"commit": "abc1234", "dirty": False}}) == "git `abc1234`"
    assert environment_headline({"model": {"sha256": None}, "git": "abc", "cuda": None}) == ""
    assert "**Environment**" not in markdown_summary("run", ROWS, {}, None)
    assert "**Environment**" not in markdown_summary("run", ROWS, {"python": "3.11"}, None)


def test_comparison_section() -> None:
    md = markdown_summary("run", ROWS, ENVIRONMENT, comparison())
    lines = md.splitlines()
    assert "### Compared with baseline `/runs/baseline`" in lines
    assert "| mmlu | 200 | 61.0% | 57.5% | -3.5 ⚠️ | 0.012 | 2 | 1 |" in lines
    assert "| gsm8k | 0 | - | - | - | - | - | only in this run |" in lines
    assert "`mmlu-0003`, `mmlu-0017`" in md
    assert "> [!WARNING]" in lines
    assert "> - `tasks.mmlu.fewshot_k: 5 -> 0`" in lines
    assert '- `environment.libraries.transformers: "4.45.0" -> "4.45.2"`' in lines
    # sections in order: verdicts, environment, comparison
    assert md.index("| mmlu | 200/14042") < md.index("**Environment**") < md.index("### Compared")


def test_comparison_without_differences_has_no_warning() -> None:
    same = comparison()
    same.config_diffs = []
    same.env_diffs = []
    md = markdown_summary("run", ROWS, None, same)
    assert "[!WARNING]" not in md
    assert "Environment differences" not in md


def test_table_cells_escape_pipes() -> None:
    row = dict(ROWS[0], task="a|b")
    assert "| a\\|b | 200/14042 |" in markdown_summary("run", [row], None, None)


def test_no_rows() -> None:
    assert "No tasks ran." in markdown_summary("run", [], None, None)


def test_append_github_step_summary(tmp_path: Path) -> None:
    target = tmp_path / "step_summary.md"
    environ = {"GITHUB_STEP_SUMMARY": str(target)}
    assert append_github_step_summary("## first\n", environ) == target
    assert append_github_step_summary("## second", environ) == target
    text = target.read_text(encoding="utf-8")
    assert "## first" in text and "## second" in text
    assert text.index("## first") < text.index("## second")


def test_append_github_step_summary_unset(tmp_path: Path) -> None:
    assert append_github_step_summary("## x", {}) is None
    assert append_github_step_summary("## x", {"GITHUB_STEP_SUMMARY": ""}) is None
    assert list(tmp_path.iterdir()) == []


def test_environment_headline_from_an_environment_record() -> None:
    # the shape of record._env.environment_record plus the backend's info() under "backend"
    environment = {
        "python": "3.11.7",
        "hostname": "runner-1",
        "libraries": {"torch": "2.4.1", "transformers": "4.45.2", "pytest": "8.3.2"},
        "cuda": {"available": False, "cuda": None, "gpus": []},
        "git": {
            "code": {"commit": "5c68d43f" + "0" * 32, "short": "5c68d43", "dirty": False},
            "model": None,
        },
        "model": {"files": {"model.safetensors": "ff" * 32}, "sha256": "fedcba98" * 8},
        "backend": {
            "backend": "hf",
            "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
            "model_path": "/cache/models/smol",
            "device": "cpu",
            "device_name": "x86_64",
            "dtype": "float32",
        },
    }
    assert environment_headline(environment) == (
        "model `HuggingFaceTB/SmolLM2-135M-Instruct` (sha256 `fedcba98fedc`), "
        "float32 on cpu (x86_64), torch 2.4.1, transformers 4.45.2, git `5c68d43`"
    )
    environment["backend"] = {"model_path": "/cache/models/smol", "torch": "2.5.0"}
    del environment["libraries"]
    assert environment_headline(environment).startswith("model `smol` (sha256 `fedcba98fedc`)")
    assert "torch 2.5.0" in environment_headline(environment)


def test_an_interrupted_run_says_so_above_its_tables() -> None:
    """A cancelled CI job's step summary must not read as a complete run."""
    md = markdown_summary("run", ROWS, None, None, interrupted="interrupted (KeyboardInterrupt)")
    first = md.splitlines()[2]
    assert first.startswith("> ⚠️ This run was interrupted (KeyboardInterrupt)")
    assert "This run was" not in markdown_summary("run", ROWS, None, None)
