"""The command line's front door: a handful of core options; every other setting in a
table of its own (pyproject.toml, profiles, --llm-set); each removed option a usage error
that names what replaced it."""

from __future__ import annotations

import re

import pytest

from pytest_llmeval.settings import REMOVED

USAGE = pytest.ExitCode.USAGE_ERROR
# Removed options that were switches (no value); the others took one.
SWITCHES = {"strict", "allow-unisolated-code", "plan", "catalog", "hub", "strip-thinking"}
SWITCHES.add("no-resume")


def _help_options(pytester: pytest.Pytester) -> list[str]:
    out = pytester.runpytest("--help").stdout.str()
    return sorted(set(re.findall(r"^  (--llm-[a-z-]+)", out, flags=re.M)))


def test_help_lists_at_most_fifteen_options(pytester: pytest.Pytester) -> None:
    options = _help_options(pytester)
    assert 10 <= len(options) <= 15, options
    assert "--llm-set" in options and "--llm-profile" in options
    # no removed option is listed (they stay known, hidden, for one release)
    assert not {f"--llm-{o}" for o in REMOVED} & set(options)


@pytest.mark.parametrize("option", sorted(REMOVED))
def test_a_removed_option_is_a_usage_error_naming_its_replacement(
    pytester: pytest.Pytester, option: str
) -> None:
    args = [f"--llm-{option}"] if option in SWITCHES else [f"--llm-{option}", "4"]
    result = pytester.runpytest("-p", "no:cacheprovider", *args)
    assert result.ret == USAGE
    lines = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert lines == [f"ERROR: --llm-{option} was removed: use {REMOVED[option]}"]
    # the replacement is something that exists now
    replacement = REMOVED[option].split()[0:2]
    if replacement[0] == "--llm-set":
        name = replacement[1].partition("=")[0]
        from pytest_llmeval.settings import BY_NAME

        assert name in BY_NAME
    else:
        assert replacement[0] in _help_options(pytester) or replacement[0].startswith("--llm-show=")


@pytest.mark.parametrize("key", ["llm_tensor_parallel", "llm_chat_template", "llm_strict"])
def test_a_removed_ini_key_is_a_usage_error_naming_its_replacement(
    pytester: pytest.Pytester, key: str
) -> None:
    pytester.makeini(f"[pytest]\n{key} = 1\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == USAGE
    result.stderr.fnmatch_lines(
        [f"ERROR: {key} (ini) was removed: use the line *=* under llm_set*"]
    )


PROJECT = """
[tool.pytest.ini_options]
llm_set = ["run.seed=7"]

[tool.llmeval.prompt]
chat_template = "off"

[tool.llmeval.profile.qwen3.prompt]
chat_template = "on"
strip_thinking = true

[tool.llmeval.profile.merge.gate]
policy = "strict"
"""


def _options(pytester: pytest.Pytester, *args: str):  # type: ignore[no-untyped-def]
    from pytest_llmeval.plugin._collect import get_session

    return get_session(pytester.parseconfigure("-p", "no:cacheprovider", *args)).options


def test_settings_come_from_the_project_profiles_and_the_command_line(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyprojecttoml(PROJECT)
    plain = _options(pytester)
    assert (plain.chat.mode, plain.seed, plain.floor_policy) == ("off", 7, "point")
    assert not plain.chat.forced  # the project's value leaves a spec's pin alone
    profiled = _options(pytester, "--llm-profile=qwen3,merge")
    assert (profiled.chat.mode, profiled.chat.strip_thinking) == ("on", True)
    assert profiled.floor_policy == "strict" and not profiled.chat.forced
    assert profiled.settings.source("prompt.chat_template") == "profile 'qwen3'"
    one_off = _options(pytester, "--llm-profile=qwen3", "--llm-set=prompt.chat_template=auto")
    assert one_off.chat.mode == "auto" and one_off.chat.forced
    # a path in the project's file is relative to that file's folder
    pytester.makepyprojecttoml(PROJECT + '\n[tool.llmeval.run]\nexclude = "ids.txt"\n')
    (pytester.path / "ids.txt").write_text("colors-0000\n")
    assert _options(pytester).exclude == pytester.path / "ids.txt"


def test_the_settings_are_recorded_with_where_each_came_from(
    pytester: pytest.Pytester,
    tiny_model_dir,
    write_project,  # type: ignore[no-untyped-def]
) -> None:
    import json

    write_project(pytester)
    pytester.makepyprojecttoml(PROJECT)
    result = pytester.runpytest(
        f"--llm-model={tiny_model_dir}",
        "--llm-data-dir=.",
        "--llm-output=out",
        "--llm-profile=merge",
        "--llm-set=report.failures=2",
        "-p",
        "no:cacheprovider",
        "-k",
        "colors",
    )
    assert result.ret in (0, 1), result.stdout.str()
    run = next((pytester.path / "out").iterdir())
    recorded = json.loads((run / "eval_config.json").read_text())["settings"]
    assert recorded["profiles"] == ["merge"]
    assert recorded["given"] == {
        "gate.policy": {"value": "strict", "from": "profile 'merge'"},
        "prompt.chat_template": {"value": "off", "from": "pyproject.toml [tool.llmeval]"},
        "report.failures": {"value": 2, "from": "--llm-set"},
        "run.seed": {"value": 7, "from": "llm_set (ini)"},
    }
