"""Agreement of two backends on the same items: what switching inference framework changes.

Runs the first ``--limit`` items of each task through backend A, then backend B (the same
prompts, through :class:`~pytest_llmeval.eval.TaskRunner`), and writes one JSON record with
per-item predictions, log-likelihoods and outputs and a summary per task::

    python -m pytest_llmeval.eval.agreement --task benchmarks/mmlu.yaml --limit 20 \\
        --a hf:smollm2-135m --b openai:http://127.0.0.1:8080/v1@smollm2-135m \\
        --data-dir ../shared/benchmarks --out agreement.json

A backend is ``hf:MODEL`` (a model directory or embedded alias, loaded in this process) or
``openai:BASE_URL@MODEL`` (an OpenAI-compatible server and its served model name).

The summary of a task: ``items``; ``same_prediction`` (share of items where both backends
pick the same choice, or extract the same answer); ``same_correctness``; ``score_a``,
``score_b``, ``difference`` (B - A) with its paired 95% interval; the exact McNemar p-value
of the correct/wrong flips; for multiple choice ``mean_abs_dlogprob`` and
``max_abs_dlogprob`` over every choice's log-likelihood; for generation
``identical_output`` (share of byte-identical outputs). ``report.agreement``
(a file) records a file's summary and SHA256 in a pytest run's eval config.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_llmeval import _json as strict_json
from pytest_llmeval._errors import LlmEvalError
from pytest_llmeval.dataset import env_data_dirs, first_n, load_items, path_list
from pytest_llmeval.eval import ChatSettings, ItemResult, TaskRunner
from pytest_llmeval.model import Backend, ModelSettings, load_backend
from pytest_llmeval.scorer import accuracy, mcnemar_exact, paired_difference
from pytest_llmeval.task import load_task_spec

FORMAT = "pytest-llmeval/agreement/1"


def parse_backend(spec: str, base: ModelSettings) -> ModelSettings:
    """``hf:MODEL``, ``vllm:MODEL`` or ``openai:BASE_URL@MODEL`` as settings (the rest from
    ``base``)."""
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ValueError(f"{spec!r}: expected hf:MODEL, vllm:MODEL or openai:BASE_URL@MODEL")
    if kind in ("hf", "vllm"):
        return ModelSettings(**{**_fields(base), "model": rest, "backend": kind})
    if kind == "openai":
        url, at, model = rest.rpartition("@")
        if not at or not url or not model:
            raise ValueError(f"{spec!r}: expected openai:BASE_URL@MODEL")
        return ModelSettings(
            **{**_fields(base), "model": model, "backend": "openai", "base_url": url}
        )
    raise ValueError(f"{spec!r}: unknown backend {kind!r} (hf, vllm or openai)")


def _fields(settings: ModelSettings) -> dict[str, Any]:
    return {name: getattr(settings, name) for name in settings.__dataclass_fields__}


def _side(result: ItemResult) -> dict[str, Any]:
    """What one backend answered for an item."""
    side: dict[str, Any] = {
        "correct": result.correct,
        "score": result.score,
        "prediction": result.extracted,
    }
    if result.choices:
        side.update(pred=result.pred, pred_norm=result.pred_norm, logprobs=result.logprobs)
    else:
        side.update(
            output=result.output,
            finish_reason=result.finish_reason,
            n_output_tokens=result.n_output_tokens,
        )
    return side


def compare_results(a: Sequence[ItemResult], b: Sequence[ItemResult]) -> dict[str, Any]:
    """Per-item pairs and the summary of one task (``a`` and ``b`` in the same item order)."""
    if [r.item_id for r in a] != [r.item_id for r in b]:
        raise ValueError("the two backends' results are not of the same items")
    items = []
    deltas: list[float] = []
    for x, y in zip(a, b, strict=True):
        entry: dict[str, Any] = {
            "item_id": x.item_id,
            "subset": x.subset,
            "target": x.target,
            "a": _side(x),
            "b": _side(y),
            "same_prediction": x.extracted == y.extracted,
            "same_correctness": x.correct == y.correct,
            "same_prompt": x.prompt == y.prompt,
        }
        if x.choices:
            entry["gold"] = x.gold
            item_deltas = [abs(p - q) for p, q in zip(x.logprobs, y.logprobs, strict=True)]
            deltas.extend(item_deltas)
            entry["max_abs_dlogprob"] = max(item_deltas, default=0.0)
        else:
            entry["identical_output"] = x.output == y.output
        items.append(entry)
    n = len(items)
    flips_a = sum(1 for x, y in zip(a, b, strict=True) if x.correct and not y.correct)
    flips_b = sum(1 for x, y in zip(a, b, strict=True) if y.correct and not x.correct)
    diff = paired_difference([r.score for r in a], [r.score for r in b])
    summary: dict[str, Any] = {
        "items": n,
        "same_prompt": _share(e["same_prompt"] for e in items),
        "same_prediction": _share(e["same_prediction"] for e in items),
        "same_correctness": _share(e["same_correctness"] for e in items),
        "score_a": accuracy([r.score for r in a]).value,
        "score_b": accuracy([r.score for r in b]).value,
        "difference": diff.value,
        "difference_ci95": [diff.ci_low, diff.ci_high],
        "correct_only_a": flips_a,
        "correct_only_b": flips_b,
        "mcnemar_p": mcnemar_exact(flips_a, flips_b),
    }
    if a and a[0].choices:
        summary["mean_abs_dlogprob"] = sum(deltas) / len(deltas) if deltas else float("nan")
        summary["max_abs_dlogprob"] = max(deltas, default=float("nan"))
        ordered = sorted(deltas)
        summary["abs_dlogprob_quantiles"] = {
            f"p{q}": ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]
            if ordered
            else None
            for q in (50, 90, 99)
        }
    else:
        summary["identical_output"] = _share(e["identical_output"] for e in items)
        summary["not_fitting"] = sum(
            1
            for x, y in zip(a, b, strict=True)
            if "context_overflow" in {x.finish_reason, y.finish_reason}
        )
    return {"summary": summary, "items": items}


def _share(flags: Any) -> float:
    values = [bool(f) for f in flags]
    return sum(values) / len(values) if values else float("nan")


def _pct(x: Any) -> str:
    return "n/a" if not isinstance(x, (int, float)) or math.isnan(x) else f"{100 * x:.1f}%"


def summary_line(record: Mapping[str, Any]) -> str:
    """One line: both backends and, per task, the headline agreement numbers."""
    parts = []
    for task, s in sorted((record.get("summary") or {}).items()):
        text = (
            f"{task} {s.get('items')} items: same prediction {_pct(s.get('same_prediction'))}, "
            f"score {_pct(s.get('score_a'))} vs {_pct(s.get('score_b'))} "
            f"(McNemar p {float(s.get('mcnemar_p', float('nan'))):.3g})"
        )
        if "mean_abs_dlogprob" in s:
            text += f", mean |Δ logprob| {float(s['mean_abs_dlogprob']):.3g}"
        if "identical_output" in s:
            text += f", identical outputs {_pct(s.get('identical_output'))}"
        parts.append(text)
    a = (record.get("a") or {}).get("spec")
    b = (record.get("b") or {}).get("spec")
    return f"agreement {a} (A) vs {b} (B): " + "; ".join(parts)


def read_agreement(path: Path) -> tuple[dict[str, Any], str]:
    """An agreement file's record and its SHA256; ``LlmEvalError`` when it is not one."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LlmEvalError(f"cannot read {path}: {exc}") from None
    try:
        record = json.loads(data)
    except ValueError as exc:
        raise LlmEvalError(f"{path}: not JSON: {exc}") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise LlmEvalError(
            f"{path}: not an agreement record (expected format {FORMAT!r}; write one with "
            "python -m pytest_llmeval.eval.agreement)"
        )
    return record, hashlib.sha256(data).hexdigest()


