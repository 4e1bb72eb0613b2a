"""The environment a run happened in, and the part of it that must not drift between runs.

:func:`environment_record` is the full snapshot written with a run (interpreter, OS, CPU,
library versions, CUDA, git state of the evaluated code and of the model, the model's
fingerprint). :func:`drift_fingerprint` keeps the subset that determines scores as a flat
dict of dotted keys, so that a snapshot diff reads ``'libraries.transformers': '4.38.2'``
-> ``'4.40.0'``; :func:`describe_drift` says the same in plain lines.

Nothing here imports pytest or torch: CUDA details are read only when torch is already
imported, and library versions come from installed package metadata.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any

from pytest_llmeval.record._hash import HashCache, model_fingerprint

SUBPROCESS_TIMEOUT = 10.0

LIBRARIES = (
    "torch",
    "transformers",
    "accelerate",
    "datasets",
    "tokenizers",
    "safetensors",
    "numpy",
    "jinja2",
    "pyyaml",
    "pytest",
    "pytest-xdist",
    "syrupy",
    "gguf",
    "pytest-llm-evaluation",
)
"""Distributions whose versions are recorded (besides python itself)."""

DRIFT_LIBRARIES = (
    "python",
    "torch",
    "transformers",
    "accelerate",
    "datasets",
    "tokenizers",
    "safetensors",
)
"""Library versions that are part of the drift fingerprint."""

VOLATILE_FIELDS = (
    "hostname",
    "cpu",
    "cpu_count",
    "os",
    "git.code",
    "git.model",
    "cuda.available",
    "cuda.driver",
    "cuda.gpus",
    "cuda.reason",
    "model.files",
    "model.total_bytes",
)
"""Dotted fields of an environment record that legitimately vary between runs and are
excluded from drift checks (a field also covers everything under it: ``git.code`` covers
``git.code.commit``). The machine (hostname, CPU, kernel) varies between CI runners; the
git state of the evaluated code changes with every commit and is recorded, not compared
(the model's identity is compared through ``model.sha256``); GPU names and driver versions
vary between machines of one CUDA version. Besides these, any path-like field (a key
ending in ``path`` or ``dir``, or a :class:`~pathlib.PurePath` value) is volatile."""

_PATH_KEY = re.compile(r"(^|_)(path|dir|cwd|rootdir)$")


def _run(args: list[str], cwd: Path | None = None) -> str | None:
    """stdout of a command (stripped), or None when it fails, times out or is missing."""
    env = {
        k: v
        for k, v in os.environ.items()
        # A caller's repository (e.g. pytest run from a git hook) must not replace the one
        # that contains ``cwd``.
        if k
        not in (
            "GIT_DIR",
            "GIT_WORK_TREE",
            "GIT_INDEX_FILE",
            "GIT_OBJECT_DIRECTORY",
            "GIT_ALTERNATE_OBJECT_DIRECTORIES",
            "GIT_COMMON_DIR",
            "GIT_PREFIX",
        )
    }
    env["LC_ALL"] = "C"
    env["GIT_OPTIONAL_LOCKS"] = "0"  # `git status` must not take the index lock
    try:
        proc = subprocess.run(
            args,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.strip()


def git_info(path: Path, *, tracked: bool = False) -> dict[str, Any] | None:
    """The git state of the work tree containing ``path`` (a file or a folder).

    ``{"commit": full sha, "short": 7 chars, "dirty": bool, "branch": name or None}``;
    ``dirty`` means uncommitted changes to tracked files (untracked files do not count);
    ``branch`` is None on a detached HEAD; ``commit`` and ``short`` are None before the
    first commit. None when ``path`` does not exist, is not in a work tree, or git is
    missing; never raises. With ``tracked``, also None when git tracks no file at or under
    ``path``: a model folder that is ignored or untracked inside a project's work tree is
    not versioned by that project's commit.
    """
    try:
        path = Path(path)
        if not path.exists():
            return None
        folder = path if path.is_dir() else path.parent
    except OSError:
        return None
    git = shutil.which("git")
    if git is None:
        return None
    if _run([git, "rev-parse", "--is-inside-work-tree"], folder) != "true":
        return None
    # (the pathspec relative to the folder git runs in: a relative path is not)
    if tracked and not _run([git, "ls-files", "--", "." if path.is_dir() else path.name], folder):
        return None
    commit = _run([git, "rev-parse", "--verify", "-q", "HEAD"], folder) or None
    branch = _run([git, "symbolic-ref", "--short", "-q", "HEAD"], folder) or None
    status = _run([git, "status", "--porcelain", "--untracked-files=no"], folder)
    if status is None:
        return None
    return {
        "commit": commit,
        "short": commit[:7] if commit else None,
        "dirty": bool(status),
        "branch": branch,
    }


def library_versions() -> dict[str, str | None]:
    """Versions of python and of :data:`LIBRARIES` from installed package metadata (None
    when not installed); nothing is imported."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _nvidia_driver() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    out = _run([smi, "--query-gpu=driver_version", "--format=csv,noheader"])
    if not out:
        return None
    return out.splitlines()[0].strip() or None


def cuda_info() -> dict[str, Any]:
    """CUDA as torch sees it, read only when torch is already imported (never imports it).

    ``{"available": bool, "cuda": torch.version.cuda, "cudnn": cuDNN version or None,
    "driver": NVIDIA driver version (from nvidia-smi) or None, "gpus": [device names]}``,
    or ``{"available": None, "reason": "torch not loaded"}``.
    """
    torch: Any = sys.modules.get("torch")
    if torch is None:
        return {"available": None, "reason": "torch not loaded"}
    try:
        available = bool(torch.cuda.is_available())
    except Exception:
        available = False
    try:
        cuda = torch.version.cuda
    except Exception:
        cuda = None
    cudnn = None
    if available:
        try:
            cudnn = torch.backends.cudnn.version()
        except Exception:
            cudnn = None
    gpus: list[str] = []
    if available:
        try:
            gpus = [str(torch.cuda.get_device_name(i)) for i in range(torch.cuda.device_count())]
        except Exception:
            gpus = []
    return {
        "available": available,
        "cuda": None if cuda is None else str(cuda),
        "cudnn": cudnn,
        "driver": _nvidia_driver(),
        "gpus": gpus,
    }


def _cpu_name() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def environment_record(
    code_dir: Path, model_dir: Path | None = None, hash_cache: HashCache | None = None
) -> dict[str, Any]:
    """The full environment snapshot of a run (JSON-able).

    Keys: ``python``, ``implementation``, ``os``, ``machine``, ``cpu``, ``cpu_count``,
    ``hostname``, ``libraries`` (:func:`library_versions`), ``cuda`` (:func:`cuda_info`),
    ``git`` (``{"code": git_info(code_dir), "model": git_info(model_dir, tracked=True)}``)
    and ``model`` (:func:`~pytest_llmeval.record._hash.model_fingerprint` of ``model_dir``, through
    ``hash_cache``; None without a model directory).
    """
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "os": platform.platform(),
        "machine": platform.machine(),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "hostname": socket.gethostname(),
        "libraries": library_versions(),
        "cuda": cuda_info(),
        "git": {
            "code": git_info(code_dir),
            "model": git_info(model_dir, tracked=True) if model_dir is not None else None,
        },
        "model": model_fingerprint(model_dir, hash_cache) if model_dir is not None else None,
    }


def flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one mapping of dotted keys; lists and empty mappings are leaves."""
    flat: dict[str, Any] = {}
    for key, item in value.items():
        dotted = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            flat.update(flatten(item, dotted + "."))
        else:
            flat[dotted] = item
    return flat


def is_volatile(key: str, value: object = None) -> bool:
    """Whether a dotted field is excluded from drift checks (see :data:`VOLATILE_FIELDS`)."""
    if isinstance(value, PurePath):
        return True
    if any(key == f or key.startswith(f + ".") for f in VOLATILE_FIELDS):
        return True
    return bool(_PATH_KEY.search(key.rsplit(".", 1)[-1].lower()))


def drift_fingerprint(env: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """What must not drift between runs, as a flat dict of dotted keys, sorted.

    From ``env`` (an :func:`environment_record`): ``libraries.<name>`` for
    :data:`DRIFT_LIBRARIES`, ``cuda.cuda`` and ``model.sha256`` (None when unknown: torch
    not loaded, no model). Then ``extra`` (dtype, device type, per-task config and prompt
    hashes...), nested mappings flattened to dotted keys. Volatile fields
    (:func:`is_volatile`) are left out. A key of ``extra`` that collides with one taken
    from ``env`` is a ``ValueError``.
    """
    libraries: Mapping[str, Any] = env.get("libraries") or {}
    cuda: Mapping[str, Any] = env.get("cuda") or {}
    model: Mapping[str, Any] = env.get("model") or {}
    flat: dict[str, Any] = {f"libraries.{name}": libraries.get(name) for name in DRIFT_LIBRARIES}
    flat["cuda.cuda"] = cuda.get("cuda")
    flat["model.sha256"] = model.get("sha256")
    for key, value in flatten(extra).items():
        if key in flat:
            raise ValueError(f"drift_fingerprint: extra key {key!r} collides with the record")
        flat[key] = value
    return {k: v for k, v in sorted(flat.items()) if not is_volatile(k, v)}


_HEX = re.compile(r"[0-9a-f]{16,}")


def _fmt(value: object) -> str:
    if isinstance(value, str) and _HEX.fullmatch(value):
        return value[:12] + "…"
    return str(value)


def _label(key: str) -> str:
    return key.removeprefix("libraries.")


def describe_drift(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Plain lines for the differences between two drift fingerprints, in key order:
    ``transformers 4.38.2 -> 4.40.0``, ``model.sha256 3f2a9c0d1e4b… -> 77b0c1d2e3f4…``,
    ``added: dtype = bfloat16``, ``removed: device = cuda``. Empty when they are equal."""
    lines: list[str] = []
    for key in sorted(set(old) | set(new)):
        if key not in new:
            lines.append(f"removed: {_label(key)} = {_fmt(old[key])}")
        elif key not in old:
            lines.append(f"added: {_label(key)} = {_fmt(new[key])}")
        elif old[key] != new[key]:
            lines.append(f"{_label(key)} {_fmt(old[key])} -> {_fmt(new[key])}")
    return lines
