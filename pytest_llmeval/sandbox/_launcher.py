"""The launcher: the first program of a sandboxed run (``python -I -S -c <this file>``).

It runs with the test process's interpreter and privileges in a fresh session, and turns
itself into the sandboxed program:

1. moves the inherited descriptors to fixed numbers (3: token pipe, 4: program, 5: result);
2. leaves the network, IPC, mount and PID namespaces (``unshare``; not as root, inside a new
   user namespace that maps only the current uid and gid to themselves), so that the
   program sees only a loopback interface that is down and only its own processes;
3. forks the PID namespace's init (:func:`_init`), which forks the program and waits for it,
   and waits for init itself (:func:`_relay`), ending as the program ended (its status, or
   its signal); when init exits, the kernel kills whatever is left in the namespace. Where
   no PID namespace could be had, the launcher becomes the program itself;
4. in the program's process (:func:`_become_program`): mounts the namespace's own
   ``/proc`` and gives the run a filesystem view of its own (:func:`_isolate_filesystem`):
   every mount read-only, private ``tmpfs`` over the system's temporary folders and
   ``/dev/shm``, the run's working directory the only writable place. Where the kernel
   refuses this, the run stops with a ``sandbox-error`` that says so, unless the caller
   allowed unisolated runs;
5. sets the resource limits (soft = hard, so the program cannot raise them);
6. as root: drops to the run's own uid/gid with no supplementary groups;
7. sets ``PR_SET_NO_NEW_PRIVS`` (no setuid binary can give privileges back) and
   ``PR_SET_PDEATHSIG`` (launcher, init and program die with the test process);
8. writes ``isolation ...`` to the result channel and ``execve``\\s the sandbox interpreter
   with the bootstrap and a minimal environment.

Any failure is reported as ``sandbox-error ...`` with exit status 125. This file is never
imported by the test process (it is run from its source text).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import resource
import signal
import sys
from typing import Any

TOKEN_FD, PROGRAM_FD, RESULT_FD = 3, 4, 5
EXIT_SANDBOX_ERROR = 125

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_RELATIME = 0x200000
MS_STRICTATIME = 0x1000000
# Per-mount flags shown in /proc/self/mountinfo that a bind remount must keep (a remount
# clears the ones it does not name; inside a user namespace, clearing a locked one fails).
_KEPT_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
    "strictatime": MS_STRICTATIME,
}
#: The folders that get a private tmpfs (the usual temporary folders and POSIX shared memory).
TEMP_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm", "/run/shm", "/run/lock")

_LIMITS = {
    "as": resource.RLIMIT_AS,
    "cpu": resource.RLIMIT_CPU,
    "fsize": resource.RLIMIT_FSIZE,
    "nofile": resource.RLIMIT_NOFILE,
    "nproc": resource.RLIMIT_NPROC,
    "core": resource.RLIMIT_CORE,
}


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _unshare(flags: int) -> bool:
    native = getattr(os, "unshare", None)  # Python >= 3.12
    try:
        if native is not None:
            native(flags)
            return True
        return bool(_libc().unshare(flags) == 0)
    except (OSError, AttributeError):
        return False


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    libc = _libc()
    if libc.mount(_bytes(source), _bytes(target), _bytes(fstype), flags, _bytes(data)) != 0:
        import ctypes

        number = ctypes.get_errno()
        raise OSError(number, f"mount {target}: {os.strerror(number)}")


def _mountinfo() -> list[tuple[str, int]]:
    """(mount point, flags to keep) of every mount, parents before children."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as handle:
        for line in handle:
            fields = line.split()
            if len(fields) < 6:
                continue
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            flags = 0
            for option in fields[5].split(","):
                flags |= _KEPT_FLAGS.get(option, 0)
            found.append((point, flags))
    return found


