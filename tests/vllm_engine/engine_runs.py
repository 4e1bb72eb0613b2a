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
#: the CPU build's default, so that the plugin's runs (two engines each, in a pytest
#: subprocess) start while it is alive; a 135M model needs a small part of either.
SESSION_SHARE = CPU_MEMORY_SHARE / 2


def run_task(task: str, chat: str, backend: Any, data: Path, n: int) -> list[ItemResult]:
    """The first ``n`` items of a shipped spec on ``backend``, with the chat template
    ``chat`` (``on``/``off``) as if given on the command line."""
    spec = load_task_spec(REPO / "benchmarks" / f"{task}.yaml")
    runner = TaskRunner(spec, [data], ChatSettings(mode=chat, forced=True))
    items = first_n(load_items(spec, runner.data_dirs), n)
    return runner.run(items, backend)
