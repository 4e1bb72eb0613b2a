"""The parent side of a sandboxed run: set up, spawn, wait, kill, collect, clean up."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_llmeval.sandbox._identity import (
    SandboxUnavailable,
    SandboxUser,
    count_user_tasks,
    group_members,
    kill_user_processes,
    sandbox_python,
    sandbox_user,
    temp_root,
)
from pytest_llmeval.sandbox._result import ExecutionResult, Limits, Status

_HERE = Path(__file__).resolve().parent
_DONE_MARKER = "# sandbox:done-line"
_EXIT_SANDBOX_ERROR = 125
_RESULT_LIMIT = 1 << 16
_MB = 1 << 20
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_EFBIG = "[Errno 27]"
#: What a refusal for want of filesystem isolation tells the user to do about it.
HOW_TO_ALLOW = (
    "run as root or where unprivileged user namespaces are enabled (sysctl "
    "user.max_user_namespaces > 0), or accept the risk with --llm-set "
    "sandbox.allow_unisolated=true "
    "(pytest) / pytest_llmeval.sandbox.allow_unisolated()"
)
_policy = {"allow_unisolated": False}


def allow_unisolated(allowed: bool = True) -> None:
    """Let programs run where the kernel cannot give them a filesystem view of their own
    (no root and no unprivileged user namespaces): then only file permissions and the
    in-process guard, which cannot see file access done in C, keep them from writing outside
    their folder. Off by default: such runs end with status ``error`` and say why."""
    _policy["allow_unisolated"] = allowed


def run_program(
    code: str,
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 1024,
    max_processes: int = 32,
    max_file_mb: int = 16,
    max_output_bytes: int = 64_000,
) -> ExecutionResult:
    """Run ``code`` as a Python program in the sandbox and report how it ended.

    ``passed`` means exit status 0 (and no uncaught exception). The program runs in a fresh
    temporary directory (its ``HOME`` and ``TMPDIR`` too, all deleted afterwards) with a
    minimal environment and ``/dev/null`` as stdin, under the limits given: wall clock
    (counted from the start of the sandbox's own interpreter, about 0.1 s), address space,
    processes, file size; the captured stdout and stderr are cut to ``max_output_bytes``
    each. It runs in a session of its own that is killed as a whole when it ends. Only the
    standard library is importable. Invalid limits raise ``ValueError``; a sandbox that
    cannot run at all gives status ``error``. See :mod:`pytest_llmeval.sandbox` for what
    contains the program.
    """
    limits = Limits(timeout_s, memory_mb, max_processes, max_file_mb, max_output_bytes)
    return execute([("program.py", code)], limits)


@functools.cache
def _script(name: str) -> str:
    return (_HERE / name).read_text(encoding="utf-8")


@functools.cache
def _done_line() -> int:
    lines = _script("_bootstrap.py").splitlines()
    found = [number for number, line in enumerate(lines, start=1) if line.endswith(_DONE_MARKER)]
    if len(found) != 1:
        raise SandboxUnavailable("the bootstrap's done line is not marked exactly once")
    return found[0]


@dataclass
class _Report:
    """The result channel, parsed. Lines up to ``started`` come from the launcher and the
    bootstrap before the program ran; later lines may have been written by the program."""

    isolation: tuple[str, ...] = ()
    sandbox_error: str | None = None
    started: bool = False
    completed: bool = False
    outcome: str | None = None  # the last exit/exception/memory/violation line
    refused: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str, token: str) -> _Report:
        report = cls()
        for line in text.splitlines():
            kind, _, rest = line.partition(" ")
            if not report.started:
                if kind == "isolation":
                    report.isolation = tuple(item for item in rest.split(",") if item)
                elif kind == "sandbox-error":
                    report.sandbox_error = rest
                elif kind == "started":
                    report.started = True
            elif kind == "ok" and secrets.compare_digest(rest, token):
                report.completed = True
            elif kind in ("exit", "exception", "memory", "violation"):
                report.outcome = line
            elif kind == "refused" and len(report.refused) < 8:
                report.refused.append(rest)
        return report

    def outcome_kind(self) -> str | None:
        return self.outcome.partition(" ")[0] if self.outcome else None

    def outcome_text(self) -> str:
        return self.outcome.partition(" ")[2] if self.outcome else ""


def execute(
    units: Sequence[tuple[str, str]],
    limits: Limits,
    *,
    check: bool = False,
    guard: bool = True,
) -> ExecutionResult:
    """Run program ``units`` (``(filename, source)``, executed in order in one namespace).

    ``check``: passing also requires that the last unit returned normally and that the
    builtins were left alone (see :func:`check_completion`). ``guard=False`` leaves out the
    in-process guard, to test the kernel-level layers on their own; never for real use.
    """
    started = time.monotonic()
    try:
        user = sandbox_user()
        python = sandbox_python(user)
        done_line = _done_line()
        base = Path(tempfile.mkdtemp(prefix="llmeval-sandbox-", dir=temp_root(user)))
    except (SandboxUnavailable, OSError) as exc:
        return _error(f"sandbox unavailable: {exc}", started)
    token = secrets.token_hex(16)
    run = _Run(base, user, python)
    try:
        workdir, scratch = _make_run_dir(run, units)
        channels = _open_channels(run, token)
        bootstrap_config = {
            "token_fd": 3,
            "program_fd": 4,
            "result_fd": 5,
            "guard": guard,
            "check": check,
            "done_line": done_line,
            "workdir": str(workdir),
        }
        config = _launcher_config(run, channels, workdir, scratch, limits, guard, bootstrap_config)
        returncode, exited, seconds = _spawn_and_wait(run, channels, config, limits)
        return _collect(run, token, returncode, exited, seconds, limits, check)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return _error(f"sandbox failure: {type(exc).__name__}: {exc}", started)
    finally:
        _clean_up(run)


@dataclass
class _Run:
    """One run's folder and identity, and what the cleanup must release whichever step
    failed: the descriptors still open, the launcher process, whether it was reaped."""

    base: Path
    user: SandboxUser
    python: str
    opened: list[int] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    reaped: bool = False

    def open_file(self, name: str, flags: int) -> int:
        fd = os.open(self.base / name, flags | os.O_CLOEXEC, 0o600)
        self.opened.append(fd)
        return fd


@dataclass(frozen=True)
class _Channels:
    """The run's descriptors: the token pipe's read end, the program, the result channel
    (passed to the launcher) and the files that take its stdout and stderr."""

    token_read: int
    program: int
    result: int
    stdout: int
    stderr: int


def _make_run_dir(run: _Run, units: Sequence[tuple[str, str]]) -> tuple[Path, Path]:
    """The working directory (the program's ``HOME``), its ``tmp`` (``TMPDIR``), both the
    sandbox user's when it is dropped, and ``program.json`` beside them."""
    workdir = run.base / "work"
    scratch = workdir / "tmp"
    workdir.mkdir(mode=0o700)
    scratch.mkdir(mode=0o700)
    if run.user.drop:
        run.base.chmod(0o711)
        for folder in (workdir, scratch):
            os.chown(folder, run.user.uid, run.user.gid)
    (run.base / "program.json").write_text(json.dumps([list(unit) for unit in units]))
    return workdir, scratch


def _open_channels(run: _Run, token: str) -> _Channels:
    """Open the run's files and write the token into a pipe (whose write end is closed)."""
    program_fd = run.open_file("program.json", os.O_RDONLY)
    write_flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    result_fd = run.open_file("result", write_flags)
    stdout_fd = run.open_file("stdout", write_flags)
    stderr_fd = run.open_file("stderr", write_flags)
    token_read, token_write = os.pipe()
    run.opened.append(token_read)
    try:
        os.write(token_write, token.encode("ascii"))
    finally:
        os.close(token_write)
    return _Channels(token_read, program_fd, result_fd, stdout_fd, stderr_fd)


def _launcher_config(
    run: _Run,
    channels: _Channels,
    workdir: Path,
    scratch: Path,
    limits: Limits,
    guard: bool,
    bootstrap_config: dict[str, Any],
) -> dict[str, Any]:
    """What the launcher (``_launcher.py``) is told: descriptors, identity, limits, the
    filesystem view, the program's environment and the bootstrap with its own config."""
    env = {
        "PATH": _SAFE_PATH,
        "HOME": str(workdir),
        "TMPDIR": str(scratch),
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONUTF8": "1",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return {
        "fds": [channels.token_read, channels.program, channels.result],
        "drop": run.user.drop,
        "uid": run.user.uid,
        "gid": run.user.gid,
        "limits": _rlimits(limits, run.user),
        "guard": guard,
        "filesystem": {
            "tmpfs_mb": max(16, 4 * limits.max_file_mb),
            "required": not _policy["allow_unisolated"],
            "how_to_allow": HOW_TO_ALLOW,
        },
        "parent": os.getpid(),
        "workdir": str(workdir),
        "python": run.python,
        "bootstrap": _script("_bootstrap.py"),
        "bootstrap_config": json.dumps(bootstrap_config),
        "env": env,
    }


def _spawn_and_wait(
    run: _Run, channels: _Channels, config: dict[str, Any], limits: Limits
) -> tuple[int, bool, float]:
    """Start the launcher in a session of its own, wait for it (up to the time limit), kill
    what is left of the run; its return code, whether it exited in time, and the seconds."""
    spawned = time.monotonic()
    passed = (channels.token_read, channels.program, channels.result)
    run.proc = proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _script("_launcher.py"), json.dumps(config)],
        stdin=subprocess.DEVNULL,
        stdout=channels.stdout,
        stderr=channels.stderr,
        pass_fds=passed,
        start_new_session=True,
        env={"PATH": _SAFE_PATH},
        cwd=run.base,
    )
    for fd in run.opened:
        os.close(fd)
    run.opened.clear()
    exited = _wait_for_exit(proc.pid, limits.timeout_s)
    seconds = time.monotonic() - spawned
    # The leader is not reaped yet (a zombie holds its pid), so its group id is still
    # ours to kill: background children die with it.
    _kill_group(proc.pid)
    returncode = proc.wait()
    _await_group_death(proc.pid)
    kill_user_processes(run.user, run.python)
    run.reaped = True
    return returncode, exited, seconds


