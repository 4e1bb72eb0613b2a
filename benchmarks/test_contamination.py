"""Contamination probes on the shipped tasks that declare them (``contamination:`` block).

Run with ``pytest benchmarks/ --llm-model=M -m contamination`` (the tasks' items are
deselected by the marker; their specs are still collected), and give a model that is clean
for the benchmarks with ``probe.reference_model=R`` (the base model before fine-tuning, an
older checkpoint) where you have one. Each probe uses the first ``probe.items`` items
(default 50) and fails with a named verdict when it finds a significant sign of
contamination at ``probe.alpha`` (default 0.01), against a null that fits (the
reference model, else exchangeable items or the items' own rewrites; see
docs/CONTAMINATION.md for each verdict's measured false-alarm rate and power). Every report
is written to ``contamination/<task>-<probe>.json`` in the run directory, flagged items to
``contamination/<task>-flagged.txt`` (``run.exclude`` format).
"""

import pytest

pytestmark = pytest.mark.contamination

PROBES = [
    ("mmlu", "option_shuffle"),  # options in another order, gold moved: paired McNemar
    ("mmlu", "canonical_order"),  # the published option order most likely? (exchangeable items)
    ("mmlu", "circular"),  # CircularEval: right only in the published rotation?
    ("mmlu", "membership"),  # Min-K%++ flags against rewrites (or the reference)
    ("mmlu", "ts_guessing"),  # fill in a masked wrong option: needs --llm-set probe.reference_model
    ("ceval", "canonical_order"),
    ("ceval", "membership"),
    ("gsm8k", "number_rewrite"),  # new numbers, answers recomputed: paired McNemar
    ("gsm8k", "entity_rewrite"),  # other names and cities, same answers: paired McNemar
    ("gsm8k", "membership"),  # Min-K%++ flags against number rewrites (or the reference)
]


@pytest.mark.parametrize(("task", "probe"), PROBES, ids=[f"{t}-{p}" for t, p in PROBES])
def test_no_sign_of_contamination(llm_probe, task, probe):  # type: ignore[no-untyped-def]
    llm_probe.check(llm_probe.run(task, probe))
