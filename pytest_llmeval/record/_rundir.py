"""The run directory: one per run, written as results arrive.

```
<output>/<YYYYMMDD-HHMMSS>_<model>_<commit>/
  eval_config.json          what determines the scores (rewritten as tasks become known)
  tasks/<task>_output.jsonl one line per item, appended as each result arrives
  metrics_summary.json      per task: n, score, stderr, CI, floor, verdict (written at the end)
  summary.md                the Markdown summary
  eval.log                  what happened, with times (computed vs reused items, ...)
```

A run directory without ``metrics_summary.json`` was interrupted; its item lines are the
resume cache for the next run with the same config hash.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

SUMMARY = "metrics_summary.json"
SUPERSEDED = "superseded_by.txt"
CONFIG = "eval_config.json"
LOG = "eval.log"
MARKDOWN = "summary.md"

# Fields of an item line that vary between identical runs.
TIMING_FIELDS = ("seconds",)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def new_run_dir(output: Path, model: str, short_commit: str | None, now: _dt.datetime) -> Path:
    """Create ``<output>/<date>_<model>_<commit>/`` (``-2``, ``-3``... when it exists)."""
    name = f"{now.strftime('%Y%m%d-%H%M%S')}_{_slug(Path(model).name)}_{short_commit or 'nogit'}"
    output.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        path = output / (name if n == 1 else f"{name}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            n += 1
            continue
        (path / "tasks").mkdir()
        return path


class RunDir:
    """Writes one run directory. Every write is an append or an atomic replace."""

    def __init__(self, path: Path) -> None:
        self.path = path
        (path / "tasks").mkdir(parents=True, exist_ok=True)

    def append_item(self, task: str, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, sort_keys=True, allow_nan=True)
        with (self.path / "tasks" / f"{_slug(task)}_output.jsonl").open(
            "a", encoding="utf-8"
        ) as fh:
            fh.write(line + "\n")
            fh.flush()

    def log(self, message: str) -> None:
        stamp = _dt.datetime.now().isoformat(timespec="seconds")
        with (self.path / LOG).open("a", encoding="utf-8") as fh:
            fh.write(f"{stamp} {message}\n")

    def write_json(self, name: str, data: Any) -> None:
        write_json_atomic(self.path / name, data)

    def read_json(self, name: str) -> Any:
        path = self.path / name
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return None


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(
        json.dumps(data, indent=2, sort_keys=True, allow_nan=True) + "\n", encoding="utf-8"
    )
    os.replace(tmp, path)


def iter_item_lines(path: Path) -> Iterator[dict[str, Any]]:
    """Item records of one jsonl file; a torn last line (a crash mid-write) is skipped."""
    try:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(record, dict) and "item_id" in record:
                    yield record
    except OSError:
        return


def resumable_items(
    output: Path, task: str, config_hash: str
) -> tuple[dict[str, dict[str, Any]], list[Path]]:
    """Finished items of ``task`` with this config hash, from interrupted runs under ``output``.

    Only runs without a metrics summary count (they ended before the end); newer runs win.
    """
    found: dict[str, dict[str, Any]] = {}
    sources: list[Path] = []
    if not output.is_dir():
        return found, sources
    for run in sorted(p for p in output.iterdir() if p.is_dir()):
        if (run / SUMMARY).exists() or (run / SUPERSEDED).exists():
            continue
        before = len(found)
        for record in iter_item_lines(run / "tasks" / f"{_slug(task)}_output.jsonl"):
            if record.get("config_hash") == config_hash:
                found[str(record["item_id"])] = record
        if len(found) > before:
            sources.append(run)
    return found, sources


def strip_timing(record: Mapping[str, Any]) -> dict[str, Any]:
    """An item record without the fields that legitimately differ between identical runs:
    timing fields at any depth (the sandbox's ``details.seconds`` too) and ``reused_from``."""

    def strip(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: strip(v) for k, v in value.items() if k not in TIMING_FIELDS}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return {k: strip(v) for k, v in record.items() if k not in TIMING_FIELDS and k != "reused_from"}


def mark_superseded(sources: list[Path], by: Path) -> None:
    """Interrupted runs whose items a finished run reused are not offered for resume again."""
    for run in sources:
        with contextlib.suppress(OSError):
            (run / SUPERSEDED).write_text(f"{by}\n", encoding="utf-8")
