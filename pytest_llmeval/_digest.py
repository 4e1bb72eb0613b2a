"""File digests that every layer may use: a file's SHA256 streamed 1 MiB at a time, and a
:class:`HashCache` that keeps the digests of large unchanged files between runs, in the
package's cache folder (:func:`cache_dir`).

What the cache trusts: a digest is reused only while the file's size, mtime, ctime and
inode are the ones recorded with it *and* a content sample read on every check (the
SHA256 of up to four 64 KiB blocks at fixed offsets: the start, a third, two thirds and
the end) is unchanged. An edit that keeps the size and restores the mtime (``touch -r``,
``os.utime``) still moves the ctime, which no user call can set back; a file replaced by
a copy or a rename has a new inode; on a file system whose ctime does not move, an edit
in a sampled block is still seen. What is not caught: an edit outside the sampled blocks
on a file system without a working ctime, or one made within the same ctime tick as the
hash (files modified in the last two seconds are not cached at all). Metadata changes
(``chmod``, a new hard link) move the ctime too: the file is then hashed again once.

Nothing here imports from the rest of the package, nor pytest or torch: model resolution
(a user's GGUF file, hashed to name its converted folder) and run records (model
fingerprints) both stand on it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

CHUNK_SIZE = 1 << 20  # 1 MiB
SAMPLE_BLOCK = 1 << 16  # 64 KiB: the blocks of the content sample checked on each cache hit

# A file modified within this window of being hashed is not cached: on file systems with a
# coarse mtime, a same-size rewrite in the same tick would otherwise keep a stale digest.
_RACY_WINDOW_NS = 2_000_000_000


def cache_dir() -> Path:
    """Where converted models, joined GGUF files, measured batch sizes and the digest cache
    live: $LLMEVAL_CACHE_DIR, else $XDG_CACHE_HOME/pytest-llmeval, else
    ~/.cache/pytest-llmeval."""
    env = os.environ.get("LLMEVAL_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "pytest-llmeval"


class HashCache:
    """A JSON file mapping a file's absolute resolved path to ``{size, mtime_ns, ctime_ns,
    ino, sample, sha256}``.

    :meth:`get` returns the cached digest only while the file's size, mtime_ns, ctime_ns
    and inode are the ones recorded with it and its content sample (:func:`content_sample`,
    read on every check) is unchanged (see the module docstring for what that trusts).
    Entries written before ctime, inode and sample were recorded (``{size, mtime_ns,
    sha256}``) are read, and count as misses: the file is hashed again and the entry
    rewritten. A missing or corrupt cache file reads as empty. :meth:`save` merges the
    entries added here into the file currently on disk and replaces it atomically (temp
    file + ``os.replace``), so concurrent writers (pytest-xdist workers) never leave a torn
    file; at worst one writer's new entries are lost and recomputed later.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else cache_dir() / "sha256-cache.json"
        self._entries: dict[str, dict[str, Any]] = _read_entries(self.path)
        self._added: dict[str, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def key(path: Path) -> str:
        return str(Path(path).resolve())

    def get(self, path: Path) -> str | None:
        """The cached SHA256 of ``path``, or None (no entry, an entry from before ctime,
        inode and sample were recorded, file changed, or unreadable)."""
        entry = self._entries.get(self.key(path))
        if entry is None or any(entry.get(k) is None for k in _CHECKED):
            return None
        try:
            st = os.stat(path)
        except OSError:
            return None
        if _identity(st) != tuple(entry[k] for k in _IDENTITY):
            return None
        if content_sample(path, st.st_size) != entry["sample"]:
            return None
        digest: str = entry["sha256"]
        return digest

    def put(self, path: Path, digest: str, *, stat: os.stat_result | None = None) -> None:
        """Record ``digest`` for ``path`` as it is now (or as it was at ``stat``, taken
        before hashing). Files modified in the last two seconds are not recorded."""
        try:
            st = stat if stat is not None else os.stat(path)
            sample = content_sample(path, st.st_size)
        except OSError:
            return
        if sample is None or time.time_ns() - st.st_mtime_ns < _RACY_WINDOW_NS:
            return
        entry: dict[str, Any] = dict(zip(_IDENTITY, _identity(st), strict=True))
        entry.update(sample=sample, sha256=digest)
        key = self.key(path)
        self._entries[key] = entry
        self._added[key] = entry

    def save(self) -> bool:
        """Write the entries added since loading (or the last save), merged into the cache
        file as it is on disk now. Best effort: returns False, and keeps the entries for a
        later try, when the file cannot be written; True otherwise (also when nothing was
        added)."""
        if not self._added:
            return True
        entries = _read_entries(self.path)
        entries.update(self._added)
        tmp: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(
                prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent
            )
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entries, f, indent=0, sort_keys=True)
            os.replace(tmp, self.path)
            tmp = None
        except OSError:
            return False
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        self._entries = {**entries, **self._entries}
        self._added.clear()
        return True


