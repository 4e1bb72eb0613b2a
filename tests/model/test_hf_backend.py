"""The HF backend on a tiny random model: log-likelihood split, batching, generation."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval.model import (
    GenerateRequest,
    LoglikelihoodRequest,
    ModelSettings,
    load_backend,
)

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def backend(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    return load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=3))


def _reference_logprob(backend, context: str, continuation: str) -> float:  # type: ignore[no-untyped-def]
    """Score one request alone, straight from the model, following lm-eval's split."""
    n = len(context) - len(context.rstrip())
    if n:
        continuation = context[-n:] + continuation
        context = context[:-n]
    tok = backend.tokenizer
    whole = tok(context + continuation, add_special_tokens=False)["input_ids"]
    ctx = tok(context, add_special_tokens=False)["input_ids"]
    cont = whole[len(ctx) :]
    inp = torch.tensor([(ctx + cont)[:-1]], device=backend.device)
    with torch.inference_mode():
        logits = backend.model(input_ids=inp).logits[0].cpu()
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    start = len(ctx) - 1
    return float(sum(logprobs[start + i, t] for i, t in enumerate(cont)))


REQUESTS = [
    LoglikelihoodRequest("Question: what is two plus three? Answer:", " 5"),
    LoglikelihoodRequest("Question: what is two plus three? Answer:", " seven"),
    LoglikelihoodRequest("A. red B. green C. blue D. yellow\nAnswer: ", "B"),
    LoglikelihoodRequest("Q: How many apples are left?", " A: There are 7 apples left."),
    LoglikelihoodRequest("one", " two three four five six seven eight nine ten"),
    LoglikelihoodRequest("The answer is", " 42"),
    LoglikelihoodRequest("The answer is", " B"),
]


def test_batched_loglikelihood_equals_scoring_each_alone(backend) -> None:  # type: ignore[no-untyped-def]
    batched = backend.loglikelihood(REQUESTS)
    assert len(batched) == len(REQUESTS)
    for req, res in zip(REQUESTS, batched, strict=True):
        alone = backend.loglikelihood([req])[0]
        reference = _reference_logprob(backend, req.context, req.continuation)
        assert math.isclose(res.logprob, alone.logprob, abs_tol=1e-4)
        assert math.isclose(res.logprob, reference, abs_tol=1e-4), req
        assert res.logprob < 0
        assert res.n_tokens >= 1


def test_trailing_space_moves_to_the_continuation(backend) -> None:  # type: ignore[no-untyped-def]
    a = backend.loglikelihood([LoglikelihoodRequest("Answer: ", "B")])[0]
    b = backend.loglikelihood([LoglikelihoodRequest("Answer:", " B")])[0]
    assert a.logprob == pytest.approx(b.logprob, abs=1e-5)


