"""An lm-evaluation-harness task as a task of ours: the harness builds, we run, it scores.

The harness's own machinery builds each document's requests (few-shot context, choices,
generation arguments: ``Task.build_all_requests``, in the harness's order, so that its
few-shot samplers draw what they draw in an ``lm_eval`` run with the same ``--limit``),
applies its filters and computes each document's metrics (``Task.process_results``).
The requests go to this plugin's backend, so that prefix reuse, continuous batching,
records, resume and floors apply as for our own specs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pytest_llmeval._errors import DataError, LlmEvalError, SpecError
from pytest_llmeval.dataset import Item
from pytest_llmeval.eval import ChatSettings, ItemResult, PreparedItem, TaskRunner
from pytest_llmeval.model import (
    Backend,
    ChatTemplate,
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
)
from pytest_llmeval.task import GenerateSpec, MultipleChoiceSpec, TaskSpec

from ._load import PREFIX, LoadedTask, lmeval_version

SUPPORTED_OUTPUT_TYPES = ("multiple_choice", "generate_until", "loglikelihood")
# HFLM's budget when a task's generation_kwargs give no max_gen_toks.
DEFAULT_MAX_GEN_TOKS = 256
# generation_kwargs that change nothing under greedy decoding.
_GREEDY_NEUTRAL = {"do_sample": (False,), "temperature": (0, 0.0), "num_beams": (1,)}


def _json_ready(value: Any) -> Any:
    """JSON-ready: numpy scalars to Python numbers, tuples to lists, NaN kept."""
    if isinstance(value, Mapping):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    item = getattr(value, "item", None)
    if callable(item) and not isinstance(value, (str, bytes)):
        try:
            return item()
        except (TypeError, ValueError):
            return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def aggregation_names(loaded: LoadedTask) -> dict[str, str]:
    """Each metric's aggregation, by its name in the harness's registry ("mean",
    "perplexity", "bleu", ...; "unregistered" for a task's own callable)."""
    from lm_eval.api.registry import AGGREGATION_REGISTRY

    by_function = {fn: name for name, fn in AGGREGATION_REGISTRY.items()}
    return {
        metric: by_function.get(fn, "unregistered")
        for metric, fn in loaded.task.aggregation().items()
    }


def primary_metric(loaded: LoadedTask, requested: str | None, where: str) -> str:
    """The ``metric,filter`` key an item is scored by and a floor checked against:
    ``requested`` (a metric name, or ``metric,filter``), else the task's first metric that
    the harness aggregates by mean (a per-document number: ``acc``, ``exact_match``; not a
    corpus-level ``bleu`` or a ``perplexity``) under its first filter."""
    task = loaded.task
    aggregations = aggregation_names(loaded)
    metrics = list(aggregations)
    filters = [f.name for f in getattr(task, "_filters", [])] or ["none"]
    keys = [f"{m},{f}" for f in filters for m in metrics]
    if requested is None:
        means = [m for m in metrics if aggregations[m] == "mean"]
        if not means:
            listed = ", ".join(f"{m} ({a})" for m, a in aggregations.items())
            raise SpecError(
                where,
                "lmeval.task",
                f"lm-eval task {loaded.name} has no metric aggregated by mean ({listed}): "
                "its documents have no score of their own to be items of; this plugin runs "
                "tasks with a per-document metric",
            )
        return f"{means[0]},{filters[0]}"
    key = requested if "," in requested else f"{requested},{filters[0]}"
    if key not in keys:
        raise SpecError(
            where,
            "lmeval.metric",
            f"{requested!r} is not a metric of lm-eval task {loaded.name}; it reports "
            f"{', '.join(keys)}",
        )
    return key


def leaf_spec(parent: TaskSpec, loaded: LoadedTask, where: str) -> TaskSpec:
    """Our spec of one harness leaf task: named ``lmeval-<task>``, its mode from the
    harness's output type, the parent's markers, floor and catalog entry."""
    from dataclasses import replace

    assert parent.lmeval is not None
    output_type = loaded.output_type
    if output_type not in SUPPORTED_OUTPUT_TYPES:
        raise SpecError(
            where,
            "lmeval.task",
            f"lm-eval task {loaded.name} asks for {output_type} requests; this plugin runs "
            f"{', '.join(SUPPORTED_OUTPUT_TYPES)} tasks",
        )
    config = loaded.task.config
    generate = multiple_choice = None
    if output_type == "generate_until":
        kwargs = dict(config.generation_kwargs or {})
        for key, value in kwargs.items():
            if key in _GREEDY_NEUTRAL and value not in _GREEDY_NEUTRAL[key]:
                raise SpecError(
                    where,
                    "lmeval.task",
                    f"lm-eval task {loaded.name} asks for {key}={value!r} in its "
                    "generation_kwargs; this plugin decodes greedily (do_sample: false, "
                    "temperature: 0), so its scores would not be the task's",
                )
        until = kwargs.get("until") or []
        generate = GenerateSpec(
            max_new_tokens=int(kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS)),
            stop=tuple([until] if isinstance(until, str) else until),
            overflow="truncate_left",
        )
        if int(config.repeats or 1) > 1:
            raise SpecError(
                where,
                "lmeval.task",
                f"lm-eval task {loaded.name} repeats each request {config.repeats} times "
                "(sampling for majority votes); this plugin decodes greedily",
            )
    else:
        multiple_choice = MultipleChoiceSpec(choices=(), gold="", overflow="truncate_left")
    metric = primary_metric(loaded, parent.lmeval.metric, where)
    name = PREFIX + loaded.name
    return replace(
        parent,
        name=name,
        mode="generate" if generate is not None else "multiple_choice",
        generate=generate,
        multiple_choice=multiple_choice,
        description=parent.description or str(config.description or "").strip()[:200],
        source=where,
        lmeval=replace(
            parent.lmeval,
            task=loaded.name,
            metric=metric,
            group=parent.lmeval.task if parent.lmeval.task != loaded.name else None,
        ),
    )


