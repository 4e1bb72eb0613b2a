"""The vllm test env's one in-process engine (``tox -e vllm``): vLLM's real engine on the
default model, started once for the session and shared by both modules, beside the hf
backend on the same model. Every other engine of the env starts in a test that needs one
of its own (a model with another generation config, the plugin's run)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from engine_runs import SESSION_SHARE


@pytest.fixture(scope="session")
def engines(default_model: str) -> Iterator[tuple[Any, Any]]:
    """The default model on both in-process backends: vLLM's engine (at
    :data:`~engine_runs.SESSION_SHARE` of the memory) and the hf backend."""
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
