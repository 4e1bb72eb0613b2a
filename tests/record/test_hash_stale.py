"""The SHA256 cache never returns the digest of a file's former content: a same-size edit
with its mtime restored (``touch -r``, ``os.utime``), a file replaced by another, and an
edit on a file system whose ctime does not move (the content sample) are all misses; cache
files written before ctime, inode and sample were recorded still read, as misses."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from pytest_llmeval.record import _hash
from pytest_llmeval.record._hash import SAMPLE_BLOCK, HashCache, content_sample, file_sha256

HOUR_NS = 3600 * 10**9


def _weights(path: Path, fill: int, size: int = 3 * SAMPLE_BLOCK + 1000) -> bytes:
    data = bytes([fill]) * size
    path.write_bytes(data)
    t = time.time_ns() - HOUR_NS  # older than the racy window: cacheable
    os.utime(path, ns=(t, t))
    return data


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    reads: list[Path] = []
    real = _hash._hash_file

    def counting(path: Path) -> str:
        reads.append(Path(path))
        return real(path)

    monkeypatch.setattr(_hash, "_hash_file", counting)
    return reads


def test_a_same_size_edit_with_the_mtime_restored_gets_a_new_digest(tmp_path: Path) -> None:
    weights = tmp_path / "model.safetensors"
    old = _weights(weights, 0)
    cache_file = tmp_path / "sha256-cache.json"
    cache = HashCache(cache_file)
    assert file_sha256(weights, cache) == hashlib.sha256(old).hexdigest()
    assert cache.save()
    before = weights.stat()
    # one byte in the middle changes (the size stays), then atime and mtime are put back
    # to the nanosecond, as `touch -r` would
    edited = bytearray(old)
    edited[len(edited) // 2 + 7] = 1
    with weights.open("r+b") as fh:
        fh.seek(len(edited) // 2 + 7)
        fh.write(b"\x01")
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = weights.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    # a later run reads the cache file: the old digest must not come back
    assert file_sha256(weights, HashCache(cache_file)) == hashlib.sha256(edited).hexdigest()


def test_a_file_replaced_by_another_with_the_same_size_and_mtime_is_hashed_again(
    tmp_path: Path,
) -> None:
    weights = tmp_path / "model.safetensors"
    _weights(weights, 0)
    cache = HashCache(tmp_path / "c.json")
    file_sha256(weights, cache)
    st = weights.stat()
    other = tmp_path / "other.safetensors"
    new = _weights(other, 2)
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, weights)  # a new inode under the old name
    assert file_sha256(weights, cache) == hashlib.sha256(new).hexdigest()


def test_the_content_sample_catches_an_edit_where_the_ctime_does_not_move(
    tmp_path: Path,
) -> None:
    # A file system without a working ctime: the entry matches every stat field of the
    # file as it is now, only its content sample is that of the former content.
    weights = tmp_path / "model.safetensors"
    former = tmp_path / "former.bin"
    _weights(former, 0)
    now = _weights(weights, 3)
    st = weights.stat()
    cache_file = tmp_path / "c.json"
    entry = {
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
        "ino": st.st_ino,
        "sample": content_sample(former, st.st_size),
        "sha256": hashlib.sha256(former.read_bytes()).hexdigest(),
    }
    cache_file.write_text(json.dumps({str(weights.resolve()): entry}))
    assert HashCache(cache_file).get(weights) is None
    assert file_sha256(weights, HashCache(cache_file)) == hashlib.sha256(now).hexdigest()
    # the same entry with the right sample is a hit (the sample is what made the miss)
    entry["sample"] = content_sample(weights, st.st_size)
    cache_file.write_text(json.dumps({str(weights.resolve()): entry}))
    assert HashCache(cache_file).get(weights) == entry["sha256"]


def test_the_sample_reads_fixed_blocks_not_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    size = 40 * SAMPLE_BLOCK
    data = bytes(range(256)) * (size // 256)
    path.write_bytes(data)
    third, two_thirds, end = size // 3, 2 * size // 3, size - SAMPLE_BLOCK
    expected = hashlib.sha256(str(size).encode())
    for offset in (0, third, two_thirds, end):
        expected.update(data[offset : offset + SAMPLE_BLOCK])
    assert content_sample(path, size) == expected.hexdigest()
    assert content_sample(path, size + 1) is None  # not the size recorded: no sample


def test_entries_from_before_ctime_inode_and_sample_are_misses_not_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = _count_reads(monkeypatch)
    weights = tmp_path / "model.safetensors"
    data = _weights(weights, 5)
    st = weights.stat()
    cache_file = tmp_path / "sha256-cache.json"
    old_entry = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": "0" * 64}
    cache_file.write_text(json.dumps({str(weights.resolve()): old_entry}))
    cache = HashCache(cache_file)
    assert len(cache) == 1 and cache.get(weights) is None
    assert file_sha256(weights, cache) == hashlib.sha256(data).hexdigest()
    assert len(reads) == 1
    assert cache.save()
    stored = json.loads(cache_file.read_text())[str(weights.resolve())]
    assert stored["sha256"] == hashlib.sha256(data).hexdigest()
    assert (stored["ctime_ns"], stored["ino"]) == (st.st_ctime_ns, st.st_ino)
    # now a hit: read from the cache, the file is not hashed again
    assert file_sha256(weights, HashCache(cache_file)) == hashlib.sha256(data).hexdigest()
    assert len(reads) == 1
