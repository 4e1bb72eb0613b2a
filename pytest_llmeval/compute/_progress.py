"""How far each task's items are in this process: the evaluator feeds a
:class:`ProgressBoard` as results come (and the backends' reports within a chunk), the
board hands every task's :class:`TaskProgress` to a sink: the plugin's terminal display,
or under xdist a worker's :class:`FileSink`, whose files the controller reads back
(:func:`read_progress_files`). Display only: nothing here is recorded. Plain Python; the
drawing is the plugin's (plugin/_progress.py)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: A worker rewrites its progress file at most this often (a task's start and end always).
FILE_SECONDS = 0.25


@dataclass
class TaskProgress:
    """How far one task's items are, in one process."""

    task: str
    total: int
    done: float = 0.0  # items with a result, plus the share of the chunk computing now
    reused: int = 0  # of them, finished results of an interrupted run (not computed)
    elapsed: float = 0.0  # seconds since the task's first chunk began
    started: float = field(default_factory=time.monotonic, repr=False)

    @property
    def finished(self) -> bool:
        return self.done >= self.total

    @property
    def whole(self) -> int:
        """Items done, counted whole (what the line shows)."""
        return min(self.total, math.floor(self.done + 1e-9))

    def rate(self) -> float | None:
        """Items computed per second (reused ones are no work), None before the first."""
        computed = self.done - self.reused
        if computed <= 0 or self.elapsed <= 0:
            return None
        return computed / self.elapsed

    def line(self) -> str:
        """``arith: 3/5 items (60%), 2.1 items/s, 1s left``."""
        done = self.whole
        text = f"{self.task}: {done}/{self.total} items ({100 * done // max(1, self.total)}%)"
        rate = self.rate()
        if rate is not None:
            text += f", {rate:.1f} items/s" if rate >= 1 else f", {1 / rate:.1f} s/item"
        if self.finished:
            return f"{text}, done in {_duration(self.elapsed)}"
        if rate is not None:
            text += f", {_duration((self.total - self.done) / rate)} left"
        return text

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["started"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskProgress:
        return cls(
            task=str(data["task"]),
            total=int(data["total"]),
            done=float(data["done"]),
            reused=int(data.get("reused", 0)),
            elapsed=float(data.get("elapsed", 0.0)),
        )


def _duration(seconds: float) -> str:
    """``42s``, ``7m05s``, ``2h03m``: short enough for a status line."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


Sink = Callable[[list[TaskProgress], bool], None]
"""Receives every task's progress after a change; the flag: a task began or ended (a
state a throttled sink must not skip)."""


class ProgressBoard:
    """The progress of this process's tasks, fed by the evaluator, shown by a sink."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.tasks: dict[str, TaskProgress] = {}
        self._counted: dict[str, int] = {}  # whole items with a result, per task

    def begin(self, task: str, total: int) -> None:
        """A task's first chunk is about to compute (``total``: its selected items here)."""
        if task not in self.tasks:
            self.tasks[task] = TaskProgress(task, max(1, total))
            self._counted[task] = 0
            self._emit(task, important=True)

    def partial(self, task: str, share: float) -> None:
        """``share`` items of the chunk computing now are done (from the backend's loop)."""
        if task in self.tasks:
            # Never the whole total: a task ends when its last results are in (add).
            below = self.tasks[task].total - 1e-6
            self.tasks[task].done = min(self._counted[task] + share, below)
            self._emit(task)

    def add(self, task: str, n: int = 1, *, reused: bool = False) -> None:
        """``n`` more items of ``task`` have their results."""
        progress = self.tasks.get(task)
        if progress is None or n <= 0:
            return
        was_finished = progress.finished
        self._counted[task] += n
        progress.done = min(self._counted[task], progress.total)
        if reused:
            progress.reused += n
        self._emit(task, important=progress.finished and not was_finished)

    @contextlib.contextmanager
    def chunk(self, task: str, n_items: int) -> Iterator[None]:
        """Backend calls inside the block compute ``n_items`` items of ``task``: their
        reports (units of the call) become shares of those items."""
        from pytest_llmeval.model import progress_to

        def on_report(done: int, total: int) -> None:
            self.partial(task, n_items * done / total)

        with progress_to(on_report):
            yield

    def _emit(self, task: str, important: bool = False) -> None:
        progress = self.tasks[task]
        progress.elapsed = time.monotonic() - progress.started
        with contextlib.suppress(Exception):  # progress is display: it never fails a test
            self.sink(list(self.tasks.values()), important)


class FileSink:
    """An xdist worker's progress, as a JSON file the controller reads (rewritten whole,
    through a rename, so a reader never sees half a file)."""

    def __init__(self, folder: Path, worker: str) -> None:
        self.path = folder / f"{worker}.json"
        self._last = 0.0

    def __call__(self, tasks: list[TaskProgress], important: bool) -> None:
        now = time.monotonic()
        if not important and now - self._last < FILE_SECONDS:
            return
        self._last = now
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps([t.to_dict() for t in tasks]), encoding="utf-8")
        os.replace(temporary, self.path)


def read_progress_files(folder: Path) -> list[TaskProgress]:
    """Every task's progress from the workers' files (a task runs on one worker; where
    two report it, the one further on)."""
    found: dict[str, TaskProgress] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            entries = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not there yet, or being replaced
        for entry in entries:
            progress = TaskProgress.from_dict(entry)
            known = found.get(progress.task)
            if known is None or progress.done > known.done:
                found[progress.task] = progress
    return list(found.values())
