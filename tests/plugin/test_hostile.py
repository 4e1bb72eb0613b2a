"""Hostile inputs: nothing fails silently (docs/FAILURES.md, one test per case).

Each test runs pytest as a user would (pytester, the tiny random model) on a broken model,
bad data, a bad option or an interrupted run, and checks the exact message, the exit
status, and that whatever was already computed is in the run record.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from tiny_projects import INTERRUPT_CONFTEST, KILL_CONFTEST

from pytest_llmeval.record import read_summary
from pytest_llmeval.record._rundir import RunLease, run_state, strip_timing

pytest.importorskip("torch")


def _args(model: Path | str, *extra: str) -> list[str]:
    return [
        f"--llm-model={model}",
        "--llm-data-dir=.",
        "-p",
        "no:cacheprovider",
        "--llm-output=out",
        *extra,
    ]


def _runs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir())


def _lines(run: Path, task: str) -> list[dict[str, Any]]:
    path = run / "tasks" / f"{task}_output.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _no_constant(name: str) -> Any:
    raise ValueError(f"not strict JSON: {name}")


def _assert_strict_json(run: Path) -> None:
    """Every JSON file of a run parses without NaN or Infinity."""
    for path in run.rglob("*.json"):
        json.loads(path.read_text(), parse_constant=_no_constant)
    for path in run.rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            json.loads(line, parse_constant=_no_constant)


def _count(log: str, verb: str) -> int:
    return sum(int(n) for n in re.findall(rf": {verb} (\d+)", log))


def _failure(result: pytest.RunResult, node: str, message: str) -> None:
    """The failure section of item ``node`` (``task[item-id]``) holds ``message`` (a glob),
    on the line after its header: the message, once, with no traceback."""
    task, _, item = node.partition("::")
    header = f"{task}[[]{item}[]]" if item else task  # a task's stand-in item: its name
    result.stdout.fnmatch_lines([f"_* {header} _*", message])


def _outcomes(result: pytest.RunResult) -> dict[str, int]:
    outcomes = result.parseoutcomes()
    outcomes.pop("warnings", None)  # in-process pytester: "already imported" warnings
    return outcomes


def _without_floor(pytester: pytest.Pytester, task: str) -> None:
    spec = pytester.path / f"{task}.yaml"
    spec.write_text(spec.read_text().replace("floor: 0.0\n", ""))


@pytest.fixture(scope="module")
def nan_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with damaged weights: its norm weights are NaN."""
    import torch
    from safetensors.torch import load_file, save_file

    target = tmp_path_factory.mktemp("nan") / "nan-model"
    shutil.copytree(tiny_model_dir, target)
    (weights,) = target.glob("*.safetensors")
    tensors = load_file(weights)
    for name in tensors:
        if "norm" in name:
            tensors[name] = torch.full_like(tensors[name], float("nan"))
    save_file(tensors, weights, metadata={"format": "pt"})
    return target


