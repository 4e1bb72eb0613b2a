"""The in-process Hugging Face transformers backend (torch is imported here only)."""

from __future__ import annotations

import platform
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_llmeval._errors import ModelError
from pytest_llmeval.model._resolve import resolve_model_path
from pytest_llmeval.model._types import (
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    ModelSettings,
)

_DTYPES = ("auto", "float32", "bfloat16", "float16")


def set_seeds(seed: int) -> None:
    """Seed python, numpy (if present) and torch."""
    import random

    import torch

    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:  # pragma: no cover - numpy comes with torch in practice
        pass
    torch.manual_seed(seed)


class HFBackend:
    """A causal LM loaded with transformers, evaluated in fixed-size batches.

    Log-likelihoods follow lm-evaluation-harness: trailing whitespace of the context moves
    to the continuation, the continuation tokens are the tail of the tokenized
    ``context + continuation`` beyond the tokenized context, and batches are right-padded
    so that each row's logits equal those of the row scored alone.
    """

    def __init__(self, settings: ModelSettings) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if settings.dtype not in _DTYPES:
            raise ModelError(f"--llm-dtype={settings.dtype}: expected one of {', '.join(_DTYPES)}")
        if settings.device not in ("auto", "cpu", "cuda") and not settings.device.startswith(
            "cuda:"
        ):
            raise ModelError(f"--llm-device={settings.device}: expected auto, cuda or cpu")
        if settings.batch_size < 1:
            raise ModelError(f"--llm-batch-size={settings.batch_size}: must be >= 1")
        self.settings = settings
        self.path = resolve_model_path(settings.model)
        if settings.device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        else:
            device = settings.device
            if device.startswith("cuda") and not torch.cuda.is_available():
                raise ModelError(f"--llm-device={device} but torch sees no CUDA device")
        self.device = torch.device(device)
        set_seeds(settings.seed)
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
            self.tokenizer = AutoTokenizer.from_pretrained(self.path)
            self.model = AutoModelForCausalLM.from_pretrained(self.path, dtype=dtype)
        except (OSError, ValueError) as exc:
            raise ModelError(
                f"--llm-model={settings.model}: cannot load {self.path}: {exc}"
            ) from None
        self.model.to(self.device)
        self.model.eval()
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        config = self.model.config
        limit = settings.max_length or getattr(config, "max_position_embeddings", None) or 2048
        self.max_length = int(limit)
        self._batch_size = settings.batch_size

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
            "device_name": (
                torch.cuda.get_device_name(self.device)
                if self.device.type == "cuda"
                else platform.processor() or platform.machine()
            ),
            "dtype": str(self.dtype).replace("torch.", ""),
            "batch_size": self.batch_size,
            "max_length": self.max_length,
            "seed": self.settings.seed,
            "torch": str(torch.__version__),
            "transformers": str(transformers.__version__),
        }

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _split(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces:
            continuation = context[-n_spaces:] + continuation
            context = context[:-n_spaces]
        if not context:
            prefix = self.tokenizer.bos_token_id
            if prefix is None:
                prefix = self.tokenizer.eos_token_id
            return [int(prefix)], self._encode(continuation)
        whole = self._encode(context + continuation)
        n_context = len(self._encode(context))
        return whole[:n_context], whole[n_context:]

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        import torch

        # (context, continuation) -> (model input tokens, continuation tokens)
        encoded: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
        detailed = {(r.context, r.continuation) for r in requests if r.token_detail}
        for req in requests:
            key = (req.context, req.continuation)
            if key in encoded:
                continue
            ctx, cont = self._split(req.context, req.continuation)
            if not cont:
                raise ModelError(f"empty continuation for {req.continuation!r}")
            if len(cont) > self.max_length:
                raise ModelError(f"continuation of {len(cont)} tokens exceeds max_length")
            encoded[key] = ((ctx + cont)[-(self.max_length + 1) :][:-1], cont)
        # Requests whose model input is the same token row share one forward pass: the
        # choices of a letter-answer question are one-token continuations of one context.
        by_row: dict[tuple[int, ...], list[tuple[str, str]]] = {}
        for key, (tokens, _) in encoded.items():
            by_row.setdefault(tuple(tokens), []).append(key)
        # Longest first: padding is minimal and the first batch shows memory trouble early.
        unique_rows = sorted(by_row, key=lambda r: (-len(r), r))
        done: dict[tuple[str, str], LoglikelihoodResult] = {}
        pad = int(self.tokenizer.pad_token_id)
        for start in range(0, len(unique_rows), self.batch_size):
            rows = unique_rows[start : start + self.batch_size]
            width = len(rows[0])
            ids = torch.full((len(rows), width), pad, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for i, row in enumerate(rows):
                ids[i, : len(row)] = torch.tensor(row)
                mask[i, : len(row)] = 1
            longest_cont = [max(len(encoded[k][1]) for k in by_row[row]) for row in rows]
            keep = max(longest_cont)
            # Row i's last `keep` positions (those that predict its continuation tokens are
            # the last len(cont) of them); earlier indices are clipped to 0 and never read.
            positions = torch.tensor(
                [[max(0, len(row) - keep + j) for j in range(keep)] for row in rows]
            )
            with torch.inference_mode():
                logits = self._forward(
                    ids.to(self.device), mask.to(self.device), positions.to(self.device)
                )
            logprobs = torch.log_softmax(logits.float(), dim=-1).cpu()
            for i, row in enumerate(rows):
                end = keep
                for key in by_row[row]:
                    cont = encoded[key][1]
                    window = logprobs[i, end - len(cont) : end]
                    target = torch.tensor(cont).unsqueeze(-1)
                    chosen = torch.gather(window, 1, target).squeeze(-1)
                    greedy = bool((window.argmax(dim=-1) == target.squeeze(-1)).all())
                    zscores: tuple[float, ...] = ()
                    if key in detailed:
                        probs = window.exp()
                        mean = (probs * window).sum(-1)
                        var = (probs * window * window).sum(-1) - mean * mean
                        std = var.clamp_min(1e-12).sqrt()
                        zscores = tuple(float(z) for z in (chosen - mean) / std)
                    done[key] = LoglikelihoodResult(
                        logprob=float(chosen.sum()),
                        is_greedy=greedy,
                        n_tokens=len(cont),
                        token_logprobs=(tuple(float(x) for x in chosen) if key in detailed else ()),
                        token_zscores=zscores,
                    )
        return [done[(r.context, r.continuation)] for r in requests]

    def _forward(self, ids: Any, mask: Any, positions: Any) -> Any:
        """Logits at ``positions`` (one row of position indices per batch row) only: the
        decoder runs once over the batch, the LM head only on the kept hidden states, so a
        batch of long contexts with short continuations computes few vocabulary rows even
        when its rows have different lengths."""
        import torch

        config = self.model.config
        decoder = self.model.get_decoder() if hasattr(self.model, "get_decoder") else None
        head = self.model.get_output_embeddings()
        # Models that transform the head's output (Gemma 2's soft-capping, Cohere's scale)
        # take the plain path: full logits, then gather.
        transformed = any(
            getattr(config, name, None) for name in ("final_logit_softcapping", "logit_scale")
        )
        if decoder is None or head is None or transformed:
            logits = self.model(input_ids=ids, attention_mask=mask).logits
            index = positions.unsqueeze(-1).expand(-1, -1, logits.shape[-1])
            return torch.gather(logits, 1, index)
        hidden = decoder(input_ids=ids, attention_mask=mask).last_hidden_state
        index = positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])
        return head(torch.gather(hidden, 1, index))

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        import torch
        from transformers import GenerationConfig

        out: list[GenerateResult | None] = [None] * len(requests)
        groups: dict[tuple[int, tuple[str, ...]], list[int]] = {}
        prompt_tokens: dict[int, int] = {}
        encoded: dict[int, list[int]] = {}
        for i, req in enumerate(requests):
            budget = self.max_length - req.max_new_tokens
            if budget < 1:
                raise ModelError(
                    f"max_new_tokens={req.max_new_tokens} leaves no room in max_length "
                    f"{self.max_length}"
                )
            tokens = self._encode(req.context)
            prompt_tokens[i] = len(tokens)
            if len(tokens) > budget:
                if req.overflow == "skip":
                    out[i] = GenerateResult(
                        text="",
                        n_tokens=0,
                        finish_reason="context_overflow",
                        n_prompt_tokens=len(tokens),
                        context_window=self.max_length,
                    )
                    continue
                tokens = _fit(tokens, budget, req.overflow)
            encoded[i] = tokens
            groups.setdefault((req.max_new_tokens, req.stop), []).append(i)
        eos = self.tokenizer.eos_token_id
        for (max_new, stop), indices in groups.items():
            order = sorted(indices, key=lambda i: (-len(encoded[i]), i))
            config = GenerationConfig(  # type: ignore[no-untyped-call]
                max_new_tokens=max_new,
                do_sample=False,
                num_beams=1,
                pad_token_id=int(self.tokenizer.pad_token_id),
                eos_token_id=eos,
                stop_strings=list(stop) or None,
            )
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                width = max(len(encoded[i]) for i in batch)
                ids = torch.full(
                    (len(batch), width), int(self.tokenizer.pad_token_id), dtype=torch.long
                )
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for row, i in enumerate(batch):
                    toks = encoded[i]
                    ids[row, width - len(toks) :] = torch.tensor(toks)
                    mask[row, width - len(toks) :] = 1
                with torch.inference_mode():
                    generated = self.model.generate(
                        input_ids=ids.to(self.device),
                        attention_mask=mask.to(self.device),
                        generation_config=config,
                        tokenizer=self.tokenizer,
                    )
                new_tokens = generated[:, width:].cpu().tolist()
                for row, i in enumerate(batch):
                    toks = new_tokens[row]
                    finish = "length"
                    if eos is not None and eos in toks:
                        toks = toks[: toks.index(eos)]
                        finish = "eos"
                    pad_id = int(self.tokenizer.pad_token_id)
                    while toks and toks[-1] == pad_id and finish == "length" and pad_id != eos:
                        toks = toks[:-1]
                    text = str(self.tokenizer.decode(toks, skip_special_tokens=True))
                    cut = min((text.find(s) for s in stop if s in text), default=-1)
                    if cut >= 0:
                        text = text[:cut]
                        finish = "stop"
                    out[i] = GenerateResult(
                        text=text,
                        n_tokens=len(toks),
                        finish_reason=finish,
                        n_prompt_tokens=prompt_tokens[i],
                        truncated_tokens=prompt_tokens[i] - len(encoded[i]),
                        context_window=self.max_length,
                    )
        return [r for r in out if r is not None]


def _fit(tokens: list[int], budget: int, overflow: str) -> list[int]:
    """Cut a prompt to ``budget`` tokens: keep its end (``truncate_left``) or its first and
    last halves (``truncate_middle``, as LongBench does)."""
    if overflow == "truncate_left":
        return tokens[-budget:]
    head = budget // 2
    return tokens[:head] + tokens[len(tokens) - (budget - head) :]
