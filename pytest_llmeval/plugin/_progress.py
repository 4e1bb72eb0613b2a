"""Live progress of each task while its items compute: items done / total, items/s,
time left (``--llm-progress=auto|on|off``, ini ``llm_progress``; display only).

The first item of a task computes a whole chunk of items (a batch; a generative task's
whole selection under continuous batching), so pytest's own dots stand still for the
length of that chunk. The backends report how far each call has got
(``model.report_progress``: after each log-likelihood batch and each finished generation
row); the evaluator turns that into items of its task (``compute.ProgressBoard``) and hands
the board to a sink:

- one process: :class:`TerminalDisplay` writes to the terminal, with pytest's capture
  suspended for the write (the item call runs under capture), so the progress is never
  part of an item's captured output, of JUnit XML or of pytest-html;
- an xdist worker: ``compute.FileSink`` writes a small JSON file per worker into a folder
  the controller made (its path travels in ``workerinput``); the controller's
  :class:`ProgressPoller` thread reads the files and draws on the controller's
  :class:`TerminalDisplay` (a worker's own output never reaches the controller's
  terminal). See docs/ARCHITECTURE.md, "Progress".

How it is drawn: on a terminal, one status line in place (``\\r``, erase to the end of
the line); before pytest writes (a dot, a verbose line, at the end the summary) the line
goes and the text pytest had on it comes back, so pytest's output is what it would have
been. Elsewhere (a CI log, a pipe) a plain line per task when it crosses a tenth of its
items or 30 s after its last line, and once when it ends; under ``auto`` only for a task
that has run 30 s (short tasks stay silent, long ones show in CI logs). ``-q`` shows none
under ``auto``; ``on`` shows it under ``-q`` too and from a task's first chunk.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval.compute import (
    FileSink,
    ProgressBoard,
    TaskProgress,
    read_progress_files,
)

#: The key of ``workerinput`` that holds the folder of the workers' progress files.
WORKER_KEY = "llmeval_progress_dir"
#: Plain lines: one per task each time it crosses this share of its items...
PLAIN_STEP = 0.1
#: ... or this many seconds after its last line; and under ``auto``, not before a task
#: has run this long.
PLAIN_SECONDS = 30.0
#: A terminal's in-place line is redrawn at most this often (the last state always).
REDRAW_SECONDS = 0.2
#: The controller reads the workers' files this often.
POLL_SECONDS = 0.25
PREFIX = "[llmeval progress]"


# --------------------------------------------------------------------------- terminal


class TerminalDisplay:
    """Draws task progress on pytest's terminal, in place (a tty) or as plain lines."""

    def __init__(self, config: pytest.Config, *, in_place: bool, wait: float) -> None:
        self.config = config
        self.in_place = in_place
        self.wait = wait  # plain lines: seconds a task runs before its first line
        self.lock = threading.RLock()
        self._drawn = False  # an in-place line is on the screen
        self._hidden = 0  # pytest is writing: draw nothing
        self._last_draw = 0.0
        self._latest: list[TaskProgress] = []
        self._plain: dict[str, tuple[int, float]] = {}  # task -> (tenths shown, when)
        self._ended: set[str] = set()

    def _writer(self) -> Any | None:
        """pytest's terminal writer (its file, and the text it has on the current line)."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        return getattr(reporter, "_tw", None)

    def show(self, tasks: list[TaskProgress], important: bool = False) -> None:
        with self.lock:
            self._latest = [TaskProgress.from_dict(t.to_dict()) for t in tasks]
            if self.in_place:
                now = time.monotonic()
                if important or now - self._last_draw >= REDRAW_SECONDS:
                    self._draw()
            else:
                self._plain_lines()

    # in place ---------------------------------------------------------------

    def _status(self, width: int) -> str:
        active = [t for t in self._latest if not t.finished]
        text = f"{PREFIX} " + " | ".join(t.line() for t in active) if active else ""
        return text[: max(0, width - 1)]

    def _draw(self) -> None:
        writer = self._writer()
        if writer is None or self._hidden:
            return
        status = self._status(writer.fullwidth)
        if not status and not self._drawn:
            return
        with self._uncaptured():
            if status:
                writer._file.write("\r" + status + "\x1b[K")
                self._drawn = True
            else:
                self._restore(writer)
            writer._file.flush()
        self._last_draw = time.monotonic()

    def _restore(self, writer: Any) -> None:
        """Take the status line away and put back what pytest had written on that line
        (the terminal writer still counts it as the current line)."""
        writer._file.write("\r\x1b[K" + writer._current_line)
        self._drawn = False

    @contextlib.contextmanager
    def pytest_writes(self, redraw: bool = False) -> Iterator[None]:
        """Around a hook in which pytest writes to the terminal: no status line meanwhile;
        with ``redraw`` it comes back after (while a task is still computing; once per
        item, at its last hook, not after each of its phases)."""
        with self.lock:
            writer = self._writer()
            if self._drawn and writer is not None:
                with self._uncaptured():
                    self._restore(writer)
                    writer._file.flush()
            self._hidden += 1
            try:
                yield
            finally:
                self._hidden -= 1
                if redraw and self.in_place and not self._hidden:
                    self._draw()

    # plain lines -------------------------------------------------------------

    def _plain_lines(self) -> None:
        writer = self._writer()
        if writer is None:
            return
        lines = []
        now = time.monotonic()
        for t in self._latest:
            if t.task in self._ended:
                continue
            tenths = math.floor(t.whole / t.total / PLAIN_STEP + 1e-9)
            shown = self._plain.get(t.task)
            if shown is None:
                if t.elapsed < self.wait and not t.finished:
                    continue
                due = True
            else:
                due = tenths > shown[0] or now - shown[1] >= PLAIN_SECONDS or t.finished
            if t.finished:
                if shown is None and self.wait > 0:
                    self._ended.add(t.task)  # auto: a short task stays silent
                    continue
                self._ended.add(t.task)
            if due:
                self._plain[t.task] = (tenths, now)
                lines.append(f"{PREFIX} {t.line()}")
        if lines:
            current = writer._current_line
            text = ("\n" if current else "") + "\n".join(lines) + "\n" + current
            with self._uncaptured():
                writer._file.write(text)
                writer._file.flush()

    # ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _uncaptured(self) -> Iterator[None]:
        """pytest's capture suspended (fd and sys level, and a capture fixture's), in the
        main thread only: the item call runs under capture and the progress must reach
        the terminal, not the item's captured output."""
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        if capman is None or threading.current_thread() is not threading.main_thread():
            yield
            return
        with capman.global_and_fixture_disabled():
            yield

    def close(self) -> None:
        """The run is over: the in-place line goes (the summary follows)."""
        with self.lock:
            writer = self._writer()
            if self._drawn and writer is not None:
                with self._uncaptured():
                    self._restore(writer)
                    writer._file.flush()
            self._hidden += 1  # nothing more


