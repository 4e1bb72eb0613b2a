"""Running model-generated code: only ever in a sandbox, never in the test process.

- :func:`run_program`: run a Python program in a separate, limited process;
- :func:`check_completion` / :func:`build_program`: HumanEval-style functional checks;
- :func:`check_io_program` / :func:`parse_io_tests`: whole programs judged on input/output
  test cases (LiveCodeBench: standard input/output and LeetCode-style ``Solution`` calls);
- :func:`extract_code` / :func:`extract_program`: the completion (or whole program) in raw
  model output;
- :func:`pass_at_k`: the unbiased pass@k estimator.

How a program is contained (Linux):

- **its own process and session**, started by a small launcher (no ``preexec_fn`` in the
  test process) that ``execve``\\s the interpreter with ``-s -S -B``, a minimal environment
  (``PATH``, ``HOME`` and ``TMPDIR`` inside the run directory, ``PYTHONHASHSEED=0``; nothing
  inherited) and only the standard library importable;
- **a fresh run directory** as working directory, deleted afterwards (also on timeout);
- **resource limits** (soft = hard): address space, CPU time (just above the wall-clock
  limit, which the parent enforces), file size, processes, open files, no core dumps;
  stdout/stderr go to files in the run directory (bounded by the file-size limit) and only
  their head is read back;
- **a PID namespace of its own** (both modes, where the kernel allows it): the program
  runs under the namespace's init, sees only the run's processes in its own ``/proc``, and
  cannot signal or even name any process outside (the test process included); when the
  program ends, init exits and the kernel kills whatever is left in the namespace;
- **kill on exit**: the whole process group is SIGKILLed when the program ends or times
  out; as root, every process of the run's uid too (which catches ``setsid`` escapees where
  no PID namespace could be had);
- **a filesystem view of its own**, set up by the kernel (a new mount namespace): every
  mount read-only, a private size-limited ``tmpfs`` over ``/tmp``, ``/var/tmp``,
  ``/dev/shm`` (and ``/run/shm``, ``/run/lock``), the run's working directory bound back as
  the only writable place. It holds against every file access, also those made in C that the
  guard below cannot see (``sqlite3``, ``dbm``, ``mkfifo``/``mknod``, ``ctypes``, writes
  through ``/proc/self/fd``, links); nothing written to a temporary folder outlives the run
  or is seen by another run, and hard links across the bind fail (``EXDEV``). As root the
  namespace is the launcher's own; **not as root** it comes from an unprivileged user
  namespace that maps only the current uid and gid (``userns`` in ``isolation``). Where the
  kernel offers neither (no root, user namespaces disabled or refused, e.g. inside a
  chroot), the program is **not run**: the result is ``error`` with the reason and what to
  do, unless the caller accepted the risk with :func:`allow_unisolated`
  (``sandbox.allow_unisolated=true`` in pytest); an item whose code was not run is an error,
  never a wrong answer;
- **as root** (as in CI): a per-run unprivileged uid/gid (so file permissions protect the
  system, ``RLIMIT_NPROC`` applies, and the test process cannot be signalled), new network
  and IPC namespaces (no network at all), ``PR_SET_NO_NEW_PRIVS``; not as root, the user
  namespace brings new network and IPC namespaces too;
- **the guard**, in the program's interpreter (an audit hook, which the program cannot
  remove): no writes or deletions outside the run directory, no reads of ``/proc`` or home
  directories, no process creation, no signals to other processes, no network, no
  ``ctypes``/``gc`` introspection/tracing; see ``_bootstrap.py`` for the full list.

``ExecutionResult.isolation`` lists the layers that were in force (``mountns``,
``readonly_fs``, ``userns``, ``uid``, ``netns``, ``ipcns``, ``rlimits``, ``no_new_privs``,
``guard``, ``pidns``, ``own_proc``). Not as root there is no separate uid: reading files
the user can read is stopped by the guard alone (writing them is stopped by the read-only
view). The guard stops the operations above when
ordinary code attempts them; a program written to attack the interpreter's internals (e.g.
re-creating built-in modules through ``importlib``) could get around it, but not around
the kernel's layers. Run untrusted code as root, in a container, or on a machine you can
afford to lose.

What the sandbox cannot judge: a completion and its tests share one interpreter, so a
completion can still satisfy the asserts by meaning rather than by force, e.g. by returning
an object whose ``__eq__`` is always true, or by defining a global function that a test
uses. Changes to the builtins module are detected and fail the check.
"""

from pytest_llmeval.sandbox._extract import STOP_SEQUENCES, extract_code, extract_program
from pytest_llmeval.sandbox._humaneval import build_program, check_completion
from pytest_llmeval.sandbox._identity import PYTHON_ENV, SandboxUnavailable
from pytest_llmeval.sandbox._iotests import IOTest, IOTestError, check_io_program, parse_io_tests
from pytest_llmeval.sandbox._passk import pass_at_k
from pytest_llmeval.sandbox._result import STATUSES, ExecutionResult, Limits, Status
from pytest_llmeval.sandbox._run import HOW_TO_ALLOW, allow_unisolated, run_program

__all__ = [
    "HOW_TO_ALLOW",
    "PYTHON_ENV",
    "STATUSES",
    "STOP_SEQUENCES",
    "ExecutionResult",
    "IOTest",
    "IOTestError",
    "Limits",
    "SandboxUnavailable",
    "Status",
    "allow_unisolated",
    "build_program",
    "check_completion",
    "check_io_program",
    "extract_code",
    "extract_program",
    "parse_io_tests",
    "pass_at_k",
    "run_program",
]
