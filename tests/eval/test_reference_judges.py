"""Reference judges in a task: math-verify for MATH answers, langdetect for IFEval.

A spec that names a judge whose package is missing fails when the runner is built (at
collection, before a model loads), naming the spec field and the extra; every scored item
records the judge that scored it.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from test_runner import ScriptedBackend

from pytest_llmeval import SpecError, load_task_spec
from pytest_llmeval.dataset import load_items
from pytest_llmeval.eval import TaskRunner
from pytest_llmeval.scorer import _judges
from pytest_llmeval.task import task_spec_from_dict

REPO = Path(__file__).resolve().parents[2]


def _math_spec(**generate: Any) -> Any:
    return task_spec_from_dict(
        {
            "task": "toy_math",
            "dataset": {"path": "m.jsonl"},
            "prompt": {"template": "{{ problem }}"},
            "mode": "generate",
            "generate": {"target": "{{ answer }}", **generate},
        },
        source="toy_math.yaml",
    )


def _ifeval_spec(**ifeval: Any) -> Any:
    return task_spec_from_dict(
        {
            "task": "toy_ifeval",
            "dataset": {"path": "i.jsonl"},
            "prompt": {"template": "{{ prompt }}"},
            "mode": "generate",
            "generate": {"scorer": "ifeval", "ifeval": ifeval},
        },
        source="toy_ifeval.yaml",
    )


def _missing(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    real = _judges.judge_version
    monkeypatch.setattr(
        _judges, "judge_version", lambda judge: None if judge == name else real(judge)
    )


def test_math500_spec_uses_math_verify_and_ours_stays_available() -> None:
    spec = load_task_spec(REPO / "benchmarks" / "math500.yaml")
    assert spec.generate is not None and spec.generate.compare == "math_verify"
    ours = _math_spec(extract=["boxed"], compare="math")
    assert ours.generate is not None and ours.generate.compare == "math"


def test_ifeval_spec_uses_langdetect_and_our_sentence_splitter() -> None:
    spec = load_task_spec(REPO / "benchmarks" / "ifeval.yaml")
    assert spec.generate is not None and spec.generate.ifeval is not None
    assert (spec.generate.ifeval.language, spec.generate.ifeval.sentences) == (
        "langdetect",
        "heuristic",
    )
    with pytest.raises(SpecError) as info:
        _ifeval_spec(language="fasttext")
    assert info.value.field == "generate.ifeval.language"


def test_math_verify_refuses_an_extract_step() -> None:
    with pytest.raises(SpecError) as info:
        _math_spec(extract=["boxed"], compare="math_verify")
    assert info.value.field == "generate.extract"
    assert "whole output" in info.value.message


@pytest.mark.parametrize(
    ("name", "field", "spec"),
    [
        ("math_verify", "generate.compare", lambda: _math_spec(compare="math_verify")),
        ("langdetect", "generate.ifeval.language", lambda: _ifeval_spec(language="langdetect")),
    ],
)
def test_a_missing_judge_fails_when_the_runner_is_built(
    monkeypatch: pytest.MonkeyPatch, name: str, field: str, spec: Any
) -> None:
    _missing(monkeypatch, name)
    with pytest.raises(SpecError) as info:
        TaskRunner(spec(), [])
    message = str(info.value)
    assert info.value.field == field
    assert f"'{name}'" in message
    assert "pytest-llm-evaluation[reference]" in message


def test_nltk_sentences_without_punkt_data_fail_naming_the_download(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("nltk")
    monkeypatch.setattr(_judges, "_punkt_installed", lambda: False)
    with pytest.raises(SpecError) as info:
        TaskRunner(_ifeval_spec(sentences="nltk"), [])
    assert info.value.field == "generate.ifeval.sentences"
    assert "punkt_tab" in info.value.message


def test_heuristic_judges_need_no_package(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _judges.JUDGES:
        _missing(monkeypatch, name)
    runner = TaskRunner(_ifeval_spec(language="heuristic", sentences="heuristic"), [])
    assert runner.judges == {}


def test_math_verify_scores_the_whole_output_and_records_the_judge(tmp_path: Path) -> None:
    pytest.importorskip("math_verify")
    (tmp_path / "m.jsonl").write_text(
        json.dumps({"problem": "Half of one?", "answer": "\\frac{1}{2}"}) + "\n"
    )
    spec = _math_spec(compare="math_verify")
    runner = TaskRunner(spec, [tmp_path])
    items = load_items(spec, [tmp_path])
    for text, ok in [
        ("So x = 1/2, hence \\boxed{0.5}.", True),
        ("The final answer is $\\dfrac12$.", True),
        ("\\boxed{\\frac{1}{3}}", False),
        ("no answer at all", False),
    ]:
        (result,) = runner.run(items, ScriptedBackend(text=lambda r, t=text: t))
        assert result.correct is ok, text
        assert result.extractor == "math_verify"
        assert result.details is not None
        assert result.details["judge"].startswith("math_verify 0.")


def test_our_math_evaluator_records_itself(tmp_path: Path) -> None:
    (tmp_path / "m.jsonl").write_text(json.dumps({"problem": "?", "answer": "2"}) + "\n")
    spec = _math_spec(extract=["boxed"], compare="math")
    items = load_items(spec, [tmp_path])
    (result,) = TaskRunner(spec, [tmp_path]).run(
        items, ScriptedBackend(text=lambda r: "\\boxed{2}")
    )
    assert result.correct
    assert result.details is not None and result.details["judge"].startswith("math (ours")


def test_ifeval_records_its_language_judge(tmp_path: Path) -> None:
    pytest.importorskip("langdetect")
    doc = {
        "prompt": "Answer in German.",
        "instruction_id_list": ["language:response_language"],
        "kwargs": [{"language": "de"}],
    }
    (tmp_path / "i.jsonl").write_text(json.dumps(doc) + "\n")
    spec = _ifeval_spec(language="langdetect")
    runner = TaskRunner(spec, [tmp_path])
    items = load_items(spec, [tmp_path])
    german = "Das ist eine kurze Antwort, die ganz und gar auf Deutsch geschrieben ist."
    (good,) = runner.run(items, ScriptedBackend(text=lambda r: german))
    (bad,) = runner.run(items, ScriptedBackend(text=lambda r: "This answer is in English."))
    assert good.correct and not bad.correct
    assert good.details is not None
    assert good.details["judges"]["language"].startswith("langdetect 1.")
    assert good.details["judges"]["sentences"] == "heuristic"


def test_math_verify_refuses_to_run_off_the_main_thread() -> None:
    pytest.importorskip("math_verify")
    from pytest_llmeval.scorer import math_verify_judge

    errors: list[BaseException] = []

    def score() -> None:
        try:
            math_verify_judge("\\boxed{1}", ["1"])
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=score, name="not-main")
    thread.start()
    thread.join()
    assert errors and "main thread" in str(errors[0])


MISSING_JUDGE_CONFTEST = """
from pytest_llmeval.scorer import _judges

