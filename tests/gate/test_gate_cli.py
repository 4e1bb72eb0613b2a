"""The floors, plan and simulate commands of ``python -m pytest_llmeval.record``, and a planted
drop in a copied run record caught by the baseline gate."""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest

from pytest_llmeval.gate._simulate import plant, simulate
from pytest_llmeval.record.__main__ import main
from pytest_llmeval.scorer import accuracy


def write_run(path: Path, task: str, correct: list[bool], seconds: float = 0.5) -> Path:
    """A run directory as the plugin writes it (the fields the tools read)."""
    (path / "tasks").mkdir(parents=True)
    with (path / "tasks" / f"{task}_output.jsonl").open("w") as fh:
        for i, c in enumerate(correct):
            record = {
                "task": task,
                "item_id": f"{task}-{i:04d}",
                "correct": c,
                "score": 1.0 if c else 0.0,
                "seconds": seconds,
            }
            fh.write(json.dumps(record) + "\n")
    est = accuracy(correct)
    summary = {
        task: {
            "n": len(correct),
            "total_items": 10 * len(correct),
            "metric": "acc",
            "score": est.value,
            "ci95": [est.ci_low, est.ci_high],
            "floor": None,
            "verdict": "no floor",
        }
    }
    (path / "metrics_summary.json").write_text(json.dumps(summary))
    (path / "eval_config.json").write_text(
        json.dumps({"model": "m", "model_sha256": "ab" * 32, "tasks": {task: {}}})
    )
    return path


def _pool(n: int, p: float, seed: int = 1) -> list[bool]:
    rng = random.Random(seed)
    return [rng.random() < p for _ in range(n)]


def test_floors_command_prints_and_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "ref", "mmlu", _pool(400, 0.25))
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool.pytest.ini_options]\naddopts = '-q'\n")
    assert main(["floors", str(run), "--write", str(pyproject)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("mmlu=0.")
    assert "run ref (model m, sha256 abababababab), 400 items, acc" in out
    assert "rule lcb95" in out and "wrote 1 floor(s)" in out
    assert "mmlu=0." in pyproject.read_text()
    assert main(["floors", str(run), "--tasks", "gsm8k"]) == 2
    assert "no task 'gsm8k'" in capsys.readouterr().err
    assert main(["floors", str(tmp_path)]) == 2
    assert "metrics_summary.json: not found" in capsys.readouterr().err


def test_plan_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path / "ref", "mmlu", _pool(400, 0.25), seconds=2.0)
    out_json = tmp_path / "plan.json"
    assert main(["plan", str(run), "--churn", "0.1", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "item budget: 80% power; floor gate: rule lcb95, policy point" in out
    assert "mmlu: churn 10.0% (assumed: --churn)" in out
    plan = json.loads(out_json.read_text())
    needs = plan["tasks"][0]["needs"]
    floor5 = next(n for n in needs if n["gate"] == "floor" and n["drop"] == 0.05)
    pure5 = next(n for n in needs if n["gate"] == "paired" and n["assumption"] == "pure drop")
    churn2 = [n for n in needs if n["gate"] == "paired" and n.get("discordance") == 0.1]
    assert pure5["items"] < floor5["items"]  # the paired gate needs fewer items
    assert all(n["items"] > pure5["items"] for n in churn2)  # churn costs items
    assert floor5["seconds"] == pytest.approx(2.0 * floor5["items"])
    # what the floor gate catches at the run's own size comes with its false alarms
    assert 0.0 < plan["tasks"][0]["false_alarm_at_n"] < 0.05
    assert re.search(
        r"mmlu: at its 400 items a floor gate catches drops of [\d.]+ points or more "
        r"and fails an unchanged model in [\d.]+% of samples",
        out,
    )
    # strict with lcb floors: no count, and the note says how often it fails a clean run
    assert main(["plan", str(run), "--policy", "strict", "--json", str(out_json)]) == 0
    strict = capsys.readouterr().out
    assert "use margin floors with it" in strict
    assert 0.4 < json.loads(out_json.read_text())["tasks"][0]["false_alarm_at_n"] < 0.6
    with pytest.raises(SystemExit) as exc:  # argparse: a bad value
        main(["plan", str(run), "--drops", "0"])
    assert exc.value.code == 2
    assert "drops must be in (0, 100) points" in capsys.readouterr().err


def test_simulated_gates_catch_planted_drops_at_the_promised_rate() -> None:
    pool = _pool(600, 0.25)
    # the planned sizes for a 5-point drop at 80% power
    for gate, n in (("paired", 157), ("floor-fresh", 535)):
        sim = simulate(pool, gate, n, 0.05, draws=400, seed=3)
        assert sim.promised_power is not None and sim.promised_power >= 0.8
        assert abs(sim.detected - sim.promised_power) < 4 * sim.stderr + 0.01
        assert sim.false_alarms <= 0.07
    same = simulate(pool, "floor-same", 535, 0.05, draws=200, seed=3)
    assert same.detected >= 0.8  # same items, pure drop: at least the fresh-items rate
    assert same.false_alarms == 0.0  # an unchanged model on the same items never fails


def test_plant_flips_the_requested_shares() -> None:
    rng = random.Random(0)
    base = _pool(20000, 0.3)
    cur = plant(base, 0.05, 0.1, 0.3, rng)
    regress = sum(b and not c for b, c in zip(base, cur, strict=True)) / len(base)
    improve = sum(c and not b for b, c in zip(base, cur, strict=True)) / len(base)
    assert regress == pytest.approx(0.05 + 0.05, abs=0.01)
    assert improve == pytest.approx(0.05, abs=0.01)
    with pytest.raises(ValueError, match="cannot lose"):
        plant(base, 0.5, 0.0, 0.3, rng)


def test_a_drop_planted_in_a_copied_run_record_fails_the_baseline_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "ref", "mmlu", _pool(300, 0.3))
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    lines = (copy / "tasks" / "mmlu_output.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    right = [r for r in records if r["correct"]]
    for record in right[: len(right) // 5]:  # a fifth of the right items turn wrong: -6 points
        record["correct"], record["score"] = False, 0.0
    (copy / "tasks" / "mmlu_output.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records)
    )
    assert main(["compare", str(copy), str(run), "--fail", "sig"]) == 1
    out = capsys.readouterr().out
    assert "GATE (sig): mmlu dropped" in out
    assert main(["compare", str(run), str(run), "--fail", "sig"]) == 0


def test_simulate_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path / "ref", "mmlu", _pool(300, 0.3))
    out_json = tmp_path / "sim.json"
    args = ["simulate", str(run), "--drops", "10", "--draws", "50", "--json", str(out_json)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "planted drops in copies of ref's item records; 50 draws" in out
    rows = json.loads(out_json.read_text())
    assert {r["gate"] for r in rows} == {"paired", "floor (fresh items)", "floor (same items)"}
    # --items: every gate at one size, with and without the churn
    args = ["simulate", str(run), "--drops", "10", "--draws", "50", "--items", "120"]
    assert main([*args, "--churn", "0.04", "--json", str(out_json)]) == 0
    capsys.readouterr()
    rows = json.loads(out_json.read_text())
    assert {r["n"] for r in rows} == {120}
    assert sorted((r["gate"], r["churn"]) for r in rows) == [
        ("floor (fresh items)", 0.0),
        ("floor (same items)", 0.0),
        ("floor (same items)", 0.04),
        ("paired", 0.0),
        ("paired", 0.04),
    ]
