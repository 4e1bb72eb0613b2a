"""Model backends behind one narrow interface (torch is only imported by ``load_backend``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_llmeval.model._resolve import EMBEDDED, cache_dir, resolve_model_path
from pytest_llmeval.model._types import (
    OVERFLOW_POLICIES,
    Backend,
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    ModelSettings,
    Overflow,
)

if TYPE_CHECKING:
    pass


def load_backend(settings: ModelSettings) -> Backend:
    """Load the in-process Hugging Face backend for ``settings``."""
    from pytest_llmeval.model._hf import HFBackend

    return HFBackend(settings)


__all__ = [
    "EMBEDDED",
    "OVERFLOW_POLICIES",
    "Backend",
    "GenerateRequest",
    "GenerateResult",
    "LoglikelihoodRequest",
    "LoglikelihoodResult",
    "ModelSettings",
    "Overflow",
    "cache_dir",
    "load_backend",
    "resolve_model_path",
]
