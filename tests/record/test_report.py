"""The run report's data preparation and rendering, without a browser (``record/_report.py``).

Run directories are written here in the layout the plugin writes (item lines from
``ItemResult.to_dict()``, ``metrics_summary.json``, ``eval_config.json``, probe reports).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval.contamination import OrderTestReport, PairedItem, PairedReport
from pytest_llmeval.eval import ItemResult
from pytest_llmeval.record import RunDir, load_run, prepare_report, render_report, write_report
from pytest_llmeval.record.__main__ import main as record_main
from pytest_llmeval.record._report import (
    HistoryPoint,
    HistorySeries,
    _recorded_ids,
    bars_svg,
    delta_svg,
    environment_facts,
    history_svg,
    interval_svg,
    item_set_digest,
    no_change_bound,
    paired_interval,
    prefix_label,
    probe_flagged,
    run_selection,
    script_json,
    selection_of,
    split_prompts,
    task_rows,
)
from pytest_llmeval.scorer import accuracy, paired_difference

FEWSHOT = "Q: 1+1?\nA: 2\n\nQ: 2+2?\nA: 4\n\n"
HOSTILE = '</script><script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


def gen(item_id: str, correct: bool, *, output: str = " 4", **kw: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "task": "arith",
        "item_id": item_id,
        "subset": None,
        "correct": correct,
        "score": 1.0 if correct else 0.0,
        "prompt": FEWSHOT + f"Q: question {item_id}?\nA:",
        "target": "4",
        "fewshot_ids": ["f0", "f1"],
        "output": output,
        "extracted": output.strip() or None,
        "extractor": "last_number",
        "finish_reason": "stop",
        "n_output_tokens": 2,
        "seconds": 0.5,
        "config_hash": "aaaa",
    }
    fields.update(kw)
    return ItemResult(**fields).to_dict()


def mc(item_id: str, subset: str, pred: int, gold: int = 1) -> dict[str, Any]:
    return ItemResult(
        task="quiz",
        item_id=item_id,
        subset=subset,
        correct=pred == gold,
        score=float(pred == gold),
        prompt=f"About {subset}.\n\nExample one\nAnswer: A\n\nQuestion {item_id}\nAnswer:",
        target="AB"[gold],
        fewshot_ids=[f"{subset}-0"],
        choices=["A", "B"],
        logprobs=[-0.5 if pred == 0 else -1.5, -1.5 if pred == 0 else -0.5],
        is_greedy=[pred == 0, pred == 1],
        pred=pred,
        pred_norm=pred,
        gold=gold,
        acc=float(pred == gold),
        acc_norm=float(pred == gold),
        extracted="AB"[pred],
        extractor="loglikelihood (acc)",
        seconds=0.1,
        config_hash="bbbb",
    ).to_dict()


def config(model_sha: str = "ab" * 32, started: str = "2026-11-30T10:00:00", **tasks: Any) -> dict:
    return {
        "model": "tiny",
        "model_sha256": model_sha,
        "dtype": "float32",
        "device": "cpu",
        "batch_size": 8,
        "seed": 1234,
        "limit": None,
        "started": started,
        "framework": {"backend": "hf", "torch": "2.13.0+cpu", "transformers": "5.24.0"},
        "tasks": {
            name: {
                "metric": "acc",
                "prompt": {"fewshot_separator": "\n\n"},
                "generation": {"compare": "numeric"},
                "config_hash": "aaaa",
                **extra,
            }
            for name, extra in (tasks or {"arith": {}}).items()
        },
        "environment": {
            "libraries": {"python": "3.11.7", "torch": "2.13.0+cpu", "transformers": "5.24.0"},
            "git": {"code": {"commit": "0123456789abcdef", "short": "0123456", "dirty": True}},
            "backend": {"device_name": "x86_64", "batch_size_source": "fixed"},
            "model": {"sha256": model_sha},
        },
    }


def summary(n: int, score: float, **kw: Any) -> dict[str, Any]:
    return {
        "n": n,
        "total_items": 10,
        "partial": True,
        "metric": "exact_match",
        "score": score,
        "mean": score,
        "stderr": 0.1,
        "ci95": [max(0.0, score - 0.2), min(1.0, score + 0.2)],
        "floor": 0.5,
        "verdict": "pass" if score >= 0.5 else "FAIL",
        "seconds": 3.25,
        "config_hash": "aaaa",
        **kw,
    }


def write_run(
    path: Path,
    items: dict[str, list[dict[str, Any]]],
    metrics: dict[str, Any] | None,
    cfg: dict[str, Any] | None,
) -> Path:
    (path / "tasks").mkdir(parents=True)
    for task, records in items.items():
        (path / "tasks" / f"{task}_output.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in records)
        )
    if metrics is not None:
        (path / "metrics_summary.json").write_text(json.dumps(metrics))
    if cfg is not None:
        (path / "eval_config.json").write_text(json.dumps(cfg))
    return path


def same_items() -> list[dict[str, Any]]:
    """Records of the item set of the ``run`` fixture (a history trend needs the same ids)."""
    return [gen(f"arith-{i:04d}", i == 0) for i in range(3)]


@pytest.fixture
def run(tmp_path: Path) -> Path:
    records = [
        gen("arith-0000", True),
        gen("arith-0001", False, output=" 5"),
        gen("arith-0002", False, output=" no idea"),
    ]
    return write_run(
        tmp_path / "runs" / "20261130-100000_tiny_0123456",
        {"arith": records},
        {"arith": summary(3, 1 / 3)},
        config(),
    )


# ---------------------------------------------------------------------------- prompts


def test_split_prompts_folds_the_shared_fewshot_block_and_keeps_every_prompt_whole() -> None:
    records = [gen(f"arith-{i:04d}", True) for i in range(3)]
    records.append(gen("arith-zero", True, fewshot_ids=[], prompt="Q: zero-shot?\nA:"))
    prefixes, split = split_prompts(records, "\n\n")
    assert len(prefixes) == 1
    assert prefixes[0].text == FEWSHOT  # cut after the last separator: "Q: question" stays
    assert prefixes[0].fewshot_ids == ("f0", "f1")
    for record, (index, rest) in zip(records, split, strict=True):
        prefix = prefixes[index].text if index >= 0 else ""
        assert prefix + rest == record["prompt"]
    assert split[3] == (-1, "Q: zero-shot?\nA:")  # no few-shot examples: nothing folded


def test_split_prompts_one_block_per_subset_and_single_items_cut_at_their_last_separator() -> None:
    records = [mc("quiz-a-0", "a", 1), mc("quiz-a-1", "a", 0), mc("quiz-b-0", "b", 1)]
    prefixes, split = split_prompts(records, "\n\n")
    assert [p.text for p in prefixes] == [
        "About a.\n\nExample one\nAnswer: A\n\n",
        "About b.\n\nExample one\nAnswer: A\n\n",
    ]
    assert [s[1] for s in split] == [
        "Question quiz-a-0\nAnswer:",
        "Question quiz-a-1\nAnswer:",
        "Question quiz-b-0\nAnswer:",
    ]


def test_split_prompts_without_a_known_separator_uses_the_common_prefix() -> None:
    records = [
        gen("a", True, prompt="SYSTEM shared block ask 1"),
        gen("b", True, prompt="SYSTEM shared block ask 2"),
    ]
    prefixes, split = split_prompts(records, None)
    assert prefixes[0].text == "SYSTEM shared block ask "
    assert [s[1] for s in split] == ["1", "2"]
    single = [gen("c", True, prompt="no separator at all")]
    assert split_prompts(single, None) == ([], [(-1, "no separator at all")])


# ---------------------------------------------------------------------------- tasks


def test_task_rows_come_from_the_summary(run: Path) -> None:
    (row,) = task_rows(load_run(run))
    assert (row.name, row.n, row.total, row.metric, row.status) == (
        "arith",
        3,
        10,
        "exact_match",
        "fail",  # layout 1's FAIL, read as the one spelling
    )
    assert row.score == pytest.approx(1 / 3)
    assert row.floor == 0.5 and row.failed and row.partial and row.from_summary
    assert row.seconds == 3.25


def test_undecided_statuses_show_the_policy_outcome_and_the_floor_source(tmp_path: Path) -> None:
    source = {
        "from": "reference run",
        "rule": "margin:5",
        "run": "20261201-092052_smollm2-135m_0b3a9f8",
        "model": "smollm2-135m",
        "model_sha256": "cd" * 32,
        "items": 600,
        "metric": "acc",
        "score": 0.3,
        "ci95": [0.26, 0.34],
    }
    undecided = {"verdict": "undecided", "policy": "strict", "floor_source": source}
    records = [gen("arith-0000", True), gen("arith-0001", False, output=" 5")]
    path = write_run(
        tmp_path / "runs" / "20261201-100000_tiny_0123456",
        {"strict": records, "point": records, "old": records},
        {
            # the floor inside the interval: fails under strict, passes under point
            "strict": summary(2, 0.5, failed=True, **undecided),
            "point": summary(2, 0.5, failed=False, **{**undecided, "policy": "point"}),
            # a record written before verdicts had a policy: the verdict decides
            "old": summary(2, 0.5, verdict="FAIL"),
        },
        config(),
    )
    rows = {r.name: r for r in task_rows(load_run(path))}
    assert rows["strict"].failed and not rows["point"].failed and rows["old"].failed
    assert rows["strict"].floor_source is not None
    assert "rule margin:5 from run 20261201-092052" in rows["strict"].floor_source
    assert rows["old"].floor_source is None and rows["old"].policy is None
    page = render_report(prepare_report(path))
    assert page.count('class="status v-undecided"') == 2
    assert "fails under policy strict" in page and "passes under policy point" in page
    assert page.count('class="floor-source"') == 2


def test_interrupted_run_rows_are_computed_from_items_without_a_verdict(tmp_path: Path) -> None:
    overflow = gen(
        "arith-0003",
        False,
        details={"context_overflow": {"prompt_tokens": 9000, "context_window": 8192}},
    )
    path = write_run(
        tmp_path / "interrupted",
        {"arith": [gen("arith-0000", True), gen("arith-0001", False), overflow]},
        None,
        None,
    )
    model = prepare_report(path)
    (row,) = model.tasks
    assert row.status == "no summary" and not row.from_summary
    assert row.n == 2 and row.not_fitting == 1
    assert row.score == 0.5
    assert 0.0 < row.ci_low < 0.5 < row.ci_high < 1.0  # Wilson interval of 1/2
    assert row.seconds == 1.5
    assert not model.finished
    assert any("interrupted" in note for note in model.notes)
    items = model.browser["tasks"][0]["items"]
    assert items[2]["st"] == "not_scored" and "ok" not in items[2]
    html = render_report(model)
    assert "interrupted" in html and "no summary" in html


def test_a_run_of_probes_only_is_not_called_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "probes-only"
    (path / "tasks").mkdir(parents=True)
    (path / "contamination").mkdir()
    report = _paired([True] * 12, [False] * 12)
    (path / "contamination" / "mmlu-option_shuffle.json").write_text(
        json.dumps({**report.to_dict(), "alpha": 0.01})
    )
    model = prepare_report(path)
    assert model.tasks == [] and len(model.probes) == 1
    assert model.notes == [
        "This run has no item records and no metrics_summary.json: it ran only "
        "contamination probes, or it stopped before its first result."
    ]
    html = render_report(model)
    assert "no summary</span>" in html and ">interrupted<" not in html


def test_repeats_and_reused_items_are_shown(tmp_path: Path) -> None:
    records = [gen("arith-0000", True, reused_from="/runs/old", repeat_scores=[1.0, 0.0, 1.0])]
    path = write_run(
        tmp_path / "r",
        {"arith": records},
        {"arith": summary(1, 2 / 3, repeats=[1.0, 0.0, 1.0], spread=1.0)},
        config(),
    )
    model = prepare_report(path)
    (row,) = model.tasks
    assert row.repeats == [1.0, 0.0, 1.0] and row.spread == 1.0 and row.reused == 1
    item = model.browser["tasks"][0]["items"][0]
    assert item["ru"] == "/runs/old" and item["rs"] == [1.0, 0.0, 1.0]
    assert 'id="repeats"' in render_report(model)


# ---------------------------------------------------------------------------- items


def test_browser_items_carry_what_the_page_shows(tmp_path: Path) -> None:
    records = [mc("quiz-a-0", "a", 1), mc("quiz-a-1", "a", 0), mc("quiz-b-0", "b", 1)]
    records[0]["logprobs"][0] = math.nan
    path = write_run(tmp_path / "r", {"quiz": records}, None, config(quiz={}))
    data = prepare_report(path).browser
    (task,) = data["tasks"]
    assert task["subsets"] == ["a", "b"]
    assert task["classes"] == ["wrong_answer"]
    right, wrong, other = task["items"]
    assert right["ok"] == 1 and "fc" not in right and right["s"] == 0 and other["s"] == 1
    assert wrong["ok"] == 0 and wrong["fc"] == "wrong_answer"
    assert right["ch"] == ["A", "B"] and right["lp"] == [None, -0.5]  # NaN -> null
    assert (right["pr"], right["g"]) == (1, 1)
    assert task["prefixes"][right["pf"]]["t"] + right["q"] == records[0]["prompt"]


def test_generation_items_have_output_extracted_answer_and_failure_class(run: Path) -> None:
    items = prepare_report(run).browser["tasks"][0]["items"]
    assert [i["ok"] for i in items] == [1, 0, 0]
    assert items[1]["o"] == " 5" and items[1]["x"] == "5" and items[1]["fc"] == "wrong_answer"
    assert items[2]["fc"] == "format_failure"  # "no idea" is not a number (numeric compare)
    assert items[1]["fr"] == "stop" and items[1]["nt"] == 2 and items[1]["t"] == "4"


def test_long_scorer_details_are_cut_and_say_so(tmp_path: Path) -> None:
    record = gen("arith-0000", False, details={"status": "failed", "reason": "x" * 10000})
    path = write_run(tmp_path / "r", {"arith": [record]}, None, config())
    text = prepare_report(path).browser["tasks"][0]["items"][0]["d"]
    assert len(text) < 4300 and "cut at 4,000" in text


# ---------------------------------------------------------------------------- baseline


def test_comparison_has_the_paired_interval_mcnemar_and_flips(tmp_path: Path, run: Path) -> None:
    base = write_run(
        tmp_path / "runs" / "20261129-100000_tiny_0123456",
        {"arith": [gen("arith-0000", False), gen("arith-0001", True), gen("arith-0002", False)]},
        {"arith": summary(3, 1 / 3)},
        {**config(), "seed": 7},
    )
    model = prepare_report(run, base)
    assert model.comparison is not None
    (row,) = model.comparison.rows
    assert row.regressed == ["arith-0001"] and row.improved == ["arith-0000"]
    assert row.n_shared == 3 and row.delta == 0.0
    want = paired_difference([0.0, 1.0, 0.0], [1.0, 0.0, 0.0])
    assert (row.ci_low, row.ci_high) == (want.ci_low, want.ci_high)
    assert row.p_value == 1.0
    assert model.comparison.config_diffs == ["seed: 7 -> 1234"]
    flips = {i["id"]: i.get("fl") for i in model.browser["tasks"][0]["items"]}
    assert flips == {"arith-0000": "improved", "arith-0001": "regressed", "arith-0002": None}
    assert model.browser["tasks"][0]["flips"] is True
    html = render_report(model)
    assert 'href="#item/arith/arith-0001"' in html and "seed: 7 -&gt; 1234" in html


def test_without_baseline_probes_or_failures_the_sections_say_so(run: Path) -> None:
    html = render_report(prepare_report(run))
    assert "No baseline given" in html
    assert "No contamination probe ran" in html
    assert "No failure analysis in this run" in html


# ---------------------------------------------------------------------------- probes


def _paired(canonical: list[bool], rewritten: list[bool]) -> PairedReport:
    items = tuple(
        PairedItem(item_id=f"i{k}", canonical_correct=c, rewritten_correct=(r,))
        for k, (c, r) in enumerate(zip(canonical, rewritten, strict=True))
    )
    return PairedReport(probe="option_shuffle", task="mmlu", seed=1, items=items)


@pytest.mark.parametrize(
    "report",
    [
        _paired([True] * 12, [False] * 12),  # a significant drop
        _paired([True] * 12, [True] * 12),  # no change
        _paired([False] * 12, [True] * 12),  # better when perturbed: never flagged
        _paired([True] * 3, [False] * 3),  # too few to be significant
        OrderTestReport(
            task="mmlu",
            seed=1,
            k=3,
            item_ids=("a",) * 10,
            canonical_logprobs=(0.0,) * 10,
            shuffled_logprobs=((-1.0, -1.0, -1.0),) * 10,
        ),
        OrderTestReport(
            task="mmlu",
            seed=1,
            k=3,
            item_ids=("a",) * 10,
            canonical_logprobs=(-2.0,) * 10,
            shuffled_logprobs=((-1.0, -1.0, -1.0),) * 10,
        ),
    ],
)
def test_probe_verdict_rule_is_the_fixtures(report: PairedReport | OrderTestReport) -> None:
    """The report shows the fixture's own verdict (written with the probe's JSON), never a
    rule of its own: the null behind a verdict is not in the report's numbers."""
    from pytest_llmeval.contamination import ProbeOutcome, order_verdict, paired_verdict

    for alpha in (0.01, 0.05):
        if isinstance(report, OrderTestReport):
            v = order_verdict(report, {"a": ["cat", "dog", "cow", "hen"]}, alpha)
        else:
            v = paired_verdict(report, alpha)
        data = ProbeOutcome(report.task, "probe", report, v).to_dict(alpha)
        assert probe_flagged(data, alpha) is v.fired
        assert probe_flagged(
            {**data, "verdict": {**data["verdict"], "fired": not v.fired}}, alpha
        ) is (not v.fired)


