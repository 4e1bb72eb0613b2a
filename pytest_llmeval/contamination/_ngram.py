"""The n-gram overlap scan: benchmark n-grams in a set, a corpus streamed against it.

The procedure follows the GPT-3 decontamination study (Brown et al., 2020, appendix C):
normalise text, take word n-grams (13 by default), and report which benchmark items share
n-grams with the corpus.

- :func:`normalize` defines the tokens (see its docstring for the exact rule).
- :func:`ngram_hash` is the stable 64-bit id of an n-gram (BLAKE2b, 8-byte digest, of the
  n-gram's tokens joined by single spaces, UTF-8): the same in every process and on every
  machine, unlike Python's salted ``hash()``.
- :class:`BenchmarkIndex` holds the benchmark side: every item's tokens and n-gram hashes
  and the map from hash to items. Memory is bounded by the benchmark, never by the corpus.
- :func:`scan_shard` is a pure, top-level function of (shard, index): it streams one shard
  and returns a small :class:`ShardResult`. It runs unchanged in a local process pool
  (:func:`scan_local`) or as the map step of a distributed engine (:func:`scan_with_dask`).
- :func:`merge` folds shard results into a :class:`ScanReport`: per item, the number and
  fraction of its n-grams found, the matched spans of its text and where they occurred.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import pairwise
from typing import Any

from pytest_llmeval.contamination._corpus import FileRange, Shard, iter_documents, shard_source

#: The n of the GPT-3 decontamination study.
DEFAULT_N = 13
#: Locations kept per item (per shard, and in the merged report).
DEFAULT_MAX_LOCATIONS = 10

_WORD = re.compile(r"[^\W_]+")
# A run of non-ASCII characters: its characters that are not alphanumeric become spaces.
_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")
# ASCII bytes that are not [a-z0-9] become spaces; bytes >= 0x80 (UTF-8 sequences) are kept
# for the Unicode pass. Applied to already lowercased text.
_ASCII_TABLE = bytes(
    b if (0x30 <= b <= 0x39 or 0x61 <= b <= 0x7A or b >= 0x80) else 0x20 for b in range(256)
)


def normalize(text: str) -> list[str]:
    """The tokens of ``text``: lowercase it (``str.lower``), then take the maximal runs of
    alphanumeric characters (``str.isalnum``: Unicode letters and digits). Everything else,
    whitespace, punctuation, symbols and ``_``, separates tokens.

    So ``"Janet’s ducks lay 16-eggs, (daily)!"`` gives ``janet s ducks lay 16 eggs daily``.
    Punctuation separates rather than vanishes (``"16-3-4"`` and ``"16 - 3 - 4"`` both give
    ``16 3 4``); the same rule applies to the benchmark and to the corpus, which is all that
    matching needs. Normalising normalised text (tokens joined by spaces) changes nothing.
    """
    low = text.lower()
    spaced = low.encode("utf-8").translate(_ASCII_TABLE).decode("utf-8")
    if not low.isascii():
        spaced = _NON_ASCII_RUN.sub(_blank_non_alnum, spaced)
    return spaced.split()


def _blank_non_alnum(match: re.Match[str]) -> str:
    return _blank_run(match.group())


@lru_cache(maxsize=65536)
def _blank_run(run: str) -> str:
    return "".join(c if c.isalnum() else " " for c in run)


def normalize_reference(text: str) -> list[str]:
    """The same tokens as :func:`normalize`, by the plain definition (slower; for tests)."""
    return _WORD.findall(text.lower())


def ngram_hash(tokens: Sequence[str]) -> int:
    """The stable 64-bit hash of an n-gram: BLAKE2b (digest size 8) of the tokens joined by
    single spaces, UTF-8 encoded, read as a big-endian unsigned integer."""
    return _text_hash(" ".join(tokens))


def _text_hash(joined: str) -> int:
    digest = hashlib.blake2b(joined.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def hash_hex(value: int) -> str:
    """An n-gram hash as 16 hexadecimal digits (how reports and blacklists write it)."""
    return f"{value:016x}"


# --------------------------------------------------------------------------- the index


@dataclass(frozen=True)
class BenchmarkIndex:
    """The benchmark side of the scan, built once with :meth:`build`.

    ``tokens[i]`` are item ``i``'s normalised tokens; ``hashes[i][p]`` the hash of its n-gram
    starting at token ``p``; ``postings`` maps a hash to the items that contain it.
    ``grams`` (n-gram text -> hash), ``vocabulary`` (the tokens of all n-grams) and
    ``prefilter`` (their adjacent token pairs) are what the scan looks up: a corpus window is
    only joined and looked up in ``grams`` when all its tokens are in the vocabulary and all
    its adjacent pairs are benchmark pairs, which skips almost all of a real corpus cheaply.
    """

    n: int
    ids: tuple[str, ...]
    tokens: tuple[tuple[str, ...], ...]
    hashes: tuple[tuple[int, ...], ...]
    postings: Mapping[int, tuple[int, ...]] = field(repr=False)
    grams: Mapping[str, int] = field(repr=False)
    prefilter: frozenset[tuple[str, str]] = field(repr=False)
    vocabulary: frozenset[str] = field(repr=False)

    @classmethod
    def build(cls, items: Iterable[tuple[str, str]], n: int = DEFAULT_N) -> BenchmarkIndex:
        """Index ``(item_id, text)`` pairs by their word n-grams. Item ids must be unique;
        an item shorter than ``n`` tokens has no n-grams (it is reported as too short)."""
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        ids: list[str] = []
        all_tokens: list[tuple[str, ...]] = []
        all_hashes: list[tuple[int, ...]] = []
        postings: dict[int, list[int]] = {}
        grams: dict[str, int] = {}
        prefilter: set[tuple[str, str]] = set()
        vocabulary: set[str] = set()
        seen: set[str] = set()
        for item_id, text in items:
            if item_id in seen:
                raise ValueError(f"benchmark item id {item_id!r} occurs twice")
            seen.add(item_id)
            index = len(ids)
            tokens = tuple(normalize(text))
            hashes = []
            for p in range(len(tokens) - n + 1):
                joined = " ".join(tokens[p : p + n])
                h = grams.get(joined)
                if h is None:
                    h = grams[joined] = _text_hash(joined)
                hashes.append(h)
                owners = postings.setdefault(h, [])
                if not owners or owners[-1] != index:
                    owners.append(index)
            if len(tokens) >= n:
                vocabulary.update(tokens)
                prefilter.update(pairwise(tokens))
            ids.append(item_id)
            all_tokens.append(tokens)
            all_hashes.append(tuple(hashes))
        return cls(
            n=n,
            ids=tuple(ids),
            tokens=tuple(all_tokens),
            hashes=tuple(all_hashes),
            postings={h: tuple(v) for h, v in postings.items()},
            grams=grams,
            prefilter=frozenset(prefilter),
            vocabulary=frozenset(vocabulary),
        )

    def __len__(self) -> int:
        return len(self.ids)

    def n_ngrams(self, item: int) -> int:
        """The number of distinct n-grams of item ``item`` (0 when it is too short)."""
        return len(set(self.hashes[item]))

    def ngrams(self) -> Iterator[tuple[int, str]]:
        """Every distinct benchmark n-gram once, as ``(hash, normalised text)``, in item
        order (for blacklist exports)."""
        done: set[int] = set()
        for tokens, hashes in zip(self.tokens, self.hashes, strict=True):
            for p, h in enumerate(hashes):
                if h not in done:
                    done.add(h)
                    yield h, " ".join(tokens[p : p + self.n])


# --------------------------------------------------------------------------- scanning


@dataclass(frozen=True)
class Location:
    """Where an item's n-grams occurred: the source (a file path, ``hf:...``, a name), the
    document's row number (``doc``) or byte offset in the file (``offset``), and how many of
    the item's distinct n-grams that document holds."""

    source: str
    doc: int | None
    offset: int | None
    n_matched: int

    def describe(self) -> str:
        where = f"byte {self.offset}" if self.offset is not None else f"row {self.doc}"
        return f"{self.source} {where}"


