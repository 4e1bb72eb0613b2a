"""The bootstrap: runs the program inside the sandbox (``python -s -S -B -u -c <this file>``).

Never imported by the test process; it is run from its source text by the sandbox
interpreter (Python >= 3.10), as the sandbox user, after the launcher's setup.

Descriptors: 3 is a pipe holding the run token (read once, closed before any program code
runs), 4 the program (JSON: a list of ``[filename, source]`` units), 5 the result channel.
``argv[1]`` is a JSON config. Lines written to the result channel:

    started                      before the first unit runs (everything earlier is trusted)
    ok <token>                   the last unit returned normally (written by the done hook)
    exit <status>                the program raised SystemExit
    exception <Type>: <message>  an exception escaped the program
    memory <Type>: <message>     a MemoryError escaped the program
    violation <what>             a checked program changed the builtins
    refused <event>: <detail>    the guard refused an operation (the first few)

The units run one after the other in one fresh ``__main__`` namespace, each compiled on its
own (so a completion cannot swallow the test code into an unterminated string).

**The completion signal.** The parent knows a check passed only from ``ok <token>``. The
token never exists in a form the program can reach. The done hook is compiled from source
with the token line as a constant; everything else it uses is a constant or an immutable
keyword default, and its globals are an empty private dict. It is registered with
``sys.addaudithook`` (hooks cannot be listed or removed), and it writes the line only when
the ``done`` event is raised by the bootstrap's own frame *at the line after the units*
(checked with ``frame.f_lineno``, which only a trace function could change, and the guard
refuses those) in the original process. Reading the token back would need the hook's code
object: through ``gc`` (refused), ``frame.f_code`` of the hook's frame (refused, also from a
signal handler that interrupts the hook), or process memory (``/proc`` is refused; ``ctypes``
cannot load). So ``sys.exit(0)``, ``os._exit(0)``, ``atexit`` handlers, patched ``check`` /
``sys.exit`` / ``AssertionError`` / trace functions and forged result lines all end as "not
passed". A checked run that changed the builtins module or its ``__builtins__`` (e.g.
replaced ``__import__`` or ``abs``) after any unit is not passed either.

**The guard** (an audit hook, installed unless the parent disables it for tests of the OS
layers) refuses: writes, deletions, renames and attribute changes outside the working
directory; reads outside it except the standard library, ``/usr``, ``/etc``, ``/lib*`` and
a few devices (so not ``/proc``, ``/home``, ``/root``); symlinks and hard links; directory
descriptors outside the working directory; process creation (``fork``, ``exec*``,
``posix_spawn``, ``system``, ``subprocess.Popen``); signals to other process groups; sockets
other than ``AF_UNIX`` ones, any ``connect``/``bind``/``sendto``, name lookups; ``gc``
object listing, ``settrace`` / ``setprofile`` / ``sys.monitoring``, other threads' frames;
``ctypes`` calls; importing ``ctypes``, sub-interpreters and the ``_test*`` modules.
``_posixsubprocess.fork_exec``, ``os.pidfd_open`` and ``signal.pidfd_send_signal``, which act
without an audit event, are replaced by refusing stubs, and importing their modules afresh is
refused. The guard stops ordinary code; a program written to defeat it through the
interpreter's internals (``importlib`` can re-create a built-in module without an ``import``
event, for one) may get past it. As root, the kernel-level layers (own uid, namespaces,
rlimits) do not depend on it.
"""

from __future__ import annotations

import builtins
import json
import linecache
import os
import signal
import stat
import sys
import traceback
import types
from collections.abc import Callable, Mapping
from typing import Any, Protocol

DONE_EVENT = "pytest_llmeval.sandbox.done"
_AF_UNIX = 1
_MAX_REFUSALS = 8
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

# Everything the done hook uses is a constant of its code or an immutable keyword default:
# its globals (a private dict, used only to recognise its frames) hold nothing it reads.
_DONE_HOOK = """
def done_hook(event, args, *, _done=DONE, _getpid=getpid, _pid=PID, _frame=FRAME, _write=write):
    if event == _done and _getpid() == _pid and _frame.f_lineno == {done_line!r}:
        _write({fd!r}, {line!r})
"""

