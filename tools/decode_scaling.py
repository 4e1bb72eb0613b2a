"""How the HF backend's generation cost grows with batch size and output length, on a tiny
long-context model (what only shows at scale, measured where it can be: the CPU).

A random Llama (2 layers, hidden 64, 32k positions; the default model's tokenizer) runs
``HFBackend.generate`` on requests with a stop sequence that never occurs (a random
model's rows end at their budget or, now and then, at an EOS, after which the next
request is admitted as in a real run), for each batch size of ``--batch-sizes`` and
output length of ``--lengths``, with twice as many requests as rows so that rows are
admitted while others decode. It times, per run:

- the whole generation, and per generated token;
- every admission's re-layout of the batch's cache (``HFBackend._laid_out``): calls, total
  seconds, and the cache positions laid out (rows x positions), which grows with the
  tokens the running rows already hold, not with the new rows' prompts;
- every stop-sequence check (``HFBackend._take`` with a stop sequence that never occurs).

    python -m tools.decode_scaling --batch-sizes 1,4,16 --lengths 256,1024

Prints a Markdown table. A benchmark, not a test: no assertion on time.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_llmeval.model import GenerateRequest, ModelSettings, resolve_model_path


def tiny_long_context_model(target: Path, tokenizer_from: Path) -> Path:
    """A random 2-layer Llama with 32768 positions and ``tokenizer_from``'s tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_from)
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tok),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=32768,
            eos_token_id=tok.eos_token_id,
            bos_token_id=tok.bos_token_id,
            pad_token_id=tok.eos_token_id,
        )
    )
    model.save_pretrained(target)
    tok.save_pretrained(target)
    return target


def run_one(backend: Any, rows: int, length: int, prompt: str) -> dict[str, float]:
    laid: list[tuple[float, int]] = []
    takes: list[float] = []
    original_laid_out, original_take = backend._laid_out, backend._take

    def timed_laid_out(states: Any, reserve: int) -> Any:
        started = time.perf_counter()
        cache, mask = original_laid_out(states, reserve)
        laid.append((time.perf_counter() - started, int(mask.shape[0] * mask.shape[1])))
        return cache, mask

    def timed_take(row: Any, token: int, finite: bool) -> bool:
        started = time.perf_counter()
        goes_on = original_take(row, token, finite)
        takes.append(time.perf_counter() - started)
        return bool(goes_on)

    backend._laid_out, backend._take = timed_laid_out, timed_take
    batch_size, backend._batch_size = backend._batch_size, rows
    # a stop sequence that never occurs: every token is checked
    requests = [
        GenerateRequest(f"{prompt} {i}", max_new_tokens=length, stop=("\x00never\x00",))
        for i in range(2 * rows)
    ]
    started = time.perf_counter()
    results = backend.generate(requests)
    total = time.perf_counter() - started
    backend._laid_out, backend._take = original_laid_out, original_take
    backend._batch_size = batch_size
    tokens = sum(r.n_tokens for r in results)
    return {
        "rows": rows,
        "length": length,
        "tokens": tokens,
        "seconds": total,
        "ms_per_token": 1e3 * total / max(1, tokens),
        "layouts": len(laid),
        "layout_s": sum(t for t, _ in laid),
        "layout_positions": sum(p for _, p in laid),
        "take_ms_per_token": 1e3 * sum(takes) / max(1, len(takes)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", default="1,4,16")
    parser.add_argument("--lengths", default="256,1024")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--tokenizer", default="smollm2-135m", help="model name or directory")
    args = parser.parse_args(argv)
    from pytest_llmeval.model import load_backend

    with tempfile.TemporaryDirectory() as tmp:
        path = tiny_long_context_model(Path(tmp) / "m", resolve_model_path(args.tokenizer))
        backend: Any = load_backend(ModelSettings(model=str(path), batch_size=1))
        words = " ".join(f"word{i % 97}" for i in range(args.prompt_tokens))
        prompt = backend.tokenizer.decode(backend.tokenizer.encode(words)[: args.prompt_tokens])
        print(
            f"tiny Llama (2 layers, hidden 64, 32768 positions), {args.prompt_tokens}-token "
            f"prompts, decode step {backend.decode_step_plan()['step']}, 2 x rows requests"
        )
        print(
            "| rows | output tokens each | tokens | s | ms/token | re-layouts | re-layout s "
            "| positions laid out | stop check ms/token |"
        )
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for length in [int(x) for x in args.lengths.split(",")]:
            for rows in [int(x) for x in args.batch_sizes.split(",")]:
                r = run_one(backend, rows, length, prompt)
                print(
                    f"| {rows} | {length} | {r['tokens']:.0f} | {r['seconds']:.1f} "
                    f"| {r['ms_per_token']:.2f} | {r['layouts']:.0f} | {r['layout_s']:.2f} "
                    f"| {r['layout_positions']:.0f} | {r['take_ms_per_token']:.3f} |"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
