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
  contamination/            probe reports, flagged items, and each probe's model calls
                            chunk by chunk (requests/, offered to resume)
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

A run's records can be damaged after it ended (a file truncated, ``tasks/`` or the summary
deleted, an artifact half copied): ``metrics_summary.json`` records per task what its
output file held when the summary was written (``records``: the file, its number of lines
and its SHA256), and :func:`run_damage` compares that with the files as they are now. A
summary missing from a run whose process said it ended (its lease, or ``eval.log``'s ``run
finished`` / ``run interrupted`` line: the summary is written before either) is damage
too. The report says *damaged*; ``record compare``, ``diff`` and ``floors`` refuse such a
run (:func:`refuse_damaged`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

try:  # advisory file locks (POSIX); elsewhere liveness falls back to pid and heartbeat
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None  # type: ignore[assignment]

from pytest_llmeval import _json as strict_json
from pytest_llmeval._errors import LlmEvalError
from pytest_llmeval.gate import SummaryLayoutError, summary_tasks

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
OUTPUT_SUFFIX = "_output.jsonl"

# The field of a task's metrics_summary.json entry that says what its output file held.
RECORDS_FIELD = "records"


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
        by several processes writing one run (``run.dir``)."""
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
        suffix = AHEAD_SUFFIX if ahead else OUTPUT_SUFFIX
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
    for record in _json_lines(path):
        if "item_id" in record:
            yield record


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
        for suffix in (AHEAD_SUFFIX, OUTPUT_SUFFIX):
            for record in iter_item_lines(run / "tasks" / f"{_slug(task)}{suffix}"):
                if record.get("resume_key") == resume_key and not record.get("error"):
                    found[str(record["item_id"])] = {**record, "run_dir": str(run)}
        if len(found) > before:
            sources.append(run)
    return found, sources


# A probe's model calls, chunk by chunk (contamination._resume): one file per probe and
# model, ``contamination/requests/<task>-<probe>[-reference].jsonl``.
REQUESTS_DIR = "contamination/requests"


def resumable_chunks(
    output: Path, name: str, key: str
) -> tuple[dict[str, list[dict[str, Any]]], list[Path]]:
    """A probe's computed chunks (digest -> results) with this key, from interrupted runs
    under ``output`` (never from live, finished or superseded ones; newer runs win), and
    the runs they came from. ``name``: the file's name without ``.jsonl``."""
    found: dict[str, list[dict[str, Any]]] = {}
    sources: list[Path] = []
    if not output.is_dir():
        return found, sources
    for run in sorted(p for p in output.iterdir() if p.is_dir()):
        path = run / REQUESTS_DIR / f"{_slug(name)}.jsonl"
        if not path.is_file() or run_state(run)[0] != "interrupted":
            continue
        before = len(found)
        for line in _json_lines(path):
            results = line.get("results")
            if line.get("key") == key and isinstance(line.get("chunk"), str) and results:
                found[line["chunk"]] = results
        if len(found) > before:
            sources.append(run)
    return found, sources


def _json_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The objects of a jsonl file; a torn last line (a crash mid-write) is skipped."""
    try:
        with path.open(encoding="utf-8") as fh:
            for text in fh:
                try:
                    value = json.loads(text)
                except json.JSONDecodeError:
                    continue
                if isinstance(value, dict):
                    yield value
    except OSError:
        return


class RequestChunks:
    """A probe's chunk store (``contamination._resume.ChunkStore``) in a run directory:
    every chunk is appended to ``contamination/requests/<name>.jsonl`` as it is computed
    (or reused, so that a run that is interrupted again still holds all of them), and
    looked up in ``found`` (:func:`resumable_chunks`) before it is computed."""

    def __init__(
        self, run: Path, name: str, key: str, found: Mapping[str, list[dict[str, Any]]]
    ) -> None:
        self.path = run / REQUESTS_DIR / f"{_slug(name)}.jsonl"
        self.key = key
        self.found = dict(found)
        self._written: set[str] = set()

    def get(self, digest: str) -> list[dict[str, Any]] | None:
        return self.found.get(digest)

    def put(self, digest: str, kind: str, results: list[dict[str, Any]]) -> None:
        if digest in self._written:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Plain JSON (not the records' strict writer): a log-probability may be -inf.
        line = json.dumps(
            {"key": self.key, "chunk": digest, "kind": kind, "results": results},
            ensure_ascii=False,
            separators=(",", ":"),
        )
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
        self._written.add(digest)


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


# ---------------------------------------------------------------------------- damage


def output_file(task: str) -> str:
    """A task's output file, relative to the run directory (``tasks/<task>_output.jsonl``)."""
    return f"tasks/{_slug(task)}{OUTPUT_SUFFIX}"


def _file_digest(path: Path) -> tuple[int, str]:
    """(number of lines, SHA256 hex) of a file, read in 1 MiB chunks; OSError when it
    cannot be read."""
    h = hashlib.sha256()
    lines = 0
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
            lines += chunk.count(b"\n")
    return lines, h.hexdigest()


def records_entry(run: Path, task: str) -> dict[str, Any]:
    """What a task's output file holds now, for its ``metrics_summary.json`` entry
    (``records``): ``{"file", "lines", "sha256"}``; a task without a file has 0 lines and
    no digest."""
    rel = output_file(task)
    try:
        lines, digest = _file_digest(run / rel)
    except OSError:
        return {"file": rel, "lines": 0, "sha256": None}
    return {"file": rel, "lines": lines, "sha256": digest}


@dataclass(frozen=True)
class Damage:
    """A record of a run that is missing or does not match what the run recorded."""

    task: str | None  # None: the run as a whole (its summary)
    file: str  # relative to the run directory
    expected: str
    found: str

    def __str__(self) -> str:
        where = f"{self.task}: {self.file}" if self.task else self.file
        return f"{where}: expected {self.expected}, found {self.found}"


def _said_it_ended(run: Path) -> str | None:
    """How a process writing ``run`` said that it ended (and so had written the summary):
    its lease's status, or the ``run finished`` / ``run interrupted`` line of ``eval.log``;
    None when none did (a process killed outright, a run still going)."""
    for status_file in sorted((run / PROCESSES).glob("*.json")):
        try:
            info = json.loads(status_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(info, dict) and info.get("status") in ("finished", "interrupted"):
            return f"{PROCESSES}/{status_file.name} says {info['status']}"
    try:
        with (run / LOG).open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                match = _ENDED_LINE.match(line)
                if match:
                    return f"{LOG} says run {match.group(1)}"
    except OSError:
        pass
    return None


_ENDED_LINE = re.compile(r"^\S+ run (finished|interrupted)(?::|$)")


def _scored_ids(path: Path) -> set[str]:
    ids = set()
    for record in iter_item_lines(path):
        details = record.get("details")
        overflow = isinstance(details, Mapping) and details.get("context_overflow")
        if not record.get("error") and not overflow:
            ids.add(str(record["item_id"]))
    return ids


def _task_damage(run: Path, task: str, entry: Mapping[str, Any]) -> Damage | None:
    no_tasks = "" if (run / "tasks").is_dir() else " (the run has no tasks/ folder)"
    records = entry.get(RECORDS_FIELD)
    if isinstance(records, Mapping):
        rel = str(records.get("file") or output_file(task))
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            rel = output_file(task)
        lines, digest = records.get("lines"), records.get("sha256")
        expected = f"{lines} lines" + (f" (sha256 {str(digest)[:12]}…)" if digest else "")
        try:
            found_lines, found_digest = _file_digest(run / rel)
        except FileNotFoundError:
            return None if not lines else Damage(task, rel, expected, "no file" + no_tasks)
        except OSError as exc:
            return Damage(task, rel, expected, f"an unreadable file ({exc.strerror})")
        if found_digest == digest or (not lines and not digest and not found_lines):
            return None
        return Damage(task, rel, expected, f"{found_lines} lines (sha256 {found_digest[:12]}…)")
    # A summary from before ``records``: the file must hold the items its count scored.
    n = entry.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        return None
    rel = output_file(task)
    expected = f"the {n} scored item(s) metrics_summary.json counts"
    if not (run / rel).is_file():
        return Damage(task, rel, expected, "no file" + no_tasks)
    found = len(_scored_ids(run / rel))
    return None if found >= n else Damage(task, rel, expected, f"{found}")


def run_damage(run: Path) -> list[Damage]:
    """What of ``run``'s records is missing or does not match what the run recorded when
    it ended (see the module docstring); [] for an intact run, for a live run (a process
    still writes it: it is checked once it has ended) and for one killed before it could
    write its summary."""
    run = Path(run)
    if run_state(run)[0] == "live":
        return []
    summary_file = run / SUMMARY
    if not summary_file.is_file():
        said = _said_it_ended(run)
        if said is None:
            return []
        return [Damage(None, SUMMARY, f"the run's summary ({said})", "no file")]
    try:
        summary = json.loads(summary_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return [Damage(None, SUMMARY, "the run's summary", f"an unreadable file ({exc})")]
    if not isinstance(summary, dict):
        return [Damage(None, SUMMARY, "a JSON object", type(summary).__name__)]
    try:
        tasks = summary_tasks(summary)
    except SummaryLayoutError as exc:
        return [Damage(None, SUMMARY, "a summary this version reads", str(exc))]
    damage = []
    for task, entry in sorted(tasks.items()):
        found = _task_damage(run, str(task), entry)
        if found is not None:
            damage.append(found)
    return damage


DAMAGE_FIX = (
    "the records were changed after the run wrote them; restore the run directory from an "
    "intact copy (e.g. the CI artifact) or rerun it"
)


def damage_message(run: Path, damage: list[Damage]) -> str:
    """The message for a damaged run: what is missing or does not match, and the fix."""
    listed = "; ".join(str(d) for d in damage)
    return f"{run}: damaged run record ({listed}): {DAMAGE_FIX}"


def refuse_damaged(run: Path, used_as: str) -> None:
    """Raise ``LlmEvalError`` (:func:`damage_message`) when ``run`` is damaged: a damaged
    run is not used ``used_as`` (a baseline, a floors source, ...)."""
    damage = run_damage(Path(run))
    if damage:
        raise LlmEvalError(f"{damage_message(Path(run), damage)}; it is not used as {used_as}")
