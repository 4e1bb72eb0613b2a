"""Run records through pytester: reproducibility, resume, drift snapshot, baseline, repeats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_projects import KILL_CONFTEST

from pytest_llmeval.record import read_summary
from pytest_llmeval.record._rundir import strip_timing

pytest.importorskip("torch")


def _args(model: Path, *extra: str) -> list[str]:
    return [f"--llm-model={model}", "--llm-data-dir=.", "-p", "no:cacheprovider", *extra]


def _runs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir())


def _lines(run: Path, task: str) -> list[dict[str, object]]:
    text = (run / "tasks" / f"{task}_output.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_run_directory_contents(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    result = pytester.runpytest(*_args(tiny_model_dir, "--llm-output=out"))
    assert result.ret == 0
    (run,) = _runs(pytester.path / "out")
    assert run.name.endswith(f"_{tiny_model_dir.name}_nogit")
    assert {p.name for p in run.iterdir()} >= {
        "eval_config.json",
        "metrics_summary.json",
        "eval.log",
        "summary.md",
        "tasks",
    }
    config = json.loads((run / "eval_config.json").read_text())
    assert len(config["model_sha256"]) == 64
    assert config["seed"] == 1234
    assert config["batch_size"] == 8
    assert config["sandbox"] == {"allow_unisolated_code": False}
    arith = config["tasks"]["arith"]
    assert arith["fewshot"]["k"] == 1
    assert arith["fewshot"]["ids"] == {"": ["fewshot-0"]}
    assert arith["prompt"]["template"] == "Question: {{ q }}\nAnswer:"
    assert arith["generation"]["do_sample"] is False
    assert arith["generation"]["stop"] == ["\n"]
    assert len(arith["config_hash"]) == 12 and len(arith["prompt_hash"]) == 12
    env = config["environment"]
    assert env["libraries"]["torch"]
    assert env["model"]["files"]
    log = (run / "eval.log").read_text()
    # The generative task streams its items (continuous batching); each is computed once.
    assert "arith: generating 5 item(s) with continuous batching (batch size 8)" in log
    assert _count(log, "computed", "arith") == 5 and _count(log, "computed", "colors") == 4
    summary = read_summary(run / "metrics_summary.json")
    assert summary["colors"]["config_hash"] == config["tasks"]["colors"]["config_hash"]
    assert "| colors |" in (run / "summary.md").read_text()


def test_identical_runs_give_identical_records(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    first = pytester.runpytest(
        *_args(tiny_model_dir, "--llm-output=out", "--llm-set=run.check_determinism=3")
    )
    second = pytester.runpytest(
        *_args(
            tiny_model_dir,
            "--llm-output=out",
            "--llm-set=run.check_determinism=3",
            "--llm-set=run.resume=false",
        )
    )
    assert first.ret == second.ret == 0
    a, b = _runs(pytester.path / "out")
    assert "reused" not in (b / "eval.log").read_text()
    for task in ("arith", "colors"):
        assert [strip_timing(r) for r in _lines(a, task)] == [
            strip_timing(r) for r in _lines(b, task)
        ]
    sa = read_summary(a / "metrics_summary.json")
    sb = read_summary(b / "metrics_summary.json")
    assert {t: v["score"] for t, v in sa.items()} == {t: v["score"] for t, v in sb.items()}


def test_determinism_check_names_differing_items(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    # A model whose outputs change between calls: the check must catch it.
    pytester.makeconftest(
        """
        import itertools, pytest_llmeval.model._hf as hf
        real = hf.HFBackend.loglikelihood
        calls = itertools.count()
        def noisy(self, requests):
            shift = next(calls) * 0.01
            out = real(self, requests)
            return [type(r)(r.logprob + shift, r.is_greedy, r.n_tokens) for r in out]
        # Only for this in-process run: the worker's other tests share the class.
        def pytest_configure(config):
            hf.HFBackend.loglikelihood = noisy
        def pytest_unconfigure(config):
            hf.HFBackend.loglikelihood = real
        """
    )
    result = pytester.runpytest(
        *_args(tiny_model_dir, "-k", "colors", "--llm-set=run.check_determinism=2")
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*colors-0000 is not deterministic: log-likelihood of choice 0*",
            "*ERROR colors: non-deterministic item colors-0001*",
        ]
    )


def _count(log: str, verb: str, task: str = r"\w+") -> int:
    """Sum of N over the eval.log lines ``<task>: <verb> N ...``."""
    import re

    return sum(int(n) for n in re.findall(rf"\b{task}: {verb} (\d+)", log))


def _with_reference(  # type: ignore[no-untyped-def]
    pytester: pytest.Pytester, write_project, conftest: str, model: Path, batch: int
) -> list[str]:
    """The tiny project with ``conftest``, a clean reference run of ``arith`` in ``ref``,
    and the arguments of the runs under test (output ``out``)."""
    write_project(pytester)
    pytester.makeconftest(conftest)
    args = _args(model, "--llm-output=out", f"--llm-batch-size={batch}", "-k", "arith")
    reference = pytester.runpytest_subprocess(*args[:-2], "--llm-output=ref", "-k", "arith")
    assert reference.ret == 0
    return args


def _same_as_reference(pytester: pytest.Pytester, run: Path) -> None:
    """The ``arith`` records of ``run`` equal the reference run's, timing aside."""
    (ref,) = _runs(pytester.path / "ref")
    want = {r["item_id"]: strip_timing(r) for r in _lines(ref, "arith")}
    got = {r["item_id"]: strip_timing(r) for r in _lines(run, "arith")}
    assert got == want