real = _judges.judge_version
_judges.judge_version = lambda name: None if name == "math_verify" else real(name)
"""
JUDGED_SPEC = """\
task: {name}
{floor}dataset: {{path: m.jsonl}}
prompt: {{template: "{{{{ problem }}}}"}}
mode: generate
generate: {{target: "{{{{ answer }}}}", compare: math_verify}}
"""


def test_a_task_whose_judge_is_not_installed_does_not_break_the_others(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    """Like a task whose data is not installed: the task's one item says why (skipped, or
    failed when the task has a floor), and the other tasks are collected and run."""
    pytester.makeconftest(MISSING_JUDGE_CONFTEST)
    (pytester.path / "m.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n')
    (pytester.path / "nofloor.yaml").write_text(JUDGED_SPEC.format(name="nofloor", floor=""))
    (pytester.path / "gated.yaml").write_text(
        JUDGED_SPEC.format(name="gated", floor="floor: 0.5\n")
    )
    (pytester.path / "plain.yaml").write_text(
        JUDGED_SPEC.format(name="plain", floor="").replace("math_verify", "exact")
    )
    # In subprocesses: the conftest replaces a module attribute for the whole process.
    result = pytester.runpytest_subprocess(
        "--collect-only", "-q", "--llm-data-dir=.", "-p", "no:cacheprovider"
    )
    result.stdout.fnmatch_lines(["*gated-judge*", "*nofloor-judge*", "*plain-0000*"])
    assert result.ret == pytest.ExitCode.OK
    run = pytester.runpytest_subprocess(
        f"--llm-model={tiny_model_dir}",
        "--llm-data-dir=.",
        "-p",
        "no:cacheprovider",
        "-rs",
        "-k",
        "judge",
    )
    assert run.ret == pytest.ExitCode.TESTS_FAILED  # the floor that nothing is measured against
    run.stdout.fnmatch_lines(
        [
            "*gated-judge*floor of 0.5 but runs no item*'math_verify'*not installed*",
            "*nofloor*'math_verify'*not installed*reference*",
        ]
    )
