"""The verdict of a contamination probe (``plugin._probe.verdict``) on known reports."""

from __future__ import annotations

from pytest_llmeval.contamination import OrderTestReport, PairedItem, PairedReport
from pytest_llmeval.plugin._probe import verdict


def _paired(pairs: list[tuple[bool, bool]]) -> PairedReport:
    items = tuple(PairedItem(f"t-{i}", a, (b,)) for i, (a, b) in enumerate(pairs))
    return PairedReport("number_rewrite", "t", 1, items)


def test_a_significant_drop_is_flagged_with_numbers_and_advice() -> None:
    report = _paired([(True, False)] * 12 + [(False, False)] * 8)
    reason = verdict(report, 0.01)
    assert reason is not None
    assert "t: number rewrite drops accuracy from 60.0% to 0.0% on 20 items" in reason
    assert "b=12, c=0" in reason and "--llm-exclude" in reason


def test_no_verdict_without_significance_or_without_a_drop() -> None:
    assert verdict(_paired([(True, False)] * 3 + [(True, True)] * 10), 0.01) is None  # p=0.25
    assert verdict(_paired([(False, True)] * 12), 0.01) is None  # rewrites do better
    assert verdict(_paired([]), 0.01) is None


def test_order_test_verdict() -> None:
    flagged = OrderTestReport(
        "m", 1, 3, (0.0,) * 20, ((-1.0, -1.0, -1.0),) * 20, tuple("abcdefghijklmnopqrst")
    )
    reason = verdict(flagged, 0.01)
    assert reason is not None and "20 of 20 items (chance: 5.0" in reason
    chance = OrderTestReport(
        "m",
        1,
        3,
        (0.0,) * 8,
        ((1.0, -1.0, -1.0),) * 6 + ((-1.0, -1.0, -1.0),) * 2,
        tuple("abcdefgh"),
    )
    assert verdict(chance, 0.01) is None
