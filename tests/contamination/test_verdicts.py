"""Contamination verdicts against nulls that fit (``contamination._verdicts``)."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest

from pytest_llmeval.contamination import (
    CircularItem,
    CircularReport,
    GuessingItem,
    GuessingReport,
    ItemMembership,
    MembershipScore,
    OrderTestReport,
    circular_verdict,
    conditions_text,
    exchangeability,
    guessing_verdict,
    handling,
    membership_flags,
    order_verdict,
)
from pytest_llmeval.scorer import binomial_upper_tail, mcnemar_one_sided


@pytest.mark.parametrize(
    ("options", "rule"),
    [
        (["10%", "20%", "40%", "80%"], "numeric"),
        (
            ["about 10 seconds.", "about 30 seconds.", "about 1 minute.", "about 4 minutes."],
            "numeric",
        ),
        (["red", "blue", "All of the above", "green"], "refers_to_options"),
        (["red", "blue", "none of these", "green"], "refers_to_options"),
        (["Both A and B", "Neither", "cat", "dog"], "refers_to_options"),
        (["I only", "II only", "I and II", "I, II and III"], "refers_to_options"),
        (["True, True", "False, False", "True, False", "False, True"], "fixed_grid"),
        (
            ["Wrong, Wrong", "Wrong, Not wrong", "Not wrong, Wrong", "Not wrong, Not wrong"],
            "fixed_grid",
        ),
        (["never", "sometimes", "often", "always"], "ordered_scale"),
        (["increase", "decrease", "remain the same", "it depends"], None),
        (
            ["Employee rights", "Employee rights", "Employer duties", "Employee duties"],
            "duplicate_options",
        ),
        (["amnion", "chorion", "allantois", "yolk sac"], None),
        (
            ["Homeostatic regulation", "Goal-setting", "Expectancy-value", "Hierarchy of needs"],
            None,
        ),
        (["The Wagner Act", "The Espionage Act", "The Alien Act of 1798", "A treaty"], None),
    ],
)
def test_exchangeability_rules(options: list[str], rule: str | None) -> None:
    assert exchangeability(options) == rule


def _order(first: list[bool], task: str = "t") -> OrderTestReport:
    ids = tuple(f"{task}-{i}" for i in range(len(first)))
    return OrderTestReport(
        task,
        1,
        3,
        tuple(0.0 for _ in first),
        tuple(((-1.0,) * 3 if f else (1.0, -1.0, -1.0)) for f in first),
        ids,
    )


def test_order_verdict_against_a_reference_is_paired_mcnemar() -> None:
    model = _order([True] * 30 + [False] * 10)
    # The reference also prefers the published order on 12 items (a non-random order):
    # b = 18 items only the model prefers it, c = 0.
    reference = _order([True] * 12 + [False] * 28)
    v = order_verdict(model, {}, 0.01, reference=reference, reference_name="ref")
    assert (v.n, v.detail["b"], v.detail["c"]) == (40, 18, 0)
    assert v.p_value == pytest.approx(0.5**18)
    assert v.fired and "b=18" in v.message() and "ref" in v.message()
    # A clean model that shares the reference's preferences: no verdict.
    same = order_verdict(reference, {}, 0.01, reference=reference)
    assert not same.fired and same.p_value == 1.0


def test_order_verdict_without_reference_keeps_exchangeable_items_only() -> None:
    report = _order([True] * 20 + [False] * 20)
    numeric = ["1", "2", "3", "4"]
    words = ["cat", "dog", "cow", "hen"]
    # The published-first items all have numeric options: excluded, no verdict.
    options = {f"t-{i}": numeric if i < 20 else words for i in range(40)}
    v = order_verdict(report, options, 0.01)
    assert v.n == 20 and v.detail["first"] == 0 and not v.fired
    assert v.detail["excluded_by_rule"] == {"numeric": 20}
    assert "20 of 40 items kept" in v.null
    everything = order_verdict(report, {f"t-{i}": words for i in range(40)}, 0.01)
    assert everything.fired
    assert everything.p_value == pytest.approx(binomial_upper_tail(20, 40, Fraction(1, 4)))
    none_kept = order_verdict(report, {f"t-{i}": numeric for i in range(40)}, 0.01)
    assert none_kept.n == 0 and not none_kept.fired and "no verdict" in none_kept.summary


def _score(value: float, name: str = "x") -> MembershipScore:
    return MembershipScore(name, 10, value, value, value)


def _mem(item: str, published: float, rewrites: list[float]) -> ItemMembership:
    return ItemMembership(item, _score(published), tuple(_score(r) for r in rewrites))


def test_membership_flags_against_rewrites() -> None:
    # 20 clean items (published like their rewrites) and 30 memorised ones.
    clean = [_mem(f"c{i}", 0.01 * (i % 7), [0.01 * ((i + 3) % 7), 0.0, 0.0]) for i in range(20)]
    seen = [_mem(f"s{i}", 2.0, [0.0, 0.0, 0.0]) for i in range(30)]
    flags = membership_flags("t", clean + seen, fpr=0.05)
    assert flags.mode == "rewrites"
    assert set(flags.flagged) >= {f"s{i}" for i in range(30)}
    assert flags.control_fpr <= 0.05
    assert flags.paired_positive >= 30
    verdict = flags.verdict(0.01)
    assert verdict.fired and "flagged" in verdict.summary
    # Without memorised items: no verdict.
    assert not membership_flags("t", clean, fpr=0.05).verdict(0.01).fired


def test_membership_flags_against_a_reference() -> None:
    model = [_mem(f"i{i}", 1.0 if i < 5 else 0.0, [0.0, 0.0]) for i in range(30)]
    ref = [_mem(f"i{i}", 0.0, [0.0, 0.0]) for i in range(30)]
    flags = membership_flags("t", model, reference=ref, fpr=0.05)
    assert flags.mode == "reference" and flags.flagged == [f"i{i}" for i in range(5)]
    assert len(flags.controls) == 60 and flags.control_fpr == 0.0
    assert (flags.paired_positive, flags.paired_n) == (5, 5)
    with pytest.raises(ValueError, match="unknown score"):
        membership_flags("t", model, score="loss")
    # Rewrites of options and of numbers are validated apart (an in-domain fine-tune
    # learns a benchmark's numbers in general, which number rewrites do not share).
    assert flags.verdict(0.01).validated_as == "membership_min_k_plus_plus_vs_reference"
    numbers = membership_flags("t", model, reference=ref, rewrites="numbers")
    assert numbers.verdict(0.01).validated_as == "membership_min_k_plus_plus_vs_reference_numbers"
    assert numbers.to_dict()["rewrites"] == "numbers"


def test_against_a_reference_a_tenth_of_far_leaning_items_is_not_drowned() -> None:
    """The realistic case: a model fine-tuned in-domain leans a little either way on every
    item against its reference, and leans far on the tenth it memorised. The sign test
    counts the tenth as 40 items among 400 coin flips; the signed-rank test weighs how far
    each leans, and fires. On the clean items alone it does not."""
    clean = [
        _mem(f"c{i}", (1 if i % 2 else -1) * (0.1 + 0.001 * (i // 2)), [0.0, 0.0])
        for i in range(360)
    ]
    seen = [_mem(f"s{i}", 3.0 + 0.01 * i, [0.0, 0.0]) for i in range(40)]
    ref = [_mem(m.item_id, 0.0, [0.0, 0.0]) for m in clean + seen]
    flags = membership_flags("t", clean + seen, reference=ref)
    verdict = flags.verdict(0.01)
    assert verdict.test == "one-sided Wilcoxon signed-rank test, item against its own control"
    assert verdict.fired and verdict.p_value < 0.001
    sign = binomial_upper_tail(flags.paired_positive, flags.paired_n, Fraction(1, 2))
    assert sign > 0.01  # 220 of 400 positive: the sign test would not fire
    quiet = membership_flags("t", clean, reference=ref[:360]).verdict(0.01)
    assert not quiet.fired
    # Against rewrites alone the test stays the sign test.
    assert "sign test" in membership_flags("t", clean + seen).verdict(0.01).test


def test_handling_policy_and_subset_scores() -> None:
    correct = {f"i{i}": i < 60 for i in range(200)}
    few = handling("mmlu", correct, ["i0"], verdict_fired=True, successor="mmlu_pro")
    assert "exclude them with --llm-set run.exclude" in few.policy
    assert [s.name for s in few.scores] == ["all", "clean", "flagged"]
    assert (few.scores[0].correct, few.scores[1].n, few.scores[2].correct) == (60, 199, 1)
    assert few.exclusion_list(["flagged by membership"]) == "# flagged by membership\ni0\n"
    many = handling(
        "mmlu", correct, [f"i{i}" for i in range(10)], verdict_fired=True, successor="mmlu_pro"
    )
    assert "replace the benchmark" in many.policy and "mmlu_pro" in many.policy
    quiet = handling("mmlu", correct, [f"i{i}" for i in range(10)], verdict_fired=False)
    assert "nothing to exclude" in quiet.policy


def test_mcnemar_one_sided() -> None:
    assert mcnemar_one_sided(5, 0) == pytest.approx(1 / 32)
    assert mcnemar_one_sided(0, 5) == 1.0
    assert mcnemar_one_sided(0, 0) == 1.0


def _circ(rows: list[tuple[bool, ...]]) -> CircularReport:
    return CircularReport(
        "t", tuple(CircularItem(f"t-{i}", len(r), r, (None,) * len(r)) for i, r in enumerate(rows))
    )


def test_circular_verdict_without_and_with_a_reference() -> None:
    only_published = (True, False, False, False)
    other = (False, True, False, False)
    report = _circ([only_published] * 12 + [other] * 2)
    words = ["cat", "dog", "cow", "hen"]
    v = circular_verdict(report, 0.01, options={f"t-{i}": words for i in range(14)})
    assert v.fired and v.n == 14 and "12 are right in the published one" in v.summary
    # The same items with numeric options: none kept, no verdict.
    quiet = circular_verdict(
        report, 0.01, options={f"t-{i}": ["1", "2", "3", "4"] for i in range(14)}
    )
    assert not quiet.fired and quiet.n == 0 and "0 of 14 items kept" in quiet.null
    # A reference that also finds only the published rotation: nothing to tell them apart.
    same = circular_verdict(report, 0.01, reference=report, reference_name="ref")
    assert not same.fired and same.null == "ref" and same.p_value == 1.0
    ref = _circ([other] * 14)
    paired = circular_verdict(report, 0.01, reference=ref)
    assert paired.fired and paired.p_value == pytest.approx(0.5**12)


def _guess(hits: list[bool]) -> GuessingReport:
    items = tuple(
        GuessingItem(f"t-{i}", 1, "B", "x", "p", "o", "g", hit, 0.0) for i, hit in enumerate(hits)
    )
    return GuessingReport("t", 1, items)


def test_guessing_verdict_needs_the_reference_to_guess_less() -> None:
    model = _guess([True] * 10 + [False] * 10)
    v = guessing_verdict(model, _guess([False] * 20), 0.01, reference_name="ref")
    assert v.fired and v.p_value == pytest.approx(0.5**10) and "10 of 20 items" in v.summary
    assert not guessing_verdict(model, model, 0.01).fired


def test_every_verdict_states_where_it_was_validated(tmp_path: Path) -> None:
    from pytest_llmeval.contamination import _validation

    table = {
        "alpha": 0.01,
        "tables": "docs/contamination-experiment/scaling.md",
        "verdicts": {
            "canonical_order_vs_reference": {
                "n_min": 50,
                "n_max": 950,
                "pools": ["m fine-tuned in-domain (mmlu, up to 950 items)"],
                "max_rate": 0.005,
                "worst": "0.5% of draws of 500 items, m / mmlu",
                "fired_on_whole_pool": [],
                "holds": True,
                "conditions": ["zero-shot prompts without a chat template, float32"],
                "tasks": ["mmlu"],
            }
        },
    }
    path = tmp_path / "validation.json"
    path.write_text(json.dumps(table))
    found = _validation.validation("canonical_order_vs_reference", path=path)
    assert found is not None and found.holds and found.alpha == 0.01
    inside = found.describe(200)
    assert "n=50..950" in inside and "at most 0.5%" in inside and "not measured" not in inside
    outside = found.describe(5000)
    assert "this run has n=5000 items, above the validated range" in outside
    assert "below the validated range" in found.describe(20)
    # The conditions it was measured under are stated; a run under others says so.
    assert "with zero-shot prompts without a chat template, float32" in inside
    same = conditions_text(0, False, "float32")
    assert "not measured" not in found.describe(200, same)
    shipped = found.describe(200, conditions_text(5, True, "bfloat16"))
    assert shipped.endswith(
        "this run has 5-shot prompts through the chat template, bfloat16: its false-alarm "
        "rate under those is not measured (docs/contamination-experiment/scaling.md)"
    )
    # A task none of its pools came from: the message says its rate there is not measured.
    assert "arc_challenge is not among the benchmarks it was measured on" in found.describe(
        200, same, "arc_challenge"
    )
    assert "not among the benchmarks" not in found.describe(200, same, "mmlu")
    # A verdict nobody measured says so, at every n.
    assert "not validated" in _validation.validation_note("no_such_verdict", 50, path=path)
    # The message of a verdict carries its note, and its record too.
    model = _order([True] * 30 + [False] * 10)
    v = order_verdict(model, {}, 0.01, reference=_order([True] * 12 + [False] * 28))
    assert v.validated_as == "canonical_order_vs_reference"
    assert v.validation in v.message() and v.to_dict()["validation"] == v.validation
    # A verdict computed under conditions of its own (the plugin stamps them) says whether
    # they were validated.
    chat = replace(v, conditions=conditions_text(5, True, "float16"))
    assert "this run has 5-shot prompts through the chat template, float16" in chat.message()
    assert chat.to_dict()["conditions"] == "5-shot prompts through the chat template, float16"


def test_a_run_past_what_its_prompts_were_measured_to_says_so(tmp_path: Path) -> None:
    """Measured to 1,000 items under zero-shot prompts, to 300 under the shipped 5-shot
    chat prompts: a 1,000-item run under the latter is outside its range."""
    from pytest_llmeval.contamination import _validation

    zero, chat = conditions_text(0, False, "float32"), conditions_text(5, True, "float32")
    table = {
        "alpha": 0.01,
        "verdicts": {
            "circular": {
                "n_min": 50,
                "n_max": 1000,
                "pools": [
                    f"m untouched (mmlu, up to 1000 items, {zero})",
                    f"m untouched (mmlu, up to 300 items, {chat})",
                ],
                "max_rate": 0.01,
                "worst": "1.0% of draws of 100 items, m / mmlu",
                "holds": True,
                "conditions": [zero, chat],
                "n_max_by_conditions": {zero: 1000, chat: 300},
                "tasks": ["mmlu"],
            }
        },
    }
    path = tmp_path / "validation.json"
    path.write_text(json.dumps(table))
    found = _validation.validation("circular", path=path)
    assert found is not None
    assert "not measured" not in found.describe(1000, zero)
    assert "not measured" not in found.describe(300, chat)
    assert (
        "this run has n=1000 items with 5-shot prompts through the chat template, float32, "
        "measured under those up to 300 items: its false-alarm rate at this n under these "
        "prompts is not measured"
    ) in found.describe(1000, chat)
    # the pools name their prompts: the message does not list the conditions again
    assert ", with " not in found.describe(200, zero)


def test_a_verdict_names_its_kinds_of_model_and_the_record_its_pools(tmp_path: Path) -> None:
    """Where the validation file names the kinds of model, the message says the range in a
    line (n, benchmarks, kinds of model, each condition with its most items) instead of
    every pool; the pools one by one stay in the verdict's record."""
    from pytest_llmeval.contamination import _validation

    zero, chat = conditions_text(0, False, "float32"), conditions_text(5, True, "float32")
    pools = [
        f"m untouched (ceval up to 1346 items, mmlu up to 5000 items; {zero})",
        f"m_planted fine-tuned from m on 50 mmlu items (mmlu up to 450 items; {chat})",
    ]
    table = {
        "alpha": 0.01,
        "verdicts": {
            "circular": {
                "n_min": 50,
                "n_max": 5000,
                "pools": pools,
                "models": "untouched models (m) and in-domain fine-tunes that never saw the "
                "items probed (1 of m)",
                "max_rate": 0.005,
                "worst": "0.5% of random draws of 200 items, m / mmlu",
                "holds": True,
                "conditions": [zero, chat],
                "n_max_by_conditions": {zero: 5000, chat: 450},
                "tasks": ["ceval", "mmlu"],
            }
        },
    }
    path = tmp_path / "validation.json"
    path.write_text(json.dumps(table))
    found = _validation.validation("circular", path=path)
    assert found is not None and found.pools == tuple(pools)
    assert found.describe(200, chat) == (
        "false alarms on clean items measured on draws of n=50..5000 items of ceval, mmlu "
        "from untouched models (m) and in-domain fine-tunes that never saw the items probed "
        "(1 of m), "
        f"under {zero} (up to 5000 items); {chat} (up to 450 items): at most 0.5% (0.5% of "
        "random draws of 200 items, m / mmlu) (docs/contamination-experiment/scaling.md)"
    )
    # The run-specific warnings still follow.
    assert found.describe(1000, chat).endswith(
        "this run has n=1000 items with 5-shot prompts through the chat template, float32, "
        "measured under those up to 450 items: its false-alarm rate at this n under these "
        "prompts is not measured (docs/contamination-experiment/scaling.md)"
    )
    # The package's own file names the kinds for every verdict it validates, and its
    # messages stay a few lines long however many pools there are.
    shipped = json.loads(_validation.VALIDATION_FILE.read_text())["verdicts"]
    for name, entry in shipped.items():
        if entry["pools"]:
            assert entry.get("models"), name
            note = _validation.validation_note(name, 200)
            assert len(note) < 1100 and all(p not in note for p in entry["pools"]), note


