"""python -m pytest_llmeval.record: diff and compare on run directories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_llmeval.record.__main__ import main


def _run(root: Path, name: str, outputs: dict[str, str], seconds: float) -> Path:
    run = root / name
    (run / "tasks").mkdir(parents=True)
    (run / "eval_config.json").write_text(json.dumps({"model": "m", "tasks": {"t": {}}}))
    lines = [
        {
            "item_id": i,
            "task": "t",
            "output": o,
            "correct": o == "1",
            "score": float(o == "1"),
            "seconds": seconds,
        }
        for i, o in outputs.items()
    ]
    (run / "tasks" / "t_output.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    score = sum(x["score"] for x in lines) / len(lines)
    (run / "metrics_summary.json").write_text(json.dumps({"t": {"score": score}}))
    return run


def test_diff_ignores_timing_and_names_differing_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _run(tmp_path, "a", {"t-0": "1", "t-1": "2"}, seconds=0.5)
    b = _run(tmp_path, "b", {"t-0": "1", "t-1": "2"}, seconds=9.0)
    assert main(["diff", str(a), str(b)]) == 0
    assert "identical apart from timing fields" in capsys.readouterr().out
    c = _run(tmp_path, "c", {"t-0": "1", "t-1": "1"}, seconds=0.5)
    assert main(["diff", str(a), str(c)]) == 1
    out = capsys.readouterr().out
    assert "t t-1: differs in correct, output, score" in out
    assert "t: score 0.5 != 1.0" in out


def test_compare_gate_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _run(tmp_path, "base", {f"t-{i}": "1" for i in range(20)}, seconds=0.1)
    worse = _run(tmp_path, "worse", {f"t-{i}": "1" if i < 5 else "0" for i in range(20)}, 0.1)
    assert main(["compare", str(worse), str(base)]) == 0
    assert main(["compare", str(worse), str(base), "--fail", "drop:10:sig"]) == 1
    assert "GATE (drop:10:sig): t dropped" in capsys.readouterr().out
    assert main(["compare", str(worse), str(tmp_path / "missing")]) == 2
    assert main(["compare", str(worse), str(base), "--fail", "bogus"]) == 2


def test_diff_tolerates_float_noise_but_not_outputs_or_statuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _run(tmp_path, "a", {"t-0": "1", "t-1": "2"}, seconds=0.5)
    b = _run(tmp_path, "b", {"t-0": "1", "t-1": "2"}, seconds=0.5)
    for run, logprobs in ((a, [-1.0, -2.5]), (b, [-1.000004, -2.5])):
        path = run / "tasks" / "t_output.jsonl"
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        for line in lines:
            line["logprobs"] = logprobs
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert main(["diff", str(a), str(b)]) == 1
    assert "t t-0: differs in logprobs" in capsys.readouterr().out
    assert main(["diff", str(a), str(b), "--tol", "1e-5"]) == 0
    out = capsys.readouterr().out
    assert "largest float difference 4e-06" in out
    assert "identical apart from timing fields and floats within 1e-05" in out
    # the same scores with a different status (another floor) are a difference; B in this
    # version's layout, A in the first one (a run from before the status had one spelling)
    entry = {"score": 0.5, "floor": 0.6, "status": "fail", "seconds": 3.0}
    (b / "metrics_summary.json").write_text(json.dumps({"schema": 2, "tasks": {"t": entry}}))
    (a / "metrics_summary.json").write_text(
        json.dumps({"t": {"score": 0.5, "floor": 0.4, "verdict": "pass", "seconds": 1.0}})
    )
    assert main(["diff", str(a), str(b), "--tol", "1e-5"]) == 1
    out = capsys.readouterr().out
    assert "t: status pass != fail" in out
    assert "t: floor 0.4 != 0.6" in out
    assert "seconds" not in out  # a summary's duration is not compared
    # a task that only one run has is one line, not one per summary field
    (a / "metrics_summary.json").write_text(json.dumps({"t": {"score": 0.5}, "u": {"n": 0}}))
    (b / "metrics_summary.json").write_text(json.dumps({"t": {"score": 0.5}}))
    assert main(["diff", str(a), str(b), "--tol", "1e-5"]) == 1
    out = capsys.readouterr().out
    assert "u: task summary only in A" in out
    assert "u: n" not in out


def test_diff_ignores_timing_nested_in_details(tmp_path: Path) -> None:
    """A code task's sandbox result carries its own duration (``details.seconds``)."""
    runs = []
    for name, seconds in (("a", 0.07), ("b", 0.13)):
        run = _run(tmp_path, name, {"t-0": "1"}, seconds=0.5)
        path = run / "tasks" / "t_output.jsonl"
        line = json.loads(path.read_text())
        line["details"] = {"status": "failed", "reason": "AssertionError", "seconds": seconds}
        path.write_text(json.dumps(line) + "\n")
        runs.append(run)
    assert main(["diff", str(runs[0]), str(runs[1])]) == 0
    path = runs[1] / "tasks" / "t_output.jsonl"
    path.write_text(path.read_text().replace('"failed"', '"passed"'))
    assert main(["diff", str(runs[0]), str(runs[1])]) == 1
