"""When a finished item of an interrupted run may be reused instead of computed again.

An item is reused only when everything that produced its record is unchanged:

- the run's **resume key** (:func:`resume_key`): the task's config hash (spec, prompt
  presentation, model weights digest, dtype, device type, batch size, seed, library
  versions), the code that scored it (this package's version and a digest of its source
  files, and the git commit and dirty flag of the checkout it runs from and of the project
  directory), the number of repeats and of determinism reruns, and the model settings
  outside the config hash (:func:`resume_settings`): the device map, a digest of the
  tokenizer's files (:func:`tokenizer_digest`), the revision stated for a served model,
  and for a generative task the decode step and prompt-lookup draft length;
- the item's **content digests** (:func:`same_content`): its source record (``doc_hash``),
  the exact prompt text (``prompt_hash``) and what it is scored against (``target_hash``).

An edited data file therefore recomputes exactly the items whose rows (or prompts, when
few-shot examples change) changed; the data files' own digests are recorded in the run's
config (:func:`data_files`) but do not decide reuse, as they cannot say which items changed.
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.metadata
import os
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from pytest_llmeval.record._env import git_info
from pytest_llmeval.record._hash import (
    TOKENIZER_PATTERNS,
    HashCache,
    file_sha256,
    stable_hash,
)

DIGEST_FIELDS = ("doc_hash", "prompt_hash", "target_hash")
DISTRIBUTION = "pytest-llm-evaluation"


@lru_cache(maxsize=1)
def package_identity() -> dict[str, Any]:
    """This package as it runs: its version, a SHA256 over its source files (so an edited
    scorer or extractor counts even before it is committed) and the git state of the
    checkout it is imported from (None when installed from a wheel)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    try:
        version: str | None = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        version = None
    git = git_info(root)
    return {
        "name": DISTRIBUTION,
        "version": version,
        "source_sha256": digest.hexdigest(),
        "git": {"commit": git.get("commit"), "dirty": git.get("dirty")} if git else None,
    }


@lru_cache(maxsize=1)
def backend_code_digest() -> str:
    """SHA256 over the source files of this package's model backends (``model/``): the code
    that turns requests into numbers."""
    root = Path(__file__).resolve().parents[1] / "model"
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


# Fields of a backend's info() that change while a run goes on (the decode step that ran,
# batch sizes found by width) or name where rather than what (the model's path and alias):
# the model's digest stands for them.
_PASSING_INFO = ("decode_step", "batch_size_by_width", "model_path", "model")


def model_call_key(
    info: Mapping[str, Any],
    model_sha256: str | None,
    model_revision: str | None,
    extra: Mapping[str, Any],
) -> str:
    """The key of a model's answers to given requests (a contamination probe's chunks,
    ``contamination._resume``): what decides the numbers beside the requests themselves,
    which are digested whole: the model (its files' digest, or the revision stated for a
    served model), the backend's settings and versions as its ``info()`` states them
    (dtype, device, batch size, BOS policy, decoding, decode plan, engine, torch and
    transformers), and the backend code (:func:`backend_code_digest`). Not the rest of the
    package nor the project's commit: they decide what is asked, which the requests'
    digest already holds, and a probe's statistics or messages do not change an answer."""
    stable = {k: v for k, v in info.items() if k not in _PASSING_INFO}
    return stable_hash(
        {
            "info": stable,
            "model_sha256": model_sha256,
            "model_revision": model_revision,
            "backend_code": backend_code_digest(),
            **extra,
        },
        length=16,
    )


def run_identity(code_dir: Path, repeat: int, check_determinism: int) -> dict[str, Any]:
    """What besides the task config decides an item's record: the package, the project's
    git commit (and dirty flag), and the run settings that shape item records."""
    git = git_info(code_dir)
    return {
        "package": package_identity(),
        "project_git": {"commit": git.get("commit"), "dirty": git.get("dirty")} if git else None,
        "repeat": repeat,
        "check_determinism": check_determinism,
    }


def resume_key(
    config_hash: str, identity: Mapping[str, Any], settings: Mapping[str, Any] | None = None
) -> str:
    """The key an item record must carry to be reused: its task's config hash, the run
    identity (:func:`run_identity`) and the model settings outside the config hash
    (:func:`resume_settings`)."""
    key: dict[str, Any] = {"config_hash": config_hash, "identity": identity}
    if settings is not None:
        key["settings"] = settings
    return stable_hash(key, length=16)


def tokenizer_digest(
    model_dir: Path, known: Mapping[str, str] | None = None, cache: HashCache | None = None
) -> dict[str, Any] | None:
    """SHA256 of each tokenizer file in ``model_dir`` (:data:`TOKENIZER_PATTERNS`), by
    relative path, and one digest over them; None when the directory has none.

    ``known``: digests already taken (``model_fingerprint(...)["files"]``) are reused, the
    others are streamed through ``cache`` (the model fingerprint's path/size/mtime cache),
    so a model's files are not read twice."""
    files: dict[str, str] = {}
    for root, dirs, names in os.walk(model_dir):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in names:
            if name.startswith(".") or not any(
                fnmatch.fnmatchcase(name, p) for p in TOKENIZER_PATTERNS
            ):
                continue
            path = Path(root, name)
            if not path.is_file():
                continue
            rel = path.relative_to(model_dir).as_posix()
            digest = (known or {}).get(rel)
            files[rel] = digest if digest is not None else file_sha256(path, cache)
    if not files:
        return None
    combined = hashlib.sha256()
    for rel in sorted(files):
        combined.update(f"{rel}:{files[rel]}\n".encode())
    return {"files": dict(sorted(files.items())), "sha256": combined.hexdigest()}


def resume_settings(
    info: Mapping[str, Any],
    tokenizer: Mapping[str, Any] | None,
    model_revision: str | None,
    generative: bool,
) -> dict[str, Any]:
    """What besides the config hash decides an item's result on this model (part of its
    resume key): the device map (``info``: the backend's), the tokenizer files' digest,
    the revision stated for a served model (``openai.model_revision``) and, for a
    generative task, how decode steps run (the step and the prompt-lookup draft length;
    greedy outputs were identical across them in the project's tests, but a different
    summation order can change a token)."""
    settings: dict[str, Any] = {
        "device_map": info.get("device_map"),
        "tokenizer_sha256": (tokenizer or {}).get("sha256"),
        "model_revision": model_revision,
    }
    if info.get("engine") is not None:
        settings["engine"] = info["engine"]  # the vllm backend's engine (model/_vllm.py)
    if generative:
        plan = info.get("decode_plan") or info.get("decode_step") or {}
        settings["decode_step"] = plan.get("step")
        settings["prompt_lookup"] = plan.get("prompt_lookup")
    return settings


def same_content(record: Mapping[str, Any], digests: Mapping[str, str]) -> bool:
    """Whether a stored item record was computed from the item as it is now."""
    for name in DIGEST_FIELDS:
        now = digests.get(name)
        if now is None or record.get(name) != now:
            return False
    return True


def data_files(paths: Iterable[Path], data_dirs: Iterable[Path] = ()) -> dict[str, str]:
    """SHA256 of each data file a task read (for the record; see the module docstring), by
    its path relative to the data directory it was found in (so records of one data copy
    compare equal on any machine), or its absolute path."""
    bases = [Path(d) for d in data_dirs]
    out: dict[str, str] = {}
    for path in sorted(set(paths)):
        h = hashlib.sha256()
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        name = str(path)
        for base in bases:
            try:
                name = path.relative_to(base).as_posix()
                break
            except ValueError:
                continue
        out[name] = h.hexdigest()
    return out
