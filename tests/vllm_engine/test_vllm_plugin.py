"""The vllm backend through the pytest plugin, as a user runs it (vLLM's real engine, its
CPU build here: ``tox -e vllm``): the acceptance command on MMLU and GSM8K with the chat
template on (the default) and off, data parallel 2 (two engines as Ray actors) giving data
parallel 1's prompts, answers and outputs item by item (log-likelihoods to float32
precision: a replica batches other requests, so its kernels may sum in another order), and
bad engine settings named before any engine starts.

A module of its own: each run starts its engines in a pytest subprocess, and the engines
of ``test_vllm_backend.py``'s module fixture are gone by then (an engine of the CPU build
holds several GB).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tiny_projects import PROBED_SPEC

pytest.importorskip("vllm")

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[2]


def _records(runs: Path) -> dict[str, dict[str, Any]]:
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    out = {}
    for path in sorted((run / "tasks").glob("*_output.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            out[record["item_id"]] = record
    return out


def _run_plugin(pytester: pytest.Pytester, data: Path, model: str, *args: str) -> Path:
    runs = pytester.path / f"runs{len(list(pytester.path.glob('runs*')))}"
    result = pytester.runpytest_subprocess(
        str(REPO / "benchmarks" / "mmlu.yaml"),
        str(REPO / "benchmarks" / "gsm8k.yaml"),
        "--llm-backend=vllm",
        f"--llm-model={model}",
        f"--llm-data-dir={data}",
        f"--llm-output={runs}",
        "--llm-limit=4",
        "-p",
        "no:cacheprovider",
        *args,
        timeout=900,
    )
    assert result.ret == 0, result.stdout.str()[-3000:]
    return runs


def test_data_parallel_2_gives_the_records_of_data_parallel_1(
    pytester: pytest.Pytester, shared_benchmarks: Path, default_model: str
) -> None:
    one = _records(_run_plugin(pytester, shared_benchmarks, default_model))
    two = _records(_run_plugin(pytester, shared_benchmarks, default_model, "--llm-data-parallel=2"))
    assert sorted(one) == sorted(two) and len(one) == 8
    for item_id, a in one.items():
        b = two[item_id]
        for field in ("prompt", "extracted", "correct", "pred", "output", "n_output_tokens"):
            assert a.get(field) == b.get(field), (item_id, field)
        # Bit-equal in most runs; one CI run of 2026-12-05 differed by 7.5e-6 on one choice
        # (a replica's batches hold other requests than the single engine's, and CPU
        # kernels need not sum in the same order for another batch shape). 1e-4 is the
        # float32 bound the hf-vs-vllm parity holds to.
        assert len(a["logprobs"]) == len(b["logprobs"]), item_id
        assert b["logprobs"] == pytest.approx(a["logprobs"], abs=1e-4, rel=0), item_id
    assert any(r["logprobs"] for r in one.values())  # the multiple-choice items compared
    assert a["prompt"].startswith("<|im_start|>")  # the chat template by default


def test_the_chat_template_off_runs_through_the_plugin(
    pytester: pytest.Pytester, shared_benchmarks: Path, default_model: str
) -> None:
    records = _records(
        _run_plugin(pytester, shared_benchmarks, default_model, "--llm-chat-template=off")
    )
    assert len(records) == 8
    assert not any(r["prompt"].startswith("<|im_start|>") for r in records.values())
    assert all(r["error"] is None for r in records.values())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ['--llm-vllm-args={"enforce_eagr": true}'],
            "unknown vLLM engine argument(s): enforce_eagr (did you mean enforce_eager?)",
        ),
        (['--llm-vllm-args={"dtype": "half"}'], "dtype is set by --llm-dtype"),
        (["--llm-tensor-parallel=64"], "needs 64 cores, and this machine has"),
        (["--llm-memory-share=1.5"], "expected a share of the device's memory in (0, 1]"),
        (["--llm-memory-share=0"], "expected a share of the device's memory in (0, 1]"),
        (["--llm-vllm-args=enforce_eager"], "not JSON"),
    ],
)
def test_bad_engine_settings_are_named_before_the_model_loads(
    pytester: pytest.Pytester, shared_benchmarks: Path, args: list[str], message: str
) -> None:
    result = pytester.runpytest_subprocess(
        str(REPO / "benchmarks" / "mmlu.yaml"),
        "--llm-backend=vllm",
        "--llm-model=smollm2-135m",
        f"--llm-data-dir={shared_benchmarks}",
        f"--llm-output={pytester.path / 'runs'}",
        *args,
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    assert not (pytester.path / "runs").exists()  # nothing ran, nothing was written


QUIZ_PROBES = """\
import pytest

pytestmark = pytest.mark.contamination


@pytest.mark.parametrize("probe", ["canonical_order", "membership"])
def test_probe_against_the_reference(llm_probe, probe):
    outcome = llm_probe.run("quiz", probe)
    # The reference is the model itself: nothing can differ, no verdict.
    assert outcome.verdict is not None and not outcome.verdict.fired
    assert outcome.verdict.null.startswith("reference model")
    llm_probe.check(outcome)
"""


def test_a_reference_model_runs_its_own_engine_beside_the_models(
    pytester: pytest.Pytester, default_model: str
) -> None:
    """--llm-reference-model on the vllm backend: a second engine on the same devices,
    each given half of the default memory share (two engines at vLLM's default of 0.92 of
    a GPU each cannot both start), and the canonical-order verdict against it."""
    rows = [
        {"question": f"Which is number {i}?", "choices": [f"{i}", f"{i + 1}", f"{i + 2}"]}
        for i in range(4)
    ]
    (pytester.path / "quiz.jsonl").write_text(
        "".join(json.dumps({**r, "answer": 0}) + "\n" for r in rows)
    )
    (pytester.path / "quiz.yaml").write_text(PROBED_SPEC)
    (pytester.path / "test_quiz_probes.py").write_text(QUIZ_PROBES)
    runs = pytester.path / "runs"
    result = pytester.runpytest_subprocess(
        "--llm-backend=vllm",
        f"--llm-model={default_model}",
        f"--llm-reference-model={default_model}",
        "--llm-data-dir=.",
        f"--llm-output={runs}",
        "--llm-probe-items=4",
        "-m",
        "contamination",
        "-p",
        "no:cacheprovider",
        timeout=900,
    )
    # Membership probes need the model's whole next-token distribution (Min-K%++), which
    # vLLM does not return: that probe fails with one line naming the hf backend.
    result.assert_outcomes(passed=1, failed=1, deselected=4)
    assert "Run membership probes with --llm-backend=hf" in result.stdout.str()
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    engine = json.loads((run / "eval_config.json").read_text())["framework"]["engine"]
    assert engine["memory_share"] == pytest.approx(0.15)
    assert "divided between 2 engines" in engine["memory_share_source"]
    order = json.loads((run / "contamination" / "quiz-canonical_order.json").read_text())
    assert len(order["reference"]["sha256"]) == 64 and order["reference_report"]["n"] == 4
