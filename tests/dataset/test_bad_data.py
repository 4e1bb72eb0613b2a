"""Bad data files: every reader names FILE:LINE and what was expected (docs/FAILURES.md,
Data), a subset whose file has no rows is named, and "installed" is decided per task."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_llmeval._errors import DataError
from pytest_llmeval.dataset import DataNotInstalled, load_fewshot_text, load_items, read_records
from pytest_llmeval.task import TaskSpec, load_task_spec, task_spec_from_dict

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
HEADER = "question,choice0,choice1,choice2,choice3,answer\n"


def _spec(dataset: dict[str, object], **extra: object) -> TaskSpec:
    return task_spec_from_dict(
        {
            "task": "toy",
            "dataset": dataset,
            "prompt": {"template": "{{ question }}"},
            "mode": "generate",
            "generate": {"target": "{{ answer }}"},
            **extra,
        },
        source="toy.yaml",
    )


# --------------------------------------------------------------- rows that are not objects


def test_a_jsonl_line_that_is_not_an_object_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"question": "q", "answer": "1"}\n[1, 2]\n', encoding="utf-8")
    spec = _spec({"path": "d.jsonl"})
    # Through load_items (the field map): it used to be a TypeError with no file or line.
    with pytest.raises(DataError) as info:
        load_items(spec, [tmp_path])
    assert str(info.value) == (
        f'{path}:2: expected a JSON object (one row of {{"field": value, ...}} per line), '
        "got an array: [1, 2]"
    )
    path.write_text('"just text"\n', encoding="utf-8")
    with pytest.raises(DataError, match=r":1: expected a JSON object .* got a string: \"just"):
        read_records(path)


def test_a_json_list_element_that_is_not_an_object_is_named(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"items": [{"question": "q"}, 7]}), encoding="utf-8")
    with pytest.raises(DataError) as info:
        read_records(path, json_key="items")
    assert str(info.value) == (
        f"{path}: expected a JSON list of objects, but element 1 of 'items' is a number: 7"
    )


# ------------------------------------------------------------------------ not UTF-8


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("d.jsonl", '{"question": "a"}\n{"question": "b"}\n{"question": "caf\xe9"}\n'),
        ("d.csv", "question,answer\nfirst,1\ncaf\xe9,2\n"),
        ("d.json", '[\n{"question": "a"},\n{"question": "caf\xe9"}\n]\n'),
    ],
    ids=["jsonl", "csv", "json"],
)
def test_a_file_that_is_not_utf8_names_file_line_and_byte(
    tmp_path: Path, name: str, text: str
) -> None:
    path = tmp_path / name
    path.write_bytes(text.encode("cp1252"))  # é is the one byte 0xe9 in Windows-1252
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "\xe9" in t)
    column = text.splitlines()[line - 1].index("\xe9") + 1
    with pytest.raises(DataError) as info:
        read_records(path)
    assert str(info.value) == (
        f"{path}:{line}: byte 0xe9 (byte {column} of the line) is not UTF-8 (invalid "
        "continuation byte): the file's encoding is not UTF-8 (Windows-1252 or Latin-1?); "
        f"re-save it as UTF-8 (e.g. iconv -f cp1252 -t utf-8 {name} > new-{name})"
    )


def test_the_line_is_found_past_the_readers_buffer(tmp_path: Path) -> None:
    """The decoder's own position is an offset into the block it was decoding: the line
    must be counted in the file."""
    path = tmp_path / "big.csv"
    rows = "".join(f"row {i} {'x' * 40},{i}\n" for i in range(2000))  # ~ 100 kB
    path.write_bytes(("question,answer\n" + rows + "caf\xe9,1\n").encode("cp1252"))
    with pytest.raises(
        DataError, match=rf"^{re.escape(str(path))}:2002: byte 0xe9 \(byte 4 of the line\)"
    ):
        read_records(path)


def test_a_utf16_file_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_bytes("question,answer\nq,1\n".encode("utf-16"))
    with pytest.raises(DataError) as info:
        read_records(path)
    assert str(info.value) == (
        f"{path}:1: the file is UTF-16 (it starts with a UTF-16 byte order mark), not UTF-8; "
        "re-save it as UTF-8"
    )


def test_a_fewshot_text_file_that_is_not_utf8_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "p.txt").write_bytes("Q: one\nA: caf\xe9\n".encode("cp1252"))
    spec = _spec({"path": "d.jsonl"}, fewshot={"k": 1, "text_file": "prompts/p.txt"})
    with pytest.raises(
        DataError, match=rf"^{re.escape(str(tmp_path / 'prompts' / 'p.txt'))}:2: byte 0xe9"
    ):
        load_fewshot_text(spec, None, [tmp_path])


def test_a_damaged_parquet_file_is_a_data_error(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    path = tmp_path / "d.parquet"
    path.write_bytes(b"not a parquet file at all")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: cannot be read as parquet: "):
        read_records(path)


# --------------------------------------------------------------- a subset without rows


@pytest.mark.parametrize("content", ["", HEADER], ids=["zero-bytes", "header-only"])
def test_a_subset_without_rows_is_named(tmp_path: Path, content: str) -> None:
    """The shipped MMLU spec; one subject's test file is empty: the others load, and the
    empty one is reported with its file (it used to vanish)."""
    spec = load_task_spec(BENCHMARKS / "mmlu.yaml")
    test = tmp_path / "mmlu" / "test"
    test.mkdir(parents=True)
    (test / "anatomy_test.csv").write_text(content, encoding="utf-8")
    (test / "virology_test.csv").write_text(HEADER + "q,a,b,c,d,0\nr,a,b,c,d,1\n")
    empty: dict[str, str] = {}
    items = load_items(spec, [tmp_path], empty)
    assert [i.id for i in items] == ["mmlu-virology-0000", "mmlu-virology-0001"]
    assert empty == {"anatomy": f"{test / 'anatomy_test.csv'} (0 rows)"}


# ---------------------------------------------------------------- installed, per task


def test_installed_is_decided_by_the_tasks_own_file(tmp_path: Path) -> None:
    """ARC-Easy and ARC-Challenge share the ai2_arc folder; with only ARC-Challenge there,
    ARC-Easy is not installed (it used to be a missing-file error that stopped every run)."""
    challenge = tmp_path / "ai2_arc" / "ARC-Challenge" / "test.jsonl"
    challenge.parent.mkdir(parents=True)
    row = {"id": "q1", "question": "?", "choices": {"text": ["a"], "label": ["A"]}}
    challenge.write_text(json.dumps({**row, "answerKey": "A"}) + "\n", encoding="utf-8")
    easy = load_task_spec(BENCHMARKS / "arc_easy.yaml")
    with pytest.raises(DataNotInstalled) as info:
        load_items(easy, [tmp_path])
    assert str(info.value) == (
        f"{BENCHMARKS / 'arc_easy.yaml'}: dataset: benchmark data not installed: data file "
        f"'ai2_arc/ARC-Easy/test.jsonl' not found, in the data directories [{tmp_path}] (their "
        "'ai2_arc' folder holds other files, not this one: install it, or check "
        "dataset.path); put a local copy there (--llm-data-dir, LLMEVAL_DATA_DIR) or allow "
        "the hub (allenai/ai2_arc) with --llm-set run.hub=true"
    )
    hard = load_items(load_task_spec(BENCHMARKS / "arc_challenge.yaml"), [tmp_path])
    assert [i.id for i in hard] == ["arc_challenge-q1"]


def test_subsets_star_with_none_of_the_tasks_files_is_not_installed(tmp_path: Path) -> None:
    (tmp_path / "mmlu" / "dev").mkdir(parents=True)  # another split, not the test files
    spec = load_task_spec(BENCHMARKS / "mmlu.yaml")
    with pytest.raises(
        DataNotInstalled, match=re.escape("no file matches 'mmlu/test/{subset}_test.csv'")
    ):
        load_items(spec, [tmp_path])


def test_a_missing_subset_file_beside_present_ones_is_an_error(tmp_path: Path) -> None:
    spec = _spec({"path": "sets/{subset}.jsonl", "subsets": ["here", "gone"]})
    (tmp_path / "sets").mkdir()
    (tmp_path / "sets" / "here.jsonl").write_text('{"question": "q", "answer": "1"}\n')
    with pytest.raises(DataError) as info:
        load_items(spec, [tmp_path])
    assert not isinstance(info.value, DataNotInstalled)
    assert "data file 'sets/gone.jsonl' not found in the data directories" in str(info.value)
