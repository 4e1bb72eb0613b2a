"""Speed against lm-evaluation-harness: the parity runs, timed, and the machine's matmul rate.

    python -m tools.speed [--items 200] [--tasks mmlu,mmlu_continuation,gsm8k]
        [--batch-size 8] [--model smollm2-135m] [--data-dir ../shared/benchmarks] [--out DIR]

Needs ``pip install -e ".[hf,parity]"``. Runs what ``python -m tools.parity`` runs
(the same items through both tools, same model directory, dtype, device and batch size;
see :mod:`tools.lmeval_compare` for what is timed) and prints, per task type: items/s
of each tool (model time / end to end), the ratio ours / lm-eval (above 1: ours is faster),
the per-item agreement, and the share of the machine's measured float32 matmul rate that
each tool's forward passes reach (model FLOPs of the forward passes actually run / model
time, against the best GEMM rate measured here with torch on the same device, dtype and
thread count). A second table gives, per tool, generated tokens per second and the memory
traffic of its forward passes (at least: weights once per pass, keys and values once per
layer) against the machine's measured memory read rate, the bound of decoding a few rows.
A third gives each tool's peak memory (resident set) on the same items, each tool run
alone in a process of its own (:mod:`tools.peak_memory`; ``--no-memory`` skips it).
Then the parity criteria of the same runs, as ``python -m tools.parity`` prints them:
one run gives both. Writes ``speed.md`` (the tables), ``parity.txt`` (the
criteria) and ``speed.json`` (everything, with the per-item records) into ``--out``. Exit
status 1 when a parity criterion fails; nothing here asserts a speed.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from pytest_llmeval.model import resolve_model_path
from tools import parity, peak_memory
from tools.lmeval_compare import (
    PLUGIN_CHUNKS,
    Options,
    Report,
    TaskReport,
    format_table,
    markdown_table,
    out_dir,
    parse_args,
    quiet_libraries,
    run_all,
    stderr,
    write_json,
)


def matmul_shapes(config: Any) -> list[tuple[str, int, int, int]]:
    """(label, M, K, N) GEMMs: square ones and the model's own shapes for 2048 tokens (the
    LM head for 256 rows)."""
    hidden = int(config.hidden_size)
    inter = int(getattr(config, "intermediate_size", 4 * hidden))
    heads = int(config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    kv = int(getattr(config, "num_key_value_heads", heads)) * head_dim
    vocab = int(config.vocab_size)
    return [
        ("square 1024", 1024, 1024, 1024),
        ("square 2048", 2048, 2048, 2048),
        ("attention q/o 2048 tokens", 2048, hidden, heads * head_dim),
        ("attention k/v 2048 tokens", 2048, hidden, kv),
        ("mlp up 2048 tokens", 2048, hidden, inter),
        ("mlp down 2048 tokens", 2048, inter, hidden),
        ("lm head 256 rows", 256, hidden, vocab),
    ]


def _timed(run: Callable[[], Any], device: Any, min_seconds: float) -> tuple[int, float]:
    """Repetitions of ``run`` and their seconds: two warm-up calls, then at least three
    timed ones and at least ``min_seconds`` (on CUDA, synchronized every ten calls and at
    the end)."""
    import torch

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    with torch.inference_mode():
        for _ in range(2):
            run()
        sync()
        reps = 0
        started = time.perf_counter()
        while reps < 3 or time.perf_counter() - started < min_seconds:
            run()
            reps += 1
            if device.type == "cuda" and reps % 10:
                continue
            sync()
        sync()
        return reps, time.perf_counter() - started


def measure_matmul(opts: Options, min_seconds: float = 0.5) -> list[dict[str, Any]]:
    """GFLOP/s of ``torch.mm`` per shape (best of the timed repetitions' mean)."""
    import torch
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(resolve_model_path(opts.model))
    device = torch.device(opts.device)
    dtype = getattr(torch, opts.dtype)
    out = []
    for label, m, k, n in matmul_shapes(config):
        a = torch.randn(m, k, device=device, dtype=dtype)
        b = torch.randn(k, n, device=device, dtype=dtype)
        reps, seconds = _timed(lambda: torch.mm(a, b), device, min_seconds)  # noqa: B023
        out.append(
            {
                "shape": label,
                "m": m,
                "k": k,
                "n": n,
                "reps": reps,
                "gflop_per_s": 2.0 * m * k * n * reps / seconds / 1e9,
            }
        )
    return out


def measure_bandwidth(opts: Options, mib: int = 512, min_seconds: float = 0.5) -> dict[str, Any]:
    """GB/s at which torch reads memory on the run's device: ``torch.sum`` over a float32
    tensor of ``mib`` MiB (far above any cache), total bytes over the timed repetitions'
    time. The rate a forward pass can stream weights and keys/values at, at best."""
    import torch

    device = torch.device(opts.device)
    data = torch.ones(mib * 2**20 // 4, device=device, dtype=torch.float32)
    reps, seconds = _timed(data.sum, device, min_seconds)
    nbytes = data.numel() * data.element_size()
    return {"mib": mib, "reps": reps, "gb_per_s": nbytes * reps / seconds / 1e9}


def _rate(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def agreement(task: TaskReport) -> str:
    s = task.summary
    n = max(1, int(s["items"]))
    differ = int(s["items"]) - int(s["contexts_identical"])
    ctx = f"; CONTEXTS DIFFER in {differ}" if differ else ""
    if "argmax_identical" in s:
        return (
            f"argmax {100 * s['argmax_identical'] / n:.1f}% identical, "
            f"max |delta ll| {s['max_abs_delta']:.1e}{ctx}"
        )
    return f"outputs {100 * s['outputs_identical'] / n:.1f}% identical{ctx}"


def speed_rows(report: Report, peak: float) -> list[list[str]]:
    rows = []
    for t in report.tasks:
        lm = t.lmeval
        n = int(t.summary["items"])
        tools = [(t.task_type, t.ours, agreement(t))]
        tools += [
            (f"{t.task_type}, ours handed {label}", v, f"{v['same_as_first']}/{n} as the first")
            for label, v in t.ours_variants.items()
        ]
        if t.ours_hf is not None:
            same = t.ours_hf["same_as_vllm"]
            tools.append((f"{t.task_type}, ours on the hf backend", t.ours_hf, f"{same}/{n} alike"))
        for label, ours, agree in tools:
            ratio_model = ours["items_per_s_model"] / lm["items_per_s_model"]
            ratio_e2e = ours["items_per_s_end_to_end"] / lm["items_per_s_end_to_end"]
            # An engine in other processes (--engine vllm) is not hooked: no FLOP count.
            share = [
                f"{100 * x['model_gflop_per_s'] / peak:.1f}%" if x["forward"]["flops"] else "n/a"
                for x in (lm, ours)
            ]
            rows.append(
                [
                    label,
                    str(n),
                    f"{_rate(lm['items_per_s_model'])} / {_rate(lm['items_per_s_end_to_end'])}",
                    f"{_rate(ours['items_per_s_model'])} / {_rate(ours['items_per_s_end_to_end'])}",
                    f"{ratio_model:.2f}x / {ratio_e2e:.2f}x",
                    agree,
                    f"{share[0]} / {share[1]}",
                ]
            )
    return rows


SPEED_HEADER = [
    "task type",
    "items",
    "lm-eval items/s (model / e2e)",
    "ours items/s (model / e2e)",
    "ratio ours/lm-eval (model / e2e)",
    "per-item agreement",
    "matmul peak reached (lm-eval / ours)",
]
DETAIL_HEADER = [
    "task type",
    "tool",
    "setup s",
    "model s",
    "end-to-end s",
    "forward passes",
    "decoder tokens (without padding)",
    "LM-head rows",
    "model GFLOP",
    "GFLOP/s",
]


def detail_rows(report: Report) -> list[list[str]]:
    rows = []
    for t in report.tasks:
        tools = [("lm-eval", t.lmeval), ("ours", t.ours)]
        tools += [(f"ours handed {label}", v) for label, v in t.ours_variants.items()]
        tools += [("ours on the hf backend", t.ours_hf)] if t.ours_hf is not None else []
        for name, tool in tools:
            timing, fwd = tool["timing"], tool["forward"]
            rows.append(
                [
                    t.task_type,
                    name,
                    f"{timing['setup_s']:.2f}",
                    f"{timing['model_s']:.2f}",
                    f"{timing['end_to_end_s']:.2f}",
                    str(fwd["forward_calls"]),
                    f"{fwd['decoder_tokens']} ({fwd['real_tokens']})",
                    str(fwd["head_rows"]),
                    f"{fwd['flops'] / 1e9:.0f}",
                    f"{tool['model_gflop_per_s']:.1f}",
                ]
            )
    return rows


MEMORY_HEADER = [
    "task type",
    "tool",
    "generated tokens/s",
    "GB read (at least)",
    "GB/s",
    "read rate reached",
]


def generated_tokens(task: TaskReport) -> int | None:
    """Our output tokens over the task's items (None for scoring tasks). Where outputs
    are identical, lm-eval generated the same tokens."""
    total = 0
    for record in task.records:
        count = record.get("n_output_tokens")
        if count is None:
            return None
        total += int(count)
    return total if task.records else None


def memory_rows(report: Report, read_rate: float) -> list[list[str]]:
    """Per task and tool: generated tokens per second of model time, the bytes the forward
    passes read at least (``ForwardStats.bytes_read``), that over the model time, and its
    share of the measured read rate (``read_rate``, GB/s)."""
    rows = []
    for t in report.tasks:
        tokens = generated_tokens(t)
        tools = [("lm-eval", t.lmeval), ("ours", t.ours)]
        tools += [(f"ours handed {label}", v) for label, v in t.ours_variants.items()]
        tools += [("ours on the hf backend", t.ours_hf)] if t.ours_hf is not None else []
        for name, tool in tools:
            seconds = tool["timing"]["model_s"]
            read = tool["forward"].get("bytes_read")  # None: a report from before the count
            traffic = ["-", "-", "-"]
            if read and seconds:  # 0: an engine in other processes, not hooked
                per_s = read / 1e9 / seconds
                traffic = [f"{read / 1e9:.0f}", _rate(per_s), f"{100 * per_s / read_rate:.1f}%"]
            tokens_per_s = _rate(tokens / seconds) if tokens is not None and seconds else "-"
            rows.append([t.task_type, name, tokens_per_s, *traffic])
    return rows


def _handover(chunk_items: int | None) -> str:
    if chunk_items is None:
        return "all items in one call"
    if chunk_items == PLUGIN_CHUNKS:
        return "items as the pytest plugin does (multiple choice a batch per call, generation all)"
    return f"{chunk_items} items per call"


def _decode_step(info: Any) -> str:
    """How our backend ran decode steps, as its record says."""
    if not info:
        return "not recorded"
    if info.get("step") == "vllm":
        return "vLLM's engine"
    if info.get("step") == "fused":
        return f"fused ({info.get('kernels')}), prompt lookup {info.get('prompt_lookup')}"
    return f"transformers ({info.get('reason')})"


def render(
    report: Report,
    matmul: list[dict[str, Any]],
    markdown: bool,
    bandwidth: dict[str, Any] | None = None,
    peaks: dict[str, Any] | None = None,
) -> str:
    table = markdown_table if markdown else format_table
    peak = max(m["gflop_per_s"] for m in matmul)
    cfg = report.config
    opts = cfg["options"]
    head = (
        f"model {opts['model']} ({cfg['model_path']}), {opts['dtype']} on {opts['device']}, "
        f"batch size {opts['batch_size']} (both tools), {cfg['torch_threads']} torch thread(s); "
        f"ours handed {_handover(opts.get('chunk_items'))}; "
        f"torch {cfg['versions']['torch']}, transformers {cfg['versions']['transformers']}, "
        f"lm-eval {cfg['versions']['lm_eval']}; model loading: ours "
        f"{cfg['model_load_s']['ours']:.1f}s, lm-eval {cfg['model_load_s']['lmeval']:.1f}s "
        f"(not counted); our decode step: {_decode_step(cfg.get('ours_decode_step'))}"
    )
    matmul_rows = [[m["shape"], f"{m['m']}x{m['k']} @ {m['k']}x{m['n']}", f"{m['gflop_per_s']:.1f}"]
                   for m in matmul]  # fmt: skip
    parity = "passed" if report.passed else "FAILED (see the parity criteria in speed.json)"
    return "\n\n".join(
        [
            head,
            table(SPEED_HEADER, speed_rows(report, peak)),
            "items/s: items / wall time inside the tool's loglikelihood/generate calls (model) "
            "and of the whole evaluation call (e2e); ratio above 1: ours is faster. "
            f"Matmul peak: the best measured {opts['dtype']} GEMM rate, {peak:.1f} GFLOP/s; "
            "reached: model FLOPs of the forward passes run (2 x decoder parameters without "
            "the embedding table x decoder tokens incl. padding + 2 x LM-head parameters x "
            "LM-head rows + dense attention) / model time.",
            table(DETAIL_HEADER, detail_rows(report)),
            table(["GEMM", "shape", "GFLOP/s"], matmul_rows),
            *(_memory(report, bandwidth, table) if bandwidth else []),
            *(_peaks(peaks, table) if peaks else []),
            f"parity: {parity}",
        ]
    )


def _memory(report: Report, bandwidth: dict[str, Any], table: Any) -> list[str]:
    rate = float(bandwidth["gb_per_s"])
    return [
        table(MEMORY_HEADER, memory_rows(report, rate)),
        "generated tokens/s: our output tokens (the same as lm-eval's where outputs are "
        "identical) / model time. GB read (at least): the decoder's weights once per forward "
        "pass, the LM head's once per pass that ran it, each row's keys and values once per "
        "layer; GB/s: that / model time (prefill included); read rate: torch.sum over "
        f"{bandwidth['mib']} MiB on this device, {rate:.1f} GB/s.",
    ]


def _peaks(peaks: dict[str, Any], table: Any) -> list[str]:
    return [
        table(peak_memory.MEMORY_PEAK_HEADER, peak_memory.peak_rows(peaks)),
        "peak memory: resident-set peak (high-water mark) of each tool run alone in a process of "
        "its own (python -m tools.peak_memory) on the same items, batch size, dtype and "
        "device; by task: the peak so far after each task type; process peak: the child's "
        "peak at its end (the kernel's high-water mark, VmHWM).",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    with_memory = "--no-memory" not in args
    args = [a for a in args if a != "--no-memory"]
    opts = parse_args(args, "python -m tools.speed", __doc__.splitlines()[0])
    target = out_dir(opts, "speed")

    def finished(partial: Report) -> None:
        write_json(target / "speed.partial.json", partial.to_dict())

    with quiet_libraries():
        report = run_all(opts, log=stderr, each_task=finished)
    stderr("measuring the machine's matmul throughput and memory read rate ...")
    matmul = measure_matmul(opts)
    bandwidth = measure_bandwidth(opts)
    report.extra["matmul"] = matmul
    report.extra["bandwidth"] = bandwidth
    peaks = peak_memory.measure(args, log=stderr) if with_memory else None
    if peaks is not None:
        report.extra["peak_memory"] = peaks
    write_json(target / "speed.json", report.to_dict())
    (target / "speed.partial.json").unlink(missing_ok=True)
    markdown = render(report, matmul, markdown=True, bandwidth=bandwidth, peaks=peaks)
    (target / "speed.md").write_text(markdown + "\n", encoding="utf-8")
    (target / "parity.txt").write_text(parity.render(report) + "\n", encoding="utf-8")
    print(render(report, matmul, markdown=False, bandwidth=bandwidth, peaks=peaks))
    print("\n" + parity.render(report))
    print(f"report: {target / 'speed.md'}, {target / 'speed.json'}, {target / 'parity.txt'}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
