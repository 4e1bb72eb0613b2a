"""Evaluation of a task's items on a backend: prompt building, batched requests, scoring.

Plain Python: no pytest, no torch. The pytest plugin calls :class:`TaskRunner` with the
items it has selected; so can any script.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_llmeval._errors import DataError, LlmEvalError, ModelError, SandboxError, SpecError
from pytest_llmeval.dataset import (
    Item,
    load_fewshot,
    load_fewshot_text,
    task_data_files,
    task_subsets,
)
from pytest_llmeval.model import (
    Backend,
    ChatTemplate,
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    bos_added,
)
from pytest_llmeval.prompt import (
    Message,
    TemplateRenderProblem,
    as_dicts,
    as_plain_text,
    build_messages,
    fold_system,
    render,
    render_list,
    single_turn,
    system_message,
)
from pytest_llmeval.scorer import (
    Extraction,
    answers_match,
    best_f1,
    extract,
    score_metric,
    strip_thinking,
    thinking_opened,
)
from pytest_llmeval.task import ExecutionSpec, TaskSpec

if TYPE_CHECKING:
    from pytest_llmeval.ifeval import TextJudges
    from pytest_llmeval.sandbox import ExecutionResult


@dataclass(frozen=True)
class PreparedItem:
    """An item turned into what the model is asked: the prompt and the expected answer.

    ``prompt`` is the exact text sent to the model: the raw prompt, or the conversation
    rendered by the model's chat template (special tokens written out). ``messages`` is
    that conversation (empty without a chat template). ``question_start`` is where the
    item's own question begins in ``prompt``: what comes before it (description, few-shot
    examples, the template's turns) is the same for every item of a subset.
    """

    item: Item
    prompt: str
    target: str
    fewshot_ids: tuple[str, ...]
    choices: tuple[str, ...] = ()
    gold: int | None = None
    question: str = ""  # the item's own template, without description and few-shot block
    labels: tuple[bool, ...] = ()  # metric mc2: which choices are true
    references: tuple[str, ...] = ()  # generate.targets: every accepted answer
    messages: tuple[Message, ...] = ()
    question_start: int | None = None

    @property
    def shared_prefix(self) -> int:
        """Characters of the prompt before the item's own question (description and few-shot
        block, the chat template's turns), the same for all items of a subset: a backend
        may compute them once."""
        if self.question_start is not None:
            return self.question_start
        return len(self.prompt) - len(self.question)


@dataclass(frozen=True)
class ChatSettings:
    """How prompts reach a chat model, and what is done to its answers (run-wide settings;
    a spec may pin the mode with ``prompt.chat`` and add a system prompt and thinking
    markers of its own).

    ``mode``: ``on`` renders every prompt with the model's chat template, ``off`` sends the
    raw text, ``auto`` is on when the model has a chat template; a spec's ``prompt.chat``
    pin wins over it unless ``forced`` (the mode was given on the command line, which
    wins over everything). ``multiturn``: few-shot
    examples as alternating user/assistant turns (lm-eval's ``--fewshot_as_multiturn``) or
    all in one user turn. ``strip_thinking``: remove a reasoning block (``thinking``
    markers) from generations before extraction.
    """

    mode: str = "off"
    forced: bool = False
    system_prompt: str | None = None
    multiturn: bool = True
    strip_thinking: bool = False
    thinking: tuple[str, str] = ("<think>", "</think>")


@dataclass(frozen=True)
class _Shots:
    """A subset's fixed few-shot set, rendered: its description, the (question, target)
    pairs or a verbatim text block, and the example ids in order."""

    description: str
    examples: tuple[tuple[str, str], ...]
    ids: tuple[str, ...]
    text: str | None = None


@dataclass(frozen=True)
class _Answer:
    target: str
    references: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    gold: int | None = None
    labels: tuple[bool, ...] = ()


@dataclass
class ItemResult:
    """Everything about one evaluated item, JSON-serialisable (see :meth:`to_dict`)."""

    task: str
    item_id: str
    subset: str | None
    correct: bool
    score: float
    prompt: str
    target: str
    fewshot_ids: list[str]
    output: str | None = None
    extracted: str | None = None
    extractor: str | None = None
    finish_reason: str | None = None
    n_output_tokens: int | None = None
    choices: list[str] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    is_greedy: list[bool] = field(default_factory=list)
    pred: int | None = None
    pred_norm: int | None = None
    gold: int | None = None
    acc: float | None = None
    acc_norm: float | None = None
    seconds: float = 0.0
    # Filled in by the runner's caller (pytest plugin): run bookkeeping.
    config_hash: str | None = None
    resume_key: str | None = None
    repeat_scores: list[float] | None = None
    determinism: str | None = None
    reused_from: str | None = None
    # Scorer-specific detail: IFEval per-instruction results, sandbox status of code.
    details: dict[str, Any] | None = None
    # Chat models: the conversation the prompt was rendered from, whether the backend put
    # a BOS token before the prompt text, the token that ended the generation, and the
    # output with its reasoning block removed (what extraction saw; None when not stripped).
    messages: list[dict[str, str]] | None = None
    bos_added: bool | None = None
    stop_token: str | None = None
    output_stripped: str | None = None
    # Why this item could not be evaluated (its data, its prompt, or the model's numbers):
    # an item with an error is never scored; the other items of its batch are.
    error: str | None = None
    # Content digests (SHA256 hex, as lm-evaluation-harness logs them per sample): of the
    # item's source record, of the exact prompt text, and of what it is scored against
    # (target, choices, gold, references). Resume reuses an item only when all three match.
    doc_hash: str | None = None
    prompt_hash: str | None = None
    target_hash: str | None = None
    # Named metrics beside the primary score (the spec's ``generate.metrics``): name ->
    # {"score": 1.0 or 0.0, "extracted": the metric's own answer or None}. None (and absent
    # from the record) for a task without them, so that other tasks' records are unchanged.
    metrics: dict[str, dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if data["metrics"] is None:
            del data["metrics"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ItemResult:
        return cls(**data)

    @property
    def prompt_sha256(self) -> str:
        return hashlib.sha256(self.prompt.encode()).hexdigest()


def true_probability_mass(logprobs: Sequence[float], labels: Sequence[bool]) -> float:
    """TruthfulQA MC2: the share of the choices' total probability on the true ones,
    ``sum(exp(ll_true)) / sum(exp(ll_all))``, computed stably (shifted by the maximum)."""
    if len(logprobs) != len(labels) or not logprobs:
        raise ValueError("one label per log-likelihood needed")
    top = max(logprobs)
    weights = [math.exp(lp - top) for lp in logprobs]
    return sum(w for w, true in zip(weights, labels, strict=True) if true) / sum(weights)


def _sha256_json(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def doc_hash(item: Item) -> str:
    """SHA256 of an item's source record (canonical JSON: sorted keys, values JSON does not
    know as their ``str``)."""
    return _sha256_json(item.doc)


def item_digests(p: PreparedItem) -> dict[str, str]:
    """The content digests of a prepared item: ``doc_hash`` (its source record),
    ``prompt_hash`` (the exact prompt text) and ``target_hash`` (target, choices, gold,
    references, labels)."""
    return {
        "doc_hash": doc_hash(p.item),
        "prompt_hash": hashlib.sha256(p.prompt.encode("utf-8")).hexdigest(),
        "target_hash": _sha256_json(
            [p.target, list(p.choices), p.gold, list(p.references), list(p.labels)]
        ),
    }


def _sandbox_details(result: ExecutionResult, item: Item) -> dict[str, Any]:
    """The record's details of a program the sandbox ran: how it ended and the isolation
    layers that held. A program the sandbox did not run (no isolation, no interpreter) is
    the item's error, never a wrong answer: a pass@1 of 0 would say nothing of the model."""
    if result.status == "error":
        raise SandboxError(f"item {item.id}: the generated code was not run: {result.reason}")
    return {
        "status": result.status,
        "reason": result.reason,
        "seconds": result.seconds,
        "isolation": list(result.isolation),
    }


