"""lm-evaluation-harness task YAMLs that ask exactly what our specs ask.

For the parity harness (``python -m tools.parity``) and the speed benchmark
(``python -m tools.speed``): for each of three task types this module writes
lm-evaluation-harness task configs into a directory used as the harness's
``include_path``. They read the same local files as our specs (the ``csv``/``json``
dataset builders with ``data_files`` in the data directory) and are written in the
harness's own idiom (its Jinja templates, ``description``, ``fewshot_config``,
``target_delimiter``, ``fewshot_delimiter``, ``generation_kwargs``), so that the two tools
build their prompts independently; the harness then checks that the prompts are byte for
byte the same. Settings that are data (few-shot count, delimiters, stop strings, the token
budget, GSM8K's fixed exemplars, data paths) are taken from our spec.

Task types:

- ``mmlu``: our ``mmlu`` spec, letters as one-token continuations (``" A"`` .. ``" D"``).
- ``mmlu_continuation``: our ``mmlu_continuation`` spec, option texts as multi-token
  continuations (the structure of the harness's ``mmlu_continuation``).
- ``gsm8k``: our ``gsm8k`` spec, 8-shot chain of thought, greedy generation.
- ``bbh``: our ``bbh`` spec, the published 3-shot chain-of-thought prompt of each of the 27
  subtasks (the harness gets it as the task's ``description``), greedy generation.
- ``ceval``: our ``ceval`` spec, each subject as lm-eval's own ``ceval-valid_<subject>``
  task is built (its template and subject description, read from the installed harness),
  with C-Eval's "考试" and "答案：A" where lm-eval differs; only when asked (``--tasks``).

Items: the first ``k`` test items of each MMLU subject, with the smallest ``k`` that gives
at least ``n`` in all (``ceil(n / subjects)`` unless a subject has fewer), and the first
``n`` GSM8K items (BBH: the first ``k`` of each subtask, as MMLU); the harness runs them
with ``limit=k`` (per subject task) or ``limit=n``.

lm-eval is imported only by :func:`build_lmeval_tasks` and :func:`lmeval_requests`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pytest_llmeval.dataset import Item, load_items, resolve_local
from pytest_llmeval.eval import ChatSettings
from pytest_llmeval.task import TaskSpec, load_task_spec

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
TASK_TYPES = ("mmlu", "mmlu_continuation", "gsm8k", "bbh", "ceval")
# What a run compares when not told (--tasks): C-Eval is asked for by name.
DEFAULT_TASK_TYPES = ("mmlu", "mmlu_continuation", "gsm8k", "bbh")
# Task types that are read from one file (no subsets to choose with --subjects).
SINGLE_FILE = ("gsm8k",)
# Every lm-eval task written here starts with this, so that it cannot shadow a harness task.
PREFIX = "llmeval_parity"

# The harness's own templates for the three formats (its Jinja: question.strip() where our
# specs say `question | trim`; the CSV's columns where our specs map them to `choices`).
_MMLU_TEXT = (
    "{{question.strip()}}\nA. {{choice0}}\nB. {{choice1}}\nC. {{choice2}}\nD. {{choice3}}\nAnswer:"
)
_CONTINUATION_TEXT = "Question: {{question.strip()}}\nAnswer:"
_OPTION_TEXTS = "{{[choice0, choice1, choice2, choice3]}}"
_GSM8K_TEXT = "Q: {{question}}\nA:"
_GSM8K_TARGET = "{{answer.split('####')[-1].strip()}}"
_BBH_TEXT = "Q: {{input}}\nA: Let's think step by step."
_MMLU_COLUMNS = ("question", "choice0", "choice1", "choice2", "choice3", "answer")


@dataclass(frozen=True)
class _FunctionRef:
    """A ``!function module.name`` reference in a harness YAML."""

    name: str


class _Dumper(yaml.SafeDumper):
    pass


def _represent_function(dumper: yaml.SafeDumper, ref: _FunctionRef) -> yaml.Node:
    return dumper.represent_scalar("!function", ref.name)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # Double quotes with escapes for text with line breaks: "Q: {{question}}\nA:".
    style = '"' if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(_FunctionRef, _represent_function)
_Dumper.add_representer(str, _represent_str)


@dataclass(frozen=True)
class TaskSet:
    """One task type: our spec and selected items, and the harness tasks that ask the same.

    ``lmeval_tasks`` maps each harness task name to the subset it covers (``None`` for a
    task without subsets); ``limit`` is the harness's per-task limit; ``item_ids`` maps
    (harness task, doc_id) to our item id.
    """

    task_type: str
    spec: TaskSpec
    items: tuple[Item, ...]
    yaml_dir: Path
    lmeval_tasks: Mapping[str, str | None]
    limit: int
    item_ids: Mapping[tuple[str, int], str]
    data_dirs: tuple[Path, ...]
    requested: int  # the n the items were selected for
    subsets: tuple[str, ...] | None = None  # the subsets they were selected from
    max_new_tokens: int | None = None
    # How both tools present prompts: ChatSettings(mode="on", ...) runs the harness with
    # apply_chat_template, fewshot_as_multiturn and system_instruction to match.
    chat: ChatSettings = field(default_factory=ChatSettings)

    @property
    def chat_on(self) -> bool:
        return self.chat.mode == "on"

    @property
    def lmeval_names(self) -> list[str]:
        return list(self.lmeval_tasks)


def load_spec(task_type: str, max_new_tokens: int | None = None) -> TaskSpec:
    """Our spec for a task type; ``max_new_tokens`` overrides a generation budget."""
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown task type {task_type!r}; expected one of {TASK_TYPES}")
    spec = load_task_spec(BENCHMARKS / f"{task_type}.yaml")
    if max_new_tokens is not None and spec.generate is not None:
        spec = dataclasses.replace(
            spec, generate=dataclasses.replace(spec.generate, max_new_tokens=max_new_tokens)
        )
    return spec


def select_items(
    spec: TaskSpec, data_dirs: Sequence[Path], n: int, subsets: Sequence[str] | None = None
) -> tuple[list[Item], int]:
    """At least ``n`` items: the first ``k`` of each subset (all of a smaller subset), with
    the smallest such ``k``; only of ``subsets`` when given (a task with subsets). Returns
    the items in task order and ``k``."""
    if n < 1:
        raise ValueError(f"need at least one item, got {n}")
    by_subset: dict[str | None, list[Item]] = {}
    for item in load_items(spec, data_dirs):
        if subsets is None or item.subset is None or item.subset in subsets:
            by_subset.setdefault(item.subset, []).append(item)
    if subsets is not None and None not in by_subset:
        unknown = sorted(set(subsets) - set(by_subset))
        if unknown:
            raise ValueError(f"{spec.name}: no subset(s) {unknown}")
    sizes = [len(items) for items in by_subset.values()]
    if sum(sizes) < n:
        raise ValueError(f"{spec.name}: only {sum(sizes)} items available, {n} requested")
    k = math.ceil(n / len(sizes))
    while sum(min(k, size) for size in sizes) < n:
        k += 1
    return [item for items in by_subset.values() for item in items[:k]], k


def _local(spec: TaskSpec, path: str | None, subset: str | None, dirs: Sequence[Path]) -> Path:
    if path is None:
        raise ValueError(f"{spec.name}: the spec names no local data file")
    found = resolve_local(path, subset, dirs)
    if found is None:
        raise FileNotFoundError(f"{spec.name}: {path} (subset {subset}) not in {list(dirs)}")
    return found.resolve()


def _csv_kwargs(test: Path, dev: Path, columns: Sequence[str] = _MMLU_COLUMNS) -> dict[str, Any]:
    # pandas would turn "None"/"NA" cells into NaN and all-number columns into numbers
    # ("1.50" -> 1.5); str converters keep every cell's text as it is in the file.
    return {
        "data_files": {"test": str(test), "dev": str(dev)},
        "keep_default_na": False,
        "na_filter": False,
        "converters": {c: _FunctionRef("builtins.str") for c in columns},
    }


def _subject(subset: str | None) -> str:
    assert subset is not None
    return subset.replace("_", " ")


def _mmlu_config(
    task_type: str, spec: TaskSpec, subset: str | None, dirs: Sequence[Path]
) -> dict[str, Any]:
    assert spec.fewshot.source is not None
    test = _local(spec, spec.dataset.path, subset, dirs)
    dev = _local(spec, spec.fewshot.source.path, subset, dirs)
    # One task per subject with the subject's name written into its description, as the
    # harness's own MMLU tasks are built.
    choices: list[str] | str
    if task_type == "mmlu":
        kind = "multiple choice questions"
        text, choices = _MMLU_TEXT, ["A", "B", "C", "D"]
    else:
        kind = "questions"
        text, choices = _CONTINUATION_TEXT, _OPTION_TEXTS
    description = f"The following are {kind} (with answers) about {_subject(subset)}.\n\n"
    return {
        "task": f"{PREFIX}_{task_type}_{subset}",
        "dataset_path": "csv",
        "dataset_kwargs": _csv_kwargs(test, dev),
        "test_split": "test",
        "fewshot_split": "dev",
        "fewshot_config": {"sampler": "first_n"},
        "num_fewshot": spec.fewshot.k,
        "output_type": "multiple_choice",
        "description": description,
        "doc_to_text": text,
        "doc_to_choice": choices,
        # A template, not the column name: it renders a digit string, which the harness
        # turns into the index of the right choice.
        "doc_to_target": "{{answer}}",
        "target_delimiter": spec.prompt.target_delimiter,
        "fewshot_delimiter": spec.prompt.fewshot_separator,
        "metric_list": [
            {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
            {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True},
        ],
        "metadata": {"version": 1.0},
    }


# lm-eval's filter that each of our named metrics reproduces (``generate.metrics`` of
# gsm8k.yaml): the harness scores its own outputs under these, and the parity harness
# compares its per-item values with ours.
LMEVAL_FILTERS = {"strict_match": "strict-match", "flexible_extract": "flexible-extract"}


def lmeval_task_yaml(relative: str) -> dict[str, Any]:
    """One of the harness's own task YAMLs (``lm_eval/tasks/<relative>``), read as data
    without importing lm-eval: the filters and metric options are taken from it, not from a
    copy of ours, so that a difference between the two is found."""
    import importlib.util

    found = importlib.util.find_spec("lm_eval")
    if found is None or not found.submodule_search_locations:
        raise ModuleNotFoundError("lm-eval is not installed: pip install -e '.[parity]'")
    path = Path(next(iter(found.submodule_search_locations))) / "tasks" / relative
    data = yaml.load(path.read_text(encoding="utf-8"), Loader=_HarnessLoader)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a task config")
    return data


class _HarnessLoader(yaml.SafeLoader):
    """The harness's YAMLs may hold ``!function`` tags; read them as plain strings."""


