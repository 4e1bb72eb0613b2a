"""Offline tools for run directories.

``python -m pytest_llmeval.record diff RUN_A RUN_B [--tol 1e-4]``
    exit 0 when both runs have the same item records (apart from timing fields; floats
    such as log-probabilities within ``--tol``) and the same task summaries (score, n,
    interval, floor, verdict), else print the differing items and exit 1.
``python -m pytest_llmeval.record compare RUN BASELINE [--fail EXPR]``
    the baseline comparison of ``--llm-baseline``, for runs that already exist.
``python -m pytest_llmeval.record floors RUN [--rule lcb|margin:N | --margin N] [--write FILE]``
    floors from a reference run, as ``llm_floors`` entries with their provenance; with
    ``--write``, into ``pyproject.toml`` / ``pytest.ini`` / ``tox.ini`` / ``setup.cfg``.
``python -m pytest_llmeval.record plan RUN [--baseline RUN2 | --churn X] [--drops 2,5]``
    the item budget: per task, the items a floor gate and a paired gate need to catch each
    drop, and how long that many took per item in RUN.
``python -m pytest_llmeval.record simulate RUN [--baseline RUN2 | --churn X] [--items N]``
    plant drops in copies of RUN's item records at the planned sizes (or at ``--items``) and
    count how often each gate catches them (and how often it fails without a drop).
    See docs/GATES.md.
``python -m pytest_llmeval.record report RUN [--baseline RUN] [--out FILE]``
    (re)build the run's ``report.html`` from its records alone (any run directory, also
    one written before the report existed, or an interrupted one). A damaged run (records
    missing or not matching what ``metrics_summary.json`` recorded, or the summary of a run
    that ended missing) still gets its page, which says *damaged*; the command then prints
    what is damaged and exits 1.

``compare``, ``diff`` and ``floors`` refuse a damaged run (exit 2, the same message).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_llmeval._errors import LlmEvalError
from pytest_llmeval.gate import (
    DROPS,
    FloorRule,
    PlanSettings,
    ReferenceRun,
    check_policy,
    format_plan,
    gate_failures,
    parse_floor_rule,
    parse_gate,
    plan_task,
    simulate,
    write_floors,
)
from pytest_llmeval.record._compare import RunRecord, compare_runs, format_comparison, load_run
from pytest_llmeval.record._report import write_report
from pytest_llmeval.record._rundir import (
    RECORDS_FIELD,
    damage_message,
    refuse_damaged,
    run_damage,
    strip_timing,
)


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
    refuse_damaged(Path(a), "run A of a diff")
    refuse_damaged(Path(b), "run B of a diff")
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
            f"vs {summary_b.get('score')}, status {summary_a.get('status')} vs "
            f"{summary_b.get('status')}, largest float difference {largest:.3g}"
        )
    for line in problems:
        print(line)
    what = "timing fields" + (f" and floats within {tol:g}" if tol else "")
    print(f"identical apart from {what}" if not problems else f"{len(problems)} difference(s)")
    return 0 if not problems else 1


def _summary(metrics: Any) -> dict[str, Any]:
    """A task's summary without its duration and what its output file held (``records``:
    the item lines are compared one by one instead; their order and timing differ)."""
    if not isinstance(metrics, Mapping):
        return {}
    return {k: v for k, v in strip_timing(metrics).items() if k != RECORDS_FIELD}


def _points(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) / 100 for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected points, e.g. 2,5; got {text!r}") from None
    if not values or not all(0 < v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"drops must be in (0, 100) points, got {text!r}")
    return values


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a share in [0, 1), got {text!r}")
    return value


def _level(text: str) -> float:
    """``--power`` and ``--alpha``: a probability strictly between 0 and 1 (argparse names
    the option in its message)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:  # NaN fails too
        raise argparse.ArgumentTypeError(f"expected a probability between 0 and 1, got {text!r}")
    return value


