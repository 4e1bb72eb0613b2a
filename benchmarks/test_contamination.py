"""Contamination probes on the shipped tasks that declare them (``contamination:`` block).

Run with ``pytest benchmarks/ --llm-model=M -m contamination`` (the tasks' items are
deselected by the marker; their specs are still collected). Each probe uses the first
``--llm-probe-items`` items (default 50) and fails with a verdict when it finds a
significant sign of contamination at ``--llm-probe-alpha`` (default 0.01); every report
is written to ``contamination/<task>-<probe>.json`` in the run directory.
"""

import pytest

pytestmark = pytest.mark.contamination

PROBES = [
    ("mmlu", "option_shuffle"),  # options in another order, gold moved: paired McNemar
    ("mmlu", "canonical_order"),  # is the published option order the most likely one?
    ("gsm8k", "number_rewrite"),  # new numbers, answers recomputed: paired McNemar
    ("gsm8k", "entity_rewrite"),  # other names and cities, same answers: paired McNemar
]


@pytest.mark.parametrize(("task", "probe"), PROBES, ids=[f"{t}-{p}" for t, p in PROBES])
def test_no_sign_of_contamination(llm_probe, task, probe):  # type: ignore[no-untyped-def]
    llm_probe.check(llm_probe.run(task, probe))