def test_is_greedy_matches_argmax(backend) -> None:  # type: ignore[no-untyped-def]
    context = "Question: what is two plus three? Answer:"
    ids = backend.tokenizer(context, add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        top = int(
            backend.model(input_ids=torch.tensor([ids], device=backend.device))
            .logits[0, -1]
            .argmax()
        )
    greedy_text = backend.tokenizer.decode([top])
    res = backend.loglikelihood([LoglikelihoodRequest(context, greedy_text)])[0]
    if res.n_tokens == 1:  # the decoded token re-encodes to itself
        assert res.is_greedy


def test_generation_is_deterministic_and_batch_independent(backend) -> None:  # type: ignore[no-untyped-def]
    reqs = [
        GenerateRequest("Question: what is two plus three? Answer:", max_new_tokens=6),
        GenerateRequest("Q: How many apples", max_new_tokens=6),
        GenerateRequest("one two", max_new_tokens=6),
        GenerateRequest("The answer is", max_new_tokens=6),
    ]
    first = backend.generate(reqs)
    again = backend.generate(reqs)
    assert [r.text for r in first] == [r.text for r in again]
    alone = [backend.generate([r])[0].text for r in reqs]
    assert [r.text for r in first] == alone
    assert all(r.n_tokens <= 6 for r in first)


def test_generation_cuts_at_stop_sequences(backend) -> None:  # type: ignore[no-untyped-def]
    free = backend.generate([GenerateRequest("The answer is", max_new_tokens=12)])[0]
    if len(free.text) < 3:
        pytest.skip("random model produced too little text to place a stop sequence")
    stop = free.text[1:3]
    cut = backend.generate([GenerateRequest("The answer is", max_new_tokens=12, stop=(stop,))])[0]
    assert stop not in cut.text
    assert free.text.startswith(cut.text)
    assert cut.finish_reason == "stop"


def test_info_records_settings(backend, tiny_model_dir: Path) -> None:  # type: ignore[no-untyped-def]
    info = backend.info()
    on_gpu = torch.cuda.is_available()  # device auto: float32 on CPU, bfloat16 on a GPU
    assert info["dtype"] == ("bfloat16" if on_gpu else "float32")
    assert info["device"] == ("cuda" if on_gpu else "cpu")
    assert info["batch_size"] == 3
    assert (info["batch_size_source"], info["prefix_sharing"]) == ("fixed", True)
    assert info["model_path"] == str(tiny_model_dir)


def test_bad_settings_are_reported(tiny_model_dir: Path) -> None:
    from pytest_llmeval import ModelError

    with pytest.raises(ModelError, match="--llm-dtype"):
        load_backend(ModelSettings(model=str(tiny_model_dir), dtype="float8"))
    with pytest.raises(ModelError, match="--llm-model"):
        load_backend(ModelSettings(model=str(tiny_model_dir / "nope")))


# ------------------------------------------------------------------ context window

LONG = " ".join(f"word{k}" for k in range(400))  # far more than 64 tokens


@pytest.fixture(scope="module")
def short_window(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    """The tiny model with a 64-token window (--llm-set model.max_length)."""
    return load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=3, max_length=64))


def test_a_prompt_that_does_not_fit_is_not_run_by_default(short_window) -> None:  # type: ignore[no-untyped-def]
    n_prompt = len(short_window.tokenizer(LONG, add_special_tokens=False)["input_ids"])
    assert n_prompt > 64
    fits, too_long = short_window.generate(
        [GenerateRequest("one two", max_new_tokens=4), GenerateRequest(LONG, max_new_tokens=4)]
    )
    assert fits.finish_reason in ("stop", "length", "eos")
    assert (fits.truncated_tokens, fits.context_window) == (0, 64)
    assert too_long.finish_reason == "context_overflow"
    assert (too_long.text, too_long.n_tokens) == ("", 0)
    assert (too_long.n_prompt_tokens, too_long.context_window) == (n_prompt, 64)
    # Exactly at the limit still runs; one token more does not.
    ids = short_window.tokenizer(LONG, add_special_tokens=False)["input_ids"]
    edge = short_window.tokenizer.decode(ids[:60])
    n_edge = len(short_window.tokenizer(edge, add_special_tokens=False)["input_ids"])
    at_limit = short_window.generate([GenerateRequest(edge, max_new_tokens=64 - n_edge)])[0]
    over = short_window.generate([GenerateRequest(edge, max_new_tokens=65 - n_edge)])[0]
    assert at_limit.finish_reason != "context_overflow"
    assert over.finish_reason == "context_overflow"


