"""Environment records: git state, library versions, CUDA, drift fingerprints."""

from __future__ import annotations

import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval.record import _env
from pytest_llmeval.record._env import (
    VOLATILE_FIELDS,
    cuda_info,
    describe_drift,
    drift_fingerprint,
    environment_record,
    git_info,
    library_versions,
)
from pytest_llmeval.record._hash import HashCache

GIT = [
    "git",
    "-c",
    "user.email=test@example.com",
    "-c",
    "user.name=Test",
    "-c",
    "commit.gpgsign=false",
    "-c",
    "init.defaultBranch=main",
    "-c",
    "core.hooksPath=/dev/null",
]


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        [*GIT, "-C", str(repo), *args], check=True, capture_output=True, text=True, timeout=30
    )
    return out.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "tracked.txt").write_text("one\n")
    (root / "sub").mkdir()
    (root / "sub" / "file.py").write_text("x = 1\n")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "first")
    return root


# git_info


def test_git_info_clean_repo(repo: Path) -> None:
    info = git_info(repo)
    assert info is not None
    commit = _git(repo, "rev-parse", "HEAD")
    assert info == {"commit": commit, "short": commit[:7], "dirty": False, "branch": "main"}
    assert git_info(repo / "sub") == info
    assert git_info(repo / "sub" / "file.py") == info


def test_git_info_dirty_only_for_tracked_changes(repo: Path) -> None:
    (repo / "untracked.txt").write_text("new\n")
    info = git_info(repo)
    assert info is not None and info["dirty"] is False
    (repo / "tracked.txt").write_text("two\n")
    info = git_info(repo)
    assert info is not None and info["dirty"] is True
    _git(repo, "checkout", "-q", "--", "tracked.txt")
    info = git_info(repo)
    assert info is not None and info["dirty"] is False


def test_git_info_tracked_needs_files_git_tracks(repo: Path) -> None:
    """A model folder inside a project's work tree is versioned by its commit only when git
    tracks its files: an ignored or untracked folder (weights kept beside the code) gets
    no git state, where before it got the project's commit, branch and dirty flag."""
    assert git_info(repo / "sub", tracked=True) == git_info(repo)
    assert git_info(repo / "sub" / "file.py", tracked=True) == git_info(repo)
    (repo / ".gitignore").write_text("models/\n")
    (repo / "models" / "tiny").mkdir(parents=True)
    (repo / "models" / "tiny" / "config.json").write_text("{}\n")
    (repo / "weights").mkdir()
    (repo / "weights" / "model.gguf").write_bytes(b"GGUF")
    assert git_info(repo / "models" / "tiny") is not None  # the folder is in the work tree
    assert git_info(repo / "models" / "tiny", tracked=True) is None  # ignored
    assert git_info(repo / "weights", tracked=True) is None  # untracked
    assert git_info(repo / "weights" / "model.gguf", tracked=True) is None


