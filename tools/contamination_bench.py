"""Throughput and memory of the n-gram scan on a generated corpus.

``python -m tools.contamination_bench --size-mb 1024 --workers 2`` writes a JSON-lines
corpus of that size (10^6 bytes per MB) into a temporary directory, plants benchmark items in
it, scans it with the local multi-process runner and prints the throughput, the wall time, the
peak resident memory of the main process and of the largest worker, and how many planted
items were found. The corpus is deleted afterwards (unless ``--keep``).

Filler text: sentences drawn at random from other benchmarks' files in the data directory
(MMLU, BBH, ...; read at run time), so that the corpus is real English whose vocabulary
overlaps the benchmark's, which is what the scan's prefilter has to cope with; random words
when no such files are found. Planted items: ``--plant`` GSM8K questions (and their worked
answers), inserted verbatim in the middle of random documents.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from pytest_llmeval.contamination._corpus import plan_shards, resolve_corpus
from pytest_llmeval.contamination._ngram import DEFAULT_N, BenchmarkIndex, scan_local
from pytest_llmeval.contamination._scan import (
    DEFAULT_THRESHOLD,
    _shard_bytes,
    data_dirs,
    load_benchmark,
    peak_rss_mb,
)

REPO = Path(__file__).resolve().parents[1]


def filler_sentences(dirs: Sequence[Path], skip: str, limit: int = 200_000) -> list[str]:
    """Text lines from the benchmark files in ``dirs`` except the folder ``skip``."""
    out: list[str] = []
    for base in dirs:
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if skip in path.relative_to(base).parts[:1] or not path.is_file():
                continue
            if path.suffix == ".csv":
                with path.open(encoding="utf-8", errors="replace", newline="") as fh:
                    out += [" ".join(row) for row in csv.reader(fh)]
            elif path.suffix == ".jsonl":
                with path.open(encoding="utf-8", errors="replace") as fh:
                    for line in fh:
                        try:
                            record = json.loads(line)
                        except ValueError:
                            continue
                        if isinstance(record, dict):
                            out += [v for v in record.values() if isinstance(v, str)]
            if len(out) >= limit:
                return out[:limit]
        if out:
            break
    return [s for s in out if s.strip()]


def random_words(rng: random.Random, count: int = 50_000) -> list[str]:
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    words = ["".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(5000)]
    return [" ".join(rng.choices(words, k=12)) + "." for _ in range(count)]


def write_corpus(
    path: Path,
    size_bytes: int,
    pool: Sequence[str],
    plants: Sequence[str],
    seed: int = 0,
) -> int:
    """Write documents of 3-15 pool sentences until ``size_bytes``; plant each text of
    ``plants`` once, mid-document, spread over the file. Returns the number of documents."""
    rng = random.Random(seed)
    every = max(1, size_bytes // max(1, len(plants) + 1))
    next_plant = every // 2
    planted = written = docs = 0
    with path.open("w", encoding="utf-8") as fh:
        while written < size_bytes:
            parts = rng.choices(pool, k=rng.randint(3, 15))
            if planted < len(plants) and written >= next_plant:
                parts.insert(len(parts) // 2, plants[planted])
                planted += 1
                next_plant += every
            line = json.dumps({"text": " ".join(parts)}) + "\n"
            fh.write(line)
            written += len(line.encode("utf-8"))
            docs += 1
    return docs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--size-mb", type=float, default=1024.0, help="corpus size, 10^6 bytes")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--n", type=int, default=DEFAULT_N)
    parser.add_argument("--plant", type=int, default=100, help="GSM8K items to plant")
    parser.add_argument("--benchmark", default=str(REPO / "benchmarks" / "gsm8k.yaml"))
    parser.add_argument("--data-dir", action="append", default=[])
    parser.add_argument("--dir", type=Path, default=None, help="where to write the corpus")
    parser.add_argument("--keep", action="store_true", help="keep the generated corpus")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    dirs = data_dirs(args.data_dir)
    name, items = load_benchmark(args.benchmark, dirs)
    index = BenchmarkIndex.build(items, args.n)
    rng = random.Random(args.seed)
    chosen = sorted(rng.sample(range(len(items)), min(args.plant, len(items))))
    # Plant the raw question and answer, as a web page copying the problem would show them.
    raw = {item_id: text for item_id, text in items}
    plants = [raw[items[i][0]].removeprefix("Q: ").replace("\nA:", "") for i in chosen]
    pool = filler_sentences(dirs, skip=name) or random_words(rng)
    filler = "benchmark sentences" if len(pool) != 50_000 else "random words"

    workdir = Path(tempfile.mkdtemp(prefix="llmeval-bench-", dir=args.dir))
    try:
        corpus = workdir / "corpus.jsonl"
        t0 = time.perf_counter()
        docs = write_corpus(corpus, int(args.size_mb * 1e6), pool, plants, args.seed)
        gen_s = time.perf_counter() - t0
        size = corpus.stat().st_size
        print(
            f"generated {size / 1e6:,.0f} MB, {docs:,} documents ({filler} filler, "
            f"{len(plants)} planted {name} items) in {gen_s:.0f} s",
            flush=True,
        )
        sources = resolve_corpus([str(corpus)])
        shards = plan_shards(sources, shard_bytes=_shard_bytes(64.0, size, args.workers))
        report = scan_local(shards, index, workers=args.workers)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    planted_ids = {items[i][0] for i in chosen}
    flagged = {r.id for r in report.flagged(DEFAULT_THRESHOLD)}
    overlap = {r.id for r in report.with_overlap()}
    rss = peak_rss_mb()
    print(
        f"scanned {report.bytes_scanned / 1e6:,.0f} MB in {len(shards)} shards on "
        f"{report.workers} workers: wall {report.seconds:.1f} s, "
        f"{report.throughput_mb_s:.1f} MB/s"
    )
    print(
        f"peak RSS: main {rss.get('main')} MB, largest worker {rss.get('workers_max')} MB; "
        f"index: {len(index)} items, {len(index.grams):,} distinct {args.n}-grams"
    )
    print(
        f"planted {len(planted_ids)}: found {len(planted_ids & overlap)} with any overlap, "
        f"{len(planted_ids & flagged)} flagged at {DEFAULT_THRESHOLD}; "
        f"not planted but overlapping: {len(overlap - planted_ids)}, flagged: "
        f"{len(flagged - planted_ids)}"
    )
    if args.keep:
        print(f"corpus kept in {workdir}")
    return 0 if planted_ids <= overlap else 1


if __name__ == "__main__":
    sys.exit(main())