def test_a_verdict_states_its_measured_power_at_the_runs_n_and_prompts(tmp_path: Path) -> None:
    """A pass reads against what the verdict could see: its message gives its measured
    power at a tenth planted, at the largest size measured at or under the run's n, under
    the run's prompts where measured there, with the range under the others."""
    from pytest_llmeval.contamination import _validation

    zero, chat = conditions_text(0, False, "float32"), conditions_text(5, True, "float32")

    def tuned(model: str, cond: str, rates: dict[str, float]) -> dict:
        return {"model": model, "conditions": cond, "share": 0.1, "rates": rates}

    entry = {
        "n_min": 50,
        "n_max": 500,
        "pools": ["m untouched (mmlu up to 500 items)"],
        "models": "untouched models (m)",
        "max_rate": 0.0,
        "worst": "0.0% of random draws of 50 items, m / mmlu",
        "holds": True,
        "conditions": [zero, chat],
        "tasks": ["mmlu"],
        "power": [
            tuned("a", zero, {"50": 0.02, "200": 0.4, "500": 1.0}),
            tuned("b", zero, {"50": 0.0, "200": 0.0, "500": 0.0}),
            tuned("c", chat, {"50": 0.005, "200": 0.015, "500": 0.0}),
        ],
    }
    path = tmp_path / "validation.json"
    path.write_text(json.dumps({"alpha": 0.01, "verdicts": {"option_shuffle": entry}}))
    found = _validation.validation("option_shuffle", path=path)
    assert found is not None
    # The shipped prompts at 1,000 items: the largest size measured, 500, under them.
    assert found.power_text(1000, chat) == (
        "power where 10% of draws of 500 items were memorised by an in-domain fine-tune: "
        f"under {chat}: 0.0% (c); under other prompts 0.0-100.0% (2 fine-tunes)"
    )
    assert found.power_text(250, zero) == (
        "power where 10% of draws of 200 items were memorised by an in-domain fine-tune: "
        f"under {zero}: 0.0% (b), 40.0% (a); under other prompts 1.5% (1 fine-tune)"
    )
    # Below the smallest size, the smallest; prompts never measured: the range alone.
    assert found.power_text(20, "") == (
        "power where 10% of draws of 50 items were memorised by an in-domain fine-tune: "
        "0.0-2.0% (3 fine-tunes)"
    )
    # In the message, after the run's warnings, before the tables.
    note = found.describe(1000, chat)
    assert note.endswith(
        "above the validated range: its false-alarm rate at this n is not measured; power "
        "where 10% of draws of 500 items were memorised by an in-domain fine-tune: under "
        f"{chat}: 0.0% (c); under other prompts 0.0-100.0% (2 fine-tunes) "
        "(docs/contamination-experiment/scaling.md)"
    )
    # Never measured: nothing said about it.
    path.write_text(
        json.dumps({"alpha": 0.01, "verdicts": {"option_shuffle": {**entry, "power": []}}})
    )
    _validation._load.cache_clear()
    plain = _validation.validation("option_shuffle", path=path)
    assert plain is not None and plain.power_text(500, chat) == ""
    assert "power" not in plain.describe(500, chat)


