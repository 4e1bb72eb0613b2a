"""lm-eval tasks through ``pytest --llm-lmeval-tasks`` and through the ``lm_eval`` CLI.

    python -m tools.lmeval_items --tasks gsm8k_cot_local,ceval-valid-local --limit 8

runs the same harness tasks on the same documents (``--limit`` per leaf task) twice, one
process after the other, each timed end to end as a user runs it:

- ours: ``pytest --llm-model=MODEL --llm-lmeval-tasks=... --llm-set lmeval.include_path=DIR
  --llm-limit N`` (the plugin's HF backend);
- the harness: ``lm_eval --model hf --model_args pretrained=DIR --tasks ... --limit N
  --log_samples`` on the same model directory, dtype, device and batch size.

and then compares every document: the contexts (byte for byte), each choice's
log-likelihood (|difference| < 1e-4), each generation (identical text), and every
per-document metric value under every filter. ``--chat on`` runs both with the model's
chat template (``--apply_chat_template --fewshot_as_multiturn``). The task YAMLs are the
harness's own configs pointed at local data (``tools/lmeval_local.py``).

Writes ``DIR/comparison.json`` and prints a table; the exit status is 1 when any document
differs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tools.lmeval_local import write_local_tasks

REPO = Path(__file__).resolve().parents[1]
LL_TOLERANCE = 1e-4


def _run(cmd: Sequence[str], log: Path, env: Mapping[str, str]) -> float:
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as fh:
        done = subprocess.run(list(cmd), stdout=fh, stderr=subprocess.STDOUT, env=dict(env))
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):  # 1: pytest's "some items answered wrongly"
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise SystemExit(f"{cmd[0]} failed ({done.returncode}); see {log}:\n{tail}")
    return seconds


def run_ours(opts: argparse.Namespace, include: Path, out: Path, env: Mapping[str, str]) -> float:
    empty = out / "collect-nothing"
    empty.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "pytest", str(empty), "-q", "-p", "no:cacheprovider",
        f"--llm-model={opts.model}", f"--llm-lmeval-tasks={opts.tasks}",
        f"--llm-set=lmeval.include_path={include}", f"--llm-limit={opts.limit}",
        f"--llm-batch-size={opts.batch_size}", f"--llm-dtype={opts.dtype}",
        f"--llm-device={opts.device}", f"--llm-set=prompt.chat_template={opts.chat}",
        f"--llm-output={out / 'runs'}", "--llm-show=none",
    ]  # fmt: skip
    if opts.num_fewshot is not None:
        cmd.append(f"--llm-set=lmeval.num_fewshot={opts.num_fewshot}")
    return _run(cmd, out / "pytest.log", env)


def run_lmeval(
    opts: argparse.Namespace, include: Path, out: Path, model_dir: Path, env: Mapping[str, str]
) -> float:
    cmd = [
        sys.executable, "-m", "lm_eval", "run", "--model", "hf",
        "--model_args", f"pretrained={model_dir},dtype={opts.dtype}",
        "--device", opts.device, "--batch_size", str(opts.batch_size),
        "--tasks", opts.tasks, "--include_path", str(include), "--limit", str(opts.limit),
        "--log_samples", "--output_path", str(out / "lmeval"),
    ]  # fmt: skip
    if opts.chat == "on":
        cmd += ["--apply_chat_template", "--fewshot_as_multiturn"]
    if opts.num_fewshot is not None:
        cmd += ["--num_fewshot", str(opts.num_fewshot)]
    return _run(cmd, out / "lmeval.log", env)


def read_ours(runs: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """Our item records by harness task and document id."""
    (run,) = sorted(p for p in runs.iterdir() if p.is_dir())
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted((run / "tasks").glob("lmeval-*_output.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            task = record["task"].removeprefix("lmeval-")
            doc_id = int(record["item_id"].rsplit("-", 1)[1])
            out.setdefault(task, {})[doc_id] = record
    return out


def read_lmeval(root: Path) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """The harness's logged samples by task and document id (one line per filter)."""
    out: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for path in sorted(root.rglob("samples_*.jsonl")):
        task = path.name.removeprefix("samples_").rsplit("_", 1)[0]
        for line in path.read_text(encoding="utf-8").splitlines():
            sample = json.loads(line)
            out.setdefault(task, {}).setdefault(int(sample["doc_id"]), []).append(sample)
    return out


def _arguments(sample: Mapping[str, Any]) -> list[tuple[Any, Any]]:
    """A logged sample's request arguments, (context, continuation or generation kwargs)
    per request (lm-eval 0.4.13 logs ``{"gen_args_0": {"arg_0": ..., "arg_1": ...}}``)."""
    args = sample["arguments"]
    if isinstance(args, Mapping):
        return [(a["arg_0"], a.get("arg_1")) for a in args.values()]
    return [(a[0], a[1] if len(a) > 1 else None) for a in args]


def compare_document(ours: Mapping[str, Any], samples: Sequence[Mapping[str, Any]]) -> list[str]:
    """What differs between our record of a document and the harness's samples of it."""
    problems: list[str] = []
    first = samples[0]
    args = _arguments(first)
    if args[0][0] != ours["prompt"]:
        problems.append("context differs")
    if ours["choices"]:
        continuations = [a[1] for a in args]
        if continuations != ours["choices"]:
            problems.append("choices differ")
        theirs = [r[0][0] for r in first["resps"]]
        for i, (a, b) in enumerate(zip(theirs, ours["logprobs"], strict=False)):
            if not abs(float(a) - float(b)) < LL_TOLERANCE:
                problems.append(f"log-likelihood of choice {i}: {a} vs {b}")
    else:
        if first["resps"][0][0] != ours["output"]:
            problems.append("generation differs")
    metrics = ((ours.get("details") or {}).get("lmeval") or {}).get("metrics") or {}
    for sample in samples:
        for metric in sample["metrics"]:
            key = f"{metric},{sample['filter']}"
            a, b = sample[metric], metrics.get(key)
            same = a == b or (
                isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
            )
            if not same:
                problems.append(f"{key}: {a!r} vs {b!r}")
    return problems


