"""The sandbox's filesystem view holds against file access done in C, in both of its modes.

The in-process guard (an audit hook) cannot see files opened by C code (``sqlite3``,
``dbm``, ``ctypes``), nor ``mkfifo``/``mknod``: the kernel must hold alone. So every hostile
program here runs **without the guard** (``execute(..., guard=False)``) against world-writable
files and folders outside its run folder, where plain permissions protect nothing:

- **root mode** (the test process is root, as in CI): a per-run uid plus new mount, network
  and IPC namespaces;
- **unprivileged mode**: the same programs started by an unprivileged user (``nobody``),
  where the sandbox gets its mount namespace from an unprivileged user namespace;
- **no isolation available** (an unprivileged user inside a chroot, where the kernel refuses
  user namespaces): the program is refused, with the reason and the opt-in named, unless
  the caller opted in.

A test fails if any file or folder outside the run folder changed, or if a file named with
the run's marker appeared in a temporary folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_llmeval.sandbox import Limits
from pytest_llmeval.sandbox._identity import SandboxUser, _find_python
from pytest_llmeval.sandbox._launcher import TEMP_FOLDERS
from pytest_llmeval.sandbox._run import HOW_TO_ALLOW, execute

IS_ROOT = os.geteuid() == 0
NOBODY = 65534
SANDBOX_PACKAGE = Path(__file__).resolve().parents[2] / "pytest_llmeval" / "sandbox"
needs_root = pytest.mark.skipif(not IS_ROOT, reason="these modes are set up by root")

# Each program attacks the folders in OUT (a list of world-writable folders outside the run
# folder, each holding victim.txt, victim.db and a world-writable sub/ folder) and names its
# new files with MARK. Placeholders are filled in by _program.
HOSTILE = {
    "sqlite3_new": (
        "import sqlite3\n"
        "for d in OUT:\n"
        "    try:\n"
        "        sqlite3.connect(d + '/MARK.sqlite').execute('create table t (a)')\n"
        "    except Exception as exc: print(type(exc).__name__, exc)\n"
    ),
    "sqlite3_existing": (
        "import sqlite3\n"
        "for d in OUT:\n"
        "    try:\n"
        "        sqlite3.connect(d + '/victim.db').execute('create table t (a)')\n"
        "    except Exception as exc: print(type(exc).__name__, exc)\n"
    ),
    "dbm_replace": (
        "import dbm.ndbm\n"
        "for d in OUT:\n"
        "    try: dbm.ndbm.open(d + '/victim', 'n')\n"
        "    except Exception as exc: print(type(exc).__name__, exc)\n"
    ),
    "dbm_new": (
        "import dbm\n"
        "for d in OUT + TEMPS:\n"
        "    try: dbm.open(d + '/MARK-dbm', 'c')\n"
        "    except Exception as exc: print(type(exc).__name__, exc)\n"
    ),
    "mkfifo": (
        "import os\n"
        "for d in OUT + TEMPS:\n"
        "    try: os.mkfifo(d + '/MARK-fifo')\n"
        "    except OSError as exc: print(exc)\n"
    ),
    "mknod": (
        "import os, stat\n"
        "for d in OUT + TEMPS:\n"
        "    for kind in (stat.S_IFREG, stat.S_IFIFO):\n"
        "        try: os.mknod(d + '/MARK-node' + str(kind), kind | 0o666)\n"
        "        except OSError as exc: print(exc)\n"
    ),
    "ctypes_open": (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for d in OUT:\n"
        "    fd = libc.open((d + '/victim.txt').encode(), os.O_WRONLY | os.O_TRUNC)\n"
        "    print(fd, ctypes.get_errno())\n"
        "    if fd >= 0: libc.write(fd, b'pwned', 5)\n"
        "    fd = libc.open((d + '/MARK-ctypes').encode(), os.O_WRONLY | os.O_CREAT, 0o666)\n"
        "    print(fd, ctypes.get_errno())\n"
    ),
    "os_open": (
        "import os\n"
        "for d in OUT:\n"
        "    for name, flags in (('victim.txt', os.O_WRONLY | os.O_TRUNC),\n"
        "                        ('victim.txt', os.O_WRONLY | os.O_APPEND),\n"
        "                        ('MARK-os', os.O_WRONLY | os.O_CREAT)):\n"
        "        try:\n"
        "            fd = os.open(d + '/' + name, flags, 0o666); os.write(fd, b'pwned')\n"
        "        except OSError as exc: print(exc)\n"
        "    for call in (lambda: os.truncate(d + '/victim.txt', 0),\n"
        "                 lambda: os.chmod(d + '/victim.txt', 0o600),\n"
        "                 lambda: os.utime(d + '/victim.txt', (0, 0)),\n"
        "                 lambda: os.rename(d + '/victim.txt', d + '/moved'),\n"
        "                 lambda: os.unlink(d + '/victim.db'),\n"
        "                 lambda: os.rmdir(d + '/sub')):\n"
        "        try: call()\n"
        "        except OSError as exc: print(exc)\n"
    ),
    "shutil": (
        "import shutil\n"
        "open('mine.txt', 'w').write('pwned')\n"
        "for d in OUT:\n"
        "    for call in (lambda: shutil.copy('mine.txt', d + '/victim.txt'),\n"
        "                 lambda: shutil.copy('mine.txt', d + '/MARK-copy'),\n"
        "                 lambda: shutil.copytree('.', d + '/MARK-tree'),\n"
        "                 lambda: shutil.move(d + '/victim.db', 'stolen.db'),\n"
        "                 lambda: shutil.rmtree(d + '/sub')):\n"
        "        try: call()\n"
        "        except OSError as exc: print(exc)\n"
    ),
    "tempfile": (
        "import tempfile\n"
        "for d in OUT + TEMPS + [None]:\n"
        "    try:\n"
        "        fd, name = tempfile.mkstemp(prefix='MARK-', dir=d); print(name)\n"
        "        tempfile.mkdtemp(prefix='MARK-', dir=d)\n"
        "    except OSError as exc: print(exc)\n"
    ),
    "proc_self_fd": (
        "import os\n"
        "for d in OUT:\n"
        "    fd = os.open(d + '/victim.txt', os.O_RDONLY)\n"
        "    try:\n"
        "        with open('/proc/self/fd/%d' % fd, 'w') as out: out.write('pwned')\n"
        "    except OSError as exc: print(exc)\n"
        "    dirfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)\n"
        "    try:\n"
        "        with open('/proc/self/fd/%d/MARK-via-fd' % dirfd, 'w') as out: out.write('x')\n"
        "    except OSError as exc: print(exc)\n"
        "    try: os.open('victim.txt', os.O_WRONLY | os.O_TRUNC, dir_fd=dirfd)\n"
        "    except OSError as exc: print(exc)\n"
    ),
    "symlink": (
        "import os\n"
        "for i, d in enumerate(OUT):\n"
        "    os.symlink(d + '/victim.txt', 'link%d' % i)\n"
        "    os.symlink(d, 'dirlink%d' % i)\n"
        "    try:\n"
        "        with open('link%d' % i, 'w') as out: out.write('pwned')\n"
        "    except OSError as exc: print(exc)\n"
        "    try:\n"
        "        with open('dirlink%d/MARK-via-link' % i, 'w') as out: out.write('x')\n"
        "    except OSError as exc: print(exc)\n"
    ),
    "hardlink": (
        "import os\n"
        "for i, d in enumerate(OUT):\n"
        "    try:\n"
        "        os.link(d + '/victim.txt', 'hard%d' % i)\n"
        "        with open('hard%d' % i, 'w') as out: out.write('pwned')\n"
        "    except OSError as exc: print(exc)\n"
    ),
    "parent_fds": (
        "import os\n"
        "ppid = os.getppid()\n"
        "for pid in (ppid, 1):\n"
        "    try: names = os.listdir('/proc/%d/fd' % pid)\n"
        "    except OSError as exc: print(exc); continue\n"
        "    for name in names:\n"
        "        try:\n"
        "            with open('/proc/%d/fd/%s' % (pid, name), 'a') as out: out.write('pwned')\n"
        "        except OSError as exc: pass\n"
    ),
}


def _program(code: str, out: list[str], mark: str) -> str:
    prelude = f"OUT = {out!r}\nTEMPS = {[t for t in TEMP_FOLDERS if os.path.isdir(t)]!r}\n"
    return prelude + code.replace("MARK", mark)


def _writable_system_folder() -> Path | None:
    """A folder outside every temporary folder (so the program sees it, read-only) in which
    the test process can make a world-writable folder."""
    for candidate in ("/var/lib", "/opt", "/srv", "/mnt", "/usr/local"):
        path = Path(candidate)
        if path.is_dir() and os.access(path, os.W_OK | os.X_OK):
            return path
    return None


def _make_target(parent: Path) -> Path:
    target = Path(tempfile.mkdtemp(prefix="llmeval-hostile-", dir=parent))
    (target / "sub").mkdir()
    (target / "sub" / "inner.txt").write_text("inner\n")
    (target / "victim.txt").write_text("precious\n")
    (target / "victim.db").write_text("precious database\n")
    for path in (target / "victim.txt", target / "victim.db", target / "sub" / "inner.txt"):
        path.chmod(0o666)
    for folder in (target, target / "sub"):
        folder.chmod(0o1777 if folder == target else 0o777)
    return target


def _snapshot(folders: list[Path]) -> dict[str, tuple[int, int, int, str]]:
    """(mode, size, mtime_ns, sha256) of every entry under ``folders``."""
    seen: dict[str, tuple[int, int, int, str]] = {}
    for folder in folders:
        for root, dirs, files in os.walk(folder):
            for name in dirs + files:
                path = os.path.join(root, name)
                st = os.lstat(path)
                digest = ""
                if stat.S_ISREG(st.st_mode):
                    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
                seen[path] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return seen


def _marked(mark: str) -> list[str]:
    found = []
    for folder in TEMP_FOLDERS:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        found += [os.path.join(folder, n) for n in names if mark in n]
    return found


@pytest.fixture
def targets() -> Iterator[list[Path]]:
    """World-writable folders outside the run folder: one in the temporary folder (which the
    program sees as a private tmpfs), one in a system folder (which it sees read-only)."""
    made = [_make_target(Path(tempfile.gettempdir()))]
    system = _writable_system_folder()
    if system is not None:
        made.append(_make_target(system))
    for folder in made:
        # Every ancestor must be searchable by others, or the unprivileged runs are moot.
        assert all(p.stat().st_mode & stat.S_IXOTH for p in folder.parents), folder
    yield made
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


def _assert_untouched(
    before: dict[str, tuple[int, int, int, str]], targets: list[Path], mark: str, what: str
) -> None:
    after = _snapshot(targets)
    changed = sorted(
        path for path in set(before) | set(after) if before.get(path) != after.get(path)
    )
    leaked = _marked(mark)
    for path in leaked:  # removed before asserting, so that a failing run leaves nothing
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    assert changed == [], f"{what} changed files outside its run folder: {changed}"
    assert leaked == [], f"{what} left files in the system's temporary folders: {leaked}"


# ----------------------------------------------------------------------------- root mode


@needs_root
@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_root_mode_holds_without_the_guard(targets: list[Path], attack: str) -> None:
    mark = "llmeval-mark-" + secrets.token_hex(4)
    before = _snapshot(targets)
    code = _program(HOSTILE[attack], [str(t) for t in targets], mark)
    result = execute([("program.py", code)], Limits(timeout_s=10.0), guard=False)
    assert result.status != "error", result.reason
    _assert_untouched(before, targets, mark, f"{attack} (root mode)")
    assert {"mountns", "readonly_fs", "uid"} <= set(result.isolation), result.isolation


@needs_root
def test_root_mode_program_still_works_in_its_folder() -> None:
    code = (
        "import os, sqlite3, dbm, tempfile\n"
        "sqlite3.connect('db.sqlite').execute('create table t (a)')\n"
        "dbm.open('cache', 'c')['k'] = 'v'\n"
        "os.mkfifo('pipe')\n"
        "fd, name = tempfile.mkstemp(); os.write(fd, b'scratch')\n"
        "open('/dev/null', 'w').write('discarded')\n"
        "print(sorted(n for n in os.listdir('.') if not n.startswith('tmp')))\n"
    )
    result = execute([("program.py", code)], Limits(timeout_s=10.0), guard=False)
    assert result.status == "passed", (result.reason, result.stderr)
    assert "db.sqlite" in result.stdout and "pipe" in result.stdout


# ---------------------------------------------------------------------- unprivileged mode

# Run by an unprivileged user: imports the sandbox package from a world-readable copy (it
# needs only the standard library) and prints one JSON line per program.
_DRIVER = """
import importlib, json, os, sys, types
root = sys.argv[1]
package = types.ModuleType("pytest_llmeval")
package.__path__ = [root + "/pytest_llmeval"]
sys.modules["pytest_llmeval"] = package
run = importlib.import_module("pytest_llmeval.sandbox._run")
result_type = importlib.import_module("pytest_llmeval.sandbox._result")
request = json.loads(sys.stdin.read())
if request["allow_unisolated"]:
    run.allow_unisolated()

