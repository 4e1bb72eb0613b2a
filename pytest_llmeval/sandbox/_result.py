"""What a sandboxed run returns, and the limits it runs under."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Status = Literal["passed", "failed", "timeout", "memory", "killed", "error"]

#: The statuses of :class:`ExecutionResult`, in the order they are decided.
STATUSES: tuple[Status, ...] = ("error", "timeout", "killed", "memory", "failed", "passed")


@dataclass(frozen=True)
class ExecutionResult:
    """The outcome of one sandboxed program.

    ``status`` is one of

    - ``passed``: the program exited with status 0 (for :func:`check_completion`: and its
      ``check(...)`` call returned, which the sandbox verifies itself);
    - ``failed``: a non-zero exit, an uncaught exception, a refused operation, or (for
      checks) an exit before the checks completed;
    - ``timeout``: the wall-clock limit (or the CPU-time limit) was reached;
    - ``memory``: a ``MemoryError`` (the address-space limit was reached);
    - ``killed``: the program died of a signal it was not sent by the sandbox;
    - ``error``: the sandbox itself failed; the program's verdict is unknown.

    ``stdout`` and ``stderr`` hold at most ``max_output_bytes`` bytes each (decoded as UTF-8
    with replacement); the ``*_truncated`` flags say whether more was written. ``reason`` is a
    short human summary (the last exception line, the limit that was hit, ...).
    ``isolation`` names the mechanisms that were in force (``uid``, ``netns``, ``ipcns``,
    ``rlimits``, ``no_new_privs``, ``guard``); ``pid`` is the program's process (and
    process-group) id and ``uid`` the user it ran as, for diagnostics.
    """

    status: Status
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    reason: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    isolation: tuple[str, ...] = ()
    pid: int | None = None
    uid: int | None = None

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run; validated on construction (``ValueError``)."""

    timeout_s: float = 10.0
    memory_mb: int = 1024
    max_processes: int = 32
    max_file_mb: int = 16
    max_output_bytes: int = 64_000

    def __post_init__(self) -> None:
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)):
            raise ValueError(f"timeout_s must be a number, not {self.timeout_s!r}")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError(
                f"timeout_s must be a positive number of seconds, not {self.timeout_s}"
            )
        _check_int("memory_mb", self.memory_mb, 64)
        _check_int("max_processes", self.max_processes, 1)
        _check_int("max_file_mb", self.max_file_mb, 1)
        _check_int("max_output_bytes", self.max_output_bytes, 0)

    @property
    def cpu_seconds(self) -> int:
        """The CPU-time limit: a little above the wall-clock limit (a backstop for it)."""
        return math.ceil(self.timeout_s) + 1


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, not {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value}")
