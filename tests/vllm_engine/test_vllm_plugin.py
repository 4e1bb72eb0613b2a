"""The vllm backend through the pytest plugin, as a user runs it (vLLM's real engine, its
CPU build here: ``tox -e vllm``), compared item by item with the session's engine in this
process (tests/vllm_engine/conftest.py) on the same items:

- one run as a user scales it: MMLU and GSM8K under the chat template (the default) with
  data parallel 2, two engines as Ray actors, give one engine's prompts, answers and
  outputs (log-likelihoods to float32 precision: a replica batches other requests, so its
  kernels may sum in another order); the same run probes a task against
  ``probe.reference_model``, whose own two replicas start beside the model's on the same
  cores, for a verdict against the reference;
- bad engine settings named before any engine starts: in process, and one in a pytest
  subprocess for the wiring of a usage error.

The plugin run is a pytest subprocess started in the background as the session begins
(``engine_runs.start_plugin_run``, fixture ``plugin_run``): its engines are given a share
of the memory that fits beside the session's (``engine_runs.SMALL_SHARE``), and start
without torch.compile (``engine_runs.EAGER``); the session's engine, compiled as vLLM starts
it by default, is what they are compared with. The chat template off through the plugin is
the hf backend's (tests/plugin); on this backend the prompts are ours either way, and
test_vllm_backend.py compares both settings with the hf backend. How the default share is
divided between the model's engines and the reference's is tests/model/test_vllm_settings.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from engine_runs import LIMIT, SMALL_SHARE, BackgroundRun, first_results

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


def _in_process(backend: Any, data: Path, chat: str) -> dict[str, dict[str, Any]]:
    """The plugin run's items (MMLU and GSM8K, the first :data:`LIMIT` of each) on the
    session's engine, as records (those test_vllm_backend.py computed, where it ran)."""
    return {
        r.item_id: r.to_dict()
        for task in ("mmlu", "gsm8k")
        for r in first_results(task, chat, backend, data, LIMIT)
    }


def _same_items(ran: dict[str, dict[str, Any]], here: dict[str, dict[str, Any]]) -> None:
    assert sorted(ran) == sorted(here) and len(ran) == 2 * LIMIT
    for item_id, a in here.items():
        b = ran[item_id]
        for field in ("prompt", "extracted", "correct", "pred", "output", "n_output_tokens"):
            assert a.get(field) == b.get(field), (item_id, field)
        assert b["error"] is None, (item_id, b["error"])
        # Bit-equal in most runs; one CI run of 2026-12-05 differed by 7.5e-6 on one choice
        # (a replica's batches hold other requests than the single engine's, and CPU
        # kernels need not sum in the same order for another batch shape). 1e-4 is the
        # float32 bound the hf-vs-vllm parity holds to.
        assert len(a["logprobs"]) == len(b["logprobs"]), item_id
        assert b["logprobs"] == pytest.approx(a["logprobs"], abs=1e-4, rel=0), item_id
    assert any(r["logprobs"] for r in ran.values())  # the multiple-choice items compared


def test_data_parallel_2_and_a_reference_model_beside_it_give_one_engines_records(
    plugin_run: BackgroundRun, shared_benchmarks: Path, engines: tuple[Any, Any]
) -> None:
    """MMLU and GSM8K with --llm-set vllm.data_parallel=2 give the session engine's records
    under the chat template; --llm-set probe.reference_model starts the reference's engines
    beside the model's for the canonical-order verdict against it."""
    ret, out = plugin_run.result()
    # Membership probes need the model's whole next-token distribution (Min-K%++), which
    # vLLM does not return: that probe fails with one line naming the hf backend.
    assert ret == pytest.ExitCode.TESTS_FAILED, out[-3000:]
    # (node ids relative to the common folder of the spec files and this run's folder)
    pytest.LineMatcher(out.splitlines()).fnmatch_lines(
        [
            "PASSED *::test_probe_against_the_reference[[]canonical_order[]]",
            "FAILED *::test_probe_against_the_reference[[]membership[]]*",
        ]
    )
    assert "Run membership probes with --llm-backend=hf" in out
    ran = {k: r for k, r in _records(plugin_run.runs).items() if r["task"] != "quiz"}
    _same_items(ran, _in_process(engines[0], shared_benchmarks, "on"))
    assert all(r["prompt"].startswith("<|im_start|>") for r in ran.values())  # the default
    (run,) = [p for p in plugin_run.runs.iterdir() if p.is_dir()]
    engine = json.loads((run / "eval_config.json").read_text())["framework"]["engine"]
    assert (engine["data_parallel"], engine["memory_share"]) == (2, SMALL_SHARE)
    order = json.loads((run / "contamination" / "quiz-canonical_order.json").read_text())
    assert len(order["reference"]["sha256"]) == 64 and order["reference_report"]["n"] == 4


BAD_SETTINGS = [
    (
        ['--llm-set=vllm.args={"enforce_eagr": true}'],
        "unknown vLLM engine argument(s): enforce_eagr (did you mean enforce_eager?)",
    ),
    (['--llm-set=vllm.args={"dtype": "half"}'], "dtype is set by --llm-dtype"),
    (["--llm-set=vllm.tensor_parallel=64"], "needs 64 cores, and this machine has"),
    (["--llm-set=vllm.memory_share=1.5"], "vllm.memory_share (from --llm-set): expected a number"),
    (["--llm-set=vllm.memory_share=0"], "vllm.memory_share (from --llm-set): expected a number"),
    (["--llm-set=vllm.args=enforce_eager"], "vllm.args (from --llm-set): expected a JSON object"),
]


def _bad_settings_run(
    pytester: pytest.Pytester, data: Path, args: list[str], subprocess: bool
) -> pytest.RunResult:
    run = pytester.runpytest_subprocess if subprocess else pytester.runpytest
    result = run(
        str(REPO / "benchmarks" / "mmlu.yaml"),
        "--llm-backend=vllm",
        "--llm-model=smollm2-135m",
        f"--llm-data-dir={data}",
        f"--llm-output={pytester.path / 'runs'}",
        *args,
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    return result


@pytest.mark.parametrize(("args", "message"), BAD_SETTINGS)
def test_bad_engine_settings_are_named_before_the_model_loads(
    pytester: pytest.Pytester, shared_benchmarks: Path, args: list[str], message: str
) -> None:
    """In process: vLLM is imported here already, and no engine starts."""
    result = _bad_settings_run(pytester, shared_benchmarks, args, subprocess=False)
    assert message in result.stderr.str()
    assert not (pytester.path / "runs").exists()  # nothing ran, nothing was written


def test_a_bad_engine_setting_ends_a_pytest_process_with_a_usage_error(
    pytester: pytest.Pytester, shared_benchmarks: Path
) -> None:
    """The same check as a user meets it: a pytest process that imports vLLM to check the
    settings, exits 4 and names the setting."""
    args, message = BAD_SETTINGS[0]
    result = _bad_settings_run(pytester, shared_benchmarks, args, subprocess=True)
    assert message in result.stderr.str()
    assert not (pytester.path / "runs").exists()
