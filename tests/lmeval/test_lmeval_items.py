"""lm-evaluation-harness tasks as pytest items (``--llm-lmeval-tasks`` and ``lmeval:``
specs), checked document by document against lm-eval's own evaluator on the same tiny
model: contexts, log-likelihoods, generations and every per-document metric value."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip(
    "lm_eval", reason="lm-eval not installed: pip install 'pytest-llm-evaluation[lmeval]'"
)
# The plugin's runs below are in process (pytester.runpytest): a subprocess each cost an
# import of torch, transformers and lm-eval. pytester drops the modules an in-process run
# imported, and a later import of them collides with what they registered and kept (lm-eval's
# registry: "'model' alias 'hf-auto' already registered"; datasets' Arrow extension types:
# "ArrowKeyError: ... already defined"), so every module the harness's path imports is
# imported here, at collection, and is kept by each run.
pytest.importorskip("lm_eval.models.huggingface")
pytest.importorskip("datasets")
pytest.importorskip("lm_eval.tasks")
pytest.importorskip("lm_eval.evaluator")

COLORS = [
    {"question": "Which one is a color?", "options": ["red", "table", "seven"], "label": 0},
    {"question": "Which one is a number?", "options": ["blue", "seven", "apple"], "label": 1},
    {"question": "Which one is a fruit?", "options": ["nine", "green", "apple"], "label": 2},
    {"question": "Which one is an animal?", "options": ["cat", "four", "yellow"], "label": 0},
    {"question": "Which one is a tool?", "options": ["hammer", "one", "blue"], "label": 0},
]
ARITH = [
    {"q": "what is two plus three?", "a": "5"},
    {"q": "what is one plus one?", "a": "2"},
    {"q": "what is four plus four?", "a": "8"},
    {"q": "what is nine minus two?", "a": "7"},
]

# Task configs in the harness's own idiom, reading local JSON files (dataset_path: json).
MC_TASK = """\
task: colors_mc
dataset_path: json
dataset_kwargs:
  data_files: {{test: {data}, train: {data}}}
test_split: test
fewshot_split: train
num_fewshot: 2
output_type: multiple_choice
doc_to_text: "{{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{options}}}}"
doc_to_target: label
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata: {{version: 1.0}}
"""
MC_TASK_B = MC_TASK.replace("task: colors_mc", "task: colors_mc_zero").replace(
    "num_fewshot: 2", "num_fewshot: 0"
)
GROUP = """\
group: colors_group
task: [colors_mc, colors_mc_zero]
aggregate_metric_list:
  - {metric: acc, aggregation: mean, weight_by_size: true}
metadata: {version: 1.0}
"""
GEN_TASK = """\
task: arith_gen
dataset_path: json
dataset_kwargs:
  data_files: {{test: {data}}}
test_split: test
num_fewshot: 1
fewshot_config:
  sampler: first_n
  samples:
    - {{q: "what is zero plus one?", a: "1"}}
output_type: generate_until
doc_to_text: "Question: {{{{q}}}}\\nAnswer:"
doc_to_target: "{{{{a}}}}"
generation_kwargs:
  until: ["\\n"]
  do_sample: false
  max_gen_toks: 6
filter_list:
  - name: strict
    filter:
      - {{function: regex, regex_pattern: "([0-9]+)"}}
      - {{function: take_first}}
  - name: flexible
    filter:
      - {{function: regex, group_select: -1, regex_pattern: "(-?[0-9.,]{{2,}})|(-?[0-9]+)"}}
      - {{function: take_first}}
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
metadata: {{version: 1.0}}
"""
TASKS = "colors_group,arith_gen"


def _write_tasks(root: Path) -> Path:
    tasks = root / "lmeval_tasks"
    tasks.mkdir(exist_ok=True)
    colors, arith = root / "colors.jsonl", root / "arith.jsonl"
    colors.write_text("".join(json.dumps(r) + "\n" for r in COLORS), encoding="utf-8")
    arith.write_text("".join(json.dumps(r) + "\n" for r in ARITH), encoding="utf-8")
    (tasks / "colors_mc.yaml").write_text(MC_TASK.format(data=colors))
    (tasks / "colors_mc_zero.yaml").write_text(MC_TASK_B.format(data=colors))
    (tasks / "_colors_group.yaml").write_text(GROUP)
    (tasks / "arith_gen.yaml").write_text(GEN_TASK.format(data=arith))
    return tasks


def _records(run_root: Path) -> dict[str, dict[str, Any]]:
    (run,) = sorted(p for p in run_root.iterdir() if p.is_dir())
    return _records_of(run)


def _records_of(run: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in (run / "tasks").glob("*_output.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            out[record["item_id"]] = record
    return out


def _run_dir(run_root: Path) -> Path:
    (run,) = sorted(p for p in run_root.iterdir() if p.is_dir())
    return run


def _lmeval_samples(model_dir: Path, tasks_dir: Path, limit: int) -> dict[str, Any]:
    """lm-eval's own run of the same tasks on the same model (its HF model, batch 8)."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    lm = HFLM(pretrained=str(model_dir), device="cpu", dtype="float32", batch_size=8)
    manager = TaskManager(include_path=str(tasks_dir), include_defaults=False)
    out = simple_evaluate(
        model=lm,
        tasks=TASKS.split(","),
        limit=limit,
        log_samples=True,
        task_manager=manager,
        bootstrap_iters=0,
    )
    assert out is not None
    return out


