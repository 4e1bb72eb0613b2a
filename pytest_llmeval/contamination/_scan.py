"""``llmeval-contamination``: the n-gram overlap scan and the blacklist export, from the shell.

``llmeval-contamination scan --benchmark B --corpus C [C ...] --out DIR`` writes
``report.json``, ``report.md`` and ``exclude.txt`` into ``DIR``;
``llmeval-contamination export --benchmark B --out blacklist.txt`` writes the benchmark's
n-grams for a training-data pipeline to filter on. Bad input (a missing corpus path, an
unknown extension, a missing text field, a broken spec) ends with one message naming the
file or field, and exit status 2.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_llmeval import _json as strict_json
from pytest_llmeval._errors import DataError, LlmEvalError
from pytest_llmeval.contamination._corpus import (
    CorpusFile,
    corpus_bytes,
    plan_shards,
    resolve_corpus,
)
from pytest_llmeval.contamination._ngram import (
    DEFAULT_MAX_LOCATIONS,
    DEFAULT_N,
    BenchmarkIndex,
    ItemReport,
    ScanReport,
    ShardResult,
    hash_hex,
    normalize,
    scan_local,
)
from pytest_llmeval.dataset import env_data_dirs, hub_allowed, jsonl_rows, path_list

#: Default ``--threshold``: the fraction of an item's distinct n-grams found in the corpus
#: at which the item is flagged (and listed in ``exclude.txt``).
DEFAULT_THRESHOLD = 0.5
NORMALIZATION = (
    "lowercase (str.lower); tokens are the maximal runs of alphanumeric characters "
    "(str.isalnum); everything else separates tokens"
)
HASH = "blake2b, digest_size=8, of the n-gram's tokens joined by single spaces (UTF-8), hex"
DEFAULT_DATA_DIR = Path("..") / "shared" / "benchmarks"


# --------------------------------------------------------------------------- benchmark


def data_dirs(cli: Sequence[str] = ()) -> list[Path]:
    """``--data-dir`` values, then ``LLMEVAL_DATA_DIR``, then ``../shared/benchmarks``."""
    dirs = [d for value in cli for d in path_list(value)]
    return [*dirs, *env_data_dirs(), DEFAULT_DATA_DIR]


def _jsonl_items(path: Path) -> list[tuple[str, str]]:
    items: list[tuple[str, str]] = []
    try:
        for lineno, record in jsonl_rows(path):
            for key in ("id", "text"):
                if key not in record:
                    raise DataError(
                        f"{path}:{lineno}: benchmark record has no {key!r} field "
                        f"(a benchmark JSONL needs 'id' and 'text')"
                    )
            if not isinstance(record["text"], str):
                raise DataError(f"{path}:{lineno}: field 'text' is not a string")
            items.append((str(record["id"]), record["text"]))
    except OSError as exc:
        raise DataError(f"{path}: cannot be read: {exc}") from None
    return items


def load_benchmark(
    path: str | Path, dirs: Sequence[Path] | None = None
) -> tuple[str, list[tuple[str, str]]]:
    """The benchmark's name and its ``(item id, text)`` pairs.

    ``path`` is a task spec (``.yaml``/``.yml``; an item's text is its rendered question,
    a space and its target, as :class:`~pytest_llmeval.eval.TaskRunner` prepares them) or a
    JSON-lines file of ``{"id": ..., "text": ...}`` records.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"benchmark {path}: no such file (a task spec .yaml or a .jsonl)")
    if path.suffix.lower() in (".jsonl", ".json"):
        return path.stem, _jsonl_items(path)
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise DataError(f"benchmark {path}: expected a task spec (.yaml) or a .jsonl file")
    from pytest_llmeval.dataset import load_items
    from pytest_llmeval.eval import TaskRunner
    from pytest_llmeval.task import load_task_spec

    dirs = list(dirs) if dirs is not None else data_dirs()
    spec = load_task_spec(path)
    runner = TaskRunner(spec, dirs)
    texts = []
    for item in load_items(spec, dirs):
        prepared = runner.prepare(item)
        texts.append((item.id, f"{prepared.question} {prepared.target}".strip()))
    return spec.name, texts


# --------------------------------------------------------------------------- reports


