"""Floors from a reference run, with where each came from, and the ``llm_floors`` lines that
carry them into ``pyproject.toml`` or ``pytest.ini``."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_llmeval._errors import LlmEvalError

from ._decide import SummaryLayoutError, summary_tasks
from ._verdict import FloorRule

METRICS_FILE = "metrics_summary.json"
CONFIG_FILE = "eval_config.json"
# Verdicts of a reference task whose score is not a measurement of the whole selection.
_UNUSABLE = ("error", "incomplete", "skipped")
_DAMAGED = (
    "; the run's summary is damaged or was not written by pytest-llmeval: use another "
    "reference run, or give the floor itself (--llm-floor TASK=SCORE)"
)


@dataclass(frozen=True)
class ReferenceFloor:
    """A floor made from one task of a reference run, with its provenance."""

    task: str
    floor: float
    rule: str  # FloorRule.name: "lcb95", "margin:5"
    rule_text: str
    run: str  # the run directory's name (its id)
    path: str
    model: str | None
    model_sha256: str | None
    n: int
    metric: str
    score: float
    ci95: tuple[float, float]

    def comment(self) -> str:
        """One line: run id, model SHA256 prefix, items, score with interval, rule."""
        sha = self.model_sha256[:12] if self.model_sha256 else "n/a"
        low, high = self.ci95
        return (
            f"run {self.run} (model {self.model or '?'}, sha256 {sha}), {self.n} items, "
            f"{self.metric} {100 * self.score:.1f}% [{100 * low:.1f}, {100 * high:.1f}], "
            f"rule {self.rule}"
        )

    def ini_entry(self) -> str:
        """``TASK=FLOOR  # provenance``: an ``llm_floors`` entry (the plugin keeps the text
        after ``#`` as the floor's note)."""
        return f"{self.task}={self.floor:.4f}  # {self.comment()}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "from": "reference run",
            "rule": self.rule,
            "rule_text": self.rule_text,
            "run": self.run,
            "path": self.path,
            "model": self.model,
            "model_sha256": self.model_sha256,
            "items": self.n,
            "metric": self.metric,
            "score": self.score,
            "ci95": list(self.ci95),
        }


