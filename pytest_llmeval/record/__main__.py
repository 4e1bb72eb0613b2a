"""Offline tools for run directories.

``python -m pytest_llmeval.record diff RUN_A RUN_B [--tol 1e-4]``
    exit 0 when both runs have the same item records (apart from timing fields; floats
    such as log-probabilities within ``--tol``) and the same task summaries (score, n,
    interval, floor, verdict), else print the differing items and exit 1.
``python -m pytest_llmeval.record compare RUN BASELINE [--fail EXPR]``
    the baseline comparison of ``--llm-baseline``, for runs that already exist.
``python -m pytest_llmeval.record report RUN [--baseline RUN] [--out FILE]``
    (re)build the run's ``report.html`` from its records alone (any run directory, also
    one written before the report existed, or an interrupted one).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_llmeval._errors import LlmEvalError
from pytest_llmeval.record._compare import (
    compare_runs,
    format_comparison,
    gate_failures,
    load_run,
    parse_gate,
)
from pytest_llmeval.record._report import write_report
from pytest_llmeval.record._rundir import strip_timing


def _float_delta(a: Any, b: Any) -> float | None:
    """The largest |a - b| over the floats of two JSON values of the same shape, or None
    when they differ in anything else (type, length, keys, a string, an int, a bool)."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return 0.0 if math.isnan(a) and math.isnan(b) else math.inf
        return abs(a - b)
    if type(a) is not type(b):
        return None
    if isinstance(a, dict):
        if set(a) != set(b):
            return None
        a, b = [a[k] for k in a], [b[k] for k in a]
    if isinstance(a, list):
        if len(a) != len(b):
            return None
        deltas = [_float_delta(x, y) for x, y in zip(a, b, strict=True)]
        return None if None in deltas else max((d for d in deltas if d is not None), default=0.0)
    return 0.0 if a == b else None


def _compare(ra: Mapping[str, Any], rb: Mapping[str, Any], tol: float) -> tuple[list[str], float]:
    """The fields of two records that differ (anything but floats exactly, floats by more
    than ``tol``) and the largest float difference of the fields they share."""
    differing, largest = [], 0.0
    for key in sorted(set(ra) | set(rb)):
        delta = _float_delta(ra[key], rb[key]) if key in ra and key in rb else None
        if delta is None or delta > tol:
            differing.append(key)
        if delta is not None:
            largest = max(largest, delta)
    return differing, largest


def _diff(a: str, b: str, tol: float = 0.0) -> int:
    """Item records (apart from timing fields) and task summaries (apart from their
    duration) of two runs: equal, with floats such as log-probabilities allowed to differ
    by ``tol``; everything else (outputs, extracted answers, predictions, correctness,
    verdicts) must be identical."""
    run_a, run_b = load_run(Path(a)), load_run(Path(b))
    problems: list[str] = []
    for task in sorted(
        set(run_a.items) | set(run_b.items) | set(run_a.metrics) | set(run_b.metrics)
    ):
        items_a, items_b = run_a.items.get(task, {}), run_b.items.get(task, {})
        largest = 0.0
        for item_id in sorted(set(items_a) | set(items_b)):
            ra, rb = items_a.get(item_id), items_b.get(item_id)
            if ra is None or rb is None:
                problems.append(f"{task} {item_id}: only in {'B' if ra is None else 'A'}")
                continue
            fields, delta = _compare(strip_timing(ra), strip_timing(rb), tol)
            if fields:
                problems.append(f"{task} {item_id}: differs in {', '.join(fields)}")
            largest = max(largest, delta)
        summary_a = _summary(run_a.metrics.get(task))
        summary_b = _summary(run_b.metrics.get(task))
        if bool(summary_a) != bool(summary_b):
            problems.append(f"{task}: task summary only in {'A' if summary_a else 'B'}")
        else:
            for key in _compare(summary_a, summary_b, tol)[0]:
                problems.append(f"{task}: {key} {summary_a.get(key)} != {summary_b.get(key)}")
        print(
            f"{task}: {len(items_a)} vs {len(items_b)} items, score {summary_a.get('score')} "
            f"vs {summary_b.get('score')}, verdict {summary_a.get('verdict')} vs "
            f"{summary_b.get('verdict')}, largest float difference {largest:.3g}"
        )
    for line in problems:
        print(line)
    what = "timing fields" + (f" and floats within {tol:g}" if tol else "")
    print(f"identical apart from {what}" if not problems else f"{len(problems)} difference(s)")
    return 0 if not problems else 1


def _summary(metrics: Any) -> dict[str, Any]:
    """A task's summary without its duration."""
    return strip_timing(metrics) if isinstance(metrics, Mapping) else {}


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
    diff.add_argument(
        "--tol",
        type=float,
        default=0.0,
        help="floats (log-probabilities, ...) may differ by this much (default 0: exact)",
    )
    cmp_ = sub.add_parser("compare", help="compare a run with a baseline run")
    cmp_.add_argument("run")
    cmp_.add_argument("baseline")
    cmp_.add_argument("--fail", default=None, help="gate expression, e.g. drop:2:sig,config")
    rep = sub.add_parser("report", help="build a run's report.html from its records")
    rep.add_argument("run")
    rep.add_argument("--baseline", default=None, help="a baseline run directory to compare with")
    rep.add_argument("--out", default=None, help="where to write (default: RUN/report.html)")
    rep.add_argument(
        "--history",
        default=None,
        help="folder with earlier runs for the history plots (default: the folder of RUN)",
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "diff":
            return _diff(args.run_a, args.run_b, args.tol)
        if args.command == "report":
            path = write_report(
                Path(args.run),
                Path(args.baseline) if args.baseline else None,
                out=Path(args.out) if args.out else None,
                history_dir=Path(args.history) if args.history else None,
            )
            print(f"report written: {path} ({path.stat().st_size:,} bytes)")
            return 0
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
