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
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pytest_llmeval._errors import ModelError
from pytest_llmeval.task import OVERFLOW_POLICIES as OVERFLOW_NAMES

Overflow = Literal["skip", "truncate_middle", "truncate_left"]
# The spec validates generate.overflow against the same tuple (task._spec.OVERFLOW_POLICIES).
OVERFLOW_POLICIES: tuple[Overflow, ...] = OVERFLOW_NAMES  # type: ignore[assignment]


@dataclass(frozen=True)
class LoglikelihoodRequest:
    """Score ``continuation`` after ``context``. ``token_detail`` asks for per-token
    statistics (membership scores such as Min-K% and Min-K%++ need them).

    ``shared_prefix``: how many leading characters of ``context`` many requests share (a
    task's description and few-shot block). A hint only: a backend may compute that part
    once and reuse it; results do not depend on it.

    ``overflow``: what to do when context and continuation do not fit the context window
    (the continuation always stays whole): ``truncate_left`` (lm-evaluation-harness's
    rule, the default for direct callers) keeps the end of the context,
    ``truncate_middle`` its first and last halves, ``skip`` scores nothing and answers
    ``context_overflow``. Task runs pass the spec's ``multiple_choice.overflow``.
    """

    context: str
    continuation: str
    token_detail: bool = False
    shared_prefix: int = 0
    overflow: Overflow = "truncate_left"


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
    # The context did not fit the window and the request's overflow policy is ``skip``:
    # nothing was scored (``logprob`` means nothing). ``n_context_tokens`` is the request's
    # length (context and continuation) in tokens, ``truncated_tokens`` how many context
    # tokens a truncating policy dropped.
    context_overflow: bool = False
    n_context_tokens: int | None = None
    truncated_tokens: int = 0
    context_window: int | None = None
    # A problem of this request alone (an empty continuation, one longer than the window):
    # the item fails with this message; the other requests of the batch are scored.
    error: str | None = None


def move_trailing_space(context: str, continuation: str) -> tuple[str, str]:
    """lm-eval's convention for log-likelihood requests (both backends): the context's
    trailing whitespace belongs to the continuation."""
    n_spaces = len(context) - len(context.rstrip())
    if not n_spaces:
        return context, continuation
    return context[:-n_spaces], context[-n_spaces:] + continuation


def no_room(max_new_tokens: int, window: int) -> GenerateResult:
    """The result of a generation request whose budget leaves no room for its prompt."""
    return GenerateResult(
        text="",
        n_tokens=0,
        finish_reason="error",
        context_window=window,
        error=f"max_new_tokens={max_new_tokens} leaves no room for a prompt in the context "
        f"window ({window} tokens)",
    )


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
    """Greedy generation after ``context`` until a stop sequence, an end-of-sequence or
    end-of-turn token, or ``max_new_tokens``.

    ``messages``: the conversation ``context`` was rendered from, when a chat template
    applies, as ``(role, content)`` pairs. A backend whose server applies the template
    itself (``ChatTemplate.render is None``) sends these instead of the text.

    ``thinking``: the (start, end) markers of a reasoning block whose text the stop
    sequences must not cut: they apply only after the block closed (``thinking_open``:
    the prompt itself opened it). See :func:`stop_hit`.
    """

    context: str
    max_new_tokens: int
    stop: tuple[str, ...] = ()
    overflow: Overflow = "skip"
    shared_prefix: int = 0  # as LoglikelihoodRequest.shared_prefix
    messages: tuple[tuple[str, str], ...] = ()
    thinking: tuple[str, str] | None = None
    thinking_open: bool = False


def _stop_start(text: str, thinking: tuple[str, str] | None, opened: bool) -> int | None:
    """Where stop sequences start to apply in a generated ``text``: 0 without a reasoning
    block, after its end marker once it closed, None while it is open."""
    if thinking is None:
        return 0
    start, end = thinking
    at = text.rfind(end) if end else -1
    if at >= 0:
        return at + len(end)
    if opened or (start and start in text):
        return None
    return 0


def stop_hit(
    text: str,
    stop: Sequence[str],
    thinking: tuple[str, str] | None = None,
    opened: bool = False,
) -> bool:
    """Whether a generation so far contains a stop sequence (outside an open or closed
    reasoning block, when ``thinking`` markers are given)."""
    begin = _stop_start(text, thinking, opened)
    # an empty stop sequence stops nothing (as in cut_at_stop; specs refuse one)
    return begin is not None and any(s and s in text[begin:] for s in stop)