def test_git_info_tracked_takes_a_relative_path(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--llm-model=models/m`` as typed: a relative path names the same tracked files."""
    monkeypatch.chdir(repo)
    assert git_info(Path("sub"), tracked=True) == git_info(repo)
    assert git_info(Path("sub") / "file.py", tracked=True) == git_info(repo)


def test_git_info_detached_head(repo: Path) -> None:
    _git(repo, "checkout", "-q", "--detach")
    info = git_info(repo)
    assert info is not None
    assert info["branch"] is None
    assert info["commit"] == _git(repo, "rev-parse", "HEAD")


def test_git_info_before_first_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    _git(tmp_path, "init", "-q", "fresh")
    info = git_info(tmp_path / "fresh")
    assert info == {"commit": None, "short": None, "dirty": False, "branch": "main"}


def test_git_info_outside_a_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    plain = tmp_path / "plain"
    plain.mkdir()
    assert git_info(plain) is None
    assert git_info(tmp_path / "missing") is None


def test_git_info_ignores_callers_git_dir(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_DIR", str(repo.parent / "elsewhere.git"))
    info = git_info(repo)
    assert info is not None and info["branch"] == "main"


def test_git_info_without_git(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert git_info(repo) is None


def test_git_info_timeout_never_raises(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(*args: Any, **kwargs: Any) -> Any:
        raise subprocess.TimeoutExpired(cmd="git", timeout=10)

    monkeypatch.setattr(subprocess, "run", slow)
    assert git_info(repo) is None


# library_versions and cuda_info


def test_library_versions() -> None:
    versions = library_versions()
    assert versions["pytest"] == pytest.__version__
    assert versions["python"] == ".".join(map(str, sys.version_info[:3]))
    assert versions["pytest-llm-evaluation"] is not None
    assert set(versions) == {"python", *_env.LIBRARIES}
    assert all(v is None or isinstance(v, str) for v in versions.values())


def test_library_versions_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_env, "LIBRARIES", ("surely-not-installed-pkg-llmeval",))
    assert library_versions()["surely-not-installed-pkg-llmeval"] is None


def test_cuda_info_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert cuda_info() == {"available": None, "reason": "torch not loaded"}
    assert "torch" not in sys.modules


def test_cuda_info_reads_a_loaded_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    fake: Any = types.SimpleNamespace(
        cuda=types.SimpleNamespace(
            is_available=lambda: True,
            device_count=lambda: 2,
            get_device_name=lambda i: f"GPU {i}",
        ),
        version=types.SimpleNamespace(cuda="12.4"),
        backends=types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: 90100)),
    )
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(_env, "_nvidia_driver", lambda: "550.54.15")
    assert cuda_info() == {
        "available": True,
        "cuda": "12.4",
        "cudnn": 90100,
        "driver": "550.54.15",
        "gpus": ["GPU 0", "GPU 1"],
    }


def test_cuda_info_cpu_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> int:
        raise RuntimeError("no CUDA")

    fake: Any = types.SimpleNamespace(
        cuda=types.SimpleNamespace(is_available=lambda: False, device_count=broken),
        version=types.SimpleNamespace(cuda=None),
        backends=types.SimpleNamespace(cudnn=types.SimpleNamespace(version=broken)),
    )
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert cuda_info() == {
        "available": False,
        "cuda": None,
        "cudnn": None,
        "driver": None,
        "gpus": [],
    }


# environment_record


def test_environment_record(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\x00" * 8)
    env = environment_record(repo, model, HashCache(tmp_path / "c.json"))
    assert list(env) == [
        "python",
        "implementation",
        "os",
        "machine",
        "cpu",
        "cpu_count",
        "hostname",
        "libraries",
        "cuda",
        "git",
        "model",
    ]
    assert env["libraries"] == library_versions()
    assert env["cuda"] == {"available": None, "reason": "torch not loaded"}
    assert env["git"]["code"] == git_info(repo)
    assert env["git"]["model"] is None  # the model folder is not in a repo
    assert list(env["model"]["files"]) == ["config.json", "model.safetensors"]
    assert isinstance(env["cpu_count"], int)
    assert "torch" not in sys.modules


def test_environment_record_without_model(repo: Path) -> None:
    env = environment_record(repo)
    assert env["model"] is None
    assert env["git"] == {"code": git_info(repo), "model": None}


# drift


def _env_record(**over: Any) -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": "3.11.7",
        "implementation": "CPython",
        "os": "Linux-6.1",
        "machine": "x86_64",
        "cpu": "Some CPU",
        "cpu_count": 2,
        "hostname": "runner-17",
        "libraries": {
            "python": "3.11.7",
            "torch": "2.3.0",
            "transformers": "4.38.2",
            "accelerate": "0.30.0",
            "datasets": None,
            "tokenizers": "0.19.1",
            "safetensors": "0.4.3",
            "numpy": "1.26.4",
            "pytest": "8.2.0",
        },
        "cuda": {"available": True, "cuda": "12.1", "cudnn": 8902, "driver": "550", "gpus": ["H"]},
        "git": {
            "code": {"commit": "a" * 40, "short": "aaaaaaa", "dirty": True, "branch": "x"},
            "model": None,
        },
        "model": {"files": {"m.safetensors": "b" * 64}, "sha256": "c" * 64, "total_bytes": 8},
    }
    env.update(over)
    return env


def test_drift_fingerprint_is_flat_and_sorted() -> None:
    extra = {
        "dtype": "bfloat16",
        "device": "cuda",
        "tasks": {"gsm8k": {"config_hash": "0123456789ab", "prompt_hash": "ba9876543210"}},
    }
    fp = drift_fingerprint(_env_record(), extra)
    assert fp == {
        "cuda.cuda": "12.1",
        "device": "cuda",
        "dtype": "bfloat16",
        "libraries.accelerate": "0.30.0",
        "libraries.datasets": None,
        "libraries.python": "3.11.7",
        "libraries.safetensors": "0.4.3",
        "libraries.tokenizers": "0.19.1",
        "libraries.torch": "2.3.0",
        "libraries.transformers": "4.38.2",
        "model.sha256": "c" * 64,
        "tasks.gsm8k.config_hash": "0123456789ab",
        "tasks.gsm8k.prompt_hash": "ba9876543210",
    }
    assert list(fp) == sorted(fp)


def test_drift_fingerprint_ignores_volatile_fields() -> None:
    base = drift_fingerprint(_env_record(), {})
    other = _env_record(hostname="elsewhere", cpu_count=64, os="Linux-6.8", cpu="Other")
    other["git"]["code"] = {"commit": "d" * 40, "short": "ddddddd", "dirty": False, "branch": "y"}
    other["cuda"]["driver"] = "560"
    other["cuda"]["gpus"] = ["A", "B"]
    other["libraries"]["pytest"] = "9.0"
    other["model"]["files"] = {"renamed.safetensors": "b" * 64}
    assert drift_fingerprint(other, {}) == base
    for key in base:
        assert not any(key == f or key.startswith(f + ".") for f in VOLATILE_FIELDS)
    assert "hostname" in VOLATILE_FIELDS and "git.code" in VOLATILE_FIELDS


def test_drift_fingerprint_drops_volatile_and_path_like_extra() -> None:
    extra = {
        "hostname": "h",
        "model_dir": "/models/x",
        "output": Path("/tmp/out"),
        "run": {"path": "/a", "cwd": "/b", "rootdir": "/c", "seed": 1234},
        "dtype": "float32",
    }
    fp = drift_fingerprint(_env_record(), extra)
    assert {k for k in fp if not k.startswith(("libraries.", "cuda.", "model."))} == {
        "dtype",
        "run.seed",
    }


def test_drift_fingerprint_without_torch_or_model() -> None:
    env = _env_record(cuda={"available": None, "reason": "torch not loaded"}, model=None)
    fp = drift_fingerprint(env, {})
    assert fp["cuda.cuda"] is None
    assert fp["model.sha256"] is None


def test_drift_fingerprint_rejects_colliding_extra() -> None:
    with pytest.raises(ValueError, match=r"model\.sha256"):
        drift_fingerprint(_env_record(), {"model": {"sha256": "x"}})


def test_describe_drift() -> None:
    old = drift_fingerprint(_env_record(), {"dtype": "float32", "device": "cpu"})
    new_env = _env_record(model={"sha256": "d" * 64})
    new_env["libraries"]["transformers"] = "4.40.0"
    new = drift_fingerprint(new_env, {"dtype": "float32", "batch_size": 8})
    assert describe_drift(old, new) == [
        "added: batch_size = 8",
        "removed: device = cpu",
        "transformers 4.38.2 -> 4.40.0",
        f"model.sha256 {'c' * 12}… -> {'d' * 12}…",
    ]
    assert describe_drift(new, new) == []


def test_describe_drift_none_values() -> None:
    assert describe_drift({"cuda.cuda": None}, {"cuda.cuda": "12.1"}) == ["cuda.cuda None -> 12.1"]