def max_ll_difference(ours: Mapping[str, Any], samples: Sequence[Mapping[str, Any]]) -> float:
    if not ours["choices"]:
        return 0.0
    theirs = [float(r[0][0]) for r in samples[0]["resps"]]
    return max(abs(a - float(b)) for a, b in zip(theirs, ours["logprobs"], strict=False))


def compare(
    ours: Mapping[str, Mapping[int, Mapping[str, Any]]],
    theirs: Mapping[str, Mapping[int, Sequence[Mapping[str, Any]]]],
) -> dict[str, Any]:
    tasks: dict[str, Any] = {}
    for task in sorted(set(ours) | set(theirs)):
        mine, other = ours.get(task, {}), theirs.get(task, {})
        differing: dict[str, list[str]] = {}
        for doc_id in sorted(set(mine) | set(other)):
            if doc_id not in mine or doc_id not in other:
                differing[str(doc_id)] = ["only in " + ("ours" if doc_id in mine else "lm-eval")]
                continue
            problems = compare_document(mine[doc_id], other[doc_id])
            if problems:
                differing[str(doc_id)] = problems
        both = set(mine) & set(other)
        tasks[task] = {
            "documents": len(both),
            "identical": len(both) - len([d for d in differing if int(d) in both]),
            "max_ll_difference": max(
                (max_ll_difference(mine[d], other[d]) for d in both), default=0.0
            ),
            "differing": differing,
        }
    return tasks


def compare_aggregates(runs: Path, root: Path) -> dict[str, Any]:
    """Every task and group score of the harness's results file against ours
    (``lmeval_results.json``): the keys both report, and those that differ."""
    (run,) = sorted(p for p in runs.iterdir() if p.is_dir())
    ours = json.loads((run / "lmeval_results.json").read_text(encoding="utf-8"))
    mine = {**ours["tasks"], **ours["groups"]}
    (path,) = sorted(root.rglob("results_*.json"))
    theirs = json.loads(path.read_text(encoding="utf-8"))["results"]
    compared, differing = 0, []
    for name, metrics in theirs.items():
        for key, value in metrics.items():
            if "," not in key or "_stderr" in key or not isinstance(value, (int, float)):
                continue
            other = (mine.get(name) or {}).get(key)
            compared += 1
            if not isinstance(other, (int, float)) or not math.isclose(value, other):
                differing.append(f"{name} {key}: lm-eval {value} vs ours {other}")
    return {"compared": compared, "differing": differing}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="gsm8k_cot_local,ceval-valid-local")
    parser.add_argument("--limit", type=int, default=8, help="documents per leaf task")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--chat", choices=("on", "off"), default="off")
    parser.add_argument(
        "--num-fewshot", type=int, default=None, help="as lm_eval --num_fewshot (both tools)"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "benchmarks")
    parser.add_argument("--out", type=Path, default=Path("lmeval-items"))
    opts = parser.parse_args(argv)
    from pytest_llmeval.model import resolve_model_path

    out = opts.out.resolve()
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"--out {out} is not empty")
    include = out / "tasks"
    write_local_tasks(include, [opts.data_dir])
    model_dir = resolve_model_path(opts.model)
    env = {**os.environ, "OMP_NUM_THREADS": str(opts.threads), "HF_HUB_OFFLINE": "1"}
    env["HF_DATASETS_OFFLINE"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    ours_s = run_ours(opts, include, out / "ours", env)
    lmeval_s = run_lmeval(opts, include, out / "theirs", model_dir, env)
    tasks = compare(read_ours(out / "ours" / "runs"), read_lmeval(out / "theirs" / "lmeval"))
    aggregates = compare_aggregates(out / "ours" / "runs", out / "theirs" / "lmeval")
    documents = sum(t["documents"] for t in tasks.values())
    identical = sum(t["identical"] for t in tasks.values())
    result = {
        "tasks_option": opts.tasks,
        "limit": opts.limit,
        "chat": opts.chat,
        "num_fewshot": opts.num_fewshot,
        "model": opts.model,
        "dtype": opts.dtype,
        "device": opts.device,
        "batch_size": opts.batch_size,
        "threads": opts.threads,
        "seconds": {"ours": round(ours_s, 1), "lmeval": round(lmeval_s, 1)},
        "speedup": round(lmeval_s / ours_s, 2),
        "documents": documents,
        "identical": identical,
        "max_ll_difference": max((t["max_ll_difference"] for t in tasks.values()), default=0.0),
        "aggregates": aggregates,
        "tasks": tasks,
    }
    (out / "comparison.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(f"{'task':44} {'docs':>5} {'identical':>9} {'max |dll|':>10}")
    for name, t in tasks.items():
        print(f"{name:44} {t['documents']:5} {t['identical']:9} {t['max_ll_difference']:10.2e}")
    print(
        f"all: {identical}/{documents} documents identical; ours {ours_s:.1f} s, lm_eval "
        f"{lmeval_s:.1f} s ({result['speedup']}x)"
    )
    print(
        f"task and group scores: {aggregates['compared'] - len(aggregates['differing'])}/"
        f"{aggregates['compared']} equal"
        + "".join(f"\n  {line}" for line in aggregates["differing"])
    )
    same = identical == documents and documents > 0 and not aggregates["differing"]
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