def _read_object(path: Path, needed_by: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LlmEvalError(
            f"{path}: not found; {needed_by} needs a finished run directory (one that wrote "
            f"{path.name})"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LlmEvalError(f"{path}: cannot be read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise LlmEvalError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise LlmEvalError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def _number(entry: Mapping[str, Any], key: str, where: str) -> float:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise LlmEvalError(f"{where}: field {key!r} is missing or not a number (got {value!r})")
    return float(value)


class ReferenceRun:
    """A finished run directory read for floors: its task summaries and model identity."""

    def __init__(self, path: Path, needed_by: str = "floors from a reference run") -> None:
        self.path = Path(path)
        self.needed_by = needed_by
        if not self.path.is_dir():
            raise LlmEvalError(f"{self.path}: not a directory; {needed_by} needs a run directory")
        self.metrics_file = self.path / METRICS_FILE
        try:
            self.metrics = summary_tasks(_read_object(self.metrics_file, needed_by))
        except SummaryLayoutError as exc:
            raise LlmEvalError(f"{self.metrics_file}: {exc}; {needed_by} cannot read it") from None
        config_file = self.path / CONFIG_FILE
        self.config = _read_object(config_file, needed_by) if config_file.is_file() else {}

    @property
    def tasks(self) -> list[str]:
        return sorted(k for k, v in self.metrics.items() if isinstance(v, Mapping))

    def floor(self, task: str, rule: FloorRule) -> ReferenceFloor:
        """The floor of ``task`` by ``rule``; raises ``LlmEvalError`` naming the file and the
        field when the run does not have what the rule needs."""
        entry = self.metrics.get(task)
        where = f"{self.metrics_file}: task {task!r}"
        if not isinstance(entry, Mapping):
            raise LlmEvalError(
                f"{self.metrics_file}: no task {task!r} (the run has: "
                f"{', '.join(self.tasks) or 'no tasks'}); {self.needed_by} needs every task "
                "this run gates"
            )
        status = entry.get("status")
        if status in _UNUSABLE:
            raise LlmEvalError(
                f"{where}: field 'status' is {status!r}; a floor needs a task that completed"
            )
        n = entry.get("n")
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise LlmEvalError(f"{where}: field 'n' is missing or not a positive count ({n!r})")
        score = _number(entry, "score", where)
        if not 0.0 <= score <= 1.0:
            raise LlmEvalError(
                f"{where}: field 'score' is {score!r}, not a proportion in [0, 1]; a floor is "
                f"a score in [0, 1]{_DAMAGED}"
            )
        ci = entry.get("ci95")
        if (
            not isinstance(ci, Sequence)
            or isinstance(ci, str)
            or len(ci) != 2
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in ci)
        ):
            raise LlmEvalError(f"{where}: field 'ci95' is missing or not [low, high] ({ci!r})")
        low, high = float(ci[0]), float(ci[1])
        # NaN fails every comparison, so a NaN end is refused here too.
        if not 0.0 <= low <= high <= 1.0:
            raise LlmEvalError(
                f"{where}: field 'ci95' is {list(ci)!r}, not a 95% interval [low, high] with "
                f"0 <= low <= high <= 1{_DAMAGED}"
            )
        metric = entry.get("metric")
        sha = self.config.get("model_sha256")
        model = self.config.get("model")
        if isinstance(model, str) and model.startswith(("/", "./", "../", "~")):
            model = Path(model).name or model  # a local directory: its name (the SHA is the id)
        return ReferenceFloor(
            task=task,
            floor=rule.floor(score, low),
            rule=rule.name,
            rule_text=rule.describe(),
            run=self.path.resolve().name,
            path=str(self.path),
            model=str(model) if model else None,
            model_sha256=str(sha) if sha else None,
            n=n,
            metric=str(metric) if metric else "score",
            score=score,
            ci95=(low, high),
        )

    def floors(self, rule: FloorRule, tasks: Iterable[str] | None = None) -> list[ReferenceFloor]:
        chosen = self.tasks if tasks is None else list(tasks)
        return [self.floor(task, rule) for task in chosen]


# ---------------------------------------------------------------------------- ini files

_HEADER = "# floors from reference runs (python -m pytest_llmeval.record floors, docs/GATES.md)"


def entry_task(entry: str) -> str:
    """The task an ``llm_floors`` entry is for (``TASK=SCORE  # note``)."""
    return entry.split("#", 1)[0].partition("=")[0].strip()


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _scan_toml_array(text: str, start: int) -> int:
    """The index just past the ``]`` that closes the array opening at ``text[start]``."""
    depth, i = 0, start
    while i < len(text):
        ch = text[i]
        if ch == "#":
            i = text.find("\n", i)
            if i < 0:
                break
            continue
        if ch in "\"'":
            triple = text.startswith(ch * 3, i)
            quote = ch * 3 if triple else ch
            i += len(quote)
            while i < len(text) and not text.startswith(quote, i):
                i += 2 if ch == '"' and text[i] == "\\" else 1
            i += len(quote)
            continue
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise LlmEvalError("unterminated llm_floors array")


def _toml_strings(array: str) -> list[str]:
    """The string elements of a TOML array of basic or literal strings."""
    out: list[str] = []
    i = 1
    while i < len(array) - 1:
        ch = array[i]
        if ch == "#":
            nl = array.find("\n", i)
            i = len(array) if nl < 0 else nl
            continue
        if ch == '"':
            j = i + 1
            while array[j] != '"':
                j += 2 if array[j] == "\\" else 1
            out.append(json.loads(array[i : j + 1]))
            i = j + 1
            continue
        if ch == "'":
            j = array.index("'", i + 1)
            out.append(array[i + 1 : j])
            i = j + 1
            continue
        i += 1
    return out


def _section_span(lines: list[str], names: Sequence[str]) -> tuple[int, int] | None:
    """Line indexes (header, end) of the first ``[name]`` section of an ini/TOML file."""
    header = re.compile(r"^\s*\[\s*(?P<name>[^\]]+?)\s*\]\s*(?:#.*)?$")
    start = None
    for i, line in enumerate(lines):
        match = header.match(line)
        if match is None:
            continue
        if start is not None:
            return start, i
        if match["name"] in names:
            start = i
    return None if start is None else (start, len(lines))


def _merge(existing: Sequence[str], floors: Sequence[ReferenceFloor]) -> list[str]:
    """Existing entries for other tasks kept in place, the new ones replacing their task's."""
    new = {f.task: f.ini_entry() for f in floors}
    kept = [e for e in existing if e.strip() and entry_task(e) not in new]
    kept = [e for e in kept if e.strip() != _HEADER]
    return kept + [new[f.task] for f in floors]


def _write_toml(text: str, floors: Sequence[ReferenceFloor]) -> str:
    lines = text.splitlines(keepends=True)
    span = _section_span([ln.rstrip("\n") for ln in lines], ["tool.pytest.ini_options"])
    if span is None:
        raise LlmEvalError("no [tool.pytest.ini_options] table to write llm_floors into")
    start, end = span
    offset = sum(len(ln) for ln in lines[: start + 1])
    section_end = sum(len(ln) for ln in lines[:end])
    body = text[offset:section_end]
    key = re.compile(r"^llm_floors\s*=\s*", re.MULTILINE)
    match = key.search(body)
    existing: list[str] = []
    if match is not None:
        value_start = offset + match.end()
        if text.startswith("[", value_start):
            value_end = _scan_toml_array(text, value_start)
            existing = _toml_strings(text[value_start:value_end])
        else:  # a single string
            eol = text.find("\n", value_start)
            value_end = len(text) if eol < 0 else eol
            raw = text[value_start:value_end].split("#", 1)[0].strip()
            if raw.startswith(('"', "'")):
                existing = _toml_strings(f"[{raw}]")
        head, tail = text[: offset + match.start()], text[value_end:]
    else:  # a new key, first in the table
        head, tail = text[:offset], "\n" + text[offset:]
    entries = _merge(existing, floors)
    block = "llm_floors = [\n    " + _HEADER + "\n"
    block += "".join(f"    {_toml_string(e)},\n" for e in entries) + "]"
    return head + block + tail


def _write_ini(text: str, floors: Sequence[ReferenceFloor], sections: Sequence[str]) -> str:
    lines = text.splitlines()
    span = _section_span(lines, sections)
    if span is None:
        raise LlmEvalError(f"no [{sections[0]}] section to write llm_floors into")
    start, end = span
    key = re.compile(r"^llm_floors\s*[=:]\s*(?P<value>.*)$")
    existing: list[str] = []
    found = None
    for i in range(start + 1, end):
        match = key.match(lines[i])
        if match is None:
            continue
        j = i + 1
        values = [match["value"]] if match["value"].strip() else []
        while j < end and (not lines[j].strip() or lines[j][:1] in " \t"):
            if lines[j].strip() and not lines[j].strip().startswith(("#", ";")):
                values.append(lines[j].strip())
            j += 1
        while j > i + 1 and not lines[j - 1].strip():
            j -= 1
        found, existing = (i, j), values
        break
    entries = _merge(existing, floors)
    block = ["llm_floors =", f"    {_HEADER}", *(f"    {e}" for e in entries)]
    if found is None:
        lines[start + 1 : start + 1] = block
    else:
        lines[found[0] : found[1]] = block
    return "\n".join(lines) + "\n"


def write_floors(path: Path, floors: Sequence[ReferenceFloor]) -> str:
    """Write ``floors`` as ``llm_floors`` entries into a pytest configuration file
    (``pyproject.toml``'s ``[tool.pytest.ini_options]``, ``pytest.ini`` / ``tox.ini``'s
    ``[pytest]``, ``setup.cfg``'s ``[tool:pytest]``): entries for other tasks stay, those
    for the same tasks are replaced. Returns the new text (also written)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LlmEvalError(f"{path}: cannot be read: {exc}") from None
    try:
        if path.suffix == ".toml":
            new = _write_toml(text, floors)
        elif path.name == "setup.cfg":
            new = _write_ini(text, floors, ["tool:pytest"])
        else:
            new = _write_ini(text, floors, ["pytest"])
    except LlmEvalError as exc:
        raise LlmEvalError(f"{path}: {exc}") from None
    path.write_text(new, encoding="utf-8")
    return new


def parse_floor_entry(entry: str) -> tuple[str, str, str]:
    """``TASK=SCORE  # note`` as (task, score text, note); the note may be empty."""
    value, _, note = entry.partition("#")
    task, sep, score = value.partition("=")
    if not sep:
        return "", "", note.strip()
    return task.strip(), score.strip(), note.strip()