def _count(text: str) -> int:
    """``--draws`` and ``--items``: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _rule(args: argparse.Namespace) -> FloorRule:
    text = f"margin:{args.margin}" if args.margin is not None else args.rule
    return parse_floor_rule(text)


def _floors(args: argparse.Namespace) -> int:
    refuse_damaged(Path(args.run), "a floors source")
    reference = ReferenceRun(Path(args.run), needed_by="floors")
    tasks = [t.strip() for t in args.tasks.split(",")] if args.tasks else None
    floors = reference.floors(_rule(args), tasks)
    for floor in floors:
        print(floor.ini_entry())
    if args.write:
        write_floors(Path(args.write), floors)
        print(f"wrote {len(floors)} floor(s) into {args.write} (llm_floors)")
    return 0


def _churn(args: argparse.Namespace, run: RunRecord) -> tuple[dict[str, float], str | None]:
    """Per task, the share of shared items two runs disagree on (--baseline), or --churn."""
    if args.baseline:
        comparison = compare_runs(run, load_run(Path(args.baseline)))
        churn = {
            t.task: (len(t.regressed) + len(t.improved)) / t.n_shared
            for t in comparison.tasks
            if t.n_shared
        }
        return (
            churn,
            f"items that differ between {Path(args.run).name} and {Path(args.baseline).name}",
        )
    if args.churn is not None:
        return dict.fromkeys(run.items, args.churn), "assumed: --churn"
    return {}, None


def _settings(args: argparse.Namespace) -> PlanSettings:
    return PlanSettings(
        drops=args.drops,
        power=args.power,
        alpha=args.alpha,
        rule=_rule(args),
        policy=check_policy(args.policy),
    )


def _plan(args: argparse.Namespace) -> int:
    run = load_run(Path(args.run))
    settings = _settings(args)
    churn, source = _churn(args, run)
    tasks = [t.strip() for t in args.tasks.split(",")] if args.tasks else sorted(run.items)
    plans = []
    for task in tasks:
        if task not in run.items:
            raise LlmEvalError(f"{args.run}: no item records of task {task!r}")
        plans.append(
            plan_task(
                task,
                run.items[task],
                run.metrics.get(task),
                settings,
                churn=churn.get(task),
                churn_source=source if task in churn else None,
            )
        )
    for line in format_plan(plans, settings):
        print(line)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "run": args.run,
                    "settings": settings.to_dict(),
                    "tasks": [p.to_dict() for p in plans],
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
    return 0


def _simulate(args: argparse.Namespace) -> int:
    run = load_run(Path(args.run))
    settings = _settings(args)
    churn, source = _churn(args, run)
    tasks = [t.strip() for t in args.tasks.split(",")] if args.tasks else sorted(run.items)
    results: list[dict[str, Any]] = []
    print(
        f"planted drops in copies of {Path(args.run).name}'s item records; {args.draws} draws "
        f"per row (seed {args.seed}); churn: {source or 'none (a pure drop)'}"
    )
    print(
        f"{'task':<10} {'drop':>5} {'gate':<20} {'churn':>6} {'items':>6} {'promised':>9} "
        f"{'caught':>7} {'+-':>4}  false alarms (promised)"
    )
    for task in tasks:
        items = run.items.get(task)
        if not items:
            raise LlmEvalError(f"{args.run}: no item records of task {task!r}")
        plan = plan_task(task, items, run.metrics.get(task), settings, churn=churn.get(task))
        pool = [bool(r.get("correct")) for r in items.values()]
        rows: list[tuple[str, int, float, float]] = []  # gate, items, drop, churn
        if args.items is not None:  # every gate at one size (a CI run's --llm-limit)
            for drop in settings.drops:
                flips = churn.get(task) or 0.0
                rows += [("floor-fresh", args.items, drop, 0.0)]
                rows += [("floor-same", args.items, drop, c) for c in sorted({0.0, flips})]
                rows += [("paired", args.items, drop, c) for c in sorted({0.0, flips})]
        else:  # each gate at the count the plan gives it
            for need in plan.needs:
                if need.items is None:
                    continue
                if need.gate == "paired":
                    rows.append(("paired", need.items, need.drop, need.discordance or 0.0))
                    continue
                rows.append(("floor-fresh", need.items, need.drop, 0.0))
                rows.append(("floor-same", need.items, need.drop, 0.0))
                if churn.get(task):
                    rows.append(("floor-same", need.items, need.drop, churn[task]))
        for kind, n, drop, flips in rows:
            sim = simulate(
                pool,
                kind,
                n,
                drop,
                churn=flips,
                draws=args.draws,
                seed=args.seed,
                rule=settings.rule,
                policy=settings.policy,
                alpha=settings.alpha,
                task=task,
            )
            promised = "-" if sim.promised_power is None else f"{100 * sim.promised_power:.1f}%"
            alarm = (
                ""
                if sim.promised_false_alarms is None
                else f" ({100 * sim.promised_false_alarms:.1f}%)"
            )
            print(
                f"{task:<10} {100 * drop:>3g}pt {sim.gate:<20} {100 * flips:>5.1f}% {n:>6} "
                f"{promised:>9} {100 * sim.detected:>6.1f}% {100 * sim.stderr:>4.1f}  "
                f"{100 * sim.false_alarms:.1f}%{alarm}"
            )
            results.append({"task": task, **sim.to_dict()})
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


def _parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per job (diff, compare, floors, plan, simulate,
    report)."""
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
    floors = sub.add_parser("floors", help="floors from a reference run, as llm_floors entries")
    floors.add_argument("run")
    plan = sub.add_parser("plan", help="the items a gate needs to catch a drop")
    plan.add_argument("run")
    simulate = sub.add_parser("simulate", help="plant drops and count how often gates catch them")
    simulate.add_argument("run")
    for command in (floors, plan, simulate):
        command.add_argument(
            "--rule",
            default="lcb",
            help="how a floor is made: lcb (the lower end of the reference's 95%% interval, "
            "default) or margin:N (the reference score minus N points)",
        )
        command.add_argument("--margin", type=float, default=None, help="same as --rule margin:N")
        command.add_argument("--tasks", default=None, help="comma-separated tasks (default: all)")
    floors.add_argument(
        "--write",
        default=None,
        metavar="FILE",
        help="write the entries into FILE (pyproject.toml, pytest.ini, tox.ini or setup.cfg)",
    )
    for command in (plan, simulate):
        command.add_argument("--baseline", default=None, help="a second run: its churn per task")
        command.add_argument(
            "--churn", type=_share, default=None, help="assumed share of items a change flips"
        )
        command.add_argument("--drops", type=_points, default=DROPS, help="points (default 2,5)")
        command.add_argument("--power", type=_level, default=0.8, help="default 0.8")
        command.add_argument(
            "--alpha",
            type=_level,
            default=0.05,
            help="two-sided level (default 0.05: the 95%% intervals and the sig gate's)",
        )
        command.add_argument(
            "--policy", default="point", help="floor policy: point (default), strict, lenient"
        )
        command.add_argument("--json", default=None, metavar="FILE", help="also write JSON")
    simulate.add_argument("--draws", type=_count, default=2000, help="draws per row (2000)")
    simulate.add_argument(
        "--items",
        type=_count,
        default=None,
        metavar="N",
        help="simulate every gate at N items (e.g. your CI's --llm-limit) instead of at the "
        "planned counts",
    )
    simulate.add_argument("--seed", type=int, default=0, help="seed (0)")
    rep = sub.add_parser("report", help="build a run's report.html from its records")
    rep.add_argument("run")
    rep.add_argument("--baseline", default=None, help="a baseline run directory to compare with")
    rep.add_argument("--out", default=None, help="where to write (default: RUN/report.html)")
    rep.add_argument(
        "--history",
        default=None,
        help="folder with earlier runs for the history plots (default: the folder of RUN)",
    )
    return parser