def test_probe_reports_are_read_from_the_run(run: Path) -> None:
    folder = run / "contamination"
    folder.mkdir()
    shuffle = _paired([True] * 12, [False] * 12)
    (folder / "mmlu-option_shuffle.json").write_text(
        json.dumps({**shuffle.to_dict(), "alpha": 0.01})
    )
    order = OrderTestReport(
        task="mmlu",
        seed=1,
        k=3,
        item_ids=("a",) * 10,
        canonical_logprobs=(-2.0,) * 10,
        shuffled_logprobs=((-1.0, -1.0, -1.0),) * 10,
    )
    (folder / "mmlu-canonical_order.json").write_text(
        json.dumps({**order.to_dict(), "alpha": 0.01})
    )
    model = prepare_report(run)
    by_probe = {p.probe: p for p in model.probes}
    assert by_probe["option_shuffle"].flagged and by_probe["option_shuffle"].b == 12
    assert by_probe["option_shuffle"].canonical_accuracy == 1.0
    assert by_probe["option_shuffle"].rewritten_accuracy == 0.0
    assert not by_probe["canonical_order"].flagged
    assert by_probe["canonical_order"].canonical_first == 0
    assert by_probe["canonical_order"].chance_share == 0.25
    html = render_report(model)
    assert "possible contamination" in html and "no sign" in html
    # Skipped by the fixture (no reference model): never read as a verdict, however small
    # the report's own all-items p is.
    first = OrderTestReport("mmlu", 1, 3, (0.0,) * 40, ((-1.0, -1.0, -1.0),) * 40, ("a",) * 40)
    reason = "mmlu canonical_order: no verdict without --llm-set probe.reference_model: ..."
    (folder / "mmlu-canonical_order.json").write_text(
        json.dumps({**first.to_dict(), "alpha": 0.01, "no_verdict": reason})
    )
    skipped = {p.probe: p for p in prepare_report(run).probes}["canonical_order"]
    assert first.to_dict()["p_value"] < 0.01 and not skipped.flagged
    assert skipped.no_verdict == reason
    assert ">no verdict</span>" in render_report(prepare_report(run))


