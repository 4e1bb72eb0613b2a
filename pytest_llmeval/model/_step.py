"""One decode step of a Llama-shaped decoder, without transformers' per-layer machinery.

Greedy generation spends most of its time in decode steps: the decoder on one new token
per running row. On the CPU with a small model such a step is mostly overhead, not
arithmetic (see docs/ARCHITECTURE.md, "Where generation time goes"): BLAS kernels that
are slow for a handful of rows, seven separate projections per layer, an attention kernel
built for long query blocks, and a few dozen small tensor operations per layer.

``FusedStep`` computes the same function as the model's own forward pass on one token per
row, or on a block of tokens per row (a prompt-lookup draft to check, or a piece of a
prompt at admission; causal within the block, each row with its own number of real
tokens), over the same key/value cache (``_kv.ReservedLayer`` buffers, written in place):

- the query/key/value projections are one matrix product, and so are the gate and up
  projections of the MLP (their weights concatenated once);
- on the CPU every linear layer and the LM head use oneDNN's inner product with weights
  packed once for the step's row count (MKL's SGEMM is several times slower on a few rows);
- only each row's real tokens go through the linear layers and the LM head (packed row
  after row), and the LM head only where logits are asked for;
- attention is one grouped product per key/value head (the query heads of a group share
  their keys, as transformers' ``pack_gqa`` does) with the mask added as a bias built once
  per step, a softmax in float32 and one product with the values;
- RMSNorm is the model's own norm modules (Qwen3's per-head query and key norms
  included), rotary embeddings transformers' own
  ``rotate_half`` on the tables of the model's own ``rotary_emb`` (so RoPE scaling
  variants agree).

The results differ from transformers' forward pass only by floating-point summation order
(the tests compare logits and greedy tokens with the model's own forward pass, and the
backend does so on the loaded model before its first generation: :func:`self_check`,
falling back to transformers' path when they disagree); ``--llm-set hf.decode_step
transformers`` turns it off. It is used only for the model types it
was written and tested for (``SUPPORTED``) and only where it has been measured (the CPU);
anything else takes transformers' forward pass, and ``HFBackend.info()`` records which
ran. Imported only by the HF backend (it needs torch).
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.models.llama.modeling_llama import rotate_half

#: Model types whose decoder layer this step reproduces: pre-norm RMSNorm, rotary
#: embeddings applied to the whole head, grouped-query attention without sliding window or
#: soft-capping, a SiLU-gated MLP (biases allowed on the projections); Qwen3's RMSNorm of
#: each query and key head before the rotary embedding.
SUPPORTED = ("llama", "qwen2", "mistral", "qwen3")
#: Model types whose per-head query/key norms (``q_norm``/``k_norm`` over the head size,
#: before the rotary embedding) the step applies.
HEAD_NORMS = ("qwen3",)


def unsupported_reason(model: Any, device: Any) -> str | None:
    """Why ``FusedStep`` cannot run this model on this device (None when it can)."""
    config = model.config
    kind = getattr(config, "model_type", None)
    if kind not in SUPPORTED:
        return f"model type {kind!r} (the fused step supports {', '.join(SUPPORTED)})"
    if getattr(device, "type", str(device)) != "cpu":
        return "not measured off the CPU"
    if not torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]
        return "torch was built without oneDNN"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r}"
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return "config.sliding_window"
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if getattr(config, key, None):
            return f"config.{key}"
    if getattr(config, "logit_scale", None):
        return "config.logit_scale"
    decoder = model.get_decoder()
    attention = decoder.layers[0].self_attn
    if kind not in HEAD_NORMS and any(hasattr(attention, n) for n in ("q_norm", "k_norm")):
        return "per-head query/key norms"
    if getattr(config, "pretraining_tp", 1) != 1:
        return "config.pretraining_tp"
    return None


class _Linear:
    """``F.linear`` with weights packed once for oneDNN's inner product."""

    def __init__(self, weights: list[torch.Tensor], biases: list[torch.Tensor | None], rows: int):
        weight = torch.cat([w.detach() for w in weights]) if len(weights) > 1 else weights[0]
        self.out_features = int(weight.shape[0])
        if any(b is not None for b in biases):
            self.bias: torch.Tensor | None = torch.cat(
                [
                    b.detach() if b is not None else w.new_zeros(w.shape[0])
                    for w, b in zip(weights, biases, strict=True)
                ]
            )
        else:
            self.bias = None
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), rows)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(
            x, self.packed, self.bias, "none", [], ""
        )
        return out