def _enter_namespaces(as_root: bool) -> list[str]:
    """New network, IPC and mount namespaces; not as root, inside a new user namespace.

    Returns the isolation layers gained; raises ``OSError`` when the mount namespace (the
    one the filesystem view needs) cannot be had."""
    if as_root:
        layers = []
        if _unshare(CLONE_NEWNET | CLONE_NEWIPC):
            layers += ["netns", "ipcns"]
        elif _unshare(CLONE_NEWNET):
            layers.append("netns")
        if not _unshare(CLONE_NEWNS):
            raise OSError("the kernel refused a new mount namespace (unshare CLONE_NEWNS)")
        layers.append("mountns")
        if _unshare(CLONE_NEWPID):  # for the children: the launcher forks the run's init
            layers.append("pidns")
        return layers
    uid, gid = os.getuid(), os.getgid()
    if not _unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC):
        raise OSError(
            "the kernel refused an unprivileged user namespace (unshare CLONE_NEWUSER; see "
            "/proc/sys/user/max_user_namespaces and kernel.unprivileged_userns_clone)"
        )
    # Only the current ids exist inside: the program keeps its own uid, without privileges
    # over anything it does not own, and execve drops the namespace's capabilities.
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{uid} {uid} 1"),
        ("gid_map", f"{gid} {gid} 1"),
    ):
        with open(f"/proc/self/{name}", "w", encoding="ascii") as handle:
            handle.write(text)
    layers = ["userns", "netns", "ipcns", "mountns"]
    if _unshare(CLONE_NEWPID):
        layers.append("pidns")
    return layers


def _isolate_filesystem(workdir: str, tmpfs_mb: int) -> None:
    """Give this mount namespace its own view: everything read-only but ``workdir``.

    The kernel enforces it on every file access, also on those made in C (``sqlite3``,
    ``dbm``, ``mkfifo``/``mknod``, ``ctypes``), which an audit hook cannot see:

    1. no mount event propagates back to the system (``MS_PRIVATE``, recursively);
    2. ``workdir`` is bind-mounted onto itself, and held by a descriptor;
    3. every other mount is remounted read-only (a per-mount flag: the filesystems stay
       writable for everyone else);
    4. a private, size-limited ``tmpfs`` covers each temporary folder and ``/dev/shm``, so
       that nothing written there outlives the run or is seen by another one;
    5. where one of those covers ``workdir``, it is bound back at the same path.
    """
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount(workdir, workdir, None, MS_BIND)
    held = os.open(workdir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        mounts = _mountinfo()
        own = {point: flags for point, flags in mounts}[workdir]
        for point, flags in mounts:
            if point == workdir:
                continue
            try:
                _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
            except OSError:
                if os.path.exists(point):
                    raise
                # A mount point this process cannot reach holds nothing it can write.
        covering = []
        for folder in TEMP_FOLDERS:
            if os.path.isdir(folder) and not os.path.islink(folder):
                _mount(
                    "tmpfs",
                    folder,
                    "tmpfs",
                    MS_NOSUID | MS_NODEV,
                    f"size={tmpfs_mb}m,nr_inodes=4096,mode=1777",
                )
                covering.append(folder.rstrip("/") + "/")
        if any(workdir.startswith(prefix) for prefix in covering):
            os.makedirs(workdir, mode=0o711, exist_ok=True)
            _mount(f"/proc/self/fd/{held}", workdir, None, MS_BIND)
            _mount(None, workdir, None, MS_REMOUNT | MS_BIND | own)
    finally:
        os.close(held)


def _prctl(option: int, value: int) -> bool:
    try:
        return bool(_libc().prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _remap(fds: list[int]) -> None:
    """Move ``fds`` to 3, 4, 5 (inheritable), whatever numbers they had."""
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 64) for fd in fds]
    for fd in fds:
        os.close(fd)
    for target, fd in enumerate(high, start=TOKEN_FD):
        os.dup2(fd, target, inheritable=True)
        os.close(fd)


def _set_limits(limits: dict[str, list[int]]) -> None:
    for name, (soft, hard) in limits.items():
        which = _LIMITS[name]
        _, current_hard = resource.getrlimit(which)
        if current_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, current_hard), min(hard, current_hard)
        resource.setrlimit(which, (soft, hard))