def run_agreement(
    tasks: Sequence[Path],
    a: ModelSettings,
    b: ModelSettings,
    *,
    limit: int | None,
    data_dirs: Sequence[Path],
    labels: tuple[str, str] = ("A", "B"),
    chat: str = "off",
) -> dict[str, Any]:
    """Evaluate the tasks' first ``limit`` items on both backends (A first, then B, one
    model loaded at a time) and compare them. ``chat``: the chat template mode of both
    (``off``: raw text; ``on``/``auto``: as ``prompt.chat_template``, given on the command
    line)."""
    runners = []
    for path in tasks:
        spec = load_task_spec(path)
        runner = TaskRunner(spec, data_dirs, ChatSettings(mode=chat, forced=chat != "off"))
        items = first_n(load_items(spec, runner.data_dirs), limit)
        runners.append((runner, items))
    results: list[list[list[ItemResult]]] = []
    infos = []
    timing: list[dict[str, Any]] = []
    for settings in (a, b):
        started = time.perf_counter()
        backend: Backend | None = load_backend(settings)
        assert backend is not None
        loaded = time.perf_counter() - started
        infos.append(dict(backend.info()))
        seconds: dict[str, float] = {}
        results.append([])
        for runner, items in runners:
            started = time.perf_counter()
            results[-1].append(runner.run(items, backend))
            seconds[runner.spec.name] = time.perf_counter() - started
        timing.append({"load_s": loaded, "run_s": seconds})
        close = getattr(backend, "close", None)
        if callable(close):
            close()  # the vllm backend's engine processes
        backend = None  # release the model before loading the next one
    per_task = {}
    for k, (runner, _) in enumerate(runners):
        compared = compare_results(results[0][k], results[1][k])
        compared["spec"] = str(tasks[k])
        compared["mode"] = runner.spec.mode
        compared["metric"] = runner.spec.metric
        per_task[runner.spec.name] = compared
    return {
        "format": FORMAT,
        "created": _dt.datetime.now().isoformat(timespec="seconds"),
        "a": {"spec": labels[0], "info": infos[0], "timing": timing[0]},
        "b": {"spec": labels[1], "info": infos[1], "timing": timing[1]},
        "limit": limit,
        "chat_template": chat,
        "seed": a.seed,
        "data_dirs": [str(d) for d in data_dirs],
        "summary": {name: t["summary"] for name, t in per_task.items()},
        "tasks": per_task,
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_llmeval.eval.agreement",
        description="Run the same benchmark items through two backends and record how far "
        "they agree (predictions, correctness, scores, log-likelihoods, outputs).",
    )
    parser.add_argument(
        "--task", action="append", required=True, type=Path, help="a task spec (repeatable)"
    )
    parser.add_argument("--limit", type=int, default=None, help="the first N items per task")
    parser.add_argument(
        "--a", required=True, help="backend A: hf:MODEL, vllm:MODEL or openai:URL@MODEL"
    )
    parser.add_argument(
        "--b", required=True, help="backend B: hf:MODEL, vllm:MODEL or openai:URL@MODEL"
    )
    parser.add_argument(
        "--chat-template",
        choices=("off", "on", "auto"),
        default="off",
        help="render both backends' prompts with the model's chat template (default off)",
    )
    parser.add_argument(
        "--data-dir",
        action="append",
        default=[],
        help="benchmark data directory (repeatable; before LLMEVAL_DATA_DIR)",
    )
    parser.add_argument("--out", required=True, type=Path, help="the JSON record to write")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument(
        "--max-length", type=int, default=None, help="context window in tokens (both backends)"
    )
    parser.add_argument("--batch-size", type=int, default=8, help="hf batch size")
    parser.add_argument("--device", default="auto", help="hf device")
    parser.add_argument("--dtype", default="auto", help="hf dtype")
    parser.add_argument("--concurrency", type=int, default=4, help="openai requests in flight")
    parser.add_argument("--max-retries", type=int, default=5, help="openai retries")
    parser.add_argument("--request-timeout", type=float, default=600.0, help="openai seconds")
    parser.add_argument(
        "--api-key-env", default="OPENAI_API_KEY", help="openai: variable holding the API key"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be >= 1")
    base = ModelSettings(
        model="",
        device=args.device,
        dtype=args.dtype,
        batch_size=args.batch_size,
        seed=args.seed,
        max_length=args.max_length,
        api_key_env=args.api_key_env,
        concurrency=args.concurrency,
        max_retries=args.max_retries,
        request_timeout=args.request_timeout,
    )
    try:
        a = parse_backend(args.a, base)
        b = parse_backend(args.b, base)
    except ValueError as exc:
        parser.error(str(exc))
    data_dirs = [d for raw in args.data_dir for d in path_list(raw)] + env_data_dirs()
    try:
        record = run_agreement(
            args.task,
            a,
            b,
            limit=args.limit,
            data_dirs=[d.resolve() if d.exists() else d for d in data_dirs],
            labels=(args.a, args.b),
            chat=args.chat_template,
        )
    except LlmEvalError as exc:
        print(f"agreement: error: {exc}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + f".{os.getpid()}.tmp")
    tmp.write_text(strict_json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(args.out)
    print(summary_line(record))
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
