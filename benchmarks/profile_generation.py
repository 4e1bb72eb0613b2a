"""Where generation time goes: our HF backend on a generative task, under cProfile.

    python -m benchmarks.profile_generation [--task gsm8k] [--items 32] [--chunk-items 8|all]
        [--batch-size 8] [--model smollm2-135m] [--data-dir ../shared/benchmarks]

Runs ``TaskRunner.run`` on the first ``--items`` items of a task (``--chunk-items`` at a
time, as ``benchmarks.speed`` does; ``all``: one call, continuous batching over all of
them) and prints the wall time split into parts, each measured by cProfile as the time
spent inside the named functions (cumulative, so a part includes what it calls):

- prefill and decode steps: the decoder's calls on prompts (cached few-shot prefixes and
  each prompt's own tokens) and on one new token per running row, timed by forward hooks;
- LM head: the next-token logits, one row per running sequence;
- stop checks: giving each row its token (decoding its text and looking for the stop
  sequences after every token, as lm-eval does);
- cache layout: continuous batching's admissions (each running row's state without its
  holes, one new cache for all rows) and rows leaving the batch;
- the decoder's time (prefill and decode steps together) split into its linear layers,
  attention (``scaled_dot_product_attention``) and the rest of the layer code (norms,
  rotary embeddings, reshapes, cache writes, Python).

Also the decode steps' rows: how full the batch was. Needs ``pip install -e ".[hf]"``.
Profiling slows Python-heavy parts more than the matrix products; compare runs made the
same way, not with ``benchmarks.speed``'s wall times.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.lmeval_compare import DEFAULT_DATA_DIR
from benchmarks.lmeval_tasks import load_spec, select_items
from pytest_llmeval.eval import ChatSettings, TaskRunner
from pytest_llmeval.model import ModelSettings, load_backend


def _cumulative(stats: pstats.Stats, file_part: str, function: str) -> float:
    """Cumulative seconds of the functions named ``function`` in files containing
    ``file_part`` (the outermost calls only: recursion is not counted twice)."""
    total = 0.0
    for (path, _, name), (_, _, _, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        if name == function and file_part in path:
            total += cumulative
    return total


def _own(stats: pstats.Stats, function: str) -> float:
    """Own (total) seconds of built-in functions named ``function``."""
    total = 0.0
    for (_, _, name), (_, _, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if function in name:
            total += own
    return total


def breakdown(
    stats: pstats.Stats, total: float, prefill: float, decode: float
) -> list[tuple[str, float]]:
    """The run's wall time in disjoint parts (``prefill``/``decode``: the decoder calls on
    several tokens per row / on one, timed by hooks), then the decoder's own split."""
    head = _cumulative(stats, "_hf.py", "_head")
    take = _cumulative(stats, "_hf.py", "_take")
    layout = (
        _cumulative(stats, "_hf.py", "_laid_out")
        + _cumulative(stats, "_hf.py", "_row_state")
        + _cumulative(stats, "cache_utils.py", "batch_select_indices")
    )
    linear = max(0.0, _own(stats, "_nn.linear") - head)
    attention = _own(stats, "scaled_dot_product_attention")
    rest = total - prefill - decode - head - take - layout
    decoder = prefill + decode
    return [
        ("prefill: decoder on prompts (after cached prefixes)", prefill),
        ("decode steps: decoder on one token per row", decode),
        ("LM head (next-token rows only)", head),
        ("stop checks (text decoded after every token)", take),
        ("cache layout (admissions, rows leaving)", layout),
        ("the rest (tokenizing, scoring, Python)", rest),
        ("decoder (prefill + decode): linear layers", linear),
        ("decoder (prefill + decode): attention", attention),
        (
            "decoder (prefill + decode): norms, rotary, cache, Python",
            decoder - linear - attention,
        ),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_generation")
    parser.add_argument("--task", default="gsm8k", help="a generative task type (gsm8k, bbh)")
    parser.add_argument("--items", type=int, default=32)
    parser.add_argument("--chunk-items", default="8", help="items per call, or 'all'")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    ns = parser.parse_args(argv)
    import torch

    dirs = (ns.data_dir,)
    spec = load_spec(ns.task)
    if spec.mode != "generate":
        parser.error(f"--task {ns.task}: not a generative task")
    items, _ = select_items(spec, dirs, ns.items)
    items = items[: ns.items]
    chunk = len(items) if ns.chunk_items == "all" else int(ns.chunk_items)
    backend: Any = load_backend(
        ModelSettings(model=ns.model, device="cpu", dtype="float32", batch_size=ns.batch_size)
    )
    runner = TaskRunner(spec, dirs, ChatSettings(mode="off"))
    runner.run(items[:1], backend)  # warm-up (its prefix is forgotten below)
    backend.clear_prefix_cache()
    rows: list[int] = []
    calls: list[tuple[int, float]] = []  # (tokens per row, started)
    seconds = {"prefill": 0.0, "decode": 0.0}

    def before(module: Any, args: Any, kwargs: Any) -> None:
        ids = kwargs.get("input_ids")
        width = int(ids.shape[1]) if ids is not None else 0
        if width == 1:
            rows.append(int(ids.shape[0]))
        calls.append((width, time.perf_counter()))

    def after(module: Any, args: Any, kwargs: Any, output: Any) -> None:
        width, began = calls.pop()
        seconds["decode" if width == 1 else "prefill"] += time.perf_counter() - began

    hooks = [
        backend._decoder.register_forward_pre_hook(before, with_kwargs=True),
        backend._decoder.register_forward_hook(after, with_kwargs=True),
    ]
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    results = []
    for start in range(0, len(items), chunk):
        results += runner.run(items[start : start + chunk], backend)
    profile.disable()
    total = time.perf_counter() - started
    for hook in hooks:
        hook.remove()
    stats = pstats.Stats(profile)
    tokens = sum(len(backend.tokenizer.encode(r.output)) for r in results)
    print(
        f"{ns.task}: {len(results)} items, {chunk} per call, batch size {ns.batch_size}, "
        f"{torch.get_num_threads()} torch thread(s): {total:.1f}s under cProfile, "
        f"~{tokens} tokens generated"
    )
    print(
        f"decode steps: {len(rows)}, rows per step: mean {sum(rows) / max(1, len(rows)):.2f} "
        f"of {ns.batch_size} ({100 * sum(rows) / max(1, len(rows) * ns.batch_size):.0f}% full)"
    )
    for label, part in breakdown(stats, total, seconds["prefill"], seconds["decode"]):
        print(f"  {label:<58} {part:7.1f}s  {100 * part / total:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
