"""Greedy decoding follows the model's generation config (``model.generation_config``).

A tiny random model whose ``generation_config.json`` sets ``repetition_penalty: 1.3`` (and,
in a second model, ``no_repeat_ngram_size: 2``): under the default rule (``model``) every
decode path of the HF backend (continuous batching with the fused step, the model's own
forward pass, fixed batches) gives the tokens of ``model.generate(do_sample=False)`` on
each prompt alone, as lm-evaluation-harness's HF path does; under ``neutral`` a plain
argmax, which differs. Records say which fields were applied and which were not.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from transformers_generate import generate_alone

from pytest_llmeval._errors import ModelError
from pytest_llmeval.model import GenerateRequest, GreedyRule, ModelSettings, load_backend

torch = pytest.importorskip("torch")

PROMPTS = [
    "Question: what is two plus three? Answer:",
    "one two three four five six seven eight nine ten 0 1 2 3 4 5 6 7 8 9",
    "The answer is 42. The answer is B. Answer: A",
    "Q: How many apples are left? A:",
    "A. red B. green C. blue D. yellow",
]


def _with_generation_config(source: Path, target: Path, **fields: Any) -> Path:
    shutil.copytree(source, target)
    path = target / "generation_config.json"
    config = json.loads(path.read_text()) if path.is_file() else {}
    config.update(fields)
    path.write_text(json.dumps(config))
    return target


@pytest.fixture(scope="module")
def penalised(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _with_generation_config(
        tiny_model_dir,
        tmp_path_factory.mktemp("gc") / "penalised",
        repetition_penalty=1.3,
        temperature=0.7,  # sampling only: recorded as not applied
        top_p=0.8,
    )


@pytest.fixture(scope="module")
def no_repeat(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _with_generation_config(
        tiny_model_dir, tmp_path_factory.mktemp("gc") / "no_repeat", no_repeat_ngram_size=2
    )


def _requests(budget: int = 24) -> list[GenerateRequest]:
    return [GenerateRequest(p, max_new_tokens=budget) for p in PROMPTS]


@pytest.mark.parametrize("step", ["auto", "transformers"])
@pytest.mark.parametrize("which", ["penalised", "no_repeat"])
def test_every_decode_path_equals_model_generate(
    which: str, step: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir: Path = request.getfixturevalue(which)
    backend: Any = load_backend(
        ModelSettings(model=str(model_dir), batch_size=3, decode_step=step, prompt_lookup=3)
    )
    info = backend.info()
    applied = info["decoding"]["generation_config"]["applied"]
    assert applied == (
        {"repetition_penalty": 1.3} if which == "penalised" else {"no_repeat_ngram_size": 2}
    )
    # drafts would be checked a block at a time; the processors need each position's past
    assert info["decode_plan"]["prompt_lookup"] == 0
    reqs = _requests()
    continuous = [r.text for r in backend.generate(reqs)]
    expected = [generate_alone(backend, r.context, r.max_new_tokens) for r in reqs]
    assert continuous == expected
    monkeypatch.setattr(backend, "_share", False)  # fixed batches
    assert [r.text for r in backend.generate(reqs)] == expected


def test_neutral_takes_the_plain_argmax_and_says_so(penalised: Path) -> None:
    followed: Any = load_backend(ModelSettings(model=str(penalised), batch_size=3))
    neutral: Any = load_backend(
        ModelSettings(model=str(penalised), batch_size=3, generation_config="neutral")
    )
    reqs = _requests()
    plain = [r.text for r in neutral.generate(reqs)]
    assert plain == [
        generate_alone(neutral, r.context, r.max_new_tokens, repetition_penalty=1.0) for r in reqs
    ]
    # The penalty changes the greedy output of this model (the test could not fail else).
    assert plain != [r.text for r in followed.generate(reqs)]
    record = neutral.info()["decoding"]["generation_config"]
    assert record["rule"] == "neutral" and record["applied"] == {}
    assert (
        record["not_applied"]["repetition_penalty"]
        == "1.3: --llm-set model.generation_config=neutral"
    )
    assert record["source"].endswith("generation_config.json")
    # Sampling fields never apply to a greedy token, under either rule.
    followed_record = followed.info()["decoding"]["generation_config"]
    assert "sampling only" in followed_record["not_applied"]["temperature"]
    assert "sampling only" in followed_record["not_applied"]["top_p"]


def test_a_field_that_cannot_be_applied_is_named_before_any_generation(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    beams = _with_generation_config(tiny_model_dir, tmp_path / "beams", num_beams=4)
    with pytest.raises(
        ModelError,
        match=r"sets num_beams=4, which changes greedy decoding.*"
        r"--llm-set model.generation_config=neutral",
    ):
        load_backend(ModelSettings(model=str(beams)))
    # neutral loads it, and records the field as not applied
    loaded: Any = load_backend(ModelSettings(model=str(beams), generation_config="neutral"))
    assert loaded.info()["decoding"]["generation_config"]["not_applied"] == {
        "num_beams": "4: --llm-set model.generation_config=neutral"
    }


def test_rule_from_plain_configs() -> None:
    none = GreedyRule.from_config({}, "model", None, "m")
    assert not none.active and none.describe()["applied"] == {}
    # transformers 5 writes None for unset fields; a field at its default is not set
    unset = GreedyRule.from_config(
        {"repetition_penalty": None, "num_beams": 1, "top_k": None}, "model", None, "m"
    )
    assert unset.describe() == {"rule": "model", "source": None, "applied": {}, "not_applied": {}}
    rule = GreedyRule.from_config(
        {"repetition_penalty": 1.05, "suppress_tokens": (3, 4), "do_sample": True},
        "model",
        "x",
        "m",
    )
    assert rule.applied == {"repetition_penalty": 1.05, "suppress_tokens": [3, 4]}
    assert set(rule.not_applied) == {"do_sample"}
    with pytest.raises(ModelError, match="forced_eos_token_id=2"):
        GreedyRule.from_config({"forced_eos_token_id": 2}, "model", None, "m")


def test_the_task_record_carries_the_rule(penalised: Path, tmp_path: Path) -> None:
    """A generative task's config (eval_config.json, config hash) holds what its backend
    applied, not constants."""
    from pytest_llmeval.eval import TaskRunner
    from pytest_llmeval.record._taskconfig import task_config
    from pytest_llmeval.task import load_task_spec

    spec_file = tmp_path / "echo.yaml"
    spec_file.write_text(
        "task: echo\ndataset: {path: data.jsonl}\n"
        'prompt: {template: "Q: {{ q }}\\nA:", target: "{{ a }}"}\n'
        'mode: generate\ngenerate: {target: "{{ a }}", max_new_tokens: 4}\n'
    )
    (tmp_path / "data.jsonl").write_text('{"q": "x", "a": "y"}\n')
    runner = TaskRunner(load_task_spec(spec_file), [tmp_path])
    runner.bind(load_backend(ModelSettings(model=str(penalised), batch_size=2)))
    generation = task_config(runner, [None])["generation"]
    assert generation["do_sample"] is False and generation["num_beams"] == 1
    assert "temperature" not in generation  # the HF backend has none to state
    assert generation["generation_config"]["applied"] == {"repetition_penalty": 1.3}
