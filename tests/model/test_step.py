"""The fused decode step (``model/_step.py``) against the model's own forward pass: the
same logits to float32 summation noise and the same greedy tokens, on ragged caches with
holes, for each supported architecture; and the cases where it must not run."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_llmeval.model import GenerateRequest, ModelSettings, SettingsError, load_backend

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from pytest_llmeval.model import _step  # noqa: E402
from pytest_llmeval.model._kv import reserved_cache  # noqa: E402
from pytest_llmeval.model._step import (  # noqa: E402
    CHECK_STEPS,
    CHECK_TOLERANCE,
    FusedStep,
    unsupported_reason,
)

#: The sizes of the small random models (grouped-query attention: 4 heads over 2).
SIZES: dict[str, Any] = dict(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
)


def _model(kind: str) -> Any:
    """A small random model of ``kind``."""
    torch.manual_seed(0)
    common = SIZES
    if kind == "llama":
        config: Any = transformers.LlamaConfig(**common)
    elif kind == "llama-biased":  # attention and MLP biases, RoPE scaling
        config = transformers.LlamaConfig(
            **common,
            attention_bias=True,
            mlp_bias=True,
            rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
        )
    elif kind == "qwen2":  # query/key/value biases
        config = transformers.Qwen2Config(**common, use_sliding_window=False)
    elif kind == "mistral":
        config = transformers.MistralConfig(**common, sliding_window=None)
    elif kind == "qwen3":  # per-head query/key norms; heads wider than hidden / heads
        config = transformers.Qwen3Config(**common, head_dim=24, use_sliding_window=False)
    else:
        raise AssertionError(kind)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():  # biases are zero and norms one at init: make them matter
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0.0, 0.5)
            elif name.endswith(("q_norm.weight", "k_norm.weight")):
                param.normal_(1.0, 0.5)
    return model


def _ragged_cache(model: Any, rows: int, lengths: list[int]) -> tuple[Any, Any]:
    """A cache laid out as continuous batching lays it: row i's ``lengths[i]`` tokens
    left-aligned, the rest a masked hole, room for more; and its mask."""
    decoder = model.get_decoder()
    width = max(lengths)
    layers: list[tuple[Any, Any]] = []
    gen = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        states = []
        for length in lengths:
            ids = torch.randint(0, model.config.vocab_size, (1, length), generator=gen)
            out = decoder(input_ids=ids, use_cache=True)
            states.append(out.past_key_values)
        for layer in range(model.config.num_hidden_layers):
            k0 = states[0].layers[layer].keys
            keys = k0.new_zeros((rows, k0.shape[1], width + 40, k0.shape[3]))
            values = torch.zeros_like(keys)
            for i, state in enumerate(states):
                keys[i, :, : lengths[i]] = state.layers[layer].keys[0]
                values[i, :, : lengths[i]] = state.layers[layer].values[0]
            layers.append((keys, values))
    mask = torch.zeros((rows, width), dtype=torch.long)
    for i, length in enumerate(lengths):
        mask[i, :length] = 1
    return reserved_cache(layers, width, 40), mask


@pytest.mark.parametrize("kind", ["llama", "llama-biased", "qwen2", "mistral", "qwen3"])
def test_fused_step_computes_the_models_forward_pass(kind: str) -> None:
    model = _model(kind)
    assert unsupported_reason(model, torch.device("cpu")) is None
    lengths = [23, 7, 31]
    fused_cache, mask = _ragged_cache(model, 3, lengths)
    own_cache, _ = _ragged_cache(model, 3, lengths)
    step = FusedStep(model, rows=3)
    tokens = torch.tensor([5, 17, 60])
    fused_mask = own_mask = mask
    with torch.inference_mode():
        for _ in range(12):  # greedy, each path feeding its own tokens back
            positions = fused_mask.sum(1, keepdim=True)
            fused = step(tokens.unsqueeze(1), positions, fused_mask, fused_cache)
            fused_mask = torch.cat([fused_mask, fused_mask.new_ones((3, 1))], 1)
            own_mask = torch.cat([own_mask, own_mask.new_ones((3, 1))], 1)
            out = model.get_decoder()(
                input_ids=tokens.unsqueeze(-1),
                attention_mask=own_mask,
                position_ids=positions,
                use_cache=True,
                cache=own_cache,
            )
            own = model.get_output_embeddings()(out.last_hidden_state[:, -1])
            assert fused.shape == own.shape
            assert torch.allclose(fused, own, atol=1e-5, rtol=1e-5), (fused - own).abs().max()
            assert fused.argmax(-1).tolist() == own.argmax(-1).tolist()
            tokens = fused.argmax(-1)
    # Both wrote the same keys and values into their caches.
    for a, b in zip(fused_cache.layers, own_cache.layers, strict=True):
        assert torch.allclose(a.keys, b.keys, atol=1e-5)
        assert torch.allclose(a.values, b.values, atol=1e-5)


def test_unsupported_models_and_devices_are_named() -> None:
    model = _model("llama")
    assert "not measured off the CPU" in str(unsupported_reason(model, torch.device("cuda")))
    gemma = transformers.AutoModelForCausalLM.from_config(
        transformers.Gemma2Config(**SIZES, head_dim=16)
    )
    assert "model type 'gemma2'" in str(unsupported_reason(gemma, torch.device("cpu")))
    sliding = transformers.AutoModelForCausalLM.from_config(
        transformers.MistralConfig(**SIZES, sliding_window=16)
    )
    assert "sliding_window" in str(unsupported_reason(sliding, torch.device("cpu")))


def test_the_record_says_which_step_ran(tiny_model_dir: Any) -> None:
    fused = load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=2))
    assert fused.info()["decode_plan"] == {
        "step": "fused",
        "kernels": "onednn",
        "requested": "auto",
        "prompt_lookup": 5,
    }
    plain = load_backend(
        ModelSettings(model=str(tiny_model_dir), batch_size=2, decode_step="transformers")
    )
    assert plain.info()["decode_plan"] == {
        "step": "transformers",
        "requested": "transformers",
        "reason": "--llm-set hf.decode_step=transformers",
        "prompt_lookup": 0,
    }
    bf16 = load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=2, dtype="bfloat16"))
    assert "dtype bfloat16" in bf16.info()["decode_plan"]["reason"]
    with pytest.raises(SettingsError, match=r"hf\.decode_step"):
        ModelSettings(model=str(tiny_model_dir), decode_step="fast")
    with pytest.raises(SettingsError, match=r"hf\.prompt_lookup"):
        ModelSettings(model=str(tiny_model_dir), prompt_lookup=-1)


def test_a_step_of_several_tokens_per_row_equals_steps_of_one() -> None:
    """Checking a draft: one step over a token and its draft gives, at each position, the
    logits that one-token steps over the same tokens give (rows with drafts of different
    lengths, the unused tail of a short row's block never seen by its real tokens)."""
    model = _model("llama")
    lengths = [23, 7, 31]
    step = FusedStep(model, rows=3)
    block = torch.tensor([[5, 9, 9, 40], [17, 3, 0, 0], [60, 61, 62, 63]])
    keep = [4, 2, 4]  # real tokens of each row's block
    wide_cache, mask = _ragged_cache(model, 3, lengths)
    packed_cache, _ = _ragged_cache(model, 3, lengths)
    last_cache, _ = _ragged_cache(model, 3, lengths)
    one_cache, one_mask = _ragged_cache(model, 3, lengths)
    with torch.inference_mode():
        positions = mask.sum(1, keepdim=True) + torch.arange(4)
        wide = step(block, positions, mask, wide_cache).view(3, 4, -1)
        # Only the real tokens through the linear layers: the same logits, packed.
        packed = step(block, positions, mask, packed_cache, lengths=keep)
        assert packed.shape[0] == sum(keep)
        rows_of = [row for row in range(3) for _ in range(keep[row])]
        at = [t for row in range(3) for t in range(keep[row])]
        assert torch.allclose(packed, wide[rows_of, at], atol=1e-5, rtol=1e-5)
        last = step(block, positions, mask, last_cache, lengths=keep, logits="last")
        assert torch.allclose(last, wide[[0, 1, 2], [k - 1 for k in keep]], atol=1e-5)
        spare, _ = _ragged_cache(model, 3, lengths)
        assert step(block, positions, mask, spare, logits="none") is None
        for t in range(4):
            logits = step(block[:, t : t + 1], positions[:, t : t + 1], one_mask, one_cache)
            one_mask = torch.cat([one_mask, one_mask.new_ones((3, 1))], 1)
            for row in range(3):
                if t < keep[row]:
                    assert torch.allclose(wide[row, t], logits[row], atol=1e-5, rtol=1e-5)
    # The real tokens' keys and values are the same in the packed step's cache.
    for a, b in zip(wide_cache.layers, packed_cache.layers, strict=True):
        for row in range(3):
            span = slice(lengths[row], lengths[row] + keep[row])
            assert torch.allclose(a.keys[row, :, span], b.keys[row, :, span], atol=1e-5)
            assert torch.allclose(a.values[row, :, span], b.values[row, :, span], atol=1e-5)


# ------------------------------------------------------------------ the check at first use

REQUESTS = [
    GenerateRequest("Question: what is two plus three? Answer:", max_new_tokens=8),
    GenerateRequest("Question: name a colour. Answer:", max_new_tokens=5),
    GenerateRequest("Hello", max_new_tokens=6),
]


def _outputs(backend: Any) -> list[tuple[str, int, str]]:
    return [(r.text, r.n_tokens, r.finish_reason) for r in backend.generate(REQUESTS)]


@pytest.mark.parametrize("fixture", ["tiny_model_dir", "tiny_qwen3_dir"])
def test_the_check_at_the_first_generation_passes_and_is_recorded(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    """Before its first generation the fused step is checked against the model's own
    forward pass; the record holds what the check found. Nothing is checked before a
    generation (a multiple-choice run never pays for it)."""
    model_dir = request.getfixturevalue(fixture)
    backend: Any = load_backend(ModelSettings(model=str(model_dir), batch_size=3))
    assert backend._fused_check is None
    _outputs(backend)
    info = backend.info()["decode_step"]
    assert info["step"] == "fused"
    check = info["check"]
    assert check["rows"] == 2 and check["tokens"] == CHECK_STEPS + 1
    assert check["relative_tolerance"] == CHECK_TOLERANCE["float32"]
    assert 0 <= check["max_abs_diff"] <= check["tolerance"]
    assert "failed_at" not in check
    # The model's own forward pass is not checked (there is nothing to compare).
    plain: Any = load_backend(
        ModelSettings(model=str(model_dir), batch_size=3, decode_step="transformers")
    )
    _outputs(plain)
    assert "check" not in plain.info()["decode_step"]


def _interleaved_rotate_half(x: Any) -> Any:
    """A planted defect: the other convention of rotary embeddings (pairs of neighbouring
    features, GPT-J's), what a change of transformers' ``rotate_half`` would do to the
    fused step."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


@pytest.mark.parametrize("kind", ["llama", "llama-biased", "qwen2", "mistral", "qwen3"])
def test_the_check_passes_on_each_architecture_and_fails_on_a_defect(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _model(kind)
    prompts = [[5, 9, 30, 2, 7, 11, 40, 41, 3, 8, 9, 12], [60, 61, 62, 5, 1]]
    tolerance = CHECK_TOLERANCE["float32"]
    with torch.inference_mode():
        good = _step.self_check(model, FusedStep(model, rows=3), prompts, tolerance)
        assert good["tokens"] == CHECK_STEPS + 1 and "failed_at" not in good
        assert good["max_abs_diff"] <= good["tolerance"]
        monkeypatch.setattr(_step, "rotate_half", _interleaved_rotate_half)
        bad = _step.self_check(model, FusedStep(model, rows=3), prompts, tolerance)
    assert bad["failed_at"] == 1 and bad["diff"] > bad["allowed"]


def test_a_fused_step_that_disagrees_falls_back_to_the_models_forward_pass(
    tiny_qwen3_dir: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain: Any = load_backend(
        ModelSettings(model=str(tiny_qwen3_dir), batch_size=3, decode_step="transformers")
    )
    expected = _outputs(plain)
    monkeypatch.setattr(_step, "rotate_half", _interleaved_rotate_half)
    broken: Any = load_backend(ModelSettings(model=str(tiny_qwen3_dir), batch_size=3))
    assert broken.info()["decode_plan"]["step"] == "fused"  # planned, not yet checked
    # The defect matters: unchecked, the broken step prefills to other first tokens.
    owns = [broken._encode_prompt(r.context) for r in REQUESTS]
    with torch.inference_mode():
        assert broken._prefill([None] * 3, owns)[1] != plain._prefill([None] * 3, owns)[1]
    with pytest.warns(RuntimeWarning, match="disagreed with the model's forward"):
        got = _outputs(broken)
    assert got == expected
    info = broken.info()["decode_step"]
    assert info["step"] == "transformers" and info["prompt_lookup"] == 0
    check = info["check"]
    assert check["failed_at"] >= 1 and check["diff"] > check["allowed"]
    assert info["reason"] == (
        "fused step disagreed with the model's forward at check: max |Δ logit| "
        f"{check['diff']:.3g} > tol {check['allowed']:.3g} at token {check['failed_at']}"
    )
    assert broken._fused is None  # its packed weights are dropped
    # Later generations take the same path without checking again.
    assert _outputs(broken) == expected
    assert broken.info()["decode_step"] == info


def test_a_fused_step_that_raises_at_its_check_falls_back(
    tiny_model_dir: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An internal the step uses that is gone or changed shape raises: the run goes on with
    the model's own forward pass and the record names the error."""

    def gone(x: Any) -> Any:
        raise AttributeError("module 'modeling_llama' has no attribute 'rotate_half'")

    expected = _outputs(
        load_backend(
            ModelSettings(model=str(tiny_model_dir), batch_size=3, decode_step="transformers")
        )
    )
    monkeypatch.setattr(_step, "rotate_half", gone)
    broken: Any = load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=3))
    with pytest.warns(RuntimeWarning, match="failed at its check"):
        assert _outputs(broken) == expected
    info = broken.info()["decode_step"]
    assert info["step"] == "transformers"
    assert info["reason"] == (
        "the fused step failed at its check against the model's forward pass: "
        "AttributeError: module 'modeling_llama' has no attribute 'rotate_half'"
    )
    assert info["check"] == {"error": info["reason"].split("pass: ", 1)[1]}


def test_a_fused_step_that_cannot_be_imported_is_not_planned(
    tiny_model_dir: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An internal that moved in transformers makes model/_step.py fail to import: the
    backend loads and plans the model's own forward pass, saying why."""
    import sys

    monkeypatch.setitem(sys.modules, "pytest_llmeval.model._step", None)
    backend = load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=3))
    plan = backend.info()["decode_plan"]
    assert plan["step"] == "transformers"
    assert plan["reason"].startswith("the fused step (model/_step.py) cannot be imported: ")
