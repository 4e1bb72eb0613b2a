"""Task specs: the real specs load, and every invalid spec names its file and field."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_llmeval._errors import SpecError
from pytest_llmeval.task import (
    DatasetSpec,
    Extractor,
    PromptSpec,
    TaskSpec,
    is_task_file,
    load_task_spec,
    task_spec_from_dict,
)

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"


def _generate_spec() -> dict[str, Any]:
    return {
        "task": "toy",
        "description": "a synthetic task",
        "markers": ["regression", "math"],
        "floor": 0.25,
        "dataset": {"path": "toy/test.jsonl"},
        "prompt": {"template": "Q: {{ question }}\nA:", "target": "{{ answer }}"},
        "mode": "generate",
        "generate": {
            "target": "{{ answer }}",
            "extract": [{"kind": "regex", "pattern": r"answer is (\d+)"}, "last_number"],
            "compare": "numeric",
            "stop": ["Q:"],
        },
    }


def _mc_spec() -> dict[str, Any]:
    return {
        "task": "toy_mc",
        "dataset": {"path": "toy/{subset}.csv", "subsets": ["a", "b"]},
        "prompt": {"template": "{{ question }}\nAnswer:"},
        "mode": "multiple_choice",
        "multiple_choice": {
            "choices": ["A", "B", "C"],
            "gold": "{{ label }}",
            "metric": "acc_norm",
        },
    }


def _write(tmp_path: Path, data: Any, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _load_error(tmp_path: Path, data: Any) -> tuple[SpecError, Path]:
    path = _write(tmp_path, data)
    with pytest.raises(SpecError) as info:
        load_task_spec(path)
    return info.value, path


def _assert_names(exc: SpecError, path: Path, field: str) -> None:
    text = str(exc)
    assert str(path) in text, text
    assert f"'{field}'" in text, text
    assert exc.source == str(path)
    assert exc.field == field


# --------------------------------------------------------------------------- real specs


def test_real_gsm8k_spec_loads() -> None:
    spec = load_task_spec(BENCHMARKS / "gsm8k.yaml")
    assert spec.name == "gsm8k"
    assert spec.mode == "generate"
    assert spec.fewshot.k == 8
    assert len(spec.fewshot.examples) == 8
    assert spec.fewshot.source is None
    assert spec.markers == ("regression", "math")
    assert spec.floor is None  # floors are per model
    assert spec.metric == "exact_match"
    assert spec.generate is not None
    assert spec.generate.compare == "numeric"
    assert [s.kind for s in spec.generate.extract] == ["regex", "last_number"]
    assert [s.if_finished for s in spec.generate.extract] == [False, True]
    assert spec.generate.extract[0].group == 1
    assert spec.dataset.path == "gsm8k/test.jsonl"
    assert spec.dataset.hub is not None and spec.dataset.hub.id == "openai/gsm8k"
    assert spec.multiple_choice is None
    assert spec.source == str(BENCHMARKS / "gsm8k.yaml")


def test_real_gsm8k_spec_has_lmeval_named_metrics() -> None:
    spec = load_task_spec(BENCHMARKS / "gsm8k.yaml")
    assert spec.generate is not None
    strict, flexible = spec.generate.metrics
    assert (strict.name, flexible.name) == ("strict_match", "flexible_extract")
    assert [(e.kind, e.group, e.which) for e in strict.extract] == [("regex", "any", "first")]
    assert [(e.kind, e.group, e.which) for e in flexible.extract] == [("regex", "any", "last")]
    assert strict.compare == flexible.compare == "exact_match"
    assert strict.exact_match == flexible.exact_match
    assert strict.exact_match is not None and strict.exact_match.ignore_case


def test_real_mmlu_spec_loads() -> None:
    spec = load_task_spec(BENCHMARKS / "mmlu.yaml")
    assert spec.name == "mmlu"
    assert spec.mode == "multiple_choice"
    assert spec.fewshot.k == 5
    assert spec.fewshot.source is not None
    assert spec.fewshot.source.path == "mmlu/dev/{subset}_dev.csv"
    assert spec.markers == ("regression", "knowledge")
    assert spec.floor is None
    assert spec.metric == "acc"
    assert spec.multiple_choice is not None
    assert spec.multiple_choice.choices == ("A", "B", "C", "D")
    assert spec.dataset.subsets == "*"
    assert spec.dataset.fields == {"choices": ("choice0", "choice1", "choice2", "choice3")}
    assert spec.generate is None
    assert spec.source == str(BENCHMARKS / "mmlu.yaml")


@pytest.mark.parametrize("name", ["gsm8k.yaml", "mmlu.yaml"])
def test_real_specs_are_task_files(name: str) -> None:
    assert is_task_file(BENCHMARKS / name)


def test_is_task_file(tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("name: not a task\n")
    assert not is_task_file(other)
    assert not is_task_file(tmp_path / "missing.yaml")
    assert is_task_file(_write(tmp_path, _generate_spec()))


@pytest.mark.parametrize(
    ("text", "ours"),
    [
        # lm-evaluation-harness task and group configs (with its !function tags)
        ("task: arc_x\ndataset_path: allenai/ai2_arc\noutput_type: multiple_choice\n", False),
        ("task: x\ninclude: _default_template_yaml\nprocess_docs: !function utils.p\n", False),
        ("group: g\ntask: [a, b]\naggregate_metric_list: [{metric: acc}]\n", False),
        ("tag: t\ntask: x\ndoc_to_text: '{{q}}'\n", False),
        # ours: a mode, an lmeval block, or no harness-only key (a typo is still ours)
        ("task: t\nmode: generate\ndataset_path: x\n", True),
        ("task: t\nlmeval: {task: arc_easy}\n", True),
        ("task: t\ndataset: {path: x.jsonl}\npromt: {template: x}\n", True),
        ("task: t\n  bad: [\n", True),  # broken YAML with a task line: reported as ours
        ("- task: a\n", False),  # a list, not a mapping
    ],
)
def test_harness_yaml_is_not_a_spec(tmp_path: Path, text: str, ours: bool) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(text, encoding="utf-8")
    assert is_task_file(path) is ours


def test_lmeval_spec_keeps_only_our_own_fields(tmp_path: Path) -> None:
    spec = task_spec_from_dict(
        {
            "task": "ceval_gate",
            "markers": ["regression"],
            "floor": 0.25,
            "contamination": {"options": ["A", "B", "C", "D"], "gold": "answer"},
            "lmeval": {"task": "ceval-valid", "include_path": "tasks", "num_fewshot": 5},
        },
        source=str(tmp_path / "gate.yaml"),
    )
    assert spec.lmeval is not None
    assert spec.lmeval.task == "ceval-valid" and spec.lmeval.num_fewshot == 5
    assert spec.lmeval.include_path == (str((tmp_path / "tasks").resolve()),)
    assert spec.floor == 0.25 and spec.probes.gold == "answer"
    with pytest.raises(SpecError, match=r"'prompt'.*not used with 'lmeval'"):
        task_spec_from_dict({"task": "x", "prompt": {"template": "q"}, "lmeval": {"task": "a"}})
    with pytest.raises(SpecError, match=r"num_fewshot.*integer >= 0"):
        task_spec_from_dict({"task": "x", "lmeval": {"task": "a", "num_fewshot": -1}})
    with pytest.raises(SpecError, match=r"lmeval.*mapping"):
        task_spec_from_dict({"task": "x", "lmeval": "arc_easy"})


# --------------------------------------------------------------------------- from dict


def test_from_dict_generate() -> None:
    spec = task_spec_from_dict(_generate_spec())
    assert spec.source == "<python>"
    assert spec.name == "toy"
    assert spec.floor == 0.25
    assert spec.metric == "exact_match"
    assert spec.dataset == DatasetSpec(path="toy/test.jsonl")
    assert spec.prompt == PromptSpec(template="Q: {{ question }}\nA:", target="{{ answer }}")
    assert spec.generate is not None
    assert spec.generate.stop == ("Q:",)
    assert spec.generate.max_new_tokens == 256
    assert spec.generate.extract == (
        Extractor(kind="regex", pattern=r"answer is (\d+)", group=1),
        Extractor(kind="last_number"),
    )
    assert spec.fewshot.k == 0


def test_from_dict_multiple_choice() -> None:
    spec = task_spec_from_dict(_mc_spec(), source="mine.yaml")
    assert spec.source == "mine.yaml"
    assert spec.metric == "acc_norm"
    assert spec.dataset.subsets == ("a", "b")
    assert spec.floor is None
    assert spec.markers == ()
    assert isinstance(spec, TaskSpec)


def test_from_dict_defaults() -> None:
    data = _generate_spec()
    del data["generate"]["extract"]
    spec = task_spec_from_dict(data)
    assert spec.generate is not None
    assert spec.generate.extract == (Extractor(kind="strip"),)
    assert spec.prompt.target_delimiter == " "
    assert spec.prompt.fewshot_separator == "\n\n"


def test_from_dict_hub_only_dataset() -> None:
    data = _generate_spec()
    data["dataset"] = {"hub": {"id": "org/name", "split": "validation"}}
    spec = task_spec_from_dict(data)
    assert spec.dataset.path is None
    assert spec.dataset.hub is not None
    assert spec.dataset.hub.split == "validation"


@pytest.mark.parametrize(
    "fewshot",
    [
        {"k": 1, "examples": [{"question": "q", "answer": "1"}]},
        {"k": 1, "source": {"path": "toy/dev.jsonl"}},
        {"k": 0, "source": None},
    ],
)
def test_fewshot_keeps_spec_source(fewshot: dict[str, Any]) -> None:
    # Regression: the few-shot 'source' must not replace the spec's own source (its file).
    data = _generate_spec()
    data["fewshot"] = fewshot
    spec = task_spec_from_dict(data, source="specs/toy.yaml")
    assert spec.source == "specs/toy.yaml"


def test_fewshot_zero_shot_with_examples_is_explicit() -> None:
    # k: 0 beside a few-shot pool is allowed when written: the task runs zero-shot.
    data = _generate_spec()
    data["fewshot"] = {"k": 0, "examples": [{"question": "q", "answer": "1"}]}
    assert task_spec_from_dict(data).fewshot.k == 0


def test_extract_steps_take_the_fields_of_their_kind() -> None:
    data = _generate_spec()
    data["generate"]["extract"] = [
        {"kind": "regex", "pattern": "(a)|(b)", "group": "any", "which": "first"},
        {"kind": "choice_letter", "letters": "ABC", "which": "first", "if_finished": True},
        {"kind": "boxed", "if_finished": True},
        {"if_finished": True},  # no kind: strip
    ]
    spec = task_spec_from_dict(data)
    assert spec.generate is not None
    assert [e.kind for e in spec.generate.extract] == ["regex", "choice_letter", "boxed", "strip"]
    assert spec.generate.extract[1].letters == "ABC"


def test_error_names_python_source() -> None:
    data = _generate_spec()
    data["mode"] = "chat"
    with pytest.raises(SpecError, match=r"<python>: field 'mode'"):
        task_spec_from_dict(data)


def test_root_must_be_mapping(tmp_path: Path) -> None:
    exc, path = _load_error(tmp_path, ["task", "toy"])
    _assert_names(exc, path, "<root>")


# --------------------------------------------------------------------------- error paths


def _mutate(base: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A copy of ``base`` with ``dotted`` set to ``value`` (or deleted when value is _DEL)."""
    data = copy.deepcopy(base)
    *parents, last = dotted.split(".")
    node = data
    for key in parents:
        node = node[key]
    if value is _DEL:
        del node[last]
    else:
        node[last] = value
    return data


