"""The vllm test env's one in-process engine (``tox -e vllm``): vLLM's real engine on the
default model, started once for the session and shared by both modules, beside the hf
backend on the same model. The plugin's run (engine_runs.start_plugin_run) starts in the
background just before it, so that its engines start while this process starts its own
and runs the other tests; test_vllm_plugin.py reads it. Every other engine of the env
starts in a test that needs one of its own (a model with another generation config)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_runs import SESSION_SHARE, BackgroundRun, start_plugin_run
from tiny_projects import PROBED_SPEC


@pytest.fixture(scope="session")
def plugin_run(
    tmp_path_factory: pytest.TempPathFactory, shared_benchmarks: Path, default_model: str
) -> Iterator[BackgroundRun]:
    """The plugin's run, started once (stopped at the end of the session if no test read
    it to its end)."""
    pytest.importorskip("vllm")
    run = start_plugin_run(
        tmp_path_factory.mktemp("plugin-run"), shared_benchmarks, default_model, PROBED_SPEC
    )
    try:
        yield run
    finally:
        run.stop()


@pytest.fixture(scope="session")
def engines(default_model: str, plugin_run: BackgroundRun) -> Iterator[tuple[Any, Any]]:
    """The default model on both in-process backends: vLLM's engine (at
    :data:`~engine_runs.SESSION_SHARE` of the memory) and the hf backend. The plugin's run
    starts first (``plugin_run``), to compute beside them."""
    pytest.importorskip("vllm")
    from pytest_llmeval.model import ModelSettings, load_backend

    vllm_backend: Any = load_backend(
        ModelSettings(model=default_model, backend="vllm", memory_share=SESSION_SHARE)
    )
    hf_backend: Any = load_backend(ModelSettings(model=default_model))
    try:
        yield vllm_backend, hf_backend
    finally:
        vllm_backend.close()