@pytest.mark.parametrize("policy", ["truncate_middle", "truncate_left"])
def test_truncation_is_opt_in_and_counted(short_window, policy: str) -> None:  # type: ignore[no-untyped-def]
    from pytest_llmeval.model._types import fit_tokens as _fit

    ids = short_window.tokenizer(LONG, add_special_tokens=False)["input_ids"]
    result = short_window.generate(
        [GenerateRequest(LONG, max_new_tokens=4, overflow=policy)]  # type: ignore[arg-type]
    )[0]
    assert result.finish_reason != "context_overflow"
    assert result.n_prompt_tokens == len(ids)
    assert result.truncated_tokens == len(ids) - 60
    # The generation is the model's greedy continuation of exactly the kept tokens.
    kept = _fit(ids, 60, policy)
    with torch.inference_mode():
        direct = short_window.model.generate(
            input_ids=torch.tensor([kept]),
            attention_mask=torch.ones(1, len(kept), dtype=torch.long),
            max_new_tokens=4,
            do_sample=False,
            pad_token_id=short_window.tokenizer.pad_token_id,
        )[0, len(kept) :].tolist()
    eos = short_window.tokenizer.eos_token_id
    if eos in direct:
        direct = direct[: direct.index(eos)]
    assert result.text == short_window.tokenizer.decode(direct, skip_special_tokens=True)


def test_fit_keeps_head_and_tail_or_the_end() -> None:
    from pytest_llmeval.model._types import fit_tokens as _fit

    tokens = list(range(10))
    assert _fit(tokens, 5, "truncate_middle") == [0, 1, 7, 8, 9]
    assert _fit(tokens, 4, "truncate_middle") == [0, 1, 8, 9]
    assert _fit(tokens, 5, "truncate_left") == [5, 6, 7, 8, 9]


def test_token_detail_gives_per_token_logprobs_and_zscores(backend) -> None:  # type: ignore[no-untyped-def]
    context, continuation = "Q: How many apples", " are left in the basket today?"
    plain, detailed = backend.loglikelihood(
        [
            LoglikelihoodRequest(context, continuation),
            LoglikelihoodRequest(context + " ", continuation.lstrip(), token_detail=True),
        ]
    )
    assert plain.token_logprobs == plain.token_zscores == ()
    assert len(detailed.token_logprobs) == len(detailed.token_zscores) == detailed.n_tokens
    assert sum(detailed.token_logprobs) == pytest.approx(detailed.logprob, abs=1e-4)
    assert detailed.logprob == pytest.approx(plain.logprob, abs=1e-4)  # same split
    # The z-scores by hand, from the model's own next-token distributions.
    tok = backend.tokenizer
    ctx = tok(context, add_special_tokens=False)["input_ids"]
    whole = tok(context + continuation, add_special_tokens=False)["input_ids"]
    cont = whole[len(ctx) :]
    with torch.inference_mode():
        logits = (
            backend.model(input_ids=torch.tensor([(ctx + cont)[:-1]], device=backend.device))
            .logits[0]
            .float()
            .cpu()
        )
    logprobs = torch.log_softmax(logits, dim=-1)[len(ctx) - 1 :]
    probs = logprobs.exp()
    mean = (probs * logprobs).sum(-1)
    std = ((probs * logprobs**2).sum(-1) - mean**2).sqrt()
    chosen = logprobs[torch.arange(len(cont)), torch.tensor(cont)]
    expected = ((chosen - mean) / std).tolist()
    assert list(detailed.token_zscores) == pytest.approx(expected, abs=1e-3)


# A few-shot-like block many requests share (well over the backend's 32-token minimum).
FEWSHOT = (
    "".join(
        f"Question: what is {a} plus {b}? Answer: {a + b}\n\n" for a, b in [(1, 2), (3, 4), (5, 6)]
    )
    * 3
)


# Another subject's block: rows continuing different prefixes share batches.
OTHER = "Translate to French.\n\n" + "English: the cat\nFrench: le chat\n\n" * 6


def _questions() -> list[tuple[str, list[str]]]:
    return [
        (FEWSHOT + "Question: what is two plus three? Answer:", [" five", " seven apples", " 5"]),
        (FEWSHOT + "Question: how many legs has a spider? Answer:", [" eight legs", " six"]),
        (FEWSHOT + "Question: name a colour. Answer:", [" red", " green and blue", " A"]),
        (OTHER + "English: the dog\nFrench:", [" le chien", " la", " le chat noir"]),
    ]


def _prefix_of(context: str) -> int:
    return len(FEWSHOT) if context.startswith(FEWSHOT) else len(OTHER)


