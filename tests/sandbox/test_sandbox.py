"""The sandbox against hostile programs, and its ordinary results.

Every hostile program must end as a non-passing result within its limits, with the test
process, its files and its network listener untouched. Where the machine allows it (root,
as in CI), the kernel-level layers are also tested on their own, with the in-process guard
switched off (``execute(..., guard=False)``), so each mechanism is shown to hold by itself.

The problem used here is made up (HumanEval's shape, not its data).
"""

from __future__ import annotations

import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_llmeval.sandbox import (
    ExecutionResult,
    Limits,
    _identity,
    build_program,
    check_completion,
    extract_code,
    run_program,
)
from pytest_llmeval.sandbox._identity import PYTHON_ENV, group_members, user_processes
from pytest_llmeval.sandbox._run import _done_line, _script, execute

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="kernel-level isolation needs root")

PROMPT = (
    "def add(a: int, b: int) -> int:\n"
    '    """Return the sum of a and b.\n'
    "    >>> add(2, 3)\n"
    "    5\n"
    '    """\n'
)
TEST = (
    "METADATA = {'author': 'tests'}\n"
    "\n"
    "\n"
    "def check(candidate):\n"
    "    assert candidate(1, 2) == 3\n"
    "    assert candidate(-4, 4) == 0\n"
    "    assert candidate(10, 5) == 15\n"
)
CORRECT = "    return a + b\n"
WRONG = "    return a - b\n"
TIMEOUT = 5.0


def bare(code: str, *, max_processes: int = 8) -> ExecutionResult:
    """Run without the in-process guard: only the kernel-level layers hold."""
    limits = Limits(timeout_s=TIMEOUT, max_processes=max_processes)
    return execute([("program.py", code)], limits, guard=False)


def assert_all_gone(result: ExecutionResult) -> None:
    """No live process of the run is left: none in its process group (the dead may linger
    as zombies until init reaps them), and, as root, where the uid is the run's own, none
    with its uid."""
    assert result.pid is not None
    assert group_members(result.pid) == []
    if IS_ROOT:
        assert result.uid is not None and result.uid != 0
        assert user_processes(result.uid) == []