_HarnessLoader.add_constructor(
    "!function",
    lambda loader, node: loader.construct_scalar(node),  # type: ignore[arg-type]
)


def _ceval_config(spec: TaskSpec, subset: str | None, dirs: Sequence[Path]) -> dict[str, Any]:
    """One C-Eval subject as lm-eval builds its ``ceval-valid_<subject>`` task: the
    template, choices, target and few-shot sampler of its ``_default_ceval_yaml``, and the
    description of its per-subject YAML (the subject's Chinese name from lm-eval's table),
    read from the installed lm-eval. Two settings follow our spec, which follows C-Eval's
    own format where lm-eval differs: "考试" after the subject's name in the description,
    and no space before the answer letter (``target_delimiter``)."""
    assert spec.fewshot.source is not None and subset is not None
    default = lmeval_task_yaml("ceval/_default_ceval_yaml")
    subject = lmeval_task_yaml(f"ceval/ceval-valid_{subset}.yaml")
    marker = "的单项选择题"
    if subject.get("dataset_name") != subset or marker not in str(subject["description"]):
        raise ValueError(f"lm-eval's ceval-valid_{subset}.yaml is not the expected format")
    test = _local(spec, spec.dataset.path, subset, dirs)
    dev = _local(spec, spec.fewshot.source.path, subset, dirs)
    columns = ("id", "question", "A", "B", "C", "D", "answer")
    return {
        "task": f"{PREFIX}_ceval_{subset}",
        "dataset_path": "csv",
        # The dev files have an extra "explanation" column; both splits need the same ones.
        "dataset_kwargs": {**_csv_kwargs(test, dev, columns), "usecols": list(columns)},
        "test_split": "test",
        "fewshot_split": "dev",
        "fewshot_config": dict(default["fewshot_config"]),
        "num_fewshot": spec.fewshot.k,
        "output_type": default["output_type"],
        "description": str(subject["description"]).replace(marker, "考试" + marker, 1),
        "doc_to_text": default["doc_to_text"],
        "doc_to_choice": default["doc_to_choice"],
        "doc_to_target": default["doc_to_target"],
        "target_delimiter": spec.prompt.target_delimiter,
        "fewshot_delimiter": spec.prompt.fewshot_separator,
        "metric_list": [dict(m) for m in default["metric_list"]],
        "metadata": {"version": 1.0},
    }


