"""The run report's size and speed budget, measured: a full MMLU run and a 1,000-item run.

    python -m tools.report_budget [--items 14042 --items 1000] [--loads 5]
                                       [--data-dir ../shared/benchmarks] [--keep DIR]

For each size it writes a run directory in the plugin's layout (``tasks/mmlu_output.jsonl``,
``metrics_summary.json``, ``eval_config.json``) whose items carry the real MMLU prompts
(the shipped spec's 5-shot prompts rendered from the local data by ``TaskRunner.prepare``;
no model) and made-up per-choice log-likelihoods (seeded; the prediction is their argmax),
builds ``report.html`` with ``write_report`` and opens it in headless Chromium
(``tools/chromium.py``) ``--loads`` times, each in a fresh tab:

- size of the file;
- build time (reading the records and writing the page);
- load: from the navigate command to the page's load event;
- interactive: from the navigate command until the page's script has parsed the data and
  drawn the item browser (the ``data-ready`` mark, polled every 10 ms), and the page's own
  clock for the same moment (``performance.now()`` when the script finished);
- filter: the time the page takes to show only the wrong items of the task (a click on the
  "wrong" button, timed inside the page).

The local MMLU data has 13,202 test items (51 of 57 subjects); a 14,042-item run repeats
the first 840 of them under new ids (``mmlu-<subject>-r<k>``) so that the count and the
subjects' mix are those of the full test set. It is a measurement to run by hand, not a
test (no timing assertions anywhere in tests).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_llmeval.dataset import first_n, load_items
from pytest_llmeval.eval import ItemResult, TaskRunner
from pytest_llmeval.gate import summary_document
from pytest_llmeval.record import write_report
from pytest_llmeval.scorer import accuracy
from pytest_llmeval.task import load_task_spec

from .chromium import Chromium

REPO = Path(__file__).resolve().parents[1]


def synthesize_run(path: Path, n: int, data_dir: Path, seed: int = 0) -> Path:
    """A run directory of ``n`` MMLU items with real prompts and seeded log-likelihoods."""
    spec = load_task_spec(REPO / "benchmarks" / "mmlu.yaml")
    runner = TaskRunner(spec, [data_dir])
    items = first_n(load_items(spec, [data_dir]), n)  # round-robin over subjects, as --llm-limit
    rng = random.Random(seed)
    (path / "tasks").mkdir(parents=True)
    scores = []
    with (path / "tasks" / "mmlu_output.jsonl").open("w", encoding="utf-8") as fh:
        for k in range(n):
            item = items[k % len(items)]
            prepared = runner.prepare(item)
            logprobs = [-rng.uniform(0.2, 4.0) for _ in prepared.choices]
            pred = max(range(len(logprobs)), key=logprobs.__getitem__)
            correct = pred == prepared.gold
            scores.append(float(correct))
            item_id = item.id if k < len(items) else f"mmlu-{item.subset}-r{k - len(items)}"
            record = ItemResult(
                task="mmlu",
                item_id=item_id,
                subset=item.subset,
                correct=correct,
                score=float(correct),
                prompt=prepared.prompt,
                target=prepared.target,
                fewshot_ids=list(prepared.fewshot_ids),
                choices=list(prepared.choices),
                logprobs=logprobs,
                is_greedy=[i == pred for i in range(len(logprobs))],
                pred=pred,
                pred_norm=pred,
                gold=prepared.gold,
                acc=float(correct),
                acc_norm=float(correct),
                extracted=prepared.choices[pred],
                extractor="loglikelihood (acc)",
                seconds=0.05,
                config_hash="synthetic",
            ).to_dict()
            fh.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
    estimate = accuracy(scores)
    summary = {
        "mmlu": {
            "n": n,
            "total_items": 14042,
            "partial": n < 14042,
            "metric": "acc",
            "score": estimate.value,
            "mean": estimate.value,
            "stderr": estimate.stderr,
            "ci95": [estimate.ci_low, estimate.ci_high],
            "floor": 0.25,
            "status": "pass" if estimate.value >= 0.25 else "fail",
            "seconds": 0.05 * n,
            "config_hash": "synthetic",
        }
    }
    (path / "metrics_summary.json").write_text(json.dumps(summary_document(summary), indent=1))
    config = {
        "model": "synthetic (made-up log-likelihoods)",
        "started": "2026-12-01T00:00:00",
        "tasks": {
            "mmlu": {
                "metric": "acc",
                "prompt": {"fewshot_separator": spec.prompt.fewshot_separator},
                "total_items": 14042,
                "config_hash": "synthetic",
            }
        },
    }
    (path / "eval_config.json").write_text(json.dumps(config, indent=1))
    return path


FILTER_WRONG = """
(() => {
  const t0 = performance.now();
  document.querySelector('#browser button[data-status="wrong"]').click();
  const ms = performance.now() - t0;
  return [ms, Number(document.querySelector('#browser .count').getAttribute('data-count'))];
})()
"""


def measure(html: Path, loads: int) -> dict[str, Any]:
    load_s, ready_s, page_ms, filter_ms = [], [], [], []
    wrong = None
    with Chromium.launch() as browser:
        for _ in range(loads):
            page = browser.new_page(1280, 900)
            began = time.perf_counter()
            load_s.append(page.goto(html.resolve().as_uri()))
            page.wait_for("document.documentElement.getAttribute('data-ready')", interval=0.01)
            ready_s.append(time.perf_counter() - began)
            page_ms.append(float(page.evaluate("window.llmevalReady")))
            ms, wrong = page.evaluate(FILTER_WRONG)
            filter_ms.append(float(ms))
            problems = page.problems()
            if problems:
                raise SystemExit(f"the page reported problems: {problems}")
            page.send("Page.close")
    return {
        "load_s": load_s,
        "ready_s": ready_s,
        "page_ready_ms": page_ms,
        "filter_ms": filter_ms,
        "wrong_items": wrong,
    }


def _ms(values: list[float], scale: float = 1000.0) -> str:
    return f"{statistics.median(values) * scale:.0f} ms (max {max(values) * scale:.0f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.report_budget", description=__doc__)
    parser.add_argument("--items", type=int, action="append", help="run sizes (repeatable)")
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "benchmarks")
    parser.add_argument("--keep", type=Path, default=None, help="write the runs here and keep them")
    args = parser.parse_args(argv)
    sizes = args.items or [14042, 1000]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        for n in sizes:
            run = synthesize_run(root / f"mmlu-{n}", n, args.data_dir)
            began = time.perf_counter()
            html = write_report(run)
            build = time.perf_counter() - began
            result = measure(html, args.loads)
            size = html.stat().st_size
            rows.append(
                f"| {n:,} | {size / 1e6:.2f} MB | {build:.1f} s | {_ms(result['load_s'])} "
                f"| {_ms(result['ready_s'])} | {_ms(result['page_ready_ms'], 1.0)} "
                f"| {_ms(result['filter_ms'], 1.0)} |"
            )
            print(
                f"{n} items: {size:,} bytes, built in {build:.2f} s; "
                f"{json.dumps({k: v for k, v in result.items()}, default=str)}"
            )
    print()
    print(
        "| items | report.html | build | load event | interactive (wall) "
        "| interactive (page clock) | filter to wrong |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(row)
    print(f"(median of {args.loads} loads in headless Chromium, max in brackets)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
