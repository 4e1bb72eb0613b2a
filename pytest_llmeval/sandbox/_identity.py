"""Who a sandboxed program runs as, which interpreter runs it, and how its processes die.

As root, every run gets a user id of its own: a random uid/gid from a reserved range that
has no passwd or group entry and no running process. The program then

- cannot write or delete anything it does not own (plain file permissions);
- cannot signal or ptrace the test process, nor the programs of other runs;
- is counted alone by ``RLIMIT_NPROC`` (which the kernel does not enforce for root);
- can be killed completely afterwards: every process with that uid belongs to the run, so
  ``kill(-1, SIGKILL)`` sent *as that uid* reaches exactly them, even those that left the
  process group with ``setsid``.

If no such uid is available (e.g. a user namespace that maps only 65536 ids), ``nobody`` is
used, without the final kill-by-uid (other software may run as ``nobody``).

Not as root, programs run as the current user; see :mod:`pytest_llmeval.sandbox` for what
protects the rest of the system then.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Per-run uids/gids are drawn from [_ID_BASE, _ID_BASE + _ID_SPAN): far above login and
# system accounts and below 2**31, so that they fit every id-handling API.
_ID_BASE = 1_800_000_000
_ID_SPAN = 1 << 24
_NOBODY = 65534

#: Environment variable naming the interpreter that runs programs (must be Python >= 3.10
#: and readable by the sandbox user).
PYTHON_ENV = "LLMEVAL_SANDBOX_PYTHON"

_PROBE = "import sys, json, math, re, collections; print(*sys.version_info[:2])"
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot run programs on this machine (the message says why)."""


@dataclass(frozen=True)
class SandboxUser:
    """The identity a program runs as."""

    uid: int
    gid: int
    #: switch to uid/gid in the child (the parent is root)
    drop: bool
    #: the uid belongs to this run alone, so every process with it may be killed
    exclusive: bool


def sandbox_user() -> SandboxUser:
    """A fresh identity for one run (see the module docstring)."""
    if os.geteuid() != 0:
        return SandboxUser(os.getuid(), os.getgid(), drop=False, exclusive=False)
    for _ in range(16):
        candidate = _ID_BASE + secrets.randbelow(_ID_SPAN)
        if _id_free(candidate):
            return SandboxUser(candidate, candidate, drop=True, exclusive=True)
    return SandboxUser(_NOBODY, _NOBODY, drop=True, exclusive=False)


def _id_free(candidate: int) -> bool:
    if not (_mapped(candidate, "/proc/self/uid_map") and _mapped(candidate, "/proc/self/gid_map")):
        return False
    import grp
    import pwd

    try:
        pwd.getpwuid(candidate)
        return False
    except KeyError:
        pass
    try:
        grp.getgrgid(candidate)
        return False
    except KeyError:
        pass
    return not user_processes(candidate)


def _mapped(ident: int, map_file: str) -> bool:
    """Whether ``ident`` exists in this process's user namespace (true without namespaces)."""
    try:
        text = Path(map_file).read_text()
    except OSError:
        return True
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 3:
            inside, _outside, count = (int(f) for f in fields)
            if inside <= ident < inside + count:
                return True
    return False


def _proc_files(name: str) -> Iterator[tuple[int, str]]:
    """(pid, content of /proc/<pid>/<name>) for every process still readable."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            yield int(entry), Path("/proc", entry, name).read_text()
        except OSError:
            continue


def user_processes(uid: int) -> list[int]:
    """Live (non-zombie) processes whose real uid is ``uid``, from ``/proc``."""
    found: list[int] = []
    for pid, status in _proc_files("status"):
        real_uid = state = None
        for line in status.splitlines():
            if line.startswith("Uid:"):
                real_uid = int(line.split()[1])
            elif line.startswith("State:"):
                state = line.split()[1]
        if real_uid == uid and state not in ("Z", "X"):
            found.append(pid)
    return found


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``, from ``/proc``."""
    found: list[int] = []
    for pid, stat_line in _proc_files("stat"):
        # "pid (comm) state ppid pgrp ...": comm may contain spaces and parentheses.
        fields = stat_line.rpartition(")")[2].split()
        if len(fields) >= 3 and fields[0] not in ("Z", "X") and fields[2] == str(pgid):
            found.append(pid)
    return found


