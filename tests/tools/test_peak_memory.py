"""The speed benchmark's peak-memory measurement: each child's own peak, and its table."""

from __future__ import annotations

import sys

from tools.peak_memory import peak_rows, run_child


def test_child_reports_its_own_peak() -> None:
    """A child that held 256 MiB peaks that much above one that held nothing, though both
    start from this (larger) pytest process."""
    code = "from tools.peak_memory import maxrss_mb; {}; print(maxrss_mb())"
    hold = [sys.executable, "-c", code.format("b = b'x' * (256 << 20); del b")]
    idle = [sys.executable, "-c", code.format("pass")]
    status_hold, big = run_child(hold)
    status_idle, small = run_child(idle)
    assert (status_hold, status_idle) == (0, 0)
    assert float(big) - float(small) > 200


def test_peak_rows_one_per_tool() -> None:
    peaks = {
        "ours": {
            "imports_mb": 230.0,
            "model_load_mb": 900.0,
            "tasks": {"mmlu": {"items": 57, "peak_mb": 1200.4}},
            "process_peak_mb": 1210.0,
        },
        "lmeval": {
            "error": "exit status 1",
        },
    }
    rows = peak_rows(peaks)
    assert rows[0] == ["ours", "230", "900", "mmlu (57 items) 1200", "1210"]
    assert rows[1][0] == "lm-eval" and "exit status 1" in rows[1][3]
