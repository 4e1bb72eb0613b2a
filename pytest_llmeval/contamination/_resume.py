"""A probe's model calls in fixed chunks, each kept as it is computed, so that an
interrupted probe resumes where it stopped.

A probe hands the backend all its requests at once (every rotation, rewrite and choice of
a thousand items: hours on a CPU). :class:`ChunkedBackend` passes them on in chunks of
:data:`CHUNK_REQUESTS`, cut at fixed places of the probe's request list (grouped by the
prompt prefix they share, so that a subject's few-shot block is computed once), and gives each
computed chunk to a :class:`ChunkStore` (the plugin's keeps them in the run directory,
``record.RequestChunks``). A chunk the store already holds (from an interrupted run, under
the same key) is not computed again.

A chunk is identified by the digest of its requests, in order (:func:`chunk_digest`):
the backend batches a call's requests together (sorted by length, padded), so a request's
last digits depend on the requests beside it, and only the same chunk computed again
gives the same numbers. Chunking is the same whether or not anything is stored or
reused, so a resumed probe computes exactly what an uninterrupted one does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from pytest_llmeval.model import (
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
)

#: Requests per chunk: the most an interrupted probe loses of one model's work (about a
#: minute of log-likelihoods or a few minutes of generations with a 135M model on two CPU
#: cores, seconds on a GPU), and large enough that the backend still sorts and batches
#: well. Fixed, not derived from the batch size or the machine, so that the same probe
#: computes the same chunks everywhere.
CHUNK_REQUESTS = 256


class ChunkStore(Protocol):
    """Where computed chunks are kept and found again."""

    def get(self, digest: str) -> list[dict[str, Any]] | None:
        """The stored results of the chunk with this digest, or None."""
        ...

    def put(self, digest: str, kind: str, results: list[dict[str, Any]]) -> None:
        """Keep a chunk's results (computed now, or reused from an earlier run)."""
        ...


class NoStore:
    """Chunks are computed, never kept (a process that writes no run directory)."""

    def get(self, digest: str) -> list[dict[str, Any]] | None:
        return None

    def put(self, digest: str, kind: str, results: list[dict[str, Any]]) -> None:
        return None


def chunk_digest(kind: str, requests: Sequence[Any]) -> str:
    """SHA256 over a chunk's kind (``loglikelihood``, ``generate``) and its requests, in
    order, every field included."""
    text = json.dumps(
        [kind, [dataclasses.asdict(r) for r in requests]],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def result_to_dict(result: Any) -> dict[str, Any]:
    return dataclasses.asdict(result)


R = TypeVar("R", LoglikelihoodResult, GenerateResult)


def result_from_dict(cls: type[R], data: Mapping[str, Any]) -> R:
    """A stored result as its dataclass (JSON lists back to the tuples they were)."""
    names = {f.name for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names
    }
    return cls(**values)


def _prefix(request: LoglikelihoodRequest | GenerateRequest) -> str:
    """The part of a request's prompt it shares with others: its ``shared_prefix`` hint,
    or its whole context when it gives none (the canonical-order test scores questions
    after the few-shot block as their context)."""
    return request.context[: request.shared_prefix] if request.shared_prefix else request.context


def _read_back(cls: type[R], stored: Any, n: int) -> list[R] | None:
    """A stored chunk's results, or None when there is none or it does not read as ``n``
    results of ``cls`` (a file edited or damaged by hand: the chunk is computed again)."""
    if not isinstance(stored, list) or len(stored) != n:
        return None
    try:
        return [result_from_dict(cls, d) for d in stored]
    except (TypeError, ValueError, AttributeError):
        return None


@dataclasses.dataclass
class ChunkCounts:
    """What a wrapped backend computed and reused, in requests and chunks."""

    computed: int = 0
    reused: int = 0
    chunks_computed: int = 0
    chunks_reused: int = 0

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


class ChunkedBackend:
    """``backend`` with its ``loglikelihood`` and ``generate`` calls cut into chunks of
    ``chunk`` requests, each looked up in ``store`` before it is computed and put there
    once it is. Everything else is the backend's, except the streaming calls: a probe's
    results are kept chunk by chunk, not as a stream."""

    def __init__(self, backend: Any, store: ChunkStore, chunk: int | None = None) -> None:
        chunk = CHUNK_REQUESTS if chunk is None else chunk
        if chunk < 1:
            raise ValueError(f"chunk must be at least 1, not {chunk}")
        self._backend = backend
        self.store = store
        self.chunk = chunk
        self.counts = ChunkCounts()

    @property
    def wrapped(self) -> Any:
        return self._backend

    @property
    def batch_size(self) -> int:
        return int(self._backend.batch_size)

    def chat_template(self) -> Any:
        return self._backend.chat_template()

    def info(self) -> Mapping[str, Any]:
        info: Mapping[str, Any] = self._backend.info()
        return info

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        return self._chunked(
            "loglikelihood", requests, self._backend.loglikelihood, LoglikelihoodResult
        )

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        return self._chunked("generate", requests, self._backend.generate, GenerateResult)

    def __getattr__(self, name: str) -> Any:
        if name.endswith("_stream") or name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._backend, name)

    def _chunked(
        self,
        kind: str,
        requests: Sequence[Any],
        compute: Callable[[Sequence[Any]], list[R]],
        cls: type[R],
    ) -> list[R]:
        # Requests that share a prompt prefix (a subject's few-shot block) go to the same
        # chunks: where a data file interleaves subjects, a chunk of every subject would
        # compute every few-shot state again (the backend keeps only some across calls).
        # A stable sort: the order is a function of the requests alone.
        order = sorted(range(len(requests)), key=lambda i: (_prefix(requests[i]), i))
        out: list[R | None] = [None] * len(requests)
        for start in range(0, len(order), self.chunk):
            where = order[start : start + self.chunk]
            part = [requests[i] for i in where]
            digest = chunk_digest(kind, part)
            reused = _read_back(cls, self.store.get(digest), len(part))
            if reused is not None:
                results = reused
                self.counts.reused += len(part)
                self.counts.chunks_reused += 1
            else:
                results = list(compute(part))
                if len(results) != len(part):
                    raise RuntimeError(
                        f"the backend returned {len(results)} results for {len(part)} requests"
                    )
                self.counts.computed += len(part)
                self.counts.chunks_computed += 1
            self.store.put(digest, kind, [result_to_dict(r) for r in results])
            for i, result in zip(where, results, strict=True):
                out[i] = result
        done = [r for r in out if r is not None]
        assert len(done) == len(requests)
        return done