def count_user_tasks(uid: int) -> int:
    """Threads of all processes of ``uid`` (what ``RLIMIT_NPROC`` counts)."""
    total = 0
    for pid in user_processes(uid):
        try:
            status = Path("/proc", str(pid), "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Threads:"):
                total += int(line.split()[1])
    return total


def kill_user_processes(user: SandboxUser, python: str) -> None:
    """Kill every process of an exclusive sandbox uid (no-op for shared ones).

    ``kill(-1, SIGKILL)`` sent by a process running as that uid reaches every process the uid
    may signal (those whose real or saved uid it is) and nothing else; the kernel walks the
    process list under a lock, so a fork bomb cannot outrun it.
    """
    if not user.exclusive:
        return
    for attempt in range(8):
        if not user_processes(user.uid):
            return
        if attempt:
            time.sleep(0.005 * 2**attempt)  # let SIGKILLed processes finish exiting
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                [python, "-s", "-S", "-c", "import os, signal; os.kill(-1, signal.SIGKILL)"],
                user=user.uid,
                group=user.gid,
                extra_groups=[],
                env={"PATH": _SAFE_PATH},
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=10,
                check=False,
            )


_python_lock = threading.Lock()
_python_cache: dict[bool, str] = {}


def sandbox_python(user: SandboxUser) -> str:
    """The interpreter that runs programs as ``user``.

    Not as root it is ``sys.executable``. As root it must be runnable by an unprivileged
    user, which ``sys.executable`` is not when it lives in, say, a root-only home directory: the
    candidates are ``$LLMEVAL_SANDBOX_PYTHON`` (alone, when set), ``sys.executable`` and its
    base interpreter, then ``pythonX.Y`` and ``python3`` from the system directories; each is
    probed once, as an unprivileged uid, and the first of the same X.Y wins (else the first
    that works at all, Python >= 3.10).
    """
    if not user.drop:
        return sys.executable
    with _python_lock:
        cached = _python_cache.get(True)
        if cached is None:
            cached = _find_python(user)
            _python_cache[True] = cached
        return cached


def _candidates() -> list[str]:
    configured = os.environ.get(PYTHON_ENV)
    if configured:
        return [configured]
    found = [sys.executable, getattr(sys, "_base_executable", ""), os.path.realpath(sys.executable)]
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for folder in _SAFE_PATH.split(":"):
        found.append(os.path.join(folder, version))
    found.append(shutil.which("python3", path=_SAFE_PATH) or "")
    unique: list[str] = []
    for path in found:
        if path and path not in unique:
            unique.append(path)
    return unique


def _find_python(user: SandboxUser) -> str:
    tried: list[str] = []
    fallback: str | None = None
    for path in _candidates():
        version = _probe(path, user)
        tried.append(f"{path}: {version or 'not runnable'}")
        if version is None:
            continue
        if version == sys.version_info[:2]:
            return path
        if version >= (3, 10) and fallback is None:
            fallback = path
    if fallback is not None:
        return fallback
    raise SandboxUnavailable(
        "no Python interpreter is runnable by an unprivileged user (tried "
        + "; ".join(tried)
        + f"); set {PYTHON_ENV} to one that is"
    )


def _probe(path: str, user: SandboxUser) -> tuple[int, int] | None:
    try:
        done = subprocess.run(
            [path, "-s", "-S", "-c", _PROBE],
            user=user.uid,
            group=user.gid,
            extra_groups=[],
            env={"PATH": _SAFE_PATH},
            cwd="/",
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    fields = done.stdout.split()
    if done.returncode != 0 or len(fields) != 2 or not all(f.isdigit() for f in fields):
        return None
    return int(fields[0]), int(fields[1])


def temp_root(user: SandboxUser) -> str | None:
    """Where run directories go: the usual temporary directory, or ``/tmp`` when a dropped
    user could not reach it (every ancestor must be searchable by others)."""
    default = tempfile.gettempdir()
    if not user.drop:
        return default
    path = Path(default).resolve()
    for folder in (path, *path.parents):
        try:
            mode = folder.stat().st_mode
        except OSError:
            return "/tmp"
        if not mode & stat.S_IXOTH:
            return "/tmp"
    return default
