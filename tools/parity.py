"""Parity with lm-evaluation-harness: the same items through both tools, compared per item.

    python -m tools.parity [--items 200] [--tasks mmlu,mmlu_continuation,gsm8k]
        [--batch-size 8] [--model smollm2-135m] [--data-dir ../shared/benchmarks] [--out DIR]

Needs ``pip install -e ".[hf,parity]"``. Prints, per task type, each criterion and the
items furthest from parity; writes ``parity.json`` (config, summaries, criteria, timings,
one record per item) into ``--out``. Exit status 1 when any criterion fails:

- every item's context (and each continuation) is byte-identical in both tools (a
  difference means the harness YAMLs of ``tools/lmeval_tasks.py`` are wrong);
- multiple choice: per choice |log-likelihood difference| < 1e-4, identical argmax and
  ``is_greedy``;
- multiple choice: our per-item ``acc`` equals lm-eval's own per-item ``acc`` (its
  ``process_results``, read from its logged samples);
- generation: identical generation settings, identical outputs under greedy decoding
  (after each tool's stop-sequence cut), identical extracted answers and correctness
  (our scorer on both outputs); each named metric of ours (GSM8K: ``strict_match``,
  ``flexible_extract``) equals lm-eval's own per-item ``exact_match`` under the filter it
  reproduces (``strict-match``, ``flexible-extract``, taken from lm-eval's
  ``gsm8k-cot.yaml``), end to end and with our scorer applied to lm-eval's outputs;
- at least ``--items`` items per task type.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from tools.lmeval_compare import (
    Report,
    format_table,
    out_dir,
    parse_args,
    quiet_libraries,
    run_all,
    stderr,
    write_json,
)


def _score_line(summary: dict[str, Any]) -> str:
    if "acc" in summary:
        return (
            f"acc ours {summary['acc']:.4f} / lm-eval {summary['lmeval_acc']:.4f}; acc_norm ours "
            f"{summary['acc_norm']:.4f} / lm-eval {summary['lmeval_acc_norm']:.4f}"
        )
    line = (
        f"exact_match ours {summary['exact_match']:.4f} / lm-eval outputs with our scorer "
        f"{summary['lmeval_exact_match_our_scorer']:.4f} / lm-eval's regex filter + "
        f"exact_match {summary['lmeval_exact_match_answer_regex']:.4f}"
    )
    for name, m in summary.get("metrics", {}).items():
        line += (
            f"\n  {name}: ours {m['ours']:.4f} / lm-eval {m['lmeval_filter']} {m['lmeval']:.4f};"
            f" per item {m['agree']}/{m['items']} agree ({m['scorer_agree']}/{m['items']} "
            f"scoring lm-eval's outputs; answers {m['extracted_agree']}/{m['items']} the same)"
        )
    return line


def render(report: Report) -> str:
    parts = []
    for task in report.tasks:
        rows = [[c.name, "pass" if c.passed else "FAIL", c.detail] for c in task.criteria]
        parts.append(
            f"== {task.task_type}: {'PASS' if task.passed else 'FAIL'}\n"
            + format_table(["criterion", "result", "detail"], rows)
            + f"\nscores: {_score_line(task.summary)}\nworst items:\n  "
            + "\n  ".join(task.worst)
        )
    verdict = "PARITY PASSED" if report.passed else "PARITY FAILED"
    failed = [t.task_type for t in report.tasks if not t.passed]
    return "\n\n".join(parts) + f"\n\n{verdict}" + (f": {', '.join(failed)}" if failed else "")


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv, "python -m tools.parity", __doc__.splitlines()[0])
    target = out_dir(opts, "parity")

    def finished(partial: Report) -> None:  # what is finished survives a later crash
        write_json(target / "parity.partial.json", partial.to_dict())

    with quiet_libraries():
        report = run_all(opts, log=stderr, each_task=finished)
    write_json(target / "parity.json", report.to_dict())
    (target / "parity.partial.json").unlink(missing_ok=True)
    print(render(report))
    print(f"report: {target / 'parity.json'}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
