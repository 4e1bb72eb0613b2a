"""Benchmark data: local files first (offline), the Hugging Face hub as the online path.

Local files are looked up in the data directories in order (``--llm-data-dir``,
``LLMEVAL_DATA_DIR``, the ``llm_data_dir`` ini option). Rows are plain dicts; the spec's
field map adds canonical names (``question``, ``choices``, ...) next to the raw fields.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_llmeval._errors import DataError
from pytest_llmeval.task import DatasetSpec, DateWindow, TaskSpec

Doc = dict[str, Any]


class DataNotInstalled(DataError):
    """A benchmark's data folder is absent from every data directory (not a typo in a path
    inside it): its items are reported as skipped rather than failing collection."""


def path_list(value: str) -> list[Path]:
    """Paths separated by ``os.pathsep`` (as in ``--llm-data-dir`` and ``LLMEVAL_DATA_DIR``)."""
    return [Path(p).expanduser() for p in value.split(os.pathsep) if p]


def env_data_dirs() -> list[Path]:
    """The data directories named by ``LLMEVAL_DATA_DIR`` (none when it is unset)."""
    return path_list(os.environ.get("LLMEVAL_DATA_DIR", ""))


def hub_allowed() -> bool:
    """Whether specs may fall back to the Hugging Face hub (``run.hub=true`` or
    ``LLMEVAL_ALLOW_HUB=1``). Off by default: runs never touch the network unless asked."""
    return os.environ.get("LLMEVAL_ALLOW_HUB", "") not in ("", "0", "false", "no")


def _root(path_template: str) -> str:
    """The benchmark's folder: the first component of a relative data path."""
    return Path(path_template).parts[0]


def _in_benchmark_folder(path_template: str) -> bool:
    """Whether a data path lies in a benchmark's folder (``gsm8k/test.jsonl``); for a bare
    file name or an absolute path, a missing file is an error, never "not installed"."""
    path = Path(path_template)
    return not (path.is_absolute() or len(path.parts) < 2 or "{subset}" in path.parts[0])


def benchmark_installed(path_template: str, data_dirs: Sequence[Path]) -> bool:
    """False when the data path's top folder exists in no data directory."""
    if not _in_benchmark_folder(path_template):
        return True  # a bare file name or absolute path: a missing file is an error
    return any((base / Path(path_template).parts[0]).exists() for base in data_dirs)


def _not_installed(
    what: str, relative: str, path_template: str, data_dirs: Sequence[Path], hub: str
) -> DataNotInstalled:
    """A task whose own data file is in no data directory: its benchmark's folder is
    absent, or holds other files (another task's: ARC-Challenge beside ARC-Easy)."""
    dirs = ", ".join(str(d) for d in data_dirs) or "(none configured)"
    root = _root(path_template)
    if not benchmark_installed(path_template, data_dirs):
        where = f"and no {root!r} folder in the data directories [{dirs}]"
    else:
        where = (
            f"in the data directories [{dirs}] (their {root!r} folder holds other files, not "
            "this one: install it, or check dataset.path)"
        )
    return DataNotInstalled(
        f"{what}: benchmark data not installed: data file {relative!r} not found, {where}; "
        f"put a local copy there (--llm-data-dir, LLMEVAL_DATA_DIR){hub}"
    )


@dataclass(frozen=True)
class Item:
    """One benchmark item: a stable id, its position, its subset and its document.

    ``problem``: why the item's row cannot be trusted (a CSV row with fewer or more fields
    than the header), found when the file is read; such an item fails alone."""

    id: str
    index: int
    doc: Doc = field(hash=False, compare=False)
    subset: str | None = None
    problem: str | None = field(default=None, compare=False)


def _infer_format(path: Path, declared: str | None) -> str:
    if declared:
        return declared
    suffix = path.suffix.lower().lstrip(".")
    if suffix in ("jsonl", "json", "csv", "parquet"):
        return suffix
    raise DataError(f"{path}: cannot tell the format from the extension; set dataset.format")