def test_a_given_verdict_shows_where_it_was_validated(run: Path) -> None:
    """The range of n, the models and the conditions a verdict's false-alarm rate was
    measured on are part of its message in the terminal and pytest-html; the report shows
    them too, under the verdict's row (not for a verdict not given, whose reason says it)."""
    folder = run / "contamination"
    folder.mkdir()
    shuffle = _paired([True] * 6 + [False] * 6, [False] * 6 + [True] * 6)
    validation = (
        "false alarms on clean items measured on draws of n=50..13202 items from "
        "smollm2-135m untouched (mmlu up to 13202 items): at most 0.5%"
    )
    verdict = {
        "probe": "option_shuffle",
        "null": "the same items with their options moved",
        "test": "one-sided exact McNemar",
        "p_value": 0.61,
        "fired": False,
        "summary": "b=6 right only as published, c=6 right only moved",
        "validation": validation,
        "validation_pools": ["smollm2-135m untouched (mmlu up to 13202 items)", "a & b"],
    }
    (folder / "mmlu-option_shuffle.json").write_text(
        json.dumps({**shuffle.to_dict(), "alpha": 0.01, "verdict": verdict})
    )
    row = {p.probe: p for p in prepare_report(run).probes}["option_shuffle"]
    assert row.validation == validation and not row.flagged
    html = render_report(prepare_report(run))
    assert "<summary>validated on</summary>" in html and validation in html
    # and its pools one by one (the message names their kinds), escaped
    assert row.validation_pools == verdict["validation_pools"]
    assert "<br>· smollm2-135m untouched (mmlu up to 13202 items)<br>· a &amp; b" in html
    (folder / "mmlu-option_shuffle.json").write_text(
        json.dumps(
            {
                **shuffle.to_dict(),
                "alpha": 0.01,
                "no_verdict": "no verdict: not validated",
                "inspection": verdict,
            }
        )
    )
    html = render_report(prepare_report(run))
    assert "why no verdict" in html and "<summary>validated on</summary>" not in html