_PROCESS_EVENTS = frozenset(
    {
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.startfile",
        "subprocess.Popen",
        "pty.spawn",
        "webbrowser.open",
    }
)
_INTROSPECTION_EVENTS = frozenset(
    {
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "sys._current_frames",
        "sys._current_exceptions",
        "sys.settrace",
        "sys.setprofile",
        "sys._settraceallthreads",
        "sys._setprofileallthreads",
        "cpython.PyInterpreterState_New",
    }
)
_NETWORK_EVENTS = frozenset(
    {
        "socket.bind",
        "socket.connect",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyname_ex",
        "socket.gethostbyaddr",
        "socket.getnameinfo",
        "socket.getservbyname",
        "socket.getservbyport",
        "socket.sethostname",
    }
)
_BLOCKED_MODULES = frozenset(
    {
        "ctypes",
        "_ctypes",
        "_posixsubprocess",
        "posix",
        "_signal",
        "_xxsubinterpreters",
        "_xxinterpchannels",
        "_interpreters",
        "_interpchannels",
        "_interpqueues",
    }
)
_BLOCKED_PREFIXES = ("_test", "ctypes.")
# event -> (indexes of path arguments, index of the dir_fd argument or None); read-only, as
# the guard's other tables: it binds them, and a program can reach this module's globals.
_PATH_EVENTS: Mapping[str, tuple[tuple[int, ...], int | None]] = types.MappingProxyType(
    {
        "os.remove": ((0,), 1),
        "os.rmdir": ((0,), 1),
        "os.mkdir": ((0,), 2),
        "os.chmod": ((0,), 2),
        "os.chown": ((0,), 3),
        "os.utime": ((0,), 3),
        "os.truncate": ((0,), None),
        "os.chflags": ((0,), None),
        "os.lchflags": ((0,), None),
        "os.setxattr": ((0,), None),
        "os.removexattr": ((0,), None),
        "shutil.rmtree": ((0,), 1),
    }
)
_READ_ROOTS = ("/usr", "/lib", "/lib32", "/lib64", "/etc", "/bin")
_READ_FILES = frozenset({"/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"})


def _read_fd(fd: int) -> bytes:
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


class _Refuse(Protocol):
    def __call__(self, event: str, detail: str, error: type[Exception] = ...) -> None: ...


_Check = Callable[[str, tuple[Any, ...]], None]


