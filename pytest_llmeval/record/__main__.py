"""Offline tools for run directories.

``python -m pytest_llmeval.record diff RUN_A RUN_B``
    exit 0 when both runs have the same item records (apart from timing fields) and the
    same task scores, else print the differing items and exit 1.
``python -m pytest_llmeval.record compare RUN BASELINE [--fail EXPR]``
    the baseline comparison of ``--llm-baseline``, for runs that already exist.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_llmeval._errors import LlmEvalError
from pytest_llmeval.record._compare import (
    compare_runs,
    format_comparison,
    gate_failures,
    load_run,
    parse_gate,
)
from pytest_llmeval.record._rundir import strip_timing


def _diff(a: str, b: str) -> int:
    run_a, run_b = load_run(Path(a)), load_run(Path(b))
    problems: list[str] = []
    for task in sorted(set(run_a.items) | set(run_b.items)):
        items_a, items_b = run_a.items.get(task, {}), run_b.items.get(task, {})
        for item_id in sorted(set(items_a) | set(items_b)):
            ra, rb = items_a.get(item_id), items_b.get(item_id)
            if ra is None or rb is None:
                problems.append(f"{task} {item_id}: only in {'B' if ra is None else 'A'}")
            elif strip_timing(ra) != strip_timing(rb):
                fields = sorted(
                    k
                    for k in set(ra) | set(rb)
                    if strip_timing(ra).get(k) != strip_timing(rb).get(k)
                )
                problems.append(f"{task} {item_id}: differs in {', '.join(fields)}")
        score_a = run_a.metrics.get(task, {}).get("score")
        score_b = run_b.metrics.get(task, {}).get("score")
        if score_a != score_b:
            problems.append(f"{task}: score {score_a} != {score_b}")
        print(f"{task}: {len(items_a)} vs {len(items_b)} items, score {score_a} vs {score_b}")
    for line in problems:
        print(line)
    print(
        "identical apart from timing fields" if not problems else f"{len(problems)} difference(s)"
    )
    return 0 if not problems else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_llmeval.record",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    diff = sub.add_parser("diff", help="are two runs identical apart from timing?")
    diff.add_argument("run_a")
    diff.add_argument("run_b")
    cmp_ = sub.add_parser("compare", help="compare a run with a baseline run")
    cmp_.add_argument("run")
    cmp_.add_argument("baseline")
    cmp_.add_argument("--fail", default=None, help="gate expression, e.g. drop:2:sig,config")
    args = parser.parse_args(argv)
    try:
        if args.command == "diff":
            return _diff(args.run_a, args.run_b)
        comparison = compare_runs(load_run(Path(args.run)), load_run(Path(args.baseline)))
        for line in format_comparison(comparison):
            print(line)
        failures = gate_failures(comparison, parse_gate(args.fail)) if args.fail else []
        for failure in failures:
            print(f"GATE ({args.fail}): {failure}")
        return 1 if failures else 0
    except (LlmEvalError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
