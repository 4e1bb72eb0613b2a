"""Digests for run records: stable_hash, file_sha256, the hash cache, model fingerprints."""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_llmeval import _digest
from pytest_llmeval.record._hash import (
    SAMPLE_BLOCK,
    HashCache,
    content_sample,
    file_sha256,
    model_fingerprint,
    stable_hash,
)

HOUR_NS = 3600 * 10**9

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)
json_dicts = st.dictionaries(st.text(max_size=6), json_scalars, min_size=1, max_size=8)


def _age(path: Path, ns: int = HOUR_NS) -> None:
    """Move a file's mtime into the past (fresh files are not cached: racy window)."""
    t = time.time_ns() - ns
    os.utime(path, ns=(t, t))


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    reads: list[Path] = []
    real = _digest.hash_file

    def counting(path: Path) -> str:
        reads.append(Path(path))
        return real(path)

    monkeypatch.setattr(_digest, "hash_file", counting)
    return reads


# stable_hash


@given(json_dicts, st.randoms())
def test_stable_hash_ignores_key_order(d: dict[str, object], rnd: random.Random) -> None:
    items = list(d.items())
    rnd.shuffle(items)
    assert stable_hash(dict(items)) == stable_hash(d)
    assert stable_hash({"outer": dict(items)}) == stable_hash({"outer": d})


@given(json_dicts, st.data())
def test_stable_hash_changes_with_any_value(d: dict[str, object], data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(d)))
    new = data.draw(json_scalars.filter(lambda v: json.dumps(v) != json.dumps(d[key])))
    assert stable_hash({**d, key: new}) != stable_hash(d)


def test_stable_hash_format() -> None:
    obj = {"b": [1, 2], "a": "é"}
    canonical = '{"a":"é","b":[1,2]}'
    full = hashlib.sha256(canonical.encode()).hexdigest()
    assert stable_hash(obj) == full[:12]
    assert stable_hash(obj, length=64) == full
    assert stable_hash({"p": Path("x/y")}) == stable_hash({"p": "x/y"})  # default=str


# file_sha256


