"""Floors from a reference run directory and the llm_floors lines written into ini files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pytest_llmeval._errors import LlmEvalError
from pytest_llmeval.gate import FloorRule, ReferenceRun, parse_floor_entry, write_floors
from pytest_llmeval.gate._reference import entry_task

SHA = "0060ed3b9e0b6b51d4dcce8963936dbec2c36491f692b2de1172ed0bf97e2e81"


def _run(tmp_path: Path, metrics: object | None = None, name: str = "20261201-0900_m_abc") -> Path:
    run = tmp_path / name
    run.mkdir()
    (run / "eval_config.json").write_text(
        json.dumps({"model": "smollm2-135m", "model_sha256": SHA})
    )
    if metrics is not None:
        (run / "metrics_summary.json").write_text(json.dumps(metrics))
    return run


MMLU = {
    "n": 1000,
    "metric": "acc",
    "score": 0.251,
    "ci95": [0.22516, 0.27887],
    "verdict": "no floor",
}


def test_floors_from_a_run_with_their_provenance(tmp_path: Path) -> None:
    run = _run(tmp_path, {"mmlu": MMLU})
    (floor,) = ReferenceRun(run).floors(FloorRule("lcb"))
    assert floor.floor == 0.2251
    assert floor.rule == "lcb95"
    assert floor.comment() == (
        "run 20261201-0900_m_abc (model smollm2-135m, sha256 0060ed3b9e0b), 1000 items, "
        "acc 25.1% [22.5, 27.9], rule lcb95"
    )
    assert floor.ini_entry().startswith("mmlu=0.2251  # run 20261201-0900_m_abc")
    record = floor.to_dict()
    assert record["rule"] == "lcb95" and record["model_sha256"] == SHA and record["items"] == 1000
    (margin,) = ReferenceRun(run).floors(FloorRule("margin", 0.05), ["mmlu"])
    assert margin.floor == 0.201 and margin.rule == "margin:5"


def test_a_run_without_what_floors_need_fails_naming_the_path_and_field(tmp_path: Path) -> None:
    with pytest.raises(LlmEvalError, match=r"missing.*not a directory"):
        ReferenceRun(tmp_path / "missing")
    bare = _run(tmp_path, None, "bare")
    with pytest.raises(LlmEvalError, match=r"bare/metrics_summary.json: not found"):
        ReferenceRun(bare)
    run = _run(tmp_path, {"mmlu": MMLU, "gsm8k": {**MMLU, "ci95": None}}, "partial")
    with pytest.raises(LlmEvalError, match=r"metrics_summary.json: no task 'ceval' \(the run has"):
        ReferenceRun(run).floor("ceval", FloorRule("lcb"))
    with pytest.raises(LlmEvalError, match=r"task 'gsm8k': field 'ci95'"):
        ReferenceRun(run).floor("gsm8k", FloorRule("lcb"))
    broken = _run(tmp_path, {"mmlu": {**MMLU, "verdict": "incomplete"}}, "broken")
    with pytest.raises(LlmEvalError, match=r"field 'status' is 'incomplete'"):
        ReferenceRun(broken).floor("mmlu", FloorRule("lcb"))
    no_score = _run(tmp_path, {"mmlu": {**MMLU, "score": "high"}}, "noscore")
    with pytest.raises(LlmEvalError, match=r"field 'score'"):
        ReferenceRun(no_score).floor("mmlu", FloorRule("margin", 0.02))


def _floors(tmp_path: Path) -> list:  # type: ignore[type-arg]
    run = _run(tmp_path, {"mmlu": MMLU, "ceval": {**MMLU, "score": 0.2, "ci95": [0.176, 0.227]}})
    return ReferenceRun(run).floors(FloorRule("lcb"))


def _toml_floors(path: Path) -> list[str]:
    if sys.version_info < (3, 11):
        pytest.skip("tomllib needs Python 3.11")
    import tomllib

    data = tomllib.loads(path.read_text())
    return list(data["tool"]["pytest"]["ini_options"]["llm_floors"])


def test_write_floors_into_pyproject(tmp_path: Path) -> None:
    floors = _floors(tmp_path)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "x"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n\n'
        "[tool.ruff]\nline-length = 100\n"
    )
    write_floors(pyproject, floors)
    entries = _toml_floors(pyproject)
    assert [entry_task(e) for e in entries] == ["ceval", "mmlu"]
    assert entries[1].startswith("mmlu=0.2251  # run ")
    text = pyproject.read_text()
    assert text.index("llm_floors") < text.index("[tool.ruff]")
    assert 'testpaths = ["tests"]' in text and "line-length = 100" in text
    # an existing array: other tasks stay, the same tasks are replaced, comments with
    # brackets inside strings survive
    pyproject.write_text(
        "[tool.pytest.ini_options]\nllm_floors = [\n"
        '    "gsm8k=0.4  # by hand [see notes]",  # a TOML comment ]\n'
        "    'mmlu=0.9',\n]\nmarkers = []\n"
    )
    write_floors(pyproject, floors)
    entries = _toml_floors(pyproject)
    assert [entry_task(e) for e in entries] == ["gsm8k", "ceval", "mmlu"]
    assert entries[0] == "gsm8k=0.4  # by hand [see notes]"
    assert "markers = []" in pyproject.read_text()
    write_floors(pyproject, floors)  # idempotent
    assert _toml_floors(pyproject) == entries


@pytest.mark.parametrize(
    ("name", "section"), [("pytest.ini", "pytest"), ("setup.cfg", "tool:pytest")]
)
def test_write_floors_into_ini_files(tmp_path: Path, name: str, section: str) -> None:
    import iniconfig

    floors = _floors(tmp_path)
    ini = tmp_path / name
    ini.write_text(f"[{section}]\naddopts = -q\nllm_floors =\n    gsm8k=0.4\n\n[other]\nx = 1\n")
    write_floors(ini, floors)
    value = iniconfig.IniConfig(str(ini))[section]["llm_floors"]
    entries = [line for line in value.splitlines() if line.strip()]
    assert [entry_task(e) for e in entries] == ["gsm8k", "ceval", "mmlu"]
    assert parse_floor_entry(entries[2])[:2] == ("mmlu", "0.2251")
    assert "rule lcb95" in parse_floor_entry(entries[2])[2]
    assert iniconfig.IniConfig(str(ini))["other"]["x"] == "1"
    fresh = tmp_path / "fresh" / name
    fresh.parent.mkdir()
    fresh.write_text(f"[{section}]\naddopts = -q\n")
    write_floors(fresh, floors)
    assert "mmlu=0.2251" in iniconfig.IniConfig(str(fresh))[section]["llm_floors"]


def test_write_floors_needs_a_pytest_section(tmp_path: Path) -> None:
    ini = tmp_path / "tox.ini"
    ini.write_text("[tox]\nenv_list = py\n")
    with pytest.raises(LlmEvalError, match=r"tox.ini: no \[pytest\] section"):
        write_floors(ini, _floors(tmp_path))