@dataclass(frozen=True)
class ItemHits:
    """One item's matches in one shard: the distinct n-gram hashes found, the first
    locations (at most the scan's ``max_locations``) and the number of documents."""

    matched: frozenset[int]
    locations: tuple[Location, ...]
    n_documents: int


@dataclass(frozen=True)
class ShardResult:
    """What :func:`scan_shard` returns: small, picklable, independent of the corpus size
    except through the hits (bounded by the benchmark and ``max_locations``)."""

    shard: str
    bytes_scanned: int
    documents: int
    seconds: float
    hits: Mapping[int, ItemHits]


@lru_cache(maxsize=16)
def _run_pattern(length: int) -> re.Pattern[bytes]:
    return re.compile(b"\x01{%d,}" % length)


def _candidate_windows(tokens: list[str], index: BenchmarkIndex) -> Iterator[int]:
    """Start positions of the windows worth looking up: every token is a benchmark token
    and every adjacent pair a benchmark pair (for ``n == 1``: the token is one)."""
    n = index.n
    runs = _run_pattern(n).finditer(bytes(map(index.vocabulary.__contains__, tokens)))
    if n == 1:
        for m in runs:
            yield from range(*m.span())
        return
    pairs = index.prefilter.__contains__
    for run in runs:
        start, end = run.span()
        mask = bytes(map(pairs, pairwise(tokens[start:end])))
        for m in _run_pattern(n - 1).finditer(mask):
            yield from range(start + m.start(), start + m.end() - n + 2)


