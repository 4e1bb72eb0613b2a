"""How a benchmark item reads in pytest's reports (JUnit XML, what CI dashboards show).

pytest's JUnit XML writes every user property of a test as ``str(value)``; the plugin's
own properties carry a whole item result (prompt included) and the task's metadata to the
controller. Once the controller has folded them into its records, :func:`present_report`
replaces them with a few compact, readable properties per item, and turns a wrong answer
(a call that passed because the task floor, not the item, decides) into a skip with the
reason, so that it is visibly not passed: ``<skipped message="wrong: extracted '7',
target '5'"/>``. Under ``--llm-strict`` a wrong answer already fails its test.

An item whose metric gives it a partial score (F1, TruthfulQA's MC2, an lm-eval metric
between 0 and 1) is neither right nor wrong: its ``correct`` property is ``partial``
(the record's ``correct`` is a threshold there, docs/RECORDS.md) and it is not turned into
a wrong answer unless it scored 0.

Plain Python: the report is duck-typed (pytest's ``TestReport``).
"""

from __future__ import annotations

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
    """The skip reason of a scored wrong answer (None for a correct, failed or not
    fitting item, or one with a partial score)."""
    if partial_score(result) or result.get("correct") or result.get("error"):
        return None
    if (result.get("details") or {}).get("context_overflow"):
        return None
    extracted = result.get("extracted")
    shown = "nothing" if extracted is None else repr(_short(extracted))
    return f"wrong: extracted {shown}, target {_short(result.get('target'))!r}"


def present_report(report: Any, props: Mapping[str, Any], strict: bool = False) -> None:
    """Give ``report`` its compact properties; a passed call with a wrong answer becomes a
    skip with the reason (``report.llmeval_wrong`` marks it for the terminal's ``wrong``
    outcome)."""
    report.user_properties = compact_properties(props)
    result = props.get("llmeval_result")
    if strict or report.when != "call" or not report.passed or not isinstance(result, Mapping):
        return
    reason = wrong_answer(result)
    if reason is None:
        return
    path = report.location[0] if getattr(report, "location", None) else report.nodeid
    report.outcome = "skipped"
    report.longrepr = (str(path), 1, reason)
    report.llmeval_wrong = True
