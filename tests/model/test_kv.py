"""The reserved key/value cache layer: the same states as transformers' DynamicLayer, written
in place; and the HF backend's generation with it equal to generation without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval.model import GenerateRequest, ModelSettings, load_backend

torch = pytest.importorskip("torch")
cache_utils = pytest.importorskip("transformers.cache_utils")
DynamicCache, DynamicLayer = cache_utils.DynamicCache, cache_utils.DynamicLayer

from pytest_llmeval.model import _kv  # noqa: E402  (needs transformers)

ReservedLayer, reserve_room = _kv.ReservedLayer, _kv.reserve_room


def _states(gen: Any, batch: int, n: int) -> tuple[Any, Any]:
    k = torch.randn((batch, 2, n, 4), generator=gen)
    return k, torch.randn((batch, 2, n, 4), generator=gen)


def _same(a: Any, b: Any) -> None:
    assert a.keys.shape == b.keys.shape
    assert torch.equal(a.keys, b.keys)
    assert torch.equal(a.values, b.values)
    assert a.get_seq_length() == b.get_seq_length()


def test_reserved_layer_holds_what_a_dynamic_layer_holds() -> None:
    """Prefill, single steps past the reserve (the buffer grows), rows leaving the batch,
    a crop: after every operation both layers hold the same tensors."""
    gen = torch.Generator().manual_seed(0)
    plain, reserved = DynamicLayer(), ReservedLayer(reserve=2)
    steps = [("update", 5), ("update", 1), ("update", 1), ("update", 1), ("select", [0, 2])]
    steps += [("update", 1), ("crop", -2), ("update", 3), ("update", 1)]
    batch = 3
    for op, arg in steps:
        if op == "update":
            assert isinstance(arg, int)
            k, v = _states(gen, batch, arg)
            out_plain = plain.update(k, v)
            out_reserved = reserved.update(k, v)
            assert torch.equal(out_plain[0], out_reserved[0])
            assert torch.equal(out_plain[1], out_reserved[1])
        elif op == "select":
            assert isinstance(arg, list)
            index = torch.tensor(arg)
            plain.batch_select_indices(index)
            reserved.batch_select_indices(index)
            batch = len(arg)
        else:
            assert isinstance(arg, int)
            plain.crop(arg)
            reserved.crop(arg)
        _same(plain, reserved)
    assert reserved._keys_buf is not None
    assert reserved._keys_buf.shape[2] > reserved.get_seq_length()  # room kept in place


def test_reserved_room_never_writes_into_states_it_started_from() -> None:
    """A cache built from cached prefix states (a broadcast view of one row, as the backend
    builds for rows sharing a prefix) is copied before anything is written."""
    gen = torch.Generator().manual_seed(1)
    k0, v0 = _states(gen, 1, 6)
    k_before, v_before = k0.clone(), v0.clone()
    cache = DynamicCache(ddp_cache_data=[(k0.expand(3, -1, -1, -1), v0.expand(3, -1, -1, -1))])
    reference = DynamicCache(ddp_cache_data=[(k0.expand(3, -1, -1, -1), v0.expand(3, -1, -1, -1))])
    cache = reserve_room(cache, reserve=4)
    assert isinstance(cache.layers[0], ReservedLayer)
    for n in (2, 1, 1):
        k, v = _states(gen, 3, n)
        got = cache.update(k, v, 0)
        want = reference.update(k, v, 0)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(k0, k_before) and torch.equal(v0, v_before)
    # layers the cache creates later are reserved ones too
    empty = reserve_room(DynamicCache(), reserve=4)
    empty.update(*_states(gen, 2, 3), 0)
    assert isinstance(empty.layers[0], ReservedLayer)


@pytest.fixture(scope="module")
def backend(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    return load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=4))


FEWSHOT = "Answer the questions.\n\n" + "Question: two plus two? Answer: four\n\n" * 5


def test_generation_with_reserved_room_equals_generation_with_concatenation(
    backend, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The same tokens with the reserved cache (a generous reserve, and a reserve of one
    that makes every step grow the buffer) as with transformers' own concatenating cache;
    rows leave the batch at different steps (stop sequences, budgets); the cached few-shot
    prefix states are left untouched."""
    prompts = [FEWSHOT + f"Question: {q}? Answer:" for q in ("one", "two and three", "x")]
    prompts += ["Hello", "A much longer prompt without any shared few-shot prefix at all"]
    requests = [
        GenerateRequest(p, max_new_tokens=4 + 3 * i, stop=(".",), shared_prefix=len(FEWSHOT))
        if p.startswith(FEWSHOT)
        else GenerateRequest(p, max_new_tokens=4 + 3 * i)
        for i, p in enumerate(prompts)
    ]
    backend._prefixes.clear()
    reserved = backend.generate(requests)
    cached = {
        key: [(k.clone(), v.clone()) for k, v in state[0]]
        for key, state in backend._prefixes.items()
    }
    assert cached  # the few-shot prefix was cached and reused
    monkeypatch.setattr(_kv, "reserve_room", lambda cache, reserve: cache)
    concatenated = backend.generate(requests)
    monkeypatch.setattr(_kv, "reserve_room", lambda cache, reserve: reserve_room(cache, 1))
    growing = backend.generate(requests)
    for results in (concatenated, growing):
        assert [(r.text, r.n_tokens, r.finish_reason) for r in results] == [
            (r.text, r.n_tokens, r.finish_reason) for r in reserved
        ]
    assert {r.n_tokens for r in reserved} != {reserved[0].n_tokens}  # rows left at different steps
    for key, layers in cached.items():
        for (k, v), (k_now, v_now) in zip(layers, backend._prefixes[key][0], strict=True):
            assert torch.equal(k, k_now) and torch.equal(v, v_now)


def test_the_decoder_computes_the_same_states_from_a_reserved_cache(backend) -> None:  # type: ignore[no-untyped-def]
    """Attention over the views of the reserved buffer (not contiguous) gives the hidden
    states that transformers' concatenating cache gives: a prefill, then single steps past
    the reserve, for a batch of two rows."""
    ids = torch.randint(5, 200, (2, 48), generator=torch.Generator().manual_seed(2))
    outputs = []
    for cache in (DynamicCache(), reserve_room(DynamicCache(), 4)):
        with torch.inference_mode():
            states = [
                backend._decoder(
                    input_ids=ids[:, :30], use_cache=True, **{backend._cache_arg: cache}
                ).last_hidden_state
            ]
            for t in range(30, 48):
                out = backend._decoder(
                    input_ids=ids[:, t : t + 1], use_cache=True, **{backend._cache_arg: cache}
                )
                states.append(out.last_hidden_state)
        outputs.append(torch.cat(states, 1))
    assert isinstance(cache.layers[0], ReservedLayer)
    torch.testing.assert_close(outputs[1], outputs[0], rtol=0, atol=1e-5)