def scan_shard(
    shard: Shard,
    index: BenchmarkIndex,
    n: int | None = None,
    *,
    max_locations: int = DEFAULT_MAX_LOCATIONS,
) -> ShardResult:
    """Scan one shard against the index: a pure function of its arguments (it reads the
    shard's data and nothing else), so it can run anywhere the shard is readable.

    ``n``, when given, must be the index's n (a guard for callers that pass it along).
    N-grams never span two documents, except the chunks of one long ``.txt`` paragraph.
    """
    if n is not None and n != index.n:
        raise ValueError(f"the index was built for n={index.n}, not n={n}")
    started = time.perf_counter()
    n = index.n
    grams = index.grams
    postings = index.postings
    source = shard_source(shard)
    matched: dict[int, set[int]] = {}
    locations: dict[int, list[Location]] = {}
    documents: dict[int, int] = {}
    n_docs = nbytes = 0
    carry: list[str] = []
    for doc in iter_documents(shard):
        n_docs += 1
        nbytes += doc.nbytes
        tokens = normalize(doc.text)
        if doc.continues and carry:
            tokens = carry + tokens
        carry = tokens[len(tokens) - n + 1 :] if n > 1 else []
        if len(tokens) < n:
            continue
        found: dict[int, set[int]] = {}
        for p in _candidate_windows(tokens, index):
            h = grams.get(" ".join(tokens[p : p + n]))
            if h is not None:
                for item in postings[h]:
                    found.setdefault(item, set()).add(h)
        for item, hs in found.items():
            matched.setdefault(item, set()).update(hs)
            documents[item] = documents.get(item, 0) + 1
            kept = locations.setdefault(item, [])
            if len(kept) < max_locations:
                kept.append(Location(source, doc.doc, doc.offset, len(hs)))
    if isinstance(shard, FileRange) and not shard.compressed and shard.end >= 0:
        nbytes = shard.end - shard.start
    return ShardResult(
        shard=shard.describe(),
        bytes_scanned=nbytes,
        documents=n_docs,
        seconds=time.perf_counter() - started,
        hits={
            item: ItemHits(frozenset(hs), tuple(locations[item]), documents[item])
            for item, hs in matched.items()
        },
    )


# --------------------------------------------------------------------------- merging


