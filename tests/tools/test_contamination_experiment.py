"""The planted-contamination experiment, end to end on the tiny random model (the real one,
SmolLM2-135M on MMLU, is the slow-marked test and ``docs/contamination-experiment/``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.contamination_experiment import Setup, main, run

pytest.importorskip("torch")

QUIZ_SPEC = """\
task: quiz
dataset: {path: quiz.jsonl}
prompt:
  template: "{{ question }}\\nA. {{ choices[0] }}\\nB. {{ choices[1] }}\\n\\
    C. {{ choices[2] }}\\nAnswer:"
  target: "{{ 'ABC'[answer] }}"
mode: multiple_choice
multiple_choice:
  choices: ["A", "B", "C"]
  gold: "{{ answer }}"
contamination: {options: choices, gold: answer}
"""


def test_experiment_runs_end_to_end_and_memorises(tmp_path: Path, tiny_model_dir: Path) -> None:
    rows = [
        {
            "question": f"what is item {i}?",
            "choices": [f"red {i}", f"blue {i}", f"green {i}"],
            "answer": i % 3,
        }
        for i in range(8)
    ]
    (tmp_path / "quiz.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "quiz.yaml").write_text(QUIZ_SPEC)
    setup = Setup(
        task=tmp_path / "quiz.yaml",
        data_dirs=(tmp_path,),
        model=str(tiny_model_dir),
        items=8,
        epochs=8,
        lr=3e-3,
        seed=3,
        order_k=2,
    )
    results = run(setup, tmp_path / "out", batch_size=4, draws=20)
    training = results["training"]["contaminated"]
    assert training["planted"] == 4
    losses = training["epoch_losses"]
    assert losses[-1] < losses[0] / 2  # it did learn the planted items
    models = results["planted"]["contaminated"]["models"]
    assert set(models) == {"original", "contaminated"}
    for model in models.values():
        assert set(model["halves"]) == {"planted", "clean"}
        assert {"canonical_order", "membership_min_k_plus_plus_rewrites"} <= set(
            model["halves"]["planted"]
        )
    # Trained on them, the contaminated model finds the planted texts more likely, and
    # more so than the original model does (the calibrated score).
    aurocs = models["contaminated"]["aurocs"]
    assert aurocs["mean_logprob"] == 1.0
    assert aurocs["mean_logprob_vs_reference"] == 1.0
    assert aurocs["min_k"] >= 0.75
    # Every clean pool has its false-alarm rates, the contaminated model's with the
    # reference-paired verdicts.
    pools = results["pools"]
    assert set(pools) == {"untouched-quiz", "contaminated-quiz"}
    assert "canonical_order_vs_reference" in pools["contaminated-quiz"]["fpr"]
    text = (tmp_path / "out" / "results.md").read_text()
    assert "| min_k_plus_plus |" in text and "False alarms on clean items" in text


@pytest.mark.slow
def test_planted_contamination_on_the_default_model(
    tmp_path: Path, shared_benchmarks: Path
) -> None:
    assert (
        main(
            [
                "run",
                "--items=20",
                "--epochs=2",
                f"--data-dir={shared_benchmarks}",
                f"--out={tmp_path}",
                f"--task={Path(__file__).resolve().parents[2] / 'benchmarks' / 'mmlu.yaml'}",
            ]
        )
        == 0
    )
    results = json.loads((tmp_path / "results.json").read_text())
    aurocs = results["planted"]["contaminated"]["models"]["contaminated"]["aurocs"]
    assert aurocs["mean_logprob"] > 0.7