@pytest.fixture(scope="module")
def corrupt_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with a corrupt safetensors header."""
    target = tmp_path_factory.mktemp("corrupt") / "corrupt-model"
    shutil.copytree(tiny_model_dir, target)
    (weights,) = target.glob("*.safetensors")
    data = bytearray(weights.read_bytes())
    data[10:200] = b"\xff" * 190
    weights.write_bytes(bytes(data))
    return target


# ------------------------------------------------------------------ broken models


def test_nan_weights_are_item_errors_never_predictions(
    pytester: pytest.Pytester, nan_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    result = pytester.runpytest(*_args(nan_model_dir))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            f"ERROR arith: arith-0000: the model ({nan_model_dir}) could not generate: the "
            "model's logits are not finite numbers (NaN or infinity) at output token 1: no "
            "token can be chosen",
            f"ERROR colors: colors-0000: the model ({nan_model_dir}) gave log-likelihoods that "
            "are not finite numbers for choice(s) 0 'red': nan; 1 'table': nan; 2 'seven': "
            "nan: no prediction is made from them. Damaged weights, or an overflow in float16 "
            "(try --llm-dtype float32 or bfloat16)",
        ]
    )
    result.stdout.fnmatch_lines(["arith * 0/5 *error*", "colors * 0/4 *error*"])
    assert result.parseoutcomes()["failed"] == 9
    (run,) = _runs(pytester.path / "out")
    _assert_strict_json(run)
    colors = _lines(run, "colors")
    assert len(colors) == 4  # recorded, with the error, never with a prediction
    assert all(r["error"] and r["pred"] is None and not r["correct"] for r in colors)
    summary = read_summary(run / "metrics_summary.json")
    assert summary["colors"]["score"] is None and summary["colors"]["n"] == 0
    assert summary["colors"]["status"] == "error"
    assert summary["colors"]["errors"]["n"] == 4


def test_corrupt_weights_fail_once_naming_the_path(
    pytester: pytest.Pytester, corrupt_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    result = pytester.runpytest(*_args(corrupt_model_dir))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    message = (
        f"--llm-model={corrupt_model_dir}: cannot load the model in {corrupt_model_dir}: "
        "SafetensorError: *"
    )
    result.stdout.fnmatch_lines([message, f"! the model could not be loaded: {message} !"])
    # one attempt, the run stops there; its task's gate is a failed test case of its own
    assert _outcomes(result) == {"failed": 1, "gate": 1}
    out = result.stdout.str()
    assert "Traceback" not in out and "During handling" not in out
    assert out.count("_ arith[arith-0000] _") == 1  # the failure is printed once


def test_an_item_the_backend_cannot_score_fails_alone(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    # One request of the batch comes back NaN (as from a damaged row of a cache).
    pytester.makeconftest(
        """
        import pytest_llmeval.model._hf as hf
        real = hf.HFBackend.loglikelihood
        def one_nan(self, requests):
            out = real(self, requests)
            return [
                type(r)(float("nan"), r.is_greedy, r.n_tokens) if "fruit" in q.context else r
                for q, r in zip(requests, out)
            ]
        def pytest_configure(config):
            hf.HFBackend.loglikelihood = one_nan
        def pytest_unconfigure(config):
            hf.HFBackend.loglikelihood = real
        """
    )
    result = pytester.runpytest(*_args(tiny_model_dir, "-k", "colors"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    _failure(
        result,
        "colors::colors-0002",
        f"the model ({tiny_model_dir}) gave log-likelihoods that are not finite numbers for "
        "choice(s) 0 'nine': nan; 1 'green': nan; 2 'apple': nan: no prediction is made from "
        "them. Damaged weights, or an overflow in float16 (try --llm-dtype float32 or bfloat16)",
    )
    assert _outcomes(result)["failed"] == 1
    (run,) = _runs(pytester.path / "out")
    lines = {r["item_id"]: r for r in _lines(run, "colors")}
    assert sorted(lines) == ["colors-0000", "colors-0001", "colors-0002", "colors-0003"]
    assert lines["colors-0002"]["error"] and lines["colors-0000"]["error"] is None
    assert "computed 4 item(s)" in (run / "eval.log").read_text()  # one batch


# ------------------------------------------------------------------ tasks that run nothing


def test_empty_data_file_with_a_floor_fails_the_run(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    (pytester.path / "arith.jsonl").write_text("")
    result = pytester.runpytest(*_args(tiny_model_dir, "--llm-floor", "arith=0.5"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    reason = f"its data has no rows: {pytester.path / 'arith.jsonl'} (0 rows)"
    message = f"the task has a floor of 0.5 but runs no item: {reason}"
    _failure(result, "arith-empty", message)
    result.stdout.fnmatch_lines(["arith * 0/0 *error*", f"ERROR arith: arith-empty: {message}"])
    (run,) = _runs(pytester.path / "out")
    assert len(_lines(run, "colors")) == 4  # the other task's results are kept
    summary = read_summary(run / "metrics_summary.json")
    assert summary["arith"]["status"] == "error"


def test_empty_data_file_without_a_floor_is_a_skip_with_the_reason(
    pytester: pytest.Pytester, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    _without_floor(pytester, "arith")
    (pytester.path / "arith.jsonl").write_text("")
    result = pytester.runpytest("--llm-data-dir=.", "-p", "no:cacheprovider", "-rs", "-k", "arith")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [f"SKIPPED [[]1[]] arith.yaml: its data has no rows: {pytester.path / 'arith.jsonl'} *"]
    )


def test_a_data_dir_that_does_not_exist_is_a_usage_error(
    pytester: pytest.Pytester, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    result = pytester.runpytest("--llm-data-dir=./nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --llm-data-dir: no such directory: nope; give the folder that holds the "
            "benchmark folders (gsm8k/, mmlu/, ...)"
        ]
    )


def test_a_floor_on_a_task_whose_data_is_not_installed_fails(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    spec = pytester.path / "arith.yaml"
    spec.write_text(spec.read_text().replace("path: arith.jsonl", "path: absent/test.jsonl"))
    result = pytester.runpytest(*_args(tiny_model_dir, "-k", "arith"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    _failure(
        result,
        "arith-data",
        f"the task has a floor of 0.0 but runs no item: {pytester.path / 'arith.yaml'}: "
        "dataset: benchmark data not installed: data file 'absent/test.jsonl' not found, and "
        f"no 'absent' folder in the data directories [{pytester.path}]; put a local copy there "
        "(--llm-data-dir, LLMEVAL_DATA_DIR) (the spec names no hub dataset)",
    )


def test_all_items_excluded_with_a_floor_fails_the_run(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    exclude = pytester.path / "exclude.txt"
    exclude.write_text("".join(f"colors-000{i}\n" for i in range(4)))
    result = pytester.runpytest(
        *_args(tiny_model_dir, f"--llm-set=run.exclude={exclude}", "-k", "colors")
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    _failure(
        result,
        "colors-empty",
        "the task has a floor of 0.0 but runs no item: all 4 of its items are excluded by "
        f"run.exclude ({exclude})",
    )


def test_every_item_over_the_window_fails_a_floor_and_is_recorded(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    result = pytester.runpytest(
        *_args(tiny_model_dir, "-k", "colors", "--llm-set=model.max_length=16")
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "colors: 4 of 4 items do not fit the context window (16 tokens) and are not "
            "scored: listed in metrics_summary.json",
            "ERROR colors: none of its 4 selected items fits the context window (16 tokens), "
            "so no score holds its floor 0.0",
        ]
    )
    # Without a floor: skipped and listed, and the record is written all the same.
    _without_floor(pytester, "colors")
    shutil.rmtree(pytester.path / "out")
    result = pytester.runpytest(
        *_args(tiny_model_dir, "-k", "colors", "--llm-set=model.max_length=16")
    )
    assert result.ret == pytest.ExitCode.OK
    (run,) = _runs(pytester.path / "out")
    summary = read_summary(run / "metrics_summary.json")
    assert summary["colors"]["not_fitting"]["n"] == 4
    assert (run / "eval_config.json").exists()
    assert all(r["details"]["context_overflow"] for r in _lines(run, "colors"))


# ------------------------------------------------------------------ floors and exclusions


def test_a_floor_for_a_task_that_matches_nothing(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    # With a model (a floor on the command line without one is a usage error of its own,
    # tests/plugin/test_usage_errors.py); the typo is found at collection, before it loads.
    result = pytester.runpytest(*_args(tiny_model_dir, "--llm-floor", "colours=0.5"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --llm-floor: no task named 'colours' was collected (tasks: arith, colors); "
            "check the name, or collect its spec file"
        ]
    )
    # From the ini file (project-wide floors, some for tasks not run now): a warning.
    pytester.makeini("[pytest]\nllm_floors =\n    colours=0.5\n")
    result = pytester.runpytest("--llm-data-dir=.", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "WARNING llm_floors (ini): no collected task named 'colours' (tasks: arith, "
            "colors); its floor holds nothing in this run"
        ]
    )


def test_exclusions_that_match_nothing_are_warned_and_recorded(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    exclude = pytester.path / "exclude.txt"
    exclude.write_text("colors-0003\ncolours-0001\n")
    result = pytester.runpytest(
        *_args(tiny_model_dir, f"--llm-set=run.exclude={exclude}", "-k", "colors")
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            f"WARNING --llm-set run.exclude {exclude}: 1 of 2 ids match no item of the collected "
            "tasks (colours-0001)"
        ]
    )
    (run,) = _runs(pytester.path / "out")
    config = json.loads((run / "eval_config.json").read_text())
    assert config["excluded_items"]["unmatched"] == ["colours-0001"]


# ------------------------------------------------------------------ options checked first


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "--llm-baseline=nope",
            "ERROR: --llm-baseline (ini llm_baseline): nope: not a run directory (no "
            "eval_config.json and no tasks/); pass the directory a run wrote under its output "
            "folder",
        ),
        (
            "--llm-output=out.txt",
            "ERROR: --llm-output (ini llm_output): out.txt is a file; it must be a directory "
            "(or not exist yet)",
        ),
        (
            "--llm-set=run.dir=out.txt",
            "ERROR: run.dir (from --llm-set): out.txt is a file; it must be a "
            "directory (or not exist yet)",
        ),
    ],
)
def test_bad_paths_fail_before_collection(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project, option: str, message: str
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    (pytester.path / "out.txt").write_text("a file\n")
    result = pytester.runpytest(f"--llm-model={tiny_model_dir}", "--llm-data-dir=.", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_a_bad_model_setting_is_named_before_the_model_path(
    pytester: pytest.Pytester, write_project
) -> None:  # type: ignore[no-untyped-def]
    """The model settings (ModelSettings) are checked first, then the model's path; both
    before collection, so nothing is loaded or written."""
    write_project(pytester)
    result = pytester.runpytest("--llm-model=./nope", "--llm-data-dir=.", "--llm-dtype=float8")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --llm-dtype (ini llm_dtype): expected one of "
            "auto|float32|bfloat16|float16, got 'float8'"
        ]
    )
    result = pytester.runpytest("--llm-model=./nope", "--llm-data-dir=.")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --llm-model=./nope: no such directory, and not a *"])
    assert not (pytester.path / ".llmeval").exists()


# ------------------------------------------------------------------ item-level data problems


CSV_SPEC = """\
task: quiz
floor: 0.0
dataset: {path: quiz.csv, fields: {choices: [c0, c1, c2]}}
prompt:
  template: "{{ question }}\\nAnswer:"
