"""The vllm backend against vLLM's real engine (its CPU build here: ``tox -e vllm``).

Every test reuses the session's real engine on the default model (SmolLM2-135M, float32;
tests/vllm_engine/conftest.py) or starts its own: no fake engine. Compared with the hf
backend on the same benchmark items, with the chat template on and off: the same prompts,
the same argmax and log-likelihoods within :data:`LL_TOLERANCE`, the same greedy outputs; a
model whose generation config sets ``repetition_penalty: 1.3`` gives
``model.generate(do_sample=False)``'s tokens on both backends, and a field vLLM cannot
apply is named before the engine starts; a data-parallel replica that cannot start says
why in the engine's words. The plugin's run is in ``test_vllm_plugin.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

from engine_runs import EAGER, SMALL_SHARE, run_task

from pytest_llmeval._errors import ModelError
from pytest_llmeval.model import (
    GenerateRequest,
    ModelSettings,
    load_backend,
    resolve_model_path,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from transformers_generate import generate_alone

pytestmark = pytest.mark.vllm

#: |log-likelihood difference| between vLLM's and transformers' float32 CPU kernels on one
#: choice: measured at most 2.2e-5 over MMLU's first 100 items (letters) and 1.1e-4 over
#: their option texts, chat template off (docs/PARITY.md, "The vllm backend"); the bound
#: here is about nine times the larger.
LL_TOLERANCE = 1e-3
#: Items of each task compared: MMLU's first two are of two subjects (the first of each),
#: and every continuation of each is scored (16 rows an item and setting). vLLM scores a row
#: from its prompt log-probabilities with no prefix reuse: 8 MMLU items took 56-61 s here
#: against 9-12 s on the hf backend, so each item costs the CI about 7 s a setting. The
#: per-item parity over many items is measured in docs/evidence/PARITY.md; these guard it.
ITEMS = 2


@pytest.mark.parametrize("chat", ["off", "on"])
@pytest.mark.parametrize("task", ["mmlu", "mmlu_continuation"])
def test_loglikelihoods_match_the_hf_backend(
    engines: tuple[Any, Any], shared_benchmarks: Path, task: str, chat: str
) -> None:
    vllm_backend, hf_backend = engines
    ours = run_task(task, chat, vllm_backend, shared_benchmarks, ITEMS)
    reference = run_task(task, chat, hf_backend, shared_benchmarks, ITEMS)
    for a, b in zip(ours, reference, strict=True):
        assert a.error is None, a.error
        assert a.prompt == b.prompt
        assert a.bos_added == b.bos_added
        assert len(a.logprobs) == len(b.logprobs) > 1
        worst = max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True))
        assert worst < LL_TOLERANCE, (a.item_id, a.logprobs, b.logprobs)
        assert (a.pred, a.correct) == (b.pred, b.correct), a.item_id
    if chat == "on":  # the template applied on our side: multiple choice under it works
        assert ours[0].prompt.startswith("<|im_start|>")


@pytest.mark.parametrize("chat", ["off", "on"])
def test_greedy_outputs_match_the_hf_backend(
    engines: tuple[Any, Any], shared_benchmarks: Path, chat: str
) -> None:
    vllm_backend, hf_backend = engines
    ours = run_task("gsm8k", chat, vllm_backend, shared_benchmarks, ITEMS)
    reference = run_task("gsm8k", chat, hf_backend, shared_benchmarks, ITEMS)
    for a, b in zip(ours, reference, strict=True):
        assert a.prompt == b.prompt
        assert (a.output, a.finish_reason, a.n_output_tokens, a.stop_token) == (
            b.output,
            b.finish_reason,
            b.n_output_tokens,
            b.stop_token,
        ), a.item_id
        assert a.score == b.score


def test_stop_sequences_tokens_and_budget_end_a_generation_as_on_the_hf_backend(
    engines: tuple[Any, Any],
) -> None:
    vllm_backend, hf_backend = engines
    chat = vllm_backend.chat_template()
    requests = [
        GenerateRequest("Q: What is 2+3?\nA:", 32, ("\n\n", "Q:")),  # the budget
        GenerateRequest("List three colours:\n1.", 40, ("\n3.",)),  # a stop sequence
        GenerateRequest(chat.render([{"role": "user", "content": "Name a colour."}]), 48),
        GenerateRequest("x " * 9000, 16),  # does not fit the window (8192): not run
    ]
    ours = vllm_backend.generate(requests)
    reference = hf_backend.generate(requests)
    assert [r.finish_reason for r in ours] == ["length", "stop", "eos", "context_overflow"]
    assert ours[2].stop_token == "<|im_end|>"
    for a, b in zip(ours, reference, strict=True):
        assert (a.text, a.finish_reason, a.n_tokens, a.stop_token) == (
            b.text,
            b.finish_reason,
            b.n_tokens,
            b.stop_token,
        )


def test_info_states_the_engine(engines: tuple[Any, Any]) -> None:
    info = engines[0].info()
    assert info["backend"] == "vllm"
    assert info["dtype"] == "float32"
    engine = info["engine"]
    assert engine["vllm"] == __import__("vllm").__version__
    assert (engine["tensor_parallel"], engine["data_parallel"]) == (1, 1)
    assert engine["prefix_caching"] is True
    assert 0 < engine["memory_share"] <= 1
    assert info["decoding"]["generation_config"]["rule"] == "model"


# ---------------------------------------------------------------- the model's generation config


def _with_generation_config(model: str, target: Path, **fields: Any) -> Path:
    """The default model's files (linked) with ``fields`` in its generation config."""
    source = resolve_model_path(model)
    target.mkdir(parents=True)
    for path in source.iterdir():
        if path.name != "generation_config.json":
            (target / path.name).symlink_to(path)
    config_path = source / "generation_config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    config.update(fields)
    (target / "generation_config.json").write_text(json.dumps(config))
    return target