class _Layer:
    def __init__(self, layer: Any, rows: int) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.qkv = _Linear(
            [attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight],
            [attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias],
            rows,
        )
        self.o = _Linear([attn.o_proj.weight], [attn.o_proj.bias], rows)
        self.gate_up = _Linear(
            [mlp.gate_proj.weight, mlp.up_proj.weight], [mlp.gate_proj.bias, mlp.up_proj.bias], rows
        )
        self.down = _Linear([mlp.down_proj.weight], [mlp.down_proj.bias], rows)
        # The model's own RMSNorm modules (their own formula, dtype handling and epsilon).
        self.norm1 = layer.input_layernorm
        self.norm2 = layer.post_attention_layernorm
        # Qwen3: each query and key head normed over its size, before the rotary embedding.
        self.q_norm: Any = getattr(attn, "q_norm", None)
        self.k_norm: Any = getattr(attn, "k_norm", None)
        self.scaling = float(attn.scaling)


class FusedStep:
    """The decoder and LM head on one new token per row (see the module)."""

    def __init__(self, model: Any, rows: int) -> None:
        config = model.config
        decoder = model.get_decoder()
        self.rows = rows
        self.embed = decoder.embed_tokens
        self.rotary = decoder.rotary_emb
        self.final_norm = decoder.norm
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(getattr(config, "num_key_value_heads", None) or self.heads)
        attention = decoder.layers[0].self_attn
        self.head_dim = int(attention.head_dim)
        self.layers = [_Layer(layer, rows) for layer in decoder.layers[: config.num_hidden_layers]]
        head = model.get_output_embeddings()
        self.head = _Linear([head.weight], [getattr(head, "bias", None)], rows)
        self.dtype = head.weight.dtype

    def __call__(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        cache: Any,
        lengths: list[int] | None = None,
        logits: Literal["all", "last", "none"] = "all",
    ) -> torch.Tensor | None:
        """Next-token logits after the real tokens of ``tokens`` (rows, width) at
        ``positions`` (rows, width): row ``i``'s first ``lengths[i]`` tokens (all of them
        without ``lengths``), packed row after row as (real tokens, vocabulary); with
        ``logits="last"`` only after each row's last real token (rows, vocabulary; every
        row needs one), with ``"none"`` none at all (a prompt's earlier part).

        Each row attends to the cache positions where ``mask`` (rows, cache positions
        before this step) is 1 and, causally, to its own tokens of this step. Every
        ``width`` positions of each row are written into ``cache`` after the ones
        ``mask`` covers; a row's positions past ``lengths[i]`` hold no token (the caller
        masks them as holes). Only real tokens go through the linear layers and the head:
        a short draft beside a long one costs its own length, not the block's."""
        rows, width = tokens.shape
        groups = self.heads // self.kv_heads
        d = self.head_dim
        q_size, kv_size = self.heads * d, self.kv_heads * d
        device = tokens.device
        counts = torch.tensor(lengths if lengths is not None else [width] * rows, device=device)
        real = torch.arange(width, device=device) < counts.unsqueeze(1)  # (rows, width)
        flat = real.view(-1).nonzero().squeeze(1) if bool((counts < width).any()) else None
        hidden = self.embed(tokens.view(-1)[flat] if flat is not None else tokens.view(-1))
        cos, sin = self.rotary(hidden, positions)  # (rows, width, d)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (rows, 1, width, d)
        bias = self._bias(mask, width)
        for index, layer in enumerate(self.layers):
            residual = hidden
            qkv = layer.qkv(layer.norm1(hidden))
            if flat is not None:  # back to the block's layout for attention
                qkv = qkv.new_zeros((rows * width, qkv.shape[1])).index_copy_(0, flat, qkv)
            qkv = qkv.view(rows, width, -1)
            q = qkv[..., :q_size].view(rows, width, self.heads, d)
            k = qkv[..., q_size : q_size + kv_size].view(rows, width, self.kv_heads, d)
            v = qkv[..., q_size + kv_size :].view(rows, width, self.kv_heads, d)
            if layer.q_norm is not None:
                q, k = layer.q_norm(q), layer.k_norm(k)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q = (q * cos) + (rotate_half(q) * sin)  # type: ignore[no-untyped-call]
            k = (k * cos) + (rotate_half(k) * sin)  # type: ignore[no-untyped-call]
            keys, values = cache.layers[index].update(k, v)
            span = keys.shape[2]
            # The query heads of a key/value head together: (rows x kv heads, group x
            # width, d) against (rows x kv heads, d, positions); the mask is an additive
            # bias (0 or -inf) folded into the product.
            scores = torch.baddbmm(
                bias,
                q.reshape(rows * self.kv_heads, groups * width, d),
                keys.reshape(rows * self.kv_heads, span, d).transpose(1, 2),
                alpha=layer.scaling,
            )
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype)
            attended = torch.bmm(probs, values.reshape(rows * self.kv_heads, span, d))
            # back to (rows x width, heads x d), heads in the model's order
            attended = attended.view(rows, self.heads, width, d).transpose(1, 2)
            attended = attended.reshape(rows * width, q_size)
            if flat is not None:
                attended = attended.index_select(0, flat)
            hidden = residual + layer.o(attended)
            residual = hidden
            gate, up = layer.gate_up(layer.norm2(hidden)).chunk(2, dim=-1)
            hidden = residual + layer.down(F.silu(gate) * up)
        if logits == "none":
            return None
        if logits == "last":  # each row's last real token (rows are packed or all full)
            hidden = hidden.index_select(0, counts.cumsum(0) - 1)
        return self.head(self.final_norm(hidden))

    def _bias(self, mask: torch.Tensor, width: int) -> torch.Tensor:
        """The attention mask of a step as an additive bias, (rows x kv heads, group x
        width, cache positions + width): -inf where a query must not look (the holes of
        its row, this step's later tokens), 0 elsewhere."""
        rows, past = mask.shape
        groups = self.heads // self.kv_heads
        bias = torch.zeros((rows, 1, 1, width, past + width), dtype=self.dtype, device=mask.device)
        bias[..., :past].masked_fill_((mask == 0).view(rows, 1, 1, 1, past), float("-inf"))
        causal = torch.ones((width, width), dtype=torch.bool, device=mask.device).triu(1)
        bias[..., past:].masked_fill_(causal, float("-inf"))
        return bias.expand(rows, self.kv_heads, groups, width, past + width).reshape(
            rows * self.kv_heads, groups * width, past + width
        )


