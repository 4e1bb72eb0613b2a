"""Corpus sources for the n-gram scan: files, directories, globs and streamed hub datasets.

A corpus is cut into *shards*, small frozen dataclasses that name a piece of the corpus
(a byte range of a text file, some row groups of a parquet file, one shard of a streamed
hub dataset, or documents held in memory). A shard is picklable and cheap to send, so the
same shard list feeds the local process pool and a distributed engine (Dask) alike; a worker
turns it into documents with :func:`iter_documents`.

Formats, by file extension:

- ``.jsonl`` / ``.json`` (JSON lines, one object per line; optionally ``.gz``): the document
  is the object's text field (``text`` unless told otherwise). Its location is the byte
  offset of its line in the (uncompressed) file.
- ``.txt`` (optionally ``.gz``): documents are paragraphs, separated by blank lines (a line of
  only whitespace). Hard-wrapped text keeps its n-grams across line breaks this way. A
  paragraph longer than :data:`MAX_CHUNK_BYTES` is handed over in chunks marked as
  continuations, and the scan carries the last ``n - 1`` tokens over, so no n-gram is lost
  and memory stays bounded even for a file without blank lines. The location is the byte
  offset of the paragraph's (or chunk's) first line.
- ``.parquet``: one document per row of the text column (needs ``pyarrow``); the location is
  the row number in the file.
- ``hf:<dataset id>[:config][:split]``: a Hugging Face dataset read in streaming mode (needs
  ``datasets`` and permission to use the network, ``allow_hub``); split ``train`` unless
  given. The location is the row number within the dataset's shard.

Uncompressed text and JSON-lines files larger than the shard size are split into byte
ranges aligned to line starts (for ``.txt``: to the line after a blank line when one is
near), so that several workers share one big file; every document belongs to exactly one
shard.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, NamedTuple, cast

from pytest_llmeval._errors import DataError

TextFormat = Literal["txt", "jsonl"]

#: Longest stretch of a ``.txt`` paragraph handed to the scan at once.
MAX_CHUNK_BYTES = 1 << 20
#: How far past a tentative shard boundary of a ``.txt`` file to look for a blank line.
_PARAGRAPH_SEARCH_BYTES = 1 << 20
_EXTENSIONS = {
    ".txt": "txt",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".txt.gz": "txt",
    ".jsonl.gz": "jsonl",
    ".json.gz": "jsonl",
    ".parquet": "parquet",
}


class Document(NamedTuple):
    """One corpus document as the scan sees it.

    ``doc`` is the row number (parquet, hub, in-memory), ``offset`` the byte offset in the
    file (text and JSON lines); the other one is ``None``. ``nbytes`` is what the document
    occupied in the source (its raw line bytes, or its UTF-8 text). ``continues`` marks the
    next chunk of a long ``.txt`` paragraph.
    """

    text: str
    doc: int | None
    offset: int | None
    nbytes: int
    continues: bool = False


# --------------------------------------------------------------------------- shards


@dataclass(frozen=True)
class FileRange:
    """Bytes ``[start, end)`` of a text or JSON-lines file (a whole ``.gz`` file: 0, -1).

    ``start`` is a line start; the range holds the documents that begin in it.
    """

    path: str
    fmt: TextFormat
    start: int = 0
    end: int = -1
    text_field: str = "text"

    @property
    def compressed(self) -> bool:
        return self.path.endswith(".gz")

    def describe(self) -> str:
        if self.start == 0 and self.end < 0:
            return self.path
        return f"{self.path}[{self.start}:{self.end}]"


@dataclass(frozen=True)
class ParquetRows:
    """Row groups of a parquet file; ``first_row`` is the file row of the first of them."""

    path: str
    row_groups: tuple[int, ...]
    first_row: int
    text_field: str = "text"

    def describe(self) -> str:
        return f"{self.path}[row groups {self.row_groups[0]}-{self.row_groups[-1]}]"


@dataclass(frozen=True)
class HubShard:
    """Shard ``index`` of ``num_shards`` of a Hugging Face dataset, streamed."""

    dataset: str
    config: str | None
    split: str
    text_field: str = "text"
    index: int = 0
    num_shards: int = 1

    @property
    def source(self) -> str:
        name = f"hf:{self.dataset}" + (f":{self.config}" if self.config else "")
        return f"{name}:{self.split}"

    def describe(self) -> str:
        if self.num_shards == 1:
            return self.source
        return f"{self.source}#{self.index}/{self.num_shards}"


@dataclass(frozen=True)
class Documents:
    """Documents held in memory (tests, or texts produced by another pipeline stage)."""

    source: str
    texts: tuple[str, ...]
    first_doc: int = 0

    def describe(self) -> str:
        return f"{self.source}[{self.first_doc}:{self.first_doc + len(self.texts)}]"


Shard = FileRange | ParquetRows | HubShard | Documents


def shard_source(shard: Shard) -> str:
    """The name that locations of this shard carry (a path, ``hf:...`` or the given name)."""
    if isinstance(shard, HubShard):
        return shard.describe()
    if isinstance(shard, Documents):
        return shard.source
    return shard.path


# --------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class CorpusFile:
    """A local corpus file and its format."""

    path: str
    fmt: Literal["txt", "jsonl", "parquet"]
    size: int


@dataclass(frozen=True)
class HubCorpus:
    """A streamed hub dataset named ``hf:<id>[:config][:split]``."""

    dataset: str
    config: str | None
    split: str

    def describe(self) -> str:
        return f"hf:{self.dataset}" + (f":{self.config}" if self.config else "") + f":{self.split}"


CorpusSource = CorpusFile | HubCorpus


def file_format(path: str | Path) -> Literal["txt", "jsonl", "parquet"] | None:
    """The corpus format of a file name, or ``None`` when its extension is not supported."""
    name = str(path).lower()
    for ext in sorted(_EXTENSIONS, key=len, reverse=True):
        if name.endswith(ext):
            fmt = _EXTENSIONS[ext]
            assert fmt in ("txt", "jsonl", "parquet")
            return fmt  # type: ignore[return-value]
    return None


def _supported() -> str:
    return ", ".join(sorted(_EXTENSIONS))


def parse_hub(spec: str) -> HubCorpus:
    """``hf:<id>[:config][:split]`` -> :class:`HubCorpus` (split ``train`` by default)."""
    body = spec[len("hf:") :]
    parts = body.split(":")
    if not parts[0] or len(parts) > 3:
        raise DataError(f"corpus {spec!r}: expected hf:<dataset id>[:config][:split]")
    config = parts[1] if len(parts) > 1 and parts[1] else None
    split = parts[2] if len(parts) > 2 and parts[2] else "train"
    return HubCorpus(dataset=parts[0], config=config, split=split)


def resolve_corpus(specs: Sequence[str], *, allow_hub: bool = False) -> list[CorpusSource]:
    """Expand corpus arguments (files, directories searched recursively, glob patterns,
    ``hf:`` datasets) into sources, in a stable order.

    A file named explicitly must have a supported extension; inside directories and glob
    matches, files of other types are ignored, but at least one corpus file must be found.
    """
    out: list[CorpusSource] = []
    seen: set[str] = set()

    def add(path: Path) -> None:
        fmt = file_format(path)
        key = str(path)
        if fmt is None or key in seen:
            return
        seen.add(key)
        out.append(CorpusFile(path=key, fmt=fmt, size=path.stat().st_size))

    for spec in specs:
        if spec.startswith("hf:"):
            hub = parse_hub(spec)
            if not allow_hub:
                raise DataError(
                    f"corpus {spec!r} is a Hugging Face dataset: streaming it uses the network; "
                    "pass --allow-hub (or set LLMEVAL_ALLOW_HUB=1) to allow it"
                )
            out.append(hub)
            continue
        path = Path(spec).expanduser()
        if path.is_file():
            if file_format(path) is None:
                raise DataError(f"corpus file {spec}: unknown extension; supported: {_supported()}")
            add(path)
        elif path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and file_format(p))
            if not found:
                raise DataError(f"corpus directory {spec}: no corpus files ({_supported()})")
            for p in found:
                add(p)
        elif glob.has_magic(spec):
            matches = sorted(Path(p) for p in glob.glob(os.path.expanduser(spec), recursive=True))
            files = [p for p in matches if p.is_file() and file_format(p)]
            if not files:
                raise DataError(f"corpus pattern {spec!r}: matches no corpus files")
            for p in files:
                add(p)
        else:
            raise DataError(f"corpus path {spec}: no such file or directory")
    return out


# --------------------------------------------------------------------------- planning


def _next_line_start(fh: IO[bytes], pos: int) -> int:
    """The first line start at or after ``pos``."""
    if pos <= 0:
        return 0
    fh.seek(pos - 1)
    fh.readline()
    return fh.tell()


def _next_paragraph_start(fh: IO[bytes], pos: int, size: int) -> int:
    """A line start at or after ``pos`` that follows a blank line, if one is within
    :data:`_PARAGRAPH_SEARCH_BYTES`; else the first line start at or after ``pos``."""
    line_start = _next_line_start(fh, pos)
    fh.seek(line_start)
    limit = line_start + _PARAGRAPH_SEARCH_BYTES
    while fh.tell() < min(limit, size):
        line = fh.readline()
        if not line:
            break
        if not line.strip():
            return fh.tell()
    return line_start


def _check_jsonl(path: str, text_field: str) -> None:
    """Fail early, naming the file and field, when the first record lacks the text field."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as fh:
        offset = 0
        for line in fh:
            if line.strip():
                _json_text(line, path, offset, text_field)
                return
            offset += len(line)