def _collect(
    run: _Run,
    token: str,
    returncode: int,
    exited: bool,
    seconds: float,
    limits: Limits,
    check: bool,
) -> ExecutionResult:
    """Read the outputs and the result channel and judge the run."""
    assert run.proc is not None
    base = run.base
    stdout, stdout_cut = _read_head(base / "stdout", limits.max_output_bytes)
    stderr, stderr_cut = _read_head(base / "stderr", limits.max_output_bytes)
    report = _Report.parse(_read_head(base / "result", _RESULT_LIMIT)[0], token)
    status, reason = _classify(report, returncode, timed_out=not exited, check=check, limits=limits)
    if status == "error" and not reason.strip():
        reason = _last_line(_tail(base / "stderr")) or "the sandbox did not start"
    if status == "failed" and not reason:
        reason = _last_line(_tail(base / "stderr"))
    return ExecutionResult(
        status=status,
        returncode=returncode,
        stdout=stdout,
        stderr=stderr,
        seconds=round(seconds, 4),
        reason=reason,
        stdout_truncated=stdout_cut,
        stderr_truncated=stderr_cut,
        isolation=report.isolation,
        pid=run.proc.pid,
        uid=run.user.uid,
    )


def _clean_up(run: _Run) -> None:
    """Close what is still open, kill a launcher still running and, if the run was not
    reaped, the sandbox user's processes; remove the run's folder."""
    for fd in run.opened:
        with contextlib.suppress(OSError):
            os.close(fd)
    if run.proc is not None and run.proc.returncode is None:
        _kill_group(run.proc.pid)
        with contextlib.suppress(subprocess.SubprocessError):
            run.proc.wait(timeout=10)
    if not run.reaped:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            kill_user_processes(run.user, run.python)
    _remove_tree(run.base)