def _gsm8k_config(spec: TaskSpec, dirs: Sequence[Path]) -> dict[str, Any]:
    gen = spec.generate
    assert gen is not None
    # lm-eval's gsm8k_cot (the same 8-shot "Q:/A:" prompt): its exact_match options and its
    # strict-match / flexible-extract filters, as its YAML writes them.
    cot = lmeval_task_yaml("gsm8k/gsm8k-cot.yaml")
    (exact_match,) = [m for m in cot["metric_list"] if m["metric"] == "exact_match"]
    filters = [f for f in cot["filter_list"] if f["name"] in LMEVAL_FILTERS.values()]
    if len(filters) != len(LMEVAL_FILTERS):
        raise ValueError(f"lm-eval's gsm8k-cot.yaml lacks filters {sorted(LMEVAL_FILTERS)}")
    config: dict[str, Any] = {
        "task": f"{PREFIX}_gsm8k",
        "dataset_path": "json",
        "dataset_kwargs": {
            "data_files": {"test": str(_local(spec, spec.dataset.path, None, dirs))}
        },
        "test_split": "test",
        "output_type": "generate_until",
        "num_fewshot": spec.fewshot.k,
        "fewshot_config": {
            "sampler": "first_n",
            "samples": [
                {"question": ex["question"], "cot": ex["cot"]} for ex in spec.fewshot.examples
            ],
            "doc_to_target": "{{cot}}",
        },
        "doc_to_text": _GSM8K_TEXT,
        "doc_to_target": _GSM8K_TARGET,
        "target_delimiter": spec.prompt.target_delimiter,
        "fewshot_delimiter": spec.prompt.fewshot_separator,
        "generation_kwargs": {
            "until": list(gen.stop),
            "do_sample": False,
            "temperature": 0.0,
            "max_gen_toks": gen.max_new_tokens,
        },
        "metric_list": [dict(exact_match)],
        "metadata": {"version": 1.0},
        # The harness's own score on the answer our first extraction step finds, and its
        # strict-match / flexible-extract scores (what our named metrics reproduce).
        "filter_list": [*_answer_filter(spec), *filters],
    }
    return config