_DEL = object()

ERROR_CASES = [
    # (id, base, dotted key to change, new value, expected field, message fragment)
    ("missing-task", _generate_spec, "task", _DEL, "task", "is required"),
    ("bad-task-name", _generate_spec, "task", "my task!", "task", "letters, digits"),
    ("unknown-mode", _generate_spec, "mode", "chat", "mode", "unknown value 'chat'"),
    ("missing-mode", _generate_spec, "mode", _DEL, "mode", "is required"),
    ("missing-dataset", _generate_spec, "dataset", _DEL, "dataset", "is required"),
    ("dataset-not-mapping", _generate_spec, "dataset", "toy.jsonl", "dataset", "mapping"),
    ("no-path-no-hub", _generate_spec, "dataset.path", _DEL, "dataset.path", "is required"),
    ("bad-format", _generate_spec, "dataset.format", "xlsx", "dataset.format", "xlsx"),
    ("unknown-dataset-key", _generate_spec, "dataset.files", "x", "dataset.files", "unknown"),
    ("floor-above-one", _generate_spec, "floor", 1.5, "floor", "[0, 1]"),
    ("floor-negative", _generate_spec, "floor", -0.1, "floor", "[0, 1]"),
    ("floor-string", _generate_spec, "floor", "high", "floor", "'high'"),
    ("floor-nan", _generate_spec, "floor", math.nan, "floor", "nan"),
    ("floor-bool", _generate_spec, "floor", True, "floor", "True"),
    ("unknown-top-key", _generate_spec, "metric", "acc", "metric", "unknown field"),
    ("unknown-marker", _generate_spec, "markers", ["math", "mathz"], "markers[1]", "'mathz'"),
    (
        "regex-no-pattern",
        _generate_spec,
        "generate.extract",
        [{"kind": "regex"}],
        "generate.extract[0].pattern",
        "is required",
    ),
    (
        "regex-invalid",
        _generate_spec,
        "generate.extract",
        ["last_number", {"kind": "regex", "pattern": "(unclosed"}],
        "generate.extract[1].pattern",
        "invalid regular expression",
    ),
    (
        "metrics-not-mapping",
        _generate_spec,
        "generate.metrics",
        ["strict"],
        "generate.metrics",
        "mapping of metric name",
    ),
    (
        "metric-without-extract",
        _generate_spec,
        "generate.metrics",
        {"strict": {"compare": "exact_match"}},
        "generate.metrics.strict.extract",
        "is required",
    ),
    (
        "metric-bad-name",
        _generate_spec,
        "generate.metrics",
        {"strict-match": {"extract": "strip"}},
        "generate.metrics.strict-match",
        "letters, digits",
    ),
    (
        "metric-unknown-compare",
        _generate_spec,
        "generate.metrics",
        {"m": {"extract": "strip", "compare": "f1"}},
        "generate.metrics.m.compare",
        "unknown value 'f1'",
    ),
    (
        "metric-options-without-exact-match",
        _generate_spec,
        "generate.metrics",
        {"m": {"extract": "strip", "compare": "numeric", "exact_match": {"ignore_case": True}}},
        "generate.metrics.m.exact_match",
        "compare exact_match",
    ),
    (
        "metric-bad-ignore-regex",
        _generate_spec,
        "generate.metrics",
        {
            "m": {
                "extract": "strip",
                "compare": "exact_match",
                "exact_match": {"regexes_to_ignore": ["("]},
            }
        },
        "generate.metrics.m.exact_match.regexes_to_ignore[0]",
        "invalid regular expression",
    ),
    (
        "metric-bad-flag",
        _generate_spec,
        "generate.metrics",
        {"m": {"extract": "strip", "compare": "exact_match", "exact_match": {"ignore_case": 1}}},
        "generate.metrics.m.exact_match.ignore_case",
        "true or false",
    ),
    (
        "metric-extractor-field",
        _generate_spec,
        "generate.metrics",
        {"m": {"extract": [{"kind": "regex", "pattern": "(a)", "group": 3}]}},
        "generate.metrics.m.extract[0].group",
        "1 group",
    ),
    (
        "regex-group-too-big",
        _generate_spec,
        "generate.extract",
        [{"kind": "regex", "pattern": "(a)", "group": 2}],
        "generate.extract[0].group",
        "1 group",
    ),
    (
        "unknown-extractor",
        _generate_spec,
        "generate.extract",
        ["last_word"],
        "generate.extract[0].kind",
        "'last_word'",
    ),
    (
        "extract-pattern-without-kind",
        _generate_spec,
        "generate.extract",
        [{"pattern": r"answer is (\d+)"}],
        "generate.extract[0].kind",
        "add kind: regex",
    ),
    (
        "extract-pattern-on-last-number",
        _generate_spec,
        "generate.extract",
        ["boxed", {"kind": "last_number", "pattern": r"(\d+)"}],
        "generate.extract[1].pattern",
        "not used by kind 'last_number'",
    ),
    (
        "extract-which-on-boxed",
        _generate_spec,
        "generate.extract",
        [{"kind": "boxed", "which": "first"}],
        "generate.extract[0].which",
        "not used by kind 'boxed'",
    ),
    (
        "extract-letters-on-regex",
        _generate_spec,
        "generate.extract",
        [{"kind": "regex", "pattern": "(a)", "letters": "AB"}],
        "generate.extract[0].letters",
        "allowed with 'regex': kind, pattern, group, which, if_finished",
    ),
    (
        "extract-group-on-choice-letter",
        _generate_spec,
        "generate.extract",
        [{"kind": "choice_letter", "group": 1}],
        "generate.extract[0].group",
        "not used by kind 'choice_letter'",
    ),
    (
        "extract-which-without-kind",
        _generate_spec,
        "generate.extract",
        [{"which": "first"}],
        "generate.extract[0].which",
        "the default when 'kind' is missing",
    ),
    (
        "metric-extract-unused-field",
        _generate_spec,
        "generate.metrics",
        {"m": {"extract": [{"kind": "strip", "pattern": "x"}]}},
        "generate.metrics.m.extract[0].pattern",
        "not used by kind 'strip'",
    ),
    (
        "if-finished-not-bool",
        _generate_spec,
        "generate.extract",
        [{"kind": "last_number", "if_finished": "yes"}],
        "generate.extract[0].if_finished",
        "true or false",
    ),
    (
        "io-without-tests",
        _generate_spec,
        "generate",
        {"scorer": "execution", "execution": {"kind": "io"}},
        "generate.execution.tests",
        "is required for kind io",
    ),
    (
        "io-with-function-fields",
        _generate_spec,
        "generate",
        {"scorer": "execution", "execution": {"kind": "io", "tests": ["x"], "entry_point": "f"}},
        "generate.execution.entry_point",
        "unknown field",
    ),
    (
        "f1-with-execution",
        _generate_spec,
        "generate",
        {"scorer": "execution", "compare": "f1"},
        "generate.compare",
        "f1 applies to scorer match",
    ),
    ("unknown-compare", _generate_spec, "generate.compare", "fuzzy", "generate.compare", "fuzzy"),
    (
        "empty-stop",
        _generate_spec,
        "generate.stop",
        ["Q:", ""],
        "generate.stop[1]",
        "must not be empty",
    ),
    ("empty-stop-string", _generate_spec, "generate.stop", "", "generate.stop", "not be empty"),
    (
        "max-new-tokens-zero",
        _generate_spec,
        "generate.max_new_tokens",
        0,
        "generate.max_new_tokens",
        ">= 1",
    ),
    (
        "budget-for-no-subsets",
        _generate_spec,
        "generate.max_new_tokens_by_subset",
        {"hard": 64},
        "generate.max_new_tokens_by_subset",
        "the dataset has no subsets",
    ),
    ("missing-generate", _generate_spec, "generate", _DEL, "generate", "is required"),
    (
        "mc-with-generate",
        _generate_spec,
        "multiple_choice",
        {"choices": "x"},
        "multiple_choice",
        "mode",
    ),
    (
        "template-syntax",
        _generate_spec,
        "prompt.template",
        "Q: {{ question ",
        "prompt.template",
        "invalid template",
    ),
    (
        "target-syntax",
        _generate_spec,
        "prompt.target",
        "{% if %}",
        "prompt.target",
        "invalid template",
    ),
    ("missing-template", _generate_spec, "prompt.template", _DEL, "prompt.template", "is required"),
    (
        "subsets-without-placeholder",
        _mc_spec,
        "dataset.path",
        "toy/all.csv",
        "dataset.path",
        "{subset}",
    ),
    ("empty-subsets", _mc_spec, "dataset.subsets", [], "dataset.subsets", "must not be empty"),
    ("one-choice", _mc_spec, "multiple_choice.choices", ["A"], "multiple_choice.choices", "two"),
    (
        "choice-syntax",
        _mc_spec,
        "multiple_choice.choices",
        ["A", "{{ B"],
        "multiple_choice.choices[1]",
        "invalid template",
    ),
    ("unknown-metric", _mc_spec, "multiple_choice.metric", "f1", "multiple_choice.metric", "f1"),
    ("missing-gold", _mc_spec, "multiple_choice.gold", _DEL, "multiple_choice.gold", "is required"),
    ("mc-missing-section", _mc_spec, "multiple_choice", _DEL, "multiple_choice", "is required"),
    (
        "fewshot-k-above-examples",
        _generate_spec,
        "fewshot",
        {
            "k": 3,
            "examples": [{"question": "q1", "answer": "1"}, {"question": "q2", "answer": "2"}],
        },
        "fewshot.k",
        "only 2 examples",
    ),
    (
        "fewshot-k-without-source",
        _generate_spec,
        "fewshot",
        {"k": 2},
        "fewshot.k",
        "neither 'source' nor 'examples'",
    ),
    (
        "fewshot-examples-without-k",
        _generate_spec,
        "fewshot",
        {"examples": [{"question": "q1", "answer": "1"}]},
        "fewshot.k",
        "'examples' are given but 'k' is missing, so no example would be shown: set k to the "
        "number of examples per prompt (k: 0 explicitly for zero-shot)",
    ),
    (
        "fewshot-source-without-k",
        _generate_spec,
        "fewshot",
        {"source": {"path": "toy/dev.jsonl"}},
        "fewshot.k",
        "'source' is given but 'k' is missing",
    ),
    (
        "fewshot-text-file-without-k",
        _generate_spec,
        "fewshot",
        {"text_file": "toy/prompt.txt"},
        "fewshot.k",
        "is missing, but 'text_file' is shown whole, whatever k says: set k to the number of "
        "examples the file holds",
    ),
    (
        "fewshot-text-file-zero-k",
        _generate_spec,
        "fewshot",
        {"text_file": "toy/prompt.txt", "k": 0},
        "fewshot.k",
        "is 0, but 'text_file' is shown whole",
    ),
    ("fewshot-negative-k", _generate_spec, "fewshot", {"k": -1}, "fewshot.k", ">= 0"),
    ("fewshot-k-string", _generate_spec, "fewshot", {"k": "5"}, "fewshot.k", "integer"),
    (
        "fewshot-source-and-examples",
        _generate_spec,
        "fewshot",
        {"k": 1, "source": {"path": "x.jsonl"}, "examples": [{"question": "q"}]},
        "fewshot.examples",
        "not both",
    ),
    (
        "fewshot-source-without-path",
        _generate_spec,
        "fewshot",
        {"k": 1, "source": {"format": "jsonl"}},
        "fewshot.source.path",
        "is required",
    ),
    (
        "fewshot-bad-order",
        _generate_spec,
        "fewshot",
        {"order": "random"},
        "fewshot.order",
        "random",
    ),
]


