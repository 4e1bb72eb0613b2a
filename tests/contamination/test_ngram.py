"""The n-gram overlap scan: normalisation, stable hashes, the index, shards and planted items.

Every corpus here is synthetic: random words from a made-up vocabulary, with synthetic
"benchmark items" planted verbatim, lightly edited, mid-document, across shard boundaries,
or not at all.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmeval._errors import DataError
from pytest_llmeval.contamination import _corpus
from pytest_llmeval.contamination._corpus import (
    Documents,
    FileRange,
    ParquetRows,
    iter_documents,
    plan_shards,
    resolve_corpus,
)
from pytest_llmeval.contamination._ngram import (
    BenchmarkIndex,
    ScanReport,
    merge,
    ngram_hash,
    normalize,
    normalize_reference,
    scan_local,
    scan_shard,
)

N = 13


def vocabulary(size: int = 400, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(2, 8))))
    return sorted(words)


WORDS = vocabulary()


def sentence(rng: random.Random, k: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(k))


def make_items(count: int, seed: int = 1) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    items = []
    for i in range(count):
        text = sentence(rng, rng.randint(40, 60)).capitalize() + "? Answer: " + str(i * 7)
        items.append((f"bench-{i:03d}", text))
    return items


def edit(text: str, rng: random.Random) -> str:
    """A light edit: two words replaced, upper case, extra punctuation and spacing."""
    words = text.split()
    for pos in (3, len(words) // 2):
        words[pos] = "zzzedited"
    return "  ".join(w.upper() + ("," if i % 5 == 0 else "") for i, w in enumerate(words))


class Corpus:
    """A synthetic corpus with planted items, and where each was planted."""

    def __init__(self, items: list[tuple[str, str]], n_docs: int = 300, seed: int = 2) -> None:
        rng = random.Random(seed)
        self.docs = [sentence(rng, rng.randint(20, 200)) for _ in range(n_docs)]
        texts = dict(items)
        ids = [i for i, _ in items]
        self.verbatim = ids[0:3]
        self.edited = ids[3:5]
        self.mid = ids[5:7]
        self.absent = ids[7:]
        self.planted: dict[str, int] = {}
        for k, item_id in enumerate(self.verbatim):
            doc = 10 + 40 * k
            self.docs[doc] = texts[item_id]
            self.planted[item_id] = doc
        for k, item_id in enumerate(self.edited):
            doc = 150 + 20 * k
            self.docs[doc] = sentence(rng, 15) + " " + edit(texts[item_id], rng)
            self.planted[item_id] = doc
        for k, item_id in enumerate(self.mid):
            doc = 200 + 30 * k
            self.docs[doc] = f"{sentence(rng, 60)}. {texts[item_id]} {sentence(rng, 60)}"
            self.planted[item_id] = doc

    def write_jsonl(self, path: Path) -> dict[int, int]:
        """Write JSON lines; return doc number -> byte offset of its line."""
        offsets = {}
        with path.open("wb") as fh:
            for i, text in enumerate(self.docs):
                offsets[i] = fh.tell()
                fh.write(json.dumps({"id": i, "text": text}).encode() + b"\n")
        return offsets

    def write_txt(self, path: Path) -> dict[int, int]:
        """Write paragraphs (hard-wrapped at 8 words), blank-line separated."""
        offsets = {}
        with path.open("wb") as fh:
            for i, text in enumerate(self.docs):
                offsets[i] = fh.tell()
                words = text.split(" ")
                lines = [" ".join(words[k : k + 8]) for k in range(0, len(words), 8)]
                fh.write(("\n".join(lines) + "\n\n").encode())
        return offsets


@pytest.fixture(scope="module")
def items() -> list[tuple[str, str]]:
    return make_items(12)


@pytest.fixture(scope="module")
def index(items: list[tuple[str, str]]) -> BenchmarkIndex:
    return BenchmarkIndex.build(items, N)


def check_planted(report: ScanReport, corpus: Corpus, where: dict[int, int] | None) -> None:
    """Every planted item found at its document (offset or row), absent ones exactly zero."""
    for item_id in corpus.verbatim + corpus.mid:
        r = report.item(item_id)
        assert r.n_matched == r.n_ngrams > 0 and r.fraction == 1.0, item_id
        assert len(r.spans) == 1
    for item_id in corpus.edited:
        r = report.item(item_id)
        assert 0 < r.n_matched < r.n_ngrams, item_id
        assert r.fraction is not None and 0 < r.fraction < 1
        assert len(r.spans) >= 2  # the edits cut the item into separate matched stretches
    for item_id, doc in corpus.planted.items():
        r = report.item(item_id)
        assert r.n_documents == 1, item_id
        [loc] = r.locations
        if where is None:
            assert loc.doc == doc and loc.offset is None
        else:
            assert loc.offset == where[doc] and loc.doc is None
    for item_id in corpus.absent:
        r = report.item(item_id)
        assert (r.n_matched, r.fraction, r.spans, r.locations) == (0, 0.0, (), ())
    assert {r.id for r in report.with_overlap()} == set(corpus.planted)


# --------------------------------------------------------------------------- normalisation


def test_normalize_lowercases_and_splits_on_punctuation() -> None:
    assert normalize("Janet’s ducks lay 16-eggs, (daily)!") == [
        "janet",
        "s",
        "ducks",
        "lay",
        "16",
        "eggs",
        "daily",
    ]
    assert normalize("16-3-4") == normalize("16 - 3 - 4") == ["16", "3", "4"]
    assert normalize("a_b\tc\u00a0d\nÉté «déjà» 3½") == ["a", "b", "c", "d", "été", "déjà", "3½"]
    assert normalize("  ...  ") == []


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_normalize_matches_its_definition_and_is_idempotent(text: str) -> None:
    tokens = normalize(text)
    assert tokens == normalize_reference(text)
    assert normalize(" ".join(tokens)) == tokens


def test_hashes_are_stable_across_processes() -> None:
    grams = [["the", "cat", "sat"], ["été", "déjà", "vu"]]
    here = [ngram_hash(g) for g in grams]
    code = (
        "import json,sys;from pytest_llmeval.contamination._ngram import ngram_hash;"
        f"print(json.dumps([ngram_hash(g) for g in {grams!r}]))"
    )
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        )
        assert json.loads(out.stdout) == here
    assert all(0 <= h < 2**64 for h in here)
    # The definition, BLAKE2b-64 of the space-joined tokens, and a pinned value: a blacklist
    # exported today must still match next year.
    want = int.from_bytes(hashlib.blake2b(b"the cat sat", digest_size=8).digest(), "big")
    assert here[0] == want == 0xD700343DBC4FB4E6


# --------------------------------------------------------------------------- the index


def test_index_counts_ngrams_and_reports_short_items() -> None:
    index = BenchmarkIndex.build([("a", "one two three four"), ("b", "one two"), ("c", "x")], 3)
    assert index.n_ngrams(0) == 2 and index.n_ngrams(1) == 0
    report = scan_shard(Documents("mem", ("zero one two three four five",)), index)
    merged = merge([report], index)
    a, b, c = (merged.item(i) for i in "abc")
    assert (a.n_matched, a.fraction, a.spans) == (2, 1.0, ("one two three four",))
    assert b.too_short and b.fraction is None and not b.flagged(0.0)
    assert c.too_short
    with pytest.raises(ValueError, match="occurs twice"):
        BenchmarkIndex.build([("a", "x"), ("a", "y")], 3)
    with pytest.raises(ValueError, match="n must be"):
        BenchmarkIndex.build([("a", "x")], 0)


def test_shared_ngrams_count_for_every_item_that_has_them() -> None:
    shared = "alpha beta gamma delta epsilon"
    index = BenchmarkIndex.build([("a", shared + " one two"), ("b", "three " + shared)], 5)
    merged = merge([scan_shard(Documents("m", (f"x {shared} y",)), index)], index)
    assert merged.item("a").n_matched == 1 and merged.item("b").n_matched == 1
    assert merged.item("a").spans == (shared,)


def test_n_one_and_n_two_work() -> None:
    for n in (1, 2):
        index = BenchmarkIndex.build([("a", "red green blue")], n)
        merged = merge([scan_shard(Documents("m", ("blue green red",)), index)], index)
        r = merged.item("a")
        assert r.n_matched == (3 if n == 1 else 0)
        merged = merge([scan_shard(Documents("m", ("a red green b",)), index)], index)
        assert merged.item("a").n_matched == 2 if n == 1 else 1


def test_scan_shard_checks_n(index: BenchmarkIndex) -> None:
    with pytest.raises(ValueError, match="n=13, not n=8"):
        scan_shard(Documents("m", ()), index, 8)
    assert scan_shard(Documents("m", ()), index, 13).documents == 0


@settings(max_examples=60, deadline=None)
@given(
    words=st.lists(st.sampled_from(WORDS[:50]), min_size=0, max_size=40),
    prefix=st.text(max_size=30),
    suffix=st.text(max_size=30),
    n=st.integers(1, 13),
)
def test_a_document_containing_an_item_matches_all_its_ngrams(
    words: list[str], prefix: str, suffix: str, n: int
) -> None:
    text = " ".join(words)
    index = BenchmarkIndex.build([("item", text)], n)
    doc = f"{prefix} {text.upper()}, {suffix}"
    r = merge([scan_shard(Documents("m", (doc,)), index)], index).item("item")
    assert r.n_matched == r.n_ngrams
    if r.n_ngrams:
        assert r.fraction == 1.0 and r.spans == (" ".join(normalize(text)),)
    else:
        assert r.too_short


# --------------------------------------------------------------------------- planted corpora


def test_in_memory_documents(items: list[tuple[str, str]], index: BenchmarkIndex) -> None:
    corpus = Corpus(items)
    shards = [
        Documents("mem", tuple(corpus.docs[i : i + 50]), first_doc=i) for i in range(0, 300, 50)
    ]
    report = merge([scan_shard(s, index) for s in shards], index)
    check_planted(report, corpus, None)
    assert report.documents == 300 and report.shards == 6
    assert report.flagged(0.5) == [
        r for r in report.with_overlap() if r.fraction and r.fraction >= 0.5
    ]


@pytest.mark.parametrize("shard_bytes", [1 << 30, 3000, 777])
def test_jsonl_byte_ranges(
    tmp_path: Path, items: list[tuple[str, str]], index: BenchmarkIndex, shard_bytes: int
) -> None:
    corpus = Corpus(items)
    path = tmp_path / "corpus.jsonl"
    offsets = corpus.write_jsonl(path)
    shards = plan_shards(resolve_corpus([str(path)]), shard_bytes=shard_bytes)
    size = path.stat().st_size
    assert all(isinstance(s, FileRange) for s in shards)
    if shard_bytes < size:
        assert len(shards) > 10
    # The ranges tile the file, every one starts at a line start, every document is read once.
    ranges = [(s.start, s.end) for s in shards if isinstance(s, FileRange)]
    assert ranges[0][0] == 0 and ranges[-1][1] == size
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert {start for start, _ in ranges} <= set(offsets.values())
    seen = [d.offset for s in shards for d in iter_documents(s)]
    assert sorted(seen) == sorted(offsets.values())
    # Tentative boundaries fall inside planted documents; they are still found once.
    results = [scan_shard(s, index) for s in shards]
    report = merge(reversed(results), index)
    check_planted(report, corpus, offsets)
    assert report.bytes_scanned == size and report.documents == len(corpus.docs)


def test_txt_paragraphs_and_byte_ranges(
    tmp_path: Path, items: list[tuple[str, str]], index: BenchmarkIndex
) -> None:
    corpus = Corpus(items)
    path = tmp_path / "corpus.txt"
    offsets = corpus.write_txt(path)
    for shard_bytes in (1 << 30, 2500):
        shards = plan_shards(resolve_corpus([str(path)]), shard_bytes=shard_bytes)
        docs = [d for s in shards for d in iter_documents(s)]
        assert [d.offset for d in docs] == [offsets[i] for i in range(len(corpus.docs))]
        report = merge([scan_shard(s, index) for s in shards], index)
        check_planted(report, corpus, offsets)


def test_long_paragraph_chunks_keep_ngrams_across_the_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_corpus, "MAX_CHUNK_BYTES", 40)
    item = " ".join(WORDS[100:130])
    index = BenchmarkIndex.build([("long", item)], N)
    path = tmp_path / "wrapped.txt"
    words = (" ".join(WORDS[:60]) + " " + item + " " + " ".join(WORDS[200:260])).split()
    path.write_text("\n".join(" ".join(words[k : k + 3]) for k in range(0, len(words), 3)))
    shards = plan_shards(resolve_corpus([str(path)]))
    docs = list(iter_documents(shards[0]))
    assert len(docs) > 10 and docs[1].continues and not docs[0].continues
    r = merge([scan_shard(shards[0], index)], index).item("long")
    assert r.fraction == 1.0 and r.spans == (item,)


def test_gzip_jsonl(tmp_path: Path, items: list[tuple[str, str]], index: BenchmarkIndex) -> None:
    import gzip

    corpus = Corpus(items)
    plain = tmp_path / "c.jsonl"
    offsets = corpus.write_jsonl(plain)
    packed = tmp_path / "c.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    shards = plan_shards(resolve_corpus([str(packed)]), shard_bytes=100)
    assert len(shards) == 1
    report = merge([scan_shard(s, index) for s in shards], index)
    check_planted(report, corpus, offsets)
    assert report.bytes_scanned == plain.stat().st_size


def test_parquet_row_groups(
    tmp_path: Path, items: list[tuple[str, str]], index: BenchmarkIndex
) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    corpus = Corpus(items)
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"body": corpus.docs}), path, row_group_size=40)
    shards = plan_shards(resolve_corpus([str(path)]), shard_bytes=5000, text_field="body")
    assert len(shards) > 2 and all(isinstance(s, ParquetRows) for s in shards)
    report = merge([scan_shard(s, index) for s in shards], index)
    check_planted(report, corpus, None)
    with pytest.raises(DataError, match=r"no text column 'text'.*--text-field"):
        plan_shards(resolve_corpus([str(path)]))


def test_local_pool_equals_one_process(
    tmp_path: Path, items: list[tuple[str, str]], index: BenchmarkIndex
) -> None:
    corpus = Corpus(items)
    offsets = corpus.write_jsonl(tmp_path / "a.jsonl")
    corpus.write_txt(tmp_path / "b.txt")
    shards = plan_shards(resolve_corpus([str(tmp_path)]), shard_bytes=4000)
    one = scan_local(shards, index, workers=1)
    two = scan_local(shards, index, workers=2)
    assert one.items == two.items and two.workers == 2
    assert (
        one.bytes_scanned == two.bytes_scanned == sum(p.stat().st_size for p in tmp_path.iterdir())
    )
    assert two.seconds is not None and two.throughput_mb_s is not None
    found = two.item(corpus.verbatim[0])
    assert {loc.source for loc in found.locations} == {
        str(tmp_path / "a.jsonl"),
        str(tmp_path / "b.txt"),
    }
    assert offsets[corpus.planted[corpus.verbatim[0]]] in {loc.offset for loc in found.locations}


def test_locations_are_capped(index: BenchmarkIndex, items: list[tuple[str, str]]) -> None:
    text = items[0][1]
    shards = [Documents(f"s{k}", (text,) * 5) for k in range(3)]
    report = merge([scan_shard(s, index, max_locations=2) for s in shards], index, max_locations=4)
    r = report.item(items[0][0])
    assert r.n_documents == 15 and len(r.locations) == 4
    assert [(loc.source, loc.doc) for loc in r.locations] == [
        ("s0", 0),
        ("s0", 1),
        ("s1", 0),
        ("s1", 1),
    ]


# --------------------------------------------------------------------------- corpus errors


def test_corpus_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such file or directory"):
        resolve_corpus([str(tmp_path / "missing.jsonl")])
    odd = tmp_path / "data.csv"
    odd.write_text("text\nhello\n")
    with pytest.raises(DataError, match=r"data\.csv: unknown extension"):
        resolve_corpus([str(odd)])
    with pytest.raises(DataError, match="no corpus files"):
        resolve_corpus([str(tmp_path)])
    with pytest.raises(DataError, match="matches no corpus files"):
        resolve_corpus([str(tmp_path / "*.jsonl")])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"content": "x"}) + "\n")
    with pytest.raises(DataError, match=r"bad\.jsonl.*no text field 'text'"):
        plan_shards(resolve_corpus([str(bad)]))
    with pytest.raises(DataError, match="--allow-hub"):
        resolve_corpus(["hf:some/dataset"])


def test_globs_and_directories(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    for name in ("sub/a.jsonl", "b.txt", "c.txt.gz", "notes.md"):
        (tmp_path / name).write_bytes(b"")
    found = resolve_corpus([str(tmp_path)])
    assert [Path(getattr(s, "path", "")).name for s in found] == ["b.txt", "c.txt.gz", "a.jsonl"]
    found = resolve_corpus([str(tmp_path / "**" / "*.jsonl"), str(tmp_path / "sub")])
    assert len(found) == 1


def test_hub_streaming_from_a_local_dataset_folder(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    items: list[tuple[str, str]],
    index: BenchmarkIndex,
) -> None:
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    corpus = Corpus(items)
    folder = tmp_path / "ds"
    folder.mkdir()
    corpus.write_jsonl(folder / "train.jsonl")
    sources = resolve_corpus([f"hf:{folder}"], allow_hub=True)
    shards = plan_shards(sources, hub_shards=2)
    report = merge([scan_shard(s, index) for s in shards], index)
    check_planted(report, corpus, None)