def _plan_file(source: CorpusFile, shard_bytes: int, text_field: str) -> list[Shard]:
    if source.fmt == "parquet":
        return _plan_parquet(source, shard_bytes, text_field)
    fmt: TextFormat = source.fmt
    if fmt == "jsonl":
        _check_jsonl(source.path, text_field)
    if source.path.endswith(".gz") or source.size <= shard_bytes:
        return [
            FileRange(
                source.path, fmt, 0, -1 if source.path.endswith(".gz") else source.size, text_field
            )
        ]
    shards: list[Shard] = []
    with open(source.path, "rb") as fh:
        start = 0
        while start < source.size:
            tentative = start + shard_bytes
            if tentative >= source.size:
                end = source.size
            elif fmt == "txt":
                end = _next_paragraph_start(fh, tentative, source.size)
            else:
                end = _next_line_start(fh, tentative)
            end = min(max(end, start + 1), source.size)
            shards.append(FileRange(source.path, fmt, start, end, text_field))
            start = end
    return shards


def _import_pyarrow_parquet(path: str) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
    return pq


def _plan_parquet(source: CorpusFile, shard_bytes: int, text_field: str) -> list[Shard]:
    pq = _import_pyarrow_parquet(source.path)
    try:
        meta = pq.ParquetFile(source.path).metadata
    except Exception as exc:  # pyarrow raises several kinds for a broken file
        raise DataError(f"{source.path}: cannot be read as parquet: {exc}") from None
    names = list(meta.schema.names)
    if text_field not in names:
        raise DataError(
            f"{source.path}: no text column {text_field!r} (set --text-field); columns: {names}"
        )
    shards: list[Shard] = []
    groups: list[int] = []
    first_row = row = size = 0
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        if groups and size + rg.total_byte_size > shard_bytes:
            shards.append(ParquetRows(source.path, tuple(groups), first_row, text_field))
            groups, first_row, size = [], row, 0
        groups.append(g)
        size += rg.total_byte_size
        row += rg.num_rows
    if groups:
        shards.append(ParquetRows(source.path, tuple(groups), first_row, text_field))
    return shards