def _report_command(args: argparse.Namespace) -> int:
    if args.baseline:
        refuse_damaged(Path(args.baseline), "a baseline")
    path = write_report(
        Path(args.run),
        Path(args.baseline) if args.baseline else None,
        out=Path(args.out) if args.out else None,
        history_dir=Path(args.history) if args.history else None,
    )
    print(f"report written: {path} ({path.stat().st_size:,} bytes)")
    damage = run_damage(Path(args.run))
    if damage:
        print(f"error: {damage_message(Path(args.run), damage)}", file=sys.stderr)
        print(f"the report says damaged: {path}", file=sys.stderr)
        return 1
    return 0


def _compare_command(args: argparse.Namespace) -> int:
    refuse_damaged(Path(args.run), "the run to compare")
    refuse_damaged(Path(args.baseline), "a baseline")
    comparison = compare_runs(load_run(Path(args.run)), load_run(Path(args.baseline)))
    for line in format_comparison(comparison):
        print(line)
    failures = gate_failures(comparison, parse_gate(args.fail)) if args.fail else []
    for failure in failures:
        print(f"GATE ({args.fail}): {failure}")
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "diff":
            return _diff(args.run_a, args.run_b, args.tol)
        if args.command == "floors":
            return _floors(args)
        if args.command == "plan":
            return _plan(args)
        if args.command == "simulate":
            return _simulate(args)
        if args.command == "report":
            return _report_command(args)
        return _compare_command(args)
    except (LlmEvalError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
