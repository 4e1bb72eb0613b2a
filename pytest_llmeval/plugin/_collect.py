"""Collection: a YAML task spec becomes a pytest File; each benchmark item a pytest Item."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval._errors import JudgeNotInstalled, LlmEvalError, SpecError
from pytest_llmeval.dataset import DataNotInstalled, Item, describe_no_rows, first_n, load_items
from pytest_llmeval.eval import ItemResult
from pytest_llmeval.task import TaskSpec, is_task_file, load_task_spec

from ._session import LlmEvalSession, task_meta

SESSION_KEY = pytest.StashKey[LlmEvalSession]()


def get_session(config: pytest.Config) -> LlmEvalSession:
    return config.stash[SESSION_KEY]


class WrongAnswer(Exception):
    """Raised in strict mode when the model answered an item wrongly."""

    def __init__(self, result: ItemResult) -> None:
        super().__init__(result.item_id)
        self.result = result


def describe(result: dict[str, Any]) -> str:
    """The item details a user debugging one item wants to see: the exact prompt text
    (under a chat template the rendered conversation, its special tokens written out, and
    a note when the backend puts a BOS token before it), the output, the answer."""
    header = f"--- prompt ({len(result['prompt'])} chars"
    if result.get("messages"):
        header += f", a chat template rendered {len(result['messages'])} message(s)"
    if result.get("bos_added"):
        header += "; the BOS token is added before this text"
    lines = [header + ") ---", result["prompt"]]
    if result.get("choices"):
        lines.append("--- choices: log-likelihood (greedy) ---")
        for i, (c, lp, g) in enumerate(
            zip(result["choices"], result["logprobs"], result["is_greedy"], strict=True)
        ):
            marks = ("gold " if i == result["gold"] else "") + (
                "pred" if i == result["pred"] else ""
            )
            lines.append(f"  [{i}] {c!r}: {lp:.4f}{' (greedy)' if g else ''} {marks}".rstrip())
    if result.get("output") is not None:
        lines += ["--- raw output ---", result["output"]]
        if result.get("output_stripped") is not None:
            lines += ["--- output after the thinking block ---", result["output_stripped"]]
        stop = f" ({result['stop_token']})" if result.get("stop_token") else ""
        n_tokens = result.get("n_output_tokens")
        count = "tokens not reported" if n_tokens is None else f"{n_tokens} tokens"
        lines.append(f"--- finish: {result.get('finish_reason')}{stop}, {count}")
    lines.append(f"extracted answer: {result.get('extracted')!r} (by {result.get('extractor')})")
    lines.append(f"target: {result['target']!r}")
    lines.append(f"correct: {result['correct']}")
    for name, metric in (result.get("metrics") or {}).items():
        lines.append(f"{name}: {metric['score']} (answer {metric['extracted']!r})")
    return "\n".join(lines)


class EvalItem(pytest.Item):
    """One benchmark item as a test. Its result comes from a batched task run."""

    def __init__(
        self,
        *,
        task: str,
        item: Item,
        meta: dict[str, Any],
        problem: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.task = task
        self.item = item
        # Why this item cannot be evaluated, found at collection (its row or templates):
        # it fails alone, without the model, and is left out of its task's batches.
        self.problem = problem
        self.user_properties.append(("llmeval_task", task))
        self.user_properties.append(("llmeval_meta", meta))

    def setup(self) -> None:
        session = get_session(self.config)
        if session.stop_reason is not None:  # an option error found on an xdist worker
            self.session.shouldstop = session.stop_reason
            pytest.fail(session.stop_reason, pytrace=False)
        if session.floor_block is not None:
            pytest.fail(session.floor_block, pytrace=False)
        if session.options.model is None:
            pytest.skip("no model to evaluate: pass --llm-model=PATH (or set llm_model in ini)")

    def runtest(self) -> None:
        session = get_session(self.config)
        if self.problem is not None:
            pytest.fail(self.problem, pytrace=False)
        try:
            result, log = session.result_for(self)
        except LlmEvalError as exc:
            message = str(exc)
            failed_load = session.evaluator.load_error
            if failed_load is not None:  # nothing can run: fail once and stop the run
                self.session.shouldfail = f"the model could not be loaded: {failed_load}"
        else:
            message = ""
        if message:
            pytest.fail(message, pytrace=False)
        self.user_properties.extend(session.properties_for(self, result, log))
        if result.error is not None:
            pytest.fail(result.error, pytrace=False)
        overflow = (result.details or {}).get("context_overflow")
        if overflow:
            if overflow.get("max_new_tokens") is not None:
                detail = (
                    f"{overflow['prompt_tokens']} prompt tokens + {overflow['max_new_tokens']} "
                    f"new tokens > {overflow['context_window']} (reported, not scored; "
                    "generate.overflow truncate_middle/truncate_left would cut the prompt "
                    "instead)"
                )
            else:
                detail = (
                    f"{overflow['prompt_tokens']} tokens of prompt and choice do not fit the "
                    f"{overflow['context_window']}-token window (reported, not scored; "
                    "multiple_choice.overflow truncate_left/truncate_middle would cut the "
                    "prompt instead)"
                )
            pytest.skip(f"{self.item.id} does not fit the context window: {detail}")
        if result.determinism not in (None, "ok"):
            pytest.fail(f"{self.item.id} is not deterministic: {result.determinism}", pytrace=False)
        if not result.correct and session.options.strict:
            raise WrongAnswer(result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, WrongAnswer):
            return f"wrong answer for {self.item.id}\n" + describe(excinfo.value.result.to_dict())
        if isinstance(excinfo.value, LlmEvalError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"{self.task}[{self.item.id}]"


class MissingDataItem(pytest.Item):
    """Stands for a task that runs no item: its benchmark data is not installed, its data
    has no rows, or every item is excluded. Skipped with the reason; failed with it when
    the task has a floor (a floor that nothing is measured against must not pass), and then
    counted as the task's error by the controller."""

    def __init__(
        self,
        *,
        reason: str,
        floor: float | None = None,
        meta: dict[str, Any] | None = None,
        what: str = "the task",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.reason = reason
        self.floor = floor
        self.what = what  # what runs no item: the task, or one of its subsets
        self.task = None if meta is None else str(meta["task"])
        if meta is not None:
            self.user_properties.append(("llmeval_task", meta["task"]))
            self.user_properties.append(("llmeval_meta", meta))
        if floor is None:
            self.add_marker(pytest.mark.skip(reason=reason))

    def setup(self) -> None:
        if get_session(self.config).options.model is None:  # nothing is evaluated anyway
            pytest.skip(self.reason)

    def runtest(self) -> None:
        but = "" if self.what == "the task" else f" {self.what}"
        pytest.fail(
            f"the task has a floor of {self.floor} but{but} runs no item: {self.reason}",
            pytrace=False,
        )

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, self.name


class SpecErrorItem(pytest.Item):
    """Stands for a spec file that cannot be collected (its text, or its data): the run's
    collection error when the run selects it (:func:`report_spec_errors`, before anything
    runs), a warning when ``-k``/``-m`` deselect it, so that one broken spec does not stop
    runs of the others. Named ``TASK-spec`` (the file's stem when the spec did not load),
    with the spec's markers. A spec file named on the command line is selected: its error
    is its collection error at once (``FILE::ITEM`` could not match a stand-in)."""

    def __init__(self, *, message: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.message = message

    def runtest(self) -> None:  # reached only if the collection error was not reported
        pytest.fail(self.message, pytrace=False)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, self.name


def task_of(item: pytest.Item) -> str | None:
    """The task a collected item belongs to (a benchmark item or a task's stand-in), else
    None (a plain test, a spec error)."""
    if isinstance(item, (EvalItem, MissingDataItem)):
        return item.task
    return None


def report_spec_errors(config: pytest.Config, items: list[pytest.Item]) -> None:
    """After ``-k``/``-m`` selection: each selected :class:`SpecErrorItem` becomes its
    file's collection error (the run is interrupted before anything runs: exit 2) and
    leaves ``items``; a spec error the run does not select becomes a warning line, and so
    do the warnings of the selected tasks (a subset without rows)."""
    session = get_session(config)
    chosen = [item for item in items if isinstance(item, SpecErrorItem)]
    if chosen:
        items[:] = [item for item in items if not isinstance(item, SpecErrorItem)]
    for item in chosen:
        assert item.parent is not None
        report = pytest.CollectReport(item.parent.nodeid, "failed", item.message, [])
        config.hook.pytest_collectreport(report=report)
    reported = {item.parent.nodeid for item in chosen if item.parent is not None}
    for nodeid, message in session.spec_errors.items():
        if nodeid not in reported:
            session.collect_warnings.append(
                f"{nodeid} cannot be collected (this run's -k/-m does not select it, so the "
                f"run goes on without it): {message}"
            )
    tasks = {item.task for item in items if isinstance(item, EvalItem)}
    for task, lines in session.task_warnings.items():
        if task in tasks:
            session.collect_warnings.extend(lines)


class TaskFile(pytest.File):
    """A YAML task spec. Collection validates the spec and renders the first prompt."""

    def collect(self) -> Iterator[pytest.Item]:
        self._spec: TaskSpec | None = None  # once loaded: names the stand-in of an error
        try:
            items = list(self._collect())
        except (self.CollectError, LlmEvalError) as exc:
            if self.session.isinitpath(self.path):  # named on the command line: selected
                raise self.CollectError(str(exc)) from None
            yield self._spec_error(str(exc))
            return
        yield from items

    def _spec_error(self, message: str) -> SpecErrorItem:
        get_session(self.config).spec_errors[self.nodeid] = message
        spec = self._spec
        name = f"{spec.name if spec is not None else self.path.stem}-spec"
        node: SpecErrorItem = SpecErrorItem.from_parent(self, name=name, message=message)
        for marker in _markers(spec) if spec is not None else []:
            node.add_marker(getattr(pytest.mark, marker))
        if spec is not None:  # its probes fail with this message, not skip as not collected
            get_session(self.config).broken_specs[spec.name] = message
        return node

    def _collect(self) -> Iterator[pytest.Item]:
        session = get_session(self.config)
        empty: dict[str, str] = {}
        try:
            spec: TaskSpec = load_task_spec(self.path)
            self._spec = spec
            if spec.lmeval is not None:
                yield from collect_lmeval(self, spec)
                return
            try:
                items = load_items(spec, session.options.data_dirs, empty)
            except DataNotInstalled as exc:
                spec = self._register(spec)
                yield self._no_items(spec, "data", str(exc))
                return
            # before the task is registered: a spec error leaves no runner for the probes
            probe_fields_problem(spec, items)
            try:
                spec = session.register_task(spec)
            except JudgeNotInstalled as exc:
                spec = session.specs.get(spec.name, spec)
                yield self._no_items(spec, "judge", str(exc))
                return
            loaded = len(items)
            if session.excluded:
                session.exclusions_matched.update(i.id for i in items if i.id in session.excluded)
                items = [item for item in items if item.id not in session.excluded]
            session.total_items[spec.name] = len(items)
            chosen = first_n(items, session.options.limit)
            # Every selected item's own data and templates, before any model is loaded: an
            # item that cannot be evaluated fails alone; a problem every item has is the
            # spec's (or the data's) and fails collection.
            problems = session.runners[spec.name].check(chosen)
            if chosen and len(problems) == len(chosen):
                first = problems[chosen[0].id]
                more = f" (so do all {len(chosen)} selected items)" if len(chosen) > 1 else ""
                raise self.CollectError(first + more)
        except LlmEvalError as exc:
            raise self.CollectError(str(exc)) from None
        if not chosen:
            yield self._no_items(spec, "empty", no_items_reason(session, spec, loaded))
            return
        meta = task_meta(spec, len(items), session.floor_sources.get(spec.name))
        if spec.dataset.subsets is not None:
            meta["subsets"] = True
            meta["empty_subsets"] = dict(empty)
        for item in chosen:
            yield _eval_item(self, spec, item, meta, problems.get(item.id))
        for subset, where in empty.items():
            reason = f"its data has no rows: {where}"
            if spec.floor is None:  # nothing gates on it: a warning, the others are scored
                session.task_warnings.setdefault(spec.name, []).append(
                    f"{spec.name}: subset {subset!r} runs no item, {reason}; it is not "
                    "scored: fill the file, or leave the subset out of dataset.subsets"
                )
                continue
            node = MissingDataItem.from_parent(
                self,
                name=f"{spec.name}-{subset}-empty",
                reason=reason,
                floor=spec.floor,
                meta={**meta, "task": spec.name},
                what=f"its subset {subset!r}",
            )
            for marker in _markers(spec):
                node.add_marker(getattr(pytest.mark, marker))
            yield node

    def _no_items(self, spec: TaskSpec, suffix: str, reason: str) -> MissingDataItem:
        return _no_items(self, spec, suffix, reason)

    def _register(self, spec: TaskSpec) -> TaskSpec:
        """Register a task whose data is not installed: a scorer that is not installed
        either does not matter then (nothing runs)."""
        session = get_session(self.config)
        try:
            return session.register_task(spec)
        except JudgeNotInstalled:
            return session.specs.get(spec.name, spec)


def probe_fields_problem(spec: TaskSpec, items: list[Item]) -> None:
    """The document fields the ``contamination:`` block names are in the data: a name no
    item has (a typo) is the spec's error now, at collection, not a ``KeyError`` from the
    probe after the model has loaded. A field some items lack fails those items' probes."""
    if not items:
        return
    probes = spec.probes
    named: list[tuple[str, str]] = []
    if isinstance(probes.options, str):
        named.append(("options", probes.options))
    elif probes.options is not None:
        named += [(f"options[{i}]", name) for i, name in enumerate(probes.options)]
    for key in ("gold", "question", "solution"):
        value = getattr(probes, key)
        if value is not None:
            named.append((key, value))
    for key, name in named:
        if not any(name in item.doc for item in items):
            fields = sorted({str(k) for item in items[:50] for k in item.doc})
            raise SpecError(
                spec.source,
                f"contamination.{key}",
                f"no item of the data has a field {name!r} (its fields: {', '.join(fields)})",
            )


def collect_lmeval(parent: pytest.Collector, spec: TaskSpec) -> Iterator[pytest.Item]:
    """The items of an lm-evaluation-harness task or group (``lmeval:`` spec, or a name
    given to ``--llm-lmeval-tasks``): one task of ours per leaf task, its documents built
    by the harness (the first ``--llm-limit`` of each), ``lmeval-<task>-NNNN``."""
    session = get_session(parent.config)
    for runner in session.register_lmeval(spec):
        leaf = runner.spec
        items = list(runner.items)
        if session.excluded:
            session.exclusions_matched.update(i.id for i in items if i.id in session.excluded)
            items = [item for item in items if item.id not in session.excluded]
        total = runner.total_docs
        session.total_items[leaf.name] = total
        if not items:
            yield _no_items(parent, leaf, "empty", f"lm-eval task {runner.loaded.name}: no item")
            continue
        problems = runner.check(items)
        meta = task_meta(leaf, total, session.floor_sources.get(leaf.name))
        for item in items:
            yield _eval_item(parent, leaf, item, meta, problems.get(item.id))


def _eval_item(
    parent: pytest.Collector,
    spec: TaskSpec,
    item: Item,
    meta: dict[str, Any],
    problem: str | None,
) -> EvalItem:
    node: EvalItem = EvalItem.from_parent(
        parent, name=item.id, task=spec.name, item=item, meta=meta, problem=problem
    )
    node.add_marker(pytest.mark.llmeval)
    node.add_marker(pytest.mark.xdist_group(name=f"llmeval-{spec.name}"))
    for marker in _markers(spec):
        node.add_marker(getattr(pytest.mark, marker))
    return node


def _no_items(
    parent: pytest.Collector, spec: TaskSpec, suffix: str, reason: str
) -> MissingDataItem:
    """The one item of a task that runs none (see :class:`MissingDataItem`). It reports
    to the controller, which lists the task with its state and reason (a skipped task in
    the summary, the records and the report; a failed one when the task has a floor)."""
    meta = {
        **task_meta(spec, 0, get_session(parent.config).floor_sources.get(spec.name)),
        "task": spec.name,
        "no_items": suffix,
    }
    node = MissingDataItem.from_parent(
        parent, name=f"{spec.name}-{suffix}", reason=reason, floor=spec.floor, meta=meta
    )
    for marker in _markers(spec):
        node.add_marker(getattr(pytest.mark, marker))
    return node


class LmEvalTasks(pytest.Collector):
    """The tasks named by ``--llm-lmeval-tasks`` (no file of ours stands for them)."""

    def collect(self) -> Iterator[pytest.Item]:
        session = get_session(self.config)
        for name in session.options.lmeval_tasks:
            spec = lmeval_option_spec(
                name, session.options.lmeval_include_path, session.options.lmeval_num_fewshot
            )
            yield from collect_lmeval(self, spec)


class LmEvalOptionTasks:
    """Adds the items of ``--llm-lmeval-tasks`` to the collected ones, before ``-k`` and
    ``-m`` select among them (registered only when the option is given).

    Given without paths (pytest then falls back to ``testpaths`` or the current folder),
    the option collects nothing else: ``pytest --llm-lmeval-tasks=arc_easy`` in a project
    runs arc_easy, not the project's test suite and specs beside it. Paths named on the
    command line are collected beside the tasks, as usual."""

    def __init__(self, config: pytest.Config) -> None:
        self.only_tasks = config.args_source != pytest.Config.ArgsSource.ARGS
        if self.only_tasks:
            # The args pytest made up itself (``testpaths``, the invocation folder): none.
            # (xdist workers parse the same command line, so they decide the same.)
            config.args = []

    def pytest_report_header(self, config: pytest.Config) -> str | None:
        if not self.only_tasks:
            return None
        tasks = ",".join(get_session(config).options.lmeval_tasks)
        return (
            f"llmeval: collecting only --llm-lmeval-tasks={tasks} (no path was named; name "
            "paths to collect their tests beside them)"
        )

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        items[:0] = lmeval_option_items(session)


def lmeval_option_spec(
    name: str, include_path: tuple[str, ...], num_fewshot: int | None = None
) -> TaskSpec:
    from pytest_llmeval.task import DatasetSpec, LmEvalSpec, PromptSpec

    return TaskSpec(
        name=name,
        dataset=DatasetSpec(),
        prompt=PromptSpec(template=""),
        mode="generate",
        source="--llm-lmeval-tasks",
        lmeval=LmEvalSpec(task=name, include_path=include_path, num_fewshot=num_fewshot),
    )


def lmeval_option_items(session: pytest.Session) -> list[pytest.Item]:
    """The items of ``--llm-lmeval-tasks`` (a bad name or task config is a usage error
    that names it)."""
    collector = LmEvalTasks.from_parent(session, name="lmeval", nodeid="lmeval")
    try:
        items = list(collector.collect())
    except LlmEvalError as exc:
        raise pytest.UsageError(str(exc)) from None
    # Counted as collected (the terminal's "collected N items") like a file's items.
    report = pytest.CollectReport(collector.nodeid, "passed", None, list(items))
    session.config.hook.pytest_collectreport(report=report)
    return items


def no_items_reason(session: LlmEvalSession, spec: TaskSpec, loaded: int) -> str:
    """Why a task whose data is installed has no item to run (its tests, its probes):
    ``loaded`` items before ``run.exclude``."""
    if loaded:
        return f"all {loaded} of its items are excluded by run.exclude ({session.options.exclude})"
    return describe_no_rows(spec, session.options.data_dirs)


def _markers(spec: TaskSpec) -> list[str]:
    """The spec's markers plus its catalog capability (so ``-m code`` selects code tasks)."""
    markers = dict.fromkeys(spec.markers)
    if spec.catalog.capability:
        markers[spec.catalog.capability] = None
    return list(markers)


def collect_file(file_path: Path, parent: pytest.Collector) -> TaskFile | None:
    if file_path.suffix in (".yaml", ".yml") and is_task_file(file_path):
        return TaskFile.from_parent(parent, path=file_path)
    return None