def test_shared_prefixes_and_options_give_the_unshared_numbers(backend) -> None:  # type: ignore[no-untyped-def]
    """The few-shot block computed once and cached, each question's context run once for
    its options: the same log-likelihoods as each row scored alone from scratch."""
    reqs = [
        LoglikelihoodRequest(ctx, cont, shared_prefix=_prefix_of(ctx))
        for ctx, conts in _questions()
        for cont in conts
    ]
    backend._prefixes.clear()
    results = backend.loglikelihood(reqs)
    assert len(backend._prefixes) == 2  # the few-shot blocks only, not each question
    for cached in backend._prefixes:
        assert backend.tokenizer.decode(list(cached)) in (FEWSHOT, OTHER)
    assert backend.loglikelihood(reqs) == results  # a second call reuses the cache
    for req, res in zip(reqs, results, strict=True):
        reference = _reference_logprob(backend, req.context, req.continuation)
        assert math.isclose(res.logprob, reference, abs_tol=1e-4), req
        alone = backend.loglikelihood([LoglikelihoodRequest(req.context, req.continuation)])[0]
        assert res.is_greedy == alone.is_greedy
        assert res.n_tokens == alone.n_tokens


def test_a_prefix_hint_that_does_not_match_the_tokens_is_harmless(backend) -> None:  # type: ignore[no-untyped-def]
    """A hint that cuts a token in two, or covers the whole context, still scores right."""
    ctx, conts = _questions()[0]
    for hint in (len(FEWSHOT) - 3, len(ctx), 5):
        for cont in conts:
            res = backend.loglikelihood([LoglikelihoodRequest(ctx, cont, shared_prefix=hint)])[0]
            assert math.isclose(res.logprob, _reference_logprob(backend, ctx, cont), abs_tol=1e-4)


def test_generation_with_a_shared_prefix_equals_generation_without(backend) -> None:  # type: ignore[no-untyped-def]
    """Prefix states reused, padding between the prefix and each prompt's own tokens: the
    same greedy tokens as left-padded prompts without sharing, and as each prompt alone."""
    prompts = [ctx for ctx, _ in _questions()] + [FEWSHOT + "Question: what", "Hello"]
    plain = backend.generate([GenerateRequest(p, max_new_tokens=8) for p in prompts])
    shared = backend.generate(
        [GenerateRequest(p, max_new_tokens=8, shared_prefix=_prefix_of(p)) for p in prompts]
    )
    assert [r.text for r in shared] == [r.text for r in plain]
    assert [r.n_tokens for r in shared] == [r.n_tokens for r in plain]
    alone = [backend.generate([GenerateRequest(p, max_new_tokens=8)])[0].text for p in prompts]
    assert [r.text for r in shared] == alone


def test_auto_batch_size_is_found_once_recorded_and_reused(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMEVAL_CACHE_DIR", str(tmp_path))
    first = load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=0))
    assert first.batch_size in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
    assert first.info()["batch_size_source"] == "auto (measured now)"
    assert (tmp_path / "batch_sizes.json").is_file()
    again = load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=0))
    assert again.batch_size == first.batch_size
    assert again.info()["batch_size_source"].endswith("reused)")
    fixed = load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=3))
    assert (fixed.batch_size, fixed.info()["batch_size_source"]) == (3, "fixed")


