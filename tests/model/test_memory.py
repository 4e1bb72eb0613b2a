"""What the HF backend keeps in memory: a generation's key/value caches are released as
soon as the next one is laid out, and cached prefix states go when they are cleared."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval.model import GenerateRequest, LoglikelihoodRequest, ModelSettings, load_backend

torch = pytest.importorskip("torch")

FEWSHOT = "".join(
    f"Question: what is {a} plus {b}? Answer: {a + b}\n\n" for a in range(4) for b in (1, 7)
)


@pytest.fixture(scope="module")
def backend(tiny_model_dir: Path) -> Any:
    return load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=2))


def test_one_laid_out_cache_alive_at_each_decode_step(
    backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows end at different budgets, so new rows are admitted while others run: at every
    decode step the only key/value buffers alive are those of the step's own cache (the
    prefill's buffers, the old cache and the rows' states taken out of it are gone; kept,
    each would be another copy of the batch's keys and values for the rest of the run)."""
    laid_out = backend._laid_out
    step = backend._step
    buffers: list[weakref.ref[Any]] = []
    strays: list[int] = []

    def recording_laid_out(*args: Any, **kwargs: Any) -> Any:
        cache, mask = laid_out(*args, **kwargs)
        buffers.extend(weakref.ref(layer._keys_buf) for layer in cache.layers)
        return cache, mask

    def checking_step(
        tokens: Any, positions: Any, mask: Any, cache: Any, lengths: Any, rows: Any = ()
    ) -> Any:
        own = {id(layer._keys_buf) for layer in cache.layers}
        alive = [ref() for ref in buffers]
        strays.append(sum(1 for b in alive if b is not None and id(b) not in own))
        del alive
        return step(tokens, positions, mask, cache, lengths, rows)

    monkeypatch.setattr(backend, "_laid_out", recording_laid_out)
    monkeypatch.setattr(backend, "_step", checking_step)
    prompt = FEWSHOT + "Question: what is two plus three? Answer:"
    requests = [
        GenerateRequest(prompt, max_new_tokens=budget, shared_prefix=len(FEWSHOT))
        for budget in (3, 9, 4, 7, 5)
    ]
    results = backend.generate(requests)
    assert len(results) == 5
    assert len(buffers) > 2 * len(backend._decoder.layers)  # several admissions ran
    assert strays and max(strays) == 0


def test_clearing_the_prefix_cache_drops_every_state(backend: Any) -> None:
    """A shared prefix's state is cached across calls (the plugin clears it when a new task
    starts); cleared, nothing of it is left."""
    question = "Question: what is two plus three? Answer:"
    backend.loglikelihood(
        [LoglikelihoodRequest(FEWSHOT + question, " 5", shared_prefix=len(FEWSHOT))]
    )
    assert backend._prefixes and backend._prefix_bytes > 0
    backend.clear_prefix_cache()
    assert not backend._prefixes
    assert backend._prefix_bytes == 0
    assert not backend._text_tokens


def test_prefix_cache_stays_under_its_bound(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefixes beyond the cache's byte bound push the least recently used out."""
    from pytest_llmeval.model import _hf

    backend.clear_prefix_cache()
    question = "Question: what is two plus three? Answer:"
    fewshots = [f"Example {i}.\n\n" + FEWSHOT for i in range(4)]
    backend.loglikelihood(
        [LoglikelihoodRequest(fewshots[0] + question, " 5", shared_prefix=len(fewshots[0]))]
    )
    one = backend._prefix_bytes
    monkeypatch.setattr(_hf, "_PREFIX_CACHE_BYTES", int(one * 2.5))
    for text in fewshots[1:]:
        backend.loglikelihood(
            [LoglikelihoodRequest(text + question, " 5", shared_prefix=len(text))]
        )
    assert len(backend._prefixes) == 2
    assert backend._prefix_bytes <= int(one * 2.5)