def _load_streaming(dataset: str, config: str | None, split: str) -> Any:
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"corpus hf:{dataset} needs the 'datasets' package (pip install datasets)"
        ) from None
    try:
        return datasets.load_dataset(dataset, config, split=split, streaming=True)
    except Exception as exc:  # the hub raises many kinds; report them all the same way
        raise DataError(
            f"corpus hf:{dataset} (config {config!r}, split {split!r}) could not be opened "
            f"in streaming mode: {exc}"
        ) from None


def _plan_hub(source: HubCorpus, text_field: str, max_shards: int) -> list[Shard]:
    ds = _load_streaming(source.dataset, source.config, source.split)
    available = int(getattr(ds, "num_shards", getattr(ds, "n_shards", 1)) or 1)
    count = max(1, min(max_shards, available))
    return [
        HubShard(source.dataset, source.config, source.split, text_field, i, count)
        for i in range(count)
    ]


def plan_shards(
    sources: Sequence[CorpusSource],
    *,
    shard_bytes: int = 64 << 20,
    text_field: str = "text",
    hub_shards: int = 1,
) -> list[Shard]:
    """Cut the sources into shards of about ``shard_bytes`` (hub datasets into at most
    ``hub_shards`` streams). Checks the text field of JSON-lines and parquet files first, so
    that a wrong ``text_field`` fails before any work starts."""
    if shard_bytes < 1:
        raise ValueError("shard_bytes must be positive")
    shards: list[Shard] = []
    for source in sources:
        if isinstance(source, HubCorpus):
            shards += _plan_hub(source, text_field, hub_shards)
        else:
            shards += _plan_file(source, shard_bytes, text_field)
    return shards


def corpus_bytes(sources: Sequence[CorpusSource]) -> int:
    """The size on disk of the local sources (hub datasets count 0)."""
    return sum(s.size for s in sources if isinstance(s, CorpusFile))


# --------------------------------------------------------------------------- reading