def test_a_probe_without_a_verdict_shows_the_numbers_its_reason_quotes(run: Path) -> None:
    """The order test without a reference is skipped with the numbers of the verdict it
    does not give (items with exchangeable options); the table shows those, not the
    probe's own count over all items and its far smaller p. Membership and TS-Guessing
    without a verdict show their own numbers, never a McNemar line they do not have; the
    reason is on the page, not only in a tooltip."""
    from pytest_llmeval.contamination import ProbeOutcome, order_verdict

    folder = run / "contamination"
    folder.mkdir()
    # 40 items, published order first on 30; 20 of them exchangeable, first on 10
    report = OrderTestReport(
        "mmlu",
        1,
        3,
        (0.0,) * 30 + (-2.0,) * 10,
        ((-1.0, -1.0, -1.0),) * 40,
        tuple(f"i{k}" for k in range(40)),
    )
    options = {f"i{k}": ["1", "2", "3", "4"] for k in range(40)}  # numbers: ordered
    options.update({f"i{k}": ["cat", "dog", "cow", "hen"] for k in range(20, 40)})
    inspection = order_verdict(report, options, 0.01)
    assert inspection.n == 20 and inspection.detail["first"] == 10
    reason = (
        "mmlu canonical_order: no verdict without --llm-set probe.reference_model: for inspection"
    )
    data = ProbeOutcome(
        "mmlu", "canonical_order", report, None, no_verdict=reason, inspection=inspection
    ).to_dict(0.01)
    assert data["p_value"] == inspection.p_value and data["probe_p_value"] == report.p_value
    # The inspected verdict's own message names an outcome: the JSON says it was not given.
    assert data["inspection"]["given"] is False
    assert data["inspection"]["message"].startswith("not given (see no_verdict); read alone: ")
    assert data["inspection"]["message"].endswith(inspection.message())
    (folder / "mmlu-canonical_order.json").write_text(json.dumps(data))
    (folder / "mmlu-membership.json").write_text(
        json.dumps(
            {
                "probe": "membership",
                "task": "mmlu",
                "n": 40,
                "p_value": 0.04,
                "alpha": 0.01,
                "no_verdict": "mmlu membership: no verdict without --llm-set probe.reference_model",
                "inspection": {
                    "summary": "21 of 40 items score higher than their control",
                    "test": "one-sided sign test",
                    "null": "items as likely as their rewrites",
                    "n": 40,
                    "p_value": 0.04,
                },
            }
        )
    )
    (folder / "mmlu-ts_guessing.json").write_text(
        json.dumps(
            {
                "probe": "ts_guessing",
                "task": "mmlu",
                "n": 30,
                "exact_match_rate": 0.1,
                "alpha": 0.01,
                "no_verdict": "mmlu ts_guessing: exact-match rate 10.0% on 30 items; no verdict",
            }
        )
    )
    rows = {p.probe: p for p in prepare_report(run).probes}
    order = rows["canonical_order"]
    assert report.p_value < 1e-6 and order.p_value == inspection.p_value > 0.01
    assert order.summary == inspection.summary and order.canonical_first_share == 0.5
    assert rows["membership"].summary.startswith("21 of 40") and rows["membership"].p_value == 0.04
    assert rows["ts_guessing"].result == "exact-match rate 10.0% on 30 items"
    html = render_report(prepare_report(run))
    assert "published n/a" not in html and "McNemar b=0" not in html
    assert inspection.summary in html and reason in html
    assert html.count('<details class="why">') == 3


# ---------------------------------------------------------------------------- failures


def test_failure_analysis_is_read_from_failures_json(run: Path) -> None:
    (run / "failures.json").write_text(
        json.dumps(
            [
                {
                    "task": "arith",
                    "n_items": 3,
                    "n_failed": 2,
                    "distribution": {"wrong_answer": 1, "format_failure": 1},
                    "answer_in_output": 0,
                    "samples": [
                        {
                            "item_id": "arith-0001",
                            "kind": "wrong_answer",
                            "answer_in_output": False,
                            "extracted": "5",
                            "target": "4",
                        }
                    ],
                }
            ]
        )
    )
    model = prepare_report(run)
    (view,) = model.failures
    assert view.distribution == {"wrong_answer": 1, "format_failure": 1}
    assert view.bars == [("format failure", 1.0), ("wrong answer", 1.0)]
    html = render_report(model)
    assert "arith: 2 of 3 items failed" in html and 'href="#item/arith/arith-0001"' in html


# ---------------------------------------------------------------------------- history


