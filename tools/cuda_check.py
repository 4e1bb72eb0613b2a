"""The CUDA path of the HF backend, checked in one run on a GPU machine.

    python -m tools.cuda_check --model DIR --data-dir DIR [--chat auto|on|off]
        [--out report.json]

What it checks and measures, with the real model and real benchmark items:

- shared prefixes (few-shot block cached, a question's context run once for its options,
  generation reusing the prefix) against scoring every row from scratch, in float32:
  max |delta log-likelihood|, identical argmax, identical greedy generations; items/s of each;
- batch invariance: MMLU and GSM8K items at batch sizes 1, 4 and 16 against the default 8
  (per-item argmax and log-likelihoods, generated text);
- bfloat16 against float32 (argmax agreement, accuracy of each);
- ``--llm-batch-size auto`` (the size found and how long finding it took);
- ``--llm-set hf.device_map=auto`` (accelerate's placement) against plain placement.

Every prompt goes through the model's chat template unless ``--chat off`` (default ``auto``,
the plugin's default: on when the model has one); the report records the mode. Parity with
lm-evaluation-harness on the GPU is ``tools.parity --device cuda --dtype bfloat16
--chat`` (lm-eval must be installed there); ``tools/gpu_check.sh`` runs both.

It prints one JSON report (and writes it to --out). It is a check to run by hand on a GPU
machine, not a test: CI has no GPU.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from pytest_llmeval.dataset import first_n, load_items
from pytest_llmeval.eval import ChatSettings, ItemResult, TaskRunner
from pytest_llmeval.model import ModelSettings, load_backend
from pytest_llmeval.task import load_task_spec

SPECS = Path(__file__).resolve().parent


def _timed(runner: TaskRunner, items: list[Any], backend: Any) -> tuple[list[ItemResult], float]:
    import torch

    gpu = torch.cuda.is_available()
    if gpu:
        torch.cuda.synchronize()
    started = time.perf_counter()
    out = runner.run(items, backend)
    if gpu:
        torch.cuda.synchronize()
    return out, time.perf_counter() - started


def _compare(a: list[ItemResult], b: list[ItemResult]) -> dict[str, Any]:
    if a and a[0].logprobs:
        deltas = [
            abs(x - y)
            for r, s in zip(a, b, strict=True)
            for x, y in zip(r.logprobs, s.logprobs, strict=True)
        ]
        return {
            "max_abs_delta_ll": max(deltas),
            "same_argmax": sum(r.pred == s.pred for r, s in zip(a, b, strict=True)),
        }
    return {"same_output": sum(r.output == s.output for r, s in zip(a, b, strict=True))}


def _score(results: list[ItemResult]) -> float:
    return round(sum(r.score for r in results) / max(1, len(results)), 4)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--mc-items", type=int, default=200)
    parser.add_argument("--gen-items", type=int, default=64)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of this script")
    parser.add_argument("--chat", choices=("auto", "on", "off"), default="auto")
    args = parser.parse_args(argv)

    import torch
    import transformers

    report: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "model": args.model,
        "chat_template": args.chat,
    }
    data = [args.data_dir]
    tasks: dict[str, tuple[TaskRunner, list[Any]]] = {}
    for name, n in (
        ("mmlu", args.mc_items),
        ("mmlu_continuation", args.mc_items),
        ("gsm8k", args.gen_items),
    ):
        path = SPECS / f"{name}.yaml"
        if not path.is_file():
            continue
        spec = load_task_spec(path)
        runner = TaskRunner(spec, data, ChatSettings(mode=args.chat, forced=True))
        tasks[name] = (runner, first_n(load_items(spec, data), n))

    def load(**kw: Any) -> Any:
        started = time.perf_counter()
        device = "auto" if kw.get("device_map") else args.device
        backend = load_backend(ModelSettings(model=args.model, device=device, **kw))
        return backend, round(time.perf_counter() - started, 2)

    f32, seconds = load(dtype="float32", batch_size=8)
    report["load_seconds"] = seconds
    reference: dict[str, list[ItemResult]] = {}
    for name, (runner, items) in tasks.items():
        runner.run(items[:8], f32)  # warm-up (kernels, allocator)
        f32._prefixes.clear()
        shared, t_shared = _timed(runner, items, f32)
        f32._share = False
        plain, t_plain = _timed(runner, items, f32)
        f32._share = True
        reference[name] = shared
        report[f"{name}_float32"] = {
            "items": len(items),
            "score": _score(shared),
            "items_per_s_shared": round(len(items) / t_shared, 2),
            "items_per_s_unshared": round(len(items) / t_plain, 2),
            **_compare(shared, plain),
        }
        print(json.dumps({name: report[f"{name}_float32"]}), flush=True)
    for size in (1, 4, 16):
        other, _ = load(dtype="float32", batch_size=size)
        for name in ("mmlu", "gsm8k"):
            runner, items = tasks[name]
            got: list[ItemResult] = []
            for start in range(0, len(items), size):
                got.extend(runner.run(items[start : start + size], other))
            report[f"batch_invariance_{name}_bs{size}_vs_bs8"] = _compare(got, reference[name])
        del other
    bf16, _ = load(dtype="bfloat16", batch_size=8)
    for name in ("mmlu", "gsm8k"):
        runner, items = tasks[name]
        out, t = _timed(runner, items, bf16)
        report[f"{name}_bfloat16_vs_float32"] = {
            "score_bf16": _score(out),
            "score_f32": _score(reference[name]),
            "items_per_s": round(len(items) / t, 2),
            **_compare(out, reference[name]),
        }
    del bf16
    started = time.perf_counter()
    auto, _ = load(dtype="float32", batch_size=0)
    report["auto_batch_size"] = {
        "batch_size": auto.batch_size,
        "source": auto.info()["batch_size_source"],
        "seconds": round(time.perf_counter() - started, 2),
    }
    del auto
    mapped, _ = load(dtype="float32", device_map="auto")
    runner, items = tasks["mmlu"]
    report["device_map_auto"] = {
        "device": str(mapped.device),
        **_compare(runner.run(items[:40], mapped), reference["mmlu"][:40]),
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
