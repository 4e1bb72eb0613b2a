"""Greedy decoding and the model's own generation config (``generation_config.json``).

``transformers``' ``model.generate`` (lm-evaluation-harness's HF path) and vLLM apply a
model's generation config even under greedy decoding: a ``repetition_penalty`` (Qwen2.5's
instruct models ship 1.05), a ``no_repeat_ngram_size``, suppressed or banned tokens and a
minimum length change which token is the most likely one. Sampling fields (``temperature``,
``top_p``, ``top_k``, ...) do not: greedy decoding takes the argmax, whatever they say.

:class:`GreedyRule` is what one backend does with a model's config, under the rule the run
asked for (``model.generation_config``):

- ``model`` (the default): follow it, as ``model.generate(do_sample=False)`` does, with
  ``transformers``' own logits processors, applied to each sequence's own tokens (its
  prompt and its output so far; ``model.generate`` on a batch of one gives the same).
- ``neutral``: a plain argmax; the config's fields are recorded as not applied.

A field that changes greedy decoding and that this module does not apply (beam search,
forced tokens, a length penalty, classifier-free guidance, a watermark) is an error under
``model`` that names the field and the way out (``model.generation_config=neutral``):
outputs that silently differ from ``model.generate`` would be worse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_llmeval._errors import ModelError
from pytest_llmeval.model._types import GENERATION_CONFIG_RULES

#: Fields that change the greedy token and are applied here (transformers' processors).
APPLIED_FIELDS = (
    "repetition_penalty",
    "no_repeat_ngram_size",
    "bad_words_ids",
    "sequence_bias",
    "suppress_tokens",
    "begin_suppress_tokens",
    "min_length",
    "min_new_tokens",
)
#: Fields that change greedy decoding and are not applied: an error under ``model``.
UNSUPPORTED_FIELDS = (
    "num_beams",
    "penalty_alpha",
    "guidance_scale",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "exponential_decay_length_penalty",
    "watermarking_config",
    "low_memory",
)
#: Fields with no effect on a greedy token: recorded when set, never applied.
SAMPLING_FIELDS = (
    "do_sample",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "typical_p",
    "epsilon_cutoff",
    "eta_cutoff",
    "top_h",
)

# What each field is when a config does not set it (transformers' GenerationConfig
# defaults, written out: a field equal to its default is not "set").
_DEFAULTS: dict[str, Any] = {
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "sequence_bias": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "min_length": 0,
    "min_new_tokens": None,
    "num_beams": 1,
    "penalty_alpha": None,
    "guidance_scale": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "exponential_decay_length_penalty": None,
    "watermarking_config": None,
    "low_memory": None,
    "do_sample": False,
    "temperature": 1.0,
    "top_k": 50,
    "top_p": 1.0,
    "min_p": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "top_h": None,
}


def _plain(value: Any) -> Any:
    """A config value as JSON data (tuples as lists, tensors and objects as text)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def config_fields(generation_config: Any) -> dict[str, Any]:
    """The fields of ``generation_config`` (a ``transformers.GenerationConfig`` or a plain
    mapping, as read from ``generation_config.json``) that differ from their defaults,
    among those this module knows."""
    out: dict[str, Any] = {}
    if generation_config is None:
        return out
    for name, default in _DEFAULTS.items():
        if isinstance(generation_config, Mapping):
            value = generation_config.get(name, default)
        else:
            value = getattr(generation_config, name, default)
        if value is None and default is not None:
            continue  # unset in a config that writes None for "default"
        if value != default:
            out[name] = _plain(value)
    return out


