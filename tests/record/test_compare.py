"""Comparison with a baseline run: loading records, McNemar, setting diffs, gates, output."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_llmeval._errors import LlmEvalError
from pytest_llmeval.gate import (
    ABSENT,
    Comparison,
    ConfigDiff,
    GateRule,
    TaskDelta,
    gate_failures,
    parse_gate,
)
from pytest_llmeval.record._compare import RunRecord, compare_runs, format_comparison, load_run
from pytest_llmeval.scorer import mcnemar_exact

BASE_CONFIG: dict[str, Any] = {
    "model": "SmolLM2-135M",
    "device": "cpu",
    "dtype": "float32",
    "batch_size": 8,
    "limit": None,
    "seed": 1234,
    "run_dir": "/runs/20240101-120000_SmolLM2",
    "data_dirs": ["/data/a"],
    "started_at": "2024-01-01T12:00:00",
    "model_info": {
        "model_path": "/home/a/models/smol.gguf",
        "dtype": "float32",
        "torch": "2.4.0",
        "transformers": "4.45.0",
    },
    "tasks": {
        "mmlu": {
            "metric": "acc",
            "floor": 0.3,
            "selected": 11,
            "total_items": 14042,
            "fewshot_k": 5,
            "prompt_hash": "abc123",
            "fewshot": {"k": 5, "source": {"split": "dev"}},
        },
    },
    "environment": {
        "hostname": "runner-1",
        "timestamp": "2024-01-01T12:00:00",
        "python": "3.11.7",
        "libraries": {"torch": "2.4.0", "transformers": "4.45.0"},
        "cuda": {"cuda": "12.1", "gpus": ["NVIDIA H100"]},
        "model": {"path": "/home/a/models/smol.gguf", "sha256": "aa" * 32},
    },
}


def item(item_id: str, correct: bool, **extra: Any) -> dict[str, Any]:
    return {
        "task": "mmlu",
        "item_id": item_id,
        "correct": correct,
        "score": 1.0 if correct else 0.0,
        "prompt": f"Question {item_id}",
        "target": "A",
        **extra,
    }


def write_run(
    path: Path,
    config: dict[str, Any] | None,
    tasks: dict[str, list[dict[str, Any]]],
    metrics: dict[str, Any] | None = None,
    tail: dict[str, str] | None = None,
) -> Path:
    """A run directory: eval_config.json, tasks/<task>_output.jsonl, metrics_summary.json."""
    (path / "tasks").mkdir(parents=True)
    if config is not None:
        (path / "eval_config.json").write_text(json.dumps(config, indent=2))
    if metrics is not None:
        (path / "metrics_summary.json").write_text(json.dumps(metrics))
    for task, records in tasks.items():
        text = "".join(json.dumps(r) + "\n" for r in records)
        text += (tail or {}).get(task, "")
        (path / "tasks" / f"{task}_output.jsonl").write_text(text)
    return path


# ---------------------------------------------------------------------------- load_run


def test_load_run_reads_config_metrics_and_items(tmp_path: Path) -> None:
    metrics = {"mmlu": {"n": 2, "score": 0.5, "stderr": 0.35, "ci95": [0.1, 0.9]}}
    run = write_run(
        tmp_path / "run",
        BASE_CONFIG,
        {"mmlu": [item("mmlu-0000", True), item("mmlu-0001", False)]},
        metrics,
    )
    record = load_run(run)
    assert isinstance(record, RunRecord)
    assert record.path == run
    assert record.config == BASE_CONFIG
    assert record.metrics == metrics
    assert list(record.items) == ["mmlu"]
    assert record.items["mmlu"]["mmlu-0001"]["correct"] is False


def test_load_run_keeps_last_line_of_an_item_and_skips_broken_lines(tmp_path: Path) -> None:
    records = [
        item("mmlu-0000", False),
        item("mmlu-0001", True),
        item("mmlu-0000", True, output="second try"),  # resumed run: the last line wins
        {"no_item_id": True},
    ]
    run = write_run(
        tmp_path / "run",
        BASE_CONFIG,
        {"mmlu": records},
        tail={"mmlu": 'not json\n[1, 2]\n\n{"item_id": "mmlu-0002", "corr'},  # crash mid-line
    )
    record = load_run(run)
    assert record.metrics == {}
    items = record.items["mmlu"]
    assert sorted(items) == ["mmlu-0000", "mmlu-0001"]
    assert items["mmlu-0000"]["correct"] is True
    assert items["mmlu-0000"]["output"] == "second try"


def test_load_run_task_names_may_contain_underscores(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", None, {"mmlu_pro": [item("x-0", True)]})
    (run / "tasks" / "notes.txt").write_text("ignored")
    record = load_run(run)
    assert record.config == {}
    assert list(record.items) == ["mmlu_pro"]


@pytest.mark.parametrize("kind", ["missing", "empty", "file"])
def test_load_run_rejects_what_is_not_a_run_directory(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "nothing"
    if kind == "empty":
        path.mkdir()
    elif kind == "file":
        path.write_text("{}")
    with pytest.raises(LlmEvalError, match="not a run directory") as info:
        load_run(path)
    assert str(path) in str(info.value)


def test_load_run_names_a_corrupt_config(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", None, {})
    (run / "eval_config.json").write_text('{"model": ')
    with pytest.raises(LlmEvalError, match=r"eval_config\.json: not valid JSON"):
        load_run(run)


# ---------------------------------------------------------------------------- McNemar


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        (0, 0, 1.0),
        (1, 1, 1.0),
        (1, 0, 1.0),
        (10, 0, 0.001953125),
        (2, 8, 0.109375),  # 2 * (1 + 10 + 45) / 2**10
        (5, 15, 0.04138946533203125),  # 2 * 21700 / 2**20
        (50, 50, 1.0),
    ],
)
def test_mcnemar_known_values(b: int, c: int, p: float) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(p, rel=1e-12)
    assert mcnemar_exact(c, b) == pytest.approx(p, rel=1e-12)


def _log_space_p(b: int, c: int) -> float:
    n, k = b + c, min(b, c)
    logs = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2)
        for i in range(k + 1)
    ]
    top = max(logs)
    return min(1.0, 2 * math.exp(top) * math.fsum(math.exp(x - top) for x in logs))


@pytest.mark.parametrize(("b", "c"), [(1400, 1600), (1450, 1550), (1000, 2000), (1499, 1501)])
def test_mcnemar_does_not_underflow_for_thousands_of_pairs(b: int, c: int) -> None:
    p = mcnemar_exact(b, c)
    assert 0.0 < p <= 1.0
    assert p == pytest.approx(_log_space_p(b, c), rel=1e-9)


def test_mcnemar_extreme_tail_stays_positive() -> None:
    assert mcnemar_exact(1500, 1500) == 1.0
    assert 0.0 < mcnemar_exact(0, 3000) < 1e-300
    assert mcnemar_exact(0, 3000) <= mcnemar_exact(1, 2999)


def test_mcnemar_rejects_negative_counts() -> None:
    with pytest.raises(ValueError, match="b=-1"):
        mcnemar_exact(-1, 3)


@given(st.integers(min_value=0, max_value=400), st.integers(min_value=0, max_value=400))
def test_mcnemar_symmetric_and_in_unit_interval(b: int, c: int) -> None:
    p = mcnemar_exact(b, c)
    assert p == mcnemar_exact(c, b)
    assert 0.0 < p <= 1.0


@given(st.integers(min_value=1, max_value=400).flatmap(lambda n: st.tuples(st.just(n), st.data())))
def test_mcnemar_monotone_in_imbalance(args: tuple[int, st.DataObject]) -> None:
    n, data = args
    b1 = data.draw(st.integers(min_value=0, max_value=n // 2))
    b2 = data.draw(st.integers(min_value=0, max_value=b1))
    # |b2 - c2| >= |b1 - c1| with b + c = n fixed: the p-value cannot grow
    assert mcnemar_exact(b2, n - b2) <= mcnemar_exact(b1, n - b1)


# ---------------------------------------------------------------------------- compare_runs


def current_config() -> dict[str, Any]:
    config = copy.deepcopy(BASE_CONFIG)
    config["run_dir"] = "/runs/20240202-090000_SmolLM2"
    config["data_dirs"] = ["/elsewhere/data"]
    config["started_at"] = "2024-02-02T09:00:00"
    config["model_info"]["model_path"] = "/ci/cache/smol.gguf"
    config["tasks"]["mmlu"]["floor"] = 0.35
    config["tasks"]["mmlu"]["selected"] = 12
    config["environment"]["hostname"] = "runner-7"
    config["environment"]["timestamp"] = "2024-02-02T09:00:00"
    config["environment"]["python"] = "3.12.1"
    config["environment"]["model"]["path"] = "/ci/cache/smol.gguf"
    return config


def make_runs(
    tmp_path: Path, current_cfg: dict[str, Any] | None = None
) -> tuple[RunRecord, RunRecord]:
    # baseline: 0-5 correct, 6-9 wrong, 10 only in the baseline
    base_items = [item(f"mmlu-{i:04d}", i <= 5) for i in range(11)]
    # now: 0, 1, 2 flipped to wrong, 7 flipped to correct; 11 and 12 only in this run
    now_correct = {3, 4, 5, 7, 11}
    cur_items = [item(f"mmlu-{i:04d}", i in now_correct) for i in [*range(10), 11, 12]]
    baseline = write_run(tmp_path / "base", BASE_CONFIG, {"mmlu": base_items})
    current = write_run(
        tmp_path / "cur",
        current_cfg if current_cfg is not None else current_config(),
        {"mmlu": cur_items, "gsm8k": [item("gsm8k-0000", True)]},
    )
    return load_run(current), load_run(baseline)


def test_compare_pairs_items_and_tests_the_change(tmp_path: Path) -> None:
    current, baseline = make_runs(tmp_path)
    comparison = compare_runs(current, baseline)
    assert comparison.baseline_path == baseline.path
    assert comparison.current_path == current.path
    assert [t.task for t in comparison.tasks] == ["gsm8k", "mmlu"]
    gsm8k, mmlu = comparison.tasks
    assert mmlu.n_shared == 10
    assert mmlu.baseline_score == pytest.approx(0.6)
    assert mmlu.current_score == pytest.approx(0.4)
    assert mmlu.delta == pytest.approx(-0.2)
    assert mmlu.delta_points == pytest.approx(-20.0)
    assert mmlu.regressed == ["mmlu-0000", "mmlu-0001", "mmlu-0002"]
    assert mmlu.improved == ["mmlu-0007"]
    assert mmlu.p_value == pytest.approx(0.625)  # 2 * P(X <= 1), X ~ Bin(4, 1/2)
    assert mmlu.significant is False
    assert (mmlu.only_in_baseline, mmlu.only_in_current) == (1, 2)
    # a task only one run has
    assert gsm8k.n_shared == 0
    assert (gsm8k.only_in_baseline, gsm8k.only_in_current) == (0, 1)
    assert math.isnan(gsm8k.delta)
    assert gsm8k.p_value == 1.0 and not gsm8k.significant
    assert gsm8k.regressed == [] and gsm8k.improved == []


def test_alpha_decides_significance(tmp_path: Path) -> None:
    current, baseline = make_runs(tmp_path)
    mmlu = compare_runs(current, baseline, alpha=0.7).tasks[1]
    assert mmlu.significant
    assert compare_runs(current, baseline, alpha=0.7).alpha == 0.7


def test_volatile_fields_are_not_differences(tmp_path: Path) -> None:
    current, baseline = make_runs(tmp_path)
    comparison = compare_runs(current, baseline)
    assert comparison.config_diffs == []
    assert comparison.env_diffs == []
    assert not comparison.differs


def test_identical_runs_do_not_differ(tmp_path: Path) -> None:
    run = load_run(write_run(tmp_path / "run", BASE_CONFIG, {"mmlu": [item("m-0", True)]}))
    comparison = compare_runs(run, run)
    assert not comparison.differs
    assert comparison.tasks[0].delta == 0.0
    assert comparison.tasks[0].p_value == 1.0


def test_fewshot_change_is_a_config_diff(tmp_path: Path) -> None:
    config = current_config()
    config["tasks"]["mmlu"]["fewshot_k"] = 0
    config["tasks"]["mmlu"]["fewshot"]["source"]["split"] = "validation"
    config["dtype"] = "bfloat16"
    current, baseline = make_runs(tmp_path, config)
    comparison = compare_runs(current, baseline)
    assert comparison.config_diffs == [
        ConfigDiff("dtype", "float32", "bfloat16"),
        ConfigDiff("tasks.mmlu.fewshot.source.split", "dev", "validation"),
        ConfigDiff("tasks.mmlu.fewshot_k", 5, 0),
    ]
    assert comparison.env_diffs == []
    assert comparison.differs


def test_fields_only_one_run_has_are_absent_not_null(tmp_path: Path) -> None:
    config = current_config()
    config["tasks"]["mmlu"]["system_prompt"] = "def456"
    config["limit"] = 100
    current, baseline = make_runs(tmp_path, config)
    diffs = compare_runs(current, baseline).config_diffs
    assert diffs == [
        ConfigDiff("limit", None, 100),
        ConfigDiff("tasks.mmlu.system_prompt", ABSENT, "def456"),
    ]


def test_a_task_only_one_run_configured_is_not_a_settings_diff(tmp_path: Path) -> None:
    config = current_config()
    config["tasks"]["gsm8k"] = {"metric": "exact_match", "fewshot_k": 8}
    current, baseline = make_runs(tmp_path, config)
    assert compare_runs(current, baseline).config_diffs == []


def test_library_version_change_is_an_env_diff(tmp_path: Path) -> None:
    config = current_config()
    config["environment"]["libraries"]["transformers"] = "4.46.1"
    config["environment"]["cuda"]["gpus"] = ["NVIDIA H200"]
    config["model_info"]["transformers"] = "4.46.1"  # repeated there; not a settings diff
    current, baseline = make_runs(tmp_path, config)
    comparison = compare_runs(current, baseline)
    assert comparison.env_diffs == [
        ConfigDiff("environment.cuda.gpus", ["NVIDIA H100"], ["NVIDIA H200"]),
        ConfigDiff("environment.libraries.transformers", "4.45.0", "4.46.1"),
    ]
    assert comparison.config_diffs == []
    assert comparison.differs


def test_without_environment_snapshots_model_info_versions_are_compared(tmp_path: Path) -> None:
    base = copy.deepcopy(BASE_CONFIG)
    del base["environment"]
    config = current_config()
    del config["environment"]
    config["model_info"]["torch"] = "2.5.0"
    baseline = load_run(write_run(tmp_path / "b", base, {"mmlu": [item("m-0", True)]}))
    current = load_run(write_run(tmp_path / "c", config, {"mmlu": [item("m-0", True)]}))
    comparison = compare_runs(current, baseline)
    assert comparison.env_diffs == [ConfigDiff("model_info.torch", "2.4.0", "2.5.0")]
    assert comparison.config_diffs == []


def test_weights_digest_change_is_an_env_diff(tmp_path: Path) -> None:
    config = current_config()
    config["environment"]["model"]["sha256"] = "bb" * 32
    current, baseline = make_runs(tmp_path, config)
    assert [d.field for d in compare_runs(current, baseline).env_diffs] == [
        "environment.model.sha256"
    ]


def test_bool_and_int_are_different_values(tmp_path: Path) -> None:
    config = current_config()
    config["tasks"]["mmlu"]["fewshot_k"] = True
    current, baseline = make_runs(tmp_path, config)
    config2 = current_config()
    config2["batch_size"] = 8.0
    assert compare_runs(current, baseline).config_diffs == [
        ConfigDiff("tasks.mmlu.fewshot_k", 5, True)
    ]
    current2, _ = make_runs(tmp_path / "2", config2)
    assert compare_runs(current2, baseline).config_diffs == []


# ---------------------------------------------------------------------------- gates


@pytest.mark.parametrize(
    ("expr", "rules"),
    [
        ("drop:2", [GateRule("drop", 2.0)]),
        ("drop:2.5%", [GateRule("drop", 2.5)]),
        ("drop:1pt", [GateRule("drop", 1.0)]),
        ("drop:.5", [GateRule("drop", 0.5)]),
        ("drop:3:sig", [GateRule("drop", 3.0, significant=True)]),
        (" DROP : 3% : sig ", [GateRule("drop", 3.0, significant=True)]),
        ("sig", [GateRule("sig")]),
        ("drop:2,config,env", [GateRule("drop", 2.0), GateRule("config"), GateRule("env")]),
    ],
)
def test_parse_gate_accepts(expr: str, rules: list[GateRule]) -> None:
    assert parse_gate(expr) == rules


@pytest.mark.parametrize(
    "expr",
    ["", " ", "drop", "drop:", "drop:-1", "drop:x", "drop:2:foo", "min:5%", "drop:2,", "sig:1"],
)
def test_parse_gate_rejects_with_the_accepted_forms(expr: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_gate(expr)
    message = str(info.value)
    for form in ("drop:N", "drop:N:sig", "sig", "config", "env"):
        assert form in message


def test_gate_rule_round_trips_as_text() -> None:
    rules = parse_gate("drop:2.5:sig,drop:1,sig,config,env")
    assert ",".join(str(r) for r in rules) == "drop:2.5:sig,drop:1,sig,config,env"


def test_gate_failures_on_a_drop(tmp_path: Path) -> None:
    config = current_config()
    config["tasks"]["mmlu"]["fewshot_k"] = 0
    config["environment"]["libraries"]["torch"] = "2.5.0"
    current, baseline = make_runs(tmp_path, config)
    comparison = compare_runs(current, baseline)
    assert gate_failures(comparison, parse_gate("drop:10")) == [
        "mmlu dropped 20.0 points (60.0 -> 40.0, p=0.625, 3 items flipped correct->wrong) > 10.0"
    ]
    assert gate_failures(comparison, parse_gate("drop:20")) == []  # not more than 20
    assert gate_failures(comparison, parse_gate("drop:10:sig")) == []  # p = 0.625
    assert gate_failures(comparison, parse_gate("sig")) == []
    assert gate_failures(comparison, parse_gate("config")) == [
        "settings differ from the baseline: tasks.mmlu.fewshot_k: 5 -> 0"
    ]
    assert gate_failures(comparison, parse_gate("env")) == [
        'environment differs from the baseline: environment.libraries.torch: "2.4.0" -> "2.5.0"'
    ]
    assert len(gate_failures(comparison, parse_gate("drop:1,config,env"))) == 3


def _delta(task: str, base: float, cur: float, p: float, regressed: int) -> TaskDelta:
    return TaskDelta(
        task=task,
        n_shared=200,
        baseline_score=base,
        current_score=cur,
        delta=cur - base,
        p_value=p,
        significant=p < 0.05,
        regressed=[f"{task}-{i:04d}" for i in range(regressed)],
        improved=[],
    )


def test_gate_failures_on_significant_drops() -> None:
    comparison = Comparison(
        baseline_path=Path("base"),
        tasks=[
            _delta("mmlu", 0.61, 0.575, 0.012, 14),
            _delta("gsm8k", 0.30, 0.29, 0.4, 3),
            _delta("arc", 0.50, 0.60, 0.001, 0),  # a significant gain never fails
        ],
        config_diffs=[],
        env_diffs=[],
    )
    line = "mmlu dropped 3.5 points (61.0 -> 57.5, p=0.012, 14 items flipped correct->wrong)"
    assert gate_failures(comparison, parse_gate("drop:2")) == [
        f"{line} > 2.0",
    ]
    assert gate_failures(comparison, parse_gate("drop:0.5")) == [
        f"{line} > 0.5",
        "gsm8k dropped 1.0 points (30.0 -> 29.0, p=0.400, 3 items flipped correct->wrong) > 0.5",
    ]
    assert gate_failures(comparison, parse_gate("drop:0.5:sig")) == [
        f"{line} > 0.5 and significant (p < 0.05)"
    ]
    assert gate_failures(comparison, parse_gate("sig")) == [f"{line} is significant (p < 0.05)"]
    assert gate_failures(comparison, parse_gate("config,env")) == []


# ---------------------------------------------------------------------------- terminal


def test_format_comparison(tmp_path: Path) -> None:
    config = current_config()
    config["tasks"]["mmlu"]["fewshot_k"] = 0
    config["environment"]["libraries"]["transformers"] = "4.46.1"
    current, baseline = make_runs(tmp_path, config)
    lines = format_comparison(compare_runs(current, baseline), max_items=2)
    text = "\n".join(lines)
    assert str(baseline.path) in lines[0]
    row = next(line for line in lines if line.startswith("mmlu "))
    assert row.split() == ["mmlu", "10", "60.0", "40.0", "-20.0", "0.625", "3", "1"]
    assert any(line.startswith("gsm8k ") and "only in this run" in line for line in lines)
    assert "mmlu: compared on 10 shared items (1 only in the baseline, 2 only in this run)" in text
    assert "mmlu: 3 regressed (correct -> wrong):" in text
    assert "mmlu-0000, mmlu-0001 ... and 1 more" in text
    assert "mmlu-0002" not in text
    assert "mmlu: 1 improved (wrong -> correct):" in text
    assert "mmlu-0007" in text
    assert any(line.startswith("WARNING: settings differ") for line in lines)
    assert "    tasks.mmlu.fewshot_k: 5 -> 0" in lines
    assert '    environment.libraries.transformers: "4.45.0" -> "4.46.1"' in lines


def test_format_comparison_without_differences_has_no_warning(tmp_path: Path) -> None:
    current, baseline = make_runs(tmp_path)
    lines = format_comparison(compare_runs(current, baseline))
    assert not any("WARNING" in line or "environment" in line for line in lines)
    assert "mmlu-0002" in "\n".join(lines)


def test_format_comparison_marks_significant_rows() -> None:
    comparison = Comparison(
        baseline_path=Path("base"),
        tasks=[_delta("mmlu", 0.61, 0.575, 0.00001, 14)],
        config_diffs=[ConfigDiff("tasks.mmlu.prompt_hash", "abc", ABSENT)],
        env_diffs=[],
    )
    lines = format_comparison(comparison)
    row = next(line for line in lines if line.startswith("mmlu "))
    assert row.endswith(" *")
    assert "1.0e-05" in row
    assert any(line.startswith("* significant at p < 0.05") for line in lines)
    assert '    tasks.mmlu.prompt_hash: "abc" -> (absent)' in lines


def test_current_config_layout(tmp_path: Path) -> None:
    # the layout the plugin writes: framework versions and paths at the top level
    base: dict[str, Any] = {
        "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "model_path": "/home/a/cache/smol",
        "model_sha256": "aa" * 32,
        "framework": {"backend": "hf", "torch": "2.4.0", "transformers": "4.45.0"},
        "started": "2024-01-01T12:00:00",
        "tasks": {"mmlu": {"source": "/home/a/benchmarks/mmlu.yaml", "fewshot": {"k": 5}}},
    }
    cur = copy.deepcopy(base)
    cur["model_path"] = "/ci/cache/smol"
    cur["started"] = "2024-02-02T09:00:00"
    cur["tasks"]["mmlu"]["source"] = "/ci/benchmarks/mmlu.yaml"
    cur["framework"]["transformers"] = "4.46.0"
    baseline = load_run(write_run(tmp_path / "b", base, {"mmlu": [item("m-0", True)]}))
    current = load_run(write_run(tmp_path / "c", cur, {"mmlu": [item("m-0", True)]}))
    comparison = compare_runs(current, baseline)
    assert comparison.config_diffs == []
    assert comparison.env_diffs == [ConfigDiff("framework.transformers", "4.45.0", "4.46.0")]
    cur["tasks"]["mmlu"]["fewshot"]["k"] = 0
    current = load_run(write_run(tmp_path / "c2", cur, {"mmlu": [item("m-0", True)]}))
    assert compare_runs(current, baseline).config_diffs == [
        ConfigDiff("tasks.mmlu.fewshot.k", 5, 0)
    ]