def peak_rss_mb() -> dict[str, float]:
    """Peak resident memory in MB of this process and of its largest finished child."""
    try:
        import resource
    except ImportError:  # not on this platform
        return {}
    unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, else KiB

    def mb(who: int) -> float:
        return round(resource.getrusage(who).ru_maxrss * unit / 1e6, 1)

    return {"main": mb(resource.RUSAGE_SELF), "workers_max": mb(resource.RUSAGE_CHILDREN)}


def _sorted_items(report: ScanReport) -> list[ItemReport]:
    return sorted(report.items, key=lambda r: (-(r.fraction or 0.0), -r.n_matched, r.id))


def summary(report: ScanReport, threshold: float) -> dict[str, Any]:
    """The numbers of the report's summary."""
    mb_s = report.throughput_mb_s
    return {
        "items": len(report.items),
        "items_with_ngrams": sum(1 for r in report.items if not r.too_short),
        "too_short": sum(1 for r in report.items if r.too_short),
        "any_overlap": len(report.with_overlap()),
        "flagged": len(report.flagged(threshold)),
        "corpus_bytes": report.bytes_scanned,
        "documents": report.documents,
        "shards": report.shards,
        "workers": report.workers,
        "seconds": round(report.seconds, 3) if report.seconds is not None else None,
        "mb_per_s": round(mb_s, 2) if mb_s is not None else None,
    }


