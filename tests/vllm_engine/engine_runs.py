"""Shipped specs run in this process on a backend of the vllm test env (``tox -e vllm``)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_llmeval.dataset import first_n, load_items
from pytest_llmeval.eval import ChatSettings, ItemResult, TaskRunner
from pytest_llmeval.model._vllm import CPU_MEMORY_SHARE
from pytest_llmeval.task import load_task_spec

REPO = Path(__file__).resolve().parents[2]
#: The session engine's share of the machine's memory (tests/vllm_engine/conftest.py): half
#: the CPU build's default, so that the plugin's run (four engines, in a pytest subprocess:
#: test_vllm_plugin.PLUGIN_SHARE each) starts while it is alive; a 135M model needs a small
#: part of either.
SESSION_SHARE = CPU_MEMORY_SHARE / 2
#: The engine arguments of every other engine the tests start (a model with another
#: generation config, the plugin's runs): no torch.compile. An engine of the CPU build
#: started in 39 s so, against 173 s with vLLM's default compilation (measured on this
#: project's 2-core CI machine, one start each, while another job ran). The session's own
#: engine keeps vLLM's defaults: the backend's parity with the hf backend is checked on
#: the compiled engine users get, and the plugin's runs are compared with it.
EAGER = '{"enforce_eager": true}'
#: Each engine's share of the memory in the plugin run (four engines: two replicas of the
#: model, two of the reference) and of the engine the generation-config test starts, beside
#: the session's. On the CPU build the share holds the weights and the runtime too (about
#: 1.5 GiB here): at 0.06 of 23.5 GiB no room was left for the KV cache and the replicas did
#: not start; at 0.1 each has about 0.8 GiB, room for several sequences of the whole
#: 8192-token window.
SMALL_SHARE = 0.1
#: Items of each task in the plugin run: those test_vllm_backend.py compares with the hf
#: backend (its ITEMS), so that the session engine's records are computed once.
LIMIT = 2


#: Results of :func:`run_task` in this session, by (task, chat, backend, n).
_DONE: dict[tuple[str, str, int, int], list[ItemResult]] = {}


def run_task(task: str, chat: str, backend: Any, data: Path, n: int) -> list[ItemResult]:
    """The first ``n`` items of a shipped spec on ``backend``, with the chat template
    ``chat`` (``on``/``off``) as if given on the command line; computed once a session."""
    key = (task, chat, id(backend), n)
    if key not in _DONE:
        spec = load_task_spec(REPO / "benchmarks" / f"{task}.yaml")
        runner = TaskRunner(spec, [data], ChatSettings(mode=chat, forced=True))
        _DONE[key] = runner.run(first_n(load_items(spec, runner.data_dirs), n), backend)
    return _DONE[key]


def first_results(task: str, chat: str, backend: Any, data: Path, n: int) -> list[ItemResult]:
    """:func:`run_task`'s results for the first ``n`` items, read from a run of more items
    in this session where one holds them all (the first ``n`` of a task are among its first
    ``m > n``: :func:`first_n` takes subsets round-robin), else computed."""
    spec = load_task_spec(REPO / "benchmarks" / f"{task}.yaml")
    ids = [item.id for item in first_n(load_items(spec, [data]), n)]
    for (t, c, b, m), results in _DONE.items():
        by_id = {r.item_id: r for r in results}
        if (t, c, b) == (task, chat, id(backend)) and m >= n and all(i in by_id for i in ids):
            return [by_id[i] for i in ids]
    return run_task(task, chat, backend, data, n)


# ------------------------------------------------------------ the plugin's run, in the background

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


@dataclass
class BackgroundRun:
    """A pytest run of the plugin in a subprocess, started when the session starts and read
    by the test that checks it: its engines start and compute while this process starts
    its own and runs the other tests (the env's processes wait on engines and Ray more
    than they compute: a run one after the other left a core idle most of the time)."""

    process: subprocess.Popen[bytes]
    folder: Path
    log: Path
    runs: Path

    def result(self, timeout: float = 900) -> tuple[int, str]:
        """Its exit status and output, once it has ended."""
        ret = self.process.wait(timeout=timeout)
        return ret, self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def start_plugin_run(folder: Path, data: Path, model: str, prober: str) -> BackgroundRun:
    """``pytest`` on MMLU and GSM8K (the first :data:`LIMIT` items of each) with the vllm
    backend, data parallel 2, and the probes of ``test_quiz_probes.py`` on a small quiz
    against ``probe.reference_model`` (the model itself), in ``folder``. ``prober``: the
    quiz's spec (tiny_projects.PROBED_SPEC)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        {"question": f"Which is number {i}?", "choices": [f"{i}", f"{i + 1}", f"{i + 2}"]}
        for i in range(4)
    ]
    (folder / "quiz.jsonl").write_text("".join(json.dumps({**r, "answer": 0}) + "\n" for r in rows))
    (folder / "quiz.yaml").write_text(prober)
    (folder / "test_quiz_probes.py").write_text(QUIZ_PROBES)
    runs = folder / "runs"
    args = [
        str(REPO / "benchmarks" / "mmlu.yaml"),
        str(REPO / "benchmarks" / "gsm8k.yaml"),
        "quiz.yaml",
        "test_quiz_probes.py",
        "--llm-backend=vllm",
        f"--llm-model={model}",
        f"--llm-data-dir={data}",
        f"--llm-data-dir={folder}",
        f"--llm-output={runs}",
        f"--llm-limit={LIMIT}",
        f"--llm-set=vllm.args={EAGER}",
        "--llm-set=vllm.data_parallel=2",
        f"--llm-set=vllm.memory_share={SMALL_SHARE}",
        f"--llm-set=probe.reference_model={model}",
        "--llm-set=probe.items=4",
        "-m",
        "regression or contamination",
        "-rA",
        "-p",
        "no:cacheprovider",
    ]
    log = folder / "output.txt"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "pytest", *args],
            cwd=folder,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return BackgroundRun(process, folder, log, runs)
