"""``llmeval-contamination``: scan and export end to end, errors, and a real GSM8K check."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_llmeval.contamination._ngram import normalize
from pytest_llmeval.contamination._scan import main

REPO = Path(__file__).resolve().parents[2]
GSM8K = REPO.parent / "shared" / "benchmarks" / "gsm8k" / "test.jsonl"


def words(rng: random.Random, k: int) -> str:
    return " ".join(
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 7)))
        for _ in range(k)
    )


@pytest.fixture
def bench(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A synthetic benchmark JSONL: four long items and a short one."""
    rng = random.Random(5)
    texts = {f"syn-{i}": words(rng, 30) + f". Answer: {i}" for i in range(4)}
    texts["syn-short"] = "far too short to have a thirteen gram"
    path = tmp_path / "bench.jsonl"
    path.write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in texts.items()))
    return path, texts


def write_corpus(tmp_path: Path, texts: dict[str, str]) -> tuple[Path, int]:
    """A JSONL corpus with syn-0 verbatim, syn-1 half (15 words), the rest absent; returns
    the path and the byte offset of syn-0's line."""
    rng = random.Random(6)
    path = tmp_path / "corpus" / "part-0.jsonl"
    path.parent.mkdir()
    lines = [json.dumps({"text": words(rng, 50)}) for _ in range(100)]
    lines[40] = json.dumps({"text": "Intro. " + texts["syn-0"] + " outro"})
    lines[70] = json.dumps({"text": " ".join(texts["syn-1"].split()[:16])})
    path.write_text("\n".join(lines) + "\n")
    offset = sum(len(line) + 1 for line in lines[:40])
    return path, offset