def test_lmeval_tasks_run_as_items_with_the_harness_own_results(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    tasks_dir = _write_tasks(pytester.path)
    result = pytester.runpytest(
        f"--llm-model={tiny_model_dir}",
        f"--llm-lmeval-tasks={TASKS}",
        f"--llm-set=lmeval.include_path={tasks_dir}",
        "--llm-set=prompt.chat_template=off",
        "--llm-limit=4",
        "--llm-output=runs",
        "-p",
        "no:cacheprovider",
        "-q",
    )
    out = result.stdout.str()
    assert "lmeval-colors_mc" in out and "lmeval-arith_gen" in out
    assert "lm-eval group colors_group: acc,none=" in out
    ours = _records(pytester.path / "runs")
    assert sorted(ours) == sorted(
        [f"lmeval-colors_mc-{i:04d}" for i in range(4)]
        + [f"lmeval-colors_mc_zero-{i:04d}" for i in range(4)]
        + [f"lmeval-arith_gen-{i:04d}" for i in range(4)]
    )

    theirs = _lmeval_samples(tiny_model_dir, tasks_dir, limit=4)
    compared = 0
    for task, samples in theirs["samples"].items():
        for sample in samples:
            mine = ours[f"lmeval-{task}-{int(sample['doc_id']):04d}"]
            args = [a if isinstance(a, (list, tuple)) else (a,) for a in sample["arguments"]]
            assert mine["prompt"] == args[0][0]  # the context, byte for byte
            if mine["choices"]:
                assert mine["choices"] == [a[1] for a in args]
                for ll, resp in zip(mine["logprobs"], sample["resps"], strict=True):
                    assert abs(ll - float(resp[0][0])) < 1e-4
            else:
                assert mine["output"] == sample["resps"][0][0]
            metrics = mine["details"]["lmeval"]["metrics"]
            for metric in sample["metrics"]:
                assert metrics[f"{metric},{sample['filter']}"] == sample[metric], (task, metric)
            compared += 1
    assert compared == 4 * 2 + 4 * 2  # two MC tasks (one filter), arith (two filters)

    # Task and group scores: the harness's aggregation of the same per-document values.
    results = json.loads((_run_dir(pytester.path / "runs") / "lmeval_results.json").read_text())
    for name in ("colors_mc", "colors_mc_zero", "arith_gen"):
        for key, value in theirs["results"][name].items():
            if "," in key and "stderr" not in key:
                assert math.isclose(results["tasks"][name][key], value), (name, key)
    group = results["groups"]["colors_group"]
    assert group["ran"] == group["subtasks"] == 2
    assert math.isclose(group["acc,none"], theirs["results"]["colors_group"]["acc,none"])


def test_one_item_selected_by_id_gets_the_context_of_the_whole_run(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    """The harness's few-shot sampler draws per document in order: an item chosen with
    -k still gets the examples it gets in the full run (requests are built for all)."""
    tasks_dir = _write_tasks(pytester.path)
    common = [
        f"--llm-model={tiny_model_dir}",
        "--llm-lmeval-tasks=colors_mc",
        f"--llm-set=lmeval.include_path={tasks_dir}",
        "--llm-set=prompt.chat_template=off",
        "-p",
        "no:cacheprovider",
    ]
    full = pytester.runpytest(*common, "--llm-output=full")
    assert full.ret in (0, 1)
    one = pytester.runpytest(*common, "--llm-output=one", "-k", "lmeval-colors_mc-0003")
    one.assert_outcomes(**({"passed": 1} if one.ret == 0 else {}))
    a, b = _records(pytester.path / "full"), _records(pytester.path / "one")
    assert list(b) == ["lmeval-colors_mc-0003"]
    assert b["lmeval-colors_mc-0003"]["prompt"] == a["lmeval-colors_mc-0003"]["prompt"]
    assert b["lmeval-colors_mc-0003"]["logprobs"] == a["lmeval-colors_mc-0003"]["logprobs"]


def test_lmeval_spec_with_markers_floor_and_resume(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    tasks_dir = _write_tasks(pytester.path)
    (pytester.path / "colors_gate.yaml").write_text(
        "task: colors_gate\n"
        "markers: [regression]\n"
        "floor: 1.0\n"  # all five right: the tiny random model cannot, so the gate fails
        f"lmeval: {{task: colors_mc, include_path: {tasks_dir.name}}}\n"
    )
    common = [
        f"--llm-model={tiny_model_dir}",
        "--llm-set=prompt.chat_template=off",
        "--llm-output=runs",
        "-p",
        "no:cacheprovider",
        "-m",
        "regression",
    ]
    first = pytester.runpytest(*common)
    out = first.stdout.str()
    assert first.ret == 1
    assert "lmeval-colors_mc" in out and "FAIL" in out
    # Our spec names the harness's YAMLs; those YAMLs are not collected as specs of ours.
    assert "colors_mc.yaml" not in out
    # An interrupted run (-x at the first wrong answer) is resumed: its finished items are
    # reused when the harness builds the same requests for them.
    stopped = pytester.runpytest(*common, "--llm-output=cut", "--llm-set=gate.strict=true", "-x")
    assert stopped.ret == 1
    resumed = pytester.runpytest(*common, "--llm-output=cut")
    assert resumed.ret == 1
    logs = [p.read_text() for p in sorted((pytester.path / "cut").rglob("eval.log"))]
    assert "reused" in logs[-1], logs[-1]
    want = _records(pytester.path / "runs")
    got = _records_of(sorted(p for p in (pytester.path / "cut").iterdir() if p.is_dir())[-1])
    assert sorted(got) == sorted(want)
    for item_id, record in got.items():
        for key in ("prompt", "logprobs", "score", "details"):
            assert record[key] == want[item_id][key], (item_id, key)


def test_errors_name_the_task_and_what_to_do(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    tasks_dir = _write_tasks(pytester.path)
    (tasks_dir / "sampled.yaml").write_text(
        GEN_TASK.format(data=pytester.path / "arith.jsonl")
        .replace("task: arith_gen", "task: arith_sampled")
        .replace("do_sample: false", "do_sample: true")
    )
    (tasks_dir / "hub_task.yaml").write_text(
        "task: hub_task\ndataset_path: someone/not-local\noutput_type: multiple_choice\n"
        "doc_to_text: '{{q}}'\ndoc_to_choice: ['a', 'b']\ndoc_to_target: 0\n"
    )
    base = [
        f"--llm-model={tiny_model_dir}",
        f"--llm-set=lmeval.include_path={tasks_dir}",
        "-p",
        "no:cacheprovider",
    ]
    sampled = pytester.runpytest(*base, "--llm-lmeval-tasks=arith_sampled")
    assert sampled.ret == pytest.ExitCode.USAGE_ERROR
    sampled.stderr.fnmatch_lines(["*arith_sampled asks for do_sample=True*greedily*"])
    hub = pytester.runpytest(*base, "--llm-lmeval-tasks=hub_task")
    assert hub.ret == pytest.ExitCode.USAGE_ERROR
    hub.stderr.fnmatch_lines(["*hub_task*without the Hugging Face hub*--llm-set run.hub=true*"])


def test_harness_yaml_beside_specs_is_not_collected(pytester: pytest.Pytester) -> None:
    _write_tasks(pytester.path)
    (pytester.path / "typo.yaml").write_text(
        "task: typo\ndataset: {path: x.jsonl}\npromt: {template: x}\nmode: generate\n"
    )
    result = pytester.runpytest("--collect-only", "-q", "lmeval_tasks", "typo.yaml")
    out = result.stdout.str() + result.stderr.str()
    assert "colors_mc.yaml" not in out and "arith_gen.yaml" not in out
    # A spec of ours with a misspelt key is still ours, and its error names the key.
    assert "typo.yaml" in out and "promt" in out


PROBE_TEST = """
import pytest


@pytest.mark.parametrize("task", ["lmeval-colors_mc_zero", "lmeval-colors_mc"])
def test_option_shuffle(llm_probe, task):
    llm_probe.run(task, "option_shuffle")
"""


def test_option_shuffle_probe_on_an_lmeval_task(
    pytester: pytest.Pytester, tiny_model_dir: Path
) -> None:
    """The probes rewrite the harness's documents through the spec's contamination:
    fields; a task whose few-shot examples are drawn at random per document is not probed
    (a rewrite would get other examples than its original), and says why."""
    tasks_dir = _write_tasks(pytester.path)
    for name in ("colors_mc_zero", "colors_mc"):
        (pytester.path / f"{name}_spec.yaml").write_text(
            f"task: {name}_spec\n"
            "contamination: {options: options, gold: label}\n"
            f"lmeval: {{task: {name}, include_path: {tasks_dir.name}}}\n"
        )
    pytester.makepyfile(test_lmeval_probes=PROBE_TEST)
    result = pytester.runpytest(
        f"--llm-model={tiny_model_dir}",
        "--llm-set=prompt.chat_template=off",
        "--llm-output=runs",
        "-p",
        "no:cacheprovider",
        "-k",
        "option_shuffle",
        "-rs",
    )
    result.stdout.fnmatch_lines(["*lmeval-colors_mc*draws its 2 few-shot examples at random*"])
    report = json.loads(
        (
            _run_dir(pytester.path / "runs")
            / "contamination"
            / "lmeval-colors_mc_zero-option_shuffle.json"
        ).read_text()
    )
    assert report["task"] == "lmeval-colors_mc_zero"
    assert len(report["items"]) == 5


def _project_with_other_tests(pytester: pytest.Pytester) -> list[str]:
    """The harness tasks beside a project's own test and a spec of ours (which a bare
    ``pytest`` in its root collects); the options that name the tasks."""
    tasks_dir = _write_tasks(pytester.path)
    pytester.mkpydir("tests")
    (pytester.path / "tests" / "test_own.py").write_text("def test_own():\n    pass\n")
    (pytester.path / "data.jsonl").write_text(json.dumps(ARITH[0]) + "\n")
    (pytester.path / "own_spec.yaml").write_text(
        "task: own_spec\ndataset: {path: data.jsonl}\nprompt: {template: '{{ q }}'}\n"
        "mode: generate\ngenerate: {target: '{{ a }}'}\n"
    )
    return [
        "--llm-lmeval-tasks=arith_gen",
        f"--llm-set=lmeval.include_path={tasks_dir}",
        "--llm-set=prompt.chat_template=off",
        "--llm-limit=2",
        "--llm-data-dir=.",
        "-p",
        "no:cacheprovider",
    ]


def test_lmeval_tasks_without_paths_collect_only_the_tasks(pytester: pytest.Pytester) -> None:
    args = _project_with_other_tests(pytester)
    listed = pytester.runpytest(*args, "--collect-only", "-q")
    assert listed.ret == pytest.ExitCode.OK, listed.stdout.str()
    ids = [line for line in listed.stdout.lines if "::" in line]
    assert ids == ["lmeval::lmeval-arith_gen-0000", "lmeval::lmeval-arith_gen-0001"]
    header = pytester.runpytest(*args, "--collect-only")
    header.stdout.fnmatch_lines(
        ["llmeval: collecting only --llm-lmeval-tasks=arith_gen (no path was named; *"]
    )
    # The same in a project whose ini names testpaths (pytest's other default).
    pytester.makeini("[pytest]\ntestpaths = tests\n")
    listed = pytester.runpytest(*args, "--collect-only", "-q")
    assert [line for line in listed.stdout.lines if "::" in line] == ids


def test_lmeval_tasks_with_a_path_collect_both(pytester: pytest.Pytester) -> None:
    args = _project_with_other_tests(pytester)
    listed = pytester.runpytest(*args, "--collect-only", "-q", "tests", "own_spec.yaml")
    assert listed.ret == pytest.ExitCode.OK, listed.stdout.str()
    ids = [line for line in listed.stdout.lines if "::" in line]
    assert sorted(ids) == [
        "lmeval::lmeval-arith_gen-0000",
        "lmeval::lmeval-arith_gen-0001",
        "own_spec.yaml::own_spec-0000",
        "tests/test_own.py::test_own",
    ], listed.stdout.str()
    assert "llmeval: collecting only" not in listed.stdout.str()


def test_a_task_that_runs_model_code_is_refused(tmp_path: Path) -> None:
    """lm-eval scores humaneval-style tasks (``unsafe_code: true``) by running the model's
    code with its own evaluator, in this process: the plugin refuses them at load, as the
    harness's evaluate() does without confirm_run_unsafe_code (they loaded and ran)."""
    from pytest_llmeval._errors import SpecError
    from pytest_llmeval.lmeval._load import load_tasks

    tasks = _write_tasks(tmp_path)
    text = (tasks / "arith_gen.yaml").read_text()
    unsafe = text.replace("task: arith_gen", "task: arith_code") + "unsafe_code: true\n"
    (tasks / "arith_code.yaml").write_text(unsafe)
    loaded = load_tasks("arith_gen", [str(tasks)], where="spec.yaml", allow_hub=False)
    assert list(loaded.tasks) == ["arith_gen"]
    with pytest.raises(SpecError) as err:
        load_tasks("arith_code", [str(tasks)], where="spec.yaml", allow_hub=False)
    assert err.value.field == "lmeval.task"
    assert "lm-eval task arith_code runs the model's code to score it" in err.value.message
    assert "benchmarks/humaneval.yaml" in err.value.message