def survivors(mark):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/" + pid + "/cmdline", "rb") as handle:
                if mark.encode() in handle.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found

for code in request["programs"]:
    code = code.replace("DRIVER_PID", str(os.getpid()))
    res = run.execute([("program.py", code)], result_type.Limits(timeout_s=10.0), guard=False)
    print(json.dumps({"status": res.status, "reason": res.reason, "isolation": res.isolation,
                      "stdout": res.stdout, "uid": res.uid,
                      "survivors": survivors(request.get("mark") or "-no-mark-")}))
"""


@pytest.fixture(scope="module")
def unprivileged_copy() -> Iterator[Path]:
    """The sandbox package and the driver, where an unprivileged user can read them."""
    root = Path(tempfile.mkdtemp(prefix="llmeval-sandbox-copy-"))
    shutil.copytree(SANDBOX_PACKAGE, root / "pytest_llmeval" / "sandbox")
    (root / "driver.py").write_text(_DRIVER)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def nobody_python() -> str:
    try:
        return _find_python(SandboxUser(NOBODY, NOBODY, drop=True, exclusive=False))
    except RuntimeError as exc:
        pytest.skip(f"no interpreter runnable by an unprivileged user: {exc}")


def _as_nobody(
    copy: Path,
    python: str,
    programs: list[str],
    *,
    chroot: bool = False,
    allow_unisolated: bool = False,
    mark: str | None = None,
) -> list[dict[str, object]]:
    command = [python, "-I", "-S", str(copy / "driver.py"), str(copy)]
    if chroot:
        # Inside a chroot the kernel refuses unprivileged user namespaces: the machine then
        # offers no filesystem isolation to an unprivileged sandbox.
        jail = tempfile.mkdtemp(prefix="llmeval-chroot-")
        script = (
            'mount --make-rprivate / && mount --rbind / "$1" && shift && exec chroot '
            f'"$JAIL" setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups "$@"'
        )
        command = ["unshare", "-m", "sh", "-c", script, "sh", jail, *command]
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "JAIL": jail}
        user: int | None = None
    else:
        env = {"PATH": "/usr/bin:/bin"}
        user = NOBODY
    try:
        done = subprocess.run(
            command,
            input=json.dumps(
                {"programs": programs, "allow_unisolated": allow_unisolated, "mark": mark}
            ),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env=env,
            cwd="/",
            user=user,
            group=user,
            extra_groups=[] if user is not None else None,
        )
    finally:
        if chroot:
            os.rmdir(jail)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@needs_root
def test_unprivileged_mode_holds_without_the_guard(
    targets: list[Path], unprivileged_copy: Path, nobody_python: str
) -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to start the unprivileged runs")
    mark = "llmeval-mark-" + secrets.token_hex(4)
    before = _snapshot(targets)
    names = sorted(HOSTILE)
    out = [str(t) for t in targets]
    results = _as_nobody(
        unprivileged_copy, nobody_python, [_program(HOSTILE[n], out, mark) for n in names]
    )
    assert len(results) == len(names)
    _assert_untouched(before, targets, mark, "the hostile programs (unprivileged mode)")
    for name, result in zip(names, results, strict=True):
        assert result["status"] != "error", (name, result["reason"])
        assert result["uid"] == NOBODY
        isolation = set(result["isolation"])  # type: ignore[call-overload]
        assert {"userns", "mountns", "readonly_fs"} <= isolation, (name, isolation)
        assert "uid" not in isolation


@needs_root
def test_unprivileged_mode_isolates_processes(unprivileged_copy: Path, nobody_python: str) -> None:
    """Not as root there is no uid of the run's own; its PID namespace keeps the user's other
    processes (the one that started the run among them) out of reach, and its end kills the
    processes it leaves behind, also those that left its session."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to start the unprivileged runs")
    mark = "llmeval-survivor-" + secrets.token_hex(4)
    signal_starter = (
        "import os, signal\n"
        "for pid in (DRIVER_PID, os.getppid()):\n"
        "    try: os.kill(pid, signal.SIGKILL); print('signalled', pid)\n"
        "    except OSError as exc: print(pid, exc.strerror)\n"
        "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
    )
    escapee = (
        "import os, sys\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        f"    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', "
        f"'{mark}'])\n"
        "import time; time.sleep(0.5)\n"
        "print('left a child behind')\n"
    )
    signalled, escaped = _as_nobody(
        unprivileged_copy, nobody_python, [signal_starter, escapee], mark=mark
    )
    assert "pidns" in signalled["isolation"]  # type: ignore[operator]
    out = str(signalled["stdout"]).splitlines()
    assert out[0].endswith("No such process"), out  # the driver: not in the namespace
    # Its parent is the namespace's init, which ignores signals sent from inside.
    assert out[1] == "signalled 1", out
    assert out[2] == "[1, 2]", out  # its own /proc lists the run's processes alone
    assert escaped["status"] == "passed", escaped["reason"]
    assert escaped["stdout"] == "left a child behind\n"
    assert escaped["survivors"] == []


