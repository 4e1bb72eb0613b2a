"""Tiny random chat models of three template families, built offline.

Each has a byte-level BPE tokenizer carrying its family's special tokens and the family's
real chat template string (as published in the models' tokenizer_config.json), with the
family's BOS/EOS rules:

- ``chatml`` (SmolLM2-135M-Instruct; Qwen's layout): turns ``<|im_start|>role\\n...<|im_end|>``,
  the template inserts a default system prompt; BOS is ``<|im_start|>`` and never added by
  the tokenizer; EOS ``<|im_end|>``.
- ``qwen`` (Qwen1.5-Chat's ChatML template): no BOS at all, and the tokenizer's EOS and the
  generation config say ``<|endoftext|>`` while turns end with ``<|im_end|>``: only the
  template tells where a turn ends.
- ``llama3`` (Meta-Llama-3-8B-Instruct): header tokens, turns end with ``<|eot_id|>``, which
  is not the tokenizer's EOS (``<|end_of_text|>``) but is listed in the generation config's
  ``eos_token_id``; the tokenizer adds ``<|begin_of_text|>`` and the template writes it too
  (the double-BOS trap).
- ``gemma`` (gemma-7b-it / gemma-2): ``<start_of_turn>``/``<end_of_turn>``, a required BOS
  written by the template and added by the tokenizer, and a template that refuses a system
  message.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
QWEN_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role "
    "not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == "
    "'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must "
    "alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == "
    "'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + "
    "'<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{'<start_of_turn>model\n'}}{% endif %}"
)


@dataclass(frozen=True)
class Family:
    name: str
    template: str
    special: tuple[str, ...]  # special tokens, in vocabulary order (ids 0, 1, ...)
    bos: str | None
    eos: str
    end_of_turn: str
    tokenizer_adds_bos: bool
    generation_eos: tuple[str, ...]  # the generation config's eos_token_id
    system_role: bool


FAMILIES = {
    "chatml": Family(
        "chatml",
        SMOLLM2_TEMPLATE,
        ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        bos="<|im_start|>",
        eos="<|im_end|>",
        end_of_turn="<|im_end|>",
        tokenizer_adds_bos=False,
        generation_eos=("<|im_end|>",),
        system_role=True,
    ),
    "qwen": Family(
        "qwen",
        QWEN_TEMPLATE,
        ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        bos=None,
        eos="<|endoftext|>",
        end_of_turn="<|im_end|>",
        tokenizer_adds_bos=False,
        generation_eos=("<|endoftext|>",),
        system_role=True,
    ),
    "llama3": Family(
        "llama3",
        LLAMA3_TEMPLATE,
        (
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
        ),
        bos="<|begin_of_text|>",
        eos="<|end_of_text|>",
        end_of_turn="<|eot_id|>",
        tokenizer_adds_bos=True,
        generation_eos=("<|end_of_text|>", "<|eot_id|>"),
        system_role=True,
    ),
    "gemma": Family(
        "gemma",
        GEMMA_TEMPLATE,
        ("<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"),
        bos="<bos>",
        eos="<eos>",
        end_of_turn="<end_of_turn>",
        tokenizer_adds_bos=True,
        generation_eos=("<eos>", "<end_of_turn>"),
        system_role=False,
    ),
}

_CORPUS = [
    "Question: what is two plus three? Answer: 5",
    "The answer is 42. The answer is B. Answer: A",
    "A. red B. green C. blue D. yellow",
    "one two three four five six seven eight nine ten 0 1 2 3 4 5 6 7 8 9",
    "Q: How many apples are left? A: There are 7 apples left.",
    "user assistant system model You are a helpful assistant.",
]


def build_chat_model(target: Path, family: Family, seed: int = 0) -> Path:
    """A 2-layer Llama with ``family``'s tokenizer, template and EOS rules, random weights."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import (
        GenerationConfig,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
    )

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=list(family.special),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 20, trainer=trainer)
    if family.tokenizer_adds_bos:
        assert family.bos is not None
        bos_id = tok.token_to_id(family.bos)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{family.bos} $A",
            pair=f"{family.bos} $A $B",
            special_tokens=[(family.bos, bos_id)],
        )
    pad = "<pad>" if "<pad>" in family.special else family.eos
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=family.bos,
        eos_token=family.eos,
        pad_token=pad,
        additional_special_tokens=[
            t for t in family.special if t not in (family.bos, family.eos, pad)
        ],
    )
    fast.chat_template = family.template
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        bos_token_id=fast.bos_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[fast.convert_tokens_to_ids(t) for t in family.generation_eos],
        pad_token_id=fast.pad_token_id,
        bos_token_id=fast.bos_token_id,
    )
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    fast.save_pretrained(target)
    return target


def make_model_end_turns(target: Path, family: Family, prompt_ids: list[int], step: int = 2) -> int:
    """Change the LM head so that greedy decoding of ``prompt_ids`` emits the family's
    end-of-turn token after a few tokens: its row becomes a scaled copy of the row of the
    token greedy decoding picks at ``step``. Returns the end-of-turn id."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    eot = int(tokenizer.convert_tokens_to_ids(family.end_of_turn))
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt_ids]),
            max_new_tokens=step + 1,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=tokenizer.pad_token_id,
        )
    picked = int(out[0, len(prompt_ids) + step])
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head[eot] = head[picked] * 3.0
    model.save_pretrained(target)
    return eot