def test_membership_is_compared_on_its_dtype_alone_not_on_prompts_it_never_sees(
    tmp_path: Path,
) -> None:
    """Membership scores an item's text with no prompt: a run with 8-shot chat prompts is
    inside a range measured with zero-shot raw prompts (the same statistic); another dtype
    is not. A verdict that does see the prompt still says so."""
    from pytest_llmeval.contamination import _validation, seen_conditions

    zero = conditions_text(0, False, "float32")
    entry = {
        "n_min": 50,
        "n_max": 1000,
        "pools": [f"m untouched (gsm8k, up to 1000 items, {zero})"],
        "max_rate": 0.0,
        "worst": "0.0% of draws of 50 items, m / gsm8k",
        "holds": True,
        "conditions": [zero],
        "n_max_by_conditions": {zero: 1000},
        "tasks": ["gsm8k"],
    }
    name = "membership_min_k_plus_plus_vs_reference_numbers"
    table = {"alpha": 0.01, "verdicts": {name: entry, "number_rewrite": entry}}
    path = tmp_path / "validation.json"
    path.write_text(json.dumps(table))
    membership = _validation.validation(name, path=path)
    rewrite = _validation.validation("number_rewrite", path=path)
    assert membership is not None and rewrite is not None
    chat = conditions_text(8, True, "float32")
    seen = seen_conditions(name, chat)
    assert seen == "the item's text scored without a prompt, float32"
    assert seen_conditions("number_rewrite", chat) == chat
    for run in (chat, seen):  # as the run's prompts, or as the plugin stamps them
        assert "not measured" not in membership.describe(1000, run, "gsm8k")
    assert "with the item's text scored without a prompt, float32" in membership.describe(500)
    other = membership.describe(1000, conditions_text(8, True, "bfloat16"), "gsm8k")
    assert (
        "this run has the item's text scored without a prompt, bfloat16: its false-alarm "
        "rate under those is not measured"
    ) in other
    assert f"this run has {chat}: its false-alarm rate" in rewrite.describe(1000, chat, "gsm8k")