#: Decode steps after the prompt that :func:`self_check` compares (the prompt's last
#: position is one more).
CHECK_STEPS = 4
#: How far :func:`self_check` lets the fused step's logits be from the model's own forward
#: pass, as a fraction of the logits' scale, per dtype (the fused step runs in float32
#: only, see ``HFBackend._fused_reason``). Measured in float32 (2026-12-03, torch 2.13,
#: transformers 5.24, 1 and 2 threads): on SmolLM2-135M at most 2.2e-6 of the scale
#: (max |Δ| 5e-5 on logits of scale 31 with the check's prompt, 8e-5 of 37 with prompts of
#: 866 tokens); on the tests' random Llama, Qwen2, Mistral and Qwen3 models at most 3e-7
#: (their logits are below 1: the scale is 1). Rotary embeddings turned the other way or
#: left out move those tiny models' logits by 3.6e-4 to 9e-2.
CHECK_TOLERANCE = {"float32": 1e-4}


def self_check(
    model: Any, step: FusedStep, prompts: list[list[int]], tolerance: float
) -> dict[str, Any]:
    """``step`` against the model's own forward pass on ``prompts`` (a ragged batch: the
    shorter rows' prefill blocks have holes), at the prompts' last position and for
    :data:`CHECK_STEPS` greedy decode steps after it: the fused step prefills the prompts
    into a reserved cache and decodes from it, the reference is the model's own forward
    pass (``model(...)``, its LM head included) on each row alone, over transformers' own
    ``DynamicCache``. Both continue with the reference's greedy token.

    A position fails when a logit differs by more than ``tolerance`` times the scale of
    the reference's logits there (their largest finite magnitude, at least 1), when the
    two are not finite at the same logits, or when the greedy tokens differ although the
    reference's best two are further apart than that. Returns ``rows``, ``tokens``
    (positions compared per row), ``max_abs_diff``, ``tolerance`` (the largest absolute
    tolerance applied), ``relative_tolerance`` and, on a failure, ``failed_at`` (the
    position, 1 = the prompt's last token) with that position's ``diff`` and
    ``allowed``."""
    from pytest_llmeval.model._kv import reserved_cache

    rows = len(prompts)
    lengths = [len(p) for p in prompts]
    longest = max(lengths)
    device = step.embed.weight.device
    shape = (rows, step.kv_heads, longest + CHECK_STEPS + 1, step.head_dim)
    buffers = [
        (
            torch.zeros(shape, dtype=step.dtype, device=device),
            torch.zeros(shape, dtype=step.dtype, device=device),
        )
        for _ in step.layers
    ]
    cache = reserved_cache(buffers, 0, CHECK_STEPS + 1)
    block = torch.zeros((rows, longest), dtype=torch.long, device=device)
    for i, prompt in enumerate(prompts):
        block[i, : len(prompt)] = torch.tensor(prompt, device=device)
    counts = torch.tensor(lengths, device=device).unsqueeze(1)
    real = (torch.arange(longest, device=device) < counts).long()
    positions = torch.arange(longest, device=device).expand(rows, -1)
    empty = torch.zeros((rows, 0), dtype=torch.long, device=device)
    fused = step(block, positions, empty, cache, lengths, logits="last")
    mask = real  # the shorter rows' block positions past their prompts are holes
    # transformers 5.2x renamed the forward pass's `past_key_values` to `cache`.
    params = inspect.signature(model.forward).parameters
    cache_arg = "cache" if "cache" in params else "past_key_values"
    own_caches = [DynamicCache() for _ in prompts]
    inputs = [torch.tensor([p], device=device) for p in prompts]
    worst = allowed_most = 0.0
    result: dict[str, Any] = {"rows": rows, "tokens": 0}
    for t in range(CHECK_STEPS + 1):
        assert fused is not None
        own = torch.cat(
            [
                model(input_ids=ids, use_cache=True, logits_to_keep=1, **{cache_arg: kv})
                .logits[:, -1]
                .to(fused.dtype)
                for ids, kv in zip(inputs, own_caches, strict=True)
            ]
        )
        diff, allowed, agree = _compare(fused, own, tolerance)
        worst, allowed_most = max(worst, diff), max(allowed_most, allowed)
        result["tokens"] = t + 1
        if not agree:
            result.update(failed_at=t + 1, diff=diff, allowed=allowed)
            break
        if t == CHECK_STEPS:
            break
        chosen = own.argmax(-1)
        inputs = list(chosen.view(rows, 1, 1))
        fused = step(chosen.unsqueeze(1), mask.sum(1, keepdim=True), mask, cache)
        mask = torch.cat([mask, mask.new_ones((rows, 1))], 1)
    result.update(max_abs_diff=worst, tolerance=allowed_most, relative_tolerance=tolerance)
    return result


def _compare(fused: torch.Tensor, own: torch.Tensor, tolerance: float) -> tuple[float, float, bool]:
    """One position of :func:`self_check`: the largest difference of the finite logits,
    the absolute tolerance there, and whether the two agree."""
    finite = torch.isfinite(own)
    if not torch.equal(finite, torch.isfinite(fused)):
        return float("inf"), 0.0, False
    diff = float((fused - own).abs()[finite].max()) if bool(finite.any()) else 0.0
    scale = max(1.0, float(own.abs()[finite].max())) if bool(finite.any()) else 1.0
    allowed = tolerance * scale
    # A greedy token may differ only where the model's own best two are that close.
    top = own.masked_fill(~finite, float("-inf")).topk(2, dim=-1).values
    clear = ((top[:, 0] - top[:, 1]) > allowed) & finite.all(-1)
    tokens_differ = bool(((fused.argmax(-1) != own.argmax(-1)) & clear).any())
    return diff, allowed, diff <= allowed and not tokens_differ