@pytest.mark.parametrize(
    ("base", "key", "value", "field", "fragment"),
    [case[1:] for case in ERROR_CASES],
    ids=[case[0] for case in ERROR_CASES],
)
def test_error_names_file_and_field(
    tmp_path: Path, base: Any, key: str, value: Any, field: str, fragment: str
) -> None:
    exc, path = _load_error(tmp_path, _mutate(base(), key, value))
    _assert_names(exc, path, field)
    assert fragment in str(exc)


def test_invalid_yaml(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("task: toy\nprompt: {template: [unclosed\n", encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_task_spec(path)
    _assert_names(info.value, path, "<yaml>")
    assert "not valid YAML" in str(info.value)


_SPEC_TEXT = """\
task: toy
dataset: {path: toy/test.jsonl}
prompt: {template: "Q: {{ question }}\\nA:"}
mode: generate
generate:
  target: "{{ answer }}"
  stop: ["Q:"]
  extract: [last_number]
"""


@pytest.mark.parametrize(
    ("text", "field", "lines"),
    [
        # Two `stop:` lines in one mapping: the second silently replaced the first.
        (_SPEC_TEXT + '  stop: ["\\n"]\n', "generate.stop", (7, 9)),
        # Two top-level blocks.
        (_SPEC_TEXT + "generate:\n  target: x\n", "generate", (5, 9)),
        # In a mapping inside a list.
        (
            _SPEC_TEXT.replace("[last_number]", "[{kind: regex, pattern: a, pattern: b}]"),
            "generate.extract[0].pattern",
            (8, 8),
        ),
    ],
    ids=["nested", "top-level", "in-a-list"],
)
def test_duplicate_yaml_key(tmp_path: Path, text: str, field: str, lines: tuple[int, int]) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_task_spec(path)
    _assert_names(info.value, path, field)
    key = field.rsplit(".", 1)[-1]
    assert f"duplicate key '{key}'" in str(info.value)
    assert f"lines {lines[0]} and {lines[1]}" in str(info.value)


def test_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    # A key that overrides one brought in by a YAML merge key (`<<: *anchor`) is meant.
    path = tmp_path / "merge.yaml"
    path.write_text(
        _SPEC_TEXT.replace('  stop: ["Q:"]\n', "  <<: &gen {stop: [Q]}\n  stop: [A]\n"),
        encoding="utf-8",
    )
    spec = load_task_spec(path)
    assert spec.generate is not None and spec.generate.stop == ("A",)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(SpecError) as info:
        load_task_spec(path)
    _assert_names(info.value, path, "<file>")


def test_every_error_case_is_valid_before_mutation() -> None:
    # The bases themselves are valid, so each error case tests exactly one fault.
    task_spec_from_dict(_generate_spec())
    task_spec_from_dict(_mc_spec())


def _with_form(form: Any, mode: str = "generate") -> dict[str, Any]:
    data: dict[str, Any] = {
        "task": "t",
        "dataset": {"path": "t.jsonl"},
        "prompt": {"template": "{{ q }}"},
        "mode": mode,
        "chat_form": form,
    }
    if mode == "generate":
        data["generate"] = {"target": "{{ a }}", "stop": ["\n"]}
    else:
        data["multiple_choice"] = {"choices": ["A", "B"], "gold": "{{ a }}"}
    return data


def test_chat_form_lays_its_fields_over_the_spec() -> None:
    spec = task_spec_from_dict(
        _with_form({"prompt": {"template": "Please: {{ q }}"}, "generate": {"stop": []}})
    )
    form = spec.chat_form
    assert form is not None and form.chat_form is None
    assert form.prompt.template == "Please: {{ q }}"
    assert form.generate is not None and form.generate.stop == ()
    assert form.generate.target == "{{ a }}"  # unchanged fields come from the spec
    assert spec.generate is not None and spec.generate.stop == ("\n",)


@pytest.mark.parametrize(
    ("form", "mode", "field", "message"),
    [
        ({"prompt": {"template": "{{ q "}}, "generate", "chat_form.prompt.template", ""),
        ({"fewshot": {"k": 1}}, "generate", "chat_form.fewshot", "unknown field"),
        ({"prompt": {"chat": "off"}}, "generate", "chat_form.prompt.chat", "pins the chat"),
        ({"generate": {"stop": []}}, "multiple_choice", "chat_form.generate", "mode is"),
        ({"prompt": {"template": "{{ q }}"}}, "generate", "chat_form.prompt", "changes nothing"),
        ({"generate": {"max_new_tokens": -1}}, "generate", "chat_form.generate.max_new_tokens", ""),
        ({"generate": {"stop": [""]}}, "generate", "chat_form.generate.stop[0]", "empty"),
        ("on", "generate", "chat_form", "must be a mapping"),
    ],
)
def test_chat_form_problems_are_named_at_their_field(
    form: Any, mode: str, field: str, message: str
) -> None:
    with pytest.raises(SpecError) as info:
        task_spec_from_dict(_with_form(form, mode), source="t.yaml")
    assert info.value.field == field
    assert message in info.value.message


def test_assistant_prefix_only_in_a_chat_form() -> None:
    data = _with_form({"prompt": {"assistant_prefix": "Sure: "}})
    assert task_spec_from_dict(data).chat_form is not None
    data["prompt"]["assistant_prefix"] = "Sure: "
    with pytest.raises(SpecError) as info:
        task_spec_from_dict(data)
    assert info.value.field == "prompt.assistant_prefix"
    assert "chat_form.prompt" in info.value.message


def test_shipped_humaneval_asks_for_a_code_block_under_a_chat_template() -> None:
    """The completion stops cut chat answers within a few tokens (docs/USAGE.md): under a
    chat template HumanEval asks for a solution and has no stop sequence."""
    spec = load_task_spec(BENCHMARKS / "humaneval.yaml")
    assert spec.generate is not None and "\ndef" in spec.generate.stop
    form = spec.chat_form
    assert form is not None and form.generate is not None
    assert form.generate.stop == () and form.prompt.template.startswith("Write a solution")


def test_a_budget_names_a_listed_subset() -> None:
    """A typo in ``max_new_tokens_by_subset`` left the subset meant at ``max_new_tokens``
    silently; subsets found from the data (``"*"``) are not known when the spec loads."""
    data = _generate_spec()
    data["dataset"] = {"path": "toy/{subset}.jsonl", "subsets": ["easy", "hard"]}
    data["generate"]["max_new_tokens_by_subset"] = {"hard": 64, "hrad": 32}
    with pytest.raises(SpecError) as err:
        task_spec_from_dict(data, source="s.yaml")
    assert err.value.field == "generate.max_new_tokens_by_subset.hrad"
    assert "is not one of dataset.subsets (easy, hard)" in err.value.message
    data["generate"]["max_new_tokens_by_subset"] = {"hard": 64}
    spec = task_spec_from_dict(data, source="s.yaml")
    assert spec.generate is not None and spec.generate.budget("hard") == 64
    data["dataset"]["subsets"] = "*"
    data["generate"]["max_new_tokens_by_subset"] = {"anything": 8}
    task_spec_from_dict(data, source="s.yaml")
