"""The narrow interface between evaluation and a model backend.

A backend answers two kinds of request, in batches it chooses itself:
log-likelihood of a continuation given a context (multiple choice), and greedy
generation until a stop sequence or a token budget (generative tasks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class LoglikelihoodRequest:
    context: str
    continuation: str


@dataclass(frozen=True)
class LoglikelihoodResult:
    """Sum of log-probabilities of the continuation tokens, and whether greedy decoding
    would have produced exactly those tokens."""

    logprob: float
    is_greedy: bool
    n_tokens: int


@dataclass(frozen=True)
class GenerateRequest:
    context: str
    max_new_tokens: int
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class GenerateResult:
    """The generated text, cut before the first stop sequence."""

    text: str
    n_tokens: int
    finish_reason: str  # "stop", "length" or "eos"


@runtime_checkable
class Backend(Protocol):
    """What evaluation needs from a model. Implementations batch internally."""

    @property
    def batch_size(self) -> int: ...

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest]
    ) -> list[LoglikelihoodResult]: ...

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]: ...

    def info(self) -> Mapping[str, Any]:
        """What identifies the model and its settings, for run records."""
        ...


@dataclass(frozen=True)
class ModelSettings:
    """How to load a model: resolved from pytest options or given in Python."""

    model: str
    device: str = "auto"  # auto | cuda | cpu
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16
    batch_size: int = 8
    seed: int = 1234
    max_length: int | None = None