class LmEvalRunner(TaskRunner):
    """A harness leaf task behind the :class:`TaskRunner` interface the plugin drives.

    ``limit``: the first ``limit`` documents, as the harness's ``--limit`` (its few-shot
    samplers are seeded per task and draw in document order, so the contexts of a
    selection are those of an ``lm_eval`` run with the same limit)."""

    def __init__(
        self,
        spec: TaskSpec,
        loaded: LoadedTask,
        data_dirs: Sequence[Path],
        chat: ChatSettings | None = None,
        limit: int | None = None,
    ) -> None:
        super().__init__(spec, data_dirs, chat)
        assert spec.lmeval is not None and spec.lmeval.metric is not None
        self.lmeval = spec.lmeval
        self.loaded = loaded
        self.task = loaded.task
        self.limit = limit
        self.metric_key = spec.lmeval.metric
        self._instances: dict[int, list[Any]] = {}
        self._built: set[str] = set()
        self.total_docs = -1  # the task's documents, not only the first `limit`
        self._shared = 0
        self._chat_built = False
        self.items: list[Item] = self._build(None)

    # ------------------------------------------------------------------ requests

    def _build(self, template: ChatTemplate | None) -> list[Item]:
        """Build the requests of the first ``limit`` documents with the harness (its
        few-shot sampler seeded anew, so that a rebuild draws the same examples)."""
        task = self.task
        task.set_fewshot_seed(seed=self.lmeval.fewshot_seed)
        if self.total_docs < 0:
            self.total_docs = len(task.eval_docs)  # processes the documents: once
        chat: dict[str, Any] = {}
        if template is not None:
            chat = {
                "apply_chat_template": True,
                "fewshot_as_multiturn": self.chat.multiturn,
                "system_instruction": self.chat.system_prompt,
                "chat_template": _renderer(template, self.spec.name),
            }
        try:
            with _quiet_progress():
                task.build_all_requests(limit=self.limit, rank=0, world_size=1, **chat)
        except LlmEvalError:
            raise
        except Exception as exc:
            raise DataError(
                f"{self.spec.source}: lm-eval could not build the requests of task "
                f"{self.loaded.name}: {type(exc).__name__}: {exc}"
            ) from None
        by_doc: dict[int, list[Any]] = {}
        for inst in task.instances:
            by_doc.setdefault(int(inst.doc_id), []).append(inst)
        for insts in by_doc.values():
            insts.sort(key=lambda i: i.idx)
        self._instances = by_doc
        # The characters every context starts with (description, a fixed few-shot block).
        contexts = [insts[0].args[0] for insts in by_doc.values()]
        self._shared = len(os.path.commonprefix(contexts))  # noqa: RUF071 (text, not paths)
        # Ids as wide as the whole task needs, so that a document's id does not depend on
        # --llm-limit (resume and baselines match items by id).
        width = max(4, len(str(max(self.total_docs - 1, 0))))
        items = [
            Item(id=f"{self.spec.name}-{doc_id:0{width}d}", index=doc_id, doc=insts[0].doc)
            for doc_id, insts in sorted(by_doc.items())
        ]
        self._built = {item.id for item in items}
        return items

    def bind(self, backend: Backend) -> None:
        """Take the chat template from ``backend`` (our chat settings); with one, the
        harness builds the requests again as ``lm_eval --apply_chat_template`` does."""
        if self._bound:
            return
        super().bind(backend)
        if self.template is not None and not self._chat_built:
            if self.template.render is None:
                raise LlmEvalError(
                    f"task {self.spec.name}: lm-eval builds chat prompts as text, but the "
                    "server applies its own chat template; run lm-eval tasks with "
                    "--llm-set prompt.chat_template=off or the hf backend"
                )
            self._build(self.template)
            self._chat_built = True

    @property
    def shots(self) -> int:
        return int(self.task.config.num_fewshot or 0)  # as the harness configured it

    def fewshot_ids(self, subset: str | None) -> tuple[str, ...]:
        return ()  # the harness's few-shot documents have no ids; the config is recorded

    def fewshot_shown(self, subset: str | None) -> Any:
        return None  # the harness picks and renders its few-shot documents itself

    def subsets(self) -> list[str | None]:
        return [None]

    def data_files(self) -> list[Path]:
        files = (self.task.config.dataset_kwargs or {}).get("data_files") or {}
        values = files.values() if isinstance(files, Mapping) else [files]
        out: list[Path] = []
        for value in values:
            for one in [value] if isinstance(value, str) else list(value):
                path = Path(str(one))
                if path.is_file():
                    out.append(path)
        return out

    def config_extra(self) -> dict[str, Any]:
        """The harness's own config of the task (after overrides), its version, and the
        metric the floor is checked against: part of the config hash."""
        return {
            "lmeval": {
                "task": self.loaded.name,
                "group": self.lmeval.group,
                "version": lmeval_version(),
                "task_version": _json_ready(self.task.VERSION),
                "metric": self.metric_key,
                "limit": self.limit,
                "fewshot_seed": self.lmeval.fewshot_seed,
                "config": _json_ready(self.task.dump_config()),
                "yaml_path": self.loaded.yaml_path,
            }
        }

    def check(self, items: Sequence[Item]) -> dict[str, str]:
        return {
            item.id: f"{item.id}: lm-eval built no request for document {item.index}"
            for item in items
            if item.index not in self._instances
        }

    def _requests_of(self, item: Item) -> list[Any]:
        """The harness's requests of one of its documents, or of a probe's rewrite of one
        (an item of another id: ``<id>~s0``)."""
        insts = self._instances.get(item.index)
        if not insts:
            raise DataError(f"{item.id}: lm-eval built no request for document {item.index}")
        if item.id in self._built:
            return insts
        return self._requests_for_rewrite(item)

    def rewrite_problem(self) -> str | None:
        """Why a rewritten document (a contamination probe's) cannot be asked as its
        original was, or None."""
        shots = int(self.task.config.num_fewshot or 0)
        config = self.task.config.fewshot_config
        sampler = (
            config.get("sampler")
            if isinstance(config, Mapping)
            else getattr(config, "sampler", None)
        ) or "default"
        if shots and sampler != "first_n":
            return (
                f"lm-eval task {self.loaded.name} draws its {shots} few-shot examples at "
                f"random per document (sampler {sampler!r}): a rewritten document cannot be "
                "asked with the examples of its original, so it is not probed"
            )
        return None

    def _requests_for_rewrite(self, item: Item) -> list[Any]:
        """The harness's requests for a rewritten document (a contamination probe's option
        order or number rewrite), built alone. Only where the few-shot examples cannot
        depend on the order documents are built in (no examples, or the ``first_n``
        sampler): otherwise the rewrite would be asked with other examples than the
        document it is compared with."""
        task = self.task
        problem = self.rewrite_problem()
        if problem is not None:
            raise DataError(f"{item.id}: {problem}")
        shots = int(task.config.num_fewshot or 0)
        chat: dict[str, Any] = {}
        if self._chat_built and self.template is not None:
            chat = {
                "system_instruction": self.chat.system_prompt,
                "apply_chat_template": True,
                "fewshot_as_multiturn": self.chat.multiturn,
                "chat_template": _renderer(self.template, self.spec.name),
            }
        try:
            context = task.fewshot_context(
                item.doc, num_fewshot=shots, gen_prefix=task.doc_to_prefix(item.doc), **chat
            )
            built = task.construct_requests(
                doc=item.doc,
                ctx=context,
                metadata=(self.loaded.name, item.index, 1),
                apply_chat_template=bool(chat),
                chat_template=chat.get("chat_template"),
            )
        except Exception as exc:
            raise DataError(
                f"{item.id}: lm-eval could not build the requests of a rewritten document: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        insts = built if isinstance(built, list) else [built]
        return sorted(insts, key=lambda i: i.idx)

    def prepare(self, item: Item) -> PreparedItem:
        insts = self._requests_of(item)
        context = str(insts[0].args[0])
        choices: tuple[str, ...] = ()
        gold: int | None = None
        target = self.task.doc_to_target(item.doc)
        if self.spec.mode == "multiple_choice":
            choices = tuple(str(inst.args[1]) for inst in insts)
            if isinstance(target, int) and not isinstance(target, bool):
                gold = target
            elif isinstance(target, str) and target in choices:
                gold = choices.index(target)
        return PreparedItem(
            item=item,
            prompt=context,
            target=str(_json_ready(target)),
            fewshot_ids=(),
            choices=choices,
            gold=gold,
            question_start=min(self._shared, len(context)),
        )

    # ------------------------------------------------------------------ running

    # run() and stream() are TaskRunner's: they prepare items (here: the harness's
    # requests), run them through the hooks below and finish each result.

    def _generate_requests(self, prepared: Sequence[PreparedItem]) -> list[GenerateRequest]:
        gen = self.spec.generate
        assert gen is not None
        return [
            GenerateRequest(
                context=p.prompt,
                max_new_tokens=gen.max_new_tokens,
                stop=gen.stop,
                overflow="truncate_left",  # the harness's HF model keeps the context's end
                shared_prefix=p.shared_prefix,
            )
            for p in prepared
        ]

    def _generation_result(self, p: PreparedItem, out: GenerateResult) -> ItemResult:
        if out.error is not None:
            message = self._model_problem(f"could not generate: {out.error}")
            return self.error_result(p.item, message, p)
        insts = self._requests_of(p.item)
        try:
            result = self._result_from_harness(p, [out.text] * len(insts))
        except LlmEvalError as exc:
            return self.error_result(p.item, str(exc), p)
        result.output = out.text
        result.finish_reason = out.finish_reason
        result.n_output_tokens = out.n_tokens
        result.stop_token = out.stop_token
        if out.truncated_tokens:
            result.details = {
                **(result.details or {}),
                "truncated_prompt_tokens": out.truncated_tokens,
            }
        return result

    def _run_multiple_choice(
        self, prepared: Sequence[PreparedItem], backend: Backend
    ) -> list[ItemResult]:
        """Every log-likelihood request of the prepared documents in one call (multiple
        choice: one per choice; ``loglikelihood`` tasks: one), scored by the harness."""
        requests: list[LoglikelihoodRequest] = []
        spans: list[tuple[int, int]] = []
        for p in prepared:
            start = len(requests)
            for inst in self._requests_of(p.item):
                context, continuation = inst.args[0], inst.args[1]
                requests.append(
                    LoglikelihoodRequest(
                        context=str(context),
                        continuation=str(continuation),
                        shared_prefix=min(p.shared_prefix, len(context)),
                        overflow="truncate_left",
                    )
                )
            spans.append((start, len(requests)))
        outs = backend.loglikelihood(requests) if requests else []
        if len(outs) != len(requests):
            raise DataError(f"backend returned {len(outs)} results for {len(requests)} requests")
        results = []
        for p, (a, b) in zip(prepared, spans, strict=True):
            lls = outs[a:b]
            problem = self._loglikelihood_problem(p, lls)
            if problem is not None:
                results.append(self.error_result(p.item, problem, p))
                continue
            try:
                result = self._result_from_harness(p, [(r.logprob, r.is_greedy) for r in lls])
            except LlmEvalError as exc:
                results.append(self.error_result(p.item, str(exc), p))
                continue
            result.logprobs = [r.logprob for r in lls]
            result.is_greedy = [r.is_greedy for r in lls]
            if result.choices:
                best = max(range(len(lls)), key=lambda i: (lls[i].logprob, -i))
                result.pred = best
            truncated = max((r.truncated_tokens for r in lls), default=0)
            if truncated:
                result.details = {**(result.details or {}), "truncated_prompt_tokens": truncated}
            results.append(result)
        return results

    # ------------------------------------------------------------------ scoring

    def _result_from_harness(self, p: PreparedItem, responses: Sequence[Any]) -> ItemResult:
        """The harness's filters and ``process_results`` on this document's responses:
        every ``metric,filter`` value, the primary one as the item's score."""
        insts = self._requests_of(p.item)
        for inst, resp in zip(insts, responses, strict=True):
            inst.resps = [resp]
            inst.filtered_resps = {}
        try:
            for ensemble in getattr(self.task, "_filters", []):
                ensemble.apply(insts)
            metrics: dict[str, Any] = {}
            filtered: dict[str, Any] = {}
            for key in insts[0].filtered_resps:
                values = self.task.process_results(
                    p.item.doc, [inst.filtered_resps[key] for inst in insts]
                )
                filtered[key] = _json_ready(insts[0].filtered_resps[key])
                for metric, value in values.items():
                    metrics[f"{metric},{key}"] = _json_ready(value)
        except Exception as exc:
            raise DataError(
                f"{p.item.id}: lm-eval's filters or process_results failed on this "
                f"document: {type(exc).__name__}: {exc}"
            ) from None
        value = metrics.get(self.metric_key)
        if not isinstance(value, (int, float)):
            raise DataError(
                f"{p.item.id}: lm-eval's metric {self.metric_key} is {value!r} for this "
                "document, not a number: gate on a per-document metric (lmeval.metric)"
            )
        score = float(value)
        if not math.isfinite(score):
            raise DataError(f"{p.item.id}: lm-eval's metric {self.metric_key} is {score}")
        filter_key = self.metric_key.partition(",")[2]
        extracted = filtered.get(filter_key)
        return ItemResult(
            task=self.spec.name,
            item_id=p.item.id,
            subset=None,
            correct=score >= 1.0 if score in (0.0, 1.0) else score > 0.5,
            score=score,
            prompt=p.prompt,
            target=p.target,
            fewshot_ids=[],
            extracted=None if self.spec.mode != "generate" else str(extracted),
            extractor=f"lm-eval filter {filter_key}" if self.spec.mode == "generate" else None,
            choices=list(p.choices),
            gold=p.gold,
            acc=_number(metrics.get(f"acc,{filter_key}")),
            acc_norm=_number(metrics.get(f"acc_norm,{filter_key}")),
            details={"lmeval": {"metrics": metrics, "filtered": filtered}},
        )


@contextmanager
def _quiet_progress() -> Iterator[None]:
    """No progress bar per task on the terminal while the harness builds requests (a
    group of 57 subtasks would print 57 of them into pytest's output)."""
    import lm_eval.api.task as harness_task

    bar = getattr(harness_task, "tqdm", None)
    if bar is None:
        yield
        return
    harness_task.tqdm = lambda iterable, **kwargs: iterable
    try:
        yield
    finally:
        harness_task.tqdm = bar


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def _renderer(template: ChatTemplate, task: str) -> Any:
    """The ``chat_template`` callable the harness renders conversations with: our
    template's rendering with the generation prompt (the harness's HF model renders with
    ``add_generation_prompt=True`` unless a task continues the assistant's turn)."""
    render = template.render
    assert render is not None

    def chat_template(history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if not add_generation_prompt:
            raise LlmEvalError(
                f"task {task}: the harness asks to continue the assistant's turn "
                "(gen_prefix / assistant prefill), which our chat rendering does not do; "
                "run it with --llm-set prompt.chat_template=off"
            )
        return render(history)

    return chat_template