# The stat fields an entry must match, in the order of _identity; with the sample, those an
# entry needs to be a hit at all (older entries lack all but size and mtime_ns).
_IDENTITY = ("size", "mtime_ns", "ctime_ns", "ino")
_CHECKED = (*_IDENTITY, "sample")


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def content_sample(path: Path, size: int) -> str | None:
    """SHA256 hex of up to four :data:`SAMPLE_BLOCK` blocks of ``path`` at fixed offsets
    (0, a third, two thirds, the end of a file of ``size`` bytes; a small file is read
    whole), with the size: a cheap check of the content read on every cache hit. None
    when the file cannot be read or is not ``size`` bytes long."""
    offsets = sorted({0, size // 3, 2 * size // 3, max(0, size - SAMPLE_BLOCK)})
    h = hashlib.sha256(str(size).encode())
    try:
        with open(path, "rb") as f:
            for offset in offsets:
                f.seek(offset)
                h.update(f.read(SAMPLE_BLOCK))
            f.seek(0, os.SEEK_END)
            if f.tell() != size:
                return None
    except OSError:
        return None
    return h.hexdigest()


def _read_entries(path: Path) -> dict[str, dict[str, Any]]:
    """The well-formed entries of a cache file; {} when it is missing or corrupt. An entry
    from before ctime, inode and sample were recorded keeps only its size, mtime and digest
    (:meth:`HashCache.get` treats it as a miss)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    entries: dict[str, dict[str, Any]] = {}
    for key, entry in data.items():
        if (
            isinstance(entry, dict)
            and type(entry.get("size")) is int
            and type(entry.get("mtime_ns")) is int
            and isinstance(entry.get("sha256"), str)
        ):
            kept = {k: entry[k] for k in ("size", "mtime_ns", "sha256")}
            if (
                type(entry.get("ctime_ns")) is int
                and type(entry.get("ino")) is int
                and isinstance(entry.get("sample"), str)
            ):
                kept.update(ctime_ns=entry["ctime_ns"], ino=entry["ino"], sample=entry["sample"])
            entries[key] = kept
    return entries


def hash_file(path: Path) -> str:
    """SHA256 hex of a file's content, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_SIZE):
            h.update(chunk)
    return h.hexdigest()


def file_sha256(path: Path, cache: HashCache | None = None) -> str:
    """The full SHA256 hex digest of a file, streamed in 1 MiB chunks.

    With ``cache``, a digest recorded for the file's current size, mtime, ctime and inode
    (and an unchanged content sample, see :class:`HashCache`) is returned without reading
    the whole file, and a newly computed one is added to the cache (in memory; call
    :meth:`HashCache.save` to keep it). A file that changes while it is read is not cached.
    """
    if cache is None:
        return hash_file(path)
    cached = cache.get(path)
    if cached is not None:
        return cached
    before = os.stat(path)
    digest = hash_file(path)
    after = os.stat(path)
    if _identity(before) == _identity(after):
        cache.put(path, digest, stat=before)
    return digest
