"""Batch-size invariance: the same items at several batch sizes, compared item by item.

    python -m tools.batch_invariance [--model smollm2-135m] [--tasks gsm8k:50,mmlu:100]
        [--batch-sizes 1,4,16] [--chat on,off] [--dtype float32] [--device cpu]
        [--data-dir DIR] [--out DIR]

Scores that change with the batch size are a frequent complaint about evaluation tools.
For each task, chat mode and batch size, a freshly loaded backend evaluates the task's
first items (``--llm-limit``'s selection), handed to the runner a batch at a time as the
pytest plugin does. Every batch size is compared with the first one given (the reference):

- multiple choice: the same argmax per item, the largest |log-likelihood difference| per
  choice, the same correctness;
- generation: identical output text, identical extracted answer and correctness; where two
  outputs differ, the first token where they part and the model's log-probabilities of the
  two tokens there, scored alone (a margin of a few 1e-5 is a near-tie that float rounding
  tipped differently in another batch composition; a large one would be a bug).

Writes ``invariance.json`` (every item) and ``invariance.md`` (the table) into ``--out``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_llmeval.dataset import first_n, load_items
from pytest_llmeval.eval import ChatSettings, ItemResult, TaskRunner
from pytest_llmeval.model import Backend, LoglikelihoodRequest, ModelSettings, load_backend
from pytest_llmeval.task import load_task_spec
from tools.lmeval_tasks import BENCHMARKS, REPO

DEFAULT_DATA_DIR = REPO.parent / "shared" / "benchmarks"


def _run(
    task: str, n: int, chat: str, batch_size: int, args: argparse.Namespace
) -> tuple[list[ItemResult], Backend, float]:
    spec = load_task_spec(BENCHMARKS / f"{task}.yaml")
    dirs = [Path(d) for d in args.data_dir]
    items = first_n(load_items(spec, dirs), n)
    backend = load_backend(
        ModelSettings(model=args.model, device=args.device, dtype=args.dtype, batch_size=batch_size)
    )
    runner = TaskRunner(spec, dirs, ChatSettings(mode=chat, forced=True))
    started = time.perf_counter()
    results: list[ItemResult] = []
    for start in range(0, len(items), batch_size):
        results.extend(runner.run(items[start : start + batch_size], backend))
    return results, backend, time.perf_counter() - started


def divergence(backend: Backend, prompt: str, a: str, b: str) -> dict[str, Any]:
    """Where two generations of one prompt part (first differing token of their encodings)
    and the model's log-probability of each of the two tokens there."""
    tokenizer = backend.tokenizer  # type: ignore[attr-defined]
    ta = tokenizer(a, add_special_tokens=False)["input_ids"]
    tb = tokenizer(b, add_special_tokens=False)["input_ids"]
    j = 0
    while j < min(len(ta), len(tb)) and ta[j] == tb[j]:
        j += 1
    if j >= min(len(ta), len(tb)):
        return {"token_index": j, "note": "one output is a prefix of the other"}
    context = prompt + tokenizer.decode(ta[:j])
    pair = [tokenizer.decode(ta[j : j + 1]), tokenizer.decode(tb[j : j + 1])]
    scored = backend.loglikelihood([LoglikelihoodRequest(context, c) for c in pair])
    return {
        "token_index": j,
        "tokens": pair,
        "logprobs": [s.logprob for s in scored],
        "margin": abs(scored[0].logprob - scored[1].logprob),
    }


def compare(
    reference: Sequence[ItemResult], other: Sequence[ItemResult], backend: Backend
) -> dict[str, Any]:
    rows = []
    for r, o in zip(reference, other, strict=True):
        row: dict[str, Any] = {"item_id": r.item_id, "correct": [r.correct, o.correct]}
        if r.choices:
            deltas = [abs(x - y) for x, y in zip(r.logprobs, o.logprobs, strict=True)]
            row.update(pred=[r.pred, o.pred], max_delta=max(deltas))
        else:
            row.update(
                identical=r.output == o.output,
                extracted=[r.extracted, o.extracted],
            )
            if r.output != o.output:
                row["divergence"] = divergence(backend, r.prompt, r.output or "", o.output or "")
        rows.append(row)
    n = len(rows)
    summary: dict[str, Any] = {
        "items": n,
        "same_correctness": sum(row["correct"][0] == row["correct"][1] for row in rows),
    }
    if rows and "pred" in rows[0]:
        summary["same_argmax"] = sum(row["pred"][0] == row["pred"][1] for row in rows)
        summary["max_abs_delta_ll"] = max((row["max_delta"] for row in rows), default=0.0)
    else:
        summary["identical_outputs"] = sum(row["identical"] for row in rows)
        summary["same_extracted"] = sum(row["extracted"][0] == row["extracted"][1] for row in rows)
        margins = [
            row["divergence"]["margin"] for row in rows if "margin" in row.get("divergence", {})
        ]
        summary["divergence_margins"] = sorted(margins)
    return {"summary": summary, "items": rows}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.batch_invariance")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tasks", default="gsm8k:50,mmlu:100", help="task:items, comma-separated")
    parser.add_argument("--batch-sizes", default="1,4,16")
    parser.add_argument("--chat", default="on,off", help="chat template modes to run")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--data-dir", action="append", default=None)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    args.data_dir = args.data_dir or [str(DEFAULT_DATA_DIR)]
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    tasks = [(t.split(":")[0], int(t.split(":")[1])) for t in args.tasks.split(",")]
    out = args.out or REPO / ".llmeval" / "invariance" / datetime.datetime.now().strftime(
        "%Y%m%d-%H%M%S"
    )
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"options": vars(args) | {"out": str(out)}, "runs": []}
    lines = [
        "| task | chat template | batch size | items | same argmax / identical outputs "
        "| same extracted answer | same correctness | max \\|Δ ll\\| | score | seconds |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for task, n in tasks:
        for chat in args.chat.split(","):
            reference: list[ItemResult] | None = None
            for size in sizes:
                results, backend, seconds = _run(task, n, chat, size, args)
                score = sum(r.score for r in results) / max(1, len(results))
                entry: dict[str, Any] = {
                    "task": task,
                    "chat": chat,
                    "batch_size": size,
                    "seconds": seconds,
                    "score": score,
                }
                if reference is None:
                    reference = results
                    entry["reference"] = True
                    cells = ["reference"] * 3 + ["-"]
                else:
                    cmp = compare(reference, results, backend)
                    entry.update(cmp)
                    s = cmp["summary"]
                    same = s.get("same_argmax", s.get("identical_outputs"))
                    cells = [
                        f"{same}/{s['items']}",
                        f"{s.get('same_extracted', s.get('same_argmax'))}/{s['items']}",
                        f"{s['same_correctness']}/{s['items']}",
                        f"{s['max_abs_delta_ll']:.1e}" if "max_abs_delta_ll" in s else "-",
                    ]
                report["runs"].append(entry)
                lines.append(
                    f"| {task} | {chat} | {size} | {len(results)} | "
                    + " | ".join(cells)
                    + f" | {100 * score:.1f}% | {seconds:.0f} |"
                )
                print(lines[-1], flush=True)
                (out / "invariance.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "invariance.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"report: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