def _answer_filter(spec: TaskSpec) -> list[dict[str, Any]]:
    """The harness's own filter for the answer our first regex extraction step finds."""
    gen = spec.generate
    assert gen is not None
    regex = next((e for e in gen.extract if e.kind == "regex"), None)
    if regex is None or regex.pattern is None:
        return []
    return [
        {
            "name": "answer-regex",
            "filter": [
                {
                    "function": "regex",
                    "regex_pattern": regex.pattern,
                    "group_select": 0 if regex.which == "first" else -1,
                },
                {"function": "take_first"},
            ],
        }
    ]


def _bbh_config(spec: TaskSpec, subset: str | None, dirs: Sequence[Path]) -> dict[str, Any]:
    """One BBH subtask: the published chain-of-thought prompt file as the task's
    description (the harness's own ``bbh_cot_fewshot`` tasks carry the same three
    examples as few-shot samples), the question after it, greedy until "Q:"."""
    from pytest_llmeval.dataset import load_fewshot_text

    gen = spec.generate
    assert gen is not None and subset is not None
    text, _ = load_fewshot_text(spec, subset, dirs)
    config: dict[str, Any] = {
        "task": f"{PREFIX}_bbh_{subset}",
        "dataset_path": "json",
        "dataset_kwargs": {
            "data_files": {"test": str(_local(spec, spec.dataset.path, subset, dirs))},
            "field": spec.dataset.json_key,
        },
        "test_split": "test",
        "output_type": "generate_until",
        "num_fewshot": 0,
        "description": text + spec.prompt.fewshot_separator,
        "doc_to_text": _BBH_TEXT,
        "doc_to_target": "{{target}}",
        "target_delimiter": spec.prompt.target_delimiter,
        "generation_kwargs": {
            "until": list(gen.stop),
            "do_sample": False,
            "temperature": 0.0,
            "max_gen_toks": gen.max_new_tokens,
        },
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1.0},
    }
    answer = _answer_filter(spec)
    if answer:
        config["filter_list"] = answer
    return config


