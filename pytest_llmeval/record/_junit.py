"""How a benchmark item, and a task's gate, read in pytest's reports (JUnit XML,
pytest-html, what CI dashboards show).

pytest's JUnit XML writes every user property of a test as ``str(value)``; the plugin's
own properties carry a whole item result (prompt included) and the task's metadata to the
controller. Once the controller has folded them into its records, :func:`present_report`
replaces them with a few compact, readable properties per item, and turns a wrong answer
(a call that passed because the task floor, not the item, decides) into a failure with a
one-line reason, so that dashboards count it as neither passed nor skipped:
``<failure message="wrong: extracted '7', target '5' (the task's floor decides the
run)"/>``. The plugin keeps such a failure out of pytest's exit status, ``-x`` and
``--maxfail`` (``plugin/_outcomes.py``); under ``gate.strict=true`` a wrong answer already
fails its test (and counts).

An item whose metric gives it a partial score (F1, TruthfulQA's MC2, an lm-eval metric
between 0 and 1) is neither right nor wrong: its ``correct`` property is ``partial``
(the record's ``correct`` is a threshold there, docs/RECORDS.md) and it stays passed
unless it scored 0.

:func:`gate_case` says how a task's decision reads as its own test case (the gate).

Plain Python: the report is duck-typed (pytest's ``TestReport``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# At most this many characters of an extracted answer or target in a property or message.
MAX_TEXT = 200


def _short(value: Any) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "..."


def partial_score(result: Mapping[str, Any]) -> bool:
    """Whether an item's score is strictly between 0 and 1 (a metric with partial credit),
    so that calling it correct or wrong would be a threshold, not a fact."""
    score = result.get("score")
    return isinstance(score, (int, float)) and 0.0 < float(score) < 1.0


def compact_properties(props: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The properties an item shows in reports: its task, and once it has a result
    whether it is correct, its score, the extracted answer, the target and why the
    generation ended (an ``error`` when it could not be evaluated)."""
    out = [("task", str(props.get("llmeval_task")))]
    result = props.get("llmeval_result")
    if not isinstance(result, Mapping):
        return out
    if partial_score(result):
        out.append(("correct", "partial"))
    else:
        out.append(("correct", "true" if result.get("correct") else "false"))
    score = result.get("score")
    out.append(("score", repr(float(score)) if isinstance(score, (int, float)) else ""))
    out.append(("extracted", _short(result.get("extracted"))))
    out.append(("target", _short(result.get("target"))))
    if result.get("finish_reason") is not None:
        out.append(("finish_reason", str(result.get("finish_reason"))))
    if result.get("error"):
        out.append(("error", _short(str(result["error"]).splitlines()[0])))
    return out


def wrong_answer(result: Mapping[str, Any]) -> str | None:
    """The failure message of a scored wrong answer (None for a correct, failed or not
    fitting item, or one with a partial score): the answer, the target, and that the
    task's floor, not this item, decides the run."""
    if partial_score(result) or result.get("correct") or result.get("error"):
        return None
    if (result.get("details") or {}).get("context_overflow"):
        return None
    extracted = result.get("extracted")
    shown = "nothing" if extracted is None else repr(_short(extracted))
    return (
        f"wrong: extracted {shown}, target {_short(result.get('target'))!r} "
        "(the task's floor decides the run)"
    )


def present_report(report: Any, props: Mapping[str, Any], strict: bool = False) -> None:
    """Give ``report`` its compact properties and, for a call, the item's own time (its
    share of its batch, which the first item of a batch would otherwise carry whole); a
    passed call with a wrong answer becomes a failure with the reason as its text
    (``report.llmeval_wrong`` marks it for the terminal's ``wrong`` outcome and for the
    plugin, which keeps it out of pytest's failure count)."""
    report.user_properties = compact_properties(props)
    result = props.get("llmeval_result")
    if report.when != "call" or not isinstance(result, Mapping):
        return
    seconds = result.get("seconds")
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds >= 0:
        report.duration = float(seconds)
    if strict or not report.passed:
        return
    reason = wrong_answer(result)
    if reason is None:
        return
    report.outcome = "failed"
    report.longrepr = reason
    report.llmeval_wrong = True


# ---------------------------------------------------------------------------- the gate

# What an undecided status (the floor inside the 95% interval) does under each policy.
UNDECIDED_UNDER = {
    "point": "fails when the score is below the floor",
    "strict": "fails (the interval's lower end must clear the floor)",
    "lenient": "does not fail (only an interval wholly below the floor fails)",
}


def _num(value: Any) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
        return ""
    return f"{float(value):.4f}"


def gate_case(row: Mapping[str, Any]) -> tuple[str, str, list[tuple[str, str]]]:
    """A task's gate as a test case: its outcome (``passed``, ``failed`` or ``skipped``),
    the message a failed or skipped gate shows, and its properties.

    ``row`` is a decision's row (``TaskDecision.row()``: score, ci_low, ci_high, floor,
    status, policy, failed). The gate fails exactly when the decision fails the run (its
    floor under ``gate.policy``, or a task that errored or did not complete) and
    passes when the status is ``pass``. The rest is skipped with the reason, since none of
    it shows that the score clears a floor: a task without a floor, a task whose items were
    all skipped, and an ``undecided`` status (the floor inside the 95% interval) that the
    policy lets through (``point`` with the score at or above the floor, ``lenient``).
    """
    status = str(row.get("status"))
    policy = str(row.get("policy") or "point")
    floor = row.get("floor")
    score, low, high = _num(row.get("score")), _num(row.get("ci_low")), _num(row.get("ci_high"))
    props = [
        ("task", str(row.get("task"))),
        ("metric", str(row.get("metric") or "")),
        ("n", str(row.get("n"))),
        ("score", score),
        ("ci_low", low),
        ("ci_high", high),
        ("floor", "" if floor is None else _num(floor)),
        ("status", status),
        ("policy", policy),
    ]
    where = f"{row.get('metric')} {score} [95% CI {low}, {high}]"
    if row.get("failed"):
        if status in ("error", "incomplete"):
            why = f"the task's status is {status}: its score decides nothing"
        elif status == "undecided":
            why = (
                f"{where}: the floor {_num(floor)} lies inside the interval, and under "
                f"--llm-set gate.policy={policy} an undecided status {UNDECIDED_UNDER[policy]}"
            )
        else:
            why = f"{where} is below the floor {_num(floor)} (--llm-set gate.policy={policy})"
        return "failed", f"gate failed: {why}", props
    if status == "pass":
        return "passed", "", props
    if status == "no floor":
        why = (
            "no floor: nothing gates this task (add one with --llm-floor=TASK=VALUE, a "
            "spec's floor:, or --llm-set gate.floors_from=RUN_DIR)"
        )
    elif status == "skipped":
        why = "every item of the task was skipped: no score to gate"
    else:  # undecided, and the policy lets it through
        why = (
            f"undecided: the floor {_num(floor)} lies inside {where}; under "
            f"--llm-set gate.policy={policy} an undecided status "
            f"{UNDECIDED_UNDER.get(policy, 'does not fail')}, and this one does not"
        )
    return "skipped", why, props
