"""The verdict of a paired contamination probe (``contamination.paired_verdict``)."""

from __future__ import annotations

from pytest_llmeval.contamination import PairedItem, PairedReport, paired_verdict


def _paired(pairs: list[tuple[bool, bool]]) -> PairedReport:
    items = tuple(PairedItem(f"t-{i}", a, (b,)) for i, (a, b) in enumerate(pairs))
    return PairedReport("number_rewrite", "t", 1, items)


def test_a_significant_drop_fires_with_numbers() -> None:
    v = paired_verdict(_paired([(True, False)] * 12 + [(False, False)] * 8), 0.01)
    assert v.fired and v.p_value == 0.5**12
    message = v.message()
    assert "t number_rewrite: possible contamination" in message
    assert "accuracy 60.0% as published, 0.0% rewritten on 20 items" in message
    assert "b=12 right only as published, c=0" in message and "one-sided exact McNemar" in message


def test_no_verdict_without_significance_or_without_a_drop() -> None:
    assert not paired_verdict(_paired([(True, False)] * 3 + [(True, True)] * 10), 0.01).fired
    assert not paired_verdict(_paired([(False, True)] * 12), 0.01).fired  # rewrites do better
    assert not paired_verdict(_paired([]), 0.01).fired
