"""One decode step, the model's own forward pass against the HF backend's fused step.

    python -m tools.decode_step [--rows 8] [--context 1000] [--width 1] [--steps 24]
        [--model smollm2-135m]

Lays out a cache as continuous batching does (``--rows`` rows of about ``--context``
positions, ragged: each row a few dozen positions shorter than the one before, the rest a
masked hole), then runs greedy steps over the same cache twice: with transformers' forward
pass and LM head, and with ``model/_step.py``'s ``FusedStep``. ``--width`` above 1 times
the fused step on that many tokens per row (a prompt-lookup check). Prints the median
milliseconds per step of each, their ratio, whether the greedy tokens agreed and the
largest logit difference. Needs ``pip install -e ".[hf]"``; CPU, float32, the threads
``OMP_NUM_THREADS`` gives torch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any


def _cache(model: Any, rows: int, context: int) -> tuple[Any, Any]:
    import torch

    from pytest_llmeval.model._kv import reserved_cache

    decoder = model.get_decoder()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (1, context), generator=gen)
    with torch.inference_mode():
        state = decoder(input_ids=ids, use_cache=True).past_key_values
    lengths = [max(1, context - 37 * i) for i in range(rows)]
    layers = []
    for layer in state.layers:
        keys = layer.keys.new_zeros((rows, layer.keys.shape[1], context + 400, layer.keys.shape[3]))
        values = torch.zeros_like(keys)
        for i, length in enumerate(lengths):
            keys[i, :, :length] = layer.keys[0, :, :length]
            values[i, :, :length] = layer.values[0, :, :length]
        layers.append((keys, values))
    mask = torch.zeros((rows, context), dtype=torch.long)
    for i, length in enumerate(lengths):
        mask[i, :length] = 1
    return reserved_cache(layers, context, 400), mask


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.decode_step")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--context", type=int, default=1000)
    parser.add_argument("--width", type=int, default=1, help="tokens per row per fused step")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--model", default="smollm2-135m")
    ns = parser.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM

    from pytest_llmeval.model import resolve_model_path
    from pytest_llmeval.model._step import FusedStep

    model: Any = AutoModelForCausalLM.from_pretrained(
        resolve_model_path(ns.model), dtype=torch.float32
    )
    model.eval()
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    fused = FusedStep(model, ns.rows)

    def run(kind: str, width: int) -> tuple[float, list[list[int]], list[Any]]:
        cache, mask = _cache(model, ns.rows, ns.context)
        tokens = torch.full((ns.rows, width), 28, dtype=torch.long)
        times, chosen, logits = [], [], []
        with torch.inference_mode():
            for _ in range(ns.steps):
                began = time.perf_counter()
                positions = mask.sum(1, keepdim=True) + torch.arange(width)
                if kind == "fused":
                    packed = fused(tokens, positions, mask, cache)
                    assert packed is not None
                    out = packed.view(ns.rows, width, -1)
                else:
                    hidden = decoder(
                        input_ids=tokens,
                        attention_mask=torch.cat([mask, mask.new_ones(tokens.shape)], 1),
                        position_ids=positions,
                        use_cache=True,
                        cache=cache,
                    ).last_hidden_state
                    out = head(hidden)
                mask = torch.cat([mask, mask.new_ones(tokens.shape)], 1)
                tokens = out[:, -1:].argmax(-1).repeat(1, width)
                times.append(time.perf_counter() - began)
                chosen.append(tokens[:, 0].tolist())
                logits.append(out[:, -1])
        return statistics.median(times[3:]) * 1e3, chosen, logits

    own_ms, own_tokens, own_logits = run("transformers", 1)
    fused_ms, fused_tokens, fused_logits = run("fused", 1)
    diff = max(float((a - b).abs().max()) for a, b in zip(own_logits, fused_logits, strict=True))
    print(
        f"{ns.rows} rows, ~{ns.context} cache positions, {torch.get_num_threads()} thread(s): "
        f"transformers {own_ms:.1f} ms/step, fused {fused_ms:.1f} ms/step "
        f"({own_ms / fused_ms:.2f}x); greedy tokens "
        f"{'identical' if own_tokens == fused_tokens else 'DIFFERENT'} over {ns.steps} steps, "
        f"max |logit difference| {diff:.1e}"
    )
    if ns.width > 1:
        wide_ms, _, _ = run("fused", ns.width)
        print(
            f"fused, {ns.width} tokens per row: {wide_ms:.1f} ms/step "
            f"({wide_ms / fused_ms:.2f}x one token's step)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