@needs_root
def test_no_isolation_refuses_unless_allowed(
    targets: list[Path], unprivileged_copy: Path, nobody_python: str
) -> None:
    if shutil.which("setpriv") is None or shutil.which("unshare") is None:
        pytest.skip("setpriv and unshare (util-linux) are needed for this setup")
    out = [str(t) for t in targets]
    before = _snapshot(targets)
    mark = "llmeval-mark-" + secrets.token_hex(4)
    attack = _program(HOSTILE["os_open"], out, mark)
    (refused,) = _as_nobody(unprivileged_copy, nobody_python, [attack], chroot=True)
    assert refused["status"] == "error"
    reason = str(refused["reason"])
    assert "no filesystem isolation for the program" in reason
    assert "user namespace" in reason
    assert "--llm-set sandbox.allow_unisolated=true" in reason and HOW_TO_ALLOW in reason
    _assert_untouched(before, targets, mark, "a refused program")
    (allowed,) = _as_nobody(
        unprivileged_copy, nobody_python, ["print('ran')"], chroot=True, allow_unisolated=True
    )
    assert allowed["status"] == "passed", allowed["reason"]
    assert allowed["stdout"] == "ran\n"
    assert "readonly_fs" not in allowed["isolation"]  # type: ignore[operator]


def test_the_driver_needs_only_the_standard_library() -> None:
    """The unprivileged runs import the sandbox from a bare copy: it must stay stdlib-only."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", _DRIVER, str(SANDBOX_PACKAGE.parents[1])],
        input=json.dumps({"programs": ["print(1 + 1)"], "allow_unisolated": False}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (result,) = (json.loads(line) for line in done.stdout.splitlines())
    assert result["status"] == "passed", result["reason"]
    assert result["stdout"] == "2\n"
