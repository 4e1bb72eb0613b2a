"""Loading lm-evaluation-harness tasks by name: a task or a group, expanded into leaf tasks.

lm-eval is an optional dependency (the ``lmeval`` extra) and is imported only here, when a
run names lm-eval tasks: ``pytest --help`` and runs of our own specs never import it.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_llmeval._errors import DataError, LlmEvalError, SpecError

EXTRA = "pip install 'pytest-llm-evaluation[lmeval]'"
# Our name of a leaf task: ``lmeval-<harness name>``, so that its items are
# ``lmeval-<harness name>-0042`` and never clash with a spec of ours of the same name.
PREFIX = "lmeval-"


def lmeval_version() -> str:
    from importlib.metadata import version

    return version("lm_eval")


@dataclass(frozen=True)
class GroupInfo:
    """A harness group: its leaf tasks (all levels down) and how it aggregates them
    (``aggregate_metric_list``: metric, filters, weight by size)."""

    name: str
    leaves: tuple[str, ...]
    aggregate: tuple[dict[str, Any], ...]


@dataclass
class LoadedTask:
    """One leaf task of the harness: its ``Task`` object and the groups above it."""

    name: str
    task: Any  # lm_eval.api.task.Task
    groups: tuple[GroupInfo, ...] = ()
    yaml_path: str | None = None

    @property
    def output_type(self) -> str:
        return str(self.task.OUTPUT_TYPE)


@dataclass
class LoadedTasks:
    tasks: dict[str, LoadedTask] = field(default_factory=dict)
    groups: dict[str, GroupInfo] = field(default_factory=dict)


def import_lmeval(where: str) -> Any:
    """The ``lm_eval`` module, or an error that says how to install it."""
    try:
        import lm_eval
    except ImportError as exc:
        raise LlmEvalError(
            f"{where} names lm-evaluation-harness tasks, but lm-eval cannot be imported "
            f"({exc}): {EXTRA}"
        ) from None
    return lm_eval


@contextmanager
def _hub(allowed: bool) -> Iterator[None]:
    """Without ``allowed``, the Hugging Face hub is off while datasets load: a task whose
    data is on the hub fails at once (instead of after minutes of retries offline)."""
    if allowed:
        yield
        return
    saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    os.environ.update({k: "1" for k in saved})
    patched: list[tuple[Any, str, Any]] = []
    for module_name, attr in (
        ("datasets.config", "HF_HUB_OFFLINE"),
        ("datasets.config", "HF_DATASETS_OFFLINE"),
        ("huggingface_hub.constants", "HF_HUB_OFFLINE"),
    ):
        try:
            module = __import__(module_name, fromlist=[attr])
        except ImportError:
            continue
        if hasattr(module, attr):
            patched.append((module, attr, getattr(module, attr)))
            setattr(module, attr, True)
    try:
        yield
    finally:
        for module, attr, value in patched:
            setattr(module, attr, value)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _Managers:
    """One ``TaskManager`` per include path set: indexing the harness's ~15,000 task
    configs takes tens of seconds, so it is done once per process, and not at all when
    every named task is found in the user's own directories."""

    def __init__(self) -> None:
        self._cache: dict[tuple[tuple[str, ...], bool], Any] = {}

    def get(self, include_path: Sequence[str], defaults: bool) -> Any:
        key = (tuple(include_path), defaults)
        if key not in self._cache:
            import_lmeval("this run")
            from lm_eval.tasks import TaskManager

            self._cache[key] = TaskManager(
                include_path=list(include_path) or None, include_defaults=defaults
            )
        return self._cache[key]


MANAGERS = _Managers()


def _manager_for(name: str, include_path: Sequence[str]) -> Any:
    if include_path:
        own = MANAGERS.get(include_path, defaults=False)
        if name in own.all_tasks:
            return own
    return MANAGERS.get(include_path, defaults=True)


def _leaves_of(group: Any) -> tuple[str, ...]:
    return tuple(t.task_name for t in group.get_all_tasks())


def _aggregate_config(group: Any) -> tuple[dict[str, Any], ...]:
    out = []
    for agg in group.aggregate_metric_list or ():
        aggregation = agg.aggregation if isinstance(agg.aggregation, str) else "callable"
        out.append(
            {
                "metric": agg.metric,
                "filter_list": list(agg.filter_list) if agg.filter_list is not None else None,
                "aggregation": aggregation,
                "weight_by_size": bool(agg.weight_by_size),
            }
        )
    return tuple(out)