@dataclass(frozen=True)
class ItemReport:
    """One benchmark item in the merged report.

    ``n_ngrams`` counts the item's distinct n-grams, ``n_matched`` those found anywhere in
    the corpus, ``fraction`` their ratio (``None`` when the item is shorter than n tokens).
    ``spans`` are the maximal stretches of the item's normalised text covered by matched
    n-grams; ``locations`` the first documents that hold any (at most ``max_locations``),
    ``n_documents`` how many documents do.
    """

    id: str
    n_tokens: int
    n_ngrams: int
    n_matched: int
    fraction: float | None
    spans: tuple[str, ...]
    locations: tuple[Location, ...]
    n_documents: int

    @property
    def too_short(self) -> bool:
        return self.n_ngrams == 0

    def flagged(self, threshold: float) -> bool:
        """At least one matched n-gram and at least ``threshold`` of them matched."""
        return self.n_matched > 0 and self.fraction is not None and self.fraction >= threshold


@dataclass(frozen=True)
class ScanReport:
    """The merged result of a scan. ``seconds`` is the wall time of the whole scan (when the
    runner measured it), ``workers`` the number of processes that scanned."""

    n: int
    items: tuple[ItemReport, ...]
    bytes_scanned: int
    documents: int
    shards: int
    seconds: float | None = None
    workers: int = 1

    @property
    def throughput_mb_s(self) -> float | None:
        """Corpus megabytes (10^6 bytes) scanned per second of wall time."""
        if not self.seconds:
            return None
        return self.bytes_scanned / 1e6 / self.seconds

    def item(self, item_id: str) -> ItemReport:
        for report in self.items:
            if report.id == item_id:
                return report
        raise KeyError(item_id)

    def with_overlap(self) -> list[ItemReport]:
        """Items with at least one matched n-gram (GPT-3's "dirty" rule)."""
        return [r for r in self.items if r.n_matched > 0]

    def flagged(self, threshold: float) -> list[ItemReport]:
        """Items with at least ``threshold`` of their n-grams matched (and at least one)."""
        return [r for r in self.items if r.flagged(threshold)]


def _spans(
    tokens: Sequence[str], hashes: Sequence[int], matched: frozenset[int] | set[int], n: int
) -> tuple[str, ...]:
    spans: list[str] = []
    start = end = -1
    for p, h in enumerate(hashes):
        if h not in matched:
            continue
        if p <= end:  # overlaps or touches the current run
            end = p + n
        else:
            if start >= 0:
                spans.append(" ".join(tokens[start:end]))
            start, end = p, p + n
    if start >= 0:
        spans.append(" ".join(tokens[start:end]))
    return tuple(spans)


class Accumulator:
    """Folds shard results one at a time (memory bounded by the benchmark and
    ``max_locations``, not by the number of shards); :meth:`report` gives the merged view."""

    def __init__(self, index: BenchmarkIndex, max_locations: int = DEFAULT_MAX_LOCATIONS) -> None:
        self.index = index
        self.max_locations = max_locations
        self.matched: dict[int, set[int]] = {}
        self.locations: dict[int, list[Location]] = {}
        self.documents: dict[int, int] = {}
        self.bytes_scanned = 0
        self.n_documents = 0
        self.shards = 0

    def add(self, result: ShardResult) -> None:
        self.shards += 1
        self.bytes_scanned += result.bytes_scanned
        self.n_documents += result.documents
        for item, hits in result.hits.items():
            self.matched.setdefault(item, set()).update(hits.matched)
            self.documents[item] = self.documents.get(item, 0) + hits.n_documents
            self.locations.setdefault(item, []).extend(hits.locations)

    def report(self, *, seconds: float | None = None, workers: int = 1) -> ScanReport:
        index = self.index
        items = []
        for i, item_id in enumerate(index.ids):
            n_ngrams = index.n_ngrams(i)
            hit = self.matched.get(i, set())
            # Results arrive in any order: keep the first locations in corpus order.
            locs = sorted(
                self.locations.get(i, []),
                key=lambda loc: (loc.source, loc.offset or 0, loc.doc or 0),
            )[: self.max_locations]
            items.append(
                ItemReport(
                    id=item_id,
                    n_tokens=len(index.tokens[i]),
                    n_ngrams=n_ngrams,
                    n_matched=len(hit),
                    fraction=len(hit) / n_ngrams if n_ngrams else None,
                    spans=_spans(index.tokens[i], index.hashes[i], hit, index.n) if hit else (),
                    locations=tuple(locs),
                    n_documents=self.documents.get(i, 0),
                )
            )
        return ScanReport(
            n=index.n,
            items=tuple(items),
            bytes_scanned=self.bytes_scanned,
            documents=self.n_documents,
            shards=self.shards,
            seconds=seconds,
            workers=workers,
        )