def test_history_has_the_earlier_runs_of_the_same_model(tmp_path: Path, run: Path) -> None:
    runs = run.parent
    for name, started, score, sha, task_hash in [
        ("20261128-100000_tiny_a", "2026-11-28T10:00:00", 0.2, "ab" * 32, "aaaa"),
        ("20261129-100000_tiny_b", "2026-11-29T10:00:00", 0.4, "ab" * 32, "cccc"),
        ("20261129-110000_other_c", "2026-11-29T11:00:00", 0.9, "cd" * 32, "aaaa"),  # other model
        ("20261201-100000_tiny_d", "2026-12-01T10:00:00", 0.7, "ab" * 32, "aaaa"),  # later
    ]:
        cfg = config(model_sha=sha, started=started)
        cfg["tasks"]["arith"]["config_hash"] = task_hash
        write_run(runs / name, {"arith": same_items()}, {"arith": summary(3, score)}, cfg)
    write_run(
        runs / "20261127-100000_tiny_interrupted",
        {"arith": [gen("arith-0000", True)]},
        None,
        config(),
    )
    (series,) = prepare_report(run).history
    assert [p.run for p in series.points] == [
        "20261128-100000_tiny_a",
        "20261129-100000_tiny_b",
        run.name,
    ]
    assert [p.score for p in series.points[:2]] == [0.2, 0.4]
    assert [p.same_config for p in series.points] == [True, False, True]
    assert series.points[-1].current and series.earlier_found == 2
    limited = prepare_report(run, history_limit=1).history[0]
    assert [p.run for p in limited.points] == ["20261129-100000_tiny_b", run.name]
    assert limited.earlier_found == 2


def test_no_history_section_points_without_earlier_runs(run: Path) -> None:
    model = prepare_report(run)
    assert model.history == []
    assert "No earlier finished run" in render_report(model)


# ---------------------------------------------------------------------------- environment


def test_environment_facts() -> None:
    facts = dict(environment_facts(config()))
    assert facts["model"] == "tiny"
    assert facts["model SHA256"].startswith("abababababab…")
    assert facts["dtype"] == "float32" and facts["device"] == "cpu (x86_64)"
    assert facts["batch size"] == "8 (fixed)"
    assert facts["libraries"] == "python 3.11.7, torch 2.13.0+cpu, transformers 5.24.0"
    assert facts["git commit"] == "0123456 (uncommitted changes)"
    assert environment_facts({}) == []


# ---------------------------------------------------------------------------- escaping


def test_record_text_cannot_break_out_of_the_page(tmp_path: Path) -> None:
    records = [
        gen("arith-0000", False, output=HOSTILE, target=HOSTILE, prompt=HOSTILE + FEWSHOT + "Q"),
        gen(HOSTILE, False, output="<b>bold</b>"),
    ]
    metrics = {"arith": summary(2, 0.0, metric=HOSTILE)}
    cfg = config()
    cfg["model"] = HOSTILE
    path = write_run(tmp_path / "r", {"arith": records}, metrics, cfg)
    (path / "failures.json").write_text(
        json.dumps(
            [
                {
                    "task": "arith",
                    "n_items": 2,
                    "n_failed": 2,
                    "distribution": {HOSTILE: 2},
                    "samples": [
                        {
                            "item_id": HOSTILE,
                            "kind": HOSTILE,
                            "extracted": HOSTILE,
                            "target": HOSTILE,
                        }
                    ],
                }
            ]
        )
    )
    page = write_report(path).read_text(encoding="utf-8")
    # exactly the page's own two script elements, and no markup from the records
    assert page.count("<script") == 2 and page.count("</script>") == 2
    assert "<img" not in page and "<b>" not in page
    assert "window.__pwned" in page  # the text is there, as text
    data = re.search(
        r'<script type="application/json" id="llmeval-data">(.*?)</script>', page, re.S
    )
    assert data is not None and "<" not in data.group(1)
    items = json.loads(data.group(1))["tasks"][0]["items"]
    assert items[0]["o"] == HOSTILE and items[1]["id"] == HOSTILE  # unchanged after parsing


def test_script_json_round_trips_and_never_contains_markup() -> None:
    value = {"a": HOSTILE, "b": [1.5, math.nan, math.inf], "c": "& \u2028 \u2029 ></"}
    text = script_json(value)
    assert not set(text) & {"<", ">", "&", "\u2028", "\u2029"}
    assert json.loads(text) == {"a": HOSTILE, "b": [1.5, None, None], "c": "& \u2028 \u2029 ></"}


def test_the_page_script_never_parses_html() -> None:
    from importlib import resources

    script = (resources.files("pytest_llmeval.record") / "_report_assets" / "report.js").read_text()
    for sink in (
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "Function(",
    ):
        assert sink not in script


def test_the_page_allows_only_its_own_script_and_no_network(run: Path) -> None:
    import base64
    import hashlib

    page = write_report(run).read_text(encoding="utf-8")
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    assert policy is not None and "default-src 'none'" in policy.group(1)
    script = re.findall(r"<script>(.*?)</script>", page, re.S)[0]
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy.group(1)
    assert not re.search(r"(src|href)=\"(https?:)?//", page)  # nothing fetched from anywhere


# ---------------------------------------------------------------------------- charts


def _svg(text: str) -> ET.Element:
    return ET.fromstring(text)


def test_interval_chart_draws_interval_score_and_floor() -> None:
    svg = _svg(interval_svg(0.5, 0.25, 0.75, 0.6, width=212))
    ns = "{http://www.w3.org/2000/svg}"
    rect = svg.find(f"{ns}rect")
    assert rect is not None and float(rect.get("x", "")) == 6 + 200 * 0.25
    assert float(rect.get("width", "")) == 100
    floor = [line for line in svg.iter(f"{ns}line") if line.get("class") == "floor"]
    assert len(floor) == 1 and float(floor[0].get("x1", "")) == 6 + 200 * 0.6
    assert svg.find(f"{ns}circle") is not None
    no_floor = _svg(interval_svg(math.nan, math.nan, math.nan, None))
    assert not [x for x in no_floor.iter(f"{ns}line") if x.get("class") == "floor"]
    assert no_floor.find(f"{ns}circle") is None  # no score, no dot


def test_other_charts_are_well_formed_svg() -> None:
    points = [
        HistoryPoint("a", "2026-11-28T10:00:00", 0.2, 0.1, 0.3, 10, 100, True),
        HistoryPoint("b", "2026-11-29T10:00:00", 0.4, 0.3, 0.5, 10, 100, False),
        HistoryPoint("c", "2026-11-30T10:00:00", 0.5, 0.4, 0.6, 10, None, True, current=True),
    ]
    charts = [
        delta_svg(-0.05, -0.1, 0.0, 10),
        delta_svg(0.02, math.nan, math.nan, 5),
        bars_svg([("wrong_answer", 3), ("truncated <x>", 1)]),
        history_svg(HistorySeries("arith", points, 2)),
        history_svg(HistorySeries("arith", points[-1:], 0)),
    ]
    for chart in charts:
        _svg(chart)
    assert charts[3].count("<circle") == 3 and 'class="point other"' in charts[3]


# ---------------------------------------------------------------------------- CLI


