"""Digests for run records: of JSON-able values, of files, and of model directories.

- :func:`stable_hash` is the digest behind the config hash and the prompt hash: the same
  value gives the same digest in any process, whatever the order of its dict keys.
- :func:`file_sha256` streams a file through SHA256 (1 MiB at a time, never the whole
  file in memory), optionally through a :class:`HashCache` (both live in
  ``pytest_llmeval._digest``, below the model layer, and are re-exported here).
- :func:`model_fingerprint` digests the weights, config and tokenizer files of a Hugging
  Face model directory. With a :class:`HashCache`, an unchanged multi-GB model is hashed
  once and later runs read the digests back from the cache.

Nothing here imports pytest or torch.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pytest_llmeval._digest import (
    SAMPLE_BLOCK,
    HashCache,
    content_sample,
    file_sha256,
)

__all__ = [
    "META_PATTERNS",
    "SAMPLE_BLOCK",
    "TOKENIZER_PATTERNS",
    "WEIGHT_PATTERNS",
    "HashCache",
    "content_sample",
    "file_sha256",
    "model_fingerprint",
    "stable_hash",
]

WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf", "*.msgpack", "*.h5")
"""Weight files, at the top level of a model directory or in any subfolder."""

TOKENIZER_PATTERNS = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.json",
    "chat_template.jinja",
    "*.jinja",  # additional_chat_templates/NAME.jinja
    "tokenizer.model",
    "*.tiktoken",
    "spiece.model",
    "vocab.*",
    "merges.txt",
)
"""The files a tokenizer is loaded from (transformers' AutoTokenizer and chat templates),
matched by name at any depth of the model directory, hidden folders skipped."""

META_PATTERNS = ("config.json", "generation_config.json", "*.model", *TOKENIZER_PATTERNS)
"""Config and tokenizer files digested with the weights where present (matched by name,
at any depth, like the weights): every file the tokenizer reads is in the model's digest,
so an edit to one (an added token, another chat template) moves ``model_sha256`` and the
drift snapshot."""


def stable_hash(obj: object, length: int = 12) -> str:
    """The config hash / prompt hash digest: the first ``length`` hex chars of the SHA256 of
    ``obj`` as canonical JSON (sorted keys, no whitespace, UTF-8, ``str()`` for values JSON
    does not know, such as paths).

    Dict keys must be all strings (or all of one sortable type); ``sort_keys`` cannot order
    mixed key types and raises ``TypeError``.
    """
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def _model_files(model_dir: Path) -> Iterator[tuple[str, Path, bool]]:
    """(relative posix path, path, is a weight file) for each file to digest.

    Hidden files and folders (``.git``, ``.cache``) are skipped; symlinked files (as in
    the Hugging Face hub cache) are followed, symlinked folders are not.
    """
    for root, dirs, files in os.walk(model_dir):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.startswith("."):
                continue
            is_weight = any(fnmatch.fnmatchcase(name, p) for p in WEIGHT_PATTERNS)
            if not is_weight and not any(fnmatch.fnmatchcase(name, p) for p in META_PATTERNS):
                continue
            path = Path(root, name)
            if path.is_file():
                yield path.relative_to(model_dir).as_posix(), path, is_weight


def _combined(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}:{files[rel]}\n".encode())
    return h.hexdigest()


def model_fingerprint(model_dir: Path, cache: HashCache | None = None) -> dict[str, Any]:
    """SHA256 digests of a Hugging Face model directory.

    Digests every weight file (:data:`WEIGHT_PATTERNS`, at any depth) and the config and
    tokenizer files (:data:`META_PATTERNS`) present. Returns::

        {"files": {relpath: sha256},          # sorted by relative path
         "sha256": combined digest,           # sha256 of the sorted "relpath:sha256\\n" lines
         "weights_sha256": the same over the weight files only,
         "total_bytes": size of all digested files,
         "converted_from": the first line of SOURCE.txt, where the folder was converted
                           from a GGUF file (model/_resolve.py), else absent}

    With ``cache`` the digests of unchanged files come from the cache, and the cache is
    saved when new digests were added; without it every file is read.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise NotADirectoryError(f"not a model directory: {model_dir}")
    files: dict[str, str] = {}
    weights: dict[str, str] = {}
    total = 0
    for rel, path, is_weight in sorted(_model_files(model_dir)):
        digest = file_sha256(path, cache)
        files[rel] = digest
        if is_weight:
            weights[rel] = digest
        total += path.stat().st_size
    if cache is not None:
        cache.save()
    record: dict[str, Any] = {
        "files": files,
        "sha256": _combined(files),
        "weights_sha256": _combined(weights),
        "total_bytes": total,
    }
    source = model_dir / "SOURCE.txt"
    if source.is_file():  # a fact about the weights' origin; not digested into sha256
        lines = source.read_text(encoding="utf-8", errors="replace").splitlines()
        record["converted_from"] = lines[0] if lines else ""
    return record