def test_resume_after_sigkill_recomputes_no_finished_item(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    args = _with_reference(pytester, write_project, KILL_CONFTEST, tiny_model_dir, 2)

    monkeypatch.setenv("KILL_AFTER", "3")
    killed = pytester.runpytest_subprocess(*args)
    assert killed.ret == -9  # SIGKILL
    (interrupted,) = _runs(pytester.path / "out")
    finished = [r["item_id"] for r in _lines(interrupted, "arith")]
    assert finished == ["arith-0000", "arith-0001", "arith-0002"]
    assert not (interrupted / "metrics_summary.json").exists()

    monkeypatch.delenv("KILL_AFTER")
    # A changed config never reuses stale results (checked while the interrupted run is
    # still offered for resume: it is not superseded by a run that reused nothing).
    changed = pytester.runpytest_subprocess(*args[:-2], "--llm-set=run.seed=7", "-k", "arith")
    assert changed.ret == 0
    other = _runs(pytester.path / "out")[-1]
    assert _count((other / "eval.log").read_text(), "computed") == 5
    assert _count((other / "eval.log").read_text(), "reused") == 0
    assert not (interrupted / "superseded_by.txt").exists()
    resumed = pytester.runpytest_subprocess(*args)
    assert resumed.ret == 0
    run = _runs(pytester.path / "out")[-1]
    log = (run / "eval.log").read_text()
    assert _count(log, "reused") == 3  # the three items written before the kill
    assert _count(log, "computed") == 2  # only arith-0003 and arith-0004 ran again
    _same_as_reference(pytester, run)
    assert (interrupted / "superseded_by.txt").exists()


INTERRUPT_CONFTEST = """
import os
from pytest_llmeval.model import _hf

real = _hf.HFBackend.generate_stream


def last_first(self, requests):  # the items after the first finish before it
    yield from reversed(list(real(self, requests)))


_hf.HFBackend.generate_stream = last_first
"""
# Ctrl-C (a KeyboardInterrupt) after $INTERRUPT_AFTER reported items.
INTERRUPT_HOOK = """
seen = []
def pytest_runtest_logreport(report):
    if report.when == "call" and os.environ.get("INTERRUPT_AFTER"):
        seen.append(report.nodeid)
        if len(seen) == int(os.environ["INTERRUPT_AFTER"]):
            raise KeyboardInterrupt
"""


def test_results_computed_ahead_are_kept_when_a_run_is_interrupted(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Ctrl-C after two items of a generative task: the items that already finished in the
    stream (computed ahead of their tests; here the stream yields the last item first) are
    written beside the run's items and reused by the resumed rerun; the interrupted run's
    scores count only the items that ran."""
    args = _with_reference(
        pytester, write_project, INTERRUPT_CONFTEST + INTERRUPT_HOOK, tiny_model_dir, 8
    )
    monkeypatch.setenv("INTERRUPT_AFTER", "2")
    interrupted_run = pytester.runpytest_subprocess(*args)
    assert interrupted_run.ret == pytest.ExitCode.INTERRUPTED
    (interrupted,) = _runs(pytester.path / "out")
    assert [r["item_id"] for r in _lines(interrupted, "arith")] == ["arith-0000", "arith-0001"]
    ahead = (interrupted / "tasks" / "arith_ahead.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["item_id"] for line in ahead) == [
        "arith-0002",
        "arith-0003",
        "arith-0004",
    ]
    log = (interrupted / "eval.log").read_text()
    assert "arith: kept 3 result(s) computed ahead of items that did not run" in log
    assert json.loads((interrupted / "eval_config.json").read_text())["tasks"]["arith"]
    assert "> ⚠️ This run was interrupted" in (interrupted / "summary.md").read_text()

    monkeypatch.delenv("INTERRUPT_AFTER")
    resumed = pytester.runpytest_subprocess(*args)
    assert resumed.ret == 0
    run = _runs(pytester.path / "out")[-1]
    log = (run / "eval.log").read_text()
    assert _count(log, "reused") == 5 and _count(log, "computed") == 0
    _same_as_reference(pytester, run)


MC_STREAM_CONFTEST = """
import os
from pytest_llmeval.model import _hf


def last_first(self, requests):  # a streaming engine (vllm): the last rows finish first
    yield from reversed(list(enumerate(self.loglikelihood(requests))))


_hf.HFBackend.loglikelihood_stream = last_first
"""


def test_multiple_choice_streamed_keeps_what_was_scored_when_interrupted(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """A multiple-choice task on a backend that streams log-likelihoods (the vllm engine,
    handed the whole task at once) keeps each item as soon as its choices are scored: Ctrl-C
    after two items writes the others beside the run, the rerun (resume) reuses them all, and
    the records equal those of a run that did not stream."""
    write_project(pytester)
    args = _args(tiny_model_dir, "--llm-output=out", "-k", "colors")
    reference = pytester.runpytest_subprocess(*args[:-3], "--llm-output=ref", "-k", "colors")
    assert reference.ret == 0
    pytester.makeconftest(MC_STREAM_CONFTEST + INTERRUPT_HOOK)
    monkeypatch.setenv("INTERRUPT_AFTER", "2")
    interrupted_run = pytester.runpytest_subprocess(*args)
    assert interrupted_run.ret == pytest.ExitCode.INTERRUPTED
    (interrupted,) = _runs(pytester.path / "out")
    assert len(_lines(interrupted, "colors")) == 2
    log = (interrupted / "eval.log").read_text()
    assert "colors: scoring 4 item(s), all handed over at once" in log
    ahead = (interrupted / "tasks" / "colors_ahead.jsonl").read_text().splitlines()
    assert len(ahead) == 2
    monkeypatch.delenv("INTERRUPT_AFTER")
    resumed = pytester.runpytest_subprocess(*args)
    assert resumed.ret == 0
    run = _runs(pytester.path / "out")[-1]
    log = (run / "eval.log").read_text()
    assert _count(log, "reused") == 4 and _count(log, "computed") == 0
    (ref,) = _runs(pytester.path / "ref")
    want = {r["item_id"]: strip_timing(r) for r in _lines(ref, "colors")}
    assert {r["item_id"]: strip_timing(r) for r in _lines(run, "colors")} == want


SNAPSHOT_TEST = """
def test_environment_has_not_drifted(llm_drift, snapshot):
    llm_drift.assert_matches(snapshot)
"""


def test_environment_snapshot_fails_on_drift_naming_the_field(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    pytester.makepyfile(test_environment=SNAPSHOT_TEST)
    args = _args(tiny_model_dir, "-k", "environment")
    created = pytester.runpytest(*args, "--snapshot-update")
    assert created.ret == 0
    snapshots = list((pytester.path / "__snapshots__").rglob("*.json"))
    assert len(snapshots) == 1
    assert "libraries.transformers" in snapshots[0].read_text()
    assert pytester.runpytest(*args).ret == 0

    # A library upgrade (simulated): the test fails and names the library and both versions.
    import pytest_llmeval.record._env as env

    real = env.library_versions
    monkeypatch.setattr(env, "library_versions", lambda: {**real(), "transformers": "99.0.0"})
    drifted = pytester.runpytest(*args)
    assert drifted.ret == 1
    drifted.stdout.fnmatch_lines(["*transformers * -> 99.0.0*", "*--snapshot-update*"])
    monkeypatch.setattr(env, "library_versions", real)

    # A prompt template change: the task's prompt hash drifts.
    spec = pytester.path / "colors.yaml"
    spec.write_text(spec.read_text().replace("\\nAnswer:", "\\nThe answer:"))
    changed = pytester.runpytest(*args)
    assert changed.ret == 1
    changed.stdout.fnmatch_lines(["*tasks.colors.prompt_hash*->*"])


def test_prompt_hash_covers_the_text_of_fewshot_examples_read_from_a_file(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    """Few-shot examples read from a data file were in the prompt hash by their ids only
    (row numbers): an edit to an example's text changed every prompt and left the task's
    config and prompt hashes, and so the drift snapshot, as they were."""
    write_project(pytester)
    spec = pytester.path / "colors.yaml"
    spec.write_text(spec.read_text() + "fewshot:\n  k: 1\n  source: {path: shots.jsonl}\n")
    shots = pytester.path / "shots.jsonl"
    shot = {"question": "Which one is a tree?", "options": ["oak", "two"], "label": 0}
    shots.write_text(json.dumps(shot) + "\n")
    pytester.makepyfile(test_environment=SNAPSHOT_TEST)
    args = _args(tiny_model_dir, "-k", "environment")
    assert pytester.runpytest(*args, "--snapshot-update").ret == 0
    assert pytester.runpytest(*args).ret == 0
    shots.write_text(json.dumps({**shot, "question": "Which one is a plant?"}) + "\n")
    changed = pytester.runpytest(*args)
    assert changed.ret == 1
    changed.stdout.fnmatch_lines(["*tasks.colors.prompt_hash*->*"])


def test_baseline_comparison(
    pytester: pytest.Pytester, tiny_model_dir: Path, weak_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    assert pytester.runpytest(*_args(tiny_model_dir, "--llm-output=base", "-k", "colors")).ret == 0
    (base,) = _runs(pytester.path / "base")

    # Same model, different few-shot count: a warning naming the field.
    spec = pytester.path / "colors.yaml"
    original = spec.read_text()
    spec.write_text(
        original.replace(
            "mode: multiple_choice",
            "fewshot:\n  k: 1\n  examples: [{question: 'Which one is a color?', "
            "options: [red, cat, one], label: 0}]\nmode: multiple_choice",
        )
    )
    few = pytester.runpytest(
        *_args(tiny_model_dir, "--llm-output=few", "-k", "colors", f"--llm-baseline={base}")
    )
    few.stdout.fnmatch_lines(["*llmeval baseline*", "*tasks.colors.fewshot.k: 0 -> 1*"])
    assert few.ret == 0
    gated = pytester.runpytest(
        *_args(
            tiny_model_dir,
            "--llm-output=few",
            "-k",
            "colors",
            f"--llm-baseline={base}",
            "--llm-set=gate.baseline_rule=config",
        )
    )
    assert gated.ret == 1
    gated.stdout.fnmatch_lines(["*BASELINE GATE (config)*"])
    spec.write_text(original)

    # A weakened model: flipped items are listed.
    worse = pytester.runpytest(
        f"--llm-model={weak_model_dir}",
        "--llm-data-dir=.",
        "-p",
        "no:cacheprovider",
        "--llm-output=weak",
        "-k",
        "colors",
        f"--llm-baseline={base}",
        "--llm-set=gate.baseline_rule=drop:10",
    )
    text = worse.stdout.str()
    assert "model.sha256" in text or "model_sha256" in text
    base_items = {r["item_id"]: r["correct"] for r in _lines(base, "colors")}
    (weak_run,) = _runs(pytester.path / "weak")
    weak_items = {r["item_id"]: r["correct"] for r in _lines(weak_run, "colors")}
    flipped = sorted(i for i in base_items if base_items[i] and not weak_items[i])
    assert flipped, "the weakened model should lose at least one item"
    for item_id in flipped:
        assert item_id in text
    assert worse.ret == 1
    worse.stdout.fnmatch_lines(["*BASELINE GATE (drop:10)*colors dropped*"])


def test_repeats_report_median_and_spread(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    result = pytester.runpytest(
        *_args(tiny_model_dir, "--llm-output=out", "--llm-set=run.repeat=3", "-k", "colors")
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*3 repeats: median*spread 0.0 points*"])
    (run,) = _runs(pytester.path / "out")
    summary = read_summary(run / "metrics_summary.json")
    assert len(summary["colors"]["repeats"]) == 3
    assert summary["colors"]["spread"] == 0.0
    assert "3 repeat(s)" in (run / "eval.log").read_text()


def test_repeats_score_and_interval_are_of_the_median_repeat() -> None:
    """With --llm-set run.repeat the score was the median of the repeats' while its interval (and
    the floor's interval verdict) came from the first repeat's answers: a score outside
    its own interval. Both are now of the median repeat; an even number takes the lower
    of the middle two."""
    from pytest_llmeval.gate import TaskTally

    tally = TaskTally(name="t", metric="acc", floor=None, total_items=10)
    # three repeats of ten items: task scores 0.2, 0.8, 0.5 (the first is the lowest)
    for i in range(10):
        scores = [float(i < 2), float(i < 8), float(i < 5)]
        tally.results[f"t-{i}"] = {"score": scores[0], "repeat_scores": scores}
    assert tally.repeat_scores() == [0.2, 0.8, 0.5]
    assert tally.median_repeat() == 2
    est = tally.estimate()
    assert est.value == 0.5 and est.ci_low < 0.5 < est.ci_high
    for result in tally.results.values():  # a fourth repeat, right on every item
        result["repeat_scores"].append(1.0)
    assert tally.repeat_scores()[3] == 1.0
    assert tally.median_repeat() == 2  # 0.2, 0.5 | 0.8, 1.0: the lower middle one
    alone = TaskTally(name="u", metric="acc", floor=None, total_items=2)
    alone.results = {"u-0": {"score": 1.0}, "u-1": {"score": 0.0}}
    assert alone.median_repeat() == 0 and alone.estimate().value == 0.5


def test_one_task_per_process_combined_into_one_record(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    step_summary = pytester.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    for task in ("arith", "colors"):
        assert (
            pytester.runpytest(*_args(tiny_model_dir, "--llm-set=run.dir=combined", "-k", task)).ret
            == 0
        )
    run = pytester.path / "combined"
    summary = read_summary(run / "metrics_summary.json")
    assert set(summary) == {"arith", "colors"}
    config = json.loads((run / "eval_config.json").read_text())
    assert set(config["tasks"]) == {"arith", "colors"}
    text = step_summary.read_text()
    assert "| arith |" in text and "| colors |" in text
    # each process appended its own task to the CI step summary, once
    assert text.count("| arith |") == text.count("| colors |") == 1
    # the run's summary.md covers both tasks, as metrics_summary.json does (it showed the
    # last process's task alone)
    markdown = (run / "summary.md").read_text()
    assert "| arith | 5/5 |" in markdown and "| colors | 4/4 |" in markdown

    # A task the directory already holds is refused before any model loads: its items
    # would be recorded twice under a summary of the second run alone.
    records = (run / "tasks" / "colors_output.jsonl").read_text()
    again = pytester.runpytest(*_args(tiny_model_dir, "--llm-set=run.dir=combined", "-k", "colors"))
    assert again.ret == pytest.ExitCode.USAGE_ERROR
    again.stderr.fnmatch_lines(
        [
            "ERROR: --llm-set run.dir=combined already holds the items of colors "
            "(tasks/colors_output.jsonl, from an earlier run): a run directory records each "
            "task once. To run it again, give a new directory*"
        ]
    )
    assert (run / "tasks" / "colors_output.jsonl").read_text() == records


def test_named_metrics_in_records_summary_and_terminal(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    """A task with ``generate.metrics``: each item's record carries them, the summary gives
    each its mean and interval beside the primary score, the terminal a line each; a task
    without them has none anywhere."""
    write_project(pytester)
    spec = pytester.path / "arith.yaml"
    spec.write_text(
        spec.read_text()
        + "  metrics:\n"
        + "    any_text: {extract: [strip], compare: exact_match,"
        + " exact_match: {regexes_to_ignore: ['.*'], ignore_case: true}}\n"
        + "    never: {extract: [{kind: regex, pattern: 'zzz(q)'}], compare: exact}\n"
    )
    result = pytester.runpytest(*_args(tiny_model_dir, "--llm-output=out"))
    assert result.ret == 0
    (run,) = _runs(pytester.path / "out")
    for line in _lines(run, "arith"):
        metrics = line["metrics"]
        assert isinstance(metrics, dict) and list(metrics) == ["any_text", "never"]
        assert metrics["never"] == {"score": 0.0, "extracted": None}
        # Everything removed from both sides: equal whenever the output had any text.
        assert metrics["any_text"]["score"] == float(metrics["any_text"]["extracted"] is not None)
    assert all("metrics" not in line for line in _lines(run, "colors"))
    summary = read_summary(run / "metrics_summary.json")
    assert summary["arith"]["metrics"]["never"]["n"] == 5
    assert summary["arith"]["metrics"]["never"]["mean"] == 0.0
    assert summary["arith"]["metrics"]["never"]["ci95"][0] == 0.0
    assert "metrics" not in summary["colors"]
    result.stdout.re_match_lines([r"^\s+never\s+0\.0\s+\[0\.0,\d+\.\d\]$"])
