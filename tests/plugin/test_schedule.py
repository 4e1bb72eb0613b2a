"""The xdist scheduler's units of work: a YAML task's items together, other tests alone."""

from __future__ import annotations

import pytest

pytest.importorskip("xdist")

from pytest_llmeval.plugin._schedule import task_scope


@pytest.mark.parametrize(
    ("nodeid", "scope"),
    [
        ("benchmarks/gsm8k.yaml::gsm8k-0042", "benchmarks/gsm8k.yaml"),
        ("benchmarks/mmlu.yml::mmlu-anatomy-0000", "benchmarks/mmlu.yml"),
        ("tests/test_x.py::test_a[1]", "tests/test_x.py::test_a[1]"),
        ("tests/test_x.py::TestA::test_b", "tests/test_x.py::TestA::test_b"),
        ("benchmarks/gsm8k.yaml", "benchmarks/gsm8k.yaml"),
    ],
)
def test_task_items_share_a_scope_and_other_tests_keep_their_own(nodeid: str, scope: str) -> None:
    assert task_scope(nodeid) == scope
