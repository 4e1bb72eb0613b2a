"""Continuous batching in the HF backend: the batch is kept full, every sequence's tokens
are those it gets alone and those of transformers' own greedy ``generate``."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from transformers_generate import generate_alone

from pytest_llmeval.model import GenerateRequest, ModelSettings, load_backend

torch = pytest.importorskip("torch")

FEWSHOT = "".join(
    f"Question: what is {a} plus {b}? Answer: {a + b}\n\n" for a in range(4) for b in (1, 7)
)
QUESTIONS = [
    "Question: what is two plus three? Answer:",
    "Question: how many legs has a spider? Answer:",
    "Question: name a colour. Answer:",
    "Question: what is the capital of France, and of Italy? Answer:",
    "Question: count to five. Answer:",
]


@pytest.fixture(scope="module", params=["auto", "transformers", "auto+lookup"])
def backend(tiny_model_dir: Path, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """The backend with each way of running decode steps: the fused step (``auto`` on
    this CPU, float32 Llama), the model's own forward pass, and the fused step checking
    prompt-lookup drafts of up to 3 tokens."""
    step, _, lookup = request.param.partition("+")
    loaded = load_backend(
        ModelSettings(
            model=str(tiny_model_dir),
            batch_size=3,
            decode_step=step,
            prompt_lookup=3 if lookup else 0,
        )
    )
    expected = "fused" if step == "auto" else "transformers"
    assert loaded.info()["decode_plan"]["step"] == expected
    return loaded


def _requests(stop: str | None = None) -> list[GenerateRequest]:
    """Eleven requests (batch size 3: eight admissions) with budgets from 1 to 12, with and
    without a shared few-shot block, one without any prompt of its own beyond a word."""
    reqs = []
    for i, budget in enumerate([12, 3, 1, 9, 12, 5, 2, 12, 7, 4, 10]):
        question = QUESTIONS[i % len(QUESTIONS)]
        shared = i % 3 != 2
        context = FEWSHOT + question if shared else question + " " * (i % 2)
        reqs.append(
            GenerateRequest(
                context.rstrip(" ") if shared else context,
                max_new_tokens=budget,
                stop=(stop,) if stop else (),
                shared_prefix=len(FEWSHOT) if shared else 0,
            )
        )
    reqs.append(GenerateRequest("Hello", max_new_tokens=6))
    return reqs


def _decode_steps(backend: Any, run: Any) -> tuple[Any, list[int]]:
    """``run()``'s value and the rows of each decode step it made."""
    rows: list[int] = []
    step = backend._step

    def counted(tokens: Any, *args: Any) -> Any:
        rows.append(int(tokens.shape[0]))
        return step(tokens, *args)

    backend._step = counted
    try:
        return run(), rows
    finally:
        del backend._step


def test_the_batch_is_refilled_as_sequences_end(backend) -> None:  # type: ignore[no-untyped-def]
    reqs = _requests()
    results, rows = _decode_steps(backend, lambda: backend.generate(reqs))
    assert len(results) == len(reqs)
    # Full until the last request is admitted, then only draining: never a step with a
    # free row while requests wait (fixed batches would go 3, 2, 1, 3, ...).
    assert rows[0] == 3
    assert all(a >= b for a, b in itertools.pairwise(rows)), rows
    assert rows.count(3) >= len(rows) // 2
    # Every new token but those chosen at prefill came from a decode step.
    assert sum(rows) <= sum(r.n_tokens for r in results)


def test_prompt_lookup_keeps_the_greedy_tokens(tiny_model_dir: Path) -> None:
    """Drafts checked in the decode step: fewer row-steps than tokens, and every sequence
    exactly as one token per step gives it (a random model repeats itself a lot)."""
    reqs = [
        GenerateRequest(FEWSHOT + q, max_new_tokens=40, shared_prefix=len(FEWSHOT))
        for q in QUESTIONS
    ]

    def run(lookup: int) -> tuple[Any, list[int]]:
        loaded = load_backend(
            ModelSettings(model=str(tiny_model_dir), batch_size=3, prompt_lookup=lookup)
        )
        return _decode_steps(loaded, lambda: loaded.generate(reqs))

    plain, plain_rows = run(0)
    drafted, drafted_rows = run(4)
    assert [(r.text, r.n_tokens, r.finish_reason) for r in drafted] == [
        (r.text, r.n_tokens, r.finish_reason) for r in plain
    ]
    assert sum(plain_rows) == sum(r.n_tokens for r in plain) - len(reqs)
    assert sum(drafted_rows) < sum(plain_rows) * 0.8, (drafted_rows, plain_rows)


def test_each_sequence_gets_the_tokens_it_gets_alone(backend) -> None:  # type: ignore[no-untyped-def]
    reqs = _requests()
    together = backend.generate(reqs)
    alone = [backend.generate([r])[0] for r in reqs]
    assert [(r.text, r.n_tokens, r.finish_reason) for r in together] == [
        (r.text, r.n_tokens, r.finish_reason) for r in alone
    ]
    assert [r.n_tokens for r in together][:11] == [12, 3, 1, 9, 12, 5, 2, 12, 7, 4, 10]