def cut_at_stop(
    text: str,
    stop: Sequence[str],
    thinking: tuple[str, str] | None = None,
    opened: bool = False,
) -> tuple[str, bool]:
    """The text before its first stop sequence (searched as :func:`stop_hit` does), and
    whether one was found."""
    begin = _stop_start(text, thinking, opened)
    if begin is None:
        return text, False
    found = [at for at in (text.find(s, begin) for s in stop if s) if at >= 0]
    if not found:
        return text, False
    return text[: min(found)], True


@dataclass(frozen=True)
class GenerateResult:
    """The generated text, cut before the first stop sequence.

    ``finish_reason``: ``stop``, ``length``, ``eos``, or ``context_overflow`` (not run: the
    prompt does not fit, see the module docstring). ``stop_token`` names the token that
    ended an ``eos`` generation (``<|eot_id|>``, ``<end_of_turn>``, ``</s>``), when the
    backend knows it. ``n_tokens`` is the number of generated tokens, None where it is not
    known (a server that reports no usage). ``n_prompt_tokens`` is the prompt's length in
    tokens before any truncation, ``truncated_tokens`` how many were dropped.
    """

    text: str
    n_tokens: int | None
    finish_reason: str
    n_prompt_tokens: int | None = None
    truncated_tokens: int = 0
    context_window: int | None = None
    stop_token: str | None = None
    # A problem of this request alone (logits that are not finite, a budget that leaves
    # no room): the item fails with this message; the rest of the batch is scored.
    error: str | None = None


class RenderChat(Protocol):
    """Messages to prompt text. ``opened``: the template's generation prompt opens the
    assistant's turn; ``continue_final``: the last (assistant) message is left open for
    the model to continue (an assistant prefix), transformers' ``continue_final_message``."""

    def __call__(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        opened: bool = True,
        continue_final: bool = False,
    ) -> str: ...


@dataclass(frozen=True)
class ChatTemplate:
    """A model's chat template, as its backend applies it.

    ``source``: ``tokenizer`` (the model's own), ``file:<path>`` (``prompt.chat_template_file``)
    or ``server`` (an OpenAI-compatible server applies its own; the text is not known here).
    ``render`` turns messages into the prompt text with the assistant turn opened (the
    template's generation prompt); it is None when the server renders. ``system_role``
    is False for templates that refuse a system message (the runner then folds the system
    text into the first user turn). ``end_of_turn`` is the token text that closes an
    assistant turn in this template, when one was found (generation stops on it).
    """

    source: str
    sha256: str | None
    render: RenderChat | None = field(default=None, compare=False, repr=False)
    system_role: bool = True
    end_of_turn: str | None = None

    def describe(self) -> dict[str, Any]:
        """What run records keep of the template."""
        return {
            "source": self.source,
            "sha256": self.sha256,
            "system_role": self.system_role,
            "end_of_turn": self.end_of_turn,
        }


def bos_added(text: str, bos_token: str | None, add_bos: bool) -> bool:
    """Whether a backend puts the BOS token before ``text``: when its policy adds one and
    the text does not already start with it (a chat template that writes ``{{ bos_token }}``
    itself); never twice."""
    return bool(add_bos and bos_token and not text.startswith(bos_token))


@runtime_checkable
class Backend(Protocol):
    """What evaluation needs from a model. Implementations batch internally."""

    @property
    def batch_size(self) -> int: ...

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest]
    ) -> list[LoglikelihoodResult]: ...

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]: ...

    def chat_template(self) -> ChatTemplate | None:
        """The chat template this backend applies, or None when the model has none."""
        ...

    def info(self) -> Mapping[str, Any]:
        """What identifies the model and its settings, for run records."""
        ...


BOS_POLICIES = ("auto", "yes", "no")
#: How the hf backend runs a decode step: "auto" (its fused step where the model type and
#: device are supported, see model/_step.py) or "transformers" (the model's own forward).
DECODE_STEPS = ("auto", "transformers")
#: What greedy decoding does with the model's generation config (model/_greedy.py):
#: "model" applies it as model.generate(do_sample=False) does, "neutral" takes the argmax.
GENERATION_CONFIG_RULES = ("model", "neutral")
DTYPES = ("auto", "float32", "bfloat16", "float16")
DEVICE_MAPS = ("auto", "balanced", "sequential")