def test_gpu_auto_batch_size_is_probed_at_the_rows_width_not_the_window(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--llm-batch-size=auto`` where memory is the limit (a GPU): the size is probed for
    rows of 2,048 tokens, not for the model's whole window (131,072 positions here, which
    gave batch size 1), and again per power of two for longer rows. A pretend GPU that
    holds 8,192 tokens a batch: every batch of real work fits it, the sizes are recorded
    per width, and the numbers are those of a fixed batch size."""
    import json
    import shutil

    from pytest_llmeval.model._hf import largest_fitting, probe_width

    assert probe_width(0, 131072) == 2048
    assert probe_width(2049, 131072) == 4096
    assert (probe_width(0, 1024), probe_width(10**6, 8192)) == (1024, 8192)
    monkeypatch.setenv("LLMEVAL_CACHE_DIR", str(tmp_path))
    long = shutil.copytree(tiny_model_dir, tmp_path / "long")
    config = json.loads((long / "config.json").read_text())
    (long / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 131072}))
    backend: Any = load_backend(ModelSettings(model=str(long), batch_size=8))
    assert backend.max_length == 131072
    words = "one two three four five six seven eight nine ten apples left answer "
    contexts = [f"{i} " + words * (10 + 30 * i) for i in range(6)]
    contexts += [f"{i} short " + words * 3 for i in range(4)]
    requests = [LoglikelihoodRequest(c, f" {w}") for c in contexts for w in ("red", "blue")]
    prompts = [contexts[0], contexts[3], contexts[5]]
    wanted = [GenerateRequest(p, max_new_tokens=6) for p in prompts]
    lengths = [len(backend.tokenizer(c).input_ids) for c in contexts]
    assert min(lengths) < 2048 < 4096 < max(lengths) < 8192
    assert sum(n < 2048 for n in lengths) >= 4
    reference = backend.loglikelihood(requests)
    outputs = backend.generate(wanted)

    budget = 8192
    shapes: list[tuple[int, int]] = []
    decode = backend._decode

    def pretend_gpu(states, ids, mask, **kwargs):  # type: ignore[no-untyped-def]
        held = [0 if s is None else int(s[1].shape[-1]) for s in states]
        rows, width = ids.shape
        if rows * (width + max(held)) > budget:
            raise torch.cuda.OutOfMemoryError(f"{rows} rows x {width} tokens")
        shapes.append((rows, width + max(held)))
        return decode(states, ids, mask, **kwargs)

    monkeypatch.setattr(backend, "_decode", pretend_gpu)

    def fits(rows: int) -> None:
        if rows * 4096 > budget:
            raise torch.cuda.OutOfMemoryError("pretend")

    def never(rows: int) -> None:
        raise torch.cuda.OutOfMemoryError("pretend")

    assert (largest_fitting(fits), largest_fitting(never)) == (2, 1)
    monkeypatch.setattr(backend, "_memory_bound", True)
    backend._by_width.clear()
    backend._batch_size, backend.batch_size_source = backend._auto_batch_size(2048)
    backend._by_width[2048] = backend._batch_size
    assert backend.batch_size == 4
    assert backend.batch_size_source == "auto (measured now, rows of 2048 tokens)"
    shapes.clear()
    again = backend.loglikelihood(requests)
    again_out = backend.generate(wanted)
    assert backend.info()["batch_size_by_width"] == {"2048": 4, "4096": 2, "8192": 1}
    assert shapes and all(rows * width <= budget for rows, width in shapes)
    assert max(rows for rows, _ in shapes) == 4  # short rows still batch by four
    for a, b in zip(reference, again, strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
        assert a.is_greedy == b.is_greedy
    assert [r.text for r in again_out] == [r.text for r in outputs]
    stored = json.loads((tmp_path / "batch_sizes.json").read_text())
    assert sorted(json.loads(k)[-1] for k in stored) == [2048, 4096, 8192]


def test_device_map_places_the_model_through_accelerate(tiny_model_dir: Path) -> None:
    pytest.importorskip("accelerate")
    mapped = load_backend(ModelSettings(model=str(tiny_model_dir), device_map="auto"))
    plain = load_backend(ModelSettings(model=str(tiny_model_dir)))
    assert mapped.info()["device_map"] == "auto"
    req = [LoglikelihoodRequest("The answer is", " 42")]
    assert mapped.loglikelihood(req)[0].logprob == pytest.approx(
        plain.loglikelihood(req)[0].logprob, abs=1e-5
    )
    with pytest.raises(Exception, match=r"hf\.device_map"):
        load_backend(ModelSettings(model=str(tiny_model_dir), device_map="auto", device="cpu"))
