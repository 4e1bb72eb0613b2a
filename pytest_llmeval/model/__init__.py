"""Model backends behind one narrow interface (torch is only imported by ``load_backend``)."""

from __future__ import annotations

from pytest_llmeval._digest import cache_dir
from pytest_llmeval.model._greedy import GreedyRule
from pytest_llmeval.model._progress import ProgressCallback, progress_to, report_progress
from pytest_llmeval.model._resolve import (
    EMBEDDED,
    device_problem,
    gguf_problem,
    is_gguf_path,
    lfs_pointer_problem,
    resolve_model_path,
)
from pytest_llmeval.model._tokens import read_template_file
from pytest_llmeval.model._types import (
    BACKENDS,
    BOS_POLICIES,
    GENERATION_CONFIG_RULES,
    OVERFLOW_POLICIES,
    Backend,
    ChatTemplate,
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    ModelSettings,
    Overflow,
    SettingsError,
    bos_added,
    cut_at_stop,
    stop_hit,
)
from pytest_llmeval.model._vllm import settings_problem as vllm_settings_problem


def load_backend(settings: ModelSettings) -> Backend:
    """The backend ``settings.backend`` names: ``hf`` loads the model into this process
    (torch and transformers are imported here only), ``vllm`` starts vLLM's engine in it,
    ``openai`` connects to a server."""
    if settings.backend == "openai":
        from pytest_llmeval.model._openai import OpenAIBackend

        return OpenAIBackend(settings)
    if settings.backend == "vllm":
        from pytest_llmeval.model._vllm import VLLMBackend

        return VLLMBackend(settings)
    from pytest_llmeval.model._hf import HFBackend

    return HFBackend(settings)


__all__ = [
    "BACKENDS",
    "BOS_POLICIES",
    "EMBEDDED",
    "GENERATION_CONFIG_RULES",
    "OVERFLOW_POLICIES",
    "Backend",
    "ChatTemplate",
    "GenerateRequest",
    "GenerateResult",
    "GreedyRule",
    "LoglikelihoodRequest",
    "LoglikelihoodResult",
    "ModelSettings",
    "Overflow",
    "ProgressCallback",
    "SettingsError",
    "bos_added",
    "cache_dir",
    "cut_at_stop",
    "device_problem",
    "gguf_problem",
    "is_gguf_path",
    "lfs_pointer_problem",
    "load_backend",
    "progress_to",
    "read_template_file",
    "report_progress",
    "resolve_model_path",
    "stop_hit",
    "vllm_settings_problem",
]
