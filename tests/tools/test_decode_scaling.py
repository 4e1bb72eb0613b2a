"""tools/decode_scaling.py on the tiny model: a run's row counts what it timed (every
request generated to its budget or EOS, admissions re-laid, every token stop-checked)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tools.decode_scaling import run_one

pytest.importorskip("torch")


def test_a_run_counts_tokens_layouts_and_checks(tiny_model_dir: Path) -> None:
    from pytest_llmeval.model import ModelSettings, load_backend

    backend: Any = load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=1))
    row = run_one(backend, rows=2, length=6, prompt="one two three")
    assert row["rows"] == 2 and 4 <= row["tokens"] <= 4 * 6  # 4 requests
    assert row["layouts"] >= 2  # the first rows, then each admission
    assert row["layout_positions"] > 0 and row["take_ms_per_token"] > 0
    # the backend is left as it was found
    assert "timed" not in getattr(backend._take, "__name__", "")
    assert backend.batch_size == 1