def load_tasks(
    name: str,
    include_path: Sequence[str],
    *,
    where: str,
    allow_hub: bool,
    num_fewshot: int | None = None,
    fewshot_seed: int = 1234,
) -> LoadedTasks:
    """The harness's leaf tasks for ``name`` (a task or a group), configured as its
    ``simple_evaluate`` configures them (``num_fewshot`` override, few-shot seed)."""
    for path in include_path:
        if not Path(path).is_dir():
            raise SpecError(where, "lmeval.include_path", f"{path} is not a directory")
    manager = _manager_for(name, include_path)
    if name not in manager.all_tasks:
        close = difflib.get_close_matches(name, list(manager.all_tasks), n=5, cutoff=0.6)
        hint = f"; close names: {', '.join(close)}" if close else ""
        searched = f" and in {', '.join(include_path)}" if include_path else ""
        raise SpecError(
            where,
            "lmeval.task",
            f"lm-eval has no task or group {name!r} (searched its own tasks{searched}){hint}",
        )
    try:
        with _hub(allow_hub):
            loaded = manager.load([name])
    except Exception as exc:  # the harness raises what datasets and its loaders raise
        text = f"{type(exc).__name__}: {exc}"
        if not allow_hub and _needs_hub(exc):
            raise DataError(
                f"{where}: lm-eval task {name!r} could not load its dataset without the "
                f"Hugging Face hub ({text}). Pass --llm-set run.hub=true to let it download, "
                "or point the "
                "task at local files (dataset_path: json or csv, with dataset_kwargs."
                "data_files) in a YAML under an include path"
            ) from None
        hint = "" if str(exc) else " (an empty or unreadable data file raises this)"
        raise DataError(
            f"{where}: lm-eval task {name!r} could not be loaded: {text}{hint}"
        ) from None
    out = LoadedTasks()
    for group_name, group in loaded.get("groups", {}).items():
        out.groups[group_name] = GroupInfo(
            name=group_name, leaves=_leaves_of(group), aggregate=_aggregate_config(group)
        )
    index = manager.task_index
    unsafe = sorted(n for n, t in loaded["tasks"].items() if getattr(t, "UNSAFE_CODE", False))
    if unsafe:
        many = len(unsafe) > 1
        # The harness scores these by running the model's code with its own evaluator
        # (HumanEval's code_eval: exec in forks of this process); its evaluate() refuses
        # them unless confirm_run_unsafe_code. Here model code runs only in the sandbox.
        raise SpecError(
            where,
            "lmeval.task",
            f"lm-eval task{'s' if many else ''} {', '.join(unsafe)} "
            f"{'run' if many else 'runs'} the model's code to score "
            f"{'them' if many else 'it'} (unsafe_code) with the harness's own evaluator, in "
            "the test process and outside this plugin's sandbox: not run. Score code "
            "generation with this plugin's specs instead (benchmarks/humaneval.yaml, "
            "benchmarks/mbpp.yaml: each program runs in the sandbox)",
        )
    for task_name, task in loaded["tasks"].items():
        _configure(task, num_fewshot, fewshot_seed)
        yaml_path = getattr(index.get(task_name), "yaml_path", None)
        out.tasks[task_name] = LoadedTask(
            name=task_name,
            task=task,
            groups=tuple(g for g in out.groups.values() if task_name in g.leaves),
            yaml_path=str(yaml_path) if yaml_path else None,
        )
    return out


_HUB_ERRORS = ("ConnectionError", "OfflineModeIsEnabled", "LocalEntryNotFoundError")


def _needs_hub(exc: BaseException) -> bool:
    """Whether loading failed because the hub is off (the dataset is not local)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & set(_HUB_ERRORS)) or "Couldn't reach" in str(exc)


def _configure(task: Any, num_fewshot: int | None, fewshot_seed: int) -> None:
    """What ``lm_eval.simple_evaluate`` does to each task before it builds requests: the
    ``num_fewshot`` override (except for tasks that pin 0), 0 when the task has none, and
    the few-shot seed."""
    if num_fewshot is not None:
        if task.get_config("num_fewshot") != 0:
            task.set_config(key="num_fewshot", value=num_fewshot)
    elif task.get_config("num_fewshot") is None:
        task.set_config(key="num_fewshot", value=0)
    task.set_fewshot_seed(seed=fewshot_seed)