def test_scan_writes_reports_and_exclusions(
    tmp_path: Path, bench: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    bench_path, texts = bench
    corpus, offset = write_corpus(tmp_path, texts)
    out = tmp_path / "out"
    args = ["scan", "--benchmark", str(bench_path), "--corpus", str(corpus.parent)]
    rc = main([*args, "--out", str(out), "--workers", "2", "--shard-mb", "0.002", "--quiet"])
    assert rc == 0
    assert "5 items, 2 with any 13-gram overlap, 1 flagged at 0.5" in capsys.readouterr().out

    data = json.loads((out / "report.json").read_text())
    assert data["n"] == 13 and data["threshold"] == 0.5 and data["benchmark"] == "bench"
    s = data["summary"]
    assert (s["items"], s["too_short"], s["any_overlap"], s["flagged"]) == (5, 1, 2, 1)
    assert s["corpus_bytes"] == corpus.stat().st_size and s["documents"] == 100
    assert s["shards"] > 2 and s["workers"] == 2 and s["mb_per_s"] > 0
    assert s["peak_rss_mb"]["main"] > 0
    items = {r["id"]: r for r in data["items"]}
    assert [r["id"] for r in data["items"]][:2] == ["syn-0", "syn-1"]  # sorted by fraction
    syn0, syn1 = items["syn-0"], items["syn-1"]
    assert syn0["fraction"] == 1.0 and syn0["flagged"]
    assert syn0["spans"] == [" ".join(normalize(texts["syn-0"]))]
    assert syn0["locations"] == [
        {"source": str(corpus), "doc": None, "offset": offset, "n_matched": syn0["n_ngrams"]}
    ]
    assert 0 < syn1["fraction"] < 0.5 and not syn1["flagged"]
    assert syn1["n_matched"] == 16 - 13 + 1
    assert items["syn-short"]["too_short"] and items["syn-short"]["fraction"] is None
    assert items["syn-2"]["n_matched"] == 0 == items["syn-3"]["n_matched"]

    exclude = (out / "exclude.txt").read_text().splitlines()
    assert [line for line in exclude if not line.startswith("#")] == ["syn-0"]
    assert "# benchmark: bench" in exclude and any("threshold: 0.5" in x for x in exclude)

    md = (out / "report.md").read_text()
    assert "# Contamination report: bench" in md
    assert "| syn-0 | 20 / 20 | 1.00 | yes | 1 |" in md  # 32 tokens, 20 13-grams
    assert md.index("| syn-0 |") < md.index("| syn-1 |")
    assert "syn-2" not in md and "2 items with no overlap are not listed" in md

    # --threshold 0 flags any overlap (GPT-3's rule).
    rc = main([*args, "--out", str(out), "--threshold", "0", "--quiet", "--workers", "1"])
    assert rc == 0
    flagged = [x for x in (out / "exclude.txt").read_text().splitlines() if x[:1] != "#"]
    assert flagged == ["syn-0", "syn-1"]


def test_n_8_finds_shorter_overlaps(tmp_path: Path, bench: tuple[Path, dict[str, str]]) -> None:
    bench_path, texts = bench
    corpus, _ = write_corpus(tmp_path, texts)
    out = tmp_path / "out8"
    rc = main(
        [
            *("scan", "--benchmark", str(bench_path), "--corpus", str(corpus), "--n", "8"),
            *("--out", str(out), "--quiet", "--workers", "1"),
        ]
    )
    assert rc == 0
    items = {r["id"]: r for r in json.loads((out / "report.json").read_text())["items"]}
    assert items["syn-1"]["n_matched"] == 16 - 8 + 1
    assert not items["syn-short"]["too_short"]  # 8 tokens: one 8-gram


def test_export_blacklist_formats(tmp_path: Path, bench: tuple[Path, dict[str, str]]) -> None:
    bench_path, texts = bench
    out = tmp_path / "blacklist.txt"
    assert main(["export", "--benchmark", str(bench_path), "--out", str(out)]) == 0
    lines = [x for x in out.read_text().splitlines() if not x.startswith("#")]
    tokens = normalize(texts["syn-0"])
    assert lines[0] == " ".join(tokens[:13])
    assert len(lines) == len(set(lines)) == 4 * (len(tokens) - 12)
    assert (
        main(["export", "--benchmark", str(bench_path), "--out", str(out), "--format", "hashes"])
        == 0
    )
    hashes = [x for x in out.read_text().splitlines() if not x.startswith("#")]
    assert len(hashes) == len(lines) and all(len(h) == 16 for h in hashes)
    int(hashes[0], 16)
    assert (
        main(["export", "--benchmark", str(bench_path), "--out", str(out), "--format", "items"])
        == 0
    )
    rows = [x.split("\t") for x in out.read_text().splitlines() if not x.startswith("#")]
    assert rows[0] == ["syn-0", " ".join(tokens)] and len(rows) == 5


@pytest.mark.parametrize(
    ("corpus", "message"),
    [
        ("missing.jsonl", "missing.jsonl: no such file or directory"),
        ("data.csv", "data.csv: unknown extension"),
        ("nofield.jsonl", "nofield.jsonl: the record at byte 0 has no text field 'text'"),
        ("hf:org/name", "--allow-hub"),
    ],
)
def test_bad_input_is_one_clear_error(
    tmp_path: Path,
    bench: tuple[Path, dict[str, str]],
    capsys: pytest.CaptureFixture[str],
    corpus: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LLMEVAL_ALLOW_HUB", raising=False)
    (tmp_path / "data.csv").write_text("text\nx\n")
    (tmp_path / "nofield.jsonl").write_text('{"body": "x"}\n')
    target = corpus if corpus.startswith("hf:") else str(tmp_path / corpus)
    rc = main(
        ["scan", "--benchmark", str(bench[0]), "--corpus", target, "--out", str(tmp_path / "o")]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_benchmark_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"id": 1, "question": "x"}\n')
    rc = main(["export", "--benchmark", str(bad), "--out", str(tmp_path / "x.txt")])
    assert rc == 2 and "b.jsonl:1: benchmark record has no 'text' field" in capsys.readouterr().err
    rc = main(["export", "--benchmark", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "x")])
    assert rc == 2 and "no such file" in capsys.readouterr().err


def test_console_script_runs_as_a_module(
    tmp_path: Path, bench: tuple[Path, dict[str, str]]
) -> None:
    bench_path, texts = bench
    corpus, _ = write_corpus(tmp_path, texts)
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pytest_llmeval.contamination._scan", "scan"),
            *("--benchmark", str(bench_path), "--corpus", str(corpus)),
            *("--out", str(tmp_path / "o"), "--workers", "1"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "1 flagged" in proc.stdout and "scanned 1/1 shards" in proc.stderr
    assert (tmp_path / "o" / "report.md").exists()


@pytest.mark.skipif(not GSM8K.exists(), reason="GSM8K data not in ../shared/benchmarks")
def test_real_gsm8k_items_planted_in_a_synthetic_corpus(tmp_path: Path) -> None:
    questions = [json.loads(line)["question"] for line in GSM8K.open(encoding="utf-8")]
    planted = {7: 25, 500: 120, 1318: 299}  # GSM8K row -> corpus document
    rng = random.Random(11)
    docs = [words(rng, rng.randint(40, 120)) for _ in range(300)]
    for row, doc in planted.items():
        docs[doc] = f"{words(rng, 20)}\n\n{questions[row]}\n{words(rng, 20)}"
    corpus = tmp_path / "web.jsonl"
    offsets = []
    with corpus.open("wb") as fh:
        for text in docs:
            offsets.append(fh.tell())
            fh.write(json.dumps({"content": text}).encode() + b"\n")
    out = tmp_path / "out"
    rc = main(
        [
            *("scan", "--benchmark", str(REPO / "benchmarks" / "gsm8k.yaml")),
            *("--data-dir", str(GSM8K.parent.parent), "--corpus", str(corpus)),
            *("--text-field", "content", "--out", str(out), "--workers", "2", "--quiet"),
            *("--shard-mb", "0.01"),
        ]
    )
    assert rc == 0
    data = json.loads((out / "report.json").read_text())
    assert data["summary"]["items"] == len(questions) == 1319
    ids = {f"gsm8k-{row:04d}": doc for row, doc in planted.items()}
    excluded = [x for x in (out / "exclude.txt").read_text().splitlines() if x[:1] != "#"]
    assert sorted(excluded) == sorted(ids)
    items = {r["id"]: r for r in data["items"]}
    for item_id, doc in ids.items():
        r = items[item_id]
        # The item text is "Q: <question>\nA: <answer>": the n-grams over the question are
        # in the corpus, the few that reach into "q" or "a <answer>" are not.
        assert r["n_ngrams"] - r["n_matched"] <= 3 and r["fraction"] > 0.8
        assert [loc["offset"] for loc in r["locations"]] == [offsets[doc]]
        assert r["spans"][0] in " ".join(normalize(docs[doc]))
    assert {r["id"] for r in data["items"] if r["n_matched"]} == set(ids)
