"""Reference runs that cannot give a floor, and plan/simulate settings out of range: named
errors (the file, the task, the field; the option) and a non-zero exit, never a traceback
or a floor the plugin would refuse later (docs/FAILURES.md)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from test_gate_cli import write_run

from pytest_llmeval._errors import LlmEvalError
from pytest_llmeval.gate import FloorRule, PlanSettings, ReferenceRun
from pytest_llmeval.record.__main__ import main


def _reference(tmp_path: Path, **fields: object) -> Path:
    """A reference run of task ``mmlu`` (400 items) whose summary has ``fields`` replaced."""
    rng = random.Random(3)
    run = write_run(tmp_path / "ref", "mmlu", [rng.random() < 0.4 for _ in range(400)])
    path = run / "metrics_summary.json"
    summary = json.loads(path.read_text())
    summary["mmlu"].update(fields)
    path.write_text(json.dumps(summary))  # NaN is written as NaN, as json.dumps does
    return run


@pytest.mark.parametrize(
    ("fields", "field", "shown"),
    [
        ({"ci95": [math.nan, 0.45]}, "ci95", "[nan, 0.45]"),
        ({"ci95": [1.7, 2.0]}, "ci95", "[1.7, 2.0]"),
        ({"ci95": [0.5, 0.3]}, "ci95", "[0.5, 0.3]"),
        ({"score": 1.3}, "score", "1.3"),
    ],
)
def test_floors_command_names_a_summary_that_cannot_give_a_floor(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fields: dict[str, object],
    field: str,
    shown: str,
) -> None:
    run = _reference(tmp_path, **fields)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool.pytest.ini_options]\naddopts = '-q'\n")
    for rule in ("lcb", "margin:5"):
        assert main(["floors", str(run), "--rule", rule, "--write", str(pyproject)]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""  # no entry printed, nothing written
        assert captured.err.startswith(
            f"error: {run / 'metrics_summary.json'}: task 'mmlu': field '{field}' is {shown}"
        )
        assert "Traceback" not in captured.err
        assert "give the floor itself (--llm-floor TASK=SCORE)" in captured.err
    assert "llm_floors" not in pyproject.read_text()


def test_reference_floor_refuses_a_nan_interval_with_the_file_task_and_field(
    tmp_path: Path,
) -> None:
    run = _reference(tmp_path, ci95=[math.nan, math.nan])
    with pytest.raises(LlmEvalError, match=r"task 'mmlu': field 'ci95' is \[nan, nan\], not a"):
        ReferenceRun(run).floor("mmlu", FloorRule("lcb"))


@pytest.mark.parametrize("command", ["plan", "simulate"])
@pytest.mark.parametrize(
    ("option", "value"),
    [("--power", "nan"), ("--power", "2"), ("--power", "0"), ("--alpha", "3"), ("--alpha", "x")],
)
def test_plan_and_simulate_name_a_probability_out_of_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, option: str, value: str
) -> None:
    run = _reference(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main([command, str(run), option, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: expected a probability between 0 and 1, got {value!r}" in err, err


@pytest.mark.parametrize("option", ["--draws", "--items"])
def test_simulate_names_a_count_below_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    run = _reference(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["simulate", str(run), option, "0"])
    assert exc.value.code == 2
    assert f"argument {option}: expected a whole number >= 1, got '0'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"power": math.nan}, "power must be a probability between 0 and 1, got nan"),
        ({"alpha": 1.5}, "alpha must be a probability between 0 and 1, got 1.5"),
        ({"drops": ()}, "drops must be proportions between 0 and 1, got ()"),
    ],
)
def test_plan_settings_refuse_values_out_of_range(
    settings: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        PlanSettings(**settings)  # type: ignore[arg-type]