@pytest.fixture
def sentinel() -> Iterator[Path]:
    """A file the sandbox must not delete, in a directory everyone can enter and read (so
    only permissions and the guard protect it)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="llmeval-sentinel-", dir="/tmp"))
    folder.chmod(0o755)
    target = folder / "sentinel.txt"
    target.write_text("keep me\n")
    target.chmod(0o644)
    yield target
    for child in folder.iterdir():
        child.unlink()
    folder.rmdir()


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.3)
    yield server
    server.close()


def saw_no_connection(server: socket.socket) -> bool:
    try:
        connection, _ = server.accept()
    except TimeoutError:
        return True
    connection.close()
    return False


# --------------------------------------------------------------------- ordinary programs


def test_correct_completion_passes() -> None:
    result = check_completion(PROMPT, CORRECT, TEST, "add", timeout_s=TIMEOUT)
    assert result.status == "passed", result
    assert result.passed and result.returncode == 0 and result.reason == ""


def test_wrong_completion_fails_with_the_assertion() -> None:
    result = check_completion(PROMPT, WRONG, TEST, "add", timeout_s=TIMEOUT)
    assert result.status == "failed"
    assert result.reason == "AssertionError"
    assert 'File "test.py", line 5, in check' in result.stderr


def test_chat_style_answer_passes_after_extraction() -> None:
    answer = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n\nprint(add(1, 2))\n```"
    completion = extract_code(answer, PROMPT, "add")
    result = check_completion(PROMPT, completion, TEST, "add", timeout_s=TIMEOUT)
    assert result.status == "passed", result
    assert result.stdout == ""  # the demo print was dropped


def test_program_output_and_exit_status() -> None:
    result = run_program("import sys\nprint('out')\nprint('err', file=sys.stderr)\nexit(3)\n")
    assert (result.status, result.returncode) == ("failed", 3)
    assert (result.stdout, result.stderr) == ("out\n", "err\n")
    assert run_program("import sys\nsys.exit(0)\n").status == "passed"


def test_exception_gives_its_last_line() -> None:
    result = run_program("def f():\n    raise ValueError('boom')\nf()\n")
    assert (result.status, result.reason) == ("failed", "ValueError: boom")
    assert 'File "program.py", line 2, in f' in result.stderr
    assert "<string>" not in result.stderr  # no bootstrap frames


def test_syntax_error_fails() -> None:
    result = run_program("def f(:\n    pass\n")
    assert result.status == "failed"
    assert result.reason.startswith("SyntaxError")


def test_stdout_is_truncated() -> None:
    result = run_program("print('x' * 200_000)\n", max_output_bytes=1000)
    assert result.status == "passed"
    assert result.stdout == "x" * 1000
    assert result.stdout_truncated and not result.stderr_truncated


def test_standard_library_works_and_site_packages_do_not() -> None:
    code = (
        "import json, math, re, collections, itertools, heapq, fractions, asyncio, threading\n"
        "print(json.dumps(sorted(collections.Counter('abca').items())))\n"
        "try:\n    import pytest\nexcept ImportError:\n    print('no site-packages')\n"
    )
    result = run_program(code, timeout_s=10)
    assert result.status == "passed", result
    assert result.stdout == '[["a", 2], ["b", 1], ["c", 1]]\nno site-packages\n'


def test_fresh_directory_minimal_environment_and_cleanup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMEVAL_TEST_SECRET", "hunter2")
    code = (
        "import os, tempfile\n"
        "print(os.getcwd())\n"
        "print(os.listdir('.'))\n"
        "print(os.environ['HOME'] == os.getcwd())\n"
        "print(tempfile.gettempdir().startswith(os.getcwd()))\n"
        "print(sorted(os.environ))\n"
        "print(os.environ.get('PYTHONHASHSEED'))\n"
        "open('scratch.txt', 'w').write('mine')\n"
    )
    result = run_program(code, timeout_s=TIMEOUT)
    assert result.status == "passed", result
    cwd, listing, home, tmp, names, seed = result.stdout.splitlines()
    assert listing == "['tmp']" and home == "True" and tmp == "True" and seed == "0"
    assert "LLMEVAL_TEST_SECRET" not in names and "hunter2" not in result.stdout
    assert not Path(cwd).exists()
    assert not Path(cwd).parent.exists()


def test_directory_is_removed_after_a_timeout() -> None:
    code = "import os, sys\nprint(os.getcwd(), flush=True)\nwhile True:\n    pass\n"
    result = run_program(code, timeout_s=1)
    assert result.status == "timeout"
    assert result.stdout.strip() and not Path(result.stdout.strip()).exists()


def test_invalid_limits_are_refused() -> None:
    for bad in (
        {"timeout_s": 0},
        {"timeout_s": float("inf")},
        {"memory_mb": 1},
        {"max_processes": 0},
    ):
        with pytest.raises(ValueError):
            run_program("pass", **bad)


def test_build_program_is_what_runs() -> None:
    program = build_program(PROMPT, CORRECT, TEST, "add")
    assert program == PROMPT + CORRECT + "\n" + TEST + "\ncheck(add)\n"
    assert run_program(program, timeout_s=TIMEOUT).status == "passed"


def test_the_done_line_is_marked_once() -> None:
    line = _script("_bootstrap.py").splitlines()[_done_line() - 1]
    assert "audit(DONE_EVENT)" in line


@needs_root
def test_isolation_as_root() -> None:
    result = run_program(
        "import os\nprint(os.getuid(), os.getgid(), os.getgroups())\n", timeout_s=TIMEOUT
    )
    assert result.status == "passed", result
    layers = {"uid", "netns", "mountns", "readonly_fs", "rlimits", "no_new_privs", "guard"}
    assert layers <= set(result.isolation)
    uid, gid, groups = result.stdout.split(" ", 2)
    assert int(uid) == result.uid and int(uid) != 0 and int(gid) != 0
    assert groups.strip() == "[]"


@needs_root
def test_no_usable_interpreter_is_a_sandbox_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_identity, "_python_cache", {})
    monkeypatch.setenv(PYTHON_ENV, "/nonexistent/python3")
    result = run_program("print(1)", timeout_s=TIMEOUT)
    assert result.status == "error"
    assert PYTHON_ENV in result.reason and result.returncode is None


# --------------------------------------------------------------------- hostile programs


def test_infinite_loop_times_out() -> None:
    began = time.monotonic()
    result = check_completion(PROMPT, "    while True:\n        pass\n", TEST, "add", timeout_s=2)
    assert result.status == "timeout"
    assert time.monotonic() - began < 4.0
    assert_all_gone(result)


def test_fork_bomb() -> None:
    result = run_program("import os\nwhile True:\n    os.fork()\n", timeout_s=5)
    assert result.status == "failed"
    assert "os.fork" in result.reason
    assert_all_gone(result)


@needs_root
def test_fork_bomb_without_the_guard_meets_the_process_limit() -> None:
    result = bare("import os\nwhile True:\n    os.fork()\n", max_processes=8)
    assert result.status in ("failed", "killed", "timeout")
    assert "Resource temporarily unavailable" in result.reason or result.status != "failed"
    assert_all_gone(result)


@needs_root
def test_children_that_leave_the_session_are_killed() -> None:
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    time.sleep(60)\n"
        "else:\n"
        "    print('left a child behind')\n"
    )
    result = bare(code)
    assert result.stdout == "left a child behind\n"
    assert_all_gone(result)


def test_huge_allocation_hits_the_memory_limit() -> None:
    result = check_completion(
        PROMPT, "    x = bytearray(10 * 2**30)\n", TEST, "add", timeout_s=TIMEOUT
    )
    assert result.status == "memory"
    assert "MemoryError" in result.reason


def test_writing_a_huge_file_hits_the_file_size_limit() -> None:
    result = run_program("open('big', 'wb').write(b'x' * (100 * 2**20))\n", max_file_mb=16)
    assert result.status == "failed"
    assert "File too large" in result.reason and "file size limit" in result.reason


DELETE = "import os, shutil\nos.remove({path!r})\n"
RMTREE = "import shutil\nshutil.rmtree({path!r})\n"
OVERWRITE = "open({path!r}, 'w').write('gone')\n"


@pytest.mark.parametrize("attack", [DELETE, RMTREE, OVERWRITE], ids=["remove", "rmtree", "write"])
def test_files_outside_the_directory_survive(sentinel: Path, attack: str) -> None:
    path = sentinel if attack is not RMTREE else sentinel.parent
    result = run_program(attack.format(path=str(path)), timeout_s=TIMEOUT)
    assert result.status == "failed"
    assert "sandbox refused" in result.reason
    assert sentinel.read_text() == "keep me\n"


@needs_root
@pytest.mark.parametrize("attack", [DELETE, RMTREE, OVERWRITE], ids=["remove", "rmtree", "write"])
def test_files_outside_survive_without_the_guard(sentinel: Path, attack: str) -> None:
    path = sentinel if attack is not RMTREE else sentinel.parent
    reading = f"print(open({str(sentinel)!r}).read(), end='')\n"
    result = bare(reading + attack.format(path=str(path)))
    # The system's /tmp is out of sight: the program sees a private tmpfs there (files the
    # program can see but not change are tested in test_filesystem.py).
    assert result.stdout == ""
    assert result.status == "failed"
    assert "No such file or directory" in result.reason
    assert sentinel.read_text() == "keep me\n"
    assert stat.S_IMODE(sentinel.stat().st_mode) == 0o644


CONNECT = "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
RAW_CONNECT = (
    "import socket\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
    "s.settimeout(1)\n"
    "s.connect(('127.0.0.1', {port}))\n"
)


@pytest.mark.parametrize("attack", [CONNECT, RAW_CONNECT], ids=["create_connection", "socket"])
def test_no_network(listener: socket.socket, attack: str) -> None:
    port = listener.getsockname()[1]
    result = run_program(attack.format(port=port), timeout_s=TIMEOUT)
    assert result.status == "failed"
    assert "sandbox refused socket" in result.reason
    assert saw_no_connection(listener)


@needs_root
def test_no_network_without_the_guard(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    result = bare(RAW_CONNECT.format(port=port))
    assert result.status == "failed"
    assert "Network is unreachable" in result.reason
    assert saw_no_connection(listener)


KILL_PARENT = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
# The test process's own group, by number (inside the run's PID namespace the parent is the
# namespace's init, whose group is not visible).
KILL_GROUP = f"import os\nos.killpg({os.getpgrp()}, 9)\n"


@pytest.mark.parametrize("attack", [KILL_PARENT, KILL_GROUP], ids=["kill", "killpg"])
def test_the_test_process_survives(attack: str) -> None:
    result = check_completion(PROMPT, CORRECT + attack, TEST, "add", timeout_s=TIMEOUT)
    assert result.status == "failed"
    assert "sandbox refused os.kill" in result.reason
    assert os.getpid() > 0  # still here


@needs_root
@pytest.mark.parametrize("attack", [KILL_PARENT, KILL_GROUP], ids=["kill", "killpg"])
def test_the_test_process_survives_without_the_guard(attack: str) -> None:
    result = bare(attack)
    assert result.status == "failed"
    # Another uid's process: not permitted; outside the PID namespace: not even visible.
    assert "Operation not permitted" in result.reason or "No such process" in result.reason
    assert os.getpid() > 0  # still here


# --------------------------------------------------------------------- faked passes

EARLY_EXITS = {
    "sys.exit at module level": WRONG + "import sys\nsys.exit(0)\n",
    "os._exit at module level": WRONG + "import os\nos._exit(0)\n",
    "raise SystemExit": WRONG + "raise SystemExit\n",
    "exit() builtin": WRONG + "exit()\n",
    "sys.exit inside the function": "    import sys\n    sys.exit(0)\n",
    "os._exit inside the function": "    import os\n    os._exit(0)\n",
}


@pytest.mark.parametrize("completion", EARLY_EXITS.values(), ids=EARLY_EXITS.keys())
def test_exiting_before_the_checks_is_not_a_pass(completion: str) -> None:
    result = check_completion(PROMPT, completion, TEST, "add", timeout_s=TIMEOUT)
    assert result.status == "failed", result
    assert result.returncode == 0  # the exit status alone would have said "passed"
    assert "before check() returned" in result.reason


# Tests whose every assert goes through a builtin or a module function, so that replacing
# that function would make a wrong solution pass.
TEST_ABS = (
    "def check(candidate):\n"
    "    assert abs(candidate(1, 2) - 3) < 1e-9\n"
    "    assert abs(candidate(-4, 4)) < 1e-9\n"
)
TEST_MATH = (
    "def check(candidate):\n"
    "    import math\n"
    "    assert math.isclose(candidate(1, 2), 3)\n"
    "    assert math.isclose(candidate(-4, 4), 0)\n"
)
EXIT_ZERO = "import os\nos._exit(0)\n"

# id -> (code after a wrong solution, the test it attacks, whether it would fake a pass in
# a naive harness that judges by the exit status). Each must fail check_completion.
TAMPERING: dict[str, tuple[str, str, bool]] = {
    "builtins.check": ("import builtins\nbuiltins.check = lambda candidate: None\n", TEST, False),
    "patched sys.exit": ("import sys\nsys.exit = lambda *a: None\n", TEST, False),
    "patched AssertionError": (
        "import builtins\nbuiltins.AssertionError = type('X', (Exception,), {})\n",
        TEST,
        False,
    ),
    "atexit os._exit(0)": ("import atexit, os\natexit.register(os._exit, 0)\n", TEST, True),
    "patched builtin used by the test": (
        "import builtins\nbuiltins.abs = lambda x: 0\n",
        TEST_ABS,
        True,
    ),
    "shadowing __builtins__": (
        "import builtins\n__builtins__ = dict(vars(builtins), abs=lambda x: 0)\n",
        TEST_ABS,
        True,
    ),
    "replaced __import__": (
        "import builtins, types\n"
        "_real = builtins.__import__\n"
        "_fake = types.SimpleNamespace(isclose=lambda *a, **k: True)\n"
        "def _import(name, *args, **kwargs):\n"
        "    return _fake if name == 'math' else _real(name, *args, **kwargs)\n"
        "builtins.__import__ = _import\n",
        TEST_MATH,
        True,
    ),
    "trace function swapping the candidate": (
        "import sys\n"
        "def _swap(frame, event, arg):\n"
        "    if event == 'call' and frame.f_code.co_name == 'check':\n"
        "        frame.f_locals['candidate'] = lambda a, b: a + b\n"
        "sys.settrace(_swap)\n",
        TEST,
        True,
    ),
    "forged result lines": (
        "import os\n"
        "for fd in range(3, 10):\n"
        "    try:\n"
        "        os.write(fd, b'ok ' + b'0' * 32 + b'\\n')\n"
        "    except OSError:\n"
        "        pass\n" + EXIT_ZERO,
        TEST,
        True,
    ),
    "token hunt in frames": (
        "import os, sys\n"
        "found, frame = [], sys._getframe()\n"
        "while frame is not None:\n"
        "    found += [repr(v) for v in frame.f_locals.values()]\n"
        "    found += [repr(v) for v in frame.f_globals.values()]\n"
        "    frame = frame.f_back\n"
        "for text in found:\n"
        "    for word in text.replace(\"'\", ' ').split():\n"
        "        if len(word) == 32:\n"
        "            os.write(5, b'ok ' + word.encode() + b'\\n')\n" + EXIT_ZERO,
        TEST,
        True,
    ),
    "token hunt in the done hook, from a signal handler": (
        # The handler does not re-enter itself (on an idle machine the 50 us timer fires
        # again inside it: RecursionError) and ignores any OSError (outside the sandbox fd 5
        # may be another pipe's read end): either would kill the naive control run.
        "import os, signal, sys\n"
        "_busy = []\n"
        "def _hunt(signum, frame):\n"
        "    if _busy:\n"
        "        return\n"
        "    _busy.append(1)\n"
        "    while frame is not None:\n"
        "        try:\n"
        "            for const in frame.f_code.co_consts:\n"
        "                if isinstance(const, bytes) and const.startswith(b'ok '):\n"
        "                    os.write(5, const)\n"
        "        except OSError:\n"
        "            pass\n"
        "        frame = frame.f_back\n"
        "    _busy.pop()\n"
        "signal.signal(signal.SIGALRM, _hunt)\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.00005, 0.00005)\n"
        "for _ in range(20000):\n"
        "    sys.audit('tick')\n"
        "signal.setitimer(signal.ITIMER_REAL, 0)\n" + EXIT_ZERO,
        TEST,
        True,
    ),
    "token hunt in the heap": ("import gc\ngc.get_objects()\n" + EXIT_ZERO, TEST, True),
    "token hunt in memory": ("open('/proc/self/mem', 'rb').close()\n" + EXIT_ZERO, TEST, True),
    "ctypes": ("import ctypes\nctypes.CDLL(None).exit(0)\n", TEST, True),
    "swallowing the test in a string": ('def check(candidate):\n    pass\n"""\n', TEST, False),
}