def report_dict(
    report: ScanReport,
    *,
    benchmark: str,
    corpus: Sequence[str],
    threshold: float,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON report: settings, summary and every item (sorted by fraction)."""
    return {
        "benchmark": benchmark,
        "corpus": list(corpus),
        "n": report.n,
        "threshold": threshold,
        "normalization": NORMALIZATION,
        "hash": HASH,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "summary": {**summary(report, threshold), **(extra or {})},
        "items": [
            {
                "id": r.id,
                "n_tokens": r.n_tokens,
                "n_ngrams": r.n_ngrams,
                "n_matched": r.n_matched,
                "fraction": r.fraction,
                "flagged": r.flagged(threshold),
                "too_short": r.too_short,
                "n_documents": r.n_documents,
                "spans": list(r.spans),
                "locations": [
                    {
                        "source": loc.source,
                        "doc": loc.doc,
                        "offset": loc.offset,
                        "n_matched": loc.n_matched,
                    }
                    for loc in r.locations
                ],
            }
            for r in _sorted_items(report)
        ],
    }


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_markdown(data: dict[str, Any]) -> str:
    """The Markdown report from :func:`report_dict`'s data."""
    s = data["summary"]
    threshold = data["threshold"]
    lines = [
        f"# Contamination report: {_md(data['benchmark'])}",
        "",
        f"{data['n']}-gram overlap of the benchmark with the corpus: "
        + ", ".join(f"`{_md(c)}`" for c in data["corpus"]),
        "",
        "| | |",
        "| --- | --- |",
        f"| items scanned | {s['items']} ({s['too_short']} shorter than {data['n']} tokens) |",
        f"| items with any {data['n']}-gram in the corpus | {s['any_overlap']} |",
        f"| items flagged (≥ {threshold:.0%} of their n-grams) | {s['flagged']} |",
        f"| corpus | {s['corpus_bytes'] / 1e6:,.1f} MB, {s['documents']:,} documents, "
        f"{s['shards']} shards |",
        f"| wall time | {s['seconds']} s on {s['workers']} workers |",
        f"| throughput | {s['mb_per_s']} MB/s |",
    ]
    if "peak_rss_mb" in s:
        rss = s["peak_rss_mb"]
        lines.append(
            f"| peak memory | {rss.get('main')} MB main process, "
            f"{rss.get('workers_max')} MB largest worker |"
        )
    lines += [
        "",
        "How to read it: *fraction* is the share of an item's distinct n-grams found anywhere "
        "in the corpus (text normalised: lowercase, punctuation removed). An item with any "
        "overlap shares at least one n-gram (GPT-3's rule, sensitive to common phrases); a "
        f"flagged item has at least {threshold:.0%} of them, i.e. a substantial part of its "
        "text appears in the corpus. *Span* is the longest matched stretch of the item.",
        "",
    ]
    hits = [r for r in data["items"] if r["n_matched"] > 0]
    if not hits:
        lines.append("No benchmark n-gram occurs in the corpus.")
    else:
        lines += [
            "| item | matched / n-grams | fraction | flagged | documents | first location "
            "| longest matched span |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in hits:
            loc = r["locations"][0] if r["locations"] else None
            where = ""
            if loc is not None:
                at = f"byte {loc['offset']}" if loc["offset"] is not None else f"row {loc['doc']}"
                where = f"{loc['source']} {at}"
            span = max(r["spans"], key=len) if r["spans"] else ""
            lines.append(
                f"| {_md(r['id'])} | {r['n_matched']} / {r['n_ngrams']} | {r['fraction']:.2f} "
                f"| {'yes' if r['flagged'] else ''} | {r['n_documents']} | {_md(where)} "
                f"| {_md(_short(span))} |"
            )
        clean = s["items_with_ngrams"] - len(hits)
        lines += ["", f"{clean} items with no overlap are not listed (see report.json)."]
    return "\n".join(lines) + "\n"


def exclusion_text(data: dict[str, Any]) -> str:
    """``exclude.txt``: the flagged item ids, one per line, after ``#`` header comments."""
    flagged = [r["id"] for r in data["items"] if r["flagged"]]
    header = [
        "# llmeval-contamination exclusion list",
        f"# benchmark: {data['benchmark']}",
        f"# n: {data['n']}, threshold: {data['threshold']} "
        "(fraction of an item's distinct n-grams found in the corpus)",
        f"# corpus: {', '.join(data['corpus'])}",
        f"# flagged: {len(flagged)} of {data['summary']['items']} items",
    ]
    return "\n".join(header + flagged) + "\n"


def write_reports(data: dict[str, Any], out: Path) -> None:
    """Write ``report.json``, ``report.md`` and ``exclude.txt`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(strict_json.dumps(data, indent=1) + "\n", encoding="utf-8")
    (out / "report.md").write_text(render_markdown(data), encoding="utf-8")
    (out / "exclude.txt").write_text(exclusion_text(data), encoding="utf-8")


def write_blacklist(
    index: BenchmarkIndex, items: Sequence[tuple[str, str]], path: Path, fmt: str, name: str
) -> int:
    """Write the blacklist; returns the number of entries.

    ``ngrams``: each distinct normalised n-gram once per line; ``hashes``: their 64-bit
    hashes in hex; ``items``: ``id<TAB>normalised item text`` per item.
    """
    header = [
        f"# llmeval-contamination blacklist: {name}, format {fmt}, n {index.n}",
        f"# normalisation: {NORMALIZATION}",
    ]
    if fmt == "hashes":
        header.append(f"# hash: {HASH}")
    count = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        fh.write("\n".join(header) + "\n")
        if fmt == "items":
            for item_id, text in items:
                fh.write(f"{item_id}\t{' '.join(normalize(text))}\n")
                count += 1
        else:
            for h, gram in index.ngrams():
                fh.write((hash_hex(h) if fmt == "hashes" else gram) + "\n")
                count += 1
    return count


# --------------------------------------------------------------------------- CLI


def _threshold(value: str) -> float:
    x = float(value)
    if not 0.0 <= x <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a fraction in [0, 1], got {value}")
    return x


def _positive(value: str) -> int:
    x = int(value)
    if x < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return x


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llmeval-contamination",
        description="N-gram overlap between a benchmark and a training corpus.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--benchmark",
            required=True,
            help="a task spec (.yaml) or a JSONL file of {id, text} records",
        )
        p.add_argument("--n", type=_positive, default=DEFAULT_N, help="n-gram size (13)")
        p.add_argument(
            "--data-dir",
            action="append",
            default=[],
            help="benchmark data directory for a task spec (repeatable; then "
            "LLMEVAL_DATA_DIR, then ../shared/benchmarks)",
        )

    scan = sub.add_parser("scan", help="scan a corpus for benchmark n-grams")
    common(scan)
    scan.add_argument(
        "--corpus",
        nargs="+",
        required=True,
        help="files, directories, glob patterns (.jsonl/.json/.txt[.gz], .parquet) or "
        "hf:<dataset id>[:config][:split]",
    )
    scan.add_argument("--out", required=True, type=Path, help="output directory")
    scan.add_argument(
        "--threshold",
        type=_threshold,
        default=DEFAULT_THRESHOLD,
        help="flag an item when this fraction of its n-grams occurs in the corpus "
        f"(default {DEFAULT_THRESHOLD}; 0 flags any overlap, as GPT-3 did)",
    )
    scan.add_argument("--workers", type=_positive, default=None, help="processes (CPU count)")
    scan.add_argument("--text-field", default="text", help="JSON/parquet/hub text field")
    scan.add_argument(
        "--shard-mb",
        type=float,
        default=64.0,
        help="largest shard in MB (shards are also cut small enough to give every worker several)",
    )
    scan.add_argument(
        "--max-locations",
        type=_positive,
        default=DEFAULT_MAX_LOCATIONS,
        help="corpus locations kept per item",
    )
    scan.add_argument(
        "--allow-hub",
        action="store_true",
        help="allow hf: corpora (streams over the network); also LLMEVAL_ALLOW_HUB=1",
    )
    scan.add_argument("--quiet", action="store_true", help="no progress on stderr")

    export = sub.add_parser("export", help="write the benchmark n-grams as a blacklist")
    common(export)
    export.add_argument("--out", required=True, type=Path, help="the blacklist file")
    export.add_argument(
        "--format",
        choices=("ngrams", "hashes", "items"),
        default="ngrams",
        help="ngrams: normalised n-gram text per line; hashes: their 64-bit hashes (hex); "
        "items: id<TAB>normalised item text",
    )
    return parser


def _shard_bytes(shard_mb: float, total: int, workers: int) -> int:
    """At most ``shard_mb``, and small enough for about 4 shards per worker, at least 1 MB
    (unless ``shard_mb`` itself is smaller)."""
    cap = max(1, int(shard_mb * 1e6))
    balanced = max(1_000_000, math.ceil(total / (4 * workers))) if total else cap
    return min(cap, balanced)


def run_scan(args: argparse.Namespace) -> int:
    name, items = load_benchmark(args.benchmark, data_dirs(args.data_dir))
    index = BenchmarkIndex.build(items, args.n)
    sources = resolve_corpus(args.corpus, allow_hub=args.allow_hub or hub_allowed())
    workers = args.workers or os.cpu_count() or 1
    total = corpus_bytes(sources)
    shards = plan_shards(
        sources,
        shard_bytes=_shard_bytes(args.shard_mb, total, workers),
        text_field=args.text_field,
        hub_shards=workers,
    )
    done = [0, 0]
    started = time.perf_counter()

    def progress(result: ShardResult) -> None:
        done[0] += 1
        done[1] += result.bytes_scanned
        if not args.quiet:
            rate = done[1] / 1e6 / max(time.perf_counter() - started, 1e-9)
            print(
                f"\rscanned {done[0]}/{len(shards)} shards, {done[1] / 1e6:,.0f} MB, "
                f"{rate:.1f} MB/s",
                end="",
                file=sys.stderr,
                flush=True,
            )

    report = scan_local(
        shards, index, workers=workers, max_locations=args.max_locations, on_result=progress
    )
    if not args.quiet and shards:
        print(file=sys.stderr)
    corpus = [s.path if isinstance(s, CorpusFile) else s.describe() for s in sources]
    data = report_dict(
        report,
        benchmark=name,
        corpus=corpus,
        threshold=args.threshold,
        extra={"peak_rss_mb": peak_rss_mb()},
    )
    write_reports(data, args.out)
    s = data["summary"]
    print(
        f"{name}: {s['items']} items, {s['any_overlap']} with any {args.n}-gram overlap, "
        f"{s['flagged']} flagged at {args.threshold}; {s['corpus_bytes'] / 1e6:,.1f} MB in "
        f"{s['seconds']} s ({s['mb_per_s']} MB/s, {s['workers']} workers); "
        f"report in {args.out}"
    )
    return 0


def run_export(args: argparse.Namespace) -> int:
    name, items = load_benchmark(args.benchmark, data_dirs(args.data_dir))
    index = BenchmarkIndex.build(items, args.n)
    count = write_blacklist(index, items, args.out, args.format, name)
    print(f"{name}: wrote {count} {args.format} to {args.out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The ``llmeval-contamination`` entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "scan":
            return run_scan(args)
        return run_export(args)
    except (LlmEvalError, ValueError) as exc:
        print(f"llmeval-contamination: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