@dataclass(frozen=True)
class GreedyRule:
    """What greedy decoding applies of a model's generation config (see the module).

    ``applied``: the fields in effect; ``not_applied``: fields the config sets that the
    argmax ignores or the rule turned off, each with the reason; ``source``: where the
    config was read."""

    rule: str
    applied: Mapping[str, Any] = field(default_factory=dict)
    not_applied: Mapping[str, str] = field(default_factory=dict)
    source: str | None = None

    @classmethod
    def from_config(
        cls, generation_config: Any, rule: str, source: str | None, model: str
    ) -> GreedyRule:
        """The rule for a model whose config is ``generation_config``; a field that changes
        greedy decoding and cannot be applied is a :class:`ModelError` under ``model``."""
        if rule not in GENERATION_CONFIG_RULES:
            raise ModelError(
                f"--llm-set model.generation_config={rule}: expected one of "
                f"{'|'.join(GENERATION_CONFIG_RULES)}"
            )
        fields = config_fields(generation_config)
        not_applied: dict[str, str] = {}
        applied: dict[str, Any] = {}
        for name, value in fields.items():
            if name in SAMPLING_FIELDS:
                not_applied[name] = f"{value!r}: sampling only; greedy decoding takes the argmax"
            elif rule == "neutral":
                not_applied[name] = f"{value!r}: --llm-set model.generation_config=neutral"
            elif name in UNSUPPORTED_FIELDS:
                where = f" ({source})" if source else ""
                raise ModelError(
                    f"--llm-model={model}: its generation config{where} sets {name}={value!r}, "
                    "which changes greedy decoding (model.generate and vLLM apply it) and which "
                    "this backend does not apply. Pass --llm-set model.generation_config=neutral "
                    '(or generation_config = "neutral" in [tool.llmeval.model]) for a plain '
                    "argmax, recorded as such, or remove "
                    "the field from the model's generation_config.json"
                )
            else:
                applied[name] = value
        return cls(rule=rule, applied=applied, not_applied=not_applied, source=source)

    @property
    def active(self) -> bool:
        """Whether anything changes the argmax (then each row's tokens are needed)."""
        return bool(self.applied)

    def describe(self) -> dict[str, Any]:
        """For run records (``decoding.generation_config`` of each generative task)."""
        return {
            "rule": self.rule,
            "source": self.source,
            "applied": dict(self.applied),
            "not_applied": dict(self.not_applied),
        }

    def processors(self, eos_ids: Sequence[int], device: Any) -> _Processors | None:
        """The logits processors of the applied fields (None when there are none)."""
        if not self.applied:
            return None
        return _Processors(self.applied, list(eos_ids), device)


class _Processors:
    """transformers' logits processors for the applied fields, run on one sequence at a
    time: ``choose(tokens, logits, n_prompt)`` is the greedy token after ``tokens`` (the
    sequence so far, its first ``n_prompt`` the prompt) with ``logits`` the model's."""

    def __init__(self, applied: Mapping[str, Any], eos_ids: list[int], device: Any) -> None:
        from transformers import (
            MinLengthLogitsProcessor,
            NoBadWordsLogitsProcessor,
            NoRepeatNGramLogitsProcessor,
            RepetitionPenaltyLogitsProcessor,
            SequenceBiasLogitsProcessor,
            SuppressTokensLogitsProcessor,
        )

        self.applied = applied
        self.eos_ids = eos_ids
        self.device = device
        fixed: list[Any] = []
        # The order of transformers' _get_logits_processor (it matters: a penalty before a
        # ban, both before the minimum length).
        if "sequence_bias" in applied:
            fixed.append(SequenceBiasLogitsProcessor(_bias_pairs(applied["sequence_bias"])))
        if "repetition_penalty" in applied:
            fixed.append(RepetitionPenaltyLogitsProcessor(float(applied["repetition_penalty"])))
        if "no_repeat_ngram_size" in applied:
            fixed.append(NoRepeatNGramLogitsProcessor(int(applied["no_repeat_ngram_size"])))
        if "bad_words_ids" in applied:
            fixed.append(NoBadWordsLogitsProcessor(applied["bad_words_ids"], eos_ids or None))
        if "min_length" in applied and eos_ids:
            fixed.append(MinLengthLogitsProcessor(int(applied["min_length"]), eos_ids, device))
        self._fixed = fixed
        self._suppress = (
            SuppressTokensLogitsProcessor(applied["suppress_tokens"], device)
            if "suppress_tokens" in applied
            else None
        )

    def choose(self, tokens: Sequence[int], logits: Any, n_prompt: int) -> int:
        import torch
        from transformers import (
            MinNewTokensLengthLogitsProcessor,
            SuppressTokensAtBeginLogitsProcessor,
        )

        ids = torch.tensor([list(tokens)], dtype=torch.long, device=logits.device)
        # model.generate scores in float32 whatever the model's dtype.
        scores = logits.reshape(1, -1).to(dtype=torch.float32, copy=True)
        for processor in self._fixed:
            scores = processor(ids, scores)
        if "min_new_tokens" in self.applied and self.eos_ids:
            scores = MinNewTokensLengthLogitsProcessor(
                n_prompt, int(self.applied["min_new_tokens"]), self.eos_ids, self.device
            )(ids, scores)
        if self._suppress is not None:
            scores = self._suppress(ids, scores)
        if "begin_suppress_tokens" in self.applied:
            scores = SuppressTokensAtBeginLogitsProcessor(
                self.applied["begin_suppress_tokens"], n_prompt, self.device
            )(ids, scores)
        return int(scores.argmax(-1).item())


def _bias_pairs(value: Any) -> list[list[Any]]:
    """``sequence_bias`` as transformers takes it: ``[[token ids], bias]`` pairs (a config
    may hold a mapping of token-id tuples, written to JSON as lists)."""
    if isinstance(value, Mapping):
        return [
            [list(k) if isinstance(k, (list, tuple)) else [k], float(v)] for k, v in value.items()
        ]
    return [[list(pair[0]), float(pair[1])] for pair in value]
