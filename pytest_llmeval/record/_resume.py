"""When a finished item of an interrupted run may be reused instead of computed again.

An item is reused only when everything that produced its record is unchanged:

- the run's **resume key** (:func:`resume_key`): the task's config hash (spec, prompt
  presentation, model weights digest, dtype, device type, batch size, seed, library
  versions), the code that scored it (this package's version and a digest of its source
  files, and the git commit and dirty flag of the checkout it runs from and of the project
  directory), the number of repeats and of determinism reruns;
- the item's **content digests** (:func:`same_content`): its source record (``doc_hash``),
  the exact prompt text (``prompt_hash``) and what it is scored against (``target_hash``).

An edited data file therefore recomputes exactly the items whose rows (or prompts, when
few-shot examples change) changed; the data files' own digests are recorded in the run's
config (:func:`data_files`) but do not decide reuse, as they cannot say which items changed.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from pytest_llmeval.record._env import git_info
from pytest_llmeval.record._hash import stable_hash

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


def resume_key(config_hash: str, identity: Mapping[str, Any]) -> str:
    """The key an item record must carry to be reused: its task's config hash and the run
    identity (:func:`run_identity`)."""
    return stable_hash({"config_hash": config_hash, "identity": identity}, length=16)


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