def _rlimits(limits: Limits, user: SandboxUser) -> dict[str, list[int]]:
    nproc = limits.max_processes
    if not user.exclusive:
        # RLIMIT_NPROC counts every thread of the uid, not just the run's.
        nproc += count_user_tasks(user.uid)
    if not user.drop:
        nproc += 2  # the launcher and the run's init (PID 1 of its namespace) share the uid
    memory = limits.memory_mb * _MB
    file_size = limits.max_file_mb * _MB
    return {
        "as": [memory, memory],
        "cpu": [limits.cpu_seconds, limits.cpu_seconds + 1],
        "fsize": [file_size, file_size],
        "nofile": [256, 256],
        "nproc": [nproc, nproc],
        "core": [0, 0],
    }


def _classify(
    report: _Report, returncode: int, *, timed_out: bool, check: bool, limits: Limits
) -> tuple[Status, str]:
    refused = f"; sandbox refused {report.refused[0]}" if report.refused else ""
    if report.sandbox_error is not None:
        return "error", report.sandbox_error
    if not report.started:
        if timed_out:
            return "error", f"the sandbox did not start within {limits.timeout_s:g} s"
        return "error", ""
    if timed_out:
        return "timeout", f"time limit of {limits.timeout_s:g} s exceeded"
    kind, text = report.outcome_kind(), report.outcome_text()
    if returncode < 0:
        number = -returncode
        if number == signal.SIGXCPU:
            return "timeout", f"CPU time limit of {limits.cpu_seconds} s exceeded"
        if kind == "memory":
            return "memory", text
        name = _signal_name(number)
        if number == signal.SIGXFSZ:
            return "killed", f"killed by {name} (file size limit of {limits.max_file_mb} MB)"
        hint = " (out of memory?)" if number in (signal.SIGKILL, signal.SIGSEGV) else ""
        return "killed", f"killed by {name}{hint}{refused}"
    if kind == "memory":
        return "memory", f"{text} (memory limit of {limits.memory_mb} MB)"
    if kind in ("exception", "violation"):
        if _EFBIG in text:
            text += f" (file size limit of {limits.max_file_mb} MB)"
        return "failed", text + refused
    if check:
        if report.completed and returncode == 0:
            return "passed", ""
        if report.completed:
            return "failed", f"check() returned, then the program exited with status {returncode}"
        how = f"raised SystemExit({text})" if kind == "exit" else f"exited with status {returncode}"
        return "failed", f"the program {how} before check() returned{refused}"
    if returncode == 0:
        return "passed", ""
    return "failed", f"exit status {returncode}{refused}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _wait_for_exit(pid: int, timeout: float) -> bool:
    """Wait until ``pid`` exits, without reaping it; ``False`` on timeout."""
    deadline = time.monotonic() + timeout
    pidfd: int | None = None
    with contextlib.suppress(AttributeError, OSError):
        pidfd = os.pidfd_open(pid)
    try:
        if pidfd is not None:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                if poller.poll(max(1, int(remaining * 1000))):
                    return True
        delay = 0.001
        while True:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.05)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _await_group_death(pgid: int, timeout: float = 2.0) -> None:
    """Return once no live process is left in the group (SIGKILL is asynchronous; the dead
    may stay zombies until ``init`` reaps them), killing again while there are some."""
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        if not group_members(pgid) or time.monotonic() >= deadline:
            return
        _kill_group(pgid)
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _read_head(path: Path, limit: int) -> tuple[str, bool]:
    try:
        with path.open("rb") as handle:
            data = handle.read(limit)
            size = os.fstat(handle.fileno()).st_size
    except OSError:
        return "", False
    return data.decode("utf-8", "replace"), size > limit


def _tail(path: Path, size: int = 4096) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - size))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _error(reason: str, started: float) -> ExecutionResult:
    return ExecutionResult(
        status="error",
        returncode=None,
        stdout="",
        stderr="",
        seconds=round(time.monotonic() - started, 4),
        reason=reason,
    )


def _remove_tree(path: Path) -> None:
    """Delete a run directory, also when the program made parts of it unreadable."""

    def retry(function: Callable[..., Any], name: str, *_: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name), 0o700)
            if os.path.isdir(name) and not os.path.islink(name):
                os.chmod(name, 0o700)
            function(name)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry)
    else:
        shutil.rmtree(path, onerror=retry)
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)