def test_the_shipped_validation_file_matches_the_experiment_tables() -> None:
    """validation.json is written by the experiment from the same measurements as
    docs/contamination-experiment/scaling.json: the two must agree verdict by verdict."""
    from pytest_llmeval.contamination._validation import VALIDATION_FILE

    root = Path(__file__).resolve().parents[2]
    scaling = json.loads((root / "docs" / "contamination-experiment" / "scaling.json").read_text())
    shipped = json.loads(VALIDATION_FILE.read_text())
    assert shipped["alpha"] == scaling["alpha"]
    assert set(shipped["verdicts"]) == set(scaling["validation"])
    for name, entry in scaling["validation"].items():
        mine = shipped["verdicts"][name]
        if not entry["pools"]:  # measured only where it cannot fire: not validated
            assert mine["pools"] == [] and mine["holds"] is False
            assert mine["cannot_fire_on"] == entry["cannot_fire_on"]
            continue
        assert mine["tasks"] == sorted({p["task"] for p in entry["pools"]})
        assert (mine["n_min"], mine["n_max"]) == (min(entry["sizes"]), max(entry["sizes"]))
        assert mine["max_rate"] == entry["max_rate"] and mine["holds"] == entry["holds"]
        assert mine["conditions"] == entry["conditions"]
        for condition, most in mine["n_max_by_conditions"].items():
            assert most == max(p["n_max"] for p in entry["pools"] if p["conditions"] == condition)


def test_the_validated_range_is_read_in_items_probed_not_in_the_tests_own_count() -> None:
    """CircularEval's n is the items right in exactly one rotation (625 of 1,000 probed in
    the shipped run); its range was measured on draws of items probed."""
    from pytest_llmeval.contamination import ContaminationVerdict

    def verdict(items: int) -> ContaminationVerdict:
        return ContaminationVerdict(
            "circular",
            "mmlu",
            "exchangeable",
            "exact",
            625,
            0.6,
            0.01,
            "x",
            {},
            "circular",
            conditions_text(0, False, "float32"),
            items,
        )

    # Real models were measured to 1,346 items under these prompts (the models that
    # always answer one letter, to all 13,202 MMLU items, under no prompt at all).
    beyond = verdict(2000).validation
    assert "this run has n=2000 items with zero-shot prompts" in beyond
    assert "measured under those up to 1346 items" in beyond and "not measured" in beyond
    assert "measured under those" not in verdict(1000).validation
    assert "range" not in verdict(1000).validation.split(": at most")[1]
    # unknown (a verdict made outside the plugin): its own count stands in
    assert verdict(0).validation == verdict(625).validation