def merge(
    results: Iterable[ShardResult],
    index: BenchmarkIndex,
    *,
    max_locations: int = DEFAULT_MAX_LOCATIONS,
    seconds: float | None = None,
    workers: int = 1,
) -> ScanReport:
    """Merge shard results (in any order) into the report of the whole corpus."""
    acc = Accumulator(index, max_locations)
    for result in results:
        acc.add(result)
    return acc.report(seconds=seconds, workers=workers)


# --------------------------------------------------------------------------- runners

_WORKER_STATE: dict[str, Any] = {}


def _init_worker(index: BenchmarkIndex, max_locations: int) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _WORKER_STATE["index"] = index
    _WORKER_STATE["max_locations"] = max_locations


def _scan_in_worker(shard: Shard) -> ShardResult:
    return scan_shard(shard, _WORKER_STATE["index"], max_locations=_WORKER_STATE["max_locations"])


def scan_local(
    shards: Sequence[Shard],
    index: BenchmarkIndex,
    *,
    workers: int | None = None,
    max_locations: int = DEFAULT_MAX_LOCATIONS,
    on_result: Callable[[ShardResult], None] | None = None,
) -> ScanReport:
    """Scan the shards in a pool of ``workers`` processes (default: one per CPU; 1 scans in
    this process). The index goes to each worker once; results are merged as they arrive.
    ``on_result`` is called with each shard's result (progress reporting)."""
    workers = max(1, workers or os.cpu_count() or 1)
    workers = min(workers, max(1, len(shards)))
    acc = Accumulator(index, max_locations)
    started = time.perf_counter()
    if workers == 1:
        for shard in shards:
            result = scan_shard(shard, index, max_locations=max_locations)
            acc.add(result)
            if on_result is not None:
                on_result(result)
    else:
        with multiprocessing.get_context().Pool(
            workers, initializer=_init_worker, initargs=(index, max_locations)
        ) as pool:
            for result in pool.imap_unordered(_scan_in_worker, shards, chunksize=1):
                acc.add(result)
                if on_result is not None:
                    on_result(result)
    return acc.report(seconds=time.perf_counter() - started, workers=workers)


def scan_with_dask(
    shards: Sequence[Shard],
    index: BenchmarkIndex,
    client: Any,
    *,
    max_locations: int = DEFAULT_MAX_LOCATIONS,
) -> ScanReport:
    """Scan the shards on a Dask cluster: the index is scattered to every worker once,
    :func:`scan_shard` is mapped over the shards, and results are merged as they complete.

    ``client`` is a ``distributed.Client``; the workers must be able to import this package
    and read the shards' paths. Dask is not a dependency of the package: it comes with the
    ``scan`` extra (``pip install 'pytest-llm-evaluation[scan]'``).
    """
    try:
        import distributed  # noqa: F401  (the futures API the client and the workers run)
    except ImportError:
        raise ImportError(
            "scan_with_dask needs Dask's distributed scheduler, which is not installed: "
            "pip install 'pytest-llm-evaluation[scan]'"
        ) from None
    started = time.perf_counter()
    [index_future] = client.scatter([index], broadcast=True)
    futures = client.map(
        scan_shard,
        list(shards),
        index=index_future,
        max_locations=max_locations,
        pure=False,
    )
    acc = Accumulator(index, max_locations)
    for future in futures:  # in submission order; each result is small
        acc.add(future.result())
        future.release()
    workers = len(client.scheduler_info().get("workers", {})) or 1
    return acc.report(seconds=time.perf_counter() - started, workers=workers)