def write_task_set(
    task_type: str,
    data_dirs: Sequence[Path],
    out_dir: Path,
    n_items: int,
    max_new_tokens: int | None = None,
    subsets: Sequence[str] | None = None,
    chat: ChatSettings | None = None,
) -> TaskSet:
    """Select at least ``n_items`` items of a task type (of ``subsets`` only, when given:
    MMLU subjects) and write the harness YAMLs for them into ``out_dir / task_type`` (one
    per MMLU subject). ``max_new_tokens`` overrides the generation budget of both tools."""
    spec = load_spec(task_type, max_new_tokens)
    items, k = select_items(spec, data_dirs, n_items, subsets)
    yaml_dir = out_dir / task_type
    yaml_dir.mkdir(parents=True, exist_ok=True)
    tasks: dict[str, str | None] = {}
    for subset in dict.fromkeys(item.subset for item in items):
        if task_type == "gsm8k":
            config = _gsm8k_config(spec, data_dirs)
        elif task_type == "bbh":
            config = _bbh_config(spec, subset, data_dirs)
        elif task_type == "ceval":
            config = _ceval_config(spec, subset, data_dirs)
        else:
            config = _mmlu_config(task_type, spec, subset, data_dirs)
        name = str(config["task"])
        tasks[name] = subset
        text = yaml.dump(config, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=10**6)
        (yaml_dir / f"{name}.yaml").write_text(text, encoding="utf-8")
    names = {subset: name for name, subset in tasks.items()}
    position: dict[str | None, int] = {}
    item_ids: dict[tuple[str, int], str] = {}
    for item in items:
        doc_id = position.get(item.subset, 0)
        if doc_id != item.index:  # the harness's doc_id is the row number in the file
            raise AssertionError(f"{item.id}: not the first items of its subset")
        position[item.subset] = doc_id + 1
        item_ids[(names[item.subset], doc_id)] = item.id
    return TaskSet(
        task_type=task_type,
        spec=spec,
        items=tuple(items),
        yaml_dir=yaml_dir,
        lmeval_tasks=tasks,
        limit=k,
        item_ids=item_ids,
        data_dirs=tuple(data_dirs),
        requested=n_items,
        subsets=tuple(subsets) if subsets is not None else None,
        max_new_tokens=max_new_tokens,
        chat=chat or ChatSettings(),
    )


def build_lmeval_tasks(task_set: TaskSet) -> dict[str, Any]:
    """The harness's task dict (``TaskManager.load``) for a task set: the datasets are read
    and the few-shot samplers built here."""
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(task_set.yaml_dir), include_defaults=False)
    loaded: dict[str, Any] = manager.load(task_set.lmeval_names)
    return loaded


def lmeval_requests(
    task_set: TaskSet, loaded: Mapping[str, Any], tokenizer: Any = None
) -> dict[str, list[tuple[Any, ...]]]:
    """The request arguments the harness builds for each of our items, without a model:
    ``(context, continuation)`` per choice, or ``(context, generation kwargs)``. With the
    task set's chat template on, ``tokenizer`` (a transformers tokenizer) renders the
    conversations as the harness's HF model does."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    chat: dict[str, Any] = {}
    if task_set.chat_on:
        assert tokenizer is not None, "the chat template needs the model's tokenizer"

        def render(history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
            return str(
                tokenizer.apply_chat_template(
                    history,
                    tokenize=False,
                    add_generation_prompt=add_generation_prompt,
                    continue_final_message=not add_generation_prompt,
                )
            )

        chat = {
            "apply_chat_template": True,
            "fewshot_as_multiturn": task_set.chat.multiturn,
            "system_instruction": task_set.chat.system_prompt,
            "chat_template": render,
        }
    for name, task in loaded["tasks"].items():
        task.build_all_requests(limit=task_set.limit, **chat)
        for inst in sorted(task.instances, key=lambda i: (i.doc_id, i.idx)):
            out.setdefault(task_set.item_ids[(name, inst.doc_id)], []).append(tuple(inst.args))
    return out