def _json_text(line: bytes, path: str, offset: int, text_field: str) -> str | None:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise DataError(
            f"{path}: the line at byte {offset} is not valid JSON (expected JSON lines): {exc}"
        ) from None
    if not isinstance(record, dict):
        raise DataError(f"{path}: the line at byte {offset} is not a JSON object")
    if text_field not in record:
        raise DataError(
            f"{path}: the record at byte {offset} has no text field {text_field!r} "
            f"(set --text-field); fields: {sorted(record)}"
        )
    value = record[text_field]
    if value is None:
        return None
    if not isinstance(value, str):
        raise DataError(
            f"{path}: text field {text_field!r} at byte {offset} is a "
            f"{type(value).__name__}, not a string"
        )
    return value


def _open_range(shard: FileRange) -> tuple[IO[bytes], int]:
    """The open file positioned at the shard start, and how many bytes to read (-1: all)."""
    try:
        if shard.compressed:
            return cast(IO[bytes], gzip.open(shard.path, "rb")), -1
        fh = open(shard.path, "rb", buffering=1 << 20)  # noqa: SIM115 - the caller closes it
    except OSError as exc:
        raise DataError(f"{shard.path}: cannot be read: {exc}") from None
    fh.seek(shard.start)
    return fh, shard.end - shard.start if shard.end >= 0 else -1


def _lines(shard: FileRange) -> Iterator[tuple[int, bytes]]:
    """``(offset, line)`` for the lines of a file range."""
    fh, budget = _open_range(shard)
    offset = shard.start
    stop = shard.start + budget if budget >= 0 else -1
    try:
        for line in fh:
            if stop >= 0 and offset >= stop:
                break
            yield offset, line
            offset += len(line)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DataError(f"{shard.path}: cannot be read at byte {offset}: {exc}") from None
    finally:
        fh.close()


def _decode(line: bytes) -> str:
    return line.decode("utf-8", errors="replace")


def _iter_txt(shard: FileRange) -> Iterator[Document]:
    parts: list[str] = []
    start = size = 0
    continues = False
    for offset, line in _lines(shard):
        if not line.strip():
            if parts:
                yield Document("".join(parts), None, start, size, continues)
                parts, size, continues = [], 0, False
            continue
        if not parts:
            start = offset
        parts.append(_decode(line))
        size += len(line)
        if size >= MAX_CHUNK_BYTES:
            yield Document("".join(parts), None, start, size, continues)
            parts, size, continues = [], 0, True
    if parts:
        yield Document("".join(parts), None, start, size, continues)


def _iter_jsonl(shard: FileRange) -> Iterator[Document]:
    for offset, line in _lines(shard):
        if not line.strip():
            continue
        text = _json_text(line, shard.path, offset, shard.text_field)
        if text is not None:
            yield Document(text, None, offset, len(line))


def _iter_parquet(shard: ParquetRows) -> Iterator[Document]:
    pq = _import_pyarrow_parquet(shard.path)
    row = shard.first_row
    try:
        pf = pq.ParquetFile(shard.path)
        batches = pf.iter_batches(row_groups=list(shard.row_groups), columns=[shard.text_field])
        for batch in batches:
            for value in batch.column(0).to_pylist():
                if isinstance(value, str):
                    yield Document(value, row, None, len(value.encode("utf-8")))
                elif value is not None:
                    raise DataError(
                        f"{shard.path}: row {row}: text column {shard.text_field!r} holds a "
                        f"{type(value).__name__}, not a string"
                    )
                row += 1
    except DataError:
        raise
    except Exception as exc:  # pyarrow raises several kinds for a broken file
        raise DataError(f"{shard.path}: cannot be read as parquet near row {row}: {exc}") from None


def _iter_hub(shard: HubShard) -> Iterator[Document]:
    ds = _load_streaming(shard.dataset, shard.config, shard.split)
    if shard.num_shards > 1:
        ds = ds.shard(num_shards=shard.num_shards, index=shard.index)
    for row, record in enumerate(ds):
        if shard.text_field not in record:
            raise DataError(
                f"{shard.source}: row {row} has no text field {shard.text_field!r} "
                f"(set --text-field); fields: {sorted(record)}"
            )
        value = record[shard.text_field]
        if isinstance(value, str):
            yield Document(value, row, None, len(value.encode("utf-8")))


def iter_documents(shard: Shard) -> Iterator[Document]:
    """Stream the documents of one shard, one at a time."""
    if isinstance(shard, Documents):
        for i, text in enumerate(shard.texts):
            yield Document(text, shard.first_doc + i, None, len(text.encode("utf-8")))
    elif isinstance(shard, FileRange):
        yield from (_iter_txt(shard) if shard.fmt == "txt" else _iter_jsonl(shard))
    elif isinstance(shard, ParquetRows):
        yield from _iter_parquet(shard)
    else:
        yield from _iter_hub(shard)
