"""The report's charts: small SVG images written as text (no plotting library).

Each function returns one ``<svg>`` element with a ``<title>`` (the numbers, shown as a
tooltip and read by screen readers). Colours come from the page's CSS classes. Scores are
proportions drawn on a 0-100% scale; NaN draws nothing for that mark.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_llmeval.record._report import HistorySeries


def _num(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def pct(value: Any, digits: int = 1) -> str:
    x = _num(value)
    return "n/a" if math.isnan(x) else f"{100 * x:.{digits}f}%"


def _f(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".") if math.isfinite(x) else "0"


def _title(text: str) -> str:
    return f"<title>{html.escape(text)}</title>"


def _clip01(x: float) -> float:
    return min(1.0, max(0.0, x))


def interval_svg(
    score: float,
    low: float,
    high: float,
    floor: float | None,
    *,
    width: int = 220,
    height: int = 22,
    failed: bool = False,
) -> str:
    """A score on a 0-100% scale: its 95% interval as a bar, the score as a dot, the floor
    as a vertical line."""
    pad = 6
    span = width - 2 * pad

    def x(v: float) -> float:
        return pad + span * _clip01(v)

    mid = height / 2
    parts = [
        f'<svg class="ci" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        _title(
            f"score {pct(score)}, 95% interval {pct(low)} to {pct(high)}"
            + (f", floor {pct(floor)}" if floor is not None else ", no floor")
        ),
        f'<line class="axis" x1="{pad}" y1="{_f(mid)}" x2="{width - pad}" y2="{_f(mid)}"/>',
    ]
    for tick in (0.0, 0.5, 1.0):
        parts.append(
            f'<line class="tick" x1="{_f(x(tick))}" y1="{_f(mid - 4)}" '
            f'x2="{_f(x(tick))}" y2="{_f(mid + 4)}"/>'
        )
    if math.isfinite(low) and math.isfinite(high):
        parts.append(
            f'<rect class="interval" x="{_f(x(low))}" y="{_f(mid - 5)}" '
            f'width="{_f(max(1.0, x(high) - x(low)))}" height="10" rx="2"/>'
        )
    if floor is not None and math.isfinite(floor):
        parts.append(
            f'<line class="floor" x1="{_f(x(floor))}" y1="1" x2="{_f(x(floor))}" '
            f'y2="{height - 1}"/>'
        )
    if math.isfinite(score):
        cls = "score failed" if failed else "score"
        parts.append(f'<circle class="{cls}" cx="{_f(x(score))}" cy="{_f(mid)}" r="4"/>')
    parts.append("</svg>")
    return "".join(parts)


def delta_svg(
    delta: float,
    low: float,
    high: float,
    scale: float,
    *,
    width: int = 220,
    height: int = 22,
    note: str | None = None,
) -> str:
    """A change in points on a symmetric scale (``-scale``..``+scale`` points), zero marked,
    with its paired 95% interval; ``note`` says what the interval is where it is not the
    normal one (an exact bound: drawn dashed; or none at all)."""
    pad = 6
    span = width - 2 * pad
    scale = max(scale, 1e-9)

    def x(v: float) -> float:
        return pad + span * (0.5 + 0.5 * max(-1.0, min(1.0, 100 * v / scale)))

    mid = height / 2
    parts = [
        f'<svg class="delta" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        _title(
            f"change {100 * delta:+.1f} points: {note}"
            if note
            else f"change {100 * delta:+.1f} points, paired 95% interval "
            f"{100 * low:+.1f} to {100 * high:+.1f}"
            if math.isfinite(low) and math.isfinite(high)
            else f"change {100 * delta:+.1f} points (no interval: fewer than 2 shared items)"
        ),
        f'<line class="axis" x1="{pad}" y1="{_f(mid)}" x2="{width - pad}" y2="{_f(mid)}"/>',
        f'<line class="zero" x1="{_f(x(0))}" y1="2" x2="{_f(x(0))}" y2="{height - 2}"/>',
    ]
    if math.isfinite(low) and math.isfinite(high):
        whisker = "whisker exact" if note else "whisker"
        parts.append(
            f'<line class="{whisker}" x1="{_f(x(low))}" y1="{_f(mid)}" x2="{_f(x(high))}" '
            f'y2="{_f(mid)}"/>'
        )
        for end in (low, high):
            parts.append(
                f'<line class="{whisker}" x1="{_f(x(end))}" y1="{_f(mid - 5)}" '
                f'x2="{_f(x(end))}" y2="{_f(mid + 5)}"/>'
            )
    if math.isfinite(delta):
        cls = "score failed" if delta < 0 else "score"
        parts.append(f'<circle class="{cls}" cx="{_f(x(delta))}" cy="{_f(mid)}" r="4"/>')
    parts.append("</svg>")
    return "".join(parts)


def bars_svg(counts: Sequence[tuple[str, float]], *, width: int = 420, unit: str = "") -> str:
    """Horizontal bars with their labels and values (failure classes, ...)."""
    row, label_w, pad = 20, 150, 4
    top = max([v for _, v in counts if math.isfinite(v)] + [1e-9])
    height = row * len(counts) + pad
    span = width - label_w - 60
    parts = [
        f'<svg class="bars" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for k, (label, value) in enumerate(counts):
        y = pad + k * row
        w = span * (value / top) if math.isfinite(value) else 0.0
        parts.append(
            f'<text class="label" x="{label_w - 6}" y="{y + 13}" text-anchor="end">'
            f"{html.escape(label)}</text>"
            f'<rect class="bar" x="{label_w}" y="{y + 3}" width="{_f(max(w, 1.0))}" '
            f'height="{row - 6}">{_title(f"{label}: {value:g}{unit}")}</rect>'
            f'<text class="value" x="{_f(label_w + w + 5)}" y="{y + 13}">{value:g}{unit}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def pair_svg(
    first: float, second: float, labels: tuple[str, str], *, width: int = 220, height: int = 22
) -> str:
    """Two scores on one 0-100% scale joined by a line (published vs perturbed accuracy)."""
    pad = 6
    span = width - 2 * pad

    def x(v: float) -> float:
        return pad + span * _clip01(v)

    mid = height / 2
    parts = [
        f'<svg class="pair" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        _title(f"{labels[0]} {pct(first)}, {labels[1]} {pct(second)}"),
        f'<line class="axis" x1="{pad}" y1="{_f(mid)}" x2="{width - pad}" y2="{_f(mid)}"/>',
    ]
    if math.isfinite(first) and math.isfinite(second):
        parts.append(
            f'<line class="link" x1="{_f(x(first))}" y1="{_f(mid)}" x2="{_f(x(second))}" '
            f'y2="{_f(mid)}"/>'
        )
    if math.isfinite(first):
        parts.append(f'<circle class="first" cx="{_f(x(first))}" cy="{_f(mid)}" r="5"/>')
    if math.isfinite(second):
        parts.append(f'<circle class="second" cx="{_f(x(second))}" cy="{_f(mid)}" r="4"/>')
    parts.append("</svg>")
    return "".join(parts)


def strip_svg(values: Sequence[float], median: float, *, width: int = 220, height: int = 22) -> str:
    """The scores of repeated runs as dots on a 0-100% scale, the median as a line."""
    pad = 6
    span = width - 2 * pad

    def x(v: float) -> float:
        return pad + span * _clip01(v)

    mid = height / 2
    shown = ", ".join(pct(v) for v in values)
    parts = [
        f'<svg class="strip" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        _title(f"repeats {shown}; median {pct(median)}"),
        f'<line class="axis" x1="{pad}" y1="{_f(mid)}" x2="{width - pad}" y2="{_f(mid)}"/>',
    ]
    if math.isfinite(median):
        parts.append(
            f'<line class="median" x1="{_f(x(median))}" y1="2" x2="{_f(x(median))}" '
            f'y2="{height - 2}"/>'
        )
    for v in values:
        if math.isfinite(v):
            parts.append(f'<circle class="repeat" cx="{_f(x(v))}" cy="{_f(mid)}" r="3.5"/>')
    parts.append("</svg>")
    return "".join(parts)


def history_svg(series: HistorySeries, *, width: int = 360, height: int = 150) -> str:
    """A task's score over earlier runs (oldest left), 95% intervals as whiskers; this run
    is the last, larger point; runs with another task config are hollow. The axis labels
    are text in the page's foreground colour at 12px (class ``axis-label``), not grid
    lines."""
    left, right, top, bottom = 40, 10, 10, 28
    points = series.points
    span_x = width - left - right
    span_y = height - top - bottom
    step = span_x / max(1, len(points) - 1)

    def px(i: int) -> float:
        return left + (step * i if len(points) > 1 else span_x / 2)

    def py(v: float) -> float:
        return top + span_y * (1 - _clip01(v))

    parts = [
        f'<svg class="history" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        _title(f"{series.task}: score of {len(points)} runs, oldest first"),
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = py(tick)
        parts.append(
            f'<line class="grid" x1="{left}" y1="{_f(y)}" x2="{width - right}" y2="{_f(y)}"/>'
            f'<text class="axis-label" x="{left - 5}" y="{_f(y + 4)}" text-anchor="end">'
            f"{int(100 * tick)}%</text>"
        )
    path = " ".join(
        f"{'M' if i == 0 else 'L'}{_f(px(i))},{_f(py(p.score))}" for i, p in enumerate(points)
    )
    parts.append(f'<path class="trend" d="{path}"/>')
    for i, p in enumerate(points):
        x = px(i)
        if math.isfinite(p.ci_low) and math.isfinite(p.ci_high):
            parts.append(
                f'<line class="whisker" x1="{_f(x)}" y1="{_f(py(p.ci_low))}" x2="{_f(x)}" '
                f'y2="{_f(py(p.ci_high))}"/>'
            )
        cls = "point current" if p.current else "point" if p.same_config else "point other"
        total = "?" if p.total is None else f"{p.total}"
        tip = (
            f"{p.run} ({p.started or 'start unknown'}): {pct(p.score)} "
            f"[{pct(p.ci_low)}, {pct(p.ci_high)}] on {p.n}/{total} items"
            + ("" if p.same_config else "; another task config (prompt or settings)")
            + (f"; debug selection {p.selection}" if p.selection else "")
            + (" (this run)" if p.current else "")
        )
        parts.append(
            f'<circle class="{cls}" cx="{_f(x)}" cy="{_f(py(p.score))}" '
            f'r="{5 if p.current else 3.5}">{_title(tip)}</circle>'
        )
    first, last = (p.started[:16].replace("T", " ") for p in (points[0], points[-1]))
    parts.append(
        f'<text class="axis-label" x="{left}" y="{height - 8}">{html.escape(first)}</text>'
        f'<text class="axis-label" x="{width - right}" y="{height - 8}" text-anchor="end">'
        f"{html.escape(last)} (this run)</text>"
    )
    parts.append("</svg>")
    return "".join(parts)