class _AroundPytestWrites:
    """Hook wrappers around the hooks in which pytest's terminal reporter writes during
    the run (the file name or node id, the dot or outcome, the percentage)."""

    def __init__(self, display: TerminalDisplay) -> None:
        self.display = display

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logstart(self) -> Iterator[None]:
        with self.display.pytest_writes():
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self) -> Iterator[None]:
        with self.display.pytest_writes():
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logfinish(self) -> Iterator[None]:
        with self.display.pytest_writes(redraw=True):
            return (yield)


# --------------------------------------------------------------------------- xdist


class ProgressPoller:
    """The controller's side under xdist: a thread that reads the workers' progress files
    and draws them (the controller's main thread waits on xdist's event queue, and a
    worker computing a chunk sends nothing for as long as the chunk runs)."""

    def __init__(self, folder: Path, display: TerminalDisplay) -> None:
        self.folder = folder
        self.display = display
        self._stop = threading.Event()
        self._seen: dict[str, float] = {}
        self._thread = threading.Thread(target=self._run, name="llmeval-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _once(self) -> None:
        tasks = read_progress_files(self.folder)
        now = {t.task: t.done for t in tasks}
        if now == self._seen:
            return
        important = any(
            t.task not in self._seen or (t.finished and self._seen[t.task] < t.total) for t in tasks
        )
        self._seen = now
        self.display.show(tasks, important)

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            with contextlib.suppress(Exception):
                self._once()

    def stop(self) -> None:
        """The run is over: one last read (a task's end), then no more."""
        self._stop.set()
        self._thread.join(timeout=5)
        with contextlib.suppress(Exception):
            self._once()


# --------------------------------------------------------------------------- wiring


def wanted(config: pytest.Config, mode: str) -> bool:
    """Whether this run shows progress: ``off`` never; ``auto`` not under ``-q``; ``on``
    always (without pytest's terminal reporter, ``-p no:terminal``, nothing is drawn)."""
    if mode == "off":
        return False
    return mode == "on" or config.get_verbosity() >= 0


def _is_terminal() -> bool:
    """Whether standard output is a terminal, asked at configure time: during an item
    call pytest's capture has replaced file descriptor 1 (``isatty`` would say no)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _terminal_display(config: pytest.Config, mode: str, in_place: bool) -> TerminalDisplay:
    display = TerminalDisplay(
        config, in_place=in_place, wait=PLAIN_SECONDS if mode == "auto" else 0.0
    )
    config.pluginmanager.register(_AroundPytestWrites(display), "llmeval-progress-writes")
    return display


class ControllerProgress:
    """The xdist controller's plugin: makes the folder of the workers' progress files,
    names it to each worker, reads it while the run goes on, removes it at the end."""

    def __init__(self, config: pytest.Config, mode: str) -> None:
        self.config = config
        self.mode = mode
        self.in_place = _is_terminal()
        self.folder: Path | None = None
        self.poller: ProgressPoller | None = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="llmeval-progress-"))
            display = _terminal_display(self.config, self.mode, self.in_place)
            self.poller = ProgressPoller(self.folder, display)
            self.poller.start()
        node.workerinput[WORKER_KEY] = str(self.folder)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        if self.poller is not None:
            self.poller.stop()
            self.poller.display.close()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def install(config: pytest.Config, mode: str) -> ProgressBoard | None:
    """Wire progress for this process: the board the evaluator feeds (None: nothing to
    show here; on the xdist controller, which computes nothing, its plugin instead)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:  # a worker: a file for the controller, if it reads one
        folder = workerinput.get(WORKER_KEY)
        worker = str(workerinput.get("workerid", "gw"))
        return ProgressBoard(FileSink(Path(folder), worker)) if folder else None
    if not wanted(config, mode):
        return None
    if config.pluginmanager.has_plugin("xdist") and _xdist_workers(config):
        config.pluginmanager.register(ControllerProgress(config, mode), "llmeval-progress")
        return None
    return _LazyBoard(config, mode)


def _xdist_workers(config: pytest.Config) -> bool:
    """Whether this run starts xdist workers (``-n``/``--numprocesses`` above 0, ``--tx``)."""
    numprocesses = getattr(config.option, "numprocesses", None)
    return bool(numprocesses) or bool(getattr(config.option, "tx", None))


class _LazyBoard(ProgressBoard):
    """One process: the display is made at the first task's start (the terminal reporter
    does not exist yet when the session is made, at configure time)."""

    def __init__(self, config: pytest.Config, mode: str) -> None:
        self._config = config
        self._mode = mode
        self._display: TerminalDisplay | None = None
        self._in_place = _is_terminal()
        super().__init__(self._show)

    def _show(self, tasks: list[TaskProgress], important: bool) -> None:
        if self._display is None:
            self._display = _terminal_display(self._config, self._mode, self._in_place)
            self._config.pluginmanager.register(_CloseAtFinish(self._display))
        self._display.show(tasks, important)


class _CloseAtFinish:
    def __init__(self, display: TerminalDisplay) -> None:
        self.display = display

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        self.display.close()