@pytest.mark.parametrize("size", [0, 5, (1 << 20) - 1, 1 << 20, (3 << 20) + 17])
def test_file_sha256_matches_hashlib(tmp_path: Path, size: int) -> None:
    data = (bytes(range(256)) * (size // 256 + 1))[:size]
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()


def test_file_sha256_streams_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * ((2 << 20) + 1))
    sizes: list[int] = []
    real_open = open

    class Spy:
        def __init__(self, f: object) -> None:
            self.f = f

        def __enter__(self) -> Spy:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()  # type: ignore[attr-defined]

        def read(self, n: int = -1) -> bytes:
            sizes.append(n)
            chunk: bytes = self.f.read(n)  # type: ignore[attr-defined]
            return chunk

    monkeypatch.setattr(_digest, "open", lambda p, m: Spy(real_open(p, m)), raising=False)
    assert file_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert sizes == [1 << 20] * 4


# HashCache


def test_cache_hit_and_persistence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _count_reads(monkeypatch)
    path = tmp_path / "w.bin"
    path.write_bytes(b"weights")
    _age(path)
    cache_file = tmp_path / "cache" / "sha256-cache.json"
    cache = HashCache(cache_file)
    expected = hashlib.sha256(b"weights").hexdigest()
    assert cache.get(path) is None
    assert file_sha256(path, cache) == expected
    assert file_sha256(path, cache) == expected
    assert len(reads) == 1
    assert cache.save()
    stored = json.loads(cache_file.read_text())
    assert stored == {
        str(path.resolve()): {
            "size": 7,
            "mtime_ns": path.stat().st_mtime_ns,
            "ctime_ns": path.stat().st_ctime_ns,
            "ino": path.stat().st_ino,
            "sample": _digest.content_sample(path, 7),
            "sha256": expected,
        }
    }
    again = HashCache(cache_file)
    assert again.get(path) == expected
    assert file_sha256(path, again) == expected
    assert len(reads) == 1
    assert [p.name for p in tmp_path.joinpath("cache").iterdir()] == ["sha256-cache.json"]


def test_cache_miss_after_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _count_reads(monkeypatch)
    path = tmp_path / "w.bin"
    path.write_bytes(b"aaaa")
    _age(path, 2 * HOUR_NS)
    cache = HashCache(tmp_path / "c.json")
    file_sha256(path, cache)
    path.write_bytes(b"bbbb")  # same size, new mtime
    _age(path, HOUR_NS)
    assert cache.get(path) is None
    assert file_sha256(path, cache) == hashlib.sha256(b"bbbb").hexdigest()
    _age(path, HOUR_NS // 2)  # touched only: re-hashed as well
    assert file_sha256(path, cache) == hashlib.sha256(b"bbbb").hexdigest()
    assert len(reads) == 3


def test_cache_skips_files_modified_just_now(tmp_path: Path) -> None:
    path = tmp_path / "w.bin"
    path.write_bytes(b"fresh")
    cache = HashCache(tmp_path / "c.json")
    file_sha256(path, cache)
    assert cache.get(path) is None
    assert len(cache) == 0


@pytest.mark.parametrize(
    "content", [b"{not json", b"\xff\xfe", b"[1, 2]", b'{"x": {"size": "7"}}', b""]
)
def test_corrupt_cache_reads_as_empty(tmp_path: Path, content: bytes) -> None:
    cache_file = tmp_path / "c.json"
    cache_file.write_bytes(content)
    path = tmp_path / "w.bin"
    path.write_bytes(b"w")
    _age(path)
    cache = HashCache(cache_file)
    assert len(cache) == 0
    file_sha256(path, cache)
    assert cache.save()
    assert HashCache(cache_file).get(path) == hashlib.sha256(b"w").hexdigest()


def test_missing_cache_and_default_location(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMEVAL_CACHE_DIR", str(tmp_path / "llm-cache"))
    cache = HashCache()
    assert cache.path == tmp_path / "llm-cache" / "sha256-cache.json"
    assert len(cache) == 0
    assert cache.save()  # nothing added: no file written
    assert not cache.path.exists()


def test_save_merges_concurrent_writers(tmp_path: Path) -> None:
    cache_file = tmp_path / "c.json"
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    for p in (a, b):
        p.write_bytes(p.name.encode())
        _age(p)
    first, second = HashCache(cache_file), HashCache(cache_file)
    file_sha256(a, first)
    file_sha256(b, second)
    assert first.save()
    assert second.save()
    merged = HashCache(cache_file)
    assert merged.get(a) == hashlib.sha256(b"a.bin").hexdigest()
    assert merged.get(b) == hashlib.sha256(b"b.bin").hexdigest()


def test_save_failure_is_reported_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    path = tmp_path / "w.bin"
    path.write_bytes(b"w")
    _age(path)
    cache = HashCache(blocker / "c.json")
    file_sha256(path, cache)
    assert cache.save() is False
    assert cache.get(path) is not None


# model_fingerprint

MODEL_FILES = {
    "config.json": b'{"model_type": "llama"}',
    "generation_config.json": b"{}",
    "model-00001-of-00002.safetensors": b"\x00" * 64,
    "model-00002-of-00002.safetensors": b"\x01" * 64,
    "model.safetensors.index.json": b"{}",
    "tokenizer.json": b'{"v": 1}',
    "tokenizer_config.json": b"{}",
    "special_tokens_map.json": b"{}",
    "tokenizer.model": b"spm",
    "vocab.txt": b"a\nb",
    "merges.txt": b"a b",
    "chat_template.jinja": b"{{ messages }}",
    "original/consolidated.00.pth": b"\x02" * 16,
    "onnx/model.bin": b"\x03" * 8,
    "README.md": b"# model",
    ".gitattributes": b"*.safetensors filter=lfs",
    ".git/objects/ab/cd.bin": b"git object",
    "runs/log.txt": b"log",
}
EXPECTED = sorted(
    name
    for name in MODEL_FILES
    if name not in {"model.safetensors.index.json", "README.md", ".gitattributes", "runs/log.txt"}
    and not name.startswith(".git/")
)
WEIGHTS = [
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
    "onnx/model.bin",
    "original/consolidated.00.pth",
]


def _fake_model(root: Path) -> Path:
    for name, content in MODEL_FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        _age(path)
    return root


def _combined(files: dict[str, str]) -> str:
    lines = "".join(f"{k}:{files[k]}\n" for k in sorted(files))
    return hashlib.sha256(lines.encode()).hexdigest()


def test_model_fingerprint_files_and_digests(tmp_path: Path) -> None:
    model = _fake_model(tmp_path / "m")
    fp = model_fingerprint(model)
    assert list(fp["files"]) == EXPECTED
    for rel, digest in fp["files"].items():
        assert digest == hashlib.sha256(MODEL_FILES[rel]).hexdigest()
    assert fp["sha256"] == _combined(fp["files"])
    assert fp["weights_sha256"] == _combined({k: fp["files"][k] for k in WEIGHTS})
    assert fp["total_bytes"] == sum(len(MODEL_FILES[k]) for k in EXPECTED)
    json.dumps(fp)


@pytest.mark.parametrize(
    "name",
    [
        "added_tokens.json",
        "chat_template.json",
        "additional_chat_templates/tool_use.jinja",
        "qwen.tiktoken",
        "tokenizer.model",
    ],
)
def test_model_fingerprint_covers_every_file_the_tokenizer_reads(tmp_path: Path, name: str) -> None:
    """An added token or another chat template changes every prompt's tokens: it moves the
    model's digest, and so the drift snapshot (these files were left out of it)."""
    model = _fake_model(tmp_path / "m")
    before = model_fingerprint(model)
    (model / name).parent.mkdir(parents=True, exist_ok=True)
    (model / name).write_text('{"Answer": 300}\n')
    after = model_fingerprint(model)
    assert name in after["files"]
    assert after["sha256"] != before["sha256"]
    assert after["weights_sha256"] == before["weights_sha256"]


def test_model_fingerprint_changes_with_one_weight_byte(tmp_path: Path) -> None:
    model = _fake_model(tmp_path / "m")
    before = model_fingerprint(model)
    shard = model / "model-00002-of-00002.safetensors"
    shard.write_bytes(b"\x01" * 63 + b"\x02")
    after = model_fingerprint(model)
    assert after["sha256"] != before["sha256"]
    assert after["weights_sha256"] != before["weights_sha256"]
    changed = [k for k in EXPECTED if before["files"][k] != after["files"][k]]
    assert changed == [shard.name]


def test_weights_sha256_ignores_tokenizer_files(tmp_path: Path) -> None:
    model = _fake_model(tmp_path / "m")
    before = model_fingerprint(model)
    (model / "tokenizer_config.json").write_text('{"chat_template": "new"}')
    (model / "vocab.txt").unlink()
    after = model_fingerprint(model)
    assert after["weights_sha256"] == before["weights_sha256"]
    assert after["sha256"] != before["sha256"]
    assert "vocab.txt" not in after["files"]


def test_model_fingerprint_uses_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _fake_model(tmp_path / "m")
    cache_file = tmp_path / "cache.json"
    reads = _count_reads(monkeypatch)
    first = model_fingerprint(model, HashCache(cache_file))
    assert len(reads) == len(EXPECTED)
    assert cache_file.exists()  # saved by model_fingerprint
    # a later run: a fresh cache object reading the same file, nothing touched
    assert model_fingerprint(model, HashCache(cache_file)) == first
    assert len(reads) == len(EXPECTED)
    # a new mtime (same content) re-hashes that one file only
    _age(model / "config.json", HOUR_NS // 2)
    assert model_fingerprint(model, HashCache(cache_file)) == first
    assert reads[len(EXPECTED) :] == [model / "config.json"]


def test_model_fingerprint_follows_file_symlinks(tmp_path: Path) -> None:
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    (blobs / "abc").write_bytes(b"\x00" * 64)
    snap = tmp_path / "snapshot"
    snap.mkdir()
    (snap / "model.safetensors").symlink_to(blobs / "abc")
    (snap / "config.json").write_text("{}")
    fp = model_fingerprint(snap)
    assert fp["files"]["model.safetensors"] == hashlib.sha256(b"\x00" * 64).hexdigest()
    assert fp["total_bytes"] == 66


def test_model_fingerprint_needs_a_directory(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        model_fingerprint(tmp_path / "missing")


# ---------------------------------------------------------------- stale digests
# The cache never returns the digest of a file's former content: a same-size edit with its
# mtime restored (``touch -r``, ``os.utime``), a file replaced by another, and an edit on a
# file system whose ctime does not move (the content sample) are all misses; cache files
# written before ctime, inode and sample were recorded still read, as misses.


def _weights(path: Path, fill: int, size: int = 3 * SAMPLE_BLOCK + 1000) -> bytes:
    data = bytes([fill]) * size
    path.write_bytes(data)
    t = time.time_ns() - HOUR_NS  # older than the racy window: cacheable
    os.utime(path, ns=(t, t))
    return data


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