def _json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words (for a message)."""
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "null" if value is None else "an object"


def _clip(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def not_utf8(path: Path) -> DataError:
    """Where a text data file stops being UTF-8: ``FILE:LINE``, the byte and its place in
    the line (the decoder's own message gives only an offset into a read buffer)."""
    raw = path.read_bytes()
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return DataError(
            f"{path}:1: the file is UTF-16 (it starts with a UTF-16 byte order mark), not "
            "UTF-8; re-save it as UTF-8"
        )
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = exc.start
        line_start = raw.rfind(b"\n", 0, start) + 1
        lineno = raw.count(b"\n", 0, start) + 1
        return DataError(
            f"{path}:{lineno}: byte 0x{raw[start]:02x} (byte "
            f"{start - line_start + 1} of the line) is not UTF-8 ({exc.reason}): the file's "
            "encoding is not UTF-8 (Windows-1252 or Latin-1?); re-save it as UTF-8 (e.g. "
            f"iconv -f cp1252 -t utf-8 {path.name} > new-{path.name})"
        )
    return DataError(f"{path}: cannot be decoded as UTF-8")


def read_records(
    path: Path,
    fmt: str | None = None,
    json_key: str | None = None,
    problems: dict[int, str] | None = None,
) -> list[Doc]:
    """Read all rows of a local jsonl/json/csv/parquet file as dicts.

    ``problems`` (filled in when given): row index -> why that row cannot be trusted (a CSV
    row with fewer fields than the header, whose missing fields would read as None, or
    with more)."""
    kind = _infer_format(path, fmt)
    try:
        if kind == "jsonl":
            return _read_jsonl(path)
        if kind == "json":
            return _read_json(path, json_key)
        if kind == "csv":
            return _read_csv(path, problems)
        if kind == "parquet":
            return _read_parquet(path)
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    except OSError as exc:
        raise DataError(f"{path}: cannot be read: {exc}") from None
    except (csv.Error, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: cannot be parsed as {kind}: {exc}") from None
    raise DataError(f"{path}: unknown format {kind!r}")


def jsonl_rows(path: Path) -> Iterator[tuple[int, Doc]]:
    """``(line number, row)`` for each non-blank line of a JSON-lines file; a line that is
    not a JSON object is a :class:`DataError` naming the file and the line."""
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{lineno}: invalid JSON line: {exc}") from None
            if not isinstance(row, dict):
                raise DataError(
                    f"{path}:{lineno}: expected a JSON object (one row of "
                    f'{{"field": value, ...}} per line), got {_json_kind(row)}: '
                    f"{_clip(line.strip())}"
                )
            yield lineno, row


def _read_jsonl(path: Path) -> list[Doc]:
    return [row for _, row in jsonl_rows(path)]


def _read_json(path: Path, json_key: str | None) -> list[Doc]:
    with path.open(encoding="utf-8") as fh:
        data = json.load(fh)
    if json_key is not None:
        if not isinstance(data, Mapping) or json_key not in data:
            raise DataError(f"{path}: no top-level key {json_key!r} (dataset.json_key)")
        data = data[json_key]
    if not isinstance(data, list):
        raise DataError(
            f"{path}: expected a JSON list of objects"
            + ("" if json_key else "; set dataset.json_key if the list is under a key")
        )
    for index, element in enumerate(data):
        if not isinstance(element, dict):
            raise DataError(
                f"{path}: expected a JSON list of objects, but element {index} "
                + (f"of {json_key!r} " if json_key else "")
                + f"is {_json_kind(element)}: {_clip(json.dumps(element))}"
            )
    return list(data)


def _read_csv(path: Path, problems: dict[int, str] | None) -> list[Doc]:
    rows: list[Doc] = []
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        for row in reader:
            width = len(reader.fieldnames or ())
            extra = row.pop(None, None)
            missing = [k for k, v in row.items() if v is None]
            if (missing or extra) and problems is not None:
                have = width - len(missing) + len(extra or ())
                problems[len(rows)] = (
                    f"{path}:{reader.line_num}: a row of {have} fields where the "
                    f"header has {width}"
                    + (f" (no {', '.join(missing)})" if missing else "")
                    + "; fix the row (a quote or separator is probably missing)"
                )
            rows.append(dict(row))
    return rows


def _read_parquet(path: Path) -> list[Doc]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
    import pyarrow as pa

    try:
        return list(pq.read_table(path).to_pylist())
    except (pa.ArrowException, ValueError) as exc:  # not a parquet file, or damaged
        raise DataError(f"{path}: cannot be read as parquet: {exc}") from None


def resolve_local(path_template: str, subset: str | None, data_dirs: Sequence[Path]) -> Path | None:
    """The first existing file for ``path_template`` (with ``{subset}`` filled in)."""
    relative = path_template.replace("{subset}", subset) if subset is not None else path_template
    candidate = Path(relative).expanduser()
    if candidate.is_absolute():
        return candidate if candidate.exists() else None
    for base in data_dirs:
        if (base / candidate).exists():
            return base / candidate
    return None


def discover_subsets(path_template: str, data_dirs: Sequence[Path]) -> list[str]:
    """Subsets found as local files matching ``path_template`` (first data dir that has any)."""
    head, _, tail = path_template.partition("{subset}")
    pattern = re.compile(re.escape(head) + r"(.+?)" + re.escape(tail) + r"$")
    glob = path_template.replace("{subset}", "*")
    bases = [Path("/")] if Path(path_template).is_absolute() else list(data_dirs)
    for base in bases:
        found = []
        for match in base.glob(glob.lstrip("/") if base == Path("/") else glob):
            rel = match.relative_to(base).as_posix()
            if base == Path("/"):
                rel = "/" + rel
            m = pattern.match(rel)
            if m:
                found.append(m.group(1))
        if found:
            return sorted(found)
    return []


def _apply_fields(row: Mapping[str, Any], fields: Mapping[str, Any], where: str) -> Doc:
    doc: Doc = dict(row)
    for name, src in fields.items():
        if isinstance(src, str):
            if src not in row:
                raise DataError(
                    f"{where}: field map {name}: {src!r} is not a column; have {sorted(row)}"
                )
            doc[name] = row[src]
        else:
            missing = [s for s in src if s not in row]
            if missing:
                raise DataError(
                    f"{where}: field map {name}: no column(s) {missing}; have {sorted(row)}"
                )
            doc[name] = [row[s] for s in src]
    return doc


def _load_hub(spec: DatasetSpec, subset: str | None, split: str | None = None) -> list[Doc]:
    assert spec.hub is not None
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"hub dataset {spec.hub.id!r} needs the 'datasets' package "
            "(pip install datasets), or put a local copy in the data directory"
        ) from None
    config = spec.hub.config
    if config is not None and subset is not None:
        config = config.replace("{subset}", subset).replace("{{subset}}", subset)
    try:
        ds = datasets.load_dataset(spec.hub.id, config, split=split or spec.hub.split)
    except Exception as exc:  # the hub raises many kinds; report them all the same way
        raise DataError(
            f"hub dataset {spec.hub.id!r} (config {config!r}) could not be loaded: {exc}. "
            "Offline? Put a local copy in the data directory (LLMEVAL_DATA_DIR)."
        ) from None
    return [dict(r) for r in ds]


def load_rows(
    spec: DatasetSpec,
    subset: str | None,
    data_dirs: Sequence[Path],
    what: str,
    hub_split: str | None = None,
    problems: dict[int, str] | None = None,
    own_data: bool = True,
) -> tuple[list[Doc], str]:
    """Rows of one (sub)set with the field map applied, and a description of where from.
    ``problems``: as in :func:`read_records`; a row with a problem keeps the fields it has.
    A missing file is :class:`DataNotInstalled` when its benchmark's folder is absent, or
    when ``own_data`` is False (none of the task's own data files is there); else an error."""
    if spec.path is not None:
        local = resolve_local(spec.path, subset, data_dirs)
        if local is not None:
            found: dict[int, str] = {}
            rows = read_records(local, spec.format, spec.json_key, found)
            docs = []
            for i, r in enumerate(rows):
                if i in found:  # a short row cannot satisfy the field map: keep it as it is
                    docs.append(dict(r))
                    continue
                docs.append(_apply_fields(r, spec.fields, f"{local}"))
            if problems is not None:
                problems.update(found)
            elif found:
                raise DataError(next(iter(found.values())))
            return docs, str(local)
    if spec.hub is not None and hub_allowed():
        rows = _load_hub(spec, subset, hub_split)
        fields = spec.hub.fields if spec.hub.fields is not None else spec.fields
        where = f"hub:{spec.hub.id}"
        return [_apply_fields(r, fields, where) for r in rows], where
    dirs = ", ".join(str(d) for d in data_dirs) or "(none configured)"
    relative = spec.path.replace("{subset}", subset) if (spec.path and subset) else spec.path
    hub = (
        f" or allow the hub ({spec.hub.id}) with --llm-set run.hub=true"
        if spec.hub is not None
        else " (the spec names no hub dataset)"
    )
    if (
        spec.path is not None
        and relative is not None
        and _in_benchmark_folder(spec.path)
        and (not own_data or not benchmark_installed(spec.path, data_dirs))
    ):
        raise _not_installed(what, relative, spec.path, data_dirs, hub)
    raise DataError(
        f"{what}: data file {relative!r} not found in the data directories [{dirs}]; "
        f"set --llm-data-dir or LLMEVAL_DATA_DIR{hub}"
    )


def task_subsets(spec: TaskSpec, data_dirs: Sequence[Path]) -> list[str | None]:
    """The subsets of a task in their fixed order (``[None]`` for a task without subsets)."""
    subsets = spec.dataset.subsets
    if subsets is None:
        return [None]
    if subsets == "*":
        assert spec.dataset.path is not None
        found = discover_subsets(spec.dataset.path, data_dirs)
        if not found:
            dirs = ", ".join(str(d) for d in data_dirs) or "(none configured)"
            if not benchmark_installed(spec.dataset.path, data_dirs):
                raise DataNotInstalled(
                    f"{spec.source}: dataset.subsets is '*' but the benchmark data is not "
                    f"installed: no {_root(spec.dataset.path)!r} folder in the data directories "
                    f"[{dirs}] (--llm-data-dir, LLMEVAL_DATA_DIR)"
                )
            if _in_benchmark_folder(spec.dataset.path):  # none of the task's own files
                raise DataNotInstalled(
                    f"{spec.source}: dataset.subsets is '*' but the benchmark data is not "
                    f"installed: no file matches {spec.dataset.path!r} in the data "
                    f"directories [{dirs}] (their {_root(spec.dataset.path)!r} folder holds "
                    "other files: install these, or check dataset.path) (--llm-data-dir, "
                    "LLMEVAL_DATA_DIR)"
                )
            raise DataError(
                f"{spec.source}: dataset.subsets is '*' but no file matches "
                f"{spec.dataset.path!r} in the data directories [{dirs}]"
            )
        return list(found)
    return list(subsets)


def task_data_files(spec: TaskSpec, data_dirs: Sequence[Path]) -> list[Path]:
    """The local files a task reads (its items of every subset, few-shot sources and
    few-shot text files) that exist; hub data has no file here."""
    found: list[Path] = []
    subsets = task_subsets(spec, data_dirs)
    templates = [spec.dataset.path]
    if spec.fewshot.k and spec.fewshot.source is not None:
        templates.append(spec.fewshot.source.path)
    templates.append(spec.fewshot.text_file)
    for template in templates:
        if template is None:
            continue
        for subset in subsets if "{subset}" in template else [None]:
            path = resolve_local(template, subset, data_dirs)
            if path is not None and path.is_file():
                found.append(path)
    return sorted(set(found))


def describe_no_rows(spec: TaskSpec, data_dirs: Sequence[Path]) -> str:
    """Why :func:`load_items` found no item: the files it read and their row counts, and
    the date window when one is set."""
    files = []
    rows = 0
    for subset in task_subsets(spec, data_dirs):
        if spec.dataset.path is None:
            continue
        path = resolve_local(spec.dataset.path, subset, data_dirs)
        if path is None:
            continue
        try:
            n = len(read_records(path, spec.dataset.format, spec.dataset.json_key))
        except DataError:
            n = 0
        rows += n
        files.append(f"{path} ({n} rows)")
    where = (
        ", ".join(files)
        if files
        else f"hub dataset {spec.dataset.hub.id if spec.dataset.hub else '?'}"
    )
    if rows and spec.dataset.window is not None:
        return (
            f"none of the {rows} rows of {where} lies in dataset.window "
            f"({spec.dataset.window.describe()})"
        )
    return f"its data has no rows: {where}"


def _safe_id(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "_", str(value)).strip("_") or "x"


def load_items(
    spec: TaskSpec, data_dirs: Sequence[Path], empty: dict[str, str] | None = None
) -> list[Item]:
    """All items of a task, in the task's canonical order (subset by subset).

    A task none of whose own data files is there is :class:`DataNotInstalled` (its
    benchmark's folder may hold another task's files); one of several subset files
    missing is an error. ``empty`` (filled in when given): subset -> its file, for each
    subset whose data has no rows (an empty file, a header only), which gives no item."""
    items: list[Item] = []
    subsets = task_subsets(spec, data_dirs)
    path = spec.dataset.path
    own_data = path is None or any(resolve_local(path, s, data_dirs) for s in subsets)
    for subset in subsets:
        problems: dict[int, str] = {}
        rows, where = load_rows(
            spec.dataset,
            subset,
            data_dirs,
            f"{spec.source}: dataset",
            problems=problems,
            own_data=own_data,
        )
        if not rows and subset is not None and empty is not None:
            empty[subset] = f"{where} (0 rows)"
        width = max(4, len(str(len(rows) - 1)))
        prefix = f"{spec.name}-{subset}-" if subset is not None else f"{spec.name}-"
        window = spec.dataset.window
        for index, row in enumerate(rows):
            if window is not None and not in_window(window, row, f"{where}: row {index}"):
                continue
            if spec.dataset.id_field is not None:
                if spec.dataset.id_field not in row:
                    raise DataError(
                        f"{where}: row {index} has no id_field {spec.dataset.id_field!r}"
                    )
                local_id = _safe_id(row[spec.dataset.id_field])
            else:
                local_id = f"{index:0{width}d}"
            items.append(
                Item(
                    id=prefix + local_id,
                    index=index,
                    doc=row,
                    subset=subset,
                    problem=problems.get(index),
                )
            )
    ids = [i.id for i in items]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise DataError(f"{spec.source}: item id {dup!r} occurs twice (check dataset.id_field)")
    return items


def in_window(window: DateWindow, row: Doc, where: str) -> bool:
    """Whether the row's date field lies in the window (both ends inclusive)."""
    if window.field not in row:
        raise DataError(f"{where} has no date field {window.field!r} (dataset.window.field)")
    raw = row[window.field]
    text = raw.isoformat() if isinstance(raw, (datetime.date, datetime.datetime)) else str(raw)
    try:
        day = datetime.date.fromisoformat(text[:10]).isoformat()
    except ValueError:
        raise DataError(
            f"{where}: {window.field} {raw!r} is not an ISO date (dataset.window.field)"
        ) from None
    return (window.start is None or day >= window.start) and (
        window.end is None or day <= window.end
    )


def first_n(items: Sequence[Item], n: int | None) -> list[Item]:
    """The deterministic first ``n`` items of a task.

    With subsets, items are taken round-robin over subsets (the first item of each
    subset, then the second, ...) so that a limit samples every subset instead of
    exhausting the first one.
    """
    if n is None or n >= len(items):
        return list(items)
    by_subset: dict[str | None, list[Item]] = {}
    for item in items:
        by_subset.setdefault(item.subset, []).append(item)
    if len(by_subset) == 1:
        return list(items[:n])
    chosen: list[Item] = []
    queues = list(by_subset.values())
    depth = 0
    while len(chosen) < n:
        for queue in queues:
            if depth < len(queue) and len(chosen) < n:
                chosen.append(queue[depth])
        depth += 1
    order = {item.id: pos for pos, item in enumerate(items)}
    return sorted(chosen, key=lambda it: order[it.id])


def load_fewshot(
    spec: TaskSpec, subset: str | None, data_dirs: Sequence[Path]
) -> list[tuple[str, Doc]]:
    """The fixed few-shot examples (id, document) for a (sub)task, in prompt order."""
    fs = spec.fewshot
    if fs.k == 0:
        return []
    pool: list[tuple[str, Doc]]
    if fs.examples:
        pool = [(str(ex.get("id", f"fewshot-{i}")), dict(ex)) for i, ex in enumerate(fs.examples)]
    else:
        assert fs.source is not None
        rows, _ = load_rows(
            fs.source,
            subset,
            data_dirs,
            f"{spec.source}: fewshot.source",
            hub_split=fs.source.hub.split if fs.source.hub else None,
        )
        if spec.dataset.fields and not fs.source.fields:
            rows = [
                _apply_fields(r, spec.dataset.fields, f"{spec.source}: fewshot.source")
                for r in rows
            ]
        prefix = f"{subset}-" if subset is not None else ""
        pool = [(f"{prefix}{i}", r) for i, r in enumerate(rows)]
    if len(pool) < fs.k:
        raise DataError(
            f"{spec.source}: fewshot.k is {fs.k} but the pool for subset {subset!r} has {len(pool)}"
        )
    if fs.order == "seeded":
        import random

        return random.Random(fs.seed).sample(pool, fs.k)
    return pool[: fs.k]


def load_fewshot_text(
    spec: TaskSpec, subset: str | None, data_dirs: Sequence[Path]
) -> tuple[str, str]:
    """A published few-shot prompt file (``fewshot.text_file``): its text and an id naming it
    with a digest of the content. A header ending in a line of dashes is dropped."""
    import hashlib

    assert spec.fewshot.text_file is not None
    path = resolve_local(spec.fewshot.text_file, subset, data_dirs)
    if path is None:
        dirs = ", ".join(str(d) for d in data_dirs) or "(none configured)"
        raise DataError(
            f"{spec.source}: fewshot.text_file {spec.fewshot.text_file!r} (subset {subset!r}) "
            f"not found in the data directories [{dirs}]"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    lines = text.splitlines()
    for i, line in enumerate(lines[:5]):
        if line.strip() and set(line.strip()) == {"-"}:
            text = "\n".join(lines[i + 1 :])
            break
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return text.strip("\n"), f"{path.name}#{digest}"
