"""The in-process Hugging Face transformers backend (torch is imported here only)."""

from __future__ import annotations

import contextlib
import inspect
import platform
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from pytest_llmeval._errors import ModelError, one_line
from pytest_llmeval.model._detok import IncrementalText
from pytest_llmeval.model._greedy import GreedyRule
from pytest_llmeval.model._lookup import PromptLookup
from pytest_llmeval.model._progress import report_progress
from pytest_llmeval.model._resolve import resolve_model_path
from pytest_llmeval.model._tokens import TokenizerSide, read_template_file
from pytest_llmeval.model._types import (
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    ModelSettings,
    cut_at_stop,
    stop_hit,
)

# A shared prefix shorter than this many tokens is recomputed rather than cached.
_MIN_SHARED = 32
# Key/value states of shared prefixes kept across calls (least recently used dropped first):
# the 57 five-shot MMLU prefixes of a 135M model take about 1.7 GB in float32, but items come
# subject by subject, so a few at a time are ever asked for again (and the plugin empties
# the cache when a new task starts).
_PREFIX_CACHE_BYTES = 1 << 30
# A row's reusable state: per layer (keys, values) of shape [1, heads, length, head_dim], and
# the row's attention mask over those positions (0 marks a hole left by batching).
_State = tuple[list[tuple[Any, Any]], Any]
# What _greedy reports as a row's end when its logits were not finite numbers.
_NOT_FINITE = -1
# Requests generated in one batch share these: budget, stop sequences, thinking markers and
# whether the prompt opened the thinking block.
_GenerationKey = tuple[int, tuple[str, ...], tuple[str, str] | None, bool]
# `--llm-batch-size=auto` on a GPU: the batch size is probed for rows of this many tokens
# (or the window, when shorter), and again, per power of two, for calls whose rows are
# longer. Probing at the model's whole window would give batch size 1 to a 128k-position
# model evaluating 1k-token prompts.
_PROBE_WIDTH = 2048
_T = TypeVar("_T")


@dataclass(frozen=True)
class _Job:
    """A generation request, tokenized: its cached prefix, its own tokens after it (the
    prompt as fitted to the window), and how it ends."""

    index: int  # its position in the generate call
    prefix: tuple[int, ...]
    own: list[int]
    n_prompt: int  # prompt tokens before fitting
    max_new: int
    stop: tuple[str, ...]
    thinking: tuple[str, str] | None
    opened: bool


def _job_length(job: _Job) -> int:
    """The most tokens a generation request's row can hold: prefix, prompt and budget."""
    return len(job.prefix) + len(job.own) + job.max_new


def probe_width(longest: int, window: int) -> int:
    """The width (tokens) a GPU batch size is probed at for rows of up to ``longest``
    tokens: the next power of two at or above it, at least ``_PROBE_WIDTH``, at most the
    model's ``window``."""
    width = _PROBE_WIDTH
    while width < longest:
        width *= 2
    return min(width, window)


def largest_fitting(run: Callable[[int], None], start: int = 512) -> int:
    """The largest power of two (from ``start`` down, 1 at the least) for which
    ``run(rows)`` does not run out of GPU memory."""
    import torch

    size = start
    while size > 1:
        try:
            run(size)
            return size
        except torch.cuda.OutOfMemoryError:
            size //= 2
        finally:
            torch.cuda.empty_cache()
    return 1


@dataclass
class _Row:
    """A sequence being generated: its new tokens so far and, once ended, the stop token
    that ended it (``_NOT_FINITE``: its logits were not finite; None: budget or stop
    sequence)."""

    job: _Job
    new: list[int] = field(default_factory=list)
    ended: int | None = None
    # Prompt-lookup drafts (ModelSettings.prompt_lookup): the row's prompt and output.
    lookup: PromptLookup | None = None
    # The output's text as it grows, for the stop-sequence check (model/_detok.py).
    text: IncrementalText | None = None


def set_seeds(seed: int) -> dict[str, int]:
    """Seed python, numpy (if present) and torch; returns the generators seeded (for
    records: a seed is recorded only for a generator that was seeded)."""
    import random

    import torch

    seeded = {"python": seed}
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
        seeded["numpy"] = seed
    except ImportError:  # pragma: no cover - numpy comes with torch in practice
        pass
    torch.manual_seed(seed)
    seeded["torch"] = seed
    return seeded