BACKENDS = ("hf", "vllm", "openai")
"""``hf``: transformers in this process; ``vllm``: vLLM's engine in this process (its
replicas as Ray actors under data parallel); ``openai``: an OpenAI-compatible completions
server (vLLM, SGLang, TGI, llama.cpp) reached over HTTP."""


class SettingsError(ModelError):
    """A model setting is invalid. ``option`` is its name as an option without the
    ``--llm-`` prefix (``dtype``, ``base-url``), so that the pytest plugin can name the
    command-line flag and the ini key."""

    def __init__(self, option: str, value: object, expected: str) -> None:
        self.option = option
        self.value = value
        self.expected = expected
        shown = "" if value is None else f"={value}"
        from pytest_llmeval.settings import setting_for_option

        setting = setting_for_option(option)  # a table's setting, or a core option
        super().__init__(f"{setting.name if setting else '--llm-' + option}{shown}: {expected}")


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
    # hf: a Jinja chat template file that replaces the model's own
    # (prompt.chat_template_file).
    chat_template_file: str | None = None
    # hf: BOS before every prompt: "auto" (as the tokenizer's config says), "yes", "no".
    add_bos: str = "auto"
    # hf: "auto" (the fused decode step where supported) or "transformers" (DECODE_STEPS).
    decode_step: str = "auto"
    # hf: draft up to this many tokens per decode step by prompt lookup (model/_lookup.py),
    # checked in the same step; 0: one token per step. Needs the fused decode step.
    prompt_lookup: int = 5
    # Greedy decoding and the model's generation config (model/_greedy.py): "model" follows
    # it as model.generate does, "neutral" takes a plain argmax.
    generation_config: str = "model"
    # vllm: tensor-parallel ranks in one engine, engine replicas (data parallel, as Ray
    # actors), the share of device memory an engine takes (vLLM's gpu_memory_utilization;
    # None: vLLM's default on a GPU, model._vllm.CPU_MEMORY_SHARE on the CPU build), and
    # further engine arguments as a JSON object (vLLM's EngineArgs fields).
    tensor_parallel: int = 1
    data_parallel: int = 1
    memory_share: float | None = None
    vllm_args: str | None = None
    # vllm: engines this run starts on the same devices (2 with --llm-set probe.reference_model: the
    # model's and the reference's). The default memory share is divided between them; a
    # share given by --llm-set vllm.memory_share times this may not exceed the whole device.
    engines_per_device: int = 1

    def __post_init__(self) -> None:
        """Every setting is checked here, once, whoever builds the settings (the pytest
        plugin, a script, the agreement CLI): backends rely on it."""
        if self.backend not in BACKENDS:
            raise SettingsError("backend", self.backend, f"expected one of {'|'.join(BACKENDS)}")
        if self.dtype not in DTYPES:
            raise SettingsError("dtype", self.dtype, f"expected one of {'|'.join(DTYPES)}")
        device = self.device
        if device not in ("auto", "cpu", "cuda") and not (
            device.startswith("cuda:") and device[5:].isdigit()
        ):
            raise SettingsError("device", device, "expected auto, cpu, cuda or cuda:N")
        if self.batch_size < 0:
            raise SettingsError("batch-size", self.batch_size, "must be >= 1 or auto")
        if self.device_map is not None:
            if self.device_map not in DEVICE_MAPS:
                raise SettingsError(
                    "device-map", self.device_map, f"expected one of {'|'.join(DEVICE_MAPS)}"
                )
            if self.device != "auto":
                raise SettingsError(
                    "device-map",
                    self.device_map,
                    f"places the model itself: leave --llm-device at auto (got {self.device})",
                )
        if self.add_bos not in BOS_POLICIES:
            raise SettingsError(
                "add-bos", self.add_bos, f"expected one of {'|'.join(BOS_POLICIES)}"
            )
        if self.decode_step not in DECODE_STEPS:
            raise SettingsError(
                "decode-step", self.decode_step, f"expected one of {'|'.join(DECODE_STEPS)}"
            )
        if self.generation_config not in GENERATION_CONFIG_RULES:
            raise SettingsError(
                "generation-config",
                self.generation_config,
                f"expected one of {'|'.join(GENERATION_CONFIG_RULES)}",
            )
        if not 0 <= self.prompt_lookup <= 32:
            raise SettingsError("prompt-lookup", self.prompt_lookup, "expected 0 to 32 tokens")
        if self.max_length is not None and self.max_length < 16:
            raise SettingsError("max-length", self.max_length, "must be >= 16 (tokens)")
        if self.concurrency < 1:
            raise SettingsError("concurrency", self.concurrency, "must be >= 1")
        if self.max_retries < 0:
            raise SettingsError("max-retries", self.max_retries, "must be >= 0")
        if not self.request_timeout > 0:
            raise SettingsError("request-timeout", self.request_timeout, "expected seconds > 0")
        self._check_engine()
        if self.backend == "openai":
            self._check_server()
        elif self.base_url:
            raise SettingsError(
                "base-url",
                self.base_url,
                "is for --llm-backend=openai (the hf backend loads --llm-model into this process)",
            )
        if self.chat_template_file is not None and self.backend == "openai":
            raise SettingsError(
                "chat-template-file",
                self.chat_template_file,
                "is applied on this side by the hf and vllm backends; --llm-backend=openai sends "
                "conversations "
                "to the server, which applies its own template (start the server with the "
                "template you want)",
            )

    def _check_engine(self) -> None:
        """The vllm backend's own settings (what needs vLLM itself, such as the names of
        its engine arguments, is checked by ``model._vllm.settings_problem``)."""
        import json

        given = {
            "tensor-parallel": self.tensor_parallel != 1,
            "data-parallel": self.data_parallel != 1,
            "memory-share": self.memory_share is not None,
            "vllm-args": self.vllm_args is not None,
        }
        if self.backend != "vllm":
            for option, set_ in given.items():
                if set_:
                    value = getattr(self, option.replace("-", "_"))
                    raise SettingsError(
                        option, value, f"is for --llm-backend=vllm (the backend is {self.backend})"
                    )
            return
        for option in ("tensor-parallel", "data-parallel"):
            value = getattr(self, option.replace("-", "_"))
            if not isinstance(value, int) or value < 1:
                raise SettingsError(option, value, "expected a whole number >= 1")
        share = self.memory_share
        if share is not None and not (isinstance(share, (int, float)) and 0 < share <= 1):
            raise SettingsError(
                "memory-share",
                share,
                "expected a share of the device's memory in (0, 1] (vLLM's "
                "gpu_memory_utilization; on the CPU build, of the NUMA node's memory)",
            )
        engines = self.engines_per_device
        if not isinstance(engines, int) or engines < 1:
            raise SettingsError("engines-per-device", engines, "expected a whole number >= 1")
        if share is not None and engines > 1 and share * engines > 1:
            raise SettingsError(
                "memory-share",
                share,
                f"{engines} engines share each device in this run (--llm-model and "
                f"--llm-set probe.reference_model), {share} of its memory each is more than "
                "all of it: "
                f"give at most {1 / engines:.2f}, or leave it unset to divide vLLM's default "
                "between them",
            )
        if self.vllm_args is not None:
            try:
                args = json.loads(self.vllm_args)
            except ValueError as exc:
                raise SettingsError(
                    "vllm-args",
                    self.vllm_args,
                    f"not JSON ({exc}); expected an object such "
                    'as {"enforce_eager": true, "max_num_seqs": 64}',
                ) from None
            if not isinstance(args, dict):
                raise SettingsError(
                    "vllm-args",
                    self.vllm_args,
                    'expected a JSON object such as {"enforce_eager": true}',
                )
        if self.device_map is not None:
            raise SettingsError(
                "device-map",
                self.device_map,
                "is the hf backend's placement; vLLM spreads a model with --llm-set "
                "vllm.tensor_parallel",
            )

    def _check_server(self) -> None:
        from urllib.parse import urlsplit

        if not self.base_url:
            raise SettingsError(
                "base-url",
                None,
                "--llm-backend=openai needs the server's URL, e.g. http://HOST:PORT/v1",
            )
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise SettingsError("base-url", self.base_url, "expected http(s)://HOST:PORT/v1")
