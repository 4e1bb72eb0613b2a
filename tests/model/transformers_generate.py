"""transformers' own greedy ``generate`` on one prompt alone: the reference the HF
backend's decode paths are compared with (lm-evaluation-harness's HF path calls it)."""

from __future__ import annotations

from typing import Any


def generate_alone(backend: Any, context: str, max_new_tokens: int, **overrides: Any) -> str:
    """The text ``backend.model.generate(do_sample=False)`` gives for ``context`` alone (the
    model's generation config merged with ``overrides``), cut at the first EOS."""
    import torch

    tok = backend.tokenizer
    ids = backend._encode_prompt(context)
    with torch.inference_mode():
        out = backend.model.generate(
            input_ids=torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
            **overrides,
        )[0, len(ids) :].tolist()
    if tok.eos_token_id in out:
        out = out[: out.index(tok.eos_token_id)]
    return str(tok.decode(out, skip_special_tokens=True))
