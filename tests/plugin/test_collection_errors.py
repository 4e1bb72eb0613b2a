"""Collecting the shipped specs from partial or bad data (docs/FAILURES.md, Data): a spec
whose own data file is missing is not installed, a broken spec the run does not select is
a warning (selected, a collection error: exit 2), two specs of one task name are named, a
subset whose file has no rows is named, and bad data files give FILE:LINE, never a
traceback. Copies of the specs under benchmarks/ read tiny data written here
(``--llm-data-dir``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval.record import read_summary

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
HEADER = "question,choice0,choice1,choice2,choice3,answer\n"


def _args(*extra: str) -> list[str]:
    return ["--llm-data-dir=data", "-p", "no:cacheprovider", "--llm-output=out", *extra]


def _specs(pytester: pytest.Pytester, *names: str) -> None:
    for name in names:
        shutil.copy(BENCHMARKS / f"{name}.yaml", pytester.path / f"{name}.yaml")


def _arc_challenge(pytester: pytest.Pytester, lines: list[str] | None = None) -> Path:
    """Only ARC-Challenge of the ai2_arc folder (two questions)."""
    path = pytester.path / "data" / "ai2_arc" / "ARC-Challenge" / "test.jsonl"
    path.parent.mkdir(parents=True)
    rows = [
        {
            "id": f"q{i}",
            "question": f"Which is {word}?",
            "choices": {"text": [word, "stone"], "label": ["A", "B"]},
            "answerKey": "A",
        }
        for i, word in enumerate(["red", "blue"])
    ]
    path.write_text("\n".join(lines or [json.dumps(r) for r in rows]) + "\n", encoding="utf-8")
    return path


def _no_traceback(result: pytest.RunResult) -> None:
    out = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in out and "TypeError" not in out, out


# ---------------------------------------------------------------- one spec's missing file


def test_a_spec_whose_own_file_is_missing_is_not_installed(pytester: pytest.Pytester) -> None:
    _specs(pytester, "arc_easy", "arc_challenge")
    _arc_challenge(pytester)
    result = pytester.runpytest(*_args("-rs"))
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [[]1[]] arc_easy.yaml: *arc_easy.yaml: dataset: benchmark data not "
            "installed: data file 'ai2_arc/ARC-Easy/test.jsonl' not found, in the data "
            f"directories [[]{pytester.path / 'data'}[]] (their 'ai2_arc' folder holds other "
            "files, not this one: install it, or check dataset.path); put a local copy there "
            "(--llm-data-dir, LLMEVAL_DATA_DIR) or allow the hub (allenai/ai2_arc) with "
            "--llm-set run.hub=true",
        ]
    )
    # The installed one is collected in full (no model here: its items skip).
    result.assert_outcomes(skipped=3)
    listed = pytester.runpytest(*_args("--collect-only", "-q", "-k", "gsm8k or arc_challenge"))
    assert listed.ret == pytest.ExitCode.OK
    listed.stdout.fnmatch_lines(
        ["arc_challenge.yaml::arc_challenge-q0", "arc_challenge.yaml::arc_challenge-q1"]
    )


def test_a_floor_on_a_spec_whose_own_file_is_missing_fails(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    _specs(pytester, "arc_easy", "arc_challenge")
    _arc_challenge(pytester)
    result = pytester.runpytest(
        *_args(f"--llm-model={tiny_model_dir}", "--llm-floor=arc_easy=0.5", "-k", "arc_easy")
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "_* arc_easy-data _*",
            "the task has a floor of 0.5 but runs no item: *arc_easy.yaml: dataset: benchmark "
            "data not installed: data file 'ai2_arc/ARC-Easy/test.jsonl' not found, in the "
            f"data directories [[]{pytester.path / 'data'}[]] (their 'ai2_arc' folder holds "
            "other files, *",
        ]
    )


# ------------------------------------------------------- a broken spec, selected or not


def _break_arc_easy(pytester: pytest.Pytester) -> None:
    spec = pytester.path / "arc_easy.yaml"
    spec.write_text(spec.read_text().replace("mode: multiple_choice", "mode: multiple_choise"))


ARC_EASY_ERROR = (
    "*arc_easy.yaml: field 'mode': unknown value 'multiple_choise'; expected one of "
    "multiple_choice, generate"
)


def test_a_broken_spec_the_run_does_not_select_is_a_warning(pytester: pytest.Pytester) -> None:
    _specs(pytester, "arc_easy", "arc_challenge")
    _arc_challenge(pytester)
    _break_arc_easy(pytester)
    result = pytester.runpytest(*_args("-k", "arc_challenge"))
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "WARNING arc_easy.yaml cannot be collected (this run's -k/-m does not select it, "
            "so the run goes on without it): " + ARC_EASY_ERROR,
        ]
    )
    result.assert_outcomes(skipped=2, deselected=1)
    by_marker = pytester.runpytest(*_args("-m", "knowledge"))  # neither ARC spec
    assert by_marker.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    by_marker.stdout.fnmatch_lines(["WARNING arc_easy.yaml cannot be collected*"])


@pytest.mark.parametrize(
    "select",
    [[], ["-k", "arc_easy"], ["--collect-only"], ["arc_easy.yaml", "-k", "arc_challenge"]],
    ids=["all", "k", "collect-only", "named-file"],
)
def test_a_broken_spec_the_run_selects_is_a_collection_error(
    pytester: pytest.Pytester, select: list[str]
) -> None:
    _specs(pytester, "arc_easy", "arc_challenge")
    _arc_challenge(pytester)
    _break_arc_easy(pytester)
    result = pytester.runpytest(*_args(*select))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*ERROR collecting arc_easy.yaml*", ARC_EASY_ERROR, "*1 error during collection*"]
    )
    assert "WARNING arc_easy.yaml" not in result.stdout.str()
    _no_traceback(result)


# ---------------------------------------------------------------- one task name, twice


def test_two_specs_of_one_task_name_name_both_files(pytester: pytest.Pytester) -> None:
    _specs(pytester, "arc_challenge")
    shutil.copy(pytester.path / "arc_challenge.yaml", pytester.path / "arc_copy.yaml")
    _arc_challenge(pytester)
    result = pytester.runpytest(*_args())
    assert result.ret == pytest.ExitCode.INTERRUPTED
    first, second = pytester.path / "arc_challenge.yaml", pytester.path / "arc_copy.yaml"
    result.stdout.fnmatch_lines(
        [
            "*ERROR collecting arc_copy.yaml*",
            f"{second}: field 'task': the task name 'arc_challenge' is defined twice: in "
            f"{first} and in {second}; task names must be unique among the collected specs: "
            "rename one of them",
        ]
    )
    _no_traceback(result)


# --------------------------------------------------------------------- bad data files


def test_a_jsonl_line_that_is_not_an_object_is_named(pytester: pytest.Pytester) -> None:
    _specs(pytester, "arc_challenge")
    row = {"id": "q0", "question": "?", "choices": {"text": ["a"], "label": ["A"]}}
    data = _arc_challenge(pytester, [json.dumps({**row, "answerKey": "A"}), "[1, 2]"])
    result = pytester.runpytest(*_args())
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            f'{data}:2: expected a JSON object (one row of {{"field": value, ...}} per line), '
            "got an array: [[]1, 2[]]"
        ]
    )
    _no_traceback(result)


def test_a_data_file_that_is_not_utf8_is_named_by_line(pytester: pytest.Pytester) -> None:
    _specs(pytester, "mmlu")
    test, dev = pytester.path / "data" / "mmlu" / "test", pytester.path / "data" / "mmlu" / "dev"
    test.mkdir(parents=True)
    dev.mkdir(parents=True)
    (test / "anatomy_test.csv").write_bytes(
        (HEADER + "one,a,b,c,d,0\nthe caf\xe9 question,a,b,c,d,1\n").encode("cp1252")
    )
    result = pytester.runpytest(*_args())
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            f"{test / 'anatomy_test.csv'}:3: byte 0xe9 (byte 8 of the line) is not UTF-8 "
            "(invalid continuation byte): the file's encoding is not UTF-8 (Windows-1252 or "
            "Latin-1?); re-save it as UTF-8 (e.g. iconv -f cp1252 -t utf-8 anatomy_test.csv > "
            "new-anatomy_test.csv)"
        ]
    )
    _no_traceback(result)


# ------------------------------------------------------------ a subset without rows


def _mmlu(pytester: pytest.Pytester, anatomy: str, listed: bool) -> Path:
    """The shipped MMLU spec over three subjects, two questions each but anatomy's file
    (``anatomy``: its text); ``listed``: the subjects named in ``subsets:``."""
    _specs(pytester, "mmlu")
    if listed:
        spec = pytester.path / "mmlu.yaml"
        spec.write_text(
            spec.read_text().replace('subsets: "*"', "subsets: [anatomy, astronomy, virology]")
        )
    root = pytester.path / "data" / "mmlu"
    for split in ("test", "dev"):
        (root / split).mkdir(parents=True)
    for subject in ("anatomy", "astronomy", "virology"):
        rows = "".join(f"{subject} {split} {i}?,w,x,y,z,{i % 4}\n" for i in range(5))
        (root / "dev" / f"{subject}_dev.csv").write_text(HEADER + rows.replace("split", "dev"))
        test = root / "test" / f"{subject}_test.csv"
        test.write_text(HEADER + f"{subject} one?,w,x,y,z,0\n{subject} two?,w,x,y,z,1\n")
    empty = root / "test" / "anatomy_test.csv"
    empty.write_text(anatomy)
    return empty


def _summary(pytester: pytest.Pytester) -> dict[str, Any]:
    (run,) = [p for p in (pytester.path / "out").iterdir() if p.is_dir()]
    return dict(read_summary(run / "metrics_summary.json")["mmlu"])


@pytest.mark.parametrize(
    ("anatomy", "listed"), [("", True), (HEADER, False)], ids=["zero-bytes", "header-only"]
)
def test_a_subset_without_rows_is_named_and_the_others_run(
    pytester: pytest.Pytester, tiny_model_dir: Path, anatomy: str, listed: bool
) -> None:
    empty = _mmlu(pytester, anatomy, listed)
    result = pytester.runpytest(*_args(f"--llm-model={tiny_model_dir}"))
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "mmlu: scored items of 2 subset(s): astronomy 2, virology 2; 1 subset(s) have no "
            f"rows, not scored: anatomy ({empty} (0 rows))",
            f"WARNING mmlu: subset 'anatomy' runs no item, its data has no rows: {empty} "
            "(0 rows); it is not scored: fill the file, or leave the subset out of "
            "dataset.subsets",
        ]
    )
    summary = _summary(pytester)
    assert summary["n"] == 4
    assert summary["subsets"] == {
        "ran": {"astronomy": 2, "virology": 2},
        "empty": {"anatomy": f"{empty} (0 rows)"},
    }


def test_a_subset_without_rows_fails_a_floor(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    empty = _mmlu(pytester, HEADER, listed=True)
    result = pytester.runpytest(*_args(f"--llm-model={tiny_model_dir}", "--llm-floor=mmlu=0.0"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "_* mmlu-anatomy-empty _*",
            "the task has a floor of 0.0 but its subset 'anatomy' runs no item: its data has "
            f"no rows: {empty} (0 rows)",
        ]
    )
    result.stdout.fnmatch_lines(["mmlu *4/4 *error*"])
    assert "WARNING mmlu: subset" not in result.stdout.str()  # a failure, not a warning
    assert _summary(pytester)["status"] == "error"


def test_a_numeric_comparison_with_no_numeric_target_is_a_collection_error(
    pytester: pytest.Pytester, write_project
) -> None:  # type: ignore[no-untyped-def]
    """``compare: numeric`` against targets that render as text (here the question) fell
    back to string equality with the extracted number: no item could be right, silently."""
    write_project(pytester)
    spec = pytester.path / "arith.yaml"
    spec.write_text(
        spec.read_text().replace('  target: "{{ a }}"\n  max', '  target: "{{ q }}"\n  max')
    )
    assert 'target: "{{ q }}"' in spec.read_text()
    result = pytester.runpytest("--llm-data-dir=.", "-p", "no:cacheprovider", "arith.yaml")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*arith.yaml: field 'generate.compare': is 'numeric', but none of the 5 targets of "
            "the selected items is a number (the first renders as 'what is two plus three?'), so "
            "no answer could match*"
        ]
    )