def _argmax(values: Sequence[float]) -> int:
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


class TaskRunner:
    """Builds prompts for a task's items and scores them in batches on a backend.

    ``chat``: how prompts reach a chat model (default: raw text, as before chat templates
    existed). With a mode other than ``off`` the runner takes the chat template from the
    backend it first runs on (:meth:`bind`); until then it prepares raw prompts.
    """

    def __init__(
        self, spec: TaskSpec, data_dirs: Sequence[Path], chat: ChatSettings | None = None
    ) -> None:
        # The spec as written; ``spec`` is the one that runs: its ``chat_form`` once a chat
        # template applies (:meth:`bind`).
        self.base_spec = spec
        self.spec = spec
        self.data_dirs = list(data_dirs)
        self.chat = chat or ChatSettings()
        self._shots: dict[str | None, _Shots] = {}
        self.template: ChatTemplate | None = None
        self._bound = False
        # How the bound backend chooses tokens (its info's "decoding"), once bound.
        self.decoding: Mapping[str, Any] | None = None
        self._bos: Mapping[str, Any] = {}
        self.model_name = "the model"
        self.judges = self._require_judges()
        self._text_judges: TextJudges | None = None

    def _require_judges(self) -> dict[str, str]:
        """The reference judges this task's scoring names, each checked installed now (at
        collection, before any model loads) and labelled with its version for the records.
        Raises :class:`SpecError` naming the field and the extra to install."""
        from pytest_llmeval.scorer import judge_label, require_judge

        gen = self.spec.generate
        if gen is None:
            return {}
        named: dict[str, tuple[str, str]] = {}  # role -> (judge, field)
        if gen.scorer == "match" and gen.compare == "math_verify":
            named["answer"] = ("math_verify", "generate.compare")
        if gen.scorer == "ifeval" and gen.ifeval is not None:
            if gen.ifeval.language != "heuristic":
                named["language"] = (gen.ifeval.language, "generate.ifeval.language")
            if gen.ifeval.sentences != "heuristic":
                named["sentences"] = (gen.ifeval.sentences, "generate.ifeval.sentences")
        labels = {}
        for role, (judge, field_name) in named.items():
            require_judge(judge, self.spec.source, field_name)
            labels[role] = judge_label(judge)
        return labels

    def _fail(self, field: str, item: Item, exc: Exception) -> SpecError:
        return SpecError(self.spec.source, field, f"item {item.id}: {exc}")

    @property
    def shots(self) -> int:
        """How many few-shot examples each prompt carries."""
        return self.spec.fewshot.k

    # ------------------------------------------------------------------ chat template

    @property
    def chat_mode(self) -> str:
        """The mode that applies to this task: a forced run mode (command line), else the
        spec's pin, else the run's mode."""
        if self.chat.forced or not self.spec.prompt.chat:
            return self.chat.mode
        return self.spec.prompt.chat

    @property
    def _mode_source(self) -> str:
        if self.spec.prompt.chat and not self.chat.forced:
            return "spec (prompt.chat)"
        if self.spec.prompt.chat:
            return "run, over the spec's prompt.chat"
        return "run"

    @property
    def strip_thinking(self) -> bool:
        gen = self.spec.generate
        return self.chat.strip_thinking or bool(gen is not None and gen.thinking.strip)

    @property
    def thinking_markers(self) -> tuple[str, str]:
        gen = self.spec.generate
        if gen is not None and gen.thinking.start is not None and gen.thinking.end is not None:
            return gen.thinking.start, gen.thinking.end
        return self.chat.thinking

    @property
    def _mode_where(self) -> str:
        mode = self.chat_mode
        if self._mode_source.startswith("spec"):
            return f"{self.spec.source}: field 'prompt.chat' pins {mode}"
        return f"--llm-set prompt.chat_template={mode}"

    def _template_for(self, backend: Backend) -> ChatTemplate | None:
        """The chat template this runner's mode takes from ``backend`` (None: raw text); a
        mode of ``on`` without a template is an error that says what to do instead."""
        mode = self.chat_mode
        template = backend.chat_template() if mode != "off" else None
        if template is None and mode == "on":
            raise ModelError(
                f"{self._mode_where} for task {self.spec.name}, but the model "
                f"({backend.info().get('model')}) has no chat template: give one with "
                "--llm-set prompt.chat_template_file=PATH, or use --llm-set "
                "prompt.chat_template=off"
            )
        return template

    def bind(self, backend: Backend) -> None:
        """Take the chat template (and the BOS policy, for records) from ``backend``, once.
        A mode of ``on`` without a template, or multiple choice through a server that
        applies its own template, is an error that says what to do instead."""
        if self._bound:
            return
        info = backend.info()
        decoding = info.get("decoding")
        # How the backend chooses tokens (greedy, and what of the model's generation config
        # it applies): part of a generative task's config and hash.
        self.decoding = dict(decoding) if isinstance(decoding, Mapping) else None
        bos = info.get("bos")
        self._bos = bos if isinstance(bos, Mapping) else {}
        self.model_name = str(info.get("model_path") or info.get("model") or "the model")
        template = self._template_for(backend)
        if template is not None and template.render is None and self.spec.mode != "generate":
            where = self._mode_where
            raise ModelError(
                f"task {self.spec.name} is scored by the log-likelihood of its choices, which "
                f"needs the prompt's log-probabilities; with the chat template on ({where}) "
                f"the server at {info.get('base_url')} applies its own template through "
                "/chat/completions, which returns none. Score it with --llm-set "
                "prompt.chat_template=off "
                "(the raw prompt through /completions, if the server returns prompt "
                "log-probabilities) or with --llm-backend=hf (the template applied in-process)"
            )
        self.template = template
        self._bound = True
        if template is not None and self.spec.chat_form is not None:
            self._use_chat_form(template, info)

    def _use_chat_form(self, template: ChatTemplate, info: Mapping[str, Any]) -> None:
        """The chat template applies: the task runs in its spec's ``chat_form`` (its prompt
        and generation fields), prompts built afresh. An assistant prefix needs the
        template rendered here: a server that applies its own cannot continue a turn."""
        form = self.spec.chat_form
        assert form is not None
        if form.prompt.assistant_prefix and template.render is None:
            raise ModelError(
                f"{form.source}: field 'chat_form.prompt.assistant_prefix' opens the "
                f"assistant's turn of task {self.spec.name}, which the server at "
                f"{info.get('base_url')} cannot continue (it applies its own chat template "
                "through /chat/completions): run it with --llm-set prompt.chat_template=off (the "
                "completion form) or with --llm-backend=hf (the template applied in-process)"
            )
        self.spec = form
        self._shots.clear()

    @property
    def chat_form_applied(self) -> bool | None:
        """Whether the task runs in its spec's ``chat_form`` (None: the spec has none)."""
        form = self.base_spec.chat_form
        return None if form is None else self.spec is form

    def prompt_record(self) -> dict[str, Any]:
        """What the run record keeps of how prompts were presented (part of the config
        hash: a resumed run never mixes prompts with and without a chat template)."""
        template = self.template
        return {
            "chat_template": None if template is None else template.describe(),
            "chat_mode": {
                "requested": self.chat_mode,
                "by": self._mode_source,
                "applied": template is not None,
            },
            "system_prompt": system_message(
                [self.chat.system_prompt, self.spec.prompt.system_prompt or None],
                self.spec.prompt.fewshot_separator,
            )
            or None,
            "fewshot_multiturn": (
                template is not None
                and self.chat.multiturn
                and self.spec.fewshot.text_file is None
                and self.spec.fewshot.k > 0
            ),
            "bos": dict(self._bos) or None,
            "thinking": (
                {"strip": True, "start": self.thinking_markers[0], "end": self.thinking_markers[1]}
                if self.strip_thinking
                else None
            ),
        }

    # ------------------------------------------------------------------ prompts

    def _shots_for(self, subset: str | None, context_doc: dict[str, Any]) -> _Shots:
        """The subset's few-shot set, rendered once (description included)."""
        if subset in self._shots:
            return self._shots[subset]
        spec = self.spec
        try:
            description = render(spec.prompt.description, context_doc)
        except TemplateRenderProblem as exc:
            raise SpecError(spec.source, "prompt.description", str(exc)) from None
        if spec.fewshot.text_file is not None:
            text, text_id = load_fewshot_text(spec, subset, self.data_dirs)
            shots = _Shots(description, (), (text_id,), text + spec.prompt.fewshot_separator)
        else:
            examples = load_fewshot(spec, subset, self.data_dirs)
            pairs = []
            for ex_id, doc in examples:
                doc = {"subset": subset, **doc}
                rendered = []
                for name in ("template", "target"):
                    try:
                        rendered.append(render(getattr(spec.prompt, name), doc))
                    except TemplateRenderProblem as exc:
                        raise SpecError(
                            spec.source, f"prompt.{name}", f"few-shot example {ex_id}: {exc}"
                        ) from None
                pairs.append((rendered[0], rendered[1]))
            shots = _Shots(description, tuple(pairs), tuple(ex_id for ex_id, _ in examples))
        self._shots[subset] = shots
        return shots

    def fewshot_ids(self, subset: str | None) -> tuple[str, ...]:
        """The ids of a subset's few-shot examples, in prompt order."""
        return self._shots_for(subset, {"subset": subset}).ids

    def fewshot_shown(self, subset: str | None) -> Any:
        """What a subset's few-shot set shows the model, as plain data (the description,
        each example's question and target as rendered, or the verbatim text block): its
        digest goes into the prompt hash, so an edit to a few-shot file that keeps the
        examples' ids still moves it. None where the runner renders no few-shot set."""
        shots = self._shots_for(subset, {"subset": subset})
        return [shots.description, [list(pair) for pair in shots.examples], shots.text]

    # What the run record keeps of the task (a runner for another task format overrides).

    def subsets(self) -> list[str | None]:
        """The task's subsets (``[None]`` without subsets)."""
        return task_subsets(self.spec, self.data_dirs)

    def data_files(self) -> list[Path]:
        """The local files the task's items and few-shot examples come from."""
        return task_data_files(self.spec, self.data_dirs)

    def config_extra(self) -> dict[str, Any]:
        """Settings beyond the spec that determine scores (part of the config hash)."""
        return {}

    def _conversation(
        self, shots: _Shots, question: str, item: Item, doc: dict[str, Any]
    ) -> tuple[Message, ...]:
        try:
            own_system = render(self.spec.prompt.system_prompt, doc)
        except TemplateRenderProblem as exc:
            raise self._fail("prompt.system_prompt", item, exc) from None
        try:
            prefix = render(self.spec.prompt.assistant_prefix, doc)
        except TemplateRenderProblem as exc:
            raise self._fail("chat_form.prompt.assistant_prefix", item, exc) from None
        sep = self.spec.prompt.fewshot_separator
        return build_messages(
            system=system_message([self.chat.system_prompt, own_system, shots.description], sep),
            examples=shots.examples,
            question=question,
            target_delimiter=self.spec.prompt.target_delimiter,
            fewshot_separator=sep,
            fewshot_text=shots.text,
            assistant_prefix=prefix,
        )

    def instruction_prompt(self, text: str, backend: Backend) -> tuple[str, tuple[Message, ...]]:
        """``text`` as the one user turn of a conversation (after the run's system prompt,
        ``ChatSettings.system_prompt``; without the task's description, system prompt and
        few-shot block), presented to ``backend`` as this runner presents its own prompts:
        rendered by the chat template its mode takes from the backend, exactly as
        :meth:`prepare` renders an item (the system text folded into the user turn for
        templates without a system role; the conversation itself when a server applies
        its template), or as plain text when no template applies. Returns the prompt text
        and the messages sent (empty for plain text): a :class:`GenerateRequest` takes them
        as ``context`` and ``messages``.

        For probes that ask a model something other than the task's question. It does not
        bind the runner (:meth:`bind`): a generation-only probe may run a multiple-choice
        task's items through a server that applies its own template."""
        template = self.template if self._bound else self._template_for(backend)
        sep = self.spec.prompt.fewshot_separator
        messages = build_messages(
            system=system_message([self.chat.system_prompt], sep),
            examples=(),
            question=text,
            target_delimiter=self.spec.prompt.target_delimiter,
            fewshot_separator=sep,
        )
        return self._render(messages, template)

    def _render(
        self, messages: tuple[Message, ...], template: ChatTemplate | None
    ) -> tuple[str, tuple[Message, ...]]:
        """The prompt text and the messages as the model receives them."""
        if template is None:
            return as_plain_text(messages), ()
        sent = messages if self.chat.multiturn else single_turn(messages)
        if not template.system_role:
            sent = fold_system(sent, self.spec.prompt.fewshot_separator)
        if template.render is None:  # the server renders: show the conversation
            return "\n".join(f"<{m.role}>\n{m.content}" for m in sent), sent
        if sent and sent[-1].role == "assistant":  # an assistant prefix: continue that turn
            return template.render(as_dicts(sent), opened=False, continue_final=True), sent
        return template.render(as_dicts(sent)), sent

    @property
    def choice_delimiter(self) -> str:
        """What goes between a multiple-choice context and each choice: the spec's target
        delimiter, or nothing under a chat template, where the choice is the start of the
        assistant's turn (lm-eval with ``--apply_chat_template``)."""
        return "" if self.template is not None else self.spec.prompt.target_delimiter

    def prepare(self, item: Item) -> PreparedItem:
        """Render the full prompt (description, few-shot block, question; under a chat
        template the conversation of those) and the target."""
        if item.problem is not None:
            raise DataError(f"{self.spec.source}: item {item.id}: {item.problem}")
        doc = {"subset": item.subset, **item.doc}
        shots = self._shots_for(item.subset, doc)
        question = self._question(item, doc)
        messages = self._conversation(shots, question, item, doc)
        prompt, sent = self._render(messages, self.template)
        question_start: int | None = None
        if sent:
            found = prompt.rfind(question.strip()) if question.strip() else -1
            question_start = max(0, found)
        answer = self._answer(item, doc)
        return PreparedItem(
            item=item,
            prompt=prompt,
            target=answer.target,
            fewshot_ids=shots.ids,
            choices=answer.choices,
            gold=answer.gold,
            question=question,
            labels=answer.labels,
            references=answer.references,
            messages=sent,
            question_start=question_start,
        )

    def check(self, items: Sequence[Item]) -> dict[str, str]:
        """What can be known about ``items`` before a model is loaded: for each item whose
        row was damaged, or whose own templates (question, system prompt, target, choices,
        gold, labels, the scorer's fields) do not render, or whose subset's few-shot set
        cannot be loaded, the message it will fail with (by item id). Rendering only the
        item's own parts keeps this cheap enough to run over every selected item."""
        problems: dict[str, str] = {}
        subset_problems: dict[str | None, str] = {}
        targets: list[str] = []  # rendered, for the numeric comparison's check below
        for item in items:
            if item.problem is not None:
                problems[item.id] = f"{self.spec.source}: item {item.id}: {item.problem}"
                continue
            doc = {"subset": item.subset, **item.doc}
            try:
                if item.subset in subset_problems:
                    problems[item.id] = subset_problems[item.subset]
                    continue
                try:
                    self._shots_for(item.subset, doc)
                except LlmEvalError as exc:
                    where = f" (every item of subset {item.subset})" if item.subset else ""
                    subset_problems[item.subset] = f"{exc}{where}"
                    raise
                self._question(item, doc)
                self._check_chat_form(item, doc)
                render(self.spec.prompt.system_prompt, doc)
                answer = self._answer(item, doc)
                targets += [answer.target, *answer.references]
                self._check_scorer(item, doc)
            except TemplateRenderProblem as exc:
                problems[item.id] = str(self._fail("prompt.system_prompt", item, exc))
            except LlmEvalError as exc:
                problems[item.id] = subset_problems.get(item.subset) or str(exc)
        self._check_numeric_targets(targets)
        return problems

    def _check_numeric_targets(self, targets: Sequence[str]) -> None:
        """``compare: numeric`` where no selected item's target is a number (a target
        template that renders a word, or the whole solution) compares the extracted number
        with text, which falls back to string equality: no item could be right. The spec's
        error at collection, from three targets on (one or two selected items with text
        targets may be a dataset's odd ones)."""
        gen = self.spec.generate
        if gen is None or gen.compare != "numeric" or gen.scorer != "match" or len(targets) < 3:
            return
        from pytest_llmeval.scorer import parse_number

        if any(parse_number(t) is not None for t in targets):
            return
        raise SpecError(
            self.spec.source,
            "generate.compare",
            f"is 'numeric', but none of the {len(targets)} targets of the selected items is a "
            f"number (the first renders as {targets[0][:80]!r}), so no answer could match: "
            "make generate.target render the number (GSM8K: the part after '####'), or "
            "compare as exact",
        )

    def _check_chat_form(self, item: Item, doc: dict[str, Any]) -> None:
        """The item's own templates of the spec's ``chat_form``, which a chat template
        selects only once the model is loaded."""
        form = self.base_spec.chat_form
        if form is None or self.spec is form:
            return
        for name in ("template", "assistant_prefix"):
            try:
                render(getattr(form.prompt, name), doc)
            except TemplateRenderProblem as exc:
                raise self._fail(f"chat_form.prompt.{name}", item, exc) from None

    def _question(self, item: Item, doc: dict[str, Any]) -> str:
        try:
            return render(self.spec.prompt.template, doc)
        except TemplateRenderProblem as exc:
            raise self._fail("prompt.template", item, exc) from None

    def _check_scorer(self, item: Item, doc: dict[str, Any]) -> None:
        """The scorer's per-item fields: the sandbox templates of code tasks, IFEval's
        instruction fields."""
        gen = self.spec.generate
        if gen is None:
            return
        ex = gen.execution
        if ex is not None and ex.kind == "function":
            for name in ("prompt", "test", "entry_point"):
                try:
                    render(getattr(ex, name), doc)
                except TemplateRenderProblem as exc:
                    raise self._fail(f"generate.execution.{name}", item, exc) from None
        if gen.ifeval is not None:
            for name in (gen.ifeval.instructions, gen.ifeval.kwargs):
                if name not in item.doc:
                    raise self._fail("generate.ifeval", item, KeyError(f"no field {name!r}"))

    def _answer(self, item: Item, doc: dict[str, Any]) -> _Answer:
        """What an item is scored against: its target (and references), or its choices,
        gold and labels."""
        spec = self.spec
        if spec.mode == "generate":
            assert spec.generate is not None
            try:
                target = render(spec.generate.target, doc).strip() if spec.generate.target else ""
            except TemplateRenderProblem as exc:
                raise self._fail("generate.target", item, exc) from None
            references: tuple[str, ...] = ()
            if spec.generate.targets is not None:
                try:
                    references = tuple(
                        r.strip() for r in render_list(spec.generate.targets, doc) if r.strip()
                    )
                except TemplateRenderProblem as exc:
                    raise self._fail("generate.targets", item, exc) from None
                if not references:
                    raise self._fail("generate.targets", item, ValueError("no reference answer"))
                target = target or " | ".join(references)
            return _Answer(target=target, references=references)
        mc = spec.multiple_choice
        assert mc is not None
        try:
            if isinstance(mc.choices, str):
                choices = render_list(mc.choices, doc)
            else:
                choices = [render(c, doc) for c in mc.choices]
        except TemplateRenderProblem as exc:
            raise self._fail("multiple_choice.choices", item, exc) from None
        if len(choices) < 2:
            raise self._fail(
                "multiple_choice.choices",
                item,
                ValueError(f"needs at least two choices, got {choices!r}"),
            )
        try:
            gold_text = render(mc.gold, doc).strip()
        except TemplateRenderProblem as exc:
            raise self._fail("multiple_choice.gold", item, exc) from None
        if gold_text.lstrip("-").isdigit():
            gold = int(gold_text)
        elif gold_text in choices:
            gold = choices.index(gold_text)
        else:
            raise self._fail(
                "multiple_choice.gold",
                item,
                ValueError(f"{gold_text!r} is neither an index nor a choice"),
            )
        if not 0 <= gold < len(choices):
            raise self._fail(
                "multiple_choice.gold",
                item,
                ValueError(f"index {gold} out of range for {len(choices)} choices"),
            )
        labels: tuple[bool, ...] = ()
        if mc.labels is not None:
            labels = self._labels(mc.labels, item, doc, len(choices))
        return _Answer(target=choices[gold], choices=tuple(choices), gold=gold, labels=labels)

    def _labels(
        self, template: str, item: Item, doc: dict[str, Any], n_choices: int
    ) -> tuple[bool, ...]:
        try:
            raw = render_list(template, doc)
        except TemplateRenderProblem as exc:
            raise self._fail("multiple_choice.labels", item, exc) from None
        if len(raw) != n_choices or any(v not in ("0", "1", "True", "False") for v in raw):
            raise self._fail(
                "multiple_choice.labels",
                item,
                ValueError(f"needs one 1/0 per choice ({n_choices}), got {raw[:12]}"),
            )
        labels = tuple(v in ("1", "True") for v in raw)
        if not any(labels) or all(labels):
            raise self._fail(
                "multiple_choice.labels",
                item,
                ValueError("needs at least one true and one false choice"),
            )
        return labels

    def run(self, items: Sequence[Item], backend: Backend) -> list[ItemResult]:
        """Evaluate ``items`` (already selected) in one batched call to the backend.

        A problem of one item (its data does not render, the backend cannot score it, the
        model's numbers for it are not finite) is that item's ``error``; the other items
        are scored. Results come back in the order of ``items``."""
        started = time.perf_counter()
        self.bind(backend)
        prepared: list[PreparedItem] = []
        failed: dict[str, ItemResult] = {}
        for item in items:
            try:
                prepared.append(self.prepare(item))
            except LlmEvalError as exc:
                failed[item.id] = self.error_result(item, str(exc))
        results: list[ItemResult] = []
        if prepared and self.spec.mode == "generate":
            results = self._run_generate(prepared, backend)
        elif prepared:
            results = self._run_multiple_choice(prepared, backend)
        per_item = (time.perf_counter() - started) / max(1, len(items))
        for p, r in zip(prepared, results, strict=True):
            self._finish(p, r, per_item)
        done = {r.item_id: r for r in results}
        done.update(failed)
        return [done[item.id] for item in items]

    def stream(self, items: Sequence[Item], backend: Backend) -> Iterator[ItemResult]:
        """The results of ``items``, each yielded as soon as it is ready.

        Where the backend streams (:meth:`streams`) all ``items`` are handed over at once
        and each result is yielded when its sequence ends (multiple choice: when all its
        choices are scored), so results come in the order they finish (items that fail to
        prepare first). Otherwise :meth:`run` on a batch of items at a time, in order. A
        result's ``seconds`` is the wall time since the previous one."""
        if not self.streams(backend):
            size = max(1, backend.batch_size)
            for start in range(0, len(items), size):
                yield from self.run(items[start : start + size], backend)
            return
        self.bind(backend)
        prepared: list[PreparedItem] = []
        for item in items:
            try:
                prepared.append(self.prepare(item))
            except LlmEvalError as exc:
                yield self.error_result(item, str(exc))
        if not prepared:
            return
        results: Iterator[tuple[PreparedItem, ItemResult]]
        if self.spec.mode == "generate":
            outputs = backend.generate_stream(self._generate_requests(prepared))  # type: ignore[attr-defined]
            results = ((prepared[i], self._generation_result(prepared[i], o)) for i, o in outputs)
        else:
            results = self._stream_choices(prepared, backend.loglikelihood_stream)  # type: ignore[attr-defined]
        last = time.perf_counter()
        for p, result in results:
            now = time.perf_counter()
            self._finish(p, result, now - last)
            last = now
            yield result

    def streams(self, backend: Backend) -> bool:
        """Whether :meth:`stream` hands ``backend`` all items at once and yields each result
        as it is ready: a generative task on a backend with ``generate_stream`` (the hf
        backend's continuous batching, the vllm engine), a multiple-choice task on one with
        ``loglikelihood_stream`` (the vllm engine)."""
        wanted = "generate_stream" if self.spec.mode == "generate" else "loglikelihood_stream"
        return callable(getattr(backend, wanted, None))

    def _finish(self, p: PreparedItem, r: ItemResult, seconds: float) -> None:
        """What every result of a prepared item carries: its time, conversation, BOS and
        the digests that resume compares."""
        r.seconds = round(seconds, 4)
        if p.messages:
            r.messages = as_dicts(p.messages)
        if self._bos:
            r.bos_added = bos_added(p.prompt, self._bos.get("token"), bool(self._bos.get("add")))
        digests = item_digests(p)
        r.doc_hash, r.prompt_hash, r.target_hash = (
            digests["doc_hash"],
            digests["prompt_hash"],
            digests["target_hash"],
        )

    def error_result(
        self, item: Item, message: str, prepared: PreparedItem | None = None
    ) -> ItemResult:
        """The result of an item that could not be evaluated: never scored, never reused."""
        return ItemResult(
            task=self.spec.name,
            item_id=item.id,
            subset=item.subset,
            correct=False,
            score=0.0,
            prompt=prepared.prompt if prepared is not None else "",
            target=prepared.target if prepared is not None else "",
            fewshot_ids=list(prepared.fewshot_ids) if prepared is not None else [],
            error=message,
            doc_hash=doc_hash(item),
        )

    def _model_problem(self, problem: str) -> str:
        return f"the model ({self.model_name}) {problem}"

    def _generate_requests(self, prepared: Sequence[PreparedItem]) -> list[GenerateRequest]:
        gen = self.spec.generate
        assert gen is not None
        markers = self.thinking_markers if self.strip_thinking else None
        return [
            GenerateRequest(
                context=p.prompt,
                max_new_tokens=gen.budget(p.item.subset),
                stop=gen.stop,
                overflow=gen.overflow,  # type: ignore[arg-type]  # validated by the spec
                shared_prefix=p.shared_prefix,
                messages=tuple((m.role, m.content) for m in p.messages),
                thinking=markers,
                thinking_open=markers is not None and thinking_opened(p.prompt, markers[0]),
            )
            for p in prepared
        ]

    def _run_generate(self, prepared: Sequence[PreparedItem], backend: Backend) -> list[ItemResult]:
        requests = self._generate_requests(prepared)
        outputs = backend.generate(requests)
        if len(outputs) != len(requests):
            raise DataError(f"backend returned {len(outputs)} results for {len(requests)} requests")
        return [self._generation_result(p, out) for p, out in zip(prepared, outputs, strict=True)]

    def _generation_result(self, p: PreparedItem, out: GenerateResult) -> ItemResult:
        """A generation scored, or the item's error (the backend's, or its scorer's)."""
        if out.error is not None:
            message = self._model_problem(f"could not generate: {out.error}")
            return self.error_result(p.item, message, p)
        try:
            return self._score_generation(p, out)
        except LlmEvalError as exc:  # this item's scorer templates or fields
            return self.error_result(p.item, str(exc), p)

    def _score_generation(self, p: PreparedItem, out: GenerateResult) -> ItemResult:
        gen = self.spec.generate
        assert gen is not None
        details: dict[str, Any] | None = None
        score: float | None = None
        metrics: dict[str, dict[str, Any]] | None = None
        text, thinking = out.text, None
        if self.strip_thinking and out.finish_reason != "context_overflow":
            text, thinking = strip_thinking(out.text, p.prompt, *self.thinking_markers)
        if thinking == "unfinished":
            correct, extraction = False, Extraction(answer=None, kind="none")
            details = {"thinking": "unfinished"}
            if gen.metrics:  # no answer after an unclosed thinking block, for any metric
                metrics = {m.name: {"score": 0.0, "extracted": None} for m in gen.metrics}
        elif out.finish_reason == "context_overflow":
            correct, extraction = False, Extraction(answer=None, kind="none")
            details = {
                "context_overflow": {
                    "prompt_tokens": out.n_prompt_tokens,
                    "max_new_tokens": gen.budget(p.item.subset),
                    "context_window": out.context_window,
                }
            }
        elif gen.scorer == "execution":
            correct, answer, details = self._execute(p, text)
            extraction = Extraction(answer=answer, kind="code")
        elif gen.scorer == "ifeval":
            correct, details = self._ifeval(p, text)
            extraction = Extraction(answer=text, kind="ifeval")
        elif gen.compare == "math_verify":
            correct, extraction, details = self._math_verify(text, p)
        else:
            extraction = extract(text, gen.extract, truncated=out.finish_reason == "length")
            score = self._match_score(extraction.answer, p)
            # F1 gives partial credit: ``correct`` is then "more than half the tokens
            # match", a threshold that reports and gates do not take for a fact (they
            # use the score: record/_junit.py, record/_compare.py; docs/RECORDS.md).
            correct = score > 0.5 if gen.compare == "f1" else bool(score)
            metrics = self._named_metrics(text, p, truncated=out.finish_reason == "length")
            if gen.compare == "math":
                details = {"judge": "math (ours: pytest_llmeval.scorer._math)"}
        if out.truncated_tokens:
            details = {**(details or {}), "truncated_prompt_tokens": out.truncated_tokens}
        if thinking == "stripped":
            details = {**(details or {}), "thinking": "stripped"}
        return ItemResult(
            task=self.spec.name,
            item_id=p.item.id,
            subset=p.item.subset,
            correct=correct,
            score=float(correct) if score is None else score,
            prompt=p.prompt,
            target=p.target,
            fewshot_ids=list(p.fewshot_ids),
            output=out.text,
            extracted=extraction.answer,
            extractor=extraction.kind,
            finish_reason=out.finish_reason,
            n_output_tokens=out.n_tokens,
            details=details,
            stop_token=out.stop_token,
            output_stripped=text if self.strip_thinking else None,
            metrics=metrics,
        )

    def _named_metrics(
        self, text: str, p: PreparedItem, *, truncated: bool
    ) -> dict[str, dict[str, Any]] | None:
        """The spec's named metrics on the text extraction sees: each its own extraction
        chain and comparison against the target (any reference), 1.0 or 0.0."""
        gen = self.spec.generate
        assert gen is not None
        if not gen.metrics:
            return None
        references = p.references or (p.target,)
        out: dict[str, dict[str, Any]] = {}
        for metric in gen.metrics:
            score, answer = score_metric(metric, text, references, truncated=truncated)
            out[metric.name] = {"score": score, "extracted": answer}
        return out

    def _match_score(self, answer: str | None, p: PreparedItem) -> float:
        """1/0 for a match with the target (or any reference); the best F1 for f1."""
        gen = self.spec.generate
        assert gen is not None
        references = p.references or (p.target,)
        if gen.compare == "f1":
            return best_f1(answer, references)
        return float(any(answers_match(answer, ref, gen.compare) for ref in references))

    def _math_verify(self, output: str, p: PreparedItem) -> tuple[bool, Extraction, dict[str, Any]]:
        """The whole output judged by math-verify against the target (or any reference)."""
        from pytest_llmeval.scorer import math_verify_judge

        verdict = math_verify_judge(output, p.references or (p.target,))
        details = {"judge": self.judges["answer"], **verdict.details()}
        return verdict.correct, Extraction(answer=verdict.extracted, kind="math_verify"), details

    def _execute(self, p: PreparedItem, output: str) -> tuple[bool, str, dict[str, Any]]:
        """Run the extracted completion against the item's tests, in the sandbox only."""
        from pytest_llmeval.sandbox import check_completion, extract_code

        ex = self.spec.generate.execution if self.spec.generate else None
        assert ex is not None
        doc = {"subset": p.item.subset, **p.item.doc}
        if ex.kind == "io":
            return self._execute_io(p, output, ex, doc)
        try:
            code_prompt = render(ex.prompt, doc)
            test = render(ex.test, doc)
            entry_point = render(ex.entry_point, doc).strip()
        except TemplateRenderProblem as exc:
            raise self._fail("generate.execution", p.item, exc) from None
        completion = extract_code(output, code_prompt, entry_point)
        result = check_completion(
            code_prompt,
            completion,
            test,
            entry_point,
            timeout_s=ex.timeout_s,
            memory_mb=ex.memory_mb,
        )
        return result.status == "passed", completion, _sandbox_details(result, p.item)

    def _execute_io(
        self, p: PreparedItem, output: str, ex: ExecutionSpec, doc: dict[str, Any]
    ) -> tuple[bool, str, dict[str, Any]]:
        """A whole program judged on the item's input/output test cases (LiveCodeBench)."""
        from pytest_llmeval.sandbox import (
            IOTestError,
            check_io_program,
            extract_program,
            parse_io_tests,
        )

        tests = []
        for i, template in enumerate(ex.tests):
            try:
                tests.extend(parse_io_tests(render(template, doc)))
            except (TemplateRenderProblem, IOTestError) as exc:
                raise self._fail(f"generate.execution.tests[{i}]", p.item, exc) from None
        try:
            func_name = render(ex.func_name, doc).strip()
        except TemplateRenderProblem as exc:
            raise self._fail("generate.execution.func_name", p.item, exc) from None
        if not tests:
            raise self._fail("generate.execution.tests", p.item, ValueError("no test cases"))
        if any(t.kind == "functional" for t in tests) and not func_name.isidentifier():
            raise self._fail(
                "generate.execution.func_name",
                p.item,
                ValueError(f"functional tests need a method name, got {func_name!r}"),
            )
        program = extract_program(output)
        result = check_io_program(
            program,
            tests,
            func_name=func_name,
            per_test_timeout_s=ex.timeout_s,
            memory_mb=ex.memory_mb,
        )
        details = {**_sandbox_details(result, p.item), "n_tests": len(tests)}
        return result.status == "passed", program, details

    def _ifeval(self, p: PreparedItem, output: str) -> tuple[bool, dict[str, Any]]:
        from pytest_llmeval.ifeval import evaluate_item

        spec = self.spec.generate.ifeval if self.spec.generate else None
        assert spec is not None
        doc = p.item.doc
        try:
            ids, kwargs = doc[spec.instructions], doc[spec.kwargs]
        except KeyError as exc:
            raise self._fail("generate.ifeval", p.item, KeyError(f"no field {exc}")) from None
        try:
            result = evaluate_item(p.question, output, ids, kwargs, self._ifeval_judges())
        except ValueError as exc:
            raise self._fail("generate.ifeval", p.item, exc) from None
        return result.prompt_strict, {**result.to_dict(), "judges": self._ifeval_judges().labels}

    def _ifeval_judges(self) -> TextJudges:
        """The spec's language and sentence judges (built once), labelled with versions."""
        if self._text_judges is None:
            from pytest_llmeval.ifeval import text_judges

            spec = self.spec.generate.ifeval if self.spec.generate else None
            assert spec is not None
            labels = {k: v for k, v in self.judges.items() if k in ("language", "sentences")}
            self._text_judges = text_judges(spec.language, spec.sentences, labels)
        return self._text_judges

    def _run_multiple_choice(
        self, prepared: Sequence[PreparedItem], backend: Backend
    ) -> list[ItemResult]:
        requests = self._choice_requests(prepared)
        outputs = backend.loglikelihood(requests)
        if len(outputs) != len(requests):
            raise DataError(f"backend returned {len(outputs)} results for {len(requests)} requests")
        results = []
        pos = 0
        for p in prepared:
            results.append(self._choices_result(p, outputs[pos : pos + len(p.choices)]))
            pos += len(p.choices)
        return results

    def _choice_requests(self, prepared: Sequence[PreparedItem]) -> list[LoglikelihoodRequest]:
        """One log-likelihood request per choice of each item, item after item."""
        mc = self.spec.multiple_choice
        assert mc is not None
        delim = self.choice_delimiter
        return [
            LoglikelihoodRequest(
                context=p.prompt,
                continuation=delim + choice,
                shared_prefix=p.shared_prefix,
                overflow=mc.overflow,  # type: ignore[arg-type]  # validated by the spec
            )
            for p in prepared
            for choice in p.choices
        ]

    def _choices_result(self, p: PreparedItem, lls: Sequence[LoglikelihoodResult]) -> ItemResult:
        """An item's result from its choices' log-likelihoods."""
        problem = self._loglikelihood_problem(p, lls)
        if problem is not None:
            return self.error_result(p.item, problem, p)
        if any(r.context_overflow for r in lls):
            return self._not_fitting(p, lls)
        return self._score_choices(p, lls)

    def _stream_choices(
        self, prepared: Sequence[PreparedItem], stream: Any
    ) -> Iterator[tuple[PreparedItem, ItemResult]]:
        """Multiple choice on a backend with ``loglikelihood_stream``: every item's
        requests handed over at once, each item scored as soon as all its choices are."""
        requests = self._choice_requests(prepared)
        owner: list[int] = []  # request index -> item index
        first: list[int] = []  # item index -> its first request's index
        for k, p in enumerate(prepared):
            first.append(len(owner))
            owner += [k] * len(p.choices)
        got: dict[int, dict[int, LoglikelihoodResult]] = {}
        for index, out in stream(requests):
            k = owner[index]
            have = got.setdefault(k, {})
            have[index] = out
            p = prepared[k]
            if len(have) == len(p.choices):
                del got[k]
                yield (
                    p,
                    self._choices_result(p, [have[first[k] + c] for c in range(len(p.choices))]),
                )
        if got:
            raise DataError(f"the backend's stream ended with {len(got)} item(s) unscored")

    def _loglikelihood_problem(
        self, p: PreparedItem, lls: Sequence[LoglikelihoodResult]
    ) -> str | None:
        """Why an item's choices cannot be scored: a request the backend could not score, or
        a log-likelihood that is not a finite number (damaged weights, a float16 overflow),
        which must never become a prediction (NaN compares false with everything, so the
        argmax would fall on choice 0)."""
        for i, r in enumerate(lls):
            if r.error is not None:
                return self._model_problem(
                    f"could not score choice {i} {p.choices[i]!r}: {r.error}"
                )
        bad = [
            f"{i} {p.choices[i]!r}: {r.logprob!r}"
            for i, r in enumerate(lls)
            if not r.context_overflow and not math.isfinite(r.logprob)
        ]
        if bad:
            return self._model_problem(
                f"gave log-likelihoods that are not finite numbers for choice(s) "
                f"{'; '.join(bad)}: no prediction is made from them. Damaged weights, or an "
                "overflow in float16 (try --llm-dtype float32 or bfloat16)",
            )
        return None

    def _not_fitting(self, p: PreparedItem, lls: Sequence[LoglikelihoodResult]) -> ItemResult:
        """An item whose context and a choice do not fit the window under overflow ``skip``:
        reported as not fitting (like a generation prompt), never scored."""
        tokens = max((r.n_context_tokens or 0) for r in lls if r.context_overflow)
        window = next((r.context_window for r in lls if r.context_window), None)
        return ItemResult(
            task=self.spec.name,
            item_id=p.item.id,
            subset=p.item.subset,
            correct=False,
            score=0.0,
            prompt=p.prompt,
            target=p.target,
            fewshot_ids=list(p.fewshot_ids),
            choices=list(p.choices),
            gold=p.gold,
            details={"context_overflow": {"prompt_tokens": tokens, "context_window": window}},
        )

    def _score_choices(self, p: PreparedItem, lls: Sequence[LoglikelihoodResult]) -> ItemResult:
        mc = self.spec.multiple_choice
        assert mc is not None
        logprobs = [r.logprob for r in lls]
        pred = _argmax(logprobs)
        pred_norm = _argmax(
            [lp / max(1, len(c)) for lp, c in zip(logprobs, p.choices, strict=True)]
        )
        acc = float(pred == p.gold)
        acc_norm = float(pred_norm == p.gold)
        chosen = pred_norm if mc.metric == "acc_norm" else pred
        if mc.metric == "mc2":
            score = true_probability_mass(logprobs, p.labels)
            # MC2 is a probability mass: ``correct`` means "most of it on true answers",
            # a threshold that reports and gates do not take for a fact (see F1 above).
            correct = score > 0.5
        else:
            score = acc if mc.metric == "acc" else acc_norm
            correct = bool(score)
        truncated = max(r.truncated_tokens for r in lls)
        return ItemResult(
            task=self.spec.name,
            item_id=p.item.id,
            subset=p.item.subset,
            correct=correct,
            score=score,
            prompt=p.prompt,
            target=p.target,
            fewshot_ids=list(p.fewshot_ids),
            extracted=p.choices[chosen],
            extractor=f"loglikelihood ({mc.metric})",
            choices=list(p.choices),
            logprobs=logprobs,
            is_greedy=[r.is_greedy for r in lls],
            pred=pred,
            pred_norm=pred_norm,
            gold=p.gold,
            acc=acc,
            acc_norm=acc_norm,
            details={"truncated_prompt_tokens": truncated} if truncated else None,
        )
