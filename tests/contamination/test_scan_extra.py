"""Dask is an optional extra (``scan``): without it, ``scan_with_dask`` says what to install."""

from __future__ import annotations

import sys

import pytest

from pytest_llmeval.contamination._ngram import BenchmarkIndex, scan_with_dask


def test_scan_with_dask_without_dask_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` fails
    index = BenchmarkIndex.build([("item-0", "one two three four five six seven")], n=3)
    with pytest.raises(ImportError, match=r"pip install 'pytest-llm-evaluation\[scan\]'"):
        scan_with_dask([], index, client=object())