def test_report_command_rebuilds_the_report_from_records(
    tmp_path: Path, run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "elsewhere.html"
    assert record_main(["report", str(run), "--baseline", str(run), "--out", str(out)]) == 0
    assert out.is_file() and "Compared with the baseline" in out.read_text()
    assert f"report written: {out}" in capsys.readouterr().out
    assert record_main(["report", str(run)]) == 0
    assert (run / "report.html").is_file()
    assert record_main(["report", str(tmp_path / "nothing")]) == 2
    assert "not a run directory" in capsys.readouterr().err


# ---------------------------------------------------------------------------- run states


def _lease(path: Path, status: str | None, reason: str | None = None) -> RunDir:
    """The run's lease as the plugin leaves it: held (``status`` None), or released as
    ``finished`` / ``interrupted``."""
    rundir = RunDir(path)
    rundir.claim(["-k", "arith"])
    if status is not None:
        rundir.release(status, reason)
    return rundir


def test_an_interrupted_run_with_a_summary_is_not_presented_as_finished(tmp_path: Path) -> None:
    # Ctrl-C, -x, --maxfail: the session still writes metrics_summary.json, and its lease
    # says the run was interrupted; the page must say so (the summary alone would read as
    # a finished run).
    path = write_run(
        tmp_path / "runs" / "20261130-100000_tiny_x",
        {"arith": [gen("arith-0000", True), gen("arith-0001", False)]},
        {"arith": summary(2, 0.5, verdict="incomplete")},
        config(),
    )
    _lease(path, "interrupted", "stopped early (stopping after 1 failures)")
    model = prepare_report(path)
    assert not model.finished and model.state == "interrupted"
    assert model.state_reason == "stopped early (stopping after 1 failures)"
    assert model.notes == [
        "This run was interrupted (stopped early (stopping after 1 failures)). Its summary "
        "covers the items that ran before it stopped. Its finished items are offered for "
        "resume."
    ]
    (row,) = model.tasks
    assert row.from_summary and row.status == "incomplete"
    html = render_report(model)
    assert 'class="badge bad" title="stopped early' in html and ">finished<" not in html


def test_a_run_killed_without_a_word_is_interrupted_and_a_superseded_one_says_by_whom(
    tmp_path: Path,
) -> None:
    path = write_run(tmp_path / "killed", {"arith": [gen("arith-0000", True)]}, None, config())
    rundir = _lease(path, None)
    assert rundir.lease is not None
    rundir.lease._lock.close()  # type: ignore[union-attr]  # the process died: lock gone
    rundir.lease._lock = None
    model = prepare_report(path)
    assert model.state == "interrupted" and "died" in (model.state_reason or "")
    assert "Task scores are computed here from its item records" in model.notes[0]
    (path / "superseded_by.txt").write_text("/runs/later\n")
    model = prepare_report(path)
    assert model.state == "interrupted" and model.superseded_by == "/runs/later"
    assert "offered for resume" not in model.notes[0]  # its items were reused already


def test_a_live_run_reads_as_running_and_is_not_in_the_history(tmp_path: Path, run: Path) -> None:
    live = write_run(
        run.parent / "20261129-100000_tiny_live",
        {"arith": same_items()},
        {"arith": summary(3, 0.9)},
        config(started="2026-11-29T10:00:00"),
    )
    lease = _lease(live, None)
    try:
        model = prepare_report(live)
        assert model.state == "live" and not model.finished
        assert model.notes[0].startswith("This run is still being written")
        assert ">running<" in render_report(model)
        assert prepare_report(run).history == []  # a live run is no earlier result
    finally:
        lease.release("finished")
    (series,) = prepare_report(run).history  # finished now: it counts
    assert [p.run for p in series.points] == [live.name, run.name]


def test_history_leaves_out_interrupted_runs_that_wrote_a_summary(
    tmp_path: Path, run: Path
) -> None:
    for name, state in (("20261128-100000_tiny_a", "finished"), ("20261129-100000_tiny_b", "x")):
        earlier = write_run(
            run.parent / name,
            {"arith": same_items()},
            {"arith": summary(3, 0.4)},
            config(started=f"2026-11-{name[6:8]}T10:00:00"),
        )
        _lease(earlier, "finished" if state == "finished" else "interrupted", "Ctrl-C")
    (series,) = prepare_report(run).history
    assert [p.run for p in series.points] == ["20261128-100000_tiny_a", run.name]


def test_strict_json_nulls_and_item_errors_are_read_and_shown(tmp_path: Path) -> None:
    # Non-finite numbers are written as null (strict JSON); an item that could not be
    # evaluated carries its error and is neither scored nor compared.
    broken = mc("quiz-a-0", "a", 0)
    broken.update(
        correct=False,
        score=0.0,
        logprobs=[],
        pred=None,
        acc=None,
        error="quiz-a-0: the model's log-likelihoods are not finite (NaN) for model tiny",
    )
    nulls = mc("quiz-a-1", "a", 1)
    nulls["logprobs"] = [None, -0.5]
    path = write_run(
        tmp_path / "nulls",
        {"quiz": [broken, nulls, mc("quiz-b-0", "b", 1)]},
        {
            "quiz": {
                **summary(2, 1.0),
                "score": None,
                "mean": None,
                "stderr": None,
                "ci95": [None, None],
                "spread": None,
                "repeats": [None, 0.5],
                "seconds": None,
                "errors": {"n": 1, "items": ["quiz-a-0: ..."]},
                "verdict": "error",
            }
        },
        config(quiz={}),
    )
    _lease(path, "finished")
    model = prepare_report(path, path)
    (row,) = model.tasks
    assert math.isnan(row.score) and math.isnan(row.ci_low) and row.repeats == [0.5]
    assert row.errors == 1 and row.status == "error"
    items = {i["id"]: i for i in model.browser["tasks"][0]["items"]}
    assert items["quiz-a-0"]["st"] == "error" and "not finite" in items["quiz-a-0"]["er"]
    assert "ok" not in items["quiz-a-0"] and items["quiz-a-0"]["lp"] == []
    assert items["quiz-a-1"]["lp"] == [None, -0.5]
    assert model.comparison is not None
    (delta,) = model.comparison.rows
    assert delta.n_shared == 2  # the item with an error is not compared
    html = render_report(model)
    assert "1 errors" in html and "NaN" not in html.split("<script")[0]
    # computed from the items (no summary, and no lease that says the run ended: killed
    # before it wrote one; with the finished lease the run would read as damaged): the
    # error is counted, not scored
    (path / "metrics_summary.json").unlink()
    shutil.rmtree(path / "processes")
    (row,) = prepare_report(path).tasks
    assert (row.n, row.errors, row.not_fitting, row.score) == (2, 1, 0, 1.0)


# ---------------------------------------------------------------------------- issue 30 views

# Chat prompts as four template families render them (the markers of each family's
# template; the report finds the turns from the messages, not from these markers).
FAMILIES: dict[str, tuple[str, str, str, str]] = {
    # family: (turn header with {role}, end of turn, generation prompt, the prompt's start)
    "chatml": ("<|im_start|>{role}\n", "<|im_end|>\n", "<|im_start|>assistant\n", ""),
    "llama3": (
        "<|start_header_id|>{role}<|end_header_id|>\n\n",
        "<|eot_id|>",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|begin_of_text|>",
    ),
    "gemma": ("<start_of_turn>{role}\n", "<end_of_turn>\n", "<start_of_turn>model\n", "<bos>"),
    "phi3": ("<|{role}|>\n", "<|end|>\n", "<|assistant|>\n", ""),
}


def render_chat(family: str, messages: list[dict[str, str]]) -> str:
    header, end, generation, start = FAMILIES[family]
    text = start
    for m in messages:
        role = "model" if family == "gemma" and m["role"] == "assistant" else m["role"]
        content = m["content"].strip() if family == "llama3" else m["content"]
        text += header.format(role=role) + content + end
    return text + generation


def chat_mc(family: str, item_id: str, subset: str, shots: int = 5) -> dict[str, Any]:
    """An MMLU-like item under a chat template with its few-shot examples as turns; the
    system message ends with the separator (MMLU's description does), which is what made
    the old fold stop after the system message."""
    messages = [{"role": "system", "content": f"Questions about {subset}.\n\n"}]
    for k in range(shots):
        messages += [
            {"role": "user", "content": f"Example {k} of {subset}?\nAnswer:"},
            {"role": "assistant", "content": "AB"[k % 2]},
        ]
    messages.append({"role": "user", "content": f"The item's own question {item_id}?\nAnswer:"})
    record = mc(item_id, subset, 1)
    record.update(
        prompt=render_chat(family, messages),
        messages=messages,
        fewshot_ids=[f"{subset}-{k}" for k in range(shots)],
    )
    return record


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("group", [1, 3])
def test_a_chat_prompt_folds_every_fewshot_turn_and_shows_the_items_own_turn(
    family: str, group: int
) -> None:
    records = [chat_mc(family, f"quiz-a-{i}", "a") for i in range(group)]
    prefixes, split = split_prompts(records, "\n\n")
    (prefix,) = prefixes
    header = FAMILIES[family][0].format(role="user")
    for record, (index, rest) in zip(records, split, strict=True):
        assert index == 0 and prefix.text + rest == record["prompt"]
        assert rest.startswith(header), rest  # the item's turn, no stray end-of-turn token
        assert f"own question {record['item_id']}" in rest and "Example" not in rest
    for k in range(5):
        assert f"Example {k} of a?" in prefix.text
    assert prefix.text.endswith(FAMILIES[family][1])  # the last example's turn, whole
    assert prefix.turns == 5
    label = prefix_label(prefix, {"k": 5})
    assert label.startswith("system message and 5 few-shot example(s) as chat turns")


def test_a_chat_prompt_with_its_examples_in_one_message_is_cut_inside_that_message() -> None:
    # BBH: one user message holds the description and the 3-shot text of the spec's file;
    # the last separator of the whole prompt would be in the template's tail (Llama-3's
    # generation header ends with a blank line), the one inside the message is the cut.
    shots = "Solve these.\n\nQ: one?\nA: 1\n\nQ: two?\nA: 2\n\nQ: three?\nA: 3\n\n"
    records = []
    for i in range(2):
        messages = [{"role": "user", "content": shots + f"Q: item {i}?\nA: Let's think."}]
        record = gen(f"bbh-x-{i:04d}", True, subset=f"x{i}", fewshot_ids=["x.txt#ab12"])
        record.update(prompt=render_chat("llama3", messages), messages=messages)
        records.append(record)
    prefixes, split = split_prompts(records, "\n\n")
    assert len(prefixes) == 1  # two subsets with the same text: stored once
    for record, (index, rest) in zip(records, split, strict=True):
        assert prefixes[index].text + rest == record["prompt"]
        assert rest.startswith("Q: item ") and "Q: three?" in prefixes[index].text
    label = prefix_label(prefixes[0], {"k": 3, "text_file": "bbh/cot-prompts/{subset}.txt"})
    assert label == "chat header, description and 3-shot text (the spec's fewshot.k) from x.txt"
    assert "1 example" not in label


def test_named_metrics_and_subsets_are_rows_under_their_task(tmp_path: Path) -> None:
    records = [
        gen(
            f"g-{i}",
            i < 2,
            subset="ab"[i % 2],
            metrics={
                "strict_match": {"score": float(i < 1), "extracted": str(i)},
                "flexible_extract": {"score": float(i < 3), "extracted": str(i)},
            },
        )
        for i in range(4)
    ]
    cfg = config(
        arith={"generation": {"metrics": [{"name": "strict_match"}, {"name": "flexible_extract"}]}}
    )
    named = {"flexible_extract": {"n": 4, "mean": 0.75, "stderr": 0.2, "ci95": [0.3, 0.95]}}
    named["strict_match"] = {"n": 4, "mean": 0.25, "stderr": 0.2, "ci95": [0.05, 0.7]}
    path = write_run(
        tmp_path / "r", {"arith": records}, {"arith": summary(4, 0.5, metrics=named)}, cfg
    )
    (row,) = task_rows(load_run(path))
    assert [(r.kind, r.name, r.n, r.score) for r in row.subrows] == [
        ("metric", "strict_match", 4, 0.25),  # the spec's order, not the summary's
        ("metric", "flexible_extract", 4, 0.75),
        ("subset", "a", 2, 0.5),  # g-0 right, g-2 wrong
        ("subset", "b", 2, 0.5),
    ]
    wilson = accuracy([1.0, 0.0])
    assert (row.subrows[2].ci_low, row.subrows[2].ci_high) == (wilson.ci_low, wilson.ci_high)
    model = prepare_report(path)
    html = render_report(model)
    for kind, name in (("metric", "strict_match"), ("subset", "a"), ("subset", "b")):
        assert f'<tr class="sub {kind}" data-task="arith" data-name="{name}">' in html
    first = model.browser["tasks"][0]["items"][0]
    assert first["nm"] == [["strict_match", 1.0, "0"], ["flexible_extract", 1.0, "0"]]
    # without a summary (an interrupted run) the named metrics come from the items
    (path / "metrics_summary.json").unlink()
    (row,) = task_rows(load_run(path))
    assert [(r.name, r.n, r.score) for r in row.subrows[:2]] == [
        ("strict_match", 4, 0.25),
        ("flexible_extract", 4, 0.75),
    ]


def test_identical_paired_items_show_what_ten_pairs_can_bound(tmp_path: Path) -> None:
    items = [gen(f"arith-{i:04d}", i < 4) for i in range(10)]
    runs = tmp_path / "runs"
    base = write_run(runs / "20261129-100000_tiny_a", {"arith": items}, {}, config())
    cur = write_run(runs / "20261130-100000_tiny_b", {"arith": items}, {}, config())
    model = prepare_report(cur, base)
    assert model.comparison is not None
    (row,) = model.comparison.rows
    assert row.delta == 0.0 and row.p_value == 1.0 and not row.regressed and not row.improved
    bound = 1 - 0.025 ** (1 / 10)  # Clopper-Pearson upper limit of 0 of 10
    assert (row.ci_low, row.ci_high) == (-bound, bound) and round(100 * bound, 1) == 30.8
    assert row.interval_note is not None and "no discordant pairs" in row.interval_note
    html = render_report(model)
    assert "[+0.0, +0.0]" not in html
    assert "[-30.8, +30.8] exact" in html and "no discordant pairs" in html
    assert "±30.8 points" in html


def test_paired_interval_without_spread_or_pairs() -> None:
    low, high, note = paired_interval([1.0], math.nan, math.nan)
    assert math.isnan(low) and math.isnan(high) and note and "not enough pairs" in note
    low, high, note = paired_interval([1.0] * 10, 1.0, 1.0)  # every item went wrong -> right
    assert (low, high) == (1.0 - no_change_bound(10), 1.0) and note
    assert paired_interval([0.0, 1.0, -1.0], -0.9, 0.9) == (-0.9, 0.9, None)
    assert round(100 * no_change_bound(100), 1) == 3.6


def test_history_trend_is_over_the_same_item_set_and_counts_debug_runs_apart(
    tmp_path: Path, run: Path
) -> None:
    runs = run.parent
    same = write_run(
        runs / "20261128-100000_tiny_same",
        {"arith": same_items()},
        {"arith": summary(3, 0.3)},
        config(started="2026-11-28T10:00:00"),
    )
    debug = write_run(
        runs / "20261129-100000_tiny_debug",
        {"arith": [gen("arith-0001", True)]},
        {"arith": summary(1, 1.0)},
        config(started="2026-11-29T10:00:00"),
    )
    other = write_run(
        runs / "20261129-110000_tiny_limit5",
        {"arith": [gen(f"arith-{i:04d}", True) for i in range(5)]},
        {"arith": summary(5, 0.8)},
        config(started="2026-11-29T11:00:00"),
    )
    for path, args in ((same, ["benchmarks/"]), (debug, ["-k", "arith-0001"]), (other, [])):
        rundir = RunDir(path)
        rundir.claim(args)
        rundir.release("finished")
    assert run_selection(debug) == "-k arith-0001" and run_selection(same) is None
    (series,) = prepare_report(run).history
    assert [p.run for p in series.points] == [same.name, run.name]
    assert series.item_set == item_set_digest(["arith-0000", "arith-0001", "arith-0002"])
    assert (series.n_items, series.other_sets, series.other_debug) == (3, 2, 1)
    html = render_report(prepare_report(run))
    assert f"item set {series.item_set} (3 items)" in html
    assert "2 earlier run(s) over other item sets left out, 1 of them -k/node-id" in html
    # the 1-item debug run's own report: no earlier run over its item
    (own,) = prepare_report(debug).history
    assert [p.current for p in own.points] == [True] and own.selection == "-k arith-0001"
    assert "No earlier run over these 1 items" in render_report(prepare_report(debug))


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["benchmarks/", "--llm-limit=10"], None),
        (["-k", "gsm8k-0000"], "-k gsm8k-0000"),
        (["-kmmlu"], "-k mmlu"),
        (["--keyword=x or y"], "-k x or y"),
        (["benchmarks/gsm8k.yaml::gsm8k-0001"], "node id benchmarks/gsm8k.yaml::gsm8k-0001"),
        (["--deselect", "a.yaml::b"], "--deselect; node id a.yaml::b"),
        (["benchmarks/test_contamination.py::test_no_sign_of_contamination[mmlu-x]"], None),
    ],
)
def test_debug_selections_are_read_from_the_command_line(args: list[str], want: str | None) -> None:
    assert selection_of(args) == want


