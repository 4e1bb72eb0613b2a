"""Evaluation of a task's items on a backend: prompt building, batched requests, scoring.

Plain Python: no pytest, no torch. The pytest plugin calls :class:`TaskRunner` with the
items it has selected; so can any script.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_llmeval._errors import DataError, SpecError
from pytest_llmeval.dataset import Item, load_fewshot, load_fewshot_text
from pytest_llmeval.model import Backend, GenerateRequest, LoglikelihoodRequest
from pytest_llmeval.prompt import (
    FewShotBlock,
    TemplateRenderProblem,
    build_fewshot_block,
    render,
    render_list,
)
from pytest_llmeval.scorer import Extraction, answers_match, best_f1, extract
from pytest_llmeval.task import ExecutionSpec, TaskSpec


@dataclass(frozen=True)
class PreparedItem:
    """An item turned into what the model is asked: the prompt and the expected answer."""

    item: Item
    prompt: str
    target: str
    fewshot_ids: tuple[str, ...]
    choices: tuple[str, ...] = ()
    gold: int | None = None
    question: str = ""  # the item's own template, without description and few-shot block
    labels: tuple[bool, ...] = ()  # metric mc2: which choices are true
    references: tuple[str, ...] = ()  # generate.targets: every accepted answer

    @property
    def shared_prefix(self) -> int:
        """Characters of the prompt before the item's own question (description and few-shot
        block), the same for all items of a subset: a backend may compute them once."""
        return len(self.prompt) - len(self.question)


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
    repeat_scores: list[float] | None = None
    determinism: str | None = None
    reused_from: str | None = None
    # Scorer-specific detail: IFEval per-instruction results, sandbox status of code.
    details: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

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


def _argmax(values: Sequence[float]) -> int:
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


class TaskRunner:
    """Builds prompts for a task's items and scores them in batches on a backend."""

    def __init__(self, spec: TaskSpec, data_dirs: Sequence[Path]) -> None:
        self.spec = spec
        self.data_dirs = list(data_dirs)
        self._fewshot: dict[str | None, FewShotBlock] = {}

    def _fail(self, field: str, item: Item, exc: Exception) -> SpecError:
        return SpecError(self.spec.source, field, f"item {item.id}: {exc}")

    def fewshot_block(self, subset: str | None, context_doc: dict[str, Any]) -> FewShotBlock:
        if subset not in self._fewshot and self.spec.fewshot.text_file is not None:
            text, text_id = load_fewshot_text(self.spec, subset, self.data_dirs)
            try:
                description = render(self.spec.prompt.description, context_doc)
            except TemplateRenderProblem as exc:
                raise SpecError(self.spec.source, "prompt.description", str(exc)) from None
            sep = self.spec.prompt.fewshot_separator
            self._fewshot[subset] = FewShotBlock(text=description + text + sep, ids=(text_id,))
        if subset not in self._fewshot:
            spec = self.spec
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
            try:
                description = render(spec.prompt.description, context_doc)
            except TemplateRenderProblem as exc:
                raise SpecError(spec.source, "prompt.description", str(exc)) from None
            self._fewshot[subset] = build_fewshot_block(
                description,
                pairs,
                [ex_id for ex_id, _ in examples],
                spec.prompt.target_delimiter,
                spec.prompt.fewshot_separator,
            )
        return self._fewshot[subset]

    def prepare(self, item: Item) -> PreparedItem:
        """Render the full prompt (description, few-shot block, question) and the target."""
        spec = self.spec
        doc = {"subset": item.subset, **item.doc}
        block = self.fewshot_block(item.subset, doc)
        try:
            question = render(spec.prompt.template, doc)
        except TemplateRenderProblem as exc:
            raise self._fail("prompt.template", item, exc) from None
        prompt = block.text + question
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
            return PreparedItem(
                item=item,
                prompt=prompt,
                target=target,
                fewshot_ids=block.ids,
                question=question,
                references=references,
            )
        mc = spec.multiple_choice
        assert mc is not None
        try:
            if isinstance(mc.choices, str):
                choices = render_list(mc.choices, doc)
            else:
                choices = [render(c, doc) for c in mc.choices]
        except TemplateRenderProblem as exc:
            raise self._fail("multiple_choice.choices", item, exc) from None
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
        return PreparedItem(
            item=item,
            prompt=prompt,
            target=choices[gold],
            fewshot_ids=block.ids,
            choices=tuple(choices),
            gold=gold,
            question=question,
            labels=labels,
        )

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
        """Evaluate ``items`` (already selected) in one batched call to the backend."""
        started = time.perf_counter()
        prepared = [self.prepare(item) for item in items]
        if self.spec.mode == "generate":
            results = self._run_generate(prepared, backend)
        else:
            results = self._run_multiple_choice(prepared, backend)
        per_item = (time.perf_counter() - started) / max(1, len(results))
        for r in results:
            r.seconds = round(per_item, 4)
        return results

    def _run_generate(self, prepared: Sequence[PreparedItem], backend: Backend) -> list[ItemResult]:
        gen = self.spec.generate
        assert gen is not None
        requests = [
            GenerateRequest(
                context=p.prompt,
                max_new_tokens=gen.budget(p.item.subset),
                stop=gen.stop,
                overflow=gen.overflow,  # type: ignore[arg-type]  # validated by the spec
                shared_prefix=p.shared_prefix,
            )
            for p in prepared
        ]
        outputs = backend.generate(requests)
        if len(outputs) != len(requests):
            raise DataError(f"backend returned {len(outputs)} results for {len(requests)} requests")
        results = []
        for p, out in zip(prepared, outputs, strict=True):
            details: dict[str, Any] | None = None
            score: float | None = None
            if out.finish_reason == "context_overflow":
                correct, extraction = False, Extraction(answer=None, kind="none")
                details = {
                    "context_overflow": {
                        "prompt_tokens": out.n_prompt_tokens,
                        "max_new_tokens": gen.budget(p.item.subset),
                        "context_window": out.context_window,
                    }
                }
            elif gen.scorer == "execution":
                correct, answer, details = self._execute(p, out.text)
                extraction = Extraction(answer=answer, kind="code")
            elif gen.scorer == "ifeval":
                correct, details = self._ifeval(p, out.text)
                extraction = Extraction(answer=out.text, kind="ifeval")
            else:
                extraction = extract(out.text, gen.extract, truncated=out.finish_reason == "length")
                score = self._match_score(extraction.answer, p)
                correct = score > 0.5 if gen.compare == "f1" else bool(score)
            if out.truncated_tokens:
                details = {**(details or {}), "truncated_prompt_tokens": out.truncated_tokens}
            results.append(
                ItemResult(
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
                )
            )
        return results

    def _match_score(self, answer: str | None, p: PreparedItem) -> float:
        """1/0 for a match with the target (or any reference); the best F1 for f1."""
        gen = self.spec.generate
        assert gen is not None
        references = p.references or (p.target,)
        if gen.compare == "f1":
            return best_f1(answer, references)
        return float(any(answers_match(answer, ref, gen.compare) for ref in references))

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
        details = {"status": result.status, "reason": result.reason, "seconds": result.seconds}
        return result.status == "passed", completion, details

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
        details = {
            "status": result.status,
            "reason": result.reason,
            "seconds": result.seconds,
            "n_tests": len(tests),
        }
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
            result = evaluate_item(p.question, output, ids, kwargs)
        except ValueError as exc:
            raise self._fail("generate.ifeval", p.item, exc) from None
        return result.prompt_strict, result.to_dict()

    def _run_multiple_choice(
        self, prepared: Sequence[PreparedItem], backend: Backend
    ) -> list[ItemResult]:
        mc = self.spec.multiple_choice
        assert mc is not None
        delim = self.spec.prompt.target_delimiter
        requests = [
            LoglikelihoodRequest(
                context=p.prompt, continuation=delim + choice, shared_prefix=p.shared_prefix
            )
            for p in prepared
            for choice in p.choices
        ]
        outputs = backend.loglikelihood(requests)
        if len(outputs) != len(requests):
            raise DataError(f"backend returned {len(outputs)} results for {len(requests)} requests")
        results = []
        pos = 0
        for p in prepared:
            lls = outputs[pos : pos + len(p.choices)]
            pos += len(p.choices)
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
                correct = score > 0.5
            else:
                score = acc if mc.metric == "acc" else acc_norm
                correct = bool(score)
            results.append(
                ItemResult(
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
                )
            )
        return results
