"""pytest-html integration (the optional ``html`` extra): with ``pytest --html=FILE``, the
llmeval summary table and the contamination probes' outcomes go into the report's summary,
each benchmark item gets its prompt, output (or per-choice log-likelihoods), extracted
answer and target as an extra, and each probe test its verdict with its null (or why it has
none), in one process or from xdist workers alike.

Registered by the plugin only when pytest-html is active and ``--html`` was given, so
nothing here runs (or is imported) otherwise. All record text is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from html import escape
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ._session import LlmEvalSession


def _pct(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return "n/a"
    return f"{100 * value:.1f}%"


def _pre(text: Any, label: str) -> str:
    return (
        f'<div class="llmeval-field"><strong>{escape(label)}</strong>'
        f'<pre style="white-space:pre-wrap">{escape(str(text))}</pre></div>'
    )


def item_html(result: dict[str, Any]) -> str:
    """An item's prompt, output or choices, extracted answer and target, as escaped HTML."""
    prompt = str(result.get("prompt") or "")
    parts = [
        '<div class="llmeval-item">',
        f"<details><summary>prompt ({len(prompt)} characters)</summary>"
        f'<pre style="white-space:pre-wrap">{escape(prompt)}</pre></details>',
    ]
    if result.get("choices"):
        rows = []
        logprobs = result.get("logprobs") or []
        for i, choice in enumerate(result["choices"]):
            lp = logprobs[i] if i < len(logprobs) else None
            gold, chosen = i == result.get("gold"), i == result.get("pred")
            marks = " ".join(m for m, on in (("gold", gold), ("chosen", chosen)) if on)
            lp_text = f"{lp:.4f}" if isinstance(lp, (int, float)) else "n/a"
            rows.append(
                f"<tr><td>{escape(str(choice))}</td><td>{lp_text}</td><td>{marks}</td></tr>"
            )
        parts.append(
            "<strong>choices (log-likelihood)</strong><table><tbody>"
            + "".join(rows)
            + "</tbody></table>"
        )
    if result.get("output") is not None:
        reason = result.get("finish_reason")
        parts.append(_pre(result["output"], f"output (finish: {reason})"))
    parts.append(_pre(result.get("extracted"), "extracted answer"))
    parts.append(_pre(result.get("target"), "target"))
    parts.append(f"<p>correct: {escape(str(result.get('correct')))}</p></div>")
    return "".join(parts)


# Inline styles (pytest-html's page has none for an added table): padded cells, numbers
# right-aligned, a rule under the header and between rows.
_CELL = "padding:3px 10px;border-bottom:1px solid #ddd;white-space:nowrap"
_NUMERIC = {"items", "score", "95% CI", "floor", "time"}
_COLUMNS = ("task", "items", "metric", "score", "95% CI", "floor", "status", "time")


_PROBE_COLOURS = {"possible contamination": "#b00", "no sign of contamination": "#060"}


def probe_html(summary: dict[str, Any]) -> str:
    """One probe's outcome (``ProbeOutcome.summary``): what it concluded, its message with
    its null, p and validated range (or why there is no verdict), and the membership
    scores and handling when it fired or flagged items."""
    outcome = str(summary.get("outcome", ""))
    colour = _PROBE_COLOURS.get(outcome, "#850")
    details = "".join(f"<li>{escape(str(d))}</li>" for d in summary.get("details") or ())
    return (
        f'<div class="llmeval-probe"><strong style="color:{colour}">{escape(outcome)}</strong>'
        f" {escape(str(summary.get('text', '')))}"
        + (f"<ul>{details}</ul>" if details else "")
        + "</div>"
    )


def _probes_html(session: LlmEvalSession) -> str:
    if not session.probe_summaries:
        return ""
    items = "".join(f"<li>{probe_html(s)}</li>" for s in session.probe_summaries)
    head = "<h2>llmeval contamination probes</h2>"
    return f'<div class="llmeval-probes">{head}<ul>{items}</ul></div>'


def _cell(tag: str, column: str, text: str) -> str:
    align = "right" if column in _NUMERIC else "left"
    return f'<{tag} style="{_CELL};text-align:{align}">{escape(text)}</{tag}>'


def summary_html(session: LlmEvalSession) -> str:
    """The llmeval summary table (the terminal's) as escaped HTML, with the run report,
    and the contamination probes' outcomes (a probes-only run has no table, only those)."""
    probes = _probes_html(session)
    if not session.decisions:
        return probes + _run_link(session) if probes else ""
    head = "".join(_cell("th", c, c) for c in _COLUMNS)
    rows = []
    for v in session.decisions:
        floor = "-" if v.floor is None else _pct(v.floor)
        cells = (
            v.task,
            f"{v.n}/{v.total}",
            v.metric,
            _pct(v.score),
            f"[{_pct(v.estimate.ci_low)}, {_pct(v.estimate.ci_high)}]",
            floor,
            v.status,
            f"{v.seconds:.1f} s",
        )
        color = ' style="color:#b00"' if v.failed else ""
        rows.append(
            f"<tr{color}>"
            + "".join(_cell("td", c, str(cell)) for c, cell in zip(_COLUMNS, cells, strict=True))
            + "</tr>"
        )
    parts = [
        '<div class="llmeval-summary"><h2>llmeval summary</h2>',
        '<table style="border-collapse:collapse;margin:4px 0 12px">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>",
    ]
    parts.append(_run_link(session))
    parts.append("</div>")
    return "".join(parts) + probes


def _run_link(session: LlmEvalSession) -> str:
    if session.report_path is not None:
        uri = escape(session.report_path.resolve().as_uri(), quote=True)
        return (
            f'<p>Run report with plots and the item browser: <a href="{uri}">'
            f"{escape(str(session.report_path))}</a></p>"
        )
    if session.run is not None:
        return f"<p>Run record: {escape(str(session.run.path))}</p>"
    return ""


class HtmlExtras:
    """Hooks for pytest-html; see the module docstring."""

    def __init__(self, session: LlmEvalSession) -> None:
        self.session = session

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, None]:
        outcome = yield
        report = outcome.get_result()
        if report.when != "call":
            return
        from ._session import PROBE_PROPERTY

        found = {k: v for k, v in item.user_properties if k in ("llmeval_result", PROBE_PROPERTY)}
        result, probe = found.get("llmeval_result"), found.get(PROBE_PROPERTY)
        if isinstance(result, dict):
            html = item_html(result)
        elif isinstance(probe, dict) and isinstance(probe.get("summary"), dict):
            html = probe_html(probe["summary"])
        else:
            return
        from pytest_html import extras

        report.extras = [*getattr(report, "extras", []), extras.html(html)]

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(
        self, prefix: list[str], summary: list[str], postfix: list[str], session: pytest.Session
    ) -> None:
        table = summary_html(self.session)
        if table:
            prefix.append(table)


def html_wanted(config: pytest.Config) -> bool:
    """pytest-html is active and a report was asked for (``--html``)."""
    return bool(config.pluginmanager.hasplugin("html") and config.getoption("htmlpath", None))