def _make_policy(
    workdir: str,
    read_roots: tuple[str, ...],
    report: Callable[[str], None],
    hook_globals: dict[str, Any],
) -> _Check:
    """The guard's audit hook. Everything it calls or reads is bound here, before program
    code runs, so that patching ``os``, ``os.path``, the builtins or this module's globals
    (which a program reaches through its frames' ``f_globals``) cannot change its decisions.

    The helpers that build its checks (:func:`_refuser`, :func:`_path_checks`,
    :func:`_signal_check`) run here too, and bind what their checks use the same way."""
    refuse = _refuser(report)
    on_open, on_path, on_rename, on_listing = _path_checks(workdir, read_roots, refuse)
    on_signal = _signal_check(refuse)
    _isinstance, _str, _getattr, _import_error = isinstance, str, getattr, ImportError
    path_events, process_events, network_events = _PATH_EVENTS, _PROCESS_EVENTS, _NETWORK_EVENTS
    introspection_events, af_unix = _INTROSPECTION_EVENTS, _AF_UNIX
    blocked_modules, blocked_prefixes = _BLOCKED_MODULES, _BLOCKED_PREFIXES

    def policy(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            on_open(event, args)
        elif event in path_events:
            on_path(event, args)
        elif event == "os.rename":
            on_rename(event, args)
        elif event in ("os.link", "os.symlink"):
            refuse(event, "links are not allowed")
        elif event in ("os.listdir", "os.scandir"):
            on_listing(event, args)
        elif event in ("os.kill", "os.killpg"):
            on_signal(event, args)
        elif event in process_events:
            refuse(event, "no new processes")
        elif event == "socket.__new__":
            if args[1] != af_unix:
                refuse(event, f"socket family {args[1]}")
        elif event in network_events:
            refuse(event, "no network")
        elif event in introspection_events or event.startswith(("sys.monitoring", "ctypes.")):
            refuse(event, "interpreter internals")
        elif event == "import":
            module = args[0]
            if _isinstance(module, _str) and (
                module in blocked_modules or module.startswith(blocked_prefixes)
            ):
                refuse(event, module, _import_error)
        elif (
            event == "object.__getattr__"
            and args[1] == "f_code"
            and _getattr(args[0], "f_globals", None) is hook_globals
        ):
            refuse(event, "the done hook's code")

    return policy


def _refuser(report: Callable[[str], None]) -> _Refuse:
    """Refuse an operation: report it (the first few times) and raise."""
    _permission_error, max_refusals = PermissionError, _MAX_REFUSALS
    refusals = [0]

    def refuse(event: str, detail: str, error: type[Exception] = _permission_error) -> None:
        if refusals[0] < max_refusals:
            refusals[0] += 1
            report(f"refused {event}: {detail}\n")
        raise error(f"sandbox: {event} is not allowed ({detail})")

    return refuse


def _path_resolver() -> tuple[
    Callable[[Any], str | None],
    Callable[[int], str | None],
    Callable[[str, Any], str],
    Callable[[str, bool], str],
]:
    """``text`` (an event's path argument as a string, None for a descriptor), ``fd_path``
    (where a descriptor points), ``absolute`` (a path relative to a dir_fd or the current
    directory) and ``resolve`` (``os.path.realpath``), with the functions bound here."""
    getcwd, lstat, readlink, fspath = os.getcwd, os.lstat, os.readlink, os.fspath
    s_islnk = stat.S_ISLNK
    _isinstance, _str, _bytes, _int, _os_error = isinstance, str, bytes, int, OSError

    def text(path: Any) -> str | None:
        if _isinstance(path, _int):
            return None
        path = fspath(path)
        if _isinstance(path, _bytes):
            path = path.decode("utf-8", "surrogateescape")
        return _str(path)

    def fd_path(fd: int) -> str | None:
        try:
            target = readlink(f"/proc/self/fd/{fd}")
        except _os_error:
            return None
        return target if target.startswith("/") else None

    def absolute(path: str, dir_fd: Any) -> str:
        if path.startswith("/"):
            return path
        if _isinstance(dir_fd, _int) and dir_fd >= 0:
            base = fd_path(dir_fd)
            if base is None:
                return "/nonexistent-dir-fd/" + path
        else:
            base = getcwd()
        return base.rstrip("/") + "/" + path

    def resolve(path: str, follow_last: bool = True) -> str:
        """``os.path.realpath`` on an absolute path, with the functions bound above."""
        todo = path.split("/")[::-1]
        done: list[str] = []
        links = 0
        while todo:
            part = todo.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            here = "/" + "/".join([*done, part])
            if not todo and not follow_last:
                done.append(part)
                break
            try:
                mode = lstat(here).st_mode
            except _os_error:
                done.append(part)
                continue
            if s_islnk(mode):
                links += 1
                if links > 40:
                    return "/nonexistent-symlink-loop"
                target = readlink(here)
                if target.startswith("/"):
                    done = []
                todo.extend(target.split("/")[::-1])
                continue
            done.append(part)
        return "/" + "/".join(done)

    return text, fd_path, absolute, resolve


def _path_checks(
    workdir: str, read_roots: tuple[str, ...], refuse: _Refuse
) -> tuple[_Check, _Check, _Check, _Check]:
    """The filesystem family: ``open``, the events that change a path, ``os.rename`` and
    the directory listings. Writes stay inside ``workdir``; reads inside it, under
    ``read_roots`` or of a few devices."""
    text, fd_path, absolute, resolve = _path_resolver()
    lstat, s_isdir = os.lstat, stat.S_ISDIR
    _isinstance, _int, _any, _os_error = isinstance, int, any, OSError
    path_events, write_flags, read_files = _PATH_EVENTS, _WRITE_FLAGS, _READ_FILES
    workdir_prefix = workdir.rstrip("/") + "/"
    read_prefixes = tuple(root.rstrip("/") + "/" for root in read_roots)

    def inside(path: str) -> bool:
        return path == workdir or path.startswith(workdir_prefix)

    def readable(path: str) -> bool:
        return (
            inside(path)
            or path in read_files
            or path in read_roots
            or _any(path.startswith(prefix) for prefix in read_prefixes)
        )

    def mutable(event: str, path: Any, dir_fd: Any, follow_last: bool = False) -> None:
        """Refuse unless ``path`` (relative to ``dir_fd``) is inside the working directory."""
        if _isinstance(path, _int):
            target = fd_path(path)
            if target is not None and not inside(resolve(target, True)):
                refuse(event, target)
            return
        name = text(path)
        if name is None:
            return
        where = resolve(absolute(name, dir_fd), follow_last)
        if not inside(where):
            refuse(event, where)

    def on_open(event: str, args: tuple[Any, ...]) -> None:
        path, mode, flags = args[0], args[1], args[2]
        name = text(path) if path is not None else None
        if name is None:
            return
        raw = mode is None  # os.open: may carry a dir_fd that the event does not show
        if raw and not name.startswith("/") and ".." in name.split("/"):
            refuse(event, f"relative path with '..': {name}")
        where = resolve(absolute(name, None), True)
        writing = _isinstance(flags, _int) and flags & write_flags
        if writing:
            if not (inside(where) or where == "/dev/null"):
                refuse(event, f"writing {where}")
        elif not readable(where):
            refuse(event, f"reading {where}")
        if raw and not inside(where):
            try:
                is_dir = s_isdir(lstat(where).st_mode)
            except _os_error:
                is_dir = False
            if is_dir:
                refuse(event, f"directory descriptor {where}")

    def on_path(event: str, args: tuple[Any, ...]) -> None:
        indexes, dir_fd_index = path_events[event]
        dir_fd = args[dir_fd_index] if dir_fd_index is not None else None
        for index in indexes:
            mutable(event, args[index], dir_fd)

    def on_rename(event: str, args: tuple[Any, ...]) -> None:
        mutable(event, args[0], args[2])
        mutable(event, args[1], args[3])

    def on_listing(event: str, args: tuple[Any, ...]) -> None:
        name = text(args[0]) if args and args[0] is not None else None
        if name is not None and not readable(resolve(absolute(name, None), True)):
            refuse(event, name)

    return on_open, on_path, on_rename, on_listing


def _signal_check(refuse: _Refuse) -> _Check:
    """Signals go only to the program's own process or process group."""
    getpid, getpgrp = os.getpid, os.getpgrp
    _isinstance, _int = isinstance, int

    def on_signal(event: str, args: tuple[Any, ...]) -> None:
        target = args[0]
        if not _isinstance(target, _int):
            return
        own = getpgrp()
        if event == "os.kill" and target in (getpid(), 0, -own):
            return
        if event == "os.killpg" and target in (0, own):
            return
        refuse(event, f"signal to {target}")

    return on_signal


def _arm(config: dict[str, Any], report: Callable[[str], None]) -> None:
    """Install the guard and the done hook; read (and forget) the token.

    Called by :func:`main`, whose frame is the one allowed to raise the done event."""
    token = _read_fd(config["token_fd"]).decode("ascii").strip()
    hook_globals: dict[str, Any] = {
        "__builtins__": {},
        "DONE": DONE_EVENT,
        "getpid": os.getpid,
        "PID": os.getpid(),
        "FRAME": sys._getframe(1),
        "write": os.write,
    }
    source = _DONE_HOOK.format(
        done_line=int(config["done_line"]),
        fd=int(config["result_fd"]),
        line=f"ok {token}\n".encode("ascii"),
    )
    del token
    exec(compile(source, "<sandbox>", "exec", dont_inherit=True), hook_globals)
    done_hook = hook_globals["done_hook"]
    del source
    # The defaults are bound; the globals keep only what identifies the hook's frames.
    hook_globals.clear()
    hook_globals["__builtins__"] = {}
    roots = {*_READ_ROOTS, sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix}
    roots.update(entry for entry in sys.path if entry)
    read_roots = tuple(sorted({os.path.realpath(root) for root in roots}))
    workdir = os.path.realpath(config["workdir"])
    sys.addaudithook(_make_policy(workdir, read_roots, report, hook_globals))
    sys.addaudithook(done_hook)


def _disable_unaudited_calls(report: Callable[[str], None]) -> None:
    """Replace the calls that start or signal processes without an audit event by ones that
    refuse: ``_posixsubprocess.fork_exec`` (so ``subprocess`` and ``asyncio`` still import),
    ``os.pidfd_open`` and ``signal.pidfd_send_signal``. Importing these modules afresh is
    refused by the guard."""
    spawner: types.ModuleType | None
    try:
        import _posixsubprocess as spawner
    except ImportError:
        spawner = None
    for module, name in (
        (spawner, "fork_exec"),
        (os, "pidfd_open"),
        (sys.modules.get("posix"), "pidfd_open"),
        (signal, "pidfd_send_signal"),
        (sys.modules.get("_signal"), "pidfd_send_signal"),
    ):
        if module is not None and hasattr(module, name):
            setattr(module, name, _refusing(f"{module.__name__}.{name}", report))


def _refusing(name: str, report: Callable[[str], None]) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        report(f"refused {name}: no new processes or signals\n")
        raise PermissionError(f"sandbox: {name} is not allowed")

    refused.__name__ = refused.__qualname__ = name.rpartition(".")[2]
    return refused


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    try:  # noqa: SIM105 (the program may have patched contextlib)
        sys.stderr.write(f"{code}\n")
    except Exception:
        pass
    return 1


def _first_line(exc: BaseException) -> str:
    try:
        message = str(exc).strip().splitlines()
    except Exception:
        message = []
    name = type(exc).__name__
    return f"{name}: {message[0][:300]}" if message else name


def _tampering(
    snapshot: tuple[tuple[str, Any], ...],
    current: dict[str, Any],
    namespace: dict[str, Any],
    module: types.ModuleType,
    missing: object,
) -> str | None:
    """What the program changed in the builtins its tests rely on, if anything.

    Uses no builtin function (the program may have replaced them): only the arguments,
    bound before the program ran, and methods of built-in types."""
    changed = [key for key, value in snapshot if current.get(key, missing) is not value]
    if changed or current.__len__() != snapshot.__len__():
        return "the program changed builtins: " + (", ".join(changed)[:200] or "added names")
    if namespace.get("__builtins__") is not module:
        return "the program replaced __builtins__"
    return None


def main() -> int:
    config: dict[str, Any] = json.loads(sys.argv[1])
    write, result_fd, getpid, run = os.write, config["result_fd"], os.getpid, exec
    pid = getpid()
    base_exception, system_exit, memory_error = BaseException, SystemExit, MemoryError

    def report(line: str) -> None:
        if getpid() == pid:
            try:  # noqa: SIM105 (the program may have patched contextlib)
                write(result_fd, line.encode("utf-8", "replace"))
            except OSError:
                pass

    units = json.loads(_read_fd(config["program_fd"]))
    if "" in sys.path:
        sys.path.remove("")
    if config["guard"]:
        _disable_unaudited_calls(report)
    # -S skips site, which defines exit() and quit(); programs may call them.
    vars(builtins).update(exit=sys.exit, quit=sys.exit)
    module = types.ModuleType("__main__")
    namespace = module.__dict__
    namespace["__builtins__"] = builtins
    sys.modules["__main__"] = module
    sys.argv = [units[0][0] if units else "program.py"]
    codes = []
    try:
        for filename, source in units:
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            codes.append(compile(source, filename, "exec", dont_inherit=True))
    except (SyntaxError, ValueError) as exc:
        report("started\n")
        report(f"exception {_first_line(exc)}\n")
        traceback.print_exception(type(exc), exc, None)
        return 1
    check, missing, real_builtins = config["check"], object(), vars(builtins)
    snapshot, builtins_module = tuple(real_builtins.items()), builtins
    token_line = b""
    if config["guard"]:
        _arm(config, report)
    else:
        token_line = b"ok " + _read_fd(config["token_fd"]).strip() + b"\n"
    audit, tampering = sys.audit, _tampering
    report("started\n")
    try:
        for code in codes:
            run(code, namespace)
            problem = (
                tampering(snapshot, real_builtins, namespace, builtins_module, missing)
                if check
                else None
            )
            if problem is not None:
                report(f"violation {problem}\n")
                return 1
    except system_exit as exc:
        status = _exit_status(exc.code)
        report(f"exit {status}\n")
        return status
    except memory_error as exc:
        report(f"memory {_first_line(exc)}\n")
        _print_traceback(exc)
        return 1
    except base_exception as exc:
        report(f"exception {_first_line(exc)}\n")
        _print_traceback(exc)
        return 1
    if getpid() != pid:  # a forked copy (only possible without the guard)
        return 0
    if token_line:
        write(result_fd, token_line)
    audit(DONE_EVENT)  # sandbox:done-line
    return 0


def _print_traceback(exc: BaseException) -> None:
    """Print the traceback without the bootstrap's own frame."""
    try:
        tb = exc.__traceback__
        traceback.print_exception(type(exc), exc, tb.tb_next if tb is not None else None)
    except BaseException:
        pass


if __name__ == "__main__":
    raise SystemExit(main())
