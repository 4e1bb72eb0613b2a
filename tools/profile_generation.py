"""Where generation time goes: our HF backend on a generative task, under cProfile.

    python -m tools.profile_generation [--task gsm8k] [--items 32] [--chunk-items 8|all]
        [--batch-size 8] [--decode-step auto|transformers] [--prompt-lookup K]
        [--model smollm2-135m] [--data-dir ../shared/benchmarks]

Runs ``TaskRunner.run`` on the first ``--items`` items of a task (``--chunk-items`` at a
time, as ``tools.speed`` does; ``all``: one call, continuous batching over all of
them) and prints the wall time split into parts, each measured by cProfile as the time
spent inside the named functions (cumulative, so a part includes what it calls):

- prefill: cached few-shot prefixes and each prompt's own tokens (``_prefix_state`` and
  ``_prefill``: the fused step in blocks or transformers' forward pass, and the LM head
  on each prompt's last token);
- decode steps: the backend's ``_step`` (one new token per running row, and its
  prompt-lookup draft), whichever way it runs (``--decode-step``), with its LM head;
- stop checks: giving each row its token (decoding its text and looking for the stop
  sequences after every token, as lm-eval does);
- cache layout: continuous batching's admissions (each running row's state without its
  holes, one new cache for all rows) and rows leaving the batch (the prompt blocks' own
  layout is prefill's);
- on the ``transformers`` path, the decoder's time (prefill and decode steps together)
  split into its linear layers, attention (``scaled_dot_product_attention``) and the rest
  of the layer code (norms, rotary embeddings, reshapes, cache writes, Python).

Also the decode steps' rows (how full the batch was) and tokens per row (1, or more with
prompt-lookup drafts). Needs ``pip install -e ".[hf]"``.
Profiling slows Python-heavy parts more than the matrix products; compare runs made the
same way, not with ``tools.speed``'s wall times.
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

from pytest_llmeval.eval import ChatSettings, TaskRunner
from pytest_llmeval.model import ModelSettings, load_backend
from tools.lmeval_compare import DEFAULT_DATA_DIR
from tools.lmeval_tasks import load_spec, select_items


def _cumulative(stats: pstats.Stats, file_part: str, function: str) -> float:
    """Cumulative seconds of the functions named ``function`` in files containing
    ``file_part`` (the outermost calls only: recursion is not counted twice)."""
    total = 0.0
    for (path, _, name), (_, _, _, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        if name == function and file_part in path:
            total += cumulative
    return total


def _largest(stats: pstats.Stats, file_part: str, function: str) -> float:
    """The largest cumulative seconds among the functions named ``function`` in files
    containing ``file_part`` (a method that calls others of its name: the outer one)."""
    times = [
        cumulative
        for (path, _, name), (_, _, _, cumulative, _) in stats.stats.items()  # type: ignore[attr-defined]
        if name == function and file_part in path
    ]
    return max(times, default=0.0)


def _called_from(stats: pstats.Stats, function: str, caller: str) -> float:
    """Cumulative seconds of the ``_hf.py`` function ``function`` when called by ``caller``."""
    total = 0.0
    for (path, _, name), entry in stats.stats.items():  # type: ignore[attr-defined]
        if name == function and "_hf.py" in path:
            for (_, _, calling), timing in entry[4].items():
                if calling == caller:
                    total += timing[3]
    return total


def _own(stats: pstats.Stats, function: str) -> float:
    """Own (total) seconds of built-in functions named ``function``."""
    total = 0.0
    for (_, _, name), (_, _, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if function in name:
            total += own
    return total


def breakdown(
    stats: pstats.Stats, total: float, decoder_prefill: float, decode: float
) -> list[tuple[str, float]]:
    """The run's wall time in disjoint parts (``decode``: the backend's decode steps, LM
    head included), then the decoder's own split (the ``transformers`` path;
    ``decoder_prefill``: the decoder's calls outside decode steps, timed by hooks)."""
    prefill = _cumulative(stats, "_hf.py", "_prefix_state") + _cumulative(
        stats, "_hf.py", "_prefill"
    )
    take = _cumulative(stats, "_hf.py", "_take")
    layout = (
        _cumulative(stats, "_hf.py", "_laid_out")
        - _called_from(stats, "_laid_out", "_prefill")
        + _cumulative(stats, "_hf.py", "_row_state")
        - _called_from(stats, "_row_state", "_prefill")
        # the cache's method, which calls each layer's method of the same name
        + _largest(stats, "cache_utils.py", "batch_select_indices")
    )
    linear = max(0.0, _own(stats, "_nn.linear") - _cumulative(stats, "_hf.py", "_head"))
    attention = _own(stats, "scaled_dot_product_attention")
    rest = total - prefill - decode - take - layout
    decoder = decoder_prefill + decode
    return [
        ("prefill: prompts after cached prefixes, first token's LM head", prefill),
        ("decode steps: one token per row (and its draft), LM head", decode),
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
    parser = argparse.ArgumentParser(prog="python -m tools.profile_generation")
    parser.add_argument("--task", default="gsm8k", help="a generative task type (gsm8k, bbh)")
    parser.add_argument("--items", type=int, default=32)
    parser.add_argument("--chunk-items", default="8", help="items per call, or 'all'")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--decode-step", default="auto", help="auto (default) or transformers")
    parser.add_argument("--prompt-lookup", type=int, default=5, help="draft tokens (0: none)")
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
        ModelSettings(
            model=ns.model,
            device="cpu",
            dtype="float32",
            batch_size=ns.batch_size,
            decode_step=ns.decode_step,
            prompt_lookup=ns.prompt_lookup,
        )
    )
    runner = TaskRunner(spec, dirs, ChatSettings(mode="off"))
    runner.run(items[:1], backend)  # warm-up (its prefix is forgotten below)
    backend.clear_prefix_cache()
    rows: list[int] = []
    widths: list[int] = []
    calls: list[float] = []  # when each decoder call outside a decode step started
    seconds = {"prefill": 0.0, "decode": 0.0}
    stepping = [False]
    step = backend._step

    def timed_step(tokens: Any, *args: Any) -> Any:
        rows.append(int(tokens.shape[0]))
        widths.append(int(tokens.shape[1]))
        began = time.perf_counter()
        stepping[0] = True
        try:
            return step(tokens, *args)
        finally:
            stepping[0] = False
            seconds["decode"] += time.perf_counter() - began

    backend._step = timed_step

    def before(module: Any, args: Any, kwargs: Any) -> None:
        calls.append(time.perf_counter())

    def after(module: Any, args: Any, kwargs: Any, output: Any) -> None:
        began = calls.pop()
        if not stepping[0]:
            seconds["prefill"] += time.perf_counter() - began

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
        f"of {ns.batch_size} ({100 * sum(rows) / max(1, len(rows) * ns.batch_size):.0f}% full), "
        f"tokens per row {sum(widths) / max(1, len(widths)):.2f}; "
        f"decode step: {backend.info()['decode_step']}"
    )
    parts = breakdown(stats, total, seconds["prefill"], seconds["decode"])
    if backend.info()["decode_step"]["step"] == "fused":
        parts = parts[:5]  # the decoder split below times transformers' own layers only
    for label, part in parts:
        print(f"  {label:<58} {part:7.1f}s  {100 * part / total:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
