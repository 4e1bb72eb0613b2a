"""Plugin behaviour, end to end through pytester, on a tiny random model."""

from __future__ import annotations

import hashlib
import html
import importlib.util
import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from tiny_projects import INTERRUPT_CONFTEST, PROBED_SPEC

from pytest_llmeval.record import read_summary

pytest.importorskip("torch")


def _args(model: Path, *extra: str) -> list[str]:
    return [f"--llm-model={model}", "--llm-data-dir=.", "-p", "no:cacheprovider", *extra]


def test_help_lists_options_in_one_group(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    out = result.stdout.str()
    assert "LLM evaluation (pytest-llmeval)" in out
    for flag in (
        "--llm-model",
        "--llm-device",
        "--llm-dtype",
        "--llm-batch-size",
        "--llm-limit",
        "--llm-output",
        "--llm-floor",
        "--llm-set",
        "--llm-profile",
    ):
        assert flag in out


def test_plugin_import_loads_no_torch() -> None:
    code = (
        "import pytest_llmeval.plugin, sys; "
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_items_are_collected_from_yaml_with_stable_ids(
    pytester: pytest.Pytester, write_project
) -> None:
    write_project(pytester)
    result = pytester.runpytest("--collect-only", "-q", "--llm-data-dir=.")
    result.stdout.fnmatch_lines(
        ["arith.yaml::arith-0000", "*arith-0004", "colors.yaml::colors-0003"]
    )
    assert "9 tests collected" in result.stdout.str()


def test_without_model_items_are_skipped(pytester: pytest.Pytester, write_project) -> None:
    write_project(pytester)
    result = pytester.runpytest("--llm-data-dir=.", "-rs")
    result.assert_outcomes(skipped=9)
    result.stdout.fnmatch_lines(["*--llm-model*"])


def test_run_prints_table_and_writes_records(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:
    write_project(pytester)
    result = pytester.runpytest(*_args(tiny_model_dir, "--llm-output=out"))
    assert result.ret == 0
    out = result.stdout.str()
    assert "llmeval summary" in out
    result.stdout.fnmatch_lines(["arith*5/5*exact_match*pass*", "colors*4/4*acc*pass*"])
    runs = list((pytester.path / "out").iterdir())
    assert len(runs) == 1
    lines = (runs[0] / "tasks" / "arith_output.jsonl").read_text().splitlines()
    assert len(lines) == 5
    record = json.loads(lines[0])
    assert record["item_id"] == "arith-0000"
    assert record["prompt"].startswith("Question: what is zero plus one?\nAnswer: 1\n\n")
    summary = read_summary(runs[0] / "metrics_summary.json")
    assert summary["colors"]["n"] == 4
    assert summary["arith"]["status"] == "pass"
    config = json.loads((runs[0] / "eval_config.json").read_text())
    assert config["dtype"] == "float32"
    assert config["environment"]["backend"]["dtype"] == "float32"


def test_code_commit_is_the_projects_run_from_another_folder(
    pytester: pytest.Pytester,
    tiny_model_dir: Path,
    write_project,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The code's git state is the project's (pytest's rootdir), as the run folder's name
    is: run from a folder outside the project, the record said no commit (or the commit of
    whatever repository the shell stood in) while the folder was named after the project's."""
    write_project(pytester)
    project = pytester.path
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(project.parent))
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=T", "-C", str(project)]
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "specs"]):
        subprocess.run([*git, *args], check=True, capture_output=True, timeout=30)
    commit = subprocess.run(
        [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True, timeout=30
    ).stdout.strip()
    elsewhere = project.parent / f"{project.name}-elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = pytester.runpytest(
        str(project),
        f"--rootdir={project}",
        f"--llm-model={tiny_model_dir}",
        f"--llm-data-dir={project}",
        f"--llm-output={elsewhere / 'out'}",
        "-p",
        "no:cacheprovider",
        "-k",
        "colors",
    )
    assert result.ret == 0
    (run,) = (elsewhere / "out").iterdir()
    assert run.name.endswith(commit[:7])
    config = json.loads((run / "eval_config.json").read_text())
    assert config["environment"]["git"]["code"]["commit"] == commit
    assert f"git `{commit[:7]}`" in (run / "summary.md").read_text()


# A pretend GPU (auto batch size probes a width as batches first need it): in one process,
# three widths probed at the first batch; under xdist, a width more after each item (so
# the widths after a worker's first item travel as updates, llmeval_backend_update).
_WIDTHS_AT_FIRST_BATCH = """
from pytest_llmeval.model._hf import HFBackend

_rows = HFBackend._rows


def rows(self, longest):
    self._by_width.update({16: 8, 32: 4, 64: 2})
    return _rows(self, longest)


HFBackend._rows = rows
"""
_A_WIDTH_PER_ITEM = """
from pytest_llmeval.model._hf import HFBackend

done = [0]


def pytest_runtest_teardown(item):
    done[0] += 1


def widths(self):
    return {str(16 * 2**i): 8 >> i for i in range(min(done[0], 2) + 1)}


HFBackend.batch_sizes_by_width = widths
"""


@pytest.mark.parametrize(
    ("conftest", "xdist"),
    [(_WIDTHS_AT_FIRST_BATCH, []), (_A_WIDTH_PER_ITEM, ["-n", "1"])],
    ids=["in-process", "worker"],
)
def test_batch_sizes_probed_during_the_run_reach_the_record(
    pytester: pytest.Pytester,
    tiny_model_dir: Path,
    write_project,
    conftest: str,
    xdist: list[str],
) -> None:
    """Under ``--llm-batch-size=auto`` on a GPU the backend probes a batch size for each
    width as batches first need it: the record took the backend's info once, at load, and
    kept the first width only. eval_config.json lists every width probed."""
    write_project(pytester)
    pytester.makeconftest(conftest)
    run_pytest = pytester.runpytest_subprocess if xdist else pytester.runpytest
    result = run_pytest(*_args(tiny_model_dir, "--llm-output=out", "-k", "arith", *xdist))
    assert result.ret == 0, result.stdout.str()
    (run,) = (pytester.path / "out").iterdir()
    config = json.loads((run / "eval_config.json").read_text())
    assert config["environment"]["backend"]["batch_size_by_width"] == {
        "16": 8,
        "32": 4,
        "64": 2,
    }


def test_wrong_answers_are_their_own_outcome(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:
    write_project(pytester)
    result = pytester.runpytest(*_args(tiny_model_dir))
    # A random model gets the arithmetic wrong: visible as "wrong", not as failures.
    assert "wrong" in result.stdout.lines[-1]
    assert "failed" not in result.stdout.lines[-1]
    assert result.ret == 0


def test_strict_mode_fails_wrong_answers(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:
    write_project(pytester)
    result = pytester.runpytest(*_args(tiny_model_dir, "--llm-set=gate.strict=true", "-k", "arith"))
    assert result.ret == 1
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 1
    result.stdout.fnmatch_lines(
        ["*wrong answer for arith-*", "*--- raw output ---*", "target: '*'"]
    )


def test_floor_miss_exits_non_zero_naming_the_task(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:
    write_project(pytester, mc_floor=0.99)
    result = pytester.runpytest(*_args(tiny_model_dir))
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*FAIL colors: acc * is below its floor 0.99*"])


def test_floor_override_from_cli_and_ini(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:
    write_project(pytester, mc_floor=0.99)
    assert pytester.runpytest(*_args(tiny_model_dir, "--llm-floor", "colors=0")).ret == 0
    pytester.makeini("[pytest]\nllm_floors =\n    arith=1.0\n")
    result = pytester.runpytest(*_args(tiny_model_dir, "--llm-floor", "colors=0"))
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*FAIL arith*"])


def test_bad_floor_option_is_a_usage_error(pytester: pytest.Pytester, write_project) -> None:
    write_project(pytester)
    result = pytester.runpytest("--llm-data-dir=.", "--llm-floor", "colors=high")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llm-floor*TASK=SCORE*"])


def test_options_are_settable_in_ini(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:
    write_project(pytester)
    pytester.makeini(
        f"[pytest]\nllm_model = {tiny_model_dir}\nllm_data_dir = .\n"
        "llm_limit = 2\nllm_batch_size = 2\n"
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["arith*2/5*", "colors*2/4*", "partial:*"])


def test_k_selects_one_item_and_shows_its_details(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:
    write_project(pytester)
    result = pytester.runpytest(*_args(tiny_model_dir, "-k", "colors and 0002"))
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("wrong", 0) == 1
    result.stdout.fnmatch_lines(
        [
            "*llmeval item colors-0002*",
            "--- prompt*",
            "Which one is a fruit?",
            "--- choices: log-likelihood*",
            "target: 'apple'",
        ]
    )


def test_limit_is_deterministic_first_n(pytester: pytest.Pytester, write_project) -> None:
    write_project(pytester)
    result = pytester.runpytest("--collect-only", "-q", "--llm-data-dir=.", "--llm-limit=2")
    assert "4 tests collected" in result.stdout.str()
    result.stdout.fnmatch_lines(["*arith-0000", "*arith-0001", "*colors-0000", "*colors-0001"])


def test_markers_select_tasks(pytester: pytest.Pytester, write_project) -> None:
    write_project(pytester)
    result = pytester.runpytest(
        "--collect-only", "-q", "--llm-data-dir=.", "-m", "regression", "--strict-markers"
    )
    assert "5/9 tests collected" in result.stdout.str()
    result = pytester.runpytest("--collect-only", "-q", "--llm-data-dir=.", "-m", "knowledge")
    assert "4/9 tests collected" in result.stdout.str()


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (("mode: generate", "mode: chat"), "field 'mode'"),
        (("floor: 0.0", "floor: 1.5"), "field 'floor'"),
        (("dataset: {path: arith.jsonl}", "dataset: {path: missing.jsonl}"), "missing.jsonl"),
        (("max_new_tokens: 4", "max_new_tokens: many"), "generate.max_new_tokens"),
        (('template: "Question: {{ q }}', 'template: "Question: {{ qq }}'), "prompt.template"),
        (('template: "Question: {{ q }}', 'template: "Question: {{ q }'), "prompt.template"),
    ],
)
def test_spec_errors_fail_collection_naming_file_and_field(
    pytester: pytest.Pytester, edit: tuple[str, str], field: str, write_project
) -> None:
    write_project(pytester)
    spec = pytester.path / "arith.yaml"
    text = spec.read_text()
    assert edit[0] in text
    spec.write_text(text.replace(edit[0], edit[1]))
    result = pytester.runpytest("--collect-only", "--llm-data-dir=.")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out = result.stdout.str()
    assert "arith.yaml" in out
    assert field in out


def test_model_load_error_is_one_clear_line(
    pytester: pytest.Pytester, tmp_path: Path, write_project
) -> None:
    write_project(pytester)
    # A model path that does not exist is an option error, found before collection.
    result = pytester.runpytest("--llm-model=./no-such-model", "--llm-data-dir=.", "-k", "colors")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --llm-model=./no-such-model: no such directory*"])


@pytest.mark.two_workers
def test_xdist_aggregates_on_the_controller(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:
    pytest.importorskip("xdist")
    write_project(pytester, mc_floor=0.99)
    serial = pytester.runpytest_subprocess(*_args(tiny_model_dir, "--llm-output=serial"))
    parallel = pytester.runpytest_subprocess(
        *_args(tiny_model_dir, "-n", "2", "-v", "--llm-output=par")
    )
    assert serial.ret == parallel.ret == 1
    for result in (serial, parallel):
        result.stdout.fnmatch_lines(["arith*5/5*pass*", "colors*4/4*fail*", "*FAIL colors*"])

    def items(out: str) -> dict[str, tuple[bool, str | None]]:
        run = next((pytester.path / out).iterdir())
        found = {}
        for path in (run / "tasks").glob("*.jsonl"):
            for line in path.read_text().splitlines():
                rec = json.loads(line)
                found[rec["item_id"]] = (rec["correct"], rec["extracted"])
        return found

    assert items("serial") == items("par")
    assert len(items("par")) == 9
    # Each task ran on one worker: every item computed once, in the task's own batches (a
    # task split over workers computes items that the other worker computes again).
    run = next((pytester.path / "par").iterdir())
    computed: dict[str, int] = {}
    for task, n in re.findall(r"(\w+): computed (\d+) item", (run / "eval.log").read_text()):
        computed[task] = computed.get(task, 0) + int(n)
    assert computed == {"arith": 5, "colors": 4}
    workers = re.findall(r"\[(gw\d)\] .*?(arith|colors)\.yaml::", parallel.stdout.str())
    assert len(workers) == 9
    assert len({w for w, task in workers if task == "arith"}) == 1
    assert len({w for w, task in workers if task == "colors"}) == 1


def test_failure_analysis_option(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    result = pytester.runpytest(
        *_args(tiny_model_dir, "--llm-output=out", "--llm-set=report.failures=2")
    )
    result.stdout.fnmatch_lines(["*llmeval failures: arith*", "5 of 5 items failed: *"])
    run = next((pytester.path / "out").iterdir())
    report = json.loads((run / "failures.json").read_text())
    assert {r["task"] for r in report} == {"arith", "colors"}
    assert len(report[0]["samples"]) == 2


def test_benchmark_not_installed_is_skipped_not_an_error(pytester: pytest.Pytester) -> None:
    pytester.makefile(
        ".yaml",
        absent=(
            "task: absent\nmarkers: [regression]\n"
            "dataset: {path: absent_bench/test.jsonl, hub: {id: org/absent}}\n"
            'prompt: {template: "{{ q }}"}\nmode: generate\ngenerate: {target: "{{ a }}"}\n'
        ),
    )
    result = pytester.runpytest("--llm-data-dir=.", "-rs", "-m", "regression")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*benchmark data not installed*no 'absent_bench' folder*--llm-set run.hub=true*",
            "*1 skipped*",
        ]
    )
    catalog = pytester.runpytest("--llm-data-dir=.", "--llm-show=catalog")
    assert catalog.ret == 0
    catalog.stdout.fnmatch_lines(["absent *not installed*"])


LONG_SPEC = """\
task: reading
markers: [long_context]
floor: 0.0
dataset: {path: reading.jsonl}
prompt:
  template: "{{ context }}\\nQuestion: {{ q }}\\nAnswer:"
mode: generate
generate:
  targets: "{{ answers }}"
  compare: f1
  max_new_tokens: 4
"""


def test_items_that_do_not_fit_the_window_are_reported_not_scored(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    rows = [
        {"context": "A short note.", "q": "What is it?", "answers": ["a note"]},
        {"context": " ".join(f"w{k}" for k in range(300)), "q": "Which?", "answers": ["w1"]},
        {"context": "Another note.", "q": "What?", "answers": ["note"]},
    ]
    (pytester.path / "reading.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (pytester.path / "reading.yaml").write_text(LONG_SPEC)
    result = pytester.runpytest(
        *_args(tiny_model_dir, "--llm-set=model.max_length=64", "--llm-output=out", "-rs")
    )
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "reading*2/3*f1*",
            "reading: 1 of 3 items do not fit the context window (64 tokens) and are not scored*",
            "*reading-0001 does not fit the context window: * prompt tokens + 4 new tokens > 64*",
        ]
    )
    assert "partial:" not in result.stdout.str()  # every item ran: none was deselected
    run = next((pytester.path / "out").iterdir())
    summary = read_summary(run / "metrics_summary.json")["reading"]
    assert summary["n"] == 2
    assert summary["not_fitting"] == {"n": 1, "items": ["reading-0001"]}
    assert summary["status"] == "pass"
    records = [
        json.loads(line)
        for line in (run / "tasks" / "reading_output.jsonl").read_text().splitlines()
    ]
    assert sorted(r["item_id"] for r in records) == ["reading-0000", "reading-0001", "reading-0002"]
    [overflow] = [r for r in records if r["finish_reason"] == "context_overflow"]
    assert overflow["details"]["context_overflow"]["context_window"] == 64
    config = json.loads((run / "eval_config.json").read_text())
    assert config["environment"]["backend"]["max_length"] == 64


def test_excluded_items_are_left_out_and_recorded(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:
    write_project(pytester)
    exclude = pytester.path / "exclude.txt"
    exclude.write_text("# flagged by llmeval-contamination scan\narith-0001\ncolors-0003  0.92\n\n")
    result = pytester.runpytest(
        *_args(tiny_model_dir, f"--llm-set=run.exclude={exclude}", "--llm-output=out", "-v")
    )
    assert result.ret == 0, result.stdout.str()
    out = result.stdout.str()
    assert "arith-0001" not in out.split("llmeval summary")[0]
    result.stdout.fnmatch_lines(
        ["arith*4/4*", "colors*3/3*", "excluded: the 2 item ids listed in *exclude.txt (sha256 *"]
    )
    run = next((pytester.path / "out").iterdir())
    config = json.loads((run / "eval_config.json").read_text())
    digest = hashlib.sha256(exclude.read_bytes()).hexdigest()
    assert config["excluded_items"] == {
        "file": str(exclude),
        "sha256": digest,
        "ids": ["arith-0001", "colors-0003"],
        "unmatched": [],
    }
    missing = pytester.runpytest(*_args(tiny_model_dir, "--llm-set=run.exclude=nope.txt"))
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*run.exclude: cannot read nope.txt*"])


PROBE_TEST = """\
import pytest

pytestmark = pytest.mark.contamination


def test_probe(llm_probe):
    outcome = llm_probe.run("quiz", "option_shuffle")
    assert outcome.report.n == 4
    llm_probe.check(outcome)


def test_probe_against_the_reference(llm_probe):
    outcome = llm_probe.run("quiz", "canonical_order")
    # The reference is the model itself: nothing can differ, it does not fire.
    assert outcome.verdict is not None and not outcome.verdict.fired
    assert outcome.verdict.null.startswith("reference model")
    llm_probe.check(outcome)


def test_membership_against_the_reference(llm_probe):
    outcome = llm_probe.run("quiz", "membership")
    # Against option rewrites it fired above its level on an in-domain fine-tune of the
    # second family (validation.json): no verdict; the report is written, the test skipped.
    assert outcome.verdict is None and outcome.report.mode == "reference"
    assert "fires above its level on known-clean items" in outcome.no_verdict
    assert "cannot tell a memorised item from a learned option-order style" in outcome.no_verdict
    llm_probe.check(outcome)


def test_unknown_task_is_skipped(llm_probe):
    llm_probe.run("nope", "option_shuffle")
"""


def _probe_project(pytester: pytest.Pytester, module: str) -> None:
    """Six 3-option quiz items with a probed spec, and PROBE_TEST as ``module``."""
    rows = [
        {"question": f"Q{i}?", "choices": [f"a{i}", f"b{i}", f"c{i}"], "answer": i % 3}
        for i in range(6)
    ]
    (pytester.path / "quiz.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (pytester.path / "quiz.yaml").write_text(PROBED_SPEC)
    (pytester.path / module).write_text(PROBE_TEST)


def _probe_args(model: Path, *extra: str) -> list[str]:
    """The probe project's run: its probes on 4 items, the model as its own reference."""
    return _args(
        model,
        "-m",
        "contamination",
        "--llm-set=probe.items=4",
        "--llm-output=out",
        f"--llm-set=probe.reference_model={model}",
        *extra,
    )


def test_a_contamination_field_no_item_has_fails_collection_naming_it(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    """A typo in the ``contamination:`` block (``choises``) was a ``KeyError`` traceback
    from the probe, after the model had loaded; now the spec's error at collection, and
    each probe of the task fails with it (a -m contamination run does not select the
    spec's own stand-in, so that is a warning)."""
    _probe_project(pytester, "test_llm_probe_typo.py")
    spec = pytester.path / "quiz.yaml"
    spec.write_text(spec.read_text().replace("options: choices", "options: choises"))
    result = pytester.runpytest(*_probe_args(tiny_model_dir))
    result.stdout.fnmatch_lines(
        [
            "*quiz.yaml: field 'contamination.options': no item of the data has a field "
            "'choises' (its fields: answer, choices, question)*"
        ]
    )
    assert "KeyError" not in result.stdout.str()
    result.assert_outcomes(failed=3, skipped=1)  # the fourth asks for a task never collected
    result.stdout.fnmatch_lines(
        [
            "*quiz option_shuffle: its spec cannot be collected: *quiz.yaml: field "
            "'contamination.options': no item of the data has a field 'choises'*"
        ]
    )


def test_a_reference_model_that_cannot_load_fails_its_probes_in_one_line(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    """A reference that passes the option check (a folder with a config.json) but cannot be
    loaded fails each probe that needs it with one line naming --llm-set probe.reference_model, not
    the model's option and not a chained traceback; the probes without one still run."""
    _probe_project(pytester, "test_llm_probe_broken_reference.py")
    broken = pytester.path / "broken-reference"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    result = pytester.runpytest(
        *_args(
            tiny_model_dir,
            "-m",
            "contamination",
            "--llm-set=probe.items=4",
            "--llm-output=out",
            f"--llm-set=probe.reference_model={broken}",
        )
    )
    result.assert_outcomes(passed=1, failed=2, skipped=1, deselected=6)
    text = result.stdout.str()
    lines = [
        line for line in text.splitlines() if f"--llm-set probe.reference_model={broken}: " in line
    ]
    assert lines and all("--llm-model=" not in line for line in lines), text
    assert "During handling of the above exception" not in text
    assert "Traceback" not in text


def test_contamination_probes_run_as_tests_and_are_recorded(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    # A basename no other test module has (in-process runs share sys.modules).
    _probe_project(pytester, "test_llm_probe_project.py")
    result = pytester.runpytest(*_probe_args(tiny_model_dir))
    # Option shuffling (its golds weighed in their own letter shares) and the order test
    # against the reference give their verdicts.
    result.assert_outcomes(passed=2, skipped=2, deselected=6)
    result.stdout.fnmatch_lines(
        [
            "*llmeval contamination probes*",
            "*quiz option_shuffle: no sign*",
            "*quiz canonical_order: no sign*",
            # no scored task ran, so the tasks not run follow the probes, as in summary.md
            "contamination probes only, their scored items deselected by -k/-m (1): quiz",
        ],
        consecutive=False,
    )
    run = next((pytester.path / "out").iterdir())
    report = json.loads((run / "contamination" / "quiz-option_shuffle.json").read_text())
    assert (report["probe"], report["n"], report["alpha"]) == ("option_shuffle", 4, 0.01)
    assert len(report["items"]) == 4
    assert report["verdict"]["fired"] is False and "no_verdict" not in report
    assert "letter shares" in report["verdict"]["null"]
    assert all("gold" in item["detail"] for item in report["items"])
    # Each verdict names the prompts and dtype it ran under, and its message whether its
    # false-alarm rate was measured under them.
    assert report["verdict"]["conditions"] == "zero-shot prompts without a chat template, float32"
    order = json.loads((run / "contamination" / "quiz-canonical_order.json").read_text())
    assert len(order["reference"]["sha256"]) == 64  # the reference model, by its digest
    # No benchmark item ran: the record still names the model probed, by digest and backend.
    config = json.loads((run / "eval_config.json").read_text())
    assert len(config["model_sha256"]) == 64 and config["framework"]["backend"] == "hf"
    assert order["reference_report"]["n"] == 4
    member = json.loads((run / "contamination" / "quiz-membership.json").read_text())
    assert member["mode"] == "reference" and member["handling"]["scores"]["all"]["n"] == 4
    # -m contamination deselects the quiz's scored items, but its probes ran: summary.md
    # says so, instead of listing it among the tasks deselected whole.
    markdown = (run / "summary.md").read_text()
    assert "- contamination probes only, their scored items deselected by `-k`/`-m` (1): quiz" in (
        markdown
    )
    assert "- deselected by" not in markdown
    missing = pytester.runpytest(
        *_args(
            tiny_model_dir, "-m", "contamination", "--llm-set=probe.reference_model=/no/such/model"
        )
    )
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*probe.reference_model=/no/such/model: no such directory*"])
    bad = pytester.runpytest(
        *_args(tiny_model_dir, "-m", "contamination", "--llm-set=probe.alpha=2")
    )
    assert bad.ret == pytest.ExitCode.USAGE_ERROR


# Chunks of 4 requests (the default is 256) and, with STOP_AFTER set, Ctrl-C once that
# many chunks were kept: a probe interrupted half-way. Patched for this in-process run only.
CHUNKS_CONFTEST = """\
import os
import pytest_llmeval.contamination._resume as resume
import pytest_llmeval.record._rundir as rundir

_chunk, _put = resume.CHUNK_REQUESTS, rundir.RequestChunks.put


def put(self, digest, kind, results):
    _put(self, digest, kind, results)
    if len(self._written) == int(os.environ.get("STOP_AFTER", "0")):
        raise KeyboardInterrupt


def pytest_configure(config):
    resume.CHUNK_REQUESTS = 4
    rundir.RequestChunks.put = put


def pytest_unconfigure(config):
    resume.CHUNK_REQUESTS, rundir.RequestChunks.put = _chunk, _put
"""


def _one_probe(task: str, probe: str) -> str:
    """A test module that runs one probe on ``task`` and checks its verdict."""
    return (
        "import pytest\n\npytestmark = pytest.mark.contamination\n\n\n"
        f"def test_{probe}(llm_probe):\n"
        f"    llm_probe.check(llm_probe.run({task!r}, {probe!r}))\n"
    )


CIRCULAR_TEST = _one_probe("quiz", "circular")


def test_an_interrupted_probe_resumes_where_it_stopped(
    pytester: pytest.Pytester, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_llmeval.record import run_state

    _probe_project(pytester, "test_llm_probe_chunks.py")
    (pytester.path / "test_llm_probe_chunks.py").write_text(CIRCULAR_TEST)
    pytester.makeconftest(CHUNKS_CONFTEST)
    args = _args(
        tiny_model_dir, "-m", "contamination", "--llm-set=probe.items=6", "--llm-output=out"
    )
    monkeypatch.setenv("STOP_AFTER", "5")
    stopped = pytester.runpytest(*args, no_reraise_ctrlc=True)
    assert stopped.ret == pytest.ExitCode.INTERRUPTED
    (first,) = (pytester.path / "out").iterdir()
    assert run_state(first)[0] == "interrupted"
    kept = first / "contamination" / "requests" / "quiz-circular.jsonl"
    assert len(kept.read_text().splitlines()) == 5  # 20 of the 54 requests (6 items x 3 x 3)

    monkeypatch.delenv("STOP_AFTER")
    # another batch size batches the requests otherwise (another resume key): nothing reused
    other = pytester.runpytest(*args, "--llm-batch-size=3")
    assert other.ret == 0
    run = max((pytester.path / "out").iterdir())
    report = json.loads((run / "contamination" / "quiz-circular.json").read_text())
    assert report["requests"]["model"]["reused"] == 0
    assert run_state(first)[0] == "interrupted"
    resumed = pytester.runpytest(*args)
    assert resumed.ret == 0
    second = max((pytester.path / "out").iterdir())
    report = json.loads((second / "contamination" / "quiz-circular.json").read_text())
    assert report["requests"]["model"] == {
        "computed": 34,
        "reused": 20,
        "chunks_computed": 9,
        "chunks_reused": 5,
        "reused_from": [str(first.resolve())],
    }
    assert "contamination quiz circular (model): 20 requests reused from" in (
        (second / "eval.log").read_text()
    )
    assert run_state(first)[0] == "superseded"  # its chunks are in the resumed run now
    assert len((second / "contamination/requests/quiz-circular.jsonl").read_text().split()) == 14

    fresh = pytester.runpytest(*args, "--llm-set=run.resume=false")
    assert fresh.ret == 0
    third = max((pytester.path / "out").iterdir())
    again = json.loads((third / "contamination" / "quiz-circular.json").read_text())
    assert again["requests"]["model"]["computed"] == 54
    # the resumed probe computed exactly what an uninterrupted one does
    assert {k: v for k, v in again.items() if k != "requests"} == {
        k: v for k, v in report.items() if k != "requests"
    }


GUESSING_TEST = _one_probe("quiz", "ts_guessing")


def test_ts_guessing_without_a_reference_says_what_a_reference_would_give(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    _probe_project(pytester, "test_llm_probe_guessing.py")
    (pytester.path / "test_llm_probe_guessing.py").write_text(GUESSING_TEST)
    result = pytester.runpytest(
        *_args(tiny_model_dir, "-m", "contamination", "--llm-set=probe.items=6", "-rs")
    )
    result.assert_outcomes(skipped=1, deselected=6)
    # the validation of the verdict a reference would give, which is none: TS-Guessing
    # was measured only on models that guess no masked option exactly
    result.stdout.fnmatch_lines(
        [
            "*quiz ts_guessing: exact-match rate *% on * items; no verdict without "
            "--llm-set probe.reference_model (free-text guessing has no honest chance level); "
            "against a "
            "reference (exact matches, paired McNemar): false alarms on clean items measured "
            "only where the test cannot fire (*discordant pairs*): not validated*"
        ]
    )


SHUFFLE_TEST = _one_probe("quiz", "option_shuffle")


def test_a_probe_with_no_item_says_why_an_empty_file_or_an_exclusion(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    """A probe that has nothing to probe is skipped with the reason its task's tests give:
    the data file and its row count, or the exclusion file, never one for the other."""
    _probe_project(pytester, "test_llm_probe_nothing.py")
    (pytester.path / "test_llm_probe_nothing.py").write_text(SHUFFLE_TEST)
    exclude = pytester.path / "exclude.txt"
    exclude.write_text("".join(f"quiz-{i:04d}\n" for i in range(6)))
    excluded = pytester.runpytest(
        *_args(tiny_model_dir, "-m", "contamination", f"--llm-set=run.exclude={exclude}", "-rs")
    )
    excluded.assert_outcomes(skipped=1, deselected=1)
    excluded.stdout.fnmatch_lines(
        [
            "SKIPPED * quiz option_shuffle: no item to probe: all 6 of its items are excluded "
            f"by run.exclude ({exclude})"
        ]
    )
    (pytester.path / "quiz.jsonl").write_text("")
    empty = pytester.runpytest(*_args(tiny_model_dir, "-m", "contamination", "-rs"))
    empty.assert_outcomes(skipped=1, deselected=1)
    empty.stdout.fnmatch_lines(
        [
            "SKIPPED * quiz option_shuffle: no item to probe: its data has no rows: "
            f"{pytester.path / 'quiz.jsonl'} (0 rows)"
        ]
    )
    assert "--llm-set=run.exclude" not in empty.stdout.str()


def test_option_shuffling_with_every_gold_at_one_letter_gives_no_verdict(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    """A data file whose golds all sit at the first option (a common export format): no
    moved gold can be weighed against a published one, so option shuffling keeps no item;
    it says so and is skipped, never "no sign of contamination" on nothing."""
    _probe_project(pytester, "test_llm_probe_one_letter.py")
    rows = [
        {"question": f"Q{i}?", "choices": [f"a{i}", f"b{i}", f"c{i}"], "answer": 0}
        for i in range(6)
    ]
    (pytester.path / "quiz.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (pytester.path / "test_llm_probe_one_letter.py").write_text(SHUFFLE_TEST)
    result = pytester.runpytest(*_args(tiny_model_dir, "-m", "contamination", "-rs"))
    result.assert_outcomes(skipped=1, deselected=6)
    result.stdout.fnmatch_lines(
        ["SKIPPED * quiz option_shuffle: no verdict: every published gold of the 6 items *"]
    )
    assert "0 of 6 items kept" in result.stdout.str()


def _scripted_model_dir(pytester: pytest.Pytester) -> None:
    """``--llm-model=scripted`` must name a model directory (checked before collection);
    the scripted backend never reads it."""
    (pytester.path / "scripted").mkdir()
    (pytester.path / "scripted" / "config.json").write_text("{}")


SCRIPTED_CONFTEST = """\
import pytest_llmeval.model as model
from pytest_llmeval.model import GenerateResult, LoglikelihoodResult


class Scripted:
    batch_size = 8

    def loglikelihood(self, requests):
        return [LoglikelihoodResult(-1.0, True, 1) for _ in requests]

    def generate(self, requests):
        return [
            GenerateResult(
                "This one is from the GSM8K test set. The answer is 5."
                if "two plus three" in r.context
                else "The answer is 5.",
                12,
                "stop",
            )
            for r in requests
        ]

    def chat_template(self):  # type: ignore[no-untyped-def]
        return None

    def info(self):
        return {"backend": "scripted", "model": "scripted"}


# Patched for this in-process run only: pytester shares the interpreter with other tests.
_real_load_backend = model.load_backend


def pytest_configure(config):
    model.load_backend = lambda settings: Scripted()



def pytest_unconfigure(config):
    model.load_backend = _real_load_backend
"""


def test_generations_are_scanned_for_cues_of_recall(
    pytester: pytest.Pytester, write_project
) -> None:
    write_project(pytester)
    pytester.makeconftest(SCRIPTED_CONFTEST)
    _scripted_model_dir(pytester)
    result = pytester.runpytest(
        "--llm-model=scripted",
        "--llm-data-dir=.",
        "-p",
        "no:cacheprovider",
        "--llm-output=out",
        "-k",
        "arith",
    )
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["arith: 1 outputs show cues of recall (benchmark_name 1, split 1): listed in *"]
    )
    run = next((pytester.path / "out").iterdir())
    summary = read_summary(run / "metrics_summary.json")["arith"]
    assert summary["recall_cues"] == {
        "n": 1,
        "items": {"arith-0000": ["benchmark_name: GSM8K", "split: test set"]},
    }


def test_stable_and_fresh_tasks_of_a_capability_are_compared(
    pytester: pytest.Pytester, write_project
) -> None:
    write_project(pytester)
    pytester.makeconftest(SCRIPTED_CONFTEST)
    _scripted_model_dir(pytester)
    base = (pytester.path / "arith.yaml").read_text()
    for name, freshness in (("old", "stable"), ("new", "fresh")):
        spec = base.replace("task: arith", f"task: {name}") + (
            f"catalog: {{capability: math, style: generative, freshness: {freshness}}}\n"
        )
        (pytester.path / f"{name}.yaml").write_text(spec)
    (pytester.path / "arith.yaml").unlink()
    (pytester.path / "colors.yaml").unlink()
    result = pytester.runpytest(
        "--llm-model=scripted", "--llm-data-dir=.", "-p", "no:cacheprovider"
    )
    assert result.ret == 0, result.stdout.str()
    # The scripted model answers 5 everywhere: right on 1 of the 5 arith items.
    result.stdout.fnmatch_lines(
        ["math: stable old 20.0% vs fresh new 20.0% (a stable score far above the fresh one*"]
    )


def test_contamination_probes_under_xdist_reach_every_report(
    pytester: pytest.Pytester, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under xdist (``-n 1``) the probes run in a worker: their reports, the terminal's probe
    section, the Markdown (CI step) summary, the JUnit XML properties and the model's
    digest in the record all come from the controller, as without xdist (they were lost);
    pytest-html shows each probe's verdict on its test and all of them in its summary
    (it showed three bare "Passed" rows)."""
    _probe_project(pytester, "test_llm_probe_xdist.py")
    summary_file = pytester.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_file))
    result = pytester.runpytest_subprocess(
        *_probe_args(tiny_model_dir, "-n", "1", "--junitxml=junit.xml", "--html=pytest.html")
    )
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines(
        ["*llmeval contamination probes*", "*quiz option_shuffle: no sign of contamination*"]
    )
    run = next((pytester.path / "out").iterdir())
    names = sorted(p.name for p in (run / "contamination").iterdir())
    assert names == [
        "quiz-canonical_order.json",
        "quiz-membership.json",
        "quiz-option_shuffle.json",
    ]
    shuffle = json.loads((run / "contamination" / "quiz-option_shuffle.json").read_text())
    assert shuffle["n"] == 4 and shuffle["verdict"]["fired"] is False
    config = json.loads((run / "eval_config.json").read_text())
    assert len(config["model_sha256"]) == 64
    for markdown in ((run / "summary.md").read_text(), summary_file.read_text()):
        assert "**Contamination probes**:" in markdown
        assert "- ✅ **no sign of contamination**: quiz canonical_order:" in markdown
        assert "contamination probes only" in markdown
    junit = (pytester.path / "junit.xml").read_text()
    assert '<property name="probe" value="quiz canonical_order" />' in junit
    assert '<property name="probe_outcome" value="no sign of contamination" />' in junit
    # a passed case has no message of its own: the verdict's line, its null named, is one
    messages = [
        html.unescape(m)
        for m in re.findall(r'<property name="probe_message" value="([^"]*)" />', junit)
    ]
    assert len(messages) == junit.count('<property name="probe" ') == 3
    assert any(
        m.startswith("quiz option_shuffle: no sign of contamination") and "letter shares" in m
        for m in messages
    )
    assert "llmeval_probe" not in junit  # the whole report is not a property
    if importlib.util.find_spec("pytest_html") is None:
        return
    page = (pytester.path / "pytest.html").read_text()
    blob = json.loads(html.unescape(re.search(r'data-jsonblob="([^"]*)"', page).group(1)))
    extras = {
        nodeid.rpartition("::")[2]: " ".join(e["content"] for r in rows for e in r["extras"])
        for nodeid, rows in blob["tests"].items()
    }
    order_extra = html.unescape(extras["test_probe_against_the_reference"])
    assert "no sign of contamination" in order_extra
    assert "one-sided exact McNemar" in order_extra and "against reference model" in order_extra
    shuffle_extra = html.unescape(extras["test_probe"])
    assert "no sign of contamination" in shuffle_extra and "letter shares" in shuffle_extra
    # A probe without a verdict (skipped) shows why, on its test too.
    skipped_extra = html.unescape(extras["test_membership_against_the_reference"])
    assert "no verdict" in skipped_extra and "above its level" in skipped_extra
    assert "llmeval contamination probes" in page
    assert "quiz canonical_order: no sign of contamination" in html.unescape(page)


def test_probes_that_finished_before_ctrl_c_under_xdist_are_kept(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    """Interrupted in the middle of an xdist probe run, the probes that reported keep their
    reports and terminal lines, and summary.md says the run was interrupted."""
    _probe_project(pytester, "test_llm_probe_ctrlc.py")
    pytester.makeconftest(INTERRUPT_CONFTEST)
    result = pytester.runpytest_subprocess(*_probe_args(tiny_model_dir, "-n", "1"))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    run = next((pytester.path / "out").iterdir())
    reports = sorted((run / "contamination").glob("*.json"))
    assert len(reports) >= 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*llmeval contamination probes*"])
    summary = (run / "summary.md").read_text()
    assert "> ⚠️ This run was interrupted" in summary
    assert "**Contamination probes**:" in summary
    assert "run interrupted" in (run / "eval.log").read_text()


def test_a_verdict_that_fires_on_clean_items_or_was_never_measured_there_is_not_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verdict whose measured false-alarm rate on known-clean items is above its level
    (validation.json: ``holds`` false) is not given: the probe is skipped with its numbers,
    as one without a null is; so is one never measured there; one that holds keeps it."""
    from pytest_llmeval.contamination import ContaminationVerdict, _validation
    from pytest_llmeval.contamination._decide import ProbeOutcome, _only_if_validated

    table = {
        "alpha": 0.01,
        "verdicts": {
            name: {
                "n_min": 50,
                "n_max": 250,
                "pools": ["m fine-tuned in-domain (gsm8k, up to 250 items)"],
                "max_rate": rate,
                "worst": f"{100 * rate:.1f}% of random draws of 200 items, m / gsm8k",
                "holds": rate <= 0.01,
            }
            for name, rate in (("fails", 0.85), ("holds", 0.005))
        },
    }
    table["verdicts"]["vacuous"] = {
        "n_min": 0,
        "n_max": 0,
        "pools": [],
        "max_rate": 0.0,
        "worst": "",
        "holds": False,
        "cannot_fire_on": ["m / gsm8k: 0 discordant pairs in 250 items"],
    }
    path = tmp_path / "validation.json"
    path.write_text(json.dumps(table))
    monkeypatch.setattr(_validation, "VALIDATION_FILE", path)

    def outcome(name: str) -> ProbeOutcome:
        verdict = ContaminationVerdict(
            "membership", "gsm8k", "ref", "sign test", 250, 0.001, 0.01, "b=9 c=1", {}, name
        )
        return ProbeOutcome("gsm8k", "membership", None, verdict)

    skipped = _only_if_validated(outcome("fails"))
    assert skipped.verdict is None and skipped.no_verdict is not None
    assert skipped.no_verdict.startswith("gsm8k membership: no verdict: this test fires above")
    assert "85.0% of random draws of 200 items" in skipped.no_verdict
    # its numbers, its test and null, as a verdict that is given says them
    assert "b=9 c=1 (sign test against ref, p=0.001)" in skipped.no_verdict
    assert _only_if_validated(outcome("holds")).verdict is not None
    never = _only_if_validated(outcome("never_measured"))
    assert never.verdict is None and never.no_verdict is not None
    assert "its false-alarm rate on known-clean items has never been measured" in (never.no_verdict)
    assert "b=9 c=1 (sign test against ref, p=0.001)" in never.no_verdict
    vacuous = _only_if_validated(outcome("vacuous"))
    assert vacuous.verdict is None and vacuous.no_verdict is not None
    assert "measured only where it cannot fire (m / gsm8k: 0 discordant pairs" in (
        vacuous.no_verdict
    )


WORKED_SPEC = """\
task: sums
dataset: {path: sums.jsonl}
prompt:
  template: "Q: {{ question }}\\nA:"
  target: "{{ answer }}"
mode: generate
generate:
  target: "{{ answer | after('####') }}"
  max_new_tokens: 4
  extract: [last_number]
  compare: numeric
contamination: {question: question, solution: answer}
"""

MEMBERSHIP_TEST = _one_probe("sums", "membership")


def test_membership_on_worked_solutions_gives_no_verdict_even_with_a_reference(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    """Measured (docs/CONTAMINATION.md#membership-against-a-reference-on-all-of-gsm8k): on
    the first 950 clean GSM8K items the membership test against a reference held its level
    on a model fine-tuned on other GSM8K items; on all 1,269 it does not (the last 319
    items lean: 5.0% of 50-item draws fire). With the shipped validation.json it is skipped
    with its numbers against a reference too, the reason naming where it fired; its report
    keeps the verdict not given; without a reference it is skipped as before."""
    rows = [
        {
            "question": f"Sam has {3 + i} apples and buys {5 + 2 * i} more. How many now?",
            "answer": f"{3 + i}+{5 + 2 * i}=<<{3 + i}+{5 + 2 * i}={8 + 3 * i}>>{8 + 3 * i}\n"
            f"#### {8 + 3 * i}",
        }
        for i in range(6)
    ]
    (pytester.path / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (pytester.path / "sums.yaml").write_text(WORKED_SPEC)
    (pytester.path / "test_llm_membership_numbers.py").write_text(MEMBERSHIP_TEST)
    common = ("-m", "contamination", "-rs")
    result = pytester.runpytest(
        *_args(
            tiny_model_dir,
            *common,
            "--llm-output=ref",
            f"--llm-set=probe.reference_model={tiny_model_dir}",
        )
    )
    result.assert_outcomes(skipped=1, deselected=6)
    result.stdout.fnmatch_lines(
        ["*sums membership: no verdict: this test fires above its level on known-clean items*"]
    )
    run = next((pytester.path / "ref").iterdir())
    report = json.loads((run / "contamination" / "sums-membership.json").read_text())
    assert report["rewrites"] == "numbers" and report["mode"] == "reference"
    assert "verdict" not in report and "gsm8k_planted" in report["no_verdict"]
    inspection = report["inspection"]
    # Its message names the kinds of model it was measured on, its record each pool.
    assert (
        "in-domain fine-tunes that never saw the items probed (1 of smollm2-135m)"
        in (inspection["validation"])
    )
    assert any(
        p.startswith("gsm8k_planted fine-tuned from smollm2-135m")
        for p in inspection["validation_pools"]
    )
    assert report["p_value"] == inspection["p_value"]
    alone = pytester.runpytest(*_args(tiny_model_dir, *common, "--llm-output=alone"))
    alone.assert_outcomes(skipped=1, deselected=6)
    alone.stdout.fnmatch_lines(
        ["*sums membership: no verdict without --llm-set probe.reference_model*"]
    )


def test_a_verdict_that_had_nothing_to_count_is_no_verdict() -> None:
    """CircularEval on a model right in every rotation of every item (or in none) has no
    item right exactly once: n = 0, p = 1. That is no finding, so it is not given as "no
    sign of contamination": skipped, its numbers kept for inspection."""
    from pytest_llmeval.contamination import ContaminationVerdict
    from pytest_llmeval.contamination._decide import ProbeOutcome, _only_if_counted

    empty = ContaminationVerdict(
        "circular", "mmlu", "exchangeable option orders", "exact", 0, 1.0, 0.01,
        "of 0 exchangeable items right in exactly one rotation, 0 are right in the "
        "published one", items=40,
    )  # fmt: skip
    outcome = _only_if_counted(ProbeOutcome("mmlu", "circular", None, empty))
    assert outcome.verdict is None and outcome.inspection == empty
    assert outcome.no_verdict is not None
    assert outcome.no_verdict.startswith(
        "mmlu circular: no verdict: the test had no item to count on the 40 items"
    )
    counted = ProbeOutcome("mmlu", "circular", None, replace(empty, n=3))
    assert _only_if_counted(counted) is counted
