"""The tokenizer side that the in-process backends share (HF transformers and vLLM).

Both backends tokenize on this side of the model, with the model's own Hugging Face
tokenizer, so that a context, its continuation and a prompt are the same tokens whichever
engine scores them: the BOS policy, lm-evaluation-harness's context/continuation split, the
chat template (the model's or ``prompt.chat_template_file``), its end-of-turn token and the
token ids that end a generation. :class:`TokenizerSide` holds them; a backend sets
``tokenizer``, ``path`` and ``settings`` and calls :meth:`TokenizerSide._init_tokens`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_llmeval._errors import ModelError
from pytest_llmeval.model._types import (
    ChatTemplate,
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    ModelSettings,
    bos_added,
    fit_tokens,
    move_trailing_space,
    no_room,
)


class TokenizerSide:
    """Prompts to tokens, as lm-evaluation-harness builds them (see the module)."""

    tokenizer: Any
    path: Path
    settings: ModelSettings
    add_bos: bool
    bos_reason: str
    _chat: ChatTemplate | None
    stop_tokens: dict[int, str]
    max_length: int

    def _init_tokens(self, template_text: str | None, generation: Any) -> None:
        """The BOS policy, the chat template and the stop tokens, once the tokenizer is
        loaded (``generation``: the model's generation config, for its ``eos_token_id``)."""
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.add_bos, self.bos_reason = self._bos_policy(self.settings.add_bos)
        self._chat = self._load_chat_template(template_text)
        self.stop_tokens = self._stop_token_ids(generation)

    def chat_template(self) -> ChatTemplate | None:
        return self._chat

    def bos_info(self) -> dict[str, Any]:
        """The BOS policy as run records state it."""
        return {
            "policy": self.settings.add_bos,
            "add": self.add_bos,
            "reason": self.bos_reason,
            "token": self.tokenizer.bos_token,
            "id": self.tokenizer.bos_token_id,
        }

    # ------------------------------------------------------------------ tokens

    def _bos_policy(self, policy: str) -> tuple[bool, str]:
        """Whether prompts get a BOS token, and why. ``auto`` follows the tokenizer's own
        configuration: a tokenizer that puts BOS before an encoded text by default (Llama,
        Gemma, Mistral) gets it, one that does not (GPT-2 style, SmolLM2, Qwen) does not,
        as lm-evaluation-harness's default encoding does."""
        bos = self.tokenizer.bos_token_id
        if policy == "no":
            return False, "--llm-set model.add_bos=no"
        if bos is None:
            if policy == "yes":
                raise ModelError(
                    f"--llm-set model.add_bos=yes but the tokenizer of {self.path} has no BOS token"
                )
            return False, "the tokenizer has no BOS token"
        if policy == "yes":
            return True, "--llm-set model.add_bos=yes"
        default = list(self.tokenizer("a")["input_ids"])
        if default[:1] == [bos]:
            return True, "the tokenizer adds BOS by default"
        return False, "the tokenizer does not add BOS by default"

    def _encode(self, text: str) -> list[int]:
        """A text's tokens, no special tokens added (special-token text in ``text``, such as
        a chat template's ``<|im_start|>``, is parsed as those tokens)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _encode_prompt(self, text: str) -> list[int]:
        """A prompt's tokens: BOS first when the policy adds it and the text does not
        already start with it (a chat template that writes it), never twice."""
        tokens = self._encode(text)
        if bos_added(text, self.tokenizer.bos_token, self.add_bos):
            return [int(self.tokenizer.bos_token_id), *tokens]
        return tokens

    def _split(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """lm-eval's split: the context's own tokens, and the tail of the tokenized
        ``context + continuation`` beyond as many tokens as the context has."""
        context, continuation = move_trailing_space(context, continuation)
        if not context:
            prefix = self.tokenizer.bos_token_id
            if prefix is None:
                prefix = self.tokenizer.eos_token_id
            return [int(prefix)], self._encode(continuation)
        whole = self._encode_prompt(context + continuation)
        ctx = self._encode_prompt(context)
        return ctx, whole[len(ctx) :]

    def _fit(
        self, req: LoglikelihoodRequest, window: int
    ) -> tuple[list[int], list[int], int] | LoglikelihoodResult:
        """A log-likelihood request's context and continuation tokens (:meth:`_split`), the
        context cut by the request's ``overflow`` policy so that both fit ``window`` tokens
        (the hf backend feeds all but the last: its window is the context window plus
        one; the vllm backend's engine takes the whole row), with how many context tokens
        were dropped; or the result of a request that is not scored (a continuation
        without tokens of its own or longer than the window, a context over the window
        under ``skip``)."""
        ctx, cont = self._split(req.context, req.continuation)
        problem = None
        if not cont:
            problem = f"the continuation {req.continuation!r} has no tokens of its own"
        elif len(cont) >= window:
            problem = (
                f"the continuation {req.continuation[:60]!r} alone has {len(cont)} tokens, "
                f"more than the context window ({window - 1}) holds besides a context token"
            )
        if problem is not None:
            return LoglikelihoodResult(0.0, False, 0, error=problem)
        if len(ctx) + len(cont) <= window:
            return ctx, cont, 0
        if req.overflow == "skip":
            return LoglikelihoodResult(
                0.0,
                False,
                0,
                context_overflow=True,
                n_context_tokens=len(ctx) + len(cont),
                context_window=self.max_length,
            )
        # lm-eval keeps the last tokens of context + continuation (truncate_left);
        # truncate_middle keeps the context's two ends instead.
        kept = fit_tokens(ctx, window - len(cont), req.overflow)
        return kept, cont, len(ctx) - len(kept)

    def _fit_prompt(self, req: GenerateRequest) -> tuple[list[int], int] | GenerateResult:
        """A generation request's prompt tokens, cut by its ``overflow`` policy to leave
        room for its budget in the window, with the prompt's length before any cut; or the
        result of a request that is not run (a budget that leaves no room, a prompt over
        the window under ``skip``: reported as not fitting, never scored cut)."""
        budget = self.max_length - req.max_new_tokens
        if budget < 1:
            return no_room(req.max_new_tokens, self.max_length)
        tokens = self._encode_prompt(req.context)
        n_prompt = len(tokens)
        if n_prompt <= budget:
            return tokens, n_prompt
        if req.overflow == "skip":
            return GenerateResult(
                text="",
                n_tokens=0,
                finish_reason="context_overflow",
                n_prompt_tokens=n_prompt,
                context_window=self.max_length,
            )
        return fit_tokens(tokens, budget, req.overflow), n_prompt

    # ------------------------------------------------------------------ chat template

    def _load_chat_template(self, override: str | None) -> ChatTemplate | None:
        """The chat template: ``prompt.chat_template_file`` when given, else the tokenizer's
        own (its default one when it has several named ones). Probed once: whether it
        keeps a system message, and which token closes an assistant turn."""
        import hashlib

        source = f"file:{self.settings.chat_template_file}" if override is not None else None
        text = override
        if text is None:
            own = getattr(self.tokenizer, "chat_template", None)
            if isinstance(own, dict):
                own = own.get("default")
            if not own:
                return None
            text, source = str(own), "tokenizer"
        assert source is not None
        tokenizer = self.tokenizer

        def render(
            messages: Sequence[Mapping[str, str]],
            *,
            opened: bool = True,
            continue_final: bool = False,
        ) -> str:
            # continue_final: the last (assistant) message is left open for the model to
            # continue, as lm-eval renders a gen_prefix.
            return str(
                tokenizer.apply_chat_template(
                    [dict(m) for m in messages],
                    chat_template=text,
                    tokenize=False,
                    add_generation_prompt=opened,
                    continue_final_message=continue_final,
                )
            )

        try:
            render([{"role": "user", "content": "Hello"}])
        except Exception as exc:
            raise ModelError(
                f"the chat template ({source}) of {self.path} does not render a user message: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        return ChatTemplate(
            source=source,
            sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
            render=render,
            system_role=_keeps_system(render),
            end_of_turn=self._end_of_turn(render),
        )

    def _end_of_turn(self, render: Any) -> str | None:
        """The special token that follows an assistant message in the template's own
        rendering (``<|im_end|>``, ``<|eot_id|>``, ``<end_of_turn>``), if any."""
        sentinel = "Sentinel reply 7"
        try:
            text = render(
                [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": sentinel}],
                opened=False,
            )
        except Exception:  # a template that cannot end on an assistant turn
            return None
        at = text.rfind(sentinel)
        if at < 0:
            return None
        tail = self._encode(text[at + len(sentinel) :])
        if not tail:
            return None
        first = tail[0]
        added = getattr(self.tokenizer, "added_tokens_decoder", {}).get(first)
        special = first in self.tokenizer.all_special_ids or bool(getattr(added, "special", False))
        token = self.tokenizer.convert_ids_to_tokens(first)
        return str(token) if special and isinstance(token, str) else None

    def _stop_token_ids(self, generation: Any) -> dict[int, str]:
        """Token ids that end a generation: the tokenizer's EOS, every id of the generation
        config's ``eos_token_id`` (often a list: Llama 3 ends turns with ``<|eot_id|>``),
        and the chat template's end-of-turn token; each with its text."""
        ids: list[int] = []
        if self.tokenizer.eos_token_id is not None:
            ids.append(int(self.tokenizer.eos_token_id))
        configured = getattr(generation, "eos_token_id", None)
        if isinstance(configured, int):
            ids.append(configured)
        elif isinstance(configured, (list, tuple)):
            ids.extend(int(i) for i in configured)
        if self._chat is not None and self._chat.end_of_turn is not None:
            ids.append(int(self.tokenizer.convert_tokens_to_ids(self._chat.end_of_turn)))
        return {i: str(self.tokenizer.convert_ids_to_tokens(i)) for i in dict.fromkeys(ids)}


def read_template_file(path: str | None) -> str | None:
    """``prompt.chat_template_file``: a Jinja template (or a tokenizer_config.json /
    chat_template.json holding one under ``chat_template``)."""
    if path is None:
        return None
    import json
    from pathlib import Path

    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelError(
            f"--llm-set prompt.chat_template_file={path}: cannot be read: {exc}"
        ) from None
    if path.endswith(".json"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ModelError(
                f"--llm-set prompt.chat_template_file={path}: not JSON: {exc}"
            ) from None
        template = data.get("chat_template") if isinstance(data, dict) else None
        if not isinstance(template, str) or not template:
            raise ModelError(
                f"--llm-set prompt.chat_template_file={path}: no 'chat_template' string in "
                "this JSON file"
            )
        text = template
    if not text.strip():
        raise ModelError(f"--llm-set prompt.chat_template_file={path}: the file is empty")
    return text


def _keeps_system(render: Any) -> bool:
    """Whether the template renders a system message (some refuse it with an exception,
    some drop it without a word)."""
    sentinel = "System sentinel 3"
    try:
        text = render([{"role": "system", "content": sentinel}, {"role": "user", "content": "Hi"}])
    except Exception:
        return False
    return sentinel in str(text)