mode: multiple_choice
multiple_choice:
  choices: "{{ choices }}"
  gold: "{{ answer }}"
"""

SUBSET_SPEC = """\
task: sub
floor: 0.0
dataset: {path: "sub/test/{subset}.jsonl", subsets: "*"}
prompt:
  template: "{{ q }}\\nAnswer:"
  target: "{{ a }}"
fewshot:
  k: 1
  source: {path: "sub/dev/{subset}.jsonl"}
mode: generate
generate:
  target: "{{ a }}"
  max_new_tokens: 2
  extract: [last_number]
  compare: numeric
"""


def test_a_gold_out_of_range_fails_that_item_alone(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    rows = [json.loads(line) for line in (pytester.path / "colors.jsonl").read_text().splitlines()]
    rows[2]["label"] = 7
    (pytester.path / "colors.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = pytester.runpytest(*_args(tiny_model_dir, "-k", "colors"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    _failure(
        result,
        "colors::colors-0002",
        f"{pytester.path / 'colors.yaml'}: field 'multiple_choice.gold': item colors-0002: "
        "index 7 out of range for 3 choices",
    )
    (run,) = _runs(pytester.path / "out")
    assert [r["item_id"] for r in _lines(run, "colors")] == [
        "colors-0000",
        "colors-0001",
        "colors-0003",
    ]
    assert "computed 3 item(s)" in (run / "eval.log").read_text()


def test_a_short_csv_row_fails_that_item_alone(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    (pytester.path / "quiz.yaml").write_text(CSV_SPEC)
    (pytester.path / "quiz.csv").write_text(
        "question,c0,c1,c2,answer\n"
        "Which one is a color?,red,table,seven,0\n"
        "Which one is a number?,blue,seven\n"
        "Which one is a fruit?,nine,green,apple,2\n"
    )
    result = pytester.runpytest(*_args(tiny_model_dir))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    _failure(
        result,
        "quiz::quiz-0001",
        f"{pytester.path / 'quiz.yaml'}: item quiz-0001: {pytester.path / 'quiz.csv'}:3: a row "
        "of 3 fields where the header has 5 (no c2, answer); fix the row (a quote or "
        "separator is probably missing)",
    )
    (run,) = _runs(pytester.path / "out")
    assert [r["item_id"] for r in _lines(run, "quiz")] == ["quiz-0000", "quiz-0002"]


def test_a_missing_fewshot_file_fails_the_items_of_its_subset(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    (pytester.path / "sub.yaml").write_text(SUBSET_SPEC)
    for subset in ("a", "b"):
        folder = pytester.path / "sub" / "test"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{subset}.jsonl").write_text('{"q": "one plus one?", "a": "2"}\n' * 2)
    (pytester.path / "sub" / "dev").mkdir()
    (pytester.path / "sub" / "dev" / "a.jsonl").write_text('{"q": "two?", "a": "2"}\n')
    result = pytester.runpytest(*_args(tiny_model_dir))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    message = (
        f"{pytester.path / 'sub.yaml'}: fewshot.source: data file 'sub/dev/b.jsonl' not found "
        f"in the data directories [{pytester.path}]; set --llm-data-dir or LLMEVAL_DATA_DIR "
        "(the spec names no hub dataset) (every item of subset b)"
    )
    _failure(result, "sub::sub-b-0000", message)
    _failure(result, "sub::sub-b-0001", message)
    assert _outcomes(result)["failed"] == 2
    (run,) = _runs(pytester.path / "out")
    assert [r["item_id"] for r in _lines(run, "sub")] == ["sub-a-0000", "sub-a-0001"]


# ------------------------------------------------------------------ prompts over the window


def test_multiple_choice_over_the_window_is_truncated_and_flagged(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    spec = pytester.path / "colors.yaml"
    spec.write_text(spec.read_text() + "  overflow: truncate_left\n")
    result = pytester.runpytest(
        *_args(tiny_model_dir, "-k", "colors", "--llm-set=model.max_length=20")
    )
    assert result.ret == pytest.ExitCode.OK
    (run,) = _runs(pytester.path / "out")
    cut = [r for r in _lines(run, "colors") if (r["details"] or {}).get("truncated_prompt_tokens")]
    assert cut and all(len(r["logprobs"]) == 3 for r in cut)
    summary = read_summary(run / "metrics_summary.json")
    assert summary["colors"]["truncated"] == {"n": len(cut), "items": [r["item_id"] for r in cut]}


# ------------------------------------------------------------------ resume


def _kill_after(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, n: int, *args: str
) -> Path:
    """An interrupted run (SIGKILL after ``n`` items); its directory."""
    before = set(_runs(pytester.path / "out")) if (pytester.path / "out").exists() else set()
    monkeypatch.setenv("KILL_AFTER", str(n))
    killed = pytester.runpytest_subprocess(*args)
    monkeypatch.delenv("KILL_AFTER")
    assert killed.ret == -9
    (run,) = set(_runs(pytester.path / "out")) - before
    assert run_state(run)[0] == "interrupted"
    return run


def test_resume_recomputes_an_item_whose_data_was_edited(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The kill-and-resume check with the data file edited between the kill and the rerun:
    the edited item is recomputed, the others reused, and the records equal those of an
    uninterrupted run on the edited data."""
    write_project(pytester)
    pytester.makeconftest(KILL_CONFTEST)
    args = _args(tiny_model_dir, "--llm-batch-size=2", "-k", "arith")
    interrupted = _kill_after(pytester, monkeypatch, 3, *args)
    assert [r["item_id"] for r in _lines(interrupted, "arith")] == [
        "arith-0000",
        "arith-0001",
        "arith-0002",
    ]
    data = pytester.path / "arith.jsonl"
    data.write_text(data.read_text().replace("one plus one", "one plus two").replace('"2"', '"3"'))
    resumed = pytester.runpytest_subprocess(*args)
    assert resumed.ret == 0
    run = _runs(pytester.path / "out")[-1]
    log = (run / "eval.log").read_text()
    assert _count(log, "reused") == 2  # arith-0000 and arith-0002
    assert _count(log, "computed") == 3  # arith-0001 (edited), arith-0003, arith-0004
    reference = pytester.runpytest_subprocess(*args, "--llm-set=run.resume=false")
    assert reference.ret == 0
    ref = _runs(pytester.path / "out")[-1]
    want = {r["item_id"]: strip_timing(r) for r in _lines(ref, "arith")}
    got = {r["item_id"]: strip_timing(r) for r in _lines(run, "arith")}
    assert got == want
    assert "one plus two" in got["arith-0001"]["prompt"]
    assert (interrupted / "superseded_by.txt").exists()