def test_continuous_and_fixed_batches_agree_with_transformers(
    backend, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The continuous path, the fixed-batch path (models whose caches cannot be laid out
    again) and transformers' ``generate`` on each prompt alone: the same greedy tokens."""
    reqs = _requests()
    continuous = backend.generate(reqs)
    monkeypatch.setattr(backend, "_share", False)
    fixed = backend.generate(reqs)
    assert [r.text for r in fixed] == [r.text for r in continuous]
    for req, got in zip(reqs, continuous, strict=True):
        assert got.text == generate_alone(backend, req.context, req.max_new_tokens), req.context


def test_results_stream_as_sequences_end(backend) -> None:  # type: ignore[no-untyped-def]
    reqs = _requests()
    order = [index for index, _ in backend.generate_stream(reqs)]
    assert sorted(order) == list(range(len(reqs)))
    # The one-token request (third, admitted with the first two) ends at its prefill.
    assert order[0] == 2
    assert order.index(1) < order.index(0)  # a budget of 3 ends before one of 12


def test_stop_sequences_end_rows_mid_batch(backend) -> None:  # type: ignore[no-untyped-def]
    free = backend.generate(_requests())
    texts = [r.text for r in free if len(r.text) > 4]
    if not texts:
        pytest.skip("the random model produced too little text to place a stop sequence")
    stop = texts[0][2:4]
    cut = backend.generate(_requests(stop))
    alone = [backend.generate([r])[0] for r in _requests(stop)]
    assert [r.text for r in cut] == [r.text for r in alone]
    for whole, part in zip(free, cut, strict=True):
        assert whole.text.startswith(part.text)
        assert stop not in part.text
        assert part.finish_reason == ("stop" if stop in whole.text else whole.finish_reason)


def test_logits_that_turn_non_finite_mid_generation_end_the_row_as_an_error(
    backend,
) -> None:  # type: ignore[no-untyped-def]
    """NaN logits from the third decode step on (however the step runs, drafts or not):
    every sequence still running then ends as an error naming the output token, never
    with a token chosen from them."""
    reqs = [GenerateRequest(FEWSHOT + q, max_new_tokens=30) for q in QUESTIONS[:3]]
    clean = backend.generate(reqs)
    step = backend._step
    calls = [0]

    def poisoned(tokens: Any, *args: Any) -> Any:
        calls[0] += 1
        picked, finite = step(tokens, *args)
        if calls[0] >= 3:
            finite = [[False] * len(row) for row in finite]
        return picked, finite

    backend._step = poisoned
    try:
        got = backend.generate(reqs)
    finally:
        del backend._step
    for before, after in zip(clean, got, strict=True):
        if before.n_tokens <= 2:  # ended before the third step
            continue
        assert after.finish_reason == "error"
        assert after.text == ""
        assert "not finite" in str(after.error)
        assert 2 <= after.n_tokens < before.n_tokens


@pytest.mark.parametrize("block", [1, 5])
def test_prompts_prefilled_in_blocks_get_the_same_tokens(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """The fused step prefills prompts in blocks aligned on their ends (shorter prompts
    are holes in the first blocks, rows without a cached prefix start from nothing): with
    blocks of 1 and 5 tokens every sequence is what transformers' forward pass gives."""
    from pytest_llmeval.model import _hf

    reqs = _requests()
    settings = ModelSettings(model=str(tiny_model_dir), batch_size=3, decode_step="transformers")
    plain = load_backend(settings).generate(reqs)
    monkeypatch.setattr(_hf, "_PREFILL_BLOCK", block)
    fused = load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=3)).generate(reqs)
    assert [(r.text, r.n_tokens, r.finish_reason) for r in fused] == [
        (r.text, r.n_tokens, r.finish_reason) for r in plain
    ]


def test_the_fused_prefill_leaves_the_states_transformers_leaves(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each row's keys and values after its prompt (positions included: rotary embeddings
    are in the keys) and its first token are those of transformers' forward pass, with and
    without a cached prefix, over prompt blocks of 4 tokens."""
    from pytest_llmeval.model import _hf

    monkeypatch.setattr(_hf, "_PREFILL_BLOCK", 4)
    backend = load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=3))
    prefix = tuple(backend._encode_prompt(FEWSHOT))
    owns = [backend._encode(q) for q in QUESTIONS[:3]]
    with torch.inference_mode():
        cached = backend._prefix_state(prefix, keep=True)
        states = [cached, None, cached]
        _, firsts, _, fused = backend._prefill(states, owns)
        ids, mask = backend._right_padded(owns)
        hidden, plain = backend._decode(states, ids, mask, want_state=True)
        last = hidden[torch.arange(3), mask.sum(1) - 1]
        assert firsts == backend._head(last).argmax(-1).tolist()
    for (fused_kv, fused_mask), (plain_kv, plain_mask), own in zip(fused, plain, owns, strict=True):
        real = plain_mask.nonzero().squeeze(1)  # the transformers state keeps padding holes
        assert len(fused_mask) == len(real) == len(own) + (0 if own is owns[1] else len(prefix))
        for (fk, fv), (pk, pv) in zip(fused_kv, plain_kv, strict=True):
            assert torch.allclose(fk, pk.index_select(2, real), atol=1e-5)
            assert torch.allclose(fv, pv.index_select(2, real), atol=1e-5)


def test_a_qwen3_model_generates_through_the_fused_step(tiny_qwen3_dir: Path) -> None:
    """Qwen3 takes the fused step (its per-head norms applied), prompt blocks and drafts
    included, and every sequence is what transformers' forward pass gives."""
    reqs = _requests()
    plain = load_backend(
        ModelSettings(model=str(tiny_qwen3_dir), batch_size=3, decode_step="transformers")
    )
    fused = load_backend(ModelSettings(model=str(tiny_qwen3_dir), batch_size=3, prompt_lookup=3))
    assert fused.info()["decode_plan"]["step"] == "fused"
    assert [(r.text, r.n_tokens, r.finish_reason) for r in fused.generate(reqs)] == [
        (r.text, r.n_tokens, r.finish_reason) for r in plain.generate(reqs)
    ]
