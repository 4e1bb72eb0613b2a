"""The narrow interface between evaluation and a model backend.

A backend answers two kinds of request, in batches it chooses itself:
log-likelihood of a continuation given a context (multiple choice), and greedy
generation until a stop sequence or a token budget (generative tasks).

A generation whose prompt plus ``max_new_tokens`` does not fit the model's context window
is handled as the request's ``overflow`` says: ``skip`` (the default) does not run it and
answers ``finish_reason="context_overflow"`` with the prompt's token count, so that the
item is reported as not fitting instead of being scored on a silently cut prompt;
``truncate_middle`` (LongBench's protocol) keeps the first and last halves of the room
left, ``truncate_left`` (lm-evaluation-harness's) the end of the prompt. Either way the
result says how many prompt tokens were dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from pytest_llmeval.task._spec import OVERFLOW_POLICIES as OVERFLOW_NAMES


@dataclass(frozen=True)
class LoglikelihoodRequest:
    """Score ``continuation`` after ``context``. ``token_detail`` asks for per-token
    statistics (membership scores such as Min-K% and Min-K%++ need them).

    ``shared_prefix``: how many leading characters of ``context`` many requests share (a
    task's description and few-shot block). A hint only: a backend may compute that part
    once and reuse it; results do not depend on it.
    """

    context: str
    continuation: str
    token_detail: bool = False
    shared_prefix: int = 0


@dataclass(frozen=True)
class LoglikelihoodResult:
    """Sum of log-probabilities of the continuation tokens, and whether greedy decoding
    would have produced exactly those tokens.

    With ``token_detail``: ``token_logprobs`` per continuation token, and ``token_zscores``,
    each token's log-probability standardised by the mean and standard deviation of the
    log-probability under the model's own next-token distribution at that position
    (Min-K%++'s normalisation).
    """

    logprob: float
    is_greedy: bool
    n_tokens: int
    token_logprobs: tuple[float, ...] = ()
    token_zscores: tuple[float, ...] = ()


Overflow = Literal["skip", "truncate_middle", "truncate_left"]
# The spec validates generate.overflow against the same tuple (task._spec.OVERFLOW_POLICIES).
OVERFLOW_POLICIES: tuple[Overflow, ...] = OVERFLOW_NAMES  # type: ignore[assignment]


def move_trailing_space(context: str, continuation: str) -> tuple[str, str]:
    """lm-eval's convention for log-likelihood requests (both backends): the context's
    trailing whitespace belongs to the continuation."""
    n_spaces = len(context) - len(context.rstrip())
    if not n_spaces:
        return context, continuation
    return context[:-n_spaces], context[-n_spaces:] + continuation


def fit_tokens(tokens: list[int], budget: int, overflow: str) -> list[int]:
    """Cut a prompt to ``budget`` tokens (both backends): keep its end (``truncate_left``)
    or its first and last halves (``truncate_middle``, as LongBench does)."""
    if budget <= 0:
        return []
    if overflow == "truncate_left":
        return tokens[-budget:]
    head = budget // 2
    return tokens[:head] + tokens[len(tokens) - (budget - head) :]


@dataclass(frozen=True)
class GenerateRequest:
    context: str
    max_new_tokens: int
    stop: tuple[str, ...] = ()
    overflow: Overflow = "skip"
    shared_prefix: int = 0  # as LoglikelihoodRequest.shared_prefix


@dataclass(frozen=True)
class GenerateResult:
    """The generated text, cut before the first stop sequence.

    ``finish_reason``: ``stop``, ``length``, ``eos``, or ``context_overflow`` (not run: the
    prompt does not fit, see the module docstring). ``n_prompt_tokens`` is the prompt's
    length in tokens before any truncation, ``truncated_tokens`` how many were dropped.
    """

    text: str
    n_tokens: int
    finish_reason: str
    n_prompt_tokens: int | None = None
    truncated_tokens: int = 0
    context_window: int | None = None


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


BACKENDS = ("hf", "openai")
"""``hf``: transformers in this process; ``openai``: an OpenAI-compatible completions server
(vLLM, SGLang, TGI, llama.cpp) reached over HTTP."""


@dataclass(frozen=True)
class ModelSettings:
    """How to load a model: resolved from pytest options or given in Python.

    ``device``, ``dtype`` and ``batch_size`` are for the ``hf`` backend; ``base_url``,
    ``api_key_env``, ``concurrency``, ``max_retries`` and ``request_timeout`` for the
    ``openai`` backend, where ``model`` is the name the server serves the model under.
    """

    model: str
    device: str = "auto"  # auto | cuda | cpu
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16
    batch_size: int = 8  # 0: auto (the hf backend finds one once per model/device/dtype)
    seed: int = 1234
    max_length: int | None = None
    backend: str = "hf"  # one of BACKENDS
    base_url: str | None = None  # e.g. http://127.0.0.1:8000/v1
    api_key_env: str = "OPENAI_API_KEY"  # the variable holding the key (optional)
    concurrency: int = 4  # requests in flight at once
    max_retries: int = 5  # per request, on connection errors, timeouts, 429 and 5xx
    request_timeout: float = 600.0  # seconds per HTTP request
    device_map: str | None = None  # hf: accelerate's auto|balanced|sequential placement
    # The index of this process among parallel workers (pytest-xdist): with device "auto"
    # and several GPUs, worker w takes GPU w modulo their number.
    worker: int | None = None
