"""The installed package ships the suite: the wheel holds every spec of ``benchmarks/`` as
``pytest_llmeval/suite/...`` and every module of ``pytest_llmeval/``, and nothing of the
repository's tools or tests; and the plugin collects the installed suite by its package
name (``pytest --pyargs pytest_llmeval.suite``) from a folder outside the repository."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "benchmarks"
# What a build reads or leaves behind in a checkout, and the caches: not copied.
_NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "*.pyc",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    ".llmeval",
    ".tox",
    ".venv",
)


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The file names in a wheel built from a copy of the checkout (a copy: setuptools'
    build/ folder in the checkout may hold files of an earlier build)."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    shutil.copytree(REPO, src, ignore=_NOT_SOURCE)
    out = base / "out"
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q"]
    if importlib.util.find_spec("setuptools") is not None:  # else an isolated build fetches it
        pip.append("--no-build-isolation")
    build = subprocess.run(
        [*pip, "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    [wheel] = out.glob("pytest_llm_evaluation-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def test_the_wheel_ships_every_spec_of_the_suite(wheel_names: set[str]) -> None:
    specs = sorted(SUITE.glob("*.yaml"))
    assert SUITE / "mmlu.yaml" in specs  # the folder this test reads is the suite's
    suite_files = [*specs, *SUITE.glob("*.py"), *SUITE.glob("__snapshots__/*/*")]
    missing = [
        f"pytest_llmeval/suite/{p.relative_to(SUITE).as_posix()}"
        for p in suite_files
        if f"pytest_llmeval/suite/{p.relative_to(SUITE).as_posix()}" not in wheel_names
    ]
    assert not missing, f"not in the wheel: {missing}"


def test_the_wheel_ships_every_module_of_the_package(wheel_names: set[str]) -> None:
    package = REPO / "pytest_llmeval"
    files = [
        p
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    ]
    missing = [
        p.relative_to(REPO).as_posix()
        for p in files
        if p.relative_to(REPO).as_posix() not in wheel_names
    ]
    assert not missing, f"not in the wheel (a package missing from pyproject.toml?): {missing}"


def test_the_wheel_holds_no_tool_and_no_test(wheel_names: set[str]) -> None:
    top = {name.split("/", 1)[0] for name in wheel_names}
    assert all(t == "pytest_llmeval" or t.endswith(".dist-info") for t in top), top
    # No tool under another name either (the contamination experiment lived in the package).
    tools = {p.name for p in (REPO / "tools").glob("*") if p.name != "__init__.py"}
    assert {"contamination_experiment.py", "parity.py", "chromium.py"} <= tools
    shipped = {name.rsplit("/", 1)[-1] for name in wheel_names}
    assert not tools & shipped, f"tools in the wheel: {sorted(tools & shipped)}"
    assert not {"experiment.py", "bench.py", "conftest.py"} & shipped


def _run_outside(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytest in pytester's folder (outside the repository: no ini file, so the repository's
    llm_data_dir does not apply), on the installed suite."""
    assert REPO not in pytester.path.parents
    return pytester.runpytest_subprocess(
        "--pyargs", "pytest_llmeval.suite", "-p", "no:cacheprovider", *args, timeout=600
    )


def test_pyargs_collects_the_installed_suite_and_a_teams_specs_from_any_folder(
    pytester: pytest.Pytester, shared_benchmarks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLMEVAL_DATA_DIR", raising=False)
    # A team's own spec beside the suite, its data in a data directory of its own.
    (pytester.path / "my_specs").mkdir()
    (pytester.path / "my_specs" / "arith.yaml").write_text(
        "task: team_arith\nmarkers: [regression]\ndataset: {path: arith/test.jsonl}\n"
        'prompt: {template: "{{ q }}"}\nmode: generate\ngenerate: {target: "{{ a }}"}\n'
    )
    (pytester.path / "team_data" / "arith").mkdir(parents=True)
    (pytester.path / "team_data" / "arith" / "test.jsonl").write_text('{"q": "1+1=", "a": "2"}\n')
    result = _run_outside(
        pytester,
        "my_specs",
        "--collect-only",
        "-q",
        "--llm-limit=1",
        f"--llm-data-dir={shared_benchmarks}",
        "--llm-data-dir=team_data",
        "--snapshot-warn-unused",  # the environment test is collected, not run
    )
    text = result.stdout.str()
    assert result.ret == 0, text
    collected = {line.split("::", 1)[0] for line in text.splitlines() if "::" in line}
    expected = {p.name for p in SUITE.glob("*.yaml")} | {"test_environment.py", "arith.yaml"}
    assert expected <= {Path(c).name for c in collected}, text
    # Items of tasks whose data is in the data directories, not not-installed stand-ins.
    result.stdout.fnmatch_lines(
        ["*mmlu.yaml::mmlu-abstract_algebra-0000", "my_specs/arith.yaml::team_arith-0000"],
        consecutive=False,
    )


def test_the_installed_suite_without_a_data_dir_says_what_to_pass(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLMEVAL_DATA_DIR", raising=False)
    result = _run_outside(pytester, "-k", "mmlu and not contamination", "-rs")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["SKIPPED*/mmlu.yaml:*not installed*(none configured)*--llm-data-dir*"]
    )
