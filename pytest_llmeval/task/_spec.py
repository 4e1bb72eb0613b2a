"""Task specs: the declarative description of one benchmark task.

A spec is plain data (frozen dataclasses). It is written as YAML in ``benchmarks/``
and loaded with :func:`load_task_spec`, or built in Python with :func:`task_spec_from_dict`
or the dataclass constructors. Validation happens here, once, and every error names
the file and the dotted field at fault.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from pytest_llmeval._errors import SpecError

Mode = Literal["multiple_choice", "generate"]
FieldMap = Mapping[str, "str | tuple[str, ...]"]

# Markers a spec may carry. Capability dimensions double as markers (``-m math``).
SUITE_MARKERS = ("regression", "release")
CAPABILITIES = (
    "knowledge",
    "math",
    "code",
    "reasoning",
    "chinese",
    "long_context",
    "instruction_following",
    "agentic",
)
KNOWN_MARKERS = (*SUITE_MARKERS, *CAPABILITIES, "contamination")

EXTRACTORS = ("last_number", "first_number", "regex", "choice_letter", "boxed", "strip")
# The fields each extractor kind uses besides ``kind`` and ``if_finished`` (scorer/_extract.py):
# a field its kind does not use would be ignored, so a step may not give one.
EXTRACTOR_FIELDS: Mapping[str, tuple[str, ...]] = {
    "last_number": (),
    "first_number": (),
    "regex": ("pattern", "group", "which"),
    "choice_letter": ("letters", "which"),
    "boxed": (),
    "strip": (),
}
# `math` is our own MATH evaluator (scorer/_math.py); `math_verify` is the field's reference
# judge (math-verify, the `reference` extra), which extracts the answer from the whole output.
COMPARISONS = ("numeric", "exact", "exact_ignore_case", "math", "math_verify", "f1")
# What a named metric (``generate.metrics``) may compare with: the comparisons that take an
# extraction chain, or lm-evaluation-harness's ``exact_match`` with its preprocessing options.
METRIC_COMPARISONS = ("numeric", "exact", "exact_ignore_case", "math", "exact_match")
# Judges that a comparison or IFEval check names (see pytest_llmeval.scorer._judges).
IFEVAL_LANGUAGE_JUDGES = ("langdetect", "heuristic")
IFEVAL_SENTENCE_JUDGES = ("nltk", "heuristic")
SCORERS = ("match", "ifeval", "execution")
# What generate.overflow may say; the model package's Overflow type reuses this tuple.
OVERFLOW_POLICIES = ("skip", "truncate_middle", "truncate_left")
STYLES = ("multiple_choice", "generative", "rule_check", "execution")


@dataclass(frozen=True)
class HubSource:
    """A Hugging Face hub dataset: the online path, used when no local file is found."""

    id: str
    config: str | None = None
    split: str = "test"
    fields: FieldMap | None = None


@dataclass(frozen=True)
class DateWindow:
    """Keep only items whose date ``field`` lies in ``[start, end]`` (ISO dates, inclusive;
    either end open). Used for fresh benchmarks (LiveCodeBench's contest dates): the
    window is part of the task config, so a score always says which period it covers."""

    field: str
    start: str | None = None
    end: str | None = None

    def describe(self) -> str:
        if self.start and self.end:
            return f"{self.field} {self.start} to {self.end}"
        return f"{self.field} from {self.start}" if self.start else f"{self.field} up to {self.end}"


@dataclass(frozen=True)
class DatasetSpec:
    """Where a task's items come from.

    ``path`` is a file relative to the data directory (or absolute); it may contain
    ``{subset}``. ``subsets`` lists the subsets, or is ``"*"`` to discover them from the
    local files matching ``path``.
    """

    path: str | None = None
    format: str | None = None
    json_key: str | None = None
    hub: HubSource | None = None
    subsets: tuple[str, ...] | Literal["*"] | None = None
    fields: FieldMap = field(default_factory=dict)
    id_field: str | None = None
    window: DateWindow | None = None


@dataclass(frozen=True)
class FewShotSpec:
    """A fixed few-shot set: ``k`` examples, the same for every item of a (sub)task."""

    k: int = 0
    source: DatasetSpec | None = None
    examples: tuple[Mapping[str, Any], ...] = ()
    order: Literal["first", "seeded"] = "first"
    seed: int = 1234
    # A published few-shot prompt file used verbatim (e.g. BBH's cot-prompts/<subset>.txt);
    # a header ending in a line of dashes (BBH's canary) is dropped.
    text_file: str | None = None


@dataclass(frozen=True)
class PromptSpec:
    """Jinja2 templates over a document's fields.

    ``template`` renders the question part of an item; ``target`` renders the answer
    appended to few-shot examples (after ``target_delimiter``); ``description`` is
    rendered once before the few-shot examples; ``fewshot_separator`` joins examples.

    Chat models: ``chat`` pins whether the model's chat template applies to this task
    (``on``, ``off`` or ``auto``: on when the model has one), whatever the run says; None
    follows the run (``prompt.chat_template``). ``system_prompt`` (a template) is the
    task's own system prompt: after the run's, before the description.
    """

    template: str
    target: str = ""
    description: str = ""
    target_delimiter: str = " "
    fewshot_separator: str = "\n\n"
    chat: str | None = None
    system_prompt: str = ""
    # Only in a spec's ``chat_form``: a template that opens the assistant's turn (the
    # model continues it), lm-evaluation-harness's ``gen_prefix``.
    assistant_prefix: str = ""


@dataclass(frozen=True)
class ThinkingSpec:
    """Reasoning output (``generate.thinking``): with ``strip``, extraction sees only the
    text after the thinking block, and stop sequences do not cut the block itself; a block
    that never closes is a failure of its own. ``start``/``end``: the markers (None: the
    run's, ``prompt.thinking_markers``, by default ``<think>``/``</think>``)."""

    strip: bool = False
    start: str | None = None
    end: str | None = None


@dataclass(frozen=True)
class Extractor:
    """One answer extraction step. The first step that finds an answer wins.

    ``if_finished``: the step only applies to outputs that ended on their own (a stop
    sequence or end of text), not to outputs cut at ``max_new_tokens``: a fallback such as
    the last number of a cut-off chain of thought is not an answer the model gave.
    """

    kind: str
    pattern: str | None = None
    # A group number, or "any": what lm-evaluation-harness's regex filter takes from a
    # match (``re.findall``): of a pattern with several groups, the first non-empty one
    # (no answer when all are empty); of one group, that group; of none, the whole match.
    group: int | Literal["any"] = 1
    which: Literal["first", "last"] = "last"
    letters: str = "ABCD"
    if_finished: bool = False


@dataclass(frozen=True)
class ExecutionSpec:
    """How to check generated code in the sandbox.

    ``kind: function`` (HumanEval, MBPP): templates for the code the model continues, the
    test code (defining ``check(candidate)``) and the function under test; ``timeout_s``
    for the whole check. ``kind: io`` (LiveCodeBench): the output is a whole program judged
    on test cases; ``tests`` are templates each rendering a list of cases (JSON, or
    LiveCodeBench's compressed encoding), ``func_name`` renders the ``Solution`` method of
    functional cases (empty for standard input/output); ``timeout_s`` is per case.
    """

    prompt: str = "{{ prompt }}"
    test: str = "{{ test }}"
    entry_point: str = "{{ entry_point }}"
    timeout_s: float = 10.0
    memory_mb: int = 1024
    kind: Literal["function", "io"] = "function"
    tests: tuple[str, ...] = ()
    func_name: str = ""


@dataclass(frozen=True)
class IFEvalSpec:
    """Which document fields hold IFEval's instruction ids and their arguments."""

    instructions: str = "instruction_id_list"
    kwargs: str = "kwargs"
    # Language identification: `langdetect` (the reference's, seeded) or `heuristic` (ours,
    # no dependency). Sentence splitting and word tokens: `nltk` (the reference's Punkt;
    # needs NLTK's punkt_tab data) or `heuristic` (ours). See docs/PARITY.md.
    language: str = "langdetect"
    sentences: str = "heuristic"


@dataclass(frozen=True)
class ExactMatchOptions:
    """lm-evaluation-harness's ``exact_match`` metric options: each pattern of
    ``regexes_to_ignore`` is removed (``re.sub``) from the answer and the reference in
    order, then case, punctuation (``string.punctuation``) and digits are dropped as asked,
    then the two strings must be equal. Kept apart from our own comparisons so that a
    metric named after lm-eval's scores exactly what lm-eval scores."""

    regexes_to_ignore: tuple[str, ...] = ()
    ignore_case: bool = False
    ignore_punctuation: bool = False
    ignore_numbers: bool = False


@dataclass(frozen=True)
class MetricSpec:
    """A named metric reported beside the primary score (``generate.metrics``).

    Its own extraction chain and comparison over the same output and target: GSM8K reports
    lm-evaluation-harness's ``strict-match`` and ``flexible-extract`` filters this way, so
    that a score can be read against lm-eval's without changing our primary score. An item
    passes or fails on the primary score only; these are recorded and summarised.
    """

    name: str
    extract: tuple[Extractor, ...]
    compare: str = "exact"
    exact_match: ExactMatchOptions | None = None


@dataclass(frozen=True)
class GenerateSpec:
    """Greedy generation, then scoring.

    ``scorer: match`` extracts an answer and compares it with ``target``; ``ifeval`` runs
    the IFEval instruction checks (an item is correct when every instruction is followed,
    strict); ``execution`` runs the extracted code against the item's tests in the sandbox.
    """

    target: str = ""
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    extract: tuple[Extractor, ...] = (Extractor(kind="strip"),)
    compare: str = "exact"
    scorer: str = "match"
    execution: ExecutionSpec | None = None
    ifeval: IFEvalSpec | None = None
    # A prompt that does not fit the context window with max_new_tokens: "skip" (report
    # the item as not fitting, the default), "truncate_middle" (LongBench), "truncate_left".
    overflow: str = "skip"
    # Several reference answers (a template rendering a list): an item's score is the best
    # over them. `compare: f1` scores token-overlap F1 (a fraction) instead of a match.
    targets: str | None = None
    # Per-subset generation budgets (LongBench's per-dataset maximum lengths).
    max_new_tokens_by_subset: Mapping[str, int] = field(default_factory=dict)
    thinking: ThinkingSpec = field(default_factory=ThinkingSpec)
    # Named metrics beside the primary score (scorer match only), in spec order.
    metrics: tuple[MetricSpec, ...] = ()

    def budget(self, subset: str | None) -> int:
        """The max_new_tokens of an item of ``subset``."""
        return self.max_new_tokens_by_subset.get(subset or "", self.max_new_tokens)


@dataclass(frozen=True)
class CatalogEntry:
    """Where a task sits in the capability catalog (``pytest --llm-show=catalog``)."""

    capability: str | None = None
    style: str | None = None
    freshness: str = "stable"
    saturation: str = ""
    successor: str | None = None


@dataclass(frozen=True)
class MultipleChoiceSpec:
    """Log-likelihood scoring of each choice as a continuation of the prompt.

    ``choices`` is a list of templates (one per choice) or one template expression that
    renders a list (``"{{ choices }}"``); ``gold`` renders the index of the correct choice.

    ``metric: mc2`` (TruthfulQA MC2) scores an item by the probability mass of its true
    choices: ``labels`` renders one 1 (true) or 0 (false) per choice, and the item's score
    is ``sum(p_true) / sum(p_all)`` with ``p = exp(log-likelihood)`` (it counts as correct
    when that is above one half).
    """

    choices: tuple[str, ...] | str
    gold: str
    metric: Literal["acc", "acc_norm", "mc2"] = "acc"
    labels: str | None = None
    # A prompt whose context and longest choice do not fit the context window: "skip"
    # (report the item as not fitting, the default), "truncate_left" (lm-evaluation-
    # harness: keep the end of the context), "truncate_middle" (keep its first and last
    # halves). Truncated items are flagged with the number of tokens dropped.
    overflow: str = "skip"


@dataclass(frozen=True)
class ProbeSpec:
    """Which document fields the contamination probes rewrite (``contamination:`` block).

    ``options`` / ``gold``: the list field of a multiple-choice item's options and the field
    of the right option's index (option shuffling). ``question`` / ``solution``: the
    question text and the worked solution with GSM8K-style ``<<48/2=24>>`` calculations and
    a final ``#### 72`` (number rewrites; entity rewrites use ``question`` too).
    """

    options: str | tuple[str, ...] | None = None  # a list field, or one field per option
    gold: str | None = None
    question: str | None = None
    solution: str | None = None


@dataclass(frozen=True)
class LmEvalSpec:
    """An lm-evaluation-harness task run as this task (``lmeval:`` block, or
    ``--llm-lmeval-tasks``). The harness builds the documents, few-shot contexts, requests,
    filters and metrics; the plugin sends the requests to its own backend.

    ``task``: the harness's name of the task, or of a group (expanded into one task of
    ours per leaf task). ``include_path``: directories of task YAMLs of one's own, besides
    the harness's (``TaskManager(include_path=...)``). ``num_fewshot``: overrides the
    task's, as the harness's ``--num_fewshot`` does. ``metric``: the ``metric,filter`` key
    the floor is checked against (default: the task's first metric under its first
    filter). ``group``: for a leaf expanded from a group, the group's name.
    """

    task: str
    include_path: tuple[str, ...] = ()
    num_fewshot: int | None = None
    metric: str | None = None
    fewshot_seed: int = 1234
    group: str | None = None
    # Filled in when the harness loaded the task: each metric's registered aggregation
    # and the groups above the task (name, leaf tasks, aggregate_metric_list), for the
    # controller to compute the harness's task and group scores from item records.
    aggregation: Mapping[str, str] = field(default_factory=dict)
    groups: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class TaskSpec:
    """A benchmark task: data, prompt, mode, floor and markers."""

    name: str
    dataset: DatasetSpec
    prompt: PromptSpec
    mode: Mode
    generate: GenerateSpec | None = None
    multiple_choice: MultipleChoiceSpec | None = None
    fewshot: FewShotSpec = field(default_factory=FewShotSpec)
    floor: float | None = None
    markers: tuple[str, ...] = ()
    description: str = ""
    catalog: CatalogEntry = field(default_factory=CatalogEntry)
    probes: ProbeSpec = field(default_factory=ProbeSpec)
    source: str = "<python>"
    lmeval: LmEvalSpec | None = None
    # The task as it runs when the model's chat template applies (the spec's ``chat_form``:
    # its ``prompt`` and ``generate`` fields over the spec's own), or None: the same task.
    chat_form: TaskSpec | None = None

    @property
    def metric(self) -> str:
        """The name of the metric that the floor is checked against."""
        if self.lmeval is not None and self.lmeval.metric is not None:
            return self.lmeval.metric
        if self.mode == "multiple_choice":
            assert self.multiple_choice is not None
            return self.multiple_choice.metric
        scorer = self.generate.scorer if self.generate is not None else "match"
        if self.generate is not None and self.generate.compare == "f1":
            return "f1"
        return {"execution": "pass@1", "ifeval": "prompt_level_strict_acc"}.get(
            scorer, "exact_match"
        )


# --------------------------------------------------------------------------- loading


class _Reader:
    """Typed access to a mapping, raising SpecError with the dotted field path."""

    def __init__(self, data: Mapping[str, Any], source: str, prefix: str = "") -> None:
        self.data = data
        self.source = source
        self.prefix = prefix

    def path(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def fail(self, key: str, message: str) -> SpecError:
        return SpecError(self.source, self.path(key), message)

    def has(self, key: str) -> bool:
        return key in self.data and self.data[key] is not None

    def child(self, key: str, required: bool = False) -> _Reader | None:
        value = self.data.get(key)
        if value is None:
            if required:
                raise self.fail(key, "is required")
            return None
        if not isinstance(value, Mapping):
            raise self.fail(key, f"must be a mapping, got {type(value).__name__}")
        return _Reader(value, self.source, f"{self.path(key)}.")

    def str_(self, key: str, default: str | None = None, required: bool = False) -> str | None:
        value = self.data.get(key)
        if value is None:
            if required:
                raise self.fail(key, "is required")
            return default
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {type(value).__name__}: {value!r}")
        return value

    def req_str(self, key: str) -> str:
        value = self.str_(key, required=True)
        assert value is not None
        return value

    def int_(self, key: str, default: int, minimum: int = 0) -> int:
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"must be an integer, got {value!r}")
        if value < minimum:
            raise self.fail(key, f"must be >= {minimum}, got {value}")
        return value

    def str_list(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key)
        if value is None:
            return ()
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, f"must be a list of strings, got {value!r}")
        return tuple(value)

    def choice(self, key: str, options: Sequence[str], default: str) -> str:
        value = self.str_(key, default=default)
        assert value is not None
        if value not in options:
            raise self.fail(key, f"unknown value {value!r}; expected one of {', '.join(options)}")
        return value

    def unknown_keys(self, allowed: Sequence[str]) -> None:
        for key in self.data:
            if key not in allowed:
                raise self.fail(str(key), f"unknown field; allowed here: {', '.join(allowed)}")


def _field_map(reader: _Reader, key: str) -> FieldMap:
    value = reader.data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise reader.fail(key, "must be a mapping of name -> source field (or list of fields)")
    out: dict[str, str | tuple[str, ...]] = {}
    for name, src in value.items():
        if isinstance(src, str):
            out[str(name)] = src
        elif isinstance(src, list) and all(isinstance(s, str) for s in src):
            out[str(name)] = tuple(src)
        else:
            raise reader.fail(f"{key}.{name}", f"must be a field name or a list of names: {src!r}")
    return out


def _dataset(reader: _Reader, *, needs_data: bool = True) -> DatasetSpec:
    reader.unknown_keys(
        ("path", "format", "json_key", "hub", "subsets", "fields", "id_field", "window")
    )
    hub_reader = reader.child("hub")
    hub = None
    if hub_reader is not None:
        hub_reader.unknown_keys(("id", "config", "split", "fields"))
        hub = HubSource(
            id=hub_reader.req_str("id"),
            config=hub_reader.str_("config"),
            split=hub_reader.str_("split", default="test") or "test",
            fields=_field_map(hub_reader, "fields") or None,
        )
    path = reader.str_("path")
    if needs_data and path is None and hub is None:
        raise reader.fail("path", "is required (a local file, or give 'hub' with a dataset id)")
    fmt = reader.str_("format")
    if fmt is not None and fmt not in ("jsonl", "json", "csv", "parquet"):
        raise reader.fail("format", f"unknown format {fmt!r}; expected jsonl, json, csv or parquet")
    raw_subsets = reader.data.get("subsets")
    subsets: tuple[str, ...] | Literal["*"] | None
    if raw_subsets is None:
        subsets = None
    elif raw_subsets == "*":
        subsets = "*"
    else:
        subsets = reader.str_list("subsets")
        if not subsets:
            raise reader.fail("subsets", "must not be empty")
    if subsets is not None and path is not None and "{subset}" not in path:
        raise reader.fail("path", "must contain '{subset}' when 'subsets' is given")
    return DatasetSpec(
        path=path,
        format=fmt,
        json_key=reader.str_("json_key"),
        hub=hub,
        subsets=subsets,
        fields=_field_map(reader, "fields"),
        id_field=reader.str_("id_field"),
        window=_window(reader),
    )


class _DuplicateKey(Exception):
    """A key given twice in one mapping of a spec's YAML (``field``: its dotted path)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class _SpecLoader(yaml.SafeLoader):
    """YAML's safe loader, except that dates stay strings: spec fields that hold dates
    (``dataset.window``) are validated with a message naming the field; and a key given
    twice in one mapping is an error (YAML keeps the last one silently)."""

    def construct_document(self, node: yaml.Node) -> Any:
        _check_duplicate_keys(self, node, "", set())
        return super().construct_document(node)


_SpecLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _check_duplicate_keys(loader: _SpecLoader, node: yaml.Node, path: str, seen: set[int]) -> None:
    """Raise :class:`_DuplicateKey` for the first key found twice in one mapping under
    ``node`` (its dotted path ``path``). Keys are compared as loaded (``1`` and ``01`` are
    one key); a key that overrides one a merge key (``<<: *anchor``) brings in is not a
    duplicate."""
    if id(node) in seen:  # an alias of a node already checked
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_duplicate_keys(loader, item, f"{path}[{i}]", seen)
        return
    if not isinstance(node, yaml.MappingNode):
        return
    first: dict[Any, yaml.Node] = {}
    for key_node, value_node in node.value:
        name = None
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE_TAG:
            key = loader.construct_object(key_node)
            name = str(key)
            if key in first:
                raise _DuplicateKey(
                    f"{path}.{name}" if path else name,
                    f"duplicate key {name!r} (lines {first[key].start_mark.line + 1} and "
                    f"{key_node.start_mark.line + 1}): YAML would keep the second silently; "
                    "give the key once",
                )
            first[key] = key_node
        child = path if name is None else f"{path}.{name}" if path else name
        _check_duplicate_keys(loader, value_node, child, seen)


def _window(reader: _Reader) -> DateWindow | None:
    sub = reader.child("window")
    if sub is None:
        return None
    sub.unknown_keys(("field", "start", "end"))
    ends: list[str | None] = []
    for key in ("start", "end"):
        value = sub.data.get(key)
        if value is None:
            ends.append(None)
            continue
        try:
            ends.append(datetime.date.fromisoformat(str(value)).isoformat())
        except ValueError:
            raise sub.fail(key, f"must be an ISO date (YYYY-MM-DD), got {value!r}") from None
    start, end = ends
    if start is None and end is None:
        raise sub.fail("start", "give start, end or both")
    if start is not None and end is not None and start > end:
        raise sub.fail("end", f"{end} is before start {start}")
    return DateWindow(field=sub.req_str("field"), start=start, end=end)


def _extractors(reader: _Reader, key: str) -> tuple[Extractor, ...]:
    value = reader.data.get(key)
    if value is None:
        return (Extractor(kind="strip"),)
    if isinstance(value, (str, Mapping)):
        value = [value]
    if not isinstance(value, list) or not value:
        raise reader.fail(key, "must be an extractor or a non-empty list of extractors")
    steps = []
    for i, step in enumerate(value):
        where = f"{key}[{i}]"
        if isinstance(step, str):
            step = {"kind": step}
        if not isinstance(step, Mapping):
            raise reader.fail(where, f"must be a name or a mapping, got {step!r}")
        sub = _Reader(step, reader.source, f"{reader.path(where)}.")
        sub.unknown_keys(("kind", "pattern", "group", "which", "letters", "if_finished"))
        if_finished = sub.data.get("if_finished", False)
        if not isinstance(if_finished, bool):
            raise sub.fail("if_finished", f"must be true or false, got {if_finished!r}")
        kind = sub.choice("kind", EXTRACTORS, default="strip")
        _extractor_fields(sub, kind)
        pattern = sub.str_("pattern")
        if kind == "regex":
            if pattern is None:
                raise sub.fail("pattern", "is required for kind 'regex'")
            import re

            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise sub.fail("pattern", f"invalid regular expression: {exc}") from None
            group: int | Literal["any"]
            if sub.data.get("group") == "any":
                group = "any"
            else:
                group = sub.int_("group", default=1 if compiled.groups else 0)
                if group > compiled.groups:
                    raise sub.fail("group", f"pattern has only {compiled.groups} group(s)")
        else:
            group = sub.int_("group", default=1)
        which = sub.choice("which", ("first", "last"), default="last")
        steps.append(
            Extractor(
                kind=kind,
                pattern=pattern,
                group=group,
                which=which,  # type: ignore[arg-type]
                letters=sub.str_("letters", default="ABCD") or "ABCD",
                if_finished=if_finished,
            )
        )
    return tuple(steps)


def _extractor_fields(step: _Reader, kind: str) -> None:
    """Refuse a field that ``kind`` does not use (it would be ignored), and a ``pattern``
    without a ``kind`` (the step would be ``strip``, ignoring it)."""
    given = step.has("kind")
    if not given and step.has("pattern"):
        raise step.fail(
            "kind",
            "is missing but 'pattern' is given (without a kind the step is 'strip', which "
            "ignores the pattern): add kind: regex",
        )
    allowed = ("kind", *EXTRACTOR_FIELDS[kind], "if_finished")
    for key in step.data:
        if key in allowed:
            continue
        users = [k for k, fields in EXTRACTOR_FIELDS.items() if key in fields]
        if given:
            raise step.fail(
                str(key),
                f"not used by kind {kind!r} (it would be ignored); allowed with {kind!r}: "
                f"{', '.join(allowed)}",
            )
        raise step.fail(
            str(key),
            f"not used by kind {kind!r}, the default when 'kind' is missing (it would be "
            f"ignored): add the kind that uses it ({' or '.join(users)})",
        )


def _exact_match_options(metric: _Reader) -> ExactMatchOptions:
    sub = metric.child("exact_match")
    if sub is None:
        return ExactMatchOptions()
    sub.unknown_keys(("regexes_to_ignore", "ignore_case", "ignore_punctuation", "ignore_numbers"))
    patterns = sub.str_list("regexes_to_ignore")
    import re

    for i, pattern in enumerate(patterns):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise sub.fail(
                f"regexes_to_ignore[{i}]", f"invalid regular expression: {exc}"
            ) from None
    flags: dict[str, bool] = {}
    for key in ("ignore_case", "ignore_punctuation", "ignore_numbers"):
        value = sub.data.get(key, False)
        if not isinstance(value, bool):
            raise sub.fail(key, f"must be true or false, got {value!r}")
        flags[key] = value
    return ExactMatchOptions(regexes_to_ignore=patterns, **flags)


def _metrics(gen: _Reader, scorer: str) -> tuple[MetricSpec, ...]:
    """``generate.metrics``: a mapping of metric name -> ``extract`` chain and ``compare``
    (``exact_match`` takes lm-eval's options in an ``exact_match`` block)."""
    value = gen.data.get("metrics")
    if value is None:
        return ()
    if not isinstance(value, Mapping) or not value:
        raise gen.fail("metrics", "must be a mapping of metric name -> {extract, compare}")
    if scorer != "match":
        raise gen.fail("metrics", f"named metrics apply to scorer match, not {scorer}")
    out = []
    for name, body in value.items():
        key = f"metrics.{name}"
        if not isinstance(name, str) or not name or not all(c.isalnum() or c == "_" for c in name):
            raise gen.fail(key, "a metric name is letters, digits and '_'")
        if not isinstance(body, Mapping):
            raise gen.fail(key, f"must be a mapping with extract and compare, got {body!r}")
        sub = _Reader(body, gen.source, f"{gen.path(key)}.")
        sub.unknown_keys(("extract", "compare", "exact_match"))
        if not sub.has("extract"):
            raise sub.fail("extract", "is required (the metric's own extraction chain)")
        compare = sub.choice("compare", METRIC_COMPARISONS, default="exact")
        if sub.has("exact_match") and compare != "exact_match":
            raise sub.fail("exact_match", f"options for compare exact_match, not {compare}")
        out.append(
            MetricSpec(
                name=name,
                extract=_extractors(sub, "extract"),
                compare=compare,
                exact_match=_exact_match_options(sub) if compare == "exact_match" else None,
            )
        )
    return tuple(out)


def _floor(reader: _Reader) -> float | None:
    value = reader.data.get("floor")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise reader.fail("floor", f"must be a number in [0, 1], got {value!r}")
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise reader.fail("floor", f"must be a number in [0, 1], got {value!r}")
    return float(value)


def _check_template(reader: _Reader, key: str, template: str | None) -> None:
    if template is None:
        return
    from pytest_llmeval.prompt import TemplateSyntaxProblem, check_template

    try:
        check_template(template)
    except TemplateSyntaxProblem as exc:
        raise reader.fail(key, f"invalid template: {exc}") from None


def _execution(gen: _Reader) -> ExecutionSpec:
    sub = gen.child("execution")
    if sub is None:
        return ExecutionSpec()
    kind = sub.choice("kind", ("function", "io"), default="function")
    own = ("tests", "func_name") if kind == "io" else ("prompt", "test", "entry_point")
    sub.unknown_keys(("kind", "timeout_s", "memory_mb", *own))
    timeout = sub.data.get("timeout_s", 10.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise sub.fail("timeout_s", f"must be a positive number of seconds, got {timeout!r}")
    memory_mb = sub.int_("memory_mb", default=1024, minimum=64)
    if kind == "io":
        tests = sub.str_list("tests")
        if not tests:
            raise sub.fail("tests", "is required for kind io (templates rendering test cases)")
        spec = ExecutionSpec(
            kind="io",
            tests=tests,
            func_name=sub.str_("func_name", default="") or "",
            timeout_s=float(timeout),
            memory_mb=memory_mb,
        )
        for i, template in enumerate(tests):
            _check_template(sub, f"tests[{i}]", template)
        _check_template(sub, "func_name", spec.func_name)
        return spec
    spec = ExecutionSpec(
        prompt=sub.str_("prompt", default="{{ prompt }}") or "",
        test=sub.str_("test", default="{{ test }}") or "",
        entry_point=sub.str_("entry_point", default="{{ entry_point }}") or "",
        timeout_s=float(timeout),
        memory_mb=memory_mb,
    )
    for key in ("prompt", "test", "entry_point"):
        _check_template(sub, key, getattr(spec, key))
    return spec


def _chat_pin(prompt: _Reader) -> str | None:
    """``prompt.chat``: on/off/auto (YAML's true/false read as on/off), or absent."""
    value = prompt.data.get("chat")
    if value is None:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if value not in ("on", "off", "auto"):
        raise prompt.fail("chat", f"expected on, off or auto, got {value!r}")
    return str(value)


def _thinking(gen: _Reader) -> ThinkingSpec:
    sub = gen.child("thinking")
    if sub is None:
        return ThinkingSpec()
    sub.unknown_keys(("strip", "start", "end"))
    strip = sub.data.get("strip", True)
    if not isinstance(strip, bool):
        raise sub.fail("strip", f"must be true or false, got {strip!r}")
    start, end = sub.str_("start"), sub.str_("end")
    if (start is None) != (end is None):
        raise sub.fail("end" if end is None else "start", "start and end go together")
    if start == "" or end == "":
        raise sub.fail("start" if start == "" else "end", "must not be empty")
    return ThinkingSpec(strip=strip, start=start, end=end)


def _ifeval(gen: _Reader) -> IFEvalSpec:
    sub = gen.child("ifeval")
    if sub is None:
        return IFEvalSpec()
    sub.unknown_keys(("instructions", "kwargs", "language", "sentences"))
    return IFEvalSpec(
        instructions=sub.str_("instructions", default="instruction_id_list") or "",
        kwargs=sub.str_("kwargs", default="kwargs") or "",
        language=sub.choice("language", IFEVAL_LANGUAGE_JUDGES, default="langdetect"),
        sentences=sub.choice("sentences", IFEVAL_SENTENCE_JUDGES, default="heuristic"),
    )


def _catalog(top: _Reader, mode: str) -> CatalogEntry:
    sub = top.child("catalog")
    if sub is None:
        return CatalogEntry(style="multiple_choice" if mode == "multiple_choice" else None)
    sub.unknown_keys(("capability", "style", "freshness", "saturation", "successor"))
    capability = sub.str_("capability")
    if capability is not None and capability not in CAPABILITIES:
        raise sub.fail("capability", f"unknown {capability!r}; known: {', '.join(CAPABILITIES)}")
    style = sub.str_("style")
    if style is not None and style not in STYLES:
        raise sub.fail("style", f"unknown {style!r}; known: {', '.join(STYLES)}")
    return CatalogEntry(
        capability=capability,
        style=style,
        freshness=sub.choice("freshness", ("stable", "fresh"), default="stable"),
        saturation=sub.str_("saturation", default="") or "",
        successor=sub.str_("successor"),
    )


def _probes(top: _Reader) -> ProbeSpec:
    sub = top.child("contamination")
    if sub is None:
        return ProbeSpec()
    sub.unknown_keys(("options", "gold", "question", "solution"))
    options: str | tuple[str, ...] | None
    if isinstance(sub.data.get("options"), list):  # one field per option (C-Eval)
        options = sub.str_list("options")
        if len(options) < 2:
            raise sub.fail("options", f"needs at least two option fields, got {list(options)}")
    else:
        options = sub.str_("options")
    spec = ProbeSpec(
        options=options,
        gold=sub.str_("gold"),
        question=sub.str_("question"),
        solution=sub.str_("solution"),
    )
    if (spec.options is None) != (spec.gold is None):
        raise sub.fail("gold" if spec.gold is None else "options", "options and gold go together")
    if spec.solution is not None and spec.question is None:
        raise sub.fail("question", "is required with solution")
    return spec


TOP_LEVEL = (
    "catalog",
    "contamination",
    "task",
    "description",
    "dataset",
    "prompt",
    "fewshot",
    "mode",
    "generate",
    "multiple_choice",
    "floor",
    "markers",
    "lmeval",
    "chat_form",
)
#: What a ``chat_form`` may change: how the item is asked and how the answer is read.
CHAT_FORM_KEYS = ("prompt", "generate")
LMEVAL_KEYS = ("task", "include_path", "num_fewshot", "metric", "fewshot_seed")


def task_spec_from_dict(data: Mapping[str, Any], source: str = "<python>") -> TaskSpec:
    """Validate a spec given as plain data (the parsed YAML) and build a TaskSpec.

    The sections are checked in a fixed order (the first problem found is the one
    reported): the top-level keys, ``task``, then ``lmeval`` (a spec of its own), or
    ``dataset``, ``prompt``, ``mode`` and its block, ``fewshot``, ``markers``, ``floor``,
    ``description``, ``catalog`` and ``contamination``.
    """
    if not isinstance(data, Mapping):
        raise SpecError(source, "<root>", "a task spec must be a mapping")
    top = _Reader(data, source)
    top.unknown_keys(TOP_LEVEL)
    base = _task_spec(top, source)
    form = top.child("chat_form")
    if form is None:
        return base
    return replace(base, chat_form=_chat_form(data, form, base, source))


def _chat_form(data: Mapping[str, Any], form: _Reader, base: TaskSpec, source: str) -> TaskSpec:
    """The task under a chat template: the spec with ``chat_form``'s ``prompt`` and
    ``generate`` fields laid over its own (mappings merged field by field, everything else
    replaced), validated as a whole spec; a problem is named at its ``chat_form.`` field."""
    form.unknown_keys(CHAT_FORM_KEYS)
    if base.lmeval is not None:
        raise form.fail("prompt", "an lmeval spec takes the harness's own prompts")
    for key in CHAT_FORM_KEYS:
        child = form.child(key)
        if key == "generate" and child is not None and base.mode != "generate":
            raise form.fail(key, f"given, but mode is {base.mode!r}")
        if key == "prompt" and child is not None and child.has("chat"):
            raise child.fail("chat", "pins the chat template; set it in the spec's own prompt")
    merged = {k: v for k, v in data.items() if k != "chat_form"}
    merged = _merged(merged, form.data)
    try:
        spec = _task_spec(_Reader(merged, source), source, chat_form=True)
    except SpecError as exc:
        raise SpecError(source, f"chat_form.{exc.field}", exc.message) from None
    if spec == replace(base, source=spec.source):
        raise form.fail("prompt", "changes nothing: give the prompt or generate fields that differ")
    return spec


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` laid over ``base``: nested mappings merged key by key, other values replaced."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _task_spec(top: _Reader, source: str, *, chat_form: bool = False) -> TaskSpec:
    name = top.req_str("task")
    if not name or not all(c.isalnum() or c in "_." for c in name):
        raise top.fail("task", f"must be a name of letters, digits, '_' or '.', got {name!r}")
    if top.has("lmeval"):
        return _lmeval_spec(top, name, source)
    dataset = _dataset(_required_child(top, "dataset"))
    prompt = _prompt(_required_child(top, "prompt"), chat_form=chat_form)
    if not top.has("mode"):
        raise top.fail("mode", "is required: 'multiple_choice' or 'generate'")
    mode = top.choice("mode", ("multiple_choice", "generate"), default="generate")
    generate = None
    multiple_choice = None
    if mode == "generate":
        generate = _generate(_required_child(top, "generate"))
        _budget_subsets(_required_child(top, "generate"), generate, dataset)
        if top.has("multiple_choice"):
            raise top.fail("multiple_choice", "given, but mode is 'generate'")
    else:
        multiple_choice = _multiple_choice(_required_child(top, "multiple_choice"))
        if top.has("generate"):
            raise top.fail("generate", "given, but mode is 'multiple_choice'")
    fs = top.child("fewshot")
    fewshot = _fewshot(fs) if fs is not None else FewShotSpec()
    markers = _markers(top)
    return TaskSpec(
        name=name,
        dataset=dataset,
        prompt=prompt,
        mode=mode,  # type: ignore[arg-type]
        generate=generate,
        multiple_choice=multiple_choice,
        fewshot=fewshot,
        floor=_floor(top),
        markers=markers,
        description=top.str_("description", default="") or "",
        catalog=_catalog(top, mode),
        probes=_probes(top),
        source=source,
    )


def _required_child(top: _Reader, key: str) -> _Reader:
    reader = top.child(key, required=True)
    assert reader is not None
    return reader


def _prompt(reader: _Reader, *, chat_form: bool = False) -> PromptSpec:
    reader.unknown_keys(
        (
            "template",
            "target",
            "description",
            "target_delimiter",
            "fewshot_separator",
            "chat",
            "system_prompt",
            "assistant_prefix",
        )
    )
    if reader.has("assistant_prefix") and not chat_form:
        raise reader.fail(
            "assistant_prefix",
            "opens the assistant's turn of a chat template: give it under chat_form.prompt",
        )
    prompt = PromptSpec(
        template=reader.req_str("template"),
        target=reader.str_("target", default="") or "",
        description=reader.str_("description", default="") or "",
        target_delimiter=reader.str_("target_delimiter", default=" ") or "",
        fewshot_separator=reader.str_("fewshot_separator", default="\n\n") or "",
        chat=_chat_pin(reader),
        system_prompt=reader.str_("system_prompt", default="") or "",
        assistant_prefix=reader.str_("assistant_prefix", default="") or "",
    )
    for key in ("template", "target", "description", "system_prompt", "assistant_prefix"):
        _check_template(reader, key, getattr(prompt, key))
    return prompt


GENERATE_KEYS = (
    "target",
    "max_new_tokens",
    "stop",
    "extract",
    "compare",
    "scorer",
    "execution",
    "ifeval",
    "overflow",
    "targets",
    "max_new_tokens_by_subset",
    "thinking",
    "metrics",
)


def _generate(gen: _Reader) -> GenerateSpec:
    gen.unknown_keys(GENERATE_KEYS)
    scorer = gen.choice("scorer", SCORERS, default="match")
    targets = gen.str_("targets")
    if targets is not None:
        _check_template(gen, "targets", targets)
    budgets = gen.child("max_new_tokens_by_subset")
    by_subset = (
        {str(k): budgets.int_(str(k), default=1, minimum=1) for k in budgets.data}
        if budgets is not None
        else {}
    )
    generate = GenerateSpec(
        target=(
            gen.req_str("target")
            if scorer == "match" and targets is None
            else gen.str_("target") or ""
        ),
        max_new_tokens=gen.int_("max_new_tokens", default=256, minimum=1),
        stop=_stops(gen),
        extract=_extractors(gen, "extract"),
        compare=gen.choice("compare", COMPARISONS, default="exact"),
        scorer=scorer,
        execution=_execution(gen) if scorer == "execution" else None,
        ifeval=_ifeval(gen) if scorer == "ifeval" else None,
        overflow=gen.choice("overflow", OVERFLOW_POLICIES, default="skip"),
        targets=targets,
        max_new_tokens_by_subset=by_subset,
        thinking=_thinking(gen),
        metrics=_metrics(gen, scorer),
    )
    _check_template(gen, "target", generate.target)
    if generate.compare == "f1" and scorer != "match":
        raise gen.fail("compare", f"f1 applies to scorer match, not {scorer}")
    if generate.compare == "math_verify":
        if scorer != "match":
            raise gen.fail("compare", f"math_verify applies to scorer match, not {scorer}")
        if gen.has("extract"):
            raise gen.fail(
                "extract",
                "compare: math_verify extracts the answer from the whole output itself "
                "(math-verify's LaTeX and expression extraction); remove 'extract'",
            )
    return generate


def _budget_subsets(gen: _Reader, generate: GenerateSpec, dataset: DatasetSpec) -> None:
    """``generate.max_new_tokens_by_subset`` names subsets the dataset lists: a name that is
    none of them (a typo) would leave that subset at ``max_new_tokens`` silently. Subsets
    found from the data (``subsets: "*"``) are not known here and are not checked."""
    names = list(generate.max_new_tokens_by_subset)
    if not names or dataset.subsets == "*":
        return
    field = "max_new_tokens_by_subset"
    if dataset.subsets is None:
        raise gen.fail(field, "is given, but the dataset has no subsets (dataset.subsets)")
    unknown = [n for n in names if n not in dataset.subsets]
    if unknown:
        raise gen.fail(
            f"{field}.{unknown[0]}",
            f"is not one of dataset.subsets ({', '.join(dataset.subsets)}): a budget for a "
            "subset that does not exist would leave the one meant at max_new_tokens",
        )


def _stops(gen: _Reader) -> tuple[str, ...]:
    """``generate.stop``: an empty string would be found in every output (the first token
    would end it), so it is refused rather than ignored."""
    stops = gen.str_list("stop")
    for i, stop in enumerate(stops):
        if not stop:
            raise gen.fail(
                "stop" if isinstance(gen.data.get("stop"), str) else f"stop[{i}]",
                "must not be empty (an empty stop sequence would end every output at its "
                "first token): remove it",
            )
    return stops


def _multiple_choice(mc: _Reader) -> MultipleChoiceSpec:
    mc.unknown_keys(("choices", "gold", "metric", "labels", "overflow"))
    raw_choices = mc.data.get("choices")
    choices: tuple[str, ...] | str
    if isinstance(raw_choices, str):
        choices = raw_choices
        _check_template(mc, "choices", choices)
    else:
        choices = mc.str_list("choices")
        if len(choices) < 2:
            raise mc.fail(
                "choices", "needs at least two choices (or one template rendering a list)"
            )
        for i, c in enumerate(choices):
            _check_template(mc, f"choices[{i}]", c)
    spec = MultipleChoiceSpec(
        choices=choices,
        gold=mc.req_str("gold"),
        metric=mc.choice("metric", ("acc", "acc_norm", "mc2"), default="acc"),  # type: ignore[arg-type]
        labels=mc.str_("labels"),
        overflow=mc.choice("overflow", OVERFLOW_POLICIES, default="skip"),
    )
    _check_template(mc, "gold", spec.gold)
    if spec.labels is not None:
        _check_template(mc, "labels", spec.labels)
    if (spec.metric == "mc2") != (spec.labels is not None):
        raise mc.fail(
            "labels",
            "metric mc2 needs labels (a template rendering 1/0 per choice)"
            if spec.metric == "mc2"
            else "only used by metric mc2",
        )
    return spec


def _fewshot(fs: _Reader) -> FewShotSpec:
    fs.unknown_keys(("k", "source", "examples", "order", "seed", "text_file"))
    k = fs.int_("k", default=0)
    text_file = fs.str_("text_file")
    source_reader = fs.child("source")
    fs_source = _dataset(source_reader) if source_reader is not None else None
    raw_examples = fs.data.get("examples") or []
    if not isinstance(raw_examples, list) or not all(isinstance(e, Mapping) for e in raw_examples):
        raise fs.fail("examples", "must be a list of mappings (one document each)")
    if fs_source is not None and raw_examples:
        raise fs.fail("examples", "give either 'source' or 'examples', not both")
    if text_file is not None and (fs_source is not None or raw_examples):
        raise fs.fail("text_file", "give one of 'text_file', 'source' or 'examples'")
    if text_file is not None and k < 1:
        # The file is shown whole: k records how many examples it holds.
        raise fs.fail(
            "k",
            ("is missing" if "k" not in fs.data else f"is {k}")
            + ", but 'text_file' is shown whole, whatever k says: set k to the number of "
            "examples the file holds (the record states it as the task's shots)",
        )
    if (fs_source is not None or raw_examples) and "k" not in fs.data:
        given = "'source' is" if fs_source is not None else "'examples' are"
        raise fs.fail(
            "k",
            f"{given} given but 'k' is missing, so no example would be shown: set k to the "
            "number of examples per prompt (k: 0 explicitly for zero-shot)",
        )
    if k > 0 and fs_source is None and not raw_examples and text_file is None:
        raise fs.fail("k", f"is {k} but neither 'source' nor 'examples' is given")
    if raw_examples and k > len(raw_examples):
        raise fs.fail("k", f"is {k} but only {len(raw_examples)} examples are given")
    return FewShotSpec(
        k=k,
        source=fs_source,
        examples=tuple(raw_examples),
        order=fs.choice("order", ("first", "seeded"), default="first"),  # type: ignore[arg-type]
        seed=fs.int_("seed", default=1234),
        text_file=text_file,
    )


def _markers(top: _Reader) -> tuple[str, ...]:
    markers = top.str_list("markers")
    for i, marker in enumerate(markers):
        if marker not in KNOWN_MARKERS:
            raise top.fail(
                f"markers[{i}]", f"unknown marker {marker!r}; known: {', '.join(KNOWN_MARKERS)}"
            )
    return markers


def _lmeval_spec(top: _Reader, name: str, source: str) -> TaskSpec:
    """A spec whose items are an lm-evaluation-harness task's (``lmeval:`` block): only
    the task's name, description, markers, floor and catalog entry are ours."""
    for key in top.data:
        if key not in (
            "task",
            "description",
            "markers",
            "floor",
            "catalog",
            "contamination",
            "lmeval",
        ):
            raise top.fail(
                str(key),
                "is not used with 'lmeval' (the harness's task config defines data, prompts "
                "and scoring): remove it",
            )
    block = top.data.get("lmeval")
    sub = top.child("lmeval", required=True) if isinstance(block, Mapping) else None
    if sub is None:
        raise top.fail("lmeval", "must be a mapping such as {task: arc_easy}")
    sub.unknown_keys(LMEVAL_KEYS)
    raw_paths = sub.data.get("include_path")
    paths = [raw_paths] if isinstance(raw_paths, str) else sub.str_list("include_path")
    here = Path(source).parent if source != "<python>" else Path.cwd()
    include = tuple(str((here / p).resolve()) for p in paths)
    num_fewshot = sub.data.get("num_fewshot")
    if num_fewshot is not None and (
        not isinstance(num_fewshot, int) or isinstance(num_fewshot, bool) or num_fewshot < 0
    ):
        raise sub.fail("num_fewshot", f"must be an integer >= 0, got {num_fewshot!r}")
    markers = _markers(top)
    return TaskSpec(
        name=name,
        dataset=DatasetSpec(),
        prompt=PromptSpec(template=""),
        mode="generate",
        floor=_floor(top),
        markers=markers,
        description=top.str_("description", default="") or "",
        catalog=_catalog(top, "generate"),
        probes=_probes(top),
        source=source,
        lmeval=LmEvalSpec(
            task=sub.req_str("task"),
            include_path=include,
            num_fewshot=num_fewshot,
            metric=sub.str_("metric"),
            fewshot_seed=sub.int_("fewshot_seed", default=1234),
        ),
    )


# Top-level keys of lm-evaluation-harness task and group configs that no spec of ours has:
# a YAML with one of them (and without our ``mode`` or ``lmeval``) is the harness's.
LMEVAL_ONLY_KEYS = frozenset(
    {
        "dataset_path",
        "dataset_name",
        "dataset_kwargs",
        "output_type",
        "doc_to_text",
        "doc_to_target",
        "doc_to_choice",
        "include",
        "group",
        "tag",
        "metric_list",
        "filter_list",
        "generation_kwargs",
        "test_split",
        "validation_split",
        "fewshot_split",
        "process_docs",
        "aggregate_metric_list",
        "num_fewshot",
    }
)


class _AnyTagLoader(yaml.SafeLoader):
    """Reads a YAML whatever its tags (the harness's ``!function``): only keys matter."""


_AnyTagLoader.add_multi_constructor("", lambda loader, suffix, node: None)


def is_task_file(path: Path) -> bool:
    """Whether a YAML file holds one of our task specs.

    A spec is a mapping with a top-level ``task`` key and either our ``mode`` or ``lmeval``
    block, or no key that only lm-evaluation-harness configs have (``dataset_path``,
    ``output_type``, ``doc_to_text``, ``include``, ``group``, ...): a harness task YAML
    beside the specs is left alone, while a spec of ours with a typo in a key is still
    collected (and fails with the key named). Any other YAML (CI configs, data) is not a
    spec."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return False
    if not any(line.startswith("task:") for line in text.splitlines()):
        return False  # cheap: most YAML files are not specs
    try:
        data = yaml.load(text, Loader=_AnyTagLoader)
    except yaml.YAMLError:
        return True  # ours by its task line: collection reports the broken YAML
    if not isinstance(data, Mapping) or "task" not in data:
        return False
    if "mode" in data or "lmeval" in data:
        return True
    return not (LMEVAL_ONLY_KEYS & set(map(str, data)))


def load_task_spec(path: str | Path) -> TaskSpec:
    """Load and validate one YAML task spec."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(str(path), "<file>", f"cannot be read: {exc}") from None
    try:
        data = yaml.load(text, Loader=_SpecLoader)
    except _DuplicateKey as exc:
        raise SpecError(str(path), exc.field, exc.message) from None
    except yaml.YAMLError as exc:
        raise SpecError(str(path), "<yaml>", f"is not valid YAML: {exc}") from None
    return task_spec_from_dict(data, source=str(path))
