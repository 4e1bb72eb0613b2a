"""Small benchmark projects written into a pytester directory (fixture ``write_project``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import tiny_projects


@pytest.fixture
def write_project():  # type: ignore[no-untyped-def]
    """Write two tiny tasks (generative ``arith``, multiple-choice ``colors``) with their data."""
    return tiny_projects.write_project


@pytest.fixture(scope="session")
def weak_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny model with every weight noised (seed 99, standard deviation 0.5):
    a deliberately worse model (it loses colors items the tiny model gets right)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = tmp_path_factory.mktemp("weak-model") / "weak-model"
    shutil.copytree(tiny_model_dir, target)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    torch.manual_seed(99)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(target)
    return target
