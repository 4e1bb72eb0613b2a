"""The run directory: one per run, written as results arrive.

```
<output>/<YYYYMMDD-HHMMSS>_<model>_<commit>/
  eval_config.json          what determines the scores (rewritten as tasks become known)
  tasks/<task>_output.jsonl one line per item, appended as each result arrives
  tasks/<task>_ahead.jsonl  an interrupted run's results computed ahead of their items
                            (continuous batching), never reported: offered to resume only
  metrics_summary.json      per task: n, score, stderr, CI, floor, verdict (written at the end)
  summary.md                the Markdown summary
  eval.log                  what happened, with times (computed vs reused items, ...)
```

Each process that writes a run directory holds a lease on it, ``processes/<host>-<pid>``:
a lock file held (``flock``) for as long as the process runs, and a status file with its
pid, host, start, heartbeat (rewritten every 30 s) and, at the end, ``finished`` or
``interrupted`` with the reason. A run is *live* while a lease is held (or, seen from
another host, while its heartbeat is fresh); it is *interrupted* when a process ended
interrupted or died without saying (``kill -9``, OOM); otherwise *finished*. Only
interrupted runs offer their items for resume; live runs are never reused nor superseded.
Run directories written before leases existed count as interrupted when they have no
``metrics_summary.json``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

try:  # advisory file locks (POSIX); elsewhere liveness falls back to pid and heartbeat
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None  # type: ignore[assignment]

from pytest_llmeval import _json as strict_json

SUMMARY = "metrics_summary.json"
SUPERSEDED = "superseded_by.txt"
CONFIG = "eval_config.json"
LOG = "eval.log"
MARKDOWN = "summary.md"

PROCESSES = "processes"
MERGE_LOCK = ".merge.lock"

# Fields of an item line that vary between identical runs.
TIMING_FIELDS = ("seconds",)

# A lease's heartbeat is rewritten this often; seen from another host, a run whose
# heartbeat is older than STALE_AFTER seconds is taken for dead.
HEARTBEAT_SECONDS = 30.0
STALE_AFTER = 300.0


# An interrupted run's results that were computed ahead of their items (kept for resume).
AHEAD_SUFFIX = "_ahead.jsonl"


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


class RunLease:
    """This process's claim on a run directory (see the module docstring): the lock is
    held from :meth:`acquire` to :meth:`release`; a daemon thread rewrites the heartbeat."""

    def __init__(self, run: Path, args: list[str] | None = None) -> None:
        self.run = run
        self.host = socket.gethostname()
        self.pid = os.getpid()
        folder = run / PROCESSES
        stem = f"{_slug(self.host)}-{self.pid}"
        self.lock_path = folder / f"{stem}.lock"
        self.status_path = folder / f"{stem}.json"
        self.info: dict[str, Any] = {
            "pid": self.pid,
            "host": self.host,
            "started": _now(),
            "heartbeat": _now(),
            "status": "running",
            "reason": None,
            "args": list(args or []),
        }
        self._lock: IO[str] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> None:
        self.status_path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = self.lock_path.open("w", encoding="utf-8")
        if fcntl is not None:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._write()
        self._thread = threading.Thread(target=self._beat, name="llmeval-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            self.info["heartbeat"] = _now()
            with contextlib.suppress(OSError):
                self._write()

    def _write(self) -> None:
        write_json_atomic(self.status_path, self.info)

    def release(self, status: str, reason: str | None = None) -> None:
        """Record how this process ended (``finished`` or ``interrupted``) and let go."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.info.update(status=status, reason=reason, heartbeat=_now(), ended=_now())
        with contextlib.suppress(OSError):
            self._write()
        if self._lock is not None:
            self._lock.close()  # closing the file releases the flock
            self._lock = None

    @property
    def held(self) -> bool:
        return self._lock is not None


def _now() -> str:
    return _dt.datetime.now().isoformat(timespec="seconds")


def _lock_held(path: Path) -> bool | None:
    """Whether another process holds the flock on ``path`` (None: cannot tell)."""
    if fcntl is None:
        return None
    try:
        with path.open("a", encoding="utf-8") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh, fcntl.LOCK_UN)
            return False
    except OSError:
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _entry_live(status_file: Path, info: Mapping[str, Any], now: float) -> bool:
    """Whether the process behind a lease entry is still running."""
    if info.get("status") != "running":
        return False
    held = _lock_held(status_file.with_suffix(".lock"))
    if held is not None and info.get("host") == socket.gethostname():
        return held  # on this host the lock says it exactly
    if held:
        return True
    if held is None and info.get("host") == socket.gethostname():
        return _pid_alive(int(info.get("pid") or 0))
    try:  # another host: its heartbeat (locks over network file systems are not trusted)
        beat = _dt.datetime.fromisoformat(str(info.get("heartbeat"))).timestamp()
    except ValueError:
        return False
    return now - beat < STALE_AFTER


