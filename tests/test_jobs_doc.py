"""docs/JOBS.md's five jobs, run as written: each ``<!-- job: X -->`` block's files are
written into a fresh folder and its ``pytest`` commands run there, with the placeholders
filled (``MODEL`` and ``BASE_MODEL``: the default model; ``DATA``: the shared benchmark
data) and ``--llm-limit`` (or ``probe.items``) and a ``-k`` selection of tasks scored by
log-likelihood added to keep CI short. Job (a)'s command
is job (b)'s reference run without its run folder, so it runs there. The vLLM block is
checked as far as a machine without GPUs can: its options and settings resolve to an
engine of tensor parallel 4. Each command's exit status is the one its comment names."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parent.parent
JOBS = REPO / "docs" / "JOBS.md"
COLORS = [
    {"question": "Which one is a color?", "options": ["red", "table", "seven"], "label": 0},
    {"question": "Which one is a number?", "options": ["blue", "seven", "apple"], "label": 1},
    {"question": "Which one is a fruit?", "options": ["nine", "green", "apple"], "label": 2},
]


def job(name: str) -> tuple[dict[str, str], list[tuple[int, list[str]]], list[str]]:
    """A job's files (path -> text), its pytest commands (expected exit status, args) and
    its pip commands."""
    text = JOBS.read_text(encoding="utf-8")
    found = re.search(rf"<!-- job: {name} -->(.*?)<!-- /job -->", text, re.S)
    assert found, f"docs/JOBS.md has no job {name}"
    files: dict[str, str] = {}
    commands: list[tuple[int, list[str]]] = []
    pips: list[str] = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", found.group(1), re.S):
        lines = block.splitlines()
        if lines and lines[0].startswith("# FILE "):
            files[lines[0].removeprefix("# FILE ").strip()] = "\n".join(lines[1:]) + "\n"
            continue
        expected = 0
        for line in lines:
            status = re.search(r"^#.*?\bexit (\d+)\b", line)
            if status:
                expected = int(status.group(1))
            elif line.startswith("pytest "):
                commands.append((expected, shlex.split(line)[1:]))
            elif line.startswith("pip "):
                pips.append(line)
    return files, commands, pips


def _fill(args: list[str], model: Path | str, data: Path) -> list[str]:
    out = []
    for arg in args:
        if arg.startswith("--llm-model="):
            arg = f"--llm-model={model}"
        arg = arg.replace("BASE_MODEL", str(model)).replace("DATA", str(data))
        out.append(arg)
    return out


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "-q"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )


def _write(files: dict[str, str], folder: Path) -> None:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_every_job_is_on_the_page_and_installs_extras_that_exist() -> None:
    extras = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    for name in "abcde":
        _, commands, pips = job(name)
        assert commands, f"job {name} runs no pytest command"
        for pip in pips:
            for wanted in re.findall(r"pytest-llm-evaluation\[([a-z,-]+)\]", pip):
                assert set(wanted.split(",")) <= extras, pip
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "docs/JOBS.md" in readme  # one link from the front page


def test_job_a_is_the_reference_run_of_job_b() -> None:
    ((_, a),) = job("a")[1]
    reference = job("b")[1][0][1]
    assert reference == [*a, "--llm-set", "run.dir=.llmeval/reference"]


@pytest.mark.parametrize("name", ["b", "d", "e"])
def test_a_job_runs_as_written(
    name: str, tmp_path: Path, default_model: str, shared_benchmarks: Path
) -> None:
    files, commands, _ = job(name)
    _write(files, tmp_path)
    if name == "e":
        pytest.importorskip("lm_eval")
        import json

        (tmp_path / "my_tasks" / "colors.jsonl").write_text(
            "".join(json.dumps(row) + "\n" for row in COLORS)
        )
    for expected, args in commands:
        filled = _fill(args, default_model, shared_benchmarks)
        # CI's time: a few items, and tasks scored by log-likelihood (no long generations)
        short = (
            ["--llm-set=probe.items=3", "-k", "mmlu-option_shuffle or mmlu-membership"]
            if "contamination" in args
            else ["--llm-limit=1", "-k", "mmlu or ceval or colors"]
        )
        result = _run([*filled, *short, "--llm-output=runs"], tmp_path)
        out = result.stdout + result.stderr
        assert result.returncode == expected, f"{shlex.join(filled)}\n{out[-5000:]}"
        assert "llmeval summary" in out or "contamination" in out, out[-3000:]
    assert any((tmp_path / "runs").iterdir()) or (tmp_path / ".llmeval").is_dir()


def test_the_vllm_job_resolves_to_tensor_parallel_4(
    pytester: pytest.Pytester, tiny_model_dir: Path, shared_benchmarks: Path
) -> None:
    files, commands, _ = job("c")
    assert list(files) == ["pyproject.toml"]
    pytester.makepyprojecttoml(files["pyproject.toml"])
    ((_, args),) = commands
    assert "--llm-backend=vllm" in args
    config = pytester.parseconfigure(
        *_fill(args, tiny_model_dir, shared_benchmarks), "--collect-only"
    )
    from pytest_llmeval.plugin._collect import get_session

    options = get_session(config).options
    engine = options.model_settings()
    assert (engine.backend, engine.tensor_parallel, engine.memory_share) == ("vllm", 4, 0.9)
    assert engine.dtype == "bfloat16" and engine.batch_size == 0  # auto
    assert options.settings.source("vllm.tensor_parallel") == "pyproject.toml [tool.llmeval]"