def _relay(child: int, status_fd: int) -> None:
    """Wait for the namespace's init and end as the program ended: with its exit status, or
    killed by its signal (so that the parent sees what it would have seen unwrapped)."""
    _, status = os.waitpid(child, 0)
    with os.fdopen(status_fd, "rb") as handle:
        reported = handle.read().decode("ascii", "replace").strip()
    if reported.lstrip("-").isdigit():
        status = int(reported)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
        os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else EXIT_SANDBOX_ERROR)


def _init(
    config: dict[str, Any], isolation: list[str], problem: str | None, status_fd: int
) -> None:
    """PID 1 of the run's PID namespace: start the program, wait for it, report its status.

    When it returns, the kernel kills every process left in the namespace: the program's
    background children die with it, also those that left its session, in every mode."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    program = os.fork()
    if program == 0:
        os.close(status_fd)
        _become_program(config, isolation, problem)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            status = EXIT_SANDBOX_ERROR << 8
            break
        if pid == program:
            break
    os.write(status_fd, str(status).encode("ascii"))
    os._exit(0)


def _become_program(config: dict[str, Any], isolation: list[str], problem: str | None) -> None:
    """Finish the isolation in this process and ``execve`` the sandbox interpreter."""
    result_fd = RESULT_FD
    try:
        fs = config["filesystem"]
        if problem is None and "pidns" in isolation:
            # The namespace's own /proc: only its processes are listed (best effort: some
            # container runtimes refuse a fresh proc mount in a user namespace).
            with contextlib.suppress(OSError):
                _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
                isolation.append("own_proc")
        if problem is None:
            try:
                _isolate_filesystem(config["workdir"], fs["tmpfs_mb"])
                isolation.append("readonly_fs")
            except OSError as exc:
                problem = str(exc)
        if problem is not None and fs["required"]:
            raise RuntimeError(
                f"no filesystem isolation for the program: {problem}. Without it nothing but "
                "the in-process guard, which cannot see file access done in C, keeps the "
                "program from writing outside its folder; " + fs["how_to_allow"]
            )
        _set_limits(config["limits"])
        isolation.append("rlimits")
        if config["drop"]:
            gid, uid = config["gid"], config["uid"]
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            if os.getuid() != uid or os.geteuid() != uid or os.getgroups():
                raise RuntimeError("could not drop privileges")
            isolation.append("uid")
        if _prctl(PR_SET_NO_NEW_PRIVS, 1):
            isolation.append("no_new_privs")
        # Set after the uid change, which clears it; the parent may already be gone.
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != config["parent"] and "pidns" not in isolation:
            raise RuntimeError("the test process exited")
        if config["guard"]:
            isolation.append("guard")
        os.chdir(config["workdir"])
        os.write(result_fd, ("isolation " + ",".join(isolation) + "\n").encode())
        python = config["python"]
        argv = [
            python,
            "-s",
            "-S",
            "-B",
            "-u",
            "-c",
            config["bootstrap"],
            config["bootstrap_config"],
        ]
        os.execve(python, argv, config["env"])
    except BaseException as exc:
        with contextlib.suppress(BaseException):
            os.write(result_fd, f"sandbox-error {type(exc).__name__}: {exc}\n".encode())
        os._exit(EXIT_SANDBOX_ERROR)


def main() -> None:
    config: dict[str, Any] = json.loads(sys.argv[1])
    result_fd = config["fds"][2]
    try:
        _remap(config["fds"])
        result_fd = RESULT_FD
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != config["parent"]:
            raise RuntimeError("the test process exited")
        isolation: list[str] = []
        problem: str | None = None
        try:
            isolation += _enter_namespaces(config["drop"])
        except OSError as exc:
            problem = str(exc)
        if "pidns" not in isolation:
            _become_program(config, isolation, problem)
        status_read, status_write = os.pipe()
        init = os.fork()
        if init == 0:
            os.close(status_read)
            _init(config, isolation, problem, status_write)
        os.close(status_write)
        _relay(init, status_read)
    except BaseException as exc:
        with contextlib.suppress(BaseException):
            os.write(result_fd, f"sandbox-error {type(exc).__name__}: {exc}\n".encode())
        os._exit(EXIT_SANDBOX_ERROR)


if __name__ == "__main__":
    main()
