"""Shipped specs run in this process on a backend of the vllm test env (``tox -e vllm``)."""

from __future__ import annotations

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
