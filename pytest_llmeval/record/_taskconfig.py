"""What determines a task's scores, as plain data, and its digests.

``task_config`` is written to ``eval_config.json``; ``config_hash`` keys the resume cache
(an item result is reused only when its task's config hash matches); ``prompt_hash`` makes
prompt drift visible at a glance.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from pytest_llmeval._errors import LlmEvalError
from pytest_llmeval.record._hash import stable_hash
from pytest_llmeval.task import TaskSpec

if TYPE_CHECKING:  # a type only: reading records never loads the evaluation stack
    from pytest_llmeval.eval import TaskRunner

# Greedy decoding is the only sampling mode; recorded explicitly so that records say so.
# A backend states how it decodes (``decoding`` in its info: what of the model's generation
# config it applies); this is the record of one that does not.
SAMPLING = {"do_sample": False, "temperature": 0.0, "top_p": 1.0, "num_beams": 1}


def task_config(runner: TaskRunner, subsets: Iterable[str | None]) -> dict[str, Any]:
    """Everything in a task's spec that affects its scores, with the few-shot ids in order."""
    spec = runner.spec
    fewshot_ids: dict[str, list[str] | None] = {}
    shown: dict[str, str | None] = {}
    for subset in sorted(set(subsets), key=lambda s: s or ""):
        try:
            fewshot_ids[subset or ""] = list(runner.fewshot_ids(subset))
            rendered = runner.fewshot_shown(subset)
            shown[subset or ""] = None if rendered is None else stable_hash(rendered)
        except LlmEvalError:
            # That subset's few-shot set cannot be loaded: its items fail with the reason
            # (found at collection); the other subsets run.
            fewshot_ids[subset or ""] = None
            shown[subset or ""] = None
    config: dict[str, Any] = {
        "task": spec.name,
        "mode": spec.mode,
        "metric": spec.metric,
        "dataset": _tuples_as_lists(asdict(spec.dataset)),
        "prompt": _prompt_fields(spec),
        # How prompts were presented: the chat template applied (source, SHA256, end of
        # turn) or None, the mode and who chose it, the system prompt, few-shot turns, the
        # BOS policy, reasoning-block stripping.
        **runner.prompt_record(),
        **runner.config_extra(),
        "fewshot": {
            "k": spec.fewshot.k,
            "order": spec.fewshot.order,
            "seed": spec.fewshot.seed,
            "source": _tuples_as_lists(asdict(spec.fewshot.source))
            if spec.fewshot.source
            else None,
            "examples_digest": stable_hash(_tuples_as_lists(list(spec.fewshot.examples))),
            "text_file": spec.fewshot.text_file,
            "ids": fewshot_ids,
        },
    }
    if spec.fewshot.source or spec.fewshot.text_file:
        # Read from a file: the digest of what each subset's few-shot set shows, as
        # rendered (the ids above stay the same when the file's text is edited; inline
        # examples are in examples_digest, and tasks without a file keep their hashes).
        config["fewshot"]["shown_digests"] = shown
    if runner.chat_form_applied is not None:
        # The spec has a chat form: whether the task ran in it (under a chat template).
        config["chat_form"] = runner.chat_form_applied
    if spec.generate is not None:
        # The whole generate block: budgets, stops, extraction, comparison, the scorer and
        # its settings (sandbox templates and limits, IFEval fields), context overflow.
        generation = _tuples_as_lists(asdict(spec.generate))
        if not generation["metrics"]:  # a task without named metrics keeps its config hash
            del generation["metrics"]
        config["generation"] = {**(runner.decoding or SAMPLING), **generation}
    if spec.multiple_choice is not None:
        config["multiple_choice"] = _tuples_as_lists(asdict(spec.multiple_choice))
    return config


def _prompt_fields(spec: TaskSpec) -> dict[str, Any]:
    """The prompt templates; an assistant prefix only where one is set (the configs of
    tasks without one keep their hashes)."""
    prompt = asdict(spec.prompt)
    if not prompt.get("assistant_prefix"):
        prompt.pop("assistant_prefix", None)
    return prompt


PROMPT_FIELDS = ("prompt", "fewshot", "chat_template", "system_prompt", "fewshot_multiturn", "bos")


def prompt_hash(config: Mapping[str, Any]) -> str:
    """Digest of what the model is shown: templates, few-shot examples and their order, the
    chat template, the system prompt and the BOS policy."""
    return stable_hash({k: config.get(k) for k in PROMPT_FIELDS})


def config_hash(task: Mapping[str, Any], model: Mapping[str, Any]) -> str:
    """Digest of everything that determines an item's result: the task config and the model
    settings (weights digest, dtype, device type, batch size, seed, library versions)."""
    return stable_hash({"task": task, "model": model})


def _tuples_as_lists(value: Any) -> Any:
    """Tuples to lists, recursively, so that JSON and hashes see one form."""
    if isinstance(value, Mapping):
        return {str(k): _tuples_as_lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_tuples_as_lists(v) for v in value]
    return value
