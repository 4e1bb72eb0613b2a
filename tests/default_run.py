"""The session's shared run of the default model (fixture ``default_run``, tests/conftest.py).

The end-to-end tests of the default model each started their own pytest run of the shipped
suite: a process that imports torch, collects the suite and loads the model before its
first item. They now read one run that holds all of their items and probes, made once per
test session: under xdist the first worker to ask makes it, holding a lock, and the others
read what it wrote."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]

#: The items of the run, one short item per task where one shows the path: GSM8K and MMLU
#: for the smoke test (tests/test_e2e_smoke.py), one of each other task with local data
#: (tests/benchmarks/test_default_model.py).
ITEMS = {
    "gsm8k": ["gsm8k-0000", "gsm8k-0001"],
    "mmlu": ["mmlu-abstract_algebra-0000", "mmlu-anatomy-0000", "mmlu-business_ethics-0000"],
    "ceval": ["ceval-computer_network-0000"],
    "bbh": ["bbh-boolean_expressions-0000"],
    "humaneval": ["humaneval-HumanEval_0"],
    "ifeval": ["ifeval-1000"],
    "math500": ["math500-test_algebra_2584.json"],
}
#: Every shipped contamination probe runs too (benchmarks/test_contamination.py), each on
#: the first items of its task.
PROBE_TEST = "test_no_sign_of_contamination"
PROBE_ITEMS = 4


@dataclass(frozen=True)
class DefaultRun:
    """The run: pytest's result (exit status and output, as ``runpytest`` gives them), its
    run folder, and its JUnit XML."""

    result: pytest.RunResult
    run: Path
    junit: Path

    def outcomes(self, test: str) -> dict[str, str]:
        """The outcome of each case of the test function ``test`` (``passed``, ``failed``,
        ``skipped``, ``error``), by its parameters' id, from the JUnit XML."""
        found: dict[str, str] = {}
        for case in ET.parse(self.junit).getroot().iter("testcase"):
            name = case.get("name", "")
            if not name.startswith(f"{test}["):
                continue
            tags = {child.tag for child in case}
            outcome = next((t for t in ("failure", "error", "skipped") if t in tags), "passed")
            found[name[len(test) + 1 : -1]] = {"failure": "failed"}.get(outcome, outcome)
        return found


def shared_default_run(folder: Path, data: Path, model: str) -> DefaultRun:
    """The run in ``folder``: made there by the first caller (holding ``folder/lock``),
    read back by every later one."""
    folder.mkdir(parents=True, exist_ok=True)
    saved = folder / "result.json"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not saved.is_file():
            saved.write_text(json.dumps(_run(folder, data, model)))
    got = json.loads(saved.read_text())
    result = pytest.RunResult(got["ret"], got["stdout"], got["stderr"], got["duration"])
    out = folder / "runs"
    runs = [p for p in out.iterdir() if p.is_dir()] if out.is_dir() else []
    if len(runs) != 1:  # the run crashed before (or while) writing its record: say how
        output = "\n".join([*got["stdout"][-60:], *got["stderr"][-60:]])
        pytest.fail(
            f"the shared default-model run (exit {got['ret']}) left {len(runs)} run "
            f"folder(s) in {out}, not 1; its output ends:\n{output}",
            pytrace=False,
        )
    return DefaultRun(result, runs[0], folder / "junit.xml")


def _run(folder: Path, data: Path, model: str) -> dict[str, Any]:
    """``pytest benchmarks/`` as a user runs it (the chat template by default), with
    floors of 0 (a handful of items cannot meet real ones), every item's output shown and
    the failed items classified."""
    items = [item for ids in ITEMS.values() for item in ids]
    args = [
        sys.executable,
        "-m",
        "pytest",
        str(REPO / "benchmarks"),
        f"--llm-model={model}",
        f"--llm-data-dir={data}",
        f"--llm-output={folder / 'runs'}",
        f"--junitxml={folder / 'junit.xml'}",
        "-p",
        "no:cacheprovider",
        "-k",
        " or ".join([*items, PROBE_TEST]),
        f"--llm-set=probe.items={PROBE_ITEMS}",
        "--llm-show=all",
        "--llm-set=report.failures=2",
        *(f"--llm-floor={task}=0" for task in ITEMS),
    ]
    started = time.monotonic()
    done = subprocess.run(args, cwd=folder, capture_output=True, text=True, timeout=1800)
    return {
        "ret": done.returncode,
        "stdout": done.stdout.splitlines(),
        "stderr": done.stderr.splitlines(),
        "duration": time.monotonic() - started,
    }
