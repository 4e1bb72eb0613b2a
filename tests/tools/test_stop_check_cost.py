"""tools/stop_check_cost.py on the tiny model's tokenizer: both ways give the same text
(the tool asserts it), and the table has a row per length."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.stop_check_cost import measure

pytest.importorskip("transformers")


def test_measure_gives_a_row_per_length(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    rows = measure(AutoTokenizer.from_pretrained(tiny_model_dir), [40, 300], repeats=4)
    assert [r["length"] for r in rows] == [40, 300]
    assert all(r["whole_ms"] > 0 and r["incremental_ms"] > 0 for r in rows)