def test_resume_never_reuses_across_repeat_counts(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    pytester.makeconftest(KILL_CONFTEST)
    args = _args(tiny_model_dir, "--llm-batch-size=2", "-k", "colors")
    interrupted = _kill_after(pytester, monkeypatch, 2, *args)
    again = pytester.runpytest_subprocess(*args, "--llm-set=run.repeat=2")
    assert again.ret == 0
    log = (_runs(pytester.path / "out")[-1] / "eval.log").read_text()
    assert _count(log, "reused") == 0 and _count(log, "computed") == 4
    assert run_state(interrupted)[0] == "interrupted"  # still offered: nothing was reused


def test_resume_never_reuses_across_package_versions(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """A fixed extractor comes with another package version (or source digest, or commit):
    the items of the interrupted run are not reused, and it stays offered for resume."""
    write_project(pytester)
    pytester.makeconftest(
        KILL_CONFTEST
        + """
import pytest_llmeval.record._resume as resume
if os.environ.get("PACKAGE_VERSION"):
    _real = resume.package_identity()
    resume.package_identity = lambda: {**_real, "version": os.environ["PACKAGE_VERSION"]}
"""
    )
    args = _args(tiny_model_dir, "--llm-batch-size=2", "-k", "colors")
    interrupted = _kill_after(pytester, monkeypatch, 2, *args)
    monkeypatch.setenv("PACKAGE_VERSION", "99.0")
    again = pytester.runpytest_subprocess(*args)
    assert again.ret == 0
    log = (_runs(pytester.path / "out")[-1] / "eval.log").read_text()
    assert _count(log, "reused") == 0 and _count(log, "computed") == 4
    assert run_state(interrupted)[0] == "interrupted"


def test_a_live_run_is_never_reused_nor_superseded(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    pytester.makeconftest(KILL_CONFTEST)
    args = _args(tiny_model_dir, "--llm-batch-size=2", "-k", "colors")
    first = _kill_after(pytester, monkeypatch, 2, *args)
    # The same run, still running elsewhere: it holds its lease (and heartbeat).
    lease = RunLease(first)
    lease.acquire()
    try:
        assert run_state(first)[0] == "live"
        second = pytester.runpytest(*args)
        assert second.ret == 0
        log = (_runs(pytester.path / "out")[-1] / "eval.log").read_text()
        assert _count(log, "reused") == 0 and _count(log, "computed") == 4
        assert not (first / "superseded_by.txt").exists()
    finally:
        lease.release("interrupted", "killed in the test")
    # The killed first process is named (it died while running), whatever the pids' order.
    state, reason = run_state(first)
    assert state == "interrupted" and reason is not None and reason.endswith(" died")


@pytest.mark.parametrize("how", ["ctrl-c", "-x", "--maxfail"])
def test_an_interrupted_run_is_recorded_as_such_and_resumed(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project, how: str
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    args = _args(tiny_model_dir, "--llm-batch-size=1", "-k", "colors")
    if how == "ctrl-c":
        pytester.makeconftest(INTERRUPT_CONFTEST)
        # (in-process: the inner session's KeyboardInterrupt must not reach this one)
        stopped = pytester.runpytest(*args, no_reraise_ctrlc=True)
        assert stopped.ret == pytest.ExitCode.INTERRUPTED
        reason = "interrupted (KeyboardInterrupt or a stop request)"
    else:
        # colors-0001 is answered wrongly by the tiny model: a failure under gate.strict.
        stop = ["-x"] if how == "-x" else ["--maxfail=1"]
        stopped = pytester.runpytest(*args, "--llm-set=gate.strict=true", *stop)
        assert stopped.ret == pytest.ExitCode.TESTS_FAILED
        reason = "stopped early (stopping after 1 failures)"
    (run,) = _runs(pytester.path / "out")
    stopped.stdout.fnmatch_lines([f"run record: {run.relative_to(pytester.path)} ({'*'}"])
    assert run_state(run) == ("interrupted", reason)
    summary = read_summary(run / "metrics_summary.json")
    assert summary["colors"]["status"] == "incomplete"
    assert len(_lines(run, "colors")) == 2  # what ran is kept
    # report.html is written after the lease is released: it says how the run ended,
    # although the run wrote a summary
    report = html.unescape((run / "report.html").read_text(encoding="utf-8"))
    assert ">interrupted<" in report and ">finished<" not in report
    assert f"This run was interrupted ({reason})." in report
    pytester.makeconftest("")
    resumed = pytester.runpytest(*args)
    assert resumed.ret == 0
    later = _runs(pytester.path / "out")[-1]
    log = (later / "eval.log").read_text()
    assert _count(log, "reused") == 2 and _count(log, "computed") == 2
    assert run_state(run)[0] == "superseded"
    assert ">finished<" in (later / "report.html").read_text(encoding="utf-8")


# ------------------------------------------------------------------ records state facts


@pytest.mark.two_workers
def test_records_state_the_real_settings_of_each_worker(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("xdist")
    write_project(pytester)
    result = pytester.runpytest_subprocess(*_args(tiny_model_dir, "-n", "2"))
    assert result.ret == 0
    (run,) = _runs(pytester.path / "out")
    config = json.loads((run / "eval_config.json").read_text())
    assert config["torch_deterministic_algorithms"] == {
        "enabled": True,
        "warn_only": True,
        "cudnn_deterministic": False,
        "cudnn_benchmark": False,
    }
    assert config["seeds"] == {"python": 1234, "numpy": 1234, "torch": 1234}
    workers = config["workers"]
    assert sorted(workers) == ["gw0", "gw1"]  # one task ran on each worker
    assert {w["device"] for w in workers.values()} == {"cpu"}
    assert len({w["pid"] for w in workers.values()}) == 2
    _assert_strict_json(run)


def test_a_shared_run_dir_is_completed_under_its_merge_lock(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    """``run.dir``: several processes read, merge and rewrite eval_config.json and
    metrics_summary.json; each does so holding the directory's lock."""
    write_project(pytester)
    pytester.makeconftest(
        """
        import pytest_llmeval.record._rundir as rundir
        real = rundir.RunDir.write_json
        def checked(self, name, data):
            held = rundir._lock_held(self.path / rundir.MERGE_LOCK)
            with open("lock-seen.txt", "a") as fh:
                fh.write(f"{name} {held}\\n")
            return real(self, name, data)
        def pytest_configure(config):
            rundir.RunDir.write_json = checked
        def pytest_unconfigure(config):
            rundir.RunDir.write_json = real
        """
    )
    for task in ("arith", "colors"):
        result = pytester.runpytest(
            *_args(tiny_model_dir, "--llm-set=run.dir=combined", "-k", task)
        )
        assert result.ret == 0
    seen = (pytester.path / "lock-seen.txt").read_text().splitlines()
    assert seen == ["eval_config.json True", "eval_config.json True"]
    run = pytester.path / "combined"
    assert sorted(read_summary(run / "metrics_summary.json")) == ["arith", "colors"]
    assert run_state(run) == ("finished", None)


# ------------------------------------------------------------------ JUnit XML


def test_junit_xml_has_compact_properties_and_wrong_answers_as_failures(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    result = pytester.runpytest(*_args(tiny_model_dir, "--junitxml=report.xml"))
    assert result.ret == 0
    cases = {c.attrib["name"]: c for c in ET.parse(pytester.path / "report.xml").iter("testcase")}
    arith = cases["arith-0000"]  # the tiny model answers arithmetic wrongly
    props = [(p.attrib["name"], p.attrib["value"]) for p in arith.iter("property")]
    assert [name for name, _ in props] == [
        "task",
        "correct",
        "score",
        "extracted",
        "target",
        "finish_reason",
    ]
    assert dict(props)["task"] == "arith" and dict(props)["correct"] == "false"
    # A failure to dashboards (not counted by pytest: the exit status above is 0).
    (failure,) = arith.findall("failure")
    assert failure.attrib["message"] == (
        "wrong: extracted nothing, target '5' (the task's floor decides the run)"
    )
    assert not arith.findall("skipped")
    right = cases["colors-0000"]
    assert not [c for c in right if c.tag != "properties"]  # passed
    assert (
        dict((p.attrib["name"], p.attrib["value"]) for p in right.iter("property"))["correct"]
        == "true"
    )
    assert "prompt" not in (pytester.path / "report.xml").read_text()
    result.stdout.fnmatch_lines(["*3 passed*6 wrong*2 gate passed*"])
    strict = pytester.runpytest(
        *_args(tiny_model_dir, "--junitxml=strict.xml", "--llm-set=gate.strict=true")
    )
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    cases = {c.attrib["name"]: c for c in ET.parse(pytester.path / "strict.xml").iter("testcase")}
    assert cases["arith-0000"].findall("failure")


# ------------------------------------------------------------------ determinism check


def test_the_determinism_check_reruns_the_same_batch(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    pytester.makeconftest(
        """
        import json, os, pytest_llmeval.model._hf as hf
        real = hf.HFBackend.loglikelihood
        def logged(self, requests):
            with open("calls.jsonl", "a") as fh:
                fh.write(json.dumps(sorted({r.context for r in requests})) + "\\n")
            return real(self, requests)
        def pytest_configure(config):
            hf.HFBackend.loglikelihood = logged
        def pytest_unconfigure(config):
            hf.HFBackend.loglikelihood = real
        """
    )
    result = pytester.runpytest(
        *_args(tiny_model_dir, "-k", "colors", "--llm-set=run.check_determinism=2")
    )
    assert result.ret == 0
    calls = [json.loads(line) for line in (pytester.path / "calls.jsonl").read_text().splitlines()]
    assert len(calls) == 2 and calls[0] == calls[1]  # the rerun: the same items in one call
    (run,) = _runs(pytester.path / "out")
    checked = [r["determinism"] for r in _lines(run, "colors")]
    assert checked == ["ok", "ok", None, None]


def test_tolerance_follows_the_dtype() -> None:
    from pytest_llmeval.compute import logprob_tolerance

    assert logprob_tolerance("float32", -2.0) == pytest.approx(1e-4 + 2e-5)
    assert logprob_tolerance("bfloat16", -2.0) == pytest.approx(5e-2 + 2e-2)
    assert logprob_tolerance(None, -2.0) == logprob_tolerance("bfloat16", -2.0)
