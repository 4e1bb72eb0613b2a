"""Small benchmark projects written into a pytester directory (fixture ``write_project``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

ARITH = [
    {"q": "what is two plus three?", "a": "5"},
    {"q": "what is one plus one?", "a": "2"},
    {"q": "what is four plus four?", "a": "8"},
    {"q": "what is nine minus two?", "a": "7"},
    {"q": "what is three times three?", "a": "9"},
]
COLORS = [
    {"question": "Which one is a color?", "options": ["red", "table", "seven"], "label": 0},
    {"question": "Which one is a number?", "options": ["blue", "seven", "apple"], "label": 1},
    {"question": "Which one is a fruit?", "options": ["nine", "green", "apple"], "label": 2},
    {"question": "Which one is an animal?", "options": ["cat", "four", "yellow"], "label": 0},
]

GEN_SPEC = """\
task: arith
markers: [regression, math]
floor: {floor}
dataset: {{path: arith.jsonl}}
prompt:
  template: "Question: {{{{ q }}}}\\nAnswer:"
  target: "{{{{ a }}}}"
fewshot:
  k: 1
  examples: [{{q: "what is zero plus one?", a: "1"}}]
mode: generate
generate:
  target: "{{{{ a }}}}"
  max_new_tokens: 4
  stop: ["\\n"]
  extract: [last_number]
  compare: numeric
"""

MC_SPEC = """\
task: colors
markers: [release, knowledge]
floor: {floor}
dataset: {{path: colors.jsonl}}
prompt:
  template: "{{{{ question }}}}\\nAnswer:"
mode: multiple_choice
multiple_choice:
  choices: "{{{{ options }}}}"
  gold: "{{{{ label }}}}"
"""


def _write_project(
    pytester: pytest.Pytester, gen_floor: float = 0.0, mc_floor: float = 0.0
) -> None:
    (pytester.path / "arith.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ARITH))
    (pytester.path / "colors.jsonl").write_text("".join(json.dumps(r) + "\n" for r in COLORS))
    (pytester.path / "arith.yaml").write_text(GEN_SPEC.format(floor=gen_floor))
    (pytester.path / "colors.yaml").write_text(MC_SPEC.format(floor=mc_floor))


@pytest.fixture
def write_project():  # type: ignore[no-untyped-def]
    """Write two tiny tasks (generative ``arith``, multiple-choice ``colors``) with their data."""
    return _write_project


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