def test_history_axis_labels_are_text_in_the_foreground_colour() -> None:
    points = [
        HistoryPoint("a", "2026-11-28T10:00", 0.3, 0.1, 0.5, 10, 100, True),
        HistoryPoint("b", "2026-11-29T10:00", 0.4, 0.2, 0.6, 10, 100, True, current=True),
    ]
    root = _svg(history_svg(HistorySeries("arith", points, 1)))
    labels = [t for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert {t.get("class") for t in labels} == {"axis-label"}
    assert [t.text for t in labels[:5]] == ["0%", "25%", "50%", "75%", "100%"]
    css = (
        Path(__file__).parents[2] / "pytest_llmeval/record/_report_assets/report.css"
    ).read_text()
    assert "svg text.axis-label { fill: var(--fg); font-size: 12px;" in css


@pytest.mark.parametrize("family", ["chatml", "qwen", "llama3", "gemma"])
def test_the_fold_under_the_published_chat_templates(family: str) -> None:
    # The template strings as the models publish them (tests/chat_families.py), rendered
    # as the tokenizer would; Gemma's refuses a system message, so its description is
    # the first user turn's text.
    import jinja2
    from chat_families import FAMILIES as PUBLISHED

    spec = PUBLISHED[family]

    def refuse(message: str) -> None:
        raise ValueError(message)

    template = jinja2.Environment().from_string(spec.template)
    records = []
    for i in range(2):
        record = chat_mc("chatml", f"quiz-a-{i}", "a")
        messages = record["messages"]
        if not spec.system_role:
            messages = messages[1:]
            messages[0] = {"role": "user", "content": "About a.\n\n" + messages[0]["content"]}
        record.update(
            messages=messages,
            prompt=template.render(
                messages=messages,
                add_generation_prompt=True,
                bos_token=spec.bos or "",
                raise_exception=refuse,
            ),
        )
        records.append(record)
    prefixes, split = split_prompts(records, "\n\n")
    (prefix,) = prefixes
    newline = "" if family == "llama3" else "\n"
    assert prefix.turns == 5 and prefix.text.endswith(spec.end_of_turn + newline)
    for record, (_, rest) in zip(records, split, strict=True):
        assert prefix.text + rest == record["prompt"]
        assert not rest.startswith(spec.end_of_turn)
        assert "Example" not in rest and f"own question {record['item_id']}" in rest


def test_earlier_runs_item_ids_are_read_exactly(tmp_path: Path) -> None:
    hostile = 'x", "item_id": "fake'
    records = [
        gen("arith-0000", True, output=hostile),  # record text cannot fake the field
        gen('arith-"quoted"', True),  # an id with an escape: the line is parsed
        gen("arith-0002", True, details={"item_id": "nested"}),  # two matches: parsed
    ]
    path = write_run(tmp_path / "r", {"arith": records}, None, None)
    assert _recorded_ids(path, "arith") == ["arith-0000", 'arith-"quoted"', "arith-0002"]
    assert _recorded_ids(path, "missing") == []