def run_state(run: Path) -> tuple[str, str | None]:
    """``(state, reason)`` of a run directory: ``live``, ``finished``, ``interrupted`` or
    ``superseded`` (see the module docstring); the reason says why it was interrupted."""
    if (run / SUPERSEDED).exists():
        return "superseded", None
    entries = []
    for status_file in sorted((run / PROCESSES).glob("*.json")):
        try:
            info = json.loads(status_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(info, dict):
            entries.append((status_file, info))
    if not entries:  # a run from before leases: only its summary tells
        if (run / SUMMARY).exists():
            return "finished", None
        return "interrupted", "no metrics_summary.json (a run from before run leases)"
    now = time.time()
    if any(_entry_live(f, info, now) for f, info in entries):
        return "live", None
    # A process that died while running is named first, then one that was interrupted: the
    # same answer whatever the order of the status files (their names hold the pids).
    for _, info in entries:
        if info.get("status") == "running":
            return "interrupted", f"process {info.get('pid')} on {info.get('host')} died"
    for _, info in entries:
        if info.get("status") == "interrupted":
            return "interrupted", str(info.get("reason") or "interrupted")
    return "finished", None


class RunDir:
    """Writes one run directory. Every write is an append or an atomic replace."""

    def __init__(self, path: Path) -> None:
        self.path = path
        (path / "tasks").mkdir(parents=True, exist_ok=True)
        self.lease: RunLease | None = None

    def claim(self, args: list[str] | None = None) -> None:
        """Hold this process's lease on the directory until :meth:`release`."""
        if self.lease is None:
            self.lease = RunLease(self.path, args)
            self.lease.acquire()

    def release(self, status: str, reason: str | None = None) -> None:
        if self.lease is not None and self.lease.held:
            self.lease.release(status, reason)

    @contextlib.contextmanager
    def merge_lock(self) -> Iterator[None]:
        """An exclusive lock on the directory's shared files, for read-merge-write updates
        by several processes writing one run (``--llm-run-dir``)."""
        with (self.path / MERGE_LOCK).open("a", encoding="utf-8") as fh:
            if fcntl is not None:
                fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                if fcntl is not None:
                    fcntl.flock(fh, fcntl.LOCK_UN)

    def append_item(self, task: str, record: Mapping[str, Any], ahead: bool = False) -> None:
        """One item's record, appended to the task's output (``ahead``: to the results
        computed ahead of items that never ran, kept for resume only)."""
        line = strict_json.dumps(record, ensure_ascii=False, sort_keys=True)
        suffix = AHEAD_SUFFIX if ahead else "_output.jsonl"
        with (self.path / "tasks" / f"{_slug(task)}{suffix}").open("a", encoding="utf-8") as fh:
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
    tmp.write_text(strict_json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
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
    output: Path, task: str, resume_key: str
) -> tuple[dict[str, dict[str, Any]], list[Path]]:
    """Finished items of ``task`` with this resume key, from interrupted runs under
    ``output`` (never from live, finished or superseded ones; their reported items and
    those computed ahead of items that never ran); newer runs win. Items that
    failed (``error``) are not offered. Each record gets ``run_dir``, where it came from.

    The caller still compares each record's content digests (``doc_hash``,
    ``prompt_hash``, ``target_hash``) with the item as it is now before reusing it.
    """
    found: dict[str, dict[str, Any]] = {}
    sources: list[Path] = []
    if not output.is_dir():
        return found, sources
    for run in sorted(p for p in output.iterdir() if p.is_dir()):
        if run_state(run)[0] != "interrupted":
            continue
        before = len(found)
        for suffix in (AHEAD_SUFFIX, "_output.jsonl"):
            for record in iter_item_lines(run / "tasks" / f"{_slug(task)}{suffix}"):
                if record.get("resume_key") == resume_key and not record.get("error"):
                    found[str(record["item_id"])] = {**record, "run_dir": str(run)}
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
    """Interrupted runs whose items a finished run reused are not offered for resume again.
    A live run is never marked (its items were not reused: it is running)."""
    for run in sources:
        if run == by or run_state(run)[0] == "live":
            continue
        with contextlib.suppress(OSError):
            (run / SUPERSEDED).write_text(f"{by}\n", encoding="utf-8")