def _device_name(settings: ModelSettings) -> str:
    """The torch device ``settings.device`` names ("auto": a GPU where torch sees one)."""
    import torch

    if settings.device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
        gpus = torch.cuda.device_count() if device == "cuda" else 0
        if gpus > 1 and settings.worker is not None and not settings.device_map:
            device = f"cuda:{settings.worker % gpus}"  # one GPU per xdist worker
    else:
        device = settings.device
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ModelError(f"--llm-device={device} but torch sees no CUDA device")
    return device


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """transformers' progress bars ("Loading weights") off while a model loads: under pytest
    they would be the first item's captured stderr (pytest-html shows it as its log). What
    loaded is recorded all the same (the environment's backend, the model's SHA256)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


class HFBackend(TokenizerSide):
    """A causal LM loaded with transformers, evaluated in fixed-size batches.

    Log-likelihoods follow lm-evaluation-harness: trailing whitespace of the context moves
    to the continuation, the continuation tokens are the tail of the tokenized
    ``context + continuation`` beyond the tokenized context, and batches are right-padded
    so that each row's logits equal those of the row scored alone.
    """

    def __init__(self, settings: ModelSettings) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        # ModelSettings checked every setting when it was made.
        template_text = read_template_file(settings.chat_template_file)
        self.settings = settings
        self.path = resolve_model_path(settings.model)
        self.device = torch.device(_device_name(settings))
        self.seeds = set_seeds(settings.seed)
        # Deterministic kernels where torch has them; warn_only: an operation without a
        # deterministic implementation warns instead of failing (recorded as such).
        torch.use_deterministic_algorithms(True, warn_only=True)
        if settings.dtype == "auto":
            # float32 on CPU (bf16 matmuls are slow and inexact there); the model's own
            # dtype on GPU, falling back to bfloat16 for float32 checkpoints.
            dtype = torch.float32 if self.device.type == "cpu" else torch.bfloat16
        else:
            dtype = getattr(torch, settings.dtype)
        self.dtype = dtype
        # transformers objects are typed loosely; keep them as Any at this boundary.
        self.tokenizer: Any
        self.model: Any
        try:
            with quiet_loading():
                self.tokenizer = AutoTokenizer.from_pretrained(self.path)
                extra = {"device_map": settings.device_map} if settings.device_map else {}
                self.model = AutoModelForCausalLM.from_pretrained(self.path, dtype=dtype, **extra)
        except Exception as exc:  # damaged files raise many kinds (safetensors, json, torch)
            raise ModelError(
                f"--llm-model={settings.model}: cannot load the model in {self.path}: "
                f"{one_line(exc)}"
            ) from None
        if settings.device_map:
            # accelerate placed the layers; inputs go where the embeddings are.
            self.device = self.model.get_input_embeddings().weight.device
        else:
            self.model.to(self.device)
        self.model.eval()
        # The BOS policy, the chat template and the token ids that end a generation.
        self._init_tokens(template_text, getattr(self.model, "generation_config", None))
        self._init_greedy_rule()
        config = self.model.config
        limit = settings.max_length or getattr(config, "max_position_embeddings", None) or 2048
        self.max_length = int(limit)
        self._batch_size = settings.batch_size
        self.batch_size_source = "fixed"
        # Auto batch size on a GPU, where memory is the limit: the size found per probed
        # width (see _rows); on a CPU one size fits every width.
        self._memory_bound = self.device.type == "cuda"
        self._by_width: dict[int, int] = {}
        self._init_decoder(config)
        self._prefixes: OrderedDict[tuple[int, ...], _State] = OrderedDict()
        self._prefix_bytes = 0
        self._text_tokens: dict[str, list[int]] = {}
        # Decode steps: the fused step (model/_step.py) where it supports the model, built
        # and checked against the model's own forward pass at the first generation
        # (_check_fused); otherwise, or when the check fails, the decoder's own forward pass.
        self._fused: Any = None
        self._fused_skipped = self._fused_reason(settings.decode_step)
        self._fused_check: dict[str, Any] | None = None
        # Whether any generation ran in this process (the record says which decode step
        # ran, or that none did: a multiple-choice run has no decode step).
        self._generated = False
        if not settings.batch_size:
            width = probe_width(0, self.max_length)
            self._batch_size, self.batch_size_source = self._auto_batch_size(width)
            if self._memory_bound:
                self._by_width[width] = self._batch_size

    def _init_greedy_rule(self) -> None:
        """Set the greedy rule and its logits processors from the model's generation config."""
        # What greedy decoding applies of the model's generation config (model/_greedy.py):
        # model.generate(do_sample=False), lm-eval's HF path, applies its repetition
        # penalty and the like; the argmax alone would not.
        source = self.path / "generation_config.json"
        self.greedy_rule = GreedyRule.from_config(
            getattr(self.model, "generation_config", None),
            self.settings.generation_config,
            str(source) if source.is_file() else None,
            self.settings.model,
        )
        self._processors = self.greedy_rule.processors(list(self.stop_tokens), self.device)

    def _init_decoder(self, config: Any) -> None:
        """Set the decoder, the LM head, the cache argument's name and whether states are shared."""
        self._decoder = self.model.get_decoder()
        self._lm_head = self.model.get_output_embeddings()
        if self._decoder is None or self._lm_head is None:
            raise ModelError(f"--llm-model={self.settings.model}: not a decoder with an LM head")
        # Reusing a prefix's key/value states needs plain full-attention layers everywhere.
        layer_types = getattr(config, "layer_types", None) or ()
        sliding = getattr(config, "sliding_window", None) and getattr(
            config, "use_sliding_window", True
        )
        # transformers 5.2x renamed the decoder's and generate's `past_key_values` to `cache`.
        forward_args = inspect.signature(self._decoder.forward).parameters
        self._cache_arg = "cache" if "cache" in forward_args else "past_key_values"
        self._share = not sliding and all(t == "full_attention" for t in layer_types)

    def _fused_reason(self, requested: str) -> str | None:
        """Why decode steps take the model's own forward pass (None: the fused step)."""
        import torch

        if requested == "transformers":
            return "--llm-set hf.decode_step=transformers"
        if not self._share:
            return "the model's caches cannot be laid out again (no continuous batching)"
        if self.dtype != torch.float32:
            return f"dtype {str(self.dtype).replace('torch.', '')} (measured in float32 only)"
        try:
            from pytest_llmeval.model._step import unsupported_reason
        except ImportError as exc:  # a transformers internal the step imports moved
            return f"the fused step (model/_step.py) cannot be imported: {one_line(exc)}"

        reason = unsupported_reason(self.model, self.device)
        if reason is None:
            size = sum(p.numel() * p.element_size() for p in self.model.parameters())
            if size > _FUSED_MAX_BYTES:  # the packed weights are a second copy
                reason = f"{size / 2**30:.1f} GiB of weights (the fused step copies them)"
        return reason

    def decode_step_info(self) -> dict[str, Any]:
        """How decode steps ran, as the record states it: the step of
        :meth:`decode_step_plan` with the fused step's ``check`` when it ran (see
        :meth:`_check_fused`), or ``none`` while no generation has run."""
        if not self._generated:
            return {
                "step": "none",
                "requested": self.settings.decode_step,
                "reason": "no generation ran (log-likelihood requests only)",
                "prompt_lookup": 0,
            }
        info = self.decode_step_plan()
        if self._fused_check is not None:
            info["check"] = dict(self._fused_check)
        return info

    def decode_step_plan(self) -> dict[str, Any]:
        """How decode steps run when this model generates (part of a generative task's
        resume key): the fused step unless it is refused, at load or by its check at the
        first generation."""
        if self._fused_skipped is None:
            # Drafts are checked a block of positions at a time; the generation config's
            # processors need each position's tokens before it: no drafts then.
            return {
                "step": "fused",
                "kernels": "onednn",
                "requested": self.settings.decode_step,
                "prompt_lookup": self.settings.prompt_lookup if self._processors is None else 0,
            }
        return {
            "step": "transformers",
            "requested": self.settings.decode_step,
            "reason": self._fused_skipped,
            "prompt_lookup": 0,  # drafts need the fused step
        }

    # ------------------------------------------------------------------ batch size

    def _auto_batch_size(self, width: int) -> tuple[int, str]:
        """``--llm-batch-size auto``: found once per model, device, dtype and window (and, on
        a GPU, the probed ``width``), kept in the cache directory and reused, so that runs
        on one machine batch alike (batching changes numbers in the last digits). On a GPU
        the largest power of two (<= 512) whose rows of ``width`` tokens run; on a CPU,
        where memory is not the limit, the smallest size within 5% of the best measured
        throughput."""
        import json
        import time

        import torch

        from pytest_llmeval._digest import cache_dir

        weights = sorted(self.path.glob("*.safetensors")) or sorted(self.path.glob("*.bin"))
        parts: list[Any] = [
            str(self.path),
            [(w.name, w.stat().st_size, int(w.stat().st_mtime)) for w in weights],
            self.info_device_name(),
            str(self.dtype),
            self.max_length,
            self.settings.device_map,
            str(torch.__version__),
        ]
        if self._memory_bound:
            parts.append(width)
        key = json.dumps(parts)
        store = cache_dir() / "batch_sizes.json"
        known: dict[str, Any] = json.loads(store.read_text()) if store.is_file() else {}
        where = f", rows of {width} tokens" if self._memory_bound else ""
        if key in known:
            entry = known[key]
            return int(entry["batch_size"]), f"auto (found {entry['found']}{where}, reused)"

        def run(rows: int, width: int) -> None:
            ids = torch.full((rows, width), int(self.tokenizer.pad_token_id), device=self.device)
            with torch.inference_mode():
                hidden, _ = self._decode([None] * rows, ids, torch.ones_like(ids))
                self._head(hidden[:, -1:])

        if self._memory_bound:
            size = largest_fitting(lambda rows: run(rows, width))
        else:
            speed: dict[int, float] = {}
            run(1, 128)  # warm-up
            for rows in (1, 2, 4, 8, 16, 32):
                started = time.perf_counter()
                run(rows, 128)
                speed[rows] = rows / (time.perf_counter() - started)
            best = max(speed.values())
            size = min(r for r, v in speed.items() if v >= 0.95 * best)
        known[key] = {"batch_size": size, "found": time.strftime("%Y-%m-%d %H:%M")}
        store.parent.mkdir(parents=True, exist_ok=True)
        store.write_text(json.dumps(known, indent=1))
        return size, f"auto (measured now{where})"

    def batch_sizes_by_width(self) -> dict[str, int]:
        """Under ``auto`` on a GPU: the batch size found for rows up to each width probed so
        far, in tokens (a width is probed when a batch first needs it, so this grows during
        a run); empty otherwise."""
        return {str(w): n for w, n in sorted(self._by_width.items())}

    def _rows(self, longest: int) -> int:
        """How many rows of up to ``longest`` tokens (cached prefix included) one batch
        takes: the batch size, except under ``auto`` on a GPU, where rows longer than the
        width it was probed at get the size probed at their own power of two (never more
        than the batch size)."""
        if self.batch_size_source == "fixed" or not self._memory_bound:
            return self._batch_size
        width = probe_width(longest, self.max_length)
        if width not in self._by_width:
            self._by_width[width] = self._auto_batch_size(width)[0]
        return min(self._batch_size, self._by_width[width])

    def _batches(self, order: Sequence[_T], length: Callable[[_T], int]) -> Iterator[list[_T]]:
        """``order`` in consecutive batches of :meth:`_rows` rows, each sized for the
        longest row (``length``, in tokens) among the batch size's worth from its start."""
        start = 0
        while start < len(order):
            window = order[start : start + self._batch_size]
            size = self._rows(max(length(x) for x in window))
            yield list(order[start : start + size])
            start += size

    def info_device_name(self) -> str:
        import torch

        if self.device.type == "cuda":
            return str(torch.cuda.get_device_name(self.device))
        return platform.processor() or platform.machine()

    # ------------------------------------------------------------------ protocol

    @property
    def batch_size(self) -> int:
        return self._batch_size

    def info(self) -> Mapping[str, Any]:
        import torch
        import transformers

        return {
            "backend": "hf",
            "model": self.settings.model,
            "model_path": str(self.path),
            "model_type": getattr(self.model.config, "model_type", None),
            "device": str(self.device),
            "device_name": self.info_device_name(),
            "dtype": str(self.dtype).replace("torch.", ""),
            "batch_size": self.batch_size,
            "batch_size_source": self.batch_size_source,
            # auto on a GPU: the size used for rows up to each probed width, in tokens
            "batch_size_by_width": self.batch_sizes_by_width(),
            "device_map": self.settings.device_map,
            "prefix_sharing": self._share,
            "decode_step": self.decode_step_info(),
            "decode_plan": self.decode_step_plan(),
            "max_length": self.max_length,
            "chat_template": self._chat.describe() if self._chat is not None else None,
            "bos": self.bos_info(),
            "stop_token_ids": {str(k): v for k, v in sorted(self.stop_tokens.items())},
            "decoding": self.decoding(),
            "seed": self.settings.seed,
            "seeds": dict(self.seeds),
            # What torch was actually set to, read back (not what was asked for).
            "deterministic_algorithms": {
                "enabled": bool(torch.are_deterministic_algorithms_enabled()),
                "warn_only": bool(torch.is_deterministic_algorithms_warn_only_enabled()),
                "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
                "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            },
            "torch": str(torch.__version__),
            "transformers": str(transformers.__version__),
        }

    def decoding(self) -> dict[str, Any]:
        """How a generation chooses its tokens, as records state it: greedy (no sampling,
        one beam), with what it applies of the model's generation config."""
        return {
            "do_sample": False,
            "num_beams": 1,
            "generation_config": self.greedy_rule.describe(),
        }

    # ------------------------------------------------------------------ shared prefixes

    def _shared_tokens(self, context_tokens: Sequence[int], prefix_text: str) -> int:
        """How many leading tokens of ``context_tokens`` are those of ``prefix_text`` (the
        description and few-shot block many requests share), at least one context token
        left over; 0 when sharing is off or the prefix is too short to be worth a cache
        entry."""
        if not self._share or not prefix_text:
            return 0
        tokens = self._text_tokens.get(prefix_text)
        if tokens is None:
            tokens = self._text_tokens[prefix_text] = self._encode_prompt(prefix_text)
        n = 0
        for a, b in zip(tokens, context_tokens[:-1], strict=False):
            if a != b:
                break
            n += 1
        return n if n >= _MIN_SHARED else 0

    def clear_prefix_cache(self) -> None:
        """Forget every cached prefix state (benchmarks start each timed run from none; the
        plugin at each new task, whose prompts share no prefix with the task before) and
        hand the memory freed back to the system (:func:`trim_heap`)."""
        self._prefixes.clear()
        self._prefix_bytes = 0
        self._text_tokens.clear()
        trim_heap()

    def _prefix_state(self, prefix: tuple[int, ...], keep: bool) -> _State | None:
        """The state of ``prefix`` (a batch of one), from the cache or computed by extending
        the longest cached prefix of it; ``keep`` stores it (LRU, bounded in bytes)."""
        if not prefix:
            return None
        cached = self._prefixes.get(prefix)
        if cached is not None:
            self._prefixes.move_to_end(prefix)
            return cached
        base: tuple[int, ...] = ()
        for candidate in self._prefixes:
            if len(base) < len(candidate) < len(prefix) and prefix[: len(candidate)] == candidate:
                base = candidate
        import torch

        ids = torch.tensor([prefix[len(base) :]], device=self.device)
        with torch.inference_mode():
            _, (state,) = self._decode(
                [self._prefixes.get(base)], ids, torch.ones_like(ids), want_state=True
            )
        if keep:
            self._prefixes[prefix] = state
            self._prefix_bytes += _nbytes(state)
            while self._prefix_bytes > _PREFIX_CACHE_BYTES and len(self._prefixes) > 1:
                _, dropped = self._prefixes.popitem(last=False)
                self._prefix_bytes -= _nbytes(dropped)
        return state

    def _past(self, states: Sequence[_State | None]) -> tuple[Any, Any]:
        """One cache for a batch whose rows continue different states (or none): each row's
        states left-aligned, the rest of the row a masked hole. Returns the cache (None when
        no row has a state) and the mask of its positions."""
        import torch

        rows = len(states)
        width = max((len(s[1]) for s in states if s is not None), default=0)
        if not width:
            return None, torch.zeros((rows, 0), dtype=torch.long, device=self.device)
        from transformers import DynamicCache

        first = next(s for s in states if s is not None)
        if all(s is first for s in states):  # one state for all rows: a broadcast view
            layers = [(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in first[0]]
            mask = torch.zeros((rows, width), dtype=torch.long, device=self.device)
            mask[:] = first[1]
            return DynamicCache(ddp_cache_data=layers), mask
        layers, mask = self._lay(states, width, 0)
        return DynamicCache(ddp_cache_data=layers), mask

    def _laid_out(self, states: Sequence[_State | None], reserve: int) -> tuple[Any, Any]:
        """One cache for rows that continue ``states`` (as ``_past`` lays them out: each
        left-aligned, the rest a masked hole; None: a row with no positions yet), written
        once into buffers with room for ``reserve`` more positions (``_kv.ReservedLayer``),
        and the mask of its positions."""
        from pytest_llmeval.model._kv import reserved_cache

        width = max((len(s[1]) for s in states if s is not None), default=0)
        layers, mask = self._lay(states, width, reserve)
        return reserved_cache(layers, width, reserve), mask

    def _lay(
        self, states: Sequence[_State | None], width: int, room: int
    ) -> tuple[list[tuple[Any, Any]], Any]:
        """Per layer, (keys, values) buffers of ``width + room`` positions holding each
        row's states left-aligned (zeros elsewhere), and the mask of the first ``width``
        positions (each state's own mask, 0 in the holes)."""
        import torch

        rows = len(states)
        mask = torch.zeros((rows, width), dtype=torch.long, device=self.device)
        layers = []
        for layer, (k0, v0) in enumerate(self._kv_shapes(states)):
            # Zeros where rows have holes (a masked position is still multiplied by its
            # value); the room is written before it is read, so it is left untouched (no
            # memory is taken for it until then).
            keys = k0.new_empty((rows, k0.shape[1], width + room, k0.shape[3]))
            values = v0.new_empty((rows, v0.shape[1], width + room, v0.shape[3]))
            keys[:, :, :width].zero_()
            values[:, :, :width].zero_()
            for i, state in enumerate(states):
                if state is not None:
                    k, v = state[0][layer]
                    keys[i, :, : k.shape[2]] = k[0]
                    values[i, :, : v.shape[2]] = v[0]
            layers.append((keys, values))
        for i, state in enumerate(states):
            if state is not None:
                mask[i, : len(state[1])] = state[1]
        return layers, mask

    def _kv_shapes(self, states: Sequence[_State | None]) -> list[tuple[Any, Any]]:
        """Per layer, a (keys, values) pair whose batch, head and head-size dimensions,
        dtype and device a cache for ``states`` takes: a state's own, or empty tensors of
        the fused step's sizes when no row has a state yet."""
        import torch

        for state in states:
            if state is not None:
                return state[0]
        fused = self._fused_step()
        empty = torch.empty(
            (1, fused.kv_heads, 0, fused.head_dim), dtype=fused.dtype, device=self.device
        )
        return [(empty, empty)] * len(fused.layers)

    def _decode(
        self, past: Sequence[_State | None], ids: Any, mask: Any, want_state: bool = False
    ) -> tuple[Any, list[_State]]:
        """Run the decoder on right-padded ``ids``, row i continuing ``past[i]``: the last
        hidden states, and with ``want_state`` each row's state after its real tokens."""
        import torch

        cache, past_mask = self._past(past)
        if cache is None and want_state:
            from transformers import DynamicCache

            cache = DynamicCache()
        full_mask = torch.cat([past_mask, mask], 1)
        # Each row's positions continue from its number of real (unmasked) past tokens.
        positions = past_mask.sum(1, keepdim=True) + torch.arange(ids.shape[1], device=ids.device)
        out = self._decoder(
            input_ids=ids,
            attention_mask=full_mask,
            position_ids=positions,
            use_cache=cache is not None,
            **{self._cache_arg: cache},
        )
        states: list[_State] = []
        if want_state and cache is not None:
            for i in range(ids.shape[0]):
                end = past_mask.shape[1] + int(mask[i].sum())
                kv = [
                    (layer.keys[i : i + 1, :, :end], layer.values[i : i + 1, :, :end])
                    for layer in cache.layers
                ]
                states.append((kv, full_mask[i, :end]))
        return out.last_hidden_state, states

    def _head(self, hidden: Any) -> Any:
        """The LM head, with the output transforms some models apply to it."""
        import torch

        logits = self._lm_head(hidden)
        config = self.model.config
        scale = getattr(config, "logit_scale", None)
        if scale:  # Cohere
            logits = logits * scale
        cap = getattr(config, "final_logit_softcapping", None)
        if cap:  # Gemma 2/3
            logits = torch.tanh(logits / cap) * cap
        return logits

    # ------------------------------------------------------------------ log-likelihood

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        """Score each request's continuation (the numbers of lm-eval's causal LM scoring).

        Each unique (context, continuation) is the model row ``context + continuation``
        without its last token, split into a state that is reused and a suffix run in the
        batch:

        - the request's ``shared_prefix`` (description and few-shot block) is computed
          once and kept in an LRU cache across calls;
        - a context with several multi-token continuations (option-text multiple choice)
          is run once, all but its last token (the questions of a call in one batch), and
          its options continue that state;
        - requests with the same row (the one-letter answers of a question) share it.

        Rows continuing different states share batches (each state left-aligned, holes
        masked, positions counted per row), sorted by suffix length, longest first; the LM
        head runs only on the positions that predict continuation tokens.
        """
        split: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
        # Requests that are not scored: a problem of their own, or a context over the window
        # under overflow "skip"; and how many context tokens a truncating policy dropped.
        failed: dict[tuple[str, str], LoglikelihoodResult] = {}
        truncated: dict[tuple[str, str], int] = {}
        for req in requests:
            key = (req.context, req.continuation)
            if key in split or key in failed:
                continue
            fitted = self._fit(req, self.max_length + 1)  # the last token is not fed
            if isinstance(fitted, LoglikelihoodResult):
                failed[key] = fitted
                continue
            ctx, cont, cut = fitted
            if cut:
                truncated[key] = cut
            split[key] = (ctx, cont)
        n_options: dict[tuple[int, ...], int] = {}
        for ctx, cont in split.values():
            if len(cont) > 1:
                n_options[tuple(ctx)] = n_options.get(tuple(ctx), 0) + 1
        hints = {(r.context, r.continuation): r.shared_prefix for r in requests}
        detailed = {(r.context, r.continuation) for r in requests if r.token_detail}
        # A row: (the tokens whose state it continues, its own tokens) -> its requests.
        rows: dict[tuple[tuple[int, ...], tuple[int, ...]], list[tuple[str, str]]] = {}
        questions: dict[tuple[int, ...], tuple[int, ...]] = {}  # context[:-1] -> its prefix
        for key, (ctx, cont) in split.items():
            row = ctx + cont[:-1]
            base: tuple[int, ...] = ()
            if key not in truncated:  # a cut context no longer starts with its prefix
                base = tuple(ctx[: self._shared_tokens(ctx, key[0][: hints[key]])])
                if self._share and n_options.get(tuple(ctx), 0) > 1:
                    questions[tuple(ctx[:-1])] = base
                    base = tuple(ctx[:-1])
            rows.setdefault((base, tuple(row[len(base) :])), []).append(key)
        states: dict[tuple[int, ...], _State | None] = {(): None}
        for prefix in {*questions.values(), *(b for b, _ in rows if b not in questions)}:
            states[prefix] = self._prefix_state(prefix, keep=True)
        self._question_states(questions, states)
        order = sorted(rows, key=lambda r: (-len(r[1]), r))
        done: dict[tuple[str, str], LoglikelihoodResult] = {}
        finished = 0
        for batch in self._batches(order, lambda r: len(r[0]) + len(r[1])):
            keep = [max(len(split[k][1]) for k in rows[r]) for r in batch]
            windows = self._tail_logprobs(
                [states[b] for b, _ in batch], [s for _, s in batch], keep
            )
            for entry, window in zip(batch, windows, strict=True):
                for key in rows[entry]:
                    cont = split[key][1]
                    tail = window[len(window) - len(cont) :]
                    done[key] = _score(tail, cont, detail=key in detailed)
                    if key in truncated:
                        done[key] = replace(
                            done[key],
                            truncated_tokens=truncated[key],
                            context_window=self.max_length,
                        )
            finished += len(batch)
            report_progress(finished, len(order))  # the progress line's rows
        done.update(failed)
        return [done[(r.context, r.continuation)] for r in requests]

    def _question_states(
        self,
        questions: dict[tuple[int, ...], tuple[int, ...]],
        states: dict[tuple[int, ...], _State | None],
    ) -> None:
        """The state of each question's context (but its last token), continuing its shared
        prefix, computed in batches of questions (not kept across calls)."""
        import torch

        order = sorted(questions, key=lambda q: (-(len(q) - len(questions[q])), q))
        for batch in self._batches(order, len):
            own = [q[len(questions[q]) :] for q in batch]
            for q in [q for q, o in zip(batch, own, strict=True) if not o]:
                states[q] = states[questions[q]]  # the prefix is the whole question
            batch = [q for q, o in zip(batch, own, strict=True) if o]
            if not batch:
                continue
            ids, mask = self._right_padded([q[len(questions[q]) :] for q in batch])
            with torch.inference_mode():
                _, computed = self._decode(
                    [states[questions[q]] for q in batch], ids, mask, want_state=True
                )
            states.update(zip(batch, computed, strict=True))

    def _right_padded(self, rows: Sequence[Sequence[int]]) -> tuple[Any, Any]:
        import torch

        pad = int(self.tokenizer.pad_token_id)
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(list(row), dtype=torch.long)
            mask[i, : len(row)] = 1
        return ids.to(self.device), mask.to(self.device)

    def _tail_logprobs(
        self,
        states: Sequence[_State | None],
        suffixes: Sequence[tuple[int, ...]],
        keep: Sequence[int],
    ) -> list[Any]:
        """Log-softmax over the vocabulary at each suffix's last ``keep[i]`` positions (on
        the CPU, float32): the decoder runs once over the batch, the LM head only there."""
        import torch

        ids, mask = self._right_padded(suffixes)
        most = max(keep)
        # Row i's last `most` positions; earlier indices are clipped to 0 and never read.
        index = torch.tensor([[max(0, len(s) - most + j) for j in range(most)] for s in suffixes])
        with torch.inference_mode():
            hidden, _ = self._decode(states, ids, mask)
            index = index.to(self.device).unsqueeze(-1).expand(-1, -1, hidden.shape[-1])
            logits = self._head(torch.gather(hidden, 1, index))
            logprobs = torch.log_softmax(logits.float(), dim=-1).cpu()
        return [logprobs[i, most - k :] for i, k in enumerate(keep)]

    # ------------------------------------------------------------------ generation

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        """Greedy generation of every request; results in the order of ``requests`` (see
        :meth:`generate_stream`, which this collects)."""
        out: dict[int, GenerateResult] = {}
        for index, result in self.generate_stream(requests):
            out[index] = result
            report_progress(len(out), len(requests))  # a finished row: the progress line
        return [out[i] for i in range(len(requests))]

    def generate_stream(
        self, requests: Sequence[GenerateRequest]
    ) -> Iterator[tuple[int, GenerateResult]]:
        """Greedy generation, each result yielded as ``(index in requests, result)`` as soon
        as its sequence ends (requests that cannot run come first).

        With full-attention layers (``prefix_sharing``) the batch is kept full
        (continuous batching, :meth:`_continuous`): up to ``batch_size`` sequences run at
        once and a sequence that ends is replaced by the next request, in the order given.
        Otherwise requests with the same budget and stop sequences run in fixed batches,
        longest first (:meth:`_greedy`). Either way a prompt's shared prefix is not
        recomputed: its cached state is reused, the prompt's own tokens continue it."""
        jobs: list[_Job] = []
        for i, req in enumerate(requests):
            fitted = self._fit_prompt(req)
            if isinstance(fitted, GenerateResult):  # not run: no room, or over the window
                yield i, fitted
                continue
            tokens, n_prompt = fitted
            prefix: tuple[int, ...] = ()
            if len(tokens) == n_prompt:  # a cut prompt no longer starts with its prefix
                shared = self._shared_tokens(tokens, req.context[: req.shared_prefix])
                prefix = tuple(tokens[:shared])
            jobs.append(
                _Job(
                    index=i,
                    prefix=prefix,
                    own=tokens[len(prefix) :],
                    n_prompt=n_prompt,
                    max_new=req.max_new_tokens,
                    stop=req.stop,
                    thinking=req.thinking,
                    opened=req.thinking_open,
                )
            )
        if not jobs:
            return
        self._generated = True
        if self._fused_skipped is None and self._fused_check is None:
            self._check_fused()
        if self._share:
            for row in self._continuous(jobs):
                yield row.job.index, self._result(row)
            return
        groups: dict[_GenerationKey, list[_Job]] = {}
        for job in jobs:
            groups.setdefault((job.max_new, job.stop, job.thinking, job.opened), []).append(job)
        for members in groups.values():
            order = sorted(members, key=lambda j: (-len(j.own), j.index))
            for batch in self._batches(order, _job_length):
                for row in self._greedy(batch):
                    yield row.job.index, self._result(row)

    def _result(self, row: _Row) -> GenerateResult:
        """A finished sequence as the request's result: the text cut at its first stop
        sequence, how it ended, its token counts."""
        job = row.job
        if row.ended == _NOT_FINITE:
            return GenerateResult(
                text="",
                n_tokens=len(row.new),
                finish_reason="error",
                n_prompt_tokens=job.n_prompt,
                context_window=self.max_length,
                error="the model's logits are not finite numbers (NaN or infinity) "
                f"at output token {len(row.new) + 1}: no token can be chosen",
            )
        cut, hit = cut_at_stop(
            str(self.tokenizer.decode(row.new, skip_special_tokens=True)),
            job.stop,
            job.thinking,
            job.opened,
        )
        return GenerateResult(
            text=cut,
            n_tokens=len(row.new),
            finish_reason="stop" if hit else "eos" if row.ended is not None else "length",
            n_prompt_tokens=job.n_prompt,
            truncated_tokens=job.n_prompt - len(job.prefix) - len(job.own),
            context_window=self.max_length,
            stop_token=(
                self.stop_tokens.get(row.ended) if row.ended is not None and not hit else None
            ),
        )

    def _take(self, row: _Row, token: int, finite: bool) -> bool:
        """Give ``row`` its next greedy ``token``; whether the row goes on. It ends on
        logits that are not finite, a stop token (not kept), its budget, or a stop sequence
        in its decoded text (checked after every token, as lm-eval's stopping criterion
        does)."""
        job = row.job
        if not finite:  # damaged weights or an overflow: no token to choose
            row.ended = _NOT_FINITE
            return False
        if token in self.stop_tokens:
            row.ended = token
            return False
        row.new.append(token)
        if len(row.new) >= job.max_new:
            return False
        if not job.stop:
            return True
        if row.text is None:
            row.text = IncrementalText(self.tokenizer)
        # Only the tokens since the last check are decoded (with a few before them): the
        # whole output's decode at every token would cost O(n^2) per sequence.
        text = row.text.extend(row.new[len(row.text.tokens) :])
        return not stop_hit(text, job.stop, job.thinking, job.opened)

    def _choose(self, hidden: Any, rows: Sequence[_Row]) -> tuple[Any, list[int], list[bool]]:
        """The greedy next token of each row of ``hidden`` (one position per row, of
        ``rows``): the token tensor, its values, and whether each row's logits were
        finite."""
        import torch

        logits = self._head(hidden)
        tokens = self._argmax(logits, rows)
        return tokens, tokens.tolist(), torch.isfinite(logits).all(-1).tolist()

    def _argmax(self, logits: Any, rows: Sequence[_Row]) -> Any:
        """The greedy token of each row of ``logits`` (rows x vocabulary, one per row of
        ``rows``): the argmax, after the generation config's processors where the rule
        applies any (each on its row's own tokens: prompt and output so far)."""
        if self._processors is None:
            return logits.argmax(-1)
        import torch

        assert len(rows) == logits.shape[0], "the generation config's processors need the rows"

        picked = [
            self._processors.choose(
                [*row.job.prefix, *row.job.own, *row.new],
                logits[i],
                len(row.job.prefix) + len(row.job.own),
            )
            for i, row in enumerate(rows)
        ]
        return torch.tensor(picked, dtype=torch.long, device=logits.device)

    def _row_state(self, cache: Any, mask: Any, row: int) -> _State:
        """Row ``row`` of a running generation's cache as a state of its own, its holes
        (padding, positions of rows that left) squeezed out: the same keys and values at
        the same positions (rotary positions were applied when they were computed)."""
        import torch

        real = mask[row].nonzero().squeeze(1)
        whole = int(real.numel()) == int(mask.shape[1])
        kv = []
        for layer in cache.layers:
            keys, values = layer.keys[row : row + 1], layer.values[row : row + 1]
            if not whole:
                keys, values = keys.index_select(2, real), values.index_select(2, real)
            kv.append((keys, values))
        return kv, torch.ones(int(real.numel()), dtype=mask.dtype, device=mask.device)

    def _continuous(self, jobs: Sequence[_Job]) -> Iterator[_Row]:
        """Greedy decoding with the batch kept full (continuous batching), each finished
        row yielded at once.

        Up to ``batch_size`` rows decode together, one token per step. When rows end and
        requests wait, the next ones (in the order given) are admitted: their prompts are
        prefilled after their cached prefixes (the first token chosen from the last prompt
        position), the running rows' states are taken out of the cache without their
        holes, and one cache is laid out for all of them (``_past``); decoding goes on
        with every row at its own position. A row's tokens depend only on its own prompt:
        the rows beside it change which rows share a matrix product, never what a row
        attends to."""
        import torch

        waiting = deque(jobs)
        reserve = max(job.max_new for job in jobs)
        limit = self._rows(max(_job_length(job) for job in jobs))
        rows: list[_Row] = []
        cache: Any = None
        mask: Any = None  # rows x cache positions: 1 where a row has a real token
        pending: Any = None  # each row's chosen token, not yet in the cache
        slots: list[int] = []  # each row's index in the cache's batch
        while waiting or rows:
            done: list[_Row] = []
            with torch.inference_mode():
                if waiting and len(rows) < limit:
                    fresh, firsts = self._admit(waiting, limit, rows, done)
                    running = [self._row_state(cache, mask, s) for s in slots]
                    # The old cache, the rows' states and the new one would otherwise all be
                    # alive at once (and the states for the whole decoding that follows):
                    # each is a copy of the batch's keys and values.
                    cache = None
                    if running or fresh:
                        cache, mask = self._laid_out(running + fresh, reserve)
                        pending = torch.cat(([pending[slots]] if slots else []) + firsts)
                        slots = list(range(len(rows)))
                    del running, fresh, firsts
                if rows:
                    drafts = [self._draft(row) for row in rows]
                    lengths = [1 + len(draft) for draft in drafts]
                    width = max(lengths)
                    block = pending.unsqueeze(1).repeat(1, width)
                    for j, draft in enumerate(drafts):
                        if draft:
                            block[j, 1 : 1 + len(draft)] = torch.tensor(draft, device=block.device)
                    positions = mask.sum(1, keepdim=True) + torch.arange(width, device=mask.device)
                    picked, finite_at = self._step(block, positions, mask, cache, lengths, rows)
                    mask, chosen, still = self._advance_rows(
                        rows, drafts, picked, finite_at, mask, width, done
                    )
                    if len(still) < len(rows):
                        rows = [rows[j] for j in still]
                        if waiting:  # the next admission lays the cache out again
                            slots, pending = still, chosen
                        elif still:
                            mask, pending, slots = self._keep_rows(cache, mask, chosen, still)
                    else:
                        pending = chosen
                    if rows and not (waiting and len(rows) < limit):
                        # Rejected drafts leave holes that every step's attention reads:
                        # squeeze them out when they pass a 64-position, 1/8 margin.
                        longest = int(mask.sum(1).max())
                        if mask.shape[1] - longest > max(64, mask.shape[1] // 8):
                            squeezed = [self._row_state(cache, mask, s) for s in slots]
                            cache = None  # the squeezed states are copies: free it first
                            cache, mask = self._laid_out(squeezed, reserve)
                            del squeezed
                            slots = list(range(len(rows)))
            yield from done

    def _admit(
        self, waiting: deque[_Job], limit: int, rows: list[_Row], done: list[_Row]
    ) -> tuple[list[_State], list[Any]]:
        """Prefill waiting jobs into ``rows`` (ended ones into ``done``): states, first tokens."""
        fresh: list[_State] = []
        firsts: list[Any] = []
        while waiting and len(rows) < limit:  # refill what ends at once
            admitted = [waiting.popleft() for _ in range(min(limit - len(rows), len(waiting)))]
            states = [self._prefix_state(job.prefix, keep=True) for job in admitted]
            entering = [_Row(job) for job in admitted]
            chosen, values, finite, computed = self._prefill(
                states, [job.own for job in admitted], entering
            )
            for j, row in enumerate(entering):
                if self._take(row, values[j], finite[j]):
                    rows.append(row)
                    fresh.append(computed[j])
                    firsts.append(chosen[j : j + 1])
                else:
                    done.append(row)
        return fresh, firsts

    def _advance_rows(
        self,
        rows: Sequence[_Row],
        drafts: Sequence[Sequence[int]],
        picked: Sequence[Sequence[int]],
        finite_at: Sequence[Sequence[bool]],
        mask: Any,
        width: int,
        done: list[_Row],
    ) -> tuple[Any, Any, list[int]]:
        """Give each row its step's tokens; returns the grown mask, next tokens, rows going on."""
        import torch

        # Each row keeps its token and the drafted tokens the model chose
        # itself, up to the first it did not: the real positions of the block.
        real = mask.new_zeros((len(rows), width))
        nexts: list[int] = []
        still = []
        for j, row in enumerate(rows):
            count, goes_on = self._advance(row, drafts[j], picked[j], finite_at[j])
            real[j, :count] = 1
            nexts.append(picked[j][count - 1])
            if goes_on:
                still.append(j)
            else:
                done.append(row)
        mask = torch.cat([mask, real], 1)
        return mask, torch.tensor(nexts, device=mask.device), still

    def _keep_rows(
        self, cache: Any, mask: Any, chosen: Any, still: list[int]
    ) -> tuple[Any, Any, list[int]]:
        """Keep rows ``still`` alone in ``cache`` (in place): their mask, tokens and slots."""
        import torch

        index = torch.tensor(still, device=mask.device)
        cache.batch_select_indices(index)
        return mask[index], chosen[index], list(range(len(still)))

    def _prefill(
        self,
        states: Sequence[_State | None],
        owns: Sequence[Sequence[int]],
        rows: Sequence[_Row] = (),
    ) -> tuple[Any, list[int], list[bool], list[_State]]:
        """Each row's own prompt tokens ``owns[i]`` after its cached prefix ``states[i]``:
        the greedy first output token of each row (tensor and values), whether its logits
        were finite, and each row's state after its prompt. ``rows`` (the rows these
        prompts begin) are needed where the generation config's processors apply.

        With the fused step the prompts go through it in blocks of at most
        ``_PREFILL_BLOCK`` tokens per row (aligned on each prompt's end, so the last block
        holds every row's last token and only it needs the LM head); a shorter prompt's
        rows are holes in the blocks before it starts. Otherwise transformers' forward
        pass runs on the right-padded prompts."""
        import torch

        if self._fused_skipped is not None:
            ids, own_mask = self._right_padded(owns)
            hidden, computed = self._decode(states, ids, own_mask, want_state=True)
            last = hidden[torch.arange(len(owns), device=hidden.device), own_mask.sum(1) - 1]
            chosen, values, finite = self._choose(last, rows)
            return chosen, values, finite, computed
        fused = self._fused_step()
        longest = max(map(len, owns))
        cache, mask = self._laid_out(states, longest)
        logits = None
        for end in range(longest % _PREFILL_BLOCK or _PREFILL_BLOCK, longest + 1, _PREFILL_BLOCK):
            behind = longest - end  # each prompt's tokens after this block
            pieces = [
                own[max(0, len(own) - behind - _PREFILL_BLOCK) : max(0, len(own) - behind)]
                for own in owns
            ]
            block, real = self._right_padded(pieces)
            positions = mask.sum(1, keepdim=True) + torch.arange(block.shape[1], device=self.device)
            last_block = end == longest
            logits = fused(
                block,
                positions,
                mask,
                cache,
                [len(piece) for piece in pieces],
                logits="last" if last_block else "none",
            )
            mask = torch.cat([mask, real.to(mask.dtype)], 1)
        assert logits is not None
        chosen = self._argmax(logits, rows)
        computed = [self._row_state(cache, mask, i) for i in range(len(owns))]
        return chosen, chosen.tolist(), torch.isfinite(logits).all(-1).tolist(), computed

    def _advance(
        self, row: _Row, draft: Sequence[int], picked: Sequence[int], finite: Sequence[bool]
    ) -> tuple[int, bool]:
        """Give ``row`` the tokens of its decode step (``picked``: the greedy token after
        each position of the step): the drafted tokens the model chose itself, up to the
        first it did not, then its own next token, each through :meth:`_take`. Returns how
        many of the step's positions hold real tokens (the row's token and the kept
        drafts) and whether the row goes on."""
        kept = 0
        while kept < len(draft) and picked[kept] == draft[kept]:
            kept += 1
        goes_on = all(self._take(row, picked[t], finite[t]) for t in range(kept + 1))
        return kept + 1, goes_on

    def _draft(self, row: _Row) -> list[int]:
        """The row's prompt-lookup draft for this step (none without the fused step or
        with ``prompt_lookup`` 0): never more tokens than its budget has left after the
        one it chooses anyway."""
        k = min(self.settings.prompt_lookup, row.job.max_new - len(row.new) - 1)
        if k <= 0 or self._fused_skipped is not None or self._processors is not None:
            return []  # processors: each position's token depends on the ones before it
        if row.lookup is None:
            row.lookup = PromptLookup([*row.job.prefix, *row.job.own])
            known = 0
        else:
            known = len(row.lookup.tokens) - len(row.job.prefix) - len(row.job.own)
        row.lookup.extend(row.new[known:])
        return row.lookup.draft(k)

    def _check_fused(self) -> None:
        """Before the first generation: the fused step against the model's own forward
        pass (``_step.self_check``: a fixed prompt in a ragged batch of two, its last
        position and ``CHECK_STEPS`` greedy steps, the logits within the dtype's
        ``CHECK_TOLERANCE`` of the scale, the same greedy tokens). On a disagreement, or an
        error from the transformers internals the step uses, decode steps take the
        model's own forward pass for the rest of the process, with a warning, and the
        record's ``decode_step`` says why; either way it holds the check's numbers."""
        import warnings

        import torch

        from pytest_llmeval.model._step import CHECK_TOLERANCE, self_check

        dtype = str(self.dtype).replace("torch.", "")
        prompt = self._encode_prompt(_CHECK_PROMPT)
        prompts = [prompt, prompt[: max(1, len(prompt) * 2 // 3)]]
        reason = None
        try:
            with torch.inference_mode():
                check = self_check(self.model, self._fused_step(), prompts, CHECK_TOLERANCE[dtype])
        except Exception as exc:  # whatever a changed internal raises
            check = {"error": one_line(exc)}
            reason = (
                "the fused step failed at its check against the model's forward pass: "
                f"{one_line(exc)}"
            )
        else:
            if "failed_at" in check:
                reason = (
                    "fused step disagreed with the model's forward at check: max |Δ logit| "
                    f"{check['diff']:.3g} > tol {check['allowed']:.3g} "
                    f"at token {check['failed_at']}"
                )
        self._fused_check = check
        if reason is not None:
            self._fused_skipped = reason
            self._fused = None  # its packed weights are not needed any more
            warnings.warn(
                f"--llm-model={self.settings.model}: {reason}; decode steps take the model's "
                "own forward pass for this run (environment.backend.decode_step in "
                "eval_config.json). Report it with the torch and transformers versions; "
                "--llm-set hf.decode_step=transformers skips the fused step and its check",
                RuntimeWarning,
                stacklevel=3,
            )

    def _fused_step(self) -> Any:
        """The fused decode step (``_step.FusedStep``), built on first use."""
        if self._fused is None:
            from pytest_llmeval.model._step import FusedStep

            self._fused = FusedStep(self.model, self.batch_size)
        return self._fused

    def _step(
        self,
        tokens: Any,
        positions: Any,
        mask: Any,
        cache: Any,
        lengths: Sequence[int],
        rows: Sequence[_Row] = (),
    ) -> tuple[list[list[int]], list[list[bool]]]:
        """One decode step of continuous batching over ``tokens`` (rows, width) at
        ``positions``, after the cache positions where ``mask`` is 1, the cache extended
        in place: per row, for each of its first ``lengths[row]`` tokens, the greedy next
        token and whether its logits were finite. More than one token per row (a draft)
        needs the fused step; ``rows`` (one token each: no drafts) are needed where the
        generation config's processors apply."""
        import torch

        if self._fused_skipped is None:
            logits = self._fused_step()(tokens, positions, mask, cache, list(lengths))
        else:
            out = self._decoder(
                input_ids=tokens,
                attention_mask=torch.cat([mask, mask.new_ones(tokens.shape)], 1),
                position_ids=positions,
                use_cache=True,
                **{self._cache_arg: cache},
            )
            logits = self._head(out.last_hidden_state).flatten(0, 1)
        chosen = self._argmax(logits, rows).tolist()
        finite = torch.isfinite(logits).all(-1).tolist()
        picked, finite_at, start = [], [], 0
        for n in lengths:
            picked.append(chosen[start : start + n])
            finite_at.append(finite[start : start + n])
            start += n
        return picked, finite_at

    def _greedy(self, jobs: Sequence[_Job]) -> list[_Row]:
        """Greedy decoding of a fixed batch (the path of models whose caches cannot be laid
        out again): each job's own tokens continue its prefix's cached state. A row leaves
        the batch as soon as it ends (see :meth:`_take`), so the remaining rows run smaller
        forward passes; no row takes its place."""
        import torch
        from transformers import DynamicCache

        from pytest_llmeval.model._kv import reserve_room

        rows = [_Row(job) for job in jobs]
        states = [self._prefix_state(job.prefix, keep=True) for job in jobs]
        ids, mask = self._right_padded([job.own for job in jobs])
        with torch.inference_mode():
            cache, past_mask = self._past(states)
            # Room for every token still to come, written in place (no copy of the whole
            # cache per token, see _kv.py).
            reserve = max(job.max_new for job in jobs)
            cache = reserve_room(cache if cache is not None else DynamicCache(), reserve)
            full = torch.cat([past_mask, mask], 1)
            seen = full.sum(1)  # real tokens per row: the position of its next token
            out = self._decoder(
                input_ids=ids,
                attention_mask=full,
                position_ids=past_mask.sum(1, keepdim=True)
                + torch.arange(ids.shape[1], device=ids.device),
                use_cache=True,
                **{self._cache_arg: cache},
            )
            index = torch.arange(len(jobs), device=ids.device)
            hidden = out.last_hidden_state[index, mask.sum(1) - 1]
            active = list(range(len(jobs)))
            while active:
                tokens, values, finite = self._choose(hidden, [rows[r] for r in active])
                still = [
                    j for j, r in enumerate(active) if self._take(rows[r], values[j], finite[j])
                ]
                if len(still) < len(active):
                    if not still:
                        break
                    keep = torch.tensor(still, device=ids.device)
                    cache.batch_select_indices(keep)
                    full, seen, tokens = full[keep], seen[keep], tokens[keep]
                    active = [active[j] for j in still]
                full = torch.cat([full, full.new_ones((len(active), 1))], 1)
                out = self._decoder(
                    input_ids=tokens.unsqueeze(-1),
                    attention_mask=full,
                    position_ids=seen.unsqueeze(-1),
                    use_cache=True,
                    **{self._cache_arg: cache},
                )
                seen = seen + 1
                hidden = out.last_hidden_state[:, -1]
        return rows


#: The fused decode step keeps a packed copy of the weights: not for models above this.
_FUSED_MAX_BYTES = 4 * 2**30
#: Prompt tokens per row in one fused prefill block (bounds the attention scores' memory).
_PREFILL_BLOCK = 64
#: The prompt of the fused step's check (_check_fused): any text; short, since the check
#: runs it through both paths once per loaded model.
_CHECK_PROMPT = "Question: what is two plus three? Answer: five.\nQuestion: name a colour. Answer:"


def trim_heap() -> bool:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``); whether it
    ran. Key/value buffers of a few MB each come from the heap, and glibc keeps what they
    freed resident: after a generative task the process would hold its peak until exit."""
    import ctypes

    if platform.system() != "Linux":
        return False
    try:
        trim = ctypes.CDLL(None).malloc_trim  # glibc; musl has none
    except (OSError, AttributeError):
        return False
    trim(0)
    return True


def _score(window: Any, cont: Sequence[int], detail: bool) -> LoglikelihoodResult:
    """A continuation's result from the log-softmax rows that predict its tokens."""
    import torch

    target = torch.tensor(list(cont)).unsqueeze(-1)
    chosen = torch.gather(window, 1, target).squeeze(-1)
    greedy = bool((window.argmax(dim=-1) == target.squeeze(-1)).all())
    if not detail:
        return LoglikelihoodResult(
            logprob=float(chosen.sum()), is_greedy=greedy, n_tokens=len(cont)
        )
    probs = window.exp()
    mean = (probs * window).sum(-1)
    std = ((probs * window * window).sum(-1) - mean * mean).clamp_min(1e-12).sqrt()
    return LoglikelihoodResult(
        logprob=float(chosen.sum()),
        is_greedy=greedy,
        n_tokens=len(cont),
        token_logprobs=tuple(float(x) for x in chosen),
        token_zscores=tuple(float(z) for z in (chosen - mean) / std),
    )


def _nbytes(state: _State) -> int:
    return sum(
        int(k.numel() * k.element_size() + v.numel() * v.element_size()) for k, v in state[0]
    )
