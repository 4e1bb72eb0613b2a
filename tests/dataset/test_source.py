"""Benchmark data: file formats, lookup in the data directories, item ids, limits, few-shot."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_llmeval._errors import DataError
from pytest_llmeval.dataset import (
    Item,
    discover_subsets,
    first_n,
    load_fewshot,
    load_items,
    load_rows,
    read_records,
    resolve_local,
    task_subsets,
)
from pytest_llmeval.task import TaskSpec, load_task_spec, task_spec_from_dict

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
SHARED = REPO / ".." / "shared" / "benchmarks"

ROWS = [
    {"question": "one plus one", "answer": "2", "uid": "q-1"},
    {"question": "two plus two", "answer": "4", "uid": "q-2"},
    {"question": "three plus three", "answer": "6", "uid": "q-3"},
]


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _spec(
    dataset: dict[str, Any], fewshot: dict[str, Any] | None = None, name: str = "toy"
) -> TaskSpec:
    data: dict[str, Any] = {
        "task": name,
        "dataset": dataset,
        "prompt": {"template": "{{ question }}", "target": "{{ answer }}"},
        "mode": "generate",
        "generate": {"target": "{{ answer }}"},
    }
    if fewshot is not None:
        data["fewshot"] = fewshot
    return task_spec_from_dict(data, source="toy.yaml")


def _shared() -> Path:
    if not SHARED.is_dir():
        pytest.skip(
            f"shared benchmark data not found at {SHARED} (shared/benchmarks beside the repo)"
        )
    return SHARED


# --------------------------------------------------------------------------- read_records


def test_read_jsonl_skips_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n\n" + json.dumps(ROWS[1]) + "\n", encoding="utf-8")
    assert read_records(path) == ROWS[:2]


def test_read_jsonl_bad_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + '{"question": "x",\n', encoding="utf-8")
    with pytest.raises(DataError, match="invalid JSON line") as info:
        read_records(path)
    assert f"{path}:2:" in str(info.value)


def test_read_json_list(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps(ROWS), encoding="utf-8")
    assert read_records(path) == ROWS


def test_read_json_with_key(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"meta": {}, "items": ROWS}), encoding="utf-8")
    assert read_records(path, json_key="items") == ROWS


def test_read_json_missing_key(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"items": ROWS}), encoding="utf-8")
    with pytest.raises(DataError, match="'rows'") as info:
        read_records(path, json_key="rows")
    assert str(path) in str(info.value)


def test_read_json_object_without_key_hints_json_key(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"items": ROWS}), encoding="utf-8")
    with pytest.raises(DataError, match="json_key"):
        read_records(path)


def test_read_json_invalid(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text("[{", encoding="utf-8")
    with pytest.raises(DataError, match="cannot be parsed as json") as info:
        read_records(path)
    assert str(path) in str(info.value)


def test_read_csv_gives_strings(tmp_path: Path) -> None:
    path = _csv(tmp_path / "d.csv", ROWS)
    assert read_records(path) == ROWS
    quoted = tmp_path / "q.csv"
    quoted.write_text('question,answer\n"a, b\nc",1\n', encoding="utf-8")
    assert read_records(quoted) == [{"question": "a, b\nc", "answer": "1"}]


def test_read_parquet(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([{"question": "q", "answer": 3, "tags": ["x", "y"]}]), path)
    assert read_records(path) == [{"question": "q", "answer": 3, "tags": ["x", "y"]}]


def test_declared_format_overrides_extension(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.txt", ROWS)
    assert read_records(path, "jsonl") == ROWS
    with pytest.raises(DataError, match=r"dataset\.format"):
        read_records(path)


def test_read_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "none.jsonl"
    with pytest.raises(DataError, match="cannot be read") as info:
        read_records(path)
    assert str(path) in str(info.value)


# --------------------------------------------------------------------------- lookup


def test_resolve_local_search_order(tmp_path: Path) -> None:
    first, second, third = tmp_path / "one", tmp_path / "two", tmp_path / "three"
    for d in (first, second, third):
        d.mkdir()
    _jsonl(second / "toy" / "test.jsonl", ROWS)
    _jsonl(third / "toy" / "test.jsonl", ROWS)
    dirs = [first, second, third]
    assert resolve_local("toy/test.jsonl", None, dirs) == second / "toy" / "test.jsonl"
    _jsonl(first / "toy" / "test.jsonl", ROWS)
    assert resolve_local("toy/test.jsonl", None, dirs) == first / "toy" / "test.jsonl"
    assert resolve_local("toy/test.jsonl", None, [third, first]) == third / "toy" / "test.jsonl"
    assert resolve_local("toy/other.jsonl", None, dirs) is None
    assert resolve_local("toy/test.jsonl", None, []) is None


def test_resolve_local_subset_and_absolute(tmp_path: Path) -> None:
    _jsonl(tmp_path / "toy" / "algebra.jsonl", ROWS)
    assert (
        resolve_local("toy/{subset}.jsonl", "algebra", [tmp_path])
        == tmp_path / "toy" / "algebra.jsonl"
    )
    assert resolve_local("toy/{subset}.jsonl", "geometry", [tmp_path]) is None
    absolute = str(tmp_path / "toy" / "{subset}.jsonl")
    assert resolve_local(absolute, "algebra", []) == tmp_path / "toy" / "algebra.jsonl"
    assert resolve_local(absolute, "geometry", [tmp_path]) is None


def test_discover_subsets(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for name in ("high_school_x", "alpha", "beta_test"):
        _csv(one / "mc" / "test" / f"{name}_test.csv", ROWS)
    _csv(one / "mc" / "test" / "notes.csv", ROWS)
    _csv(two / "mc" / "test" / "gamma_test.csv", ROWS)
    template = "mc/test/{subset}_test.csv"
    assert discover_subsets(template, [one, two]) == ["alpha", "beta_test", "high_school_x"]
    # The first data directory that has any match wins; later ones are not merged in.
    assert discover_subsets(template, [two, one]) == ["gamma"]
    assert discover_subsets(template, [tmp_path / "empty", two]) == ["gamma"]
    assert discover_subsets("mc/dev/{subset}_dev.csv", [one, two]) == []


def test_discover_subsets_absolute(tmp_path: Path) -> None:
    for name in ("b", "a"):
        _jsonl(tmp_path / "sets" / f"{name}.jsonl", ROWS)
    assert discover_subsets(str(tmp_path / "sets" / "{subset}.jsonl"), []) == ["a", "b"]


def test_task_subsets(tmp_path: Path) -> None:
    for name in ("b", "a"):
        _jsonl(tmp_path / "sets" / f"{name}.jsonl", ROWS)
    assert task_subsets(_spec({"path": "x.jsonl"}), [tmp_path]) == [None]
    assert task_subsets(_spec({"path": "sets/{subset}.jsonl", "subsets": ["b", "a"]}), []) == [
        "b",
        "a",
    ]
    assert task_subsets(_spec({"path": "sets/{subset}.jsonl", "subsets": "*"}), [tmp_path]) == [
        "a",
        "b",
    ]
    with pytest.raises(DataError, match=r"toy\.yaml: dataset.subsets is '\*'"):
        task_subsets(_spec({"path": "nope/{subset}.jsonl", "subsets": "*"}), [tmp_path])


# --------------------------------------------------------------------------- items


def test_load_items_ids(tmp_path: Path) -> None:
    _jsonl(tmp_path / "toy" / "test.jsonl", ROWS)
    items = load_items(_spec({"path": "toy/test.jsonl"}), [tmp_path])
    assert [i.id for i in items] == ["toy-0000", "toy-0001", "toy-0002"]
    assert [i.index for i in items] == [0, 1, 2]
    assert all(i.subset is None for i in items)
    assert items[1].doc == ROWS[1]


def test_load_items_id_width_grows(tmp_path: Path) -> None:
    _jsonl(tmp_path / "big.jsonl", [{"question": str(i)} for i in range(10001)])
    items = load_items(_spec({"path": "big.jsonl"}), [tmp_path])
    assert items[0].id == "toy-00000"
    assert items[-1].id == "toy-10000"


def test_load_items_subset_ids(tmp_path: Path) -> None:
    _jsonl(tmp_path / "sets" / "beta.jsonl", ROWS[:1])
    _jsonl(tmp_path / "sets" / "alpha.jsonl", ROWS[:2])
    items = load_items(_spec({"path": "sets/{subset}.jsonl", "subsets": "*"}), [tmp_path])
    assert [i.id for i in items] == ["toy-alpha-0000", "toy-alpha-0001", "toy-beta-0000"]
    assert [i.subset for i in items] == ["alpha", "alpha", "beta"]
    assert [i.index for i in items] == [0, 1, 0]


def test_load_items_id_field_sanitised(tmp_path: Path) -> None:
    rows = [
        {"question": "a", "uid": "HumanEval/0"},
        {"question": "b", "uid": " x y!! "},
        {"question": "c", "uid": "***"},
    ]
    _jsonl(tmp_path / "d.jsonl", rows)
    items = load_items(_spec({"path": "d.jsonl", "id_field": "uid"}), [tmp_path])
    assert [i.id for i in items] == ["toy-HumanEval_0", "toy-x_y", "toy-x"]


def test_load_items_duplicate_id(tmp_path: Path) -> None:
    rows = [{"question": "a", "uid": "a/b"}, {"question": "b", "uid": "a b"}]
    _jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(DataError, match=r"toy\.yaml: item id 'toy-a_b' occurs twice"):
        load_items(_spec({"path": "d.jsonl", "id_field": "uid"}), [tmp_path])


def test_load_items_missing_id_field(tmp_path: Path) -> None:
    _jsonl(tmp_path / "d.jsonl", [{"question": "a"}])
    with pytest.raises(DataError, match="row 0 has no id_field 'uid'"):
        load_items(_spec({"path": "d.jsonl", "id_field": "uid"}), [tmp_path])


def test_field_map_string_and_list(tmp_path: Path) -> None:
    rows = [{"q": "what?", "c0": "x", "c1": "y", "label": "1"}]
    _csv(tmp_path / "d.csv", rows)
    spec = _spec({"path": "d.csv", "fields": {"question": "q", "choices": ["c0", "c1"]}})
    (item,) = load_items(spec, [tmp_path])
    assert item.doc == {**rows[0], "question": "what?", "choices": ["x", "y"]}


@pytest.mark.parametrize(
    ("fields", "missing"),
    [({"question": "text"}, "'text'"), ({"choices": ["c0", "c9"]}, "['c9']")],
)
def test_field_map_missing_column(tmp_path: Path, fields: dict[str, Any], missing: str) -> None:
    path = _csv(tmp_path / "d.csv", [{"q": "what?", "c0": "x"}])
    with pytest.raises(DataError) as info:
        load_items(_spec({"path": "d.csv", "fields": fields}), [tmp_path])
    assert str(path) in str(info.value)
    assert missing in str(info.value)
    assert "have ['c0', 'q']" in str(info.value)


def test_missing_data_file_names_file_and_env(tmp_path: Path) -> None:
    spec = _spec({"path": "nowhere/test.jsonl"})
    with pytest.raises(DataError) as info:
        load_items(spec, [tmp_path])
    text = str(info.value)
    assert "'nowhere/test.jsonl'" in text
    assert "LLMEVAL_DATA_DIR" in text
    assert str(tmp_path) in text
    assert text.startswith("toy.yaml: dataset")


def test_missing_subset_file_names_the_subset_file(tmp_path: Path) -> None:
    spec = _spec({"path": "sets/{subset}.jsonl", "subsets": ["gone"]})
    with pytest.raises(DataError, match=r"'sets/gone\.jsonl' not found") as info:
        load_items(spec, [])
    assert "(none configured)" in str(info.value)


def test_load_rows_reports_where(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", ROWS)
    rows, where = load_rows(_spec({"path": "d.jsonl"}).dataset, None, [tmp_path], "what")
    assert rows == ROWS
    assert where == str(path)


# --------------------------------------------------------------------------- first_n


def _items(sizes: list[int]) -> list[Item]:
    items = []
    for s, size in enumerate(sizes):
        subset = f"s{s}" if len(sizes) > 1 else None
        for i in range(size):
            items.append(Item(id=f"t-{subset}-{i:04d}", index=i, doc={}, subset=subset))
    return items


def test_first_n_round_robin_example() -> None:
    items = _items([3, 1, 2])
    chosen = first_n(items, 4)
    assert [i.id for i in chosen] == ["t-s0-0000", "t-s0-0001", "t-s1-0000", "t-s2-0000"]
    assert first_n(items, None) == items
    assert first_n(items, 100) == items
    assert first_n(items, 0) == []


sizes_st = st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=5).filter(any)


@given(sizes=sizes_st, data=st.data())
def test_first_n_properties(sizes: list[int], data: st.DataObject) -> None:
    items = _items(sizes)
    n = data.draw(st.integers(min_value=0, max_value=len(items) + 2))
    chosen = first_n(items, n)
    # Deterministic and the right size.
    assert first_n(items, n) == chosen
    assert len(chosen) == min(n, len(items))
    # Canonical order: a subsequence of the items, no repeats.
    positions = [items.index(c) for c in chosen]
    assert positions == sorted(set(positions))
    # Round robin: each subset contributes a prefix of itself, and a subset that is
    # not exhausted has at least as many as any later subset and at most one fewer
    # than any earlier one.
    by_subset: dict[str | None, list[Item]] = {}
    for item in items:
        by_subset.setdefault(item.subset, [])
    for item in chosen:
        by_subset[item.subset].append(item)
    names = list(by_subset)
    counts = [len(by_subset[s]) for s in names]
    sizes_present = [sum(1 for i in items if i.subset == s) for s in names]
    for s in names:
        assert [i.index for i in by_subset[s]] == list(range(len(by_subset[s])))
    for a in range(len(names)):
        if counts[a] < sizes_present[a]:
            for b in range(len(names)):
                if b > a:
                    assert counts[b] <= counts[a]
                elif b < a:
                    assert counts[b] <= counts[a] + 1


@given(size=st.integers(min_value=0, max_value=30), n=st.integers(min_value=0, max_value=35))
def test_first_n_single_subset_is_prefix(size: int, n: int) -> None:
    items = _items([size])
    assert first_n(items, n) == items[:n]
    named = [Item(id=f"x-{i}", index=i, doc={}, subset="only") for i in range(size)]
    assert first_n(named, n) == named[:n]


# --------------------------------------------------------------------------- few-shot


def test_load_fewshot_from_examples() -> None:
    examples = [{"question": f"q{i}", "answer": str(i)} for i in range(4)]
    examples[2]["id"] = "custom"
    spec = _spec({"path": "x.jsonl"}, {"k": 3, "examples": examples})
    shots = load_fewshot(spec, None, [])
    assert [i for i, _ in shots] == ["fewshot-0", "fewshot-1", "custom"]
    assert [d["question"] for _, d in shots] == ["q0", "q1", "q2"]


def test_load_fewshot_zero_k() -> None:
    assert load_fewshot(_spec({"path": "x.jsonl"}), None, []) == []


def test_load_fewshot_seeded_is_stable(tmp_path: Path) -> None:
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(20)]
    _jsonl(tmp_path / "dev" / "alg.jsonl", rows)
    fewshot = {"k": 5, "order": "seeded", "seed": 7, "source": {"path": "dev/{subset}.jsonl"}}
    spec = _spec({"path": "test/{subset}.jsonl", "subsets": ["alg"]}, fewshot)
    first = load_fewshot(spec, "alg", [tmp_path])
    assert load_fewshot(spec, "alg", [tmp_path]) == first
    assert len(first) == 5
    assert len({i for i, _ in first}) == 5
    assert all(i.startswith("alg-") for i, _ in first)
    assert all(d == rows[int(i.split("-")[1])] for i, d in first)
    other_seed = _spec({"path": "test/{subset}.jsonl", "subsets": ["alg"]}, {**fewshot, "seed": 8})
    assert load_fewshot(other_seed, "alg", [tmp_path]) != first


def test_load_fewshot_first_order_and_field_map(tmp_path: Path) -> None:
    rows = [{"q": f"q{i}", "a": str(i)} for i in range(6)]
    _jsonl(tmp_path / "dev.jsonl", rows)
    spec = _spec(
        {"path": "test.jsonl", "fields": {"question": "q"}},
        {"k": 2, "source": {"path": "dev.jsonl"}},
    )
    shots = load_fewshot(spec, None, [tmp_path])
    assert shots == load_fewshot(spec, None, [tmp_path])
    # Without its own field map the source borrows the dataset's.
    assert shots == [("0", {**rows[0], "question": "q0"}), ("1", {**rows[1], "question": "q1"})]


def test_load_fewshot_pool_too_small(tmp_path: Path) -> None:
    _jsonl(tmp_path / "dev.jsonl", ROWS[:2])
    spec = _spec({"path": "test.jsonl"}, {"k": 3, "source": {"path": "dev.jsonl"}})
    with pytest.raises(DataError, match=r"fewshot\.k is 3 but the pool for subset None has 2"):
        load_fewshot(spec, None, [tmp_path])


def test_load_fewshot_missing_source_names_field(tmp_path: Path) -> None:
    spec = _spec({"path": "test.jsonl"}, {"k": 1, "source": {"path": "dev.jsonl"}})
    with pytest.raises(DataError, match=r"toy\.yaml: fewshot\.source: data file 'dev\.jsonl'"):
        load_fewshot(spec, None, [tmp_path])


# --------------------------------------------------------------------------- real data


def test_real_gsm8k_items() -> None:
    shared = _shared()
    spec = load_task_spec(BENCHMARKS / "gsm8k.yaml")
    items = load_items(spec, [shared])
    assert len(items) == 1319
    assert [i.id for i in items] == [f"gsm8k-{i:04d}" for i in range(1319)]
    assert all("####" in i.doc["answer"] for i in items)


def test_real_mmlu_items() -> None:
    shared = _shared()
    spec = load_task_spec(BENCHMARKS / "mmlu.yaml")
    subsets = task_subsets(spec, [shared])
    assert len(subsets) == 51
    assert subsets == sorted(subsets)
    assert "abstract_algebra" in subsets
    items = load_items(spec, [shared])
    assert len(items) == 13202
    by_id = {i.id: i for i in items}
    item = by_id["mmlu-abstract_algebra-0003"]
    assert item.subset == "abstract_algebra"
    assert item.index == 3
    assert len(item.doc["choices"]) == 4
    assert item.doc["answer"] in {"0", "1", "2", "3"}
    # A limit samples every subject.
    assert {i.subset for i in first_n(items, 51)} == set(subsets)
    shots = load_fewshot(spec, "abstract_algebra", [shared])
    assert [i for i, _ in shots] == [f"abstract_algebra-{i}" for i in range(5)]


def test_not_installed_vs_missing_file(tmp_path: Path) -> None:
    from pytest_llmeval.dataset import DataNotInstalled

    spec = _spec({"path": "bench/test.jsonl"})
    with pytest.raises(DataNotInstalled):
        load_items(spec, [tmp_path])
    # The benchmark's folder holds another task's file, not this task's: not installed
    # either (decided per task, by its own files).
    _jsonl(tmp_path / "bench" / "other.jsonl", ROWS)
    with pytest.raises(DataNotInstalled, match="'bench' folder holds other files"):
        load_items(spec, [tmp_path])
    # One of the task's own files is there, another is not: an error.
    spec = _spec({"path": "bench/{subset}.jsonl", "subsets": ["other", "test"]})
    with pytest.raises(DataError) as info:
        load_items(spec, [tmp_path])
    assert not isinstance(info.value, DataNotInstalled)
    assert "'bench/test.jsonl' not found" in str(info.value)
