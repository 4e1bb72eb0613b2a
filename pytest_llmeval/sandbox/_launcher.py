"""The launcher: the first program of a sandboxed run (``python -I -S -c <this file>``).

It runs with the test process's interpreter and privileges in a fresh session, and turns
itself into the sandboxed program:

1. moves the inherited descriptors to fixed numbers (3: token pipe, 4: program, 5: result);
2. as root: leaves the network and IPC namespaces (``unshare``), so that the program sees
   only a loopback interface that is down;
3. sets the resource limits (soft = hard, so the program cannot raise them);
4. as root: drops to the run's own uid/gid with no supplementary groups;
5. sets ``PR_SET_NO_NEW_PRIVS`` (no setuid binary can give privileges back) and
   ``PR_SET_PDEATHSIG`` (the program dies with the test process);
6. writes ``isolation ...`` to the result channel and ``execve``\\s the sandbox interpreter
   with the bootstrap and a minimal environment.

Any failure is reported as ``sandbox-error ...`` with exit status 125. This file is never
imported by the test process (it is run from its source text).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import resource
import signal
import sys
from typing import Any

TOKEN_FD, PROGRAM_FD, RESULT_FD = 3, 4, 5
EXIT_SANDBOX_ERROR = 125

CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38

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


def main() -> None:
    config: dict[str, Any] = json.loads(sys.argv[1])
    result_fd = config["fds"][2]
    try:
        _remap(config["fds"])
        result_fd = RESULT_FD
        isolation: list[str] = []
        if config["drop"]:
            if _unshare(CLONE_NEWNET | CLONE_NEWIPC):
                isolation += ["netns", "ipcns"]
            elif _unshare(CLONE_NEWNET):
                isolation.append("netns")
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
        if os.getppid() != config["parent"]:
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


if __name__ == "__main__":
    main()