PROMPTS = [
    "one two three one two three one two",
    "Write the word banana five times: banana banana",
    "Q: What is 2+3?\nA:",
]


def test_a_repetition_penalty_gives_model_generate_on_both_backends(
    default_model: str, tmp_path: Path
) -> None:
    model = _with_generation_config(default_model, tmp_path / "penalised", repetition_penalty=1.3)
    hf: Any = load_backend(ModelSettings(model=str(model)))
    expected = [generate_alone(hf, p, 24) for p in PROMPTS]
    neutral = [generate_alone(hf, p, 24, repetition_penalty=1.0) for p in PROMPTS]
    assert expected != neutral  # the penalty changes these outputs
    requests = [GenerateRequest(p, 24) for p in PROMPTS]
    assert [r.text for r in hf.generate(requests)] == expected
    vllm_backend: Any = load_backend(
        ModelSettings(model=str(model), backend="vllm", vllm_args=EAGER, memory_share=SMALL_SHARE)
    )
    try:
        assert [r.text for r in vllm_backend.generate(requests)] == expected
        described = vllm_backend.info()["decoding"]["generation_config"]
        assert described["applied"] == {"repetition_penalty": 1.3}
    finally:
        vllm_backend.close()


def test_a_field_vllm_cannot_apply_is_named_before_the_engine_starts(
    default_model: str, tmp_path: Path
) -> None:
    model = _with_generation_config(default_model, tmp_path / "ngram", no_repeat_ngram_size=2)
    with pytest.raises(ModelError, match=r"no_repeat_ngram_size=2.*--llm-backend=hf"):
        load_backend(ModelSettings(model=str(model), backend="vllm"))


def test_a_replica_that_cannot_start_names_the_root_cause_from_its_log(default_model: str) -> None:
    """Ray keeps a replica's output in its worker log, and its own error opens with a
    traceback's head (here it cannot even carry the engine's error: pydantic's does not
    pickle). A window longer than the model's: the error is vLLM's, with the log it came
    from. (Too small a memory share, whose cause vLLM writes only to that log, gives the
    same message: docs/FAILURES.md; it costs a model load per replica, this does not.)"""
    import ray

    settings = ModelSettings(
        model=default_model, backend="vllm", data_parallel=2, max_length=100_000, vllm_args=EAGER
    )
    try:
        with pytest.raises(ModelError) as caught:
            load_backend(settings)
    finally:
        ray.shutdown()
    message = str(caught.value)
    assert message.startswith(
        "--llm-set vllm.data_parallel=2: a replica (a Ray actor) could not start its engine: "
    )
    assert "User-specified max_model_len (100000) is greater than the derived" in message
    assert "(its log: " in message and message.endswith(".err)")
