"""The README's gate loop, run as written: a reference run, a gated rerun that passes and a
worse setting that fails, on the default model and real HumanEval problems.

The commands are read from the README's ``<!-- gate-loop -->`` block, so the README cannot
drift from what CI runs; each command's expected exit status is read from the comment line
above it (``... exit N ...``). Only the paths under ``.llmeval/`` are moved into a temporary
folder, and the data folder is named explicitly.
"""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"


def gate_loop(readme: str) -> list[tuple[int, list[str]]]:
    """(expected exit status, pytest arguments) for each command of the gate-loop block."""
    match = re.search(r"<!-- gate-loop[^>]*-->(.*?)<!-- /gate-loop -->", readme, re.S)
    assert match, "README.md has no <!-- gate-loop --> block"
    commands: list[tuple[int, list[str]]] = []
    expected: int | None = None
    for line in match.group(1).splitlines():
        line = line.strip()
        if line.startswith("#"):
            found = re.search(r"\bexit (\d+)\b", line)
            if found:
                expected = int(found.group(1))
        elif line.startswith("pytest "):
            assert expected is not None, f"no 'exit N' comment above {line!r}"
            commands.append((expected, shlex.split(line)[1:]))
            expected = None
    return commands


def test_the_block_names_three_commands_with_their_exit_status() -> None:
    commands = gate_loop(README.read_text(encoding="utf-8"))
    assert [status for status, _ in commands] == [0, 0, 1]
    assert "run.dir=.llmeval/reference" in _settings(commands[0][1])
    assert all("gate.floors_from=.llmeval/reference" in _settings(a) for _, a in commands[1:])


def _settings(args: list[str]) -> list[str]:
    """The values of ``--llm-set`` in ``args``."""
    return [value for flag, value in itertools.pairwise(args) if flag == "--llm-set"]


def test_readme_gate_loop_decides(
    tmp_path: Path, shared_benchmarks: Path, default_model: str
) -> None:
    commands = gate_loop(README.read_text(encoding="utf-8"))
    outputs: list[str] = []
    for expected, args in commands:
        args = [a.replace(".llmeval/", f"{tmp_path}/") for a in args]
        assert f"--llm-model={default_model}" in args
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                *args,
                f"--llm-data-dir={shared_benchmarks}",
                f"--llm-output={tmp_path / 'runs'}",
                "-p",
                "no:cacheprovider",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        text = result.stdout + result.stderr
        outputs.append(text)
        assert result.returncode == expected, f"{shlex.join(args)}\n{text[-6000:]}"

    reference, gated, worse = outputs
    assert "no task has a floor: this run gates nothing" in reference
    assert "no task has a floor" not in gated
    assert re.search(r"humaneval.*\bpass\b", gated), gated[-4000:]
    assert re.search(r"FAIL humaneval: pass@1 \S+ is below its floor", worse), worse[-4000:]
