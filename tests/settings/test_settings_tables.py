"""Settings beyond the core options: parsed where given, resolved in a fixed order, every
mistake named with the place and the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_llmeval.settings import (
    BY_NAME,
    REMOVED,
    SETTINGS,
    SettingError,
    assignment_layer,
    read_pyproject,
    resolve,
    table_layer,
)

PYPROJECT = """
[tool.llmeval.vllm]
tensor_parallel = 4
args = { enforce_eager = true, max_num_seqs = 64 }

[tool.llmeval.prompt]
chat_template = "auto"

[tool.llmeval.profile.qwen3.prompt]
chat_template = "on"
strip_thinking = true

[tool.llmeval.profile.merge.gate]
baseline_rule = "drop:2:sig"
strict = true
"""


def _project(tmp_path: Path) -> Path:
    path = tmp_path / "pyproject.toml"
    path.write_text(PYPROJECT)
    return path


def test_later_places_win_and_each_value_says_where_it_came_from(tmp_path: Path) -> None:
    table = read_pyproject(_project(tmp_path))
    assert table is not None
    ini = assignment_layer(["vllm.tensor_parallel=2", "# a comment", ""], "llm_set (ini)")
    cli = assignment_layer(["prompt.chat_template=off"], "--llm-set")
    settings = resolve([table, ini], ["qwen3", "merge"], cli)
    assert settings["vllm.tensor_parallel"] == 2
    assert settings.source("vllm.tensor_parallel") == "llm_set (ini)"
    assert settings["vllm.args"] == {"enforce_eager": True, "max_num_seqs": 64}
    assert settings["prompt.chat_template"] == "off"  # the command line over the profile
    assert settings.source("prompt.chat_template") == "--llm-set"
    assert settings["prompt.strip_thinking"] is True
    assert settings.source("prompt.strip_thinking") == "profile 'qwen3'"
    assert (settings["gate.baseline_rule"], settings["gate.strict"]) == ("drop:2:sig", True)
    # a setting given nowhere has its default, and says so
    assert settings["run.seed"] == 1234 and settings.source("run.seed") == "default"
    assert not settings.given("run.seed")
    # without the profiles, the project's values
    plain = resolve([table])
    assert plain["prompt.chat_template"] == "auto" and plain["gate.strict"] is False


def test_text_and_toml_give_the_same_values() -> None:
    text = assignment_layer(
        [
            "probe.alpha=0.05",
            "run.resume=false",
            "prompt.thinking_markers=<a>,</a>",
            'vllm.args={"enforce_eager": true}',
            "lmeval.include_path=a,b",
        ],
        "--llm-set",
    )
    toml = table_layer(
        {
            "probe": {"alpha": 0.05},
            "run": {"resume": False},
            "prompt": {"thinking_markers": ["<a>", "</a>"]},
            "vllm": {"args": {"enforce_eager": True}},
            "lmeval": {"include_path": ["a", "b"]},
        },
        "pyproject.toml [tool.llmeval]",
    )
    assert text.values == toml.values


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["vllm.tp=4"], "--llm-set: unknown setting 'vllm.tp': vllm has no 'tp' (its settings: "),
        (["gpu.count=4"], "--llm-set: unknown setting 'gpu.count': no section 'gpu'"),
        (["tensor_parallel=4"], "--llm-set: expected SECTION.KEY=VALUE"),
        (["vllm.tensor_parallel"], "--llm-set: expected SECTION.KEY=VALUE"),
        (["vllm.tensor_parallel=four"], "vllm.tensor_parallel (from --llm-set): expected an"),
        (["probe.alpha=1"], "probe.alpha (from --llm-set): expected a number in (0, 1), got '1'"),
        (["vllm.memory_share=0"], "vllm.memory_share (from --llm-set): expected a number in (0"),
        (["run.resume=maybe"], "run.resume (from --llm-set): expected true or false"),
        (["gate.policy=loose"], "gate.policy (from --llm-set): expected one of point|strict"),
        (["vllm.args=[1]"], "vllm.args (from --llm-set): expected a JSON object"),
        (["run.exclude="], "run.exclude (from --llm-set): the value is empty"),
        (["run.seed=1", "run.seed=2"], "--llm-set: run.seed given twice ('1' and '2')"),
        (["profile.x=1"], "--llm-set: 'profile.x': a profile's setting is profile.NAME.SECTION"),
    ],
)
def test_a_bad_setting_is_named_with_where_it_was_given(lines: list[str], message: str) -> None:
    with pytest.raises(SettingError) as caught:
        assignment_layer(lines, "--llm-set")
    assert str(caught.value).startswith(message), str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[tool.llmeval]\nseed = 3\n", "unknown setting 'seed': no section 'seed'"),
        ("[tool.llmeval]\nvllm = 3\n", "vllm: expected a table, got 3"),
        ("[tool.llmeval.run]\nseed = true\n", "run.seed (from pyproject.toml [tool.llmeval]): "),
        ("[tool.llmeval.profile.a]\nprompt = 1\n", "prompt: expected a table"),
        ("[tool.llmeval\n", "cannot read it as TOML"),
    ],
)
def test_a_bad_pyproject_is_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(text)
    with pytest.raises(SettingError) as caught:
        read_pyproject(path)
    assert message in str(caught.value)


def test_a_pyproject_without_the_table_gives_none(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text("[tool.ruff]\nline-length = 100\n")
    assert read_pyproject(path) is None


def test_an_unknown_profile_names_the_defined_ones(tmp_path: Path) -> None:
    table = read_pyproject(_project(tmp_path))
    assert table is not None
    with pytest.raises(SettingError, match=r"--llm-profile qwen: no such profile \(defined: "):
        resolve([table], ["qwen"])


def test_every_default_parses_and_every_removed_option_has_a_replacement() -> None:
    for setting in SETTINGS:
        if setting.default not in (None, ()):
            value = setting.default
            if isinstance(value, tuple):
                value = ",".join(value)
            assert setting.parse(value, "default") == setting.default, setting.name
    replaced = {s.replaces for s in SETTINGS if s.replaces}
    assert replaced <= set(REMOVED)
    for text in REMOVED.values():
        first = text.split()
        if first[0] == "--llm-set":
            assert first[1].partition("=")[0] in BY_NAME
