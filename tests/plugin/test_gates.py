"""Gates through pytester: floors written from a run, verdicts under each policy, floors from a
reference run directory, early errors, the item budget and the --llm-limit warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_llmeval.record import read_summary
from pytest_llmeval.record.__main__ import main as record_main

pytest.importorskip("torch")


def _args(model: Path, *extra: str) -> list[str]:
    return [f"--llm-model={model}", "--llm-data-dir=.", "-p", "no:cacheprovider", *extra]


def _esc(pattern: str) -> str:
    """An fnmatch pattern that matches brackets literally."""
    return pattern.replace("[", "[[]")


def _run(root: Path) -> Path:
    (run,) = sorted(p for p in root.iterdir() if p.is_dir())
    return run


def _summary(root: Path) -> dict[str, dict[str, object]]:
    return read_summary(_run(root) / "metrics_summary.json")  # type: ignore[no-any-return]


def test_floors_written_from_a_run_pass_the_same_model_and_fail_a_weakened_one(
    pytester: pytest.Pytester,
    tiny_model_dir: Path,
    weak_model_dir: Path,
    write_project,  # type: ignore[no-untyped-def]
    capsys: pytest.CaptureFixture[str],
) -> None:
    write_project(pytester)
    pytester.makeini("[pytest]\naddopts = -k colors\n")
    assert pytester.runpytest(*_args(tiny_model_dir, "--llm-output=ref")).ret == 0
    reference = _run(pytester.path / "ref")
    assert _summary(pytester.path / "ref")["colors"]["score"] == 0.75  # 3 of 4

    # The floors command writes llm_floors with the provenance into the ini file.
    ini = pytester.path / "tox.ini"  # what makeini wrote
    assert record_main(["floors", str(reference), "--margin", "20", "--write", str(ini)]) == 0
    printed = capsys.readouterr().out
    assert f"colors=0.5500  # run {reference.name} (model " in printed
    assert "4 items, acc 75.0% [30.1, 95.4], rule margin:20" in printed
    assert "colors=0.5500  # run" in ini.read_text()

    # The same model passes: 75% [30.1, 95.4] against 55% is undecided; point passes it.
    same = pytester.runpytest(*_args(tiny_model_dir, "--llm-output=same"))
    assert same.ret == 0, same.stdout.str()
    same.stdout.fnmatch_lines(
        [
            _esc(line)
            for line in [
                "colors*4/4*acc*75.0*[30.1,95.4]*55.0*undecided*",
                "floors (policy point: fail when the score is below the floor):",
                "  colors: undecided: 55.0 lies inside the 95% interval [30.1, 95.4]: passes; "
                f"floor from llm_floors (ini): run {reference.name}*rule margin:20",
            ]
        ]
    )
    entry = _summary(pytester.path / "same")["colors"]
    assert entry["status"] == "undecided" and entry["policy"] == "point"
    assert entry["failed"] is False
    assert "rule margin:20" in str(entry["floor_source"])

    # A deliberately weakened model (noised weights) falls below the floor and fails, with
    # the rule and the reference run named.
    weak = pytester.runpytest(*_args(weak_model_dir, "--llm-output=weak"))
    assert weak.ret == 1
    weak.stdout.fnmatch_lines(
        [
            _esc(line)
            for line in [
                "colors*4/4*acc*50.0*55.0*undecided*",
                "  colors: undecided: 55.0 lies inside the 95% interval [15.0, 85.0]: fails; "
                f"floor from llm_floors (ini): run {reference.name}*rule margin:20",
                "FAIL colors: acc 0.5000 is below its floor 0.55 (undecided: 55.0 lies inside the "
                "95% interval [15.0, 85.0]; policy point)",
            ]
        ]
    )
    entry = _summary(pytester.path / "weak")["colors"]
    assert entry["failed"] is True
    markdown = (_run(pytester.path / "weak") / "summary.md").read_text()
    assert "❌ undecided (fails under point)" in markdown
    assert "rule margin:20" in markdown

    # The policies: lenient lets the undecided weak run pass; strict fails the same model.
    lenient = pytester.runpytest(
        *_args(weak_model_dir, "--llm-output=lenient", "--llm-set=gate.policy=lenient")
    )
    assert lenient.ret == 0
    strict = pytester.runpytest(
        *_args(tiny_model_dir, "--llm-output=strict", "--llm-set=gate.policy=strict")
    )
    assert strict.ret == 1
    strict.stdout.fnmatch_lines(["FAIL colors: acc 0.7500 does not clear its floor 0.55*strict)"])


def test_a_run_without_floors_says_it_gates_nothing_and_how_to_gate(
    pytester: pytest.Pytester,
    tiny_model_dir: Path,
    write_project,  # type: ignore[no-untyped-def]
) -> None:
    """No task has a floor: the run decided nothing (exit 0 whatever the scores), and the
    terminal says so, with the two ways to make floors of this run."""
    from tiny_projects import MC_SPEC

    write_project(pytester)
    (pytester.path / "colors.yaml").write_text(MC_SPEC.format(floor="null"))
    first = pytester.runpytest(*_args(tiny_model_dir, "--llm-output=ref", "-k", "colors"))
    assert first.ret == 0
    reference = _run(pytester.path / "ref")
    first.stdout.fnmatch_lines(
        [
            "colors*4/4*acc*75.0*- no floor*",
            "no task has a floor: this run gates nothing*make it the reference:",
            f"  rerun with --llm-set gate.floors_from=ref/{reference.name} (each floor: the "
            "lower end*",
            "  or write them into your ini: python -m pytest_llmeval.record floors "
            f"ref/{reference.name} --write=pyproject.toml",
        ]
    )
    # Gated on itself, the same model passes, and nothing says the run gates nothing.
    gated = pytester.runpytest(
        *_args(
            tiny_model_dir,
            "--llm-output=out",
            "-k",
            "colors",
            f"--llm-set=gate.floors_from={reference}",
        )
    )
    assert gated.ret == 0
    gated.stdout.fnmatch_lines(["colors*4/4*acc*75.0*30.1*pass*"])
    assert "no task has a floor" not in gated.stdout.str()


def test_floors_from_a_reference_run_directory(
    pytester: pytest.Pytester,
    tiny_model_dir: Path,
    write_project,  # type: ignore[no-untyped-def]
) -> None:
    write_project(pytester)
    assert pytester.runpytest(*_args(tiny_model_dir, "--llm-output=ref", "-k", "colors")).ret == 0
    reference = _run(pytester.path / "ref")
    result = pytester.runpytest(
        *_args(
            tiny_model_dir,
            "--llm-output=out",
            "-k",
            "colors",
            f"--llm-set=gate.floors_from={reference}",
        )
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            _esc(line)
            for line in [
                "colors*4/4*acc*75.0*30.1*pass*",
                "  colors: pass: the 95% interval [30.1, 95.4] clears 30.1; floor rule lcb95 "
                f"from run {reference.name} (model *, sha256 *, 4 items, acc 75.0% [30.1%, 95.4%])",
            ]
        ]
    )
    source = _summary(pytester.path / "out")["colors"]["floor_source"]
    assert isinstance(source, dict)
    assert source["rule"] == "lcb95" and source["run"] == reference.name
    assert source["items"] == 4 and len(str(source["model_sha256"])) == 64
    # --llm-floor on the command line wins over the reference run
    override = pytester.runpytest(
        *_args(
            tiny_model_dir,
            "--llm-output=override",
            "-k",
            "colors",
            f"--llm-set=gate.floors_from={reference}",
            "--llm-floor=colors=0.99",
        )
    )
    assert override.ret == 1
    override.stdout.fnmatch_lines(
        ["*floor from --llm-floor*", "*FAIL colors*below its floor 0.99*"]
    )


def test_floors_from_a_run_without_what_is_needed_fails_before_any_model_loads(
    pytester: pytest.Pytester,
    write_project,  # type: ignore[no-untyped-def]
) -> None:
    write_project(pytester)
    # a model directory that passes the option check but could never load: any load would
    # end the run with "cannot load the model", not with the floors' usage error
    broken = pytester.mkdir("broken-model")
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    no_model = [f"--llm-model={broken}", "--llm-data-dir=.", "-p", "no:cacheprovider"]
    missing = pytester.runpytest(*no_model, "--llm-set=gate.floors_from=nowhere")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*gate.floors_from: nowhere: not a dir*"])
    unfinished = pytester.mkdir("unfinished")
    (unfinished / "tasks").mkdir()
    result = pytester.runpytest(*no_model, f"--llm-set=gate.floors_from={unfinished}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unfinished/metrics_summary.json: not found*finished run*"])
    partial = pytester.mkdir("partial")
    (partial / "metrics_summary.json").write_text(
        json.dumps({"colors": {"n": 4, "metric": "acc", "score": 0.75, "ci95": [0.3, 0.95]}})
    )
    # its records are intact (a damaged run is refused before its tasks are looked at)
    (partial / "tasks").mkdir()
    (partial / "tasks" / "colors_output.jsonl").write_text(
        "".join(
            json.dumps({"task": "colors", "item_id": f"colors-{i}", "correct": i > 0}) + "\n"
            for i in range(4)
        )
    )
    result = pytester.runpytest(*no_model, f"--llm-set=gate.floors_from={partial}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*partial/metrics_summary.json: no task 'arith' (the run has: colors)*"]
    )
    # a task the run does not select needs no floor
    only = pytester.runpytest(
        *no_model, f"--llm-set=gate.floors_from={partial}", "-k", "colors", "--collect-only"
    )
    assert only.ret == 0


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "--llm-set=gate.policy=sometimes",
            "gate.policy (from --llm-set): expected one of point|strict|lenient, got 'sometimes'",
        ),
        (
            "--llm-set=gate.floor_rule=median",
            "gate.floor_rule (from --llm-set): expected lcb*",
        ),
    ],
)
def test_bad_gate_options_are_usage_errors(
    pytester: pytest.Pytester,
    write_project,  # type: ignore[no-untyped-def]
    option: str,
    message: str,
) -> None:
    write_project(pytester)
    result = pytester.runpytest("--llm-data-dir=.", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_ini_policy_is_validated_too(
    pytester: pytest.Pytester,
    write_project,  # type: ignore[no-untyped-def]
) -> None:
    write_project(pytester)
    pytester.makepyprojecttoml('[tool.llmeval.gate]\npolicy = "always"\n')
    result = pytester.runpytest("--llm-data-dir=.")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*gate.policy (from pyproject.toml ?tool.llmeval?)*got 'always'*"])


def test_plan_and_limit_warning(
    pytester: pytest.Pytester,
    tiny_model_dir: Path,
    write_project,  # type: ignore[no-untyped-def]
) -> None:
    write_project(pytester, mc_floor=0.1)
    result = pytester.runpytest(
        *_args(
            tiny_model_dir,
            "--llm-output=out",
            "-k",
            "colors",
            "--llm-limit=3",
            "--llm-set=report.plan=true",
        )
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "WARNING colors: 3 items cannot decide a 5-point drop: a floor gate (lcb95, policy "
            "point) needs * for 80% power*",
            "*llmeval item budget (plan.json)*",
            "colors*3*66.7%*5pt*",
        ]
    )
    plan = json.loads((_run(pytester.path / "out") / "plan.json").read_text())
    (task,) = plan["tasks"]
    assert task["task"] == "colors" and task["n"] == 3
    floor5 = next(n for n in task["needs"] if n["gate"] == "floor" and n["drop"] == 0.05)
    assert floor5["items"] > 3 and floor5["power"] >= 0.8
    assert plan["settings"]["floor_rule"] == "lcb95"


def test_floors_from_under_xdist(
    pytester: pytest.Pytester,
    tiny_model_dir: Path,
    write_project,  # type: ignore[no-untyped-def]
) -> None:
    pytest.importorskip("xdist")
    write_project(pytester)
    assert pytester.runpytest(*_args(tiny_model_dir, "--llm-output=ref", "-k", "colors")).ret == 0
    reference = _run(pytester.path / "ref")
    # the floor's source travels from the worker to the controller's records
    ok = pytester.runpytest_subprocess(
        *_args(
            tiny_model_dir, "-n", "1", "--llm-output=par", f"--llm-set=gate.floors_from={reference}"
        ),
        "-k",
        "colors",
    )
    assert ok.ret == 0, ok.stdout.str()
    source = _summary(pytester.path / "par")["colors"]["floor_source"]
    assert isinstance(source, dict) and source["run"] == reference.name
    # a selected task the reference lacks: each item fails at setup with the message (a
    # worker cannot end the run with a usage error), and no model is loaded
    broken = pytester.mkdir("broken-model")  # passes the option check, could never load
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    bad = pytester.runpytest_subprocess(
        f"--llm-model={broken}",
        "--llm-data-dir=.",
        "-p",
        "no:cacheprovider",
        "-n",
        "2",
        f"--llm-set=gate.floors_from={reference}",
    )
    assert bad.ret == 1
    bad.stdout.fnmatch_lines(["*gate.floors_from: *no task 'arith'*"])
    assert "cannot load the model" not in bad.stdout.str()


def test_limit_warning_names_each_gate_and_its_item_count() -> None:
    from pytest_llmeval.gate import FloorRule
    from pytest_llmeval.plugin._session import limit_warning

    results = [{"score": 1.0 if i % 4 == 0 else 0.0} for i in range(40)]  # 25% of 40
    text = limit_warning(
        "mmlu", results, floor=True, paired=True, rule=FloorRule("lcb"), policy="point", churn=None
    )
    assert text is not None
    assert text.startswith("mmlu: 40 items cannot decide a 5-point drop: a floor gate (lcb95, ")
    assert "a paired baseline gate needs 157 (pure drop)" in text
    churned = limit_warning(
        "mmlu", results, floor=False, paired=True, rule=FloorRule("lcb"), policy="point", churn=0.06
    )
    assert churned is not None and "(6.0% churn as observed)" in churned
    enough = [{"score": 1.0 if i % 4 == 0 else 0.0} for i in range(600)]
    assert (
        limit_warning(
            "mmlu", enough, floor=True, paired=True, rule=FloorRule("lcb"), policy="point", churn=0
        )
        is None
    )
    # 0 of 10 right plans nothing at this run's own score; the reference run's score does
    zero = [{"score": 0.0}] * 10
    assert (
        limit_warning(
            "mmlu", zero, floor=True, paired=False, rule=FloorRule("lcb"), policy="point", churn=0
        )
        is None
    )
    planned = limit_warning(
        "mmlu",
        zero,
        floor=True,
        paired=False,
        rule=FloorRule("lcb"),
        policy="point",
        churn=0,
        reference=(0.2683, "the score of REF"),
    )
    assert planned is not None and "a floor gate (lcb95, policy point) needs 566" in planned
    assert "at 26.8% (the score of REF;" in planned
    fractional = [{"score": 0.5}] * 10
    assert (
        limit_warning(
            "x",
            fractional,
            floor=True,
            paired=False,
            rule=FloorRule("lcb"),
            policy="point",
            churn=0,
        )
        is None
    )