def naive(completion: str, test: str) -> ExecutionResult:
    """A harness that judges by the exit status alone (no guard, no completion token)."""
    program = build_program(PROMPT, completion, test, "add")
    return execute([("program.py", program)], Limits(timeout_s=5.0), guard=False)


@pytest.mark.parametrize(("attack", "test", "beats_naive"), TAMPERING.values(), ids=TAMPERING)
def test_tampering_with_the_checker_is_not_a_pass(
    attack: str, test: str, beats_naive: bool
) -> None:
    assert check_completion(PROMPT, CORRECT, test, "add", timeout_s=TIMEOUT).status == "passed"
    result = check_completion(PROMPT, WRONG + attack, test, "add", timeout_s=TIMEOUT)
    # "killed": a hostile interval timer may outlive its handler; still not a pass.
    assert result.status in ("failed", "killed"), result
    if beats_naive:  # the attack is real: judged by the exit status alone, it passes
        control = naive(WRONG + attack, test)
        assert control.returncode == 0, control


def test_an_honest_program_that_imports_and_prints_passes() -> None:
    completion = CORRECT + "import collections, json\nprint(json.dumps({'ok': 1}))\n"
    result = check_completion(PROMPT, completion, TEST, "add", timeout_s=TIMEOUT)
    assert result.status == "passed", result
    assert result.stdout == '{"ok": 1}\n'
