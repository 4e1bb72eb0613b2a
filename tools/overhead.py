"""What the pytest machinery costs: collection time of a whole task, and the share of a run's
wall time that is not model work.

    python -m tools.overhead [--task mmlu] [--items 1000] [--model smollm2-135m]
                                  [--data-dir ../shared/benchmarks]

1. Collects the whole task (``pytest benchmarks/<task>.yaml --collect-only``) and reports
   pytest's own collection time for all its items.
2. Runs ``--llm-limit N`` items of the task through pytest in a subprocess, as a user would,
   timing the whole process; the run's item records carry the runner's time per item
   (prompt building, the backend's batched call, scoring), and loading the model is timed
   in this process. Overhead = wall - model loading - runner time: interpreter and pytest
   start-up, collection, the per-item test protocol, reports, records, the summary.

It is a measurement to run by hand, not a test (no timing assertions anywhere in tests).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _pytest(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--task", default="mmlu")
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "benchmarks")
    args = parser.parse_args(argv)
    spec = f"benchmarks/{args.task}.yaml"
    data = f"--llm-data-dir={args.data_dir}"

    proc, wall = _pytest(spec, "--collect-only", "-q", f"--llm-model={args.model}", data)
    found = re.search(r"(\d+) tests? collected in ([0-9.]+)s", proc.stdout)
    if not found:
        print(proc.stdout[-2000:], proc.stderr[-2000:])
        return 1
    print(
        f"collection: {found.group(1)} items of {args.task} in {found.group(2)} s "
        f"(pytest's count; {wall:.2f} s with interpreter start-up)"
    )

    from pytest_llmeval.model import ModelSettings, load_backend

    started = time.perf_counter()
    load_backend(ModelSettings(model=args.model))
    load = time.perf_counter() - started

    with tempfile.TemporaryDirectory() as out:
        proc, wall = _pytest(
            spec, f"--llm-model={args.model}", data, f"--llm-limit={args.items}",
            f"--llm-output={out}", "--llm-show=none", "-q",
        )  # fmt: skip
        records = [
            json.loads(line)
            for path in Path(out).glob("*/tasks/*_output.jsonl")
            for line in path.read_text().splitlines()
        ]
    if len(records) != args.items:
        print(proc.stdout[-3000:], proc.stderr[-2000:])
        print(f"expected {args.items} item records, found {len(records)}")
        return 1
    runner = sum(float(r["seconds"]) for r in records)
    overhead = wall - load - runner
    print(
        f"run of {args.items} items: wall {wall:.1f} s = model loading {load:.1f} s "
        f"+ runner (prompts, model, scoring) {runner:.1f} s + pytest machinery "
        f"{overhead:.1f} s ({100 * overhead / wall:.1f}% of the wall time, "
        f"{1000 * overhead / args.items:.1f} ms per item); "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
