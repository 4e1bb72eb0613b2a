"""A probe's model calls in fixed chunks, kept as computed and reused on resume."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval.contamination import ChunkedBackend, NoStore, chunk_digest
from pytest_llmeval.model import (
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    ModelSettings,
    load_backend,
)
from pytest_llmeval.record import RequestChunks, resumable_chunks


class Counting:
    """A backend whose score of a request is its continuation's length plus the size of
    the call it came in (so a result shows which call computed it)."""

    batch_size = 2

    def __init__(self) -> None:
        self.calls: list[int] = []

    def loglikelihood(self, requests: list[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        self.calls.append(len(requests))
        return [
            LoglikelihoodResult(
                logprob=-len(r.continuation) - len(requests) / 100,
                is_greedy=False,
                n_tokens=1,
                token_logprobs=(-math.inf, -1.5),
            )
            for r in requests
        ]

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        self.calls.append(len(requests))
        return [
            GenerateResult(text=r.context[::-1], n_tokens=3, finish_reason="eos") for r in requests
        ]

    def chat_template(self) -> None:
        return None

    def info(self) -> dict[str, Any]:
        return {"backend": "counting"}

    def generate_stream(self, requests: list[GenerateRequest]) -> None:  # never reached
        raise AssertionError("a chunked probe does not stream")

    def clear_prefix_cache(self) -> str:
        return "cleared"


def _requests(n: int) -> list[LoglikelihoodRequest]:
    return [LoglikelihoodRequest(context="Q", continuation="x" * (i + 1)) for i in range(n)]


class Memory:
    def __init__(self) -> None:
        self.chunks: dict[str, list[dict[str, Any]]] = {}
        self.puts: list[str] = []

    def get(self, digest: str) -> list[dict[str, Any]] | None:
        return self.chunks.get(digest)

    def put(self, digest: str, kind: str, results: list[dict[str, Any]]) -> None:
        self.chunks[digest] = results
        self.puts.append(digest)


def test_calls_are_cut_at_fixed_places_and_results_keep_their_order() -> None:
    backend = Counting()
    wrapped = ChunkedBackend(backend, NoStore(), chunk=4)
    results = wrapped.loglikelihood(_requests(10))
    assert backend.calls == [4, 4, 2]
    # each result is its own request's (length), computed in its chunk (size)
    assert [r.logprob for r in results] == [
        -(i + 1) - size / 100 for i, size in zip(range(10), [4] * 8 + [2] * 2, strict=True)
    ]
    assert wrapped.counts.to_dict() == {
        "computed": 10,
        "reused": 0,
        "chunks_computed": 3,
        "chunks_reused": 0,
    }


def test_a_stored_chunk_is_not_computed_again_and_reads_back_exactly() -> None:
    store = Memory()
    first = ChunkedBackend(Counting(), store, chunk=4).loglikelihood(_requests(10))
    again_backend = Counting()
    again = ChunkedBackend(again_backend, store, chunk=4)
    assert again.loglikelihood(_requests(10)) == first  # -inf and tuples survive JSON-like data
    assert again_backend.calls == []
    assert again.counts.reused == 10 and again.counts.chunks_reused == 3
    # a longer list: its first chunks are the same, the rest is computed
    more_backend = Counting()
    more = ChunkedBackend(more_backend, store, chunk=4)
    more.loglikelihood(_requests(13))
    # chunks [0:4] and [4:8] are stored; [8:12] differs from [8:10] and is computed
    assert more_backend.calls == [4, 1]
    assert (more.counts.reused, more.counts.computed) == (8, 5)


def test_chunk_digests_cover_every_field_and_the_order() -> None:
    a, b = _requests(2)
    assert chunk_digest("loglikelihood", [a, b]) != chunk_digest("loglikelihood", [b, a])
    detailed = LoglikelihoodRequest(context="Q", continuation="x", token_detail=True)
    assert chunk_digest("loglikelihood", [a]) != chunk_digest("loglikelihood", [detailed])
    assert chunk_digest("loglikelihood", [a]) != chunk_digest("generate", [a])


def test_the_wrapper_offers_no_stream_and_forwards_the_rest() -> None:
    wrapped = ChunkedBackend(Counting(), NoStore())
    assert not hasattr(wrapped, "generate_stream")
    assert wrapped.clear_prefix_cache() == "cleared"
    assert wrapped.batch_size == 2 and wrapped.info() == {"backend": "counting"}
    with pytest.raises(ValueError, match="at least 1"):
        ChunkedBackend(Counting(), NoStore(), chunk=0)


def test_chunks_in_a_run_directory_are_offered_only_from_interrupted_runs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run = out / "20260101-000000_m_abc"
    (run / "tasks").mkdir(parents=True)
    store = RequestChunks(run, "quiz-circular", "k1", {})
    wrapped = ChunkedBackend(Counting(), store, chunk=4)
    results = wrapped.generate(
        [GenerateRequest(context=f"c{i}", max_new_tokens=4) for i in range(5)]
    )
    lines = (run / "contamination" / "requests" / "quiz-circular.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["kind"] == "generate"
    # a run from before leases, without a summary, counts as interrupted
    found, sources = resumable_chunks(out, "quiz-circular", "k1")
    assert sources == [run] and len(found) == 2
    assert resumable_chunks(out, "quiz-circular", "another key") == ({}, [])
    assert resumable_chunks(out, "quiz-membership", "k1") == ({}, [])
    reused = ChunkedBackend(
        Counting(), RequestChunks(tmp_path / "new", "quiz-circular", "k1", found), chunk=4
    )
    assert (
        reused.generate([GenerateRequest(context=f"c{i}", max_new_tokens=4) for i in range(5)])
        == results
    )
    # the resumed run holds every chunk it used, so that it can be resumed in turn
    assert (
        len((tmp_path / "new/contamination/requests/quiz-circular.jsonl").read_text().splitlines())
        == 2
    )
    # a torn last line (a crash mid-write) is skipped
    with (run / "contamination" / "requests" / "quiz-circular.jsonl").open("a") as fh:
        fh.write('{"key": "k1", "chunk": "trunc')
    assert len(resumable_chunks(out, "quiz-circular", "k1")[0]) == 2
    (run / "metrics_summary.json").write_text("{}")  # finished: not offered
    assert resumable_chunks(out, "quiz-circular", "k1") == ({}, [])


def test_a_real_model_reads_back_bit_for_bit(tiny_model_dir: Path) -> None:
    backend = load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=2))
    requests = [
        LoglikelihoodRequest(
            context=f"Question {i}:", continuation=f" answer {i}", token_detail=True
        )
        for i in range(5)
    ]
    store = Memory()
    computed = ChunkedBackend(backend, store, chunk=2).loglikelihood(requests)
    stored = [json.loads(json.dumps(v)) for v in store.chunks.values()]  # as a file holds them
    store.chunks = dict(zip(store.chunks, stored, strict=True))
    assert ChunkedBackend(backend, store, chunk=2).loglikelihood(requests) == computed
    assert computed[0].token_zscores and isinstance(computed[0].token_zscores, tuple)


def test_the_key_holds_what_decides_the_numbers_and_nothing_that_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytest_llmeval.record import _resume, model_call_key

    info = {"backend": "hf", "dtype": "float32", "batch_size": 8, "bos": {"add": False}}
    key = model_call_key(info, "abc", None, {"role": "model"})
    # what changes while a run goes on, or names a path, does not count
    moving = {**info, "decode_step": {"step": "fused"}, "model_path": "/elsewhere", "model": "m"}
    assert model_call_key(moving, "abc", None, {"role": "model"}) == key
    for other in (
        model_call_key({**info, "batch_size": 4}, "abc", None, {"role": "model"}),
        model_call_key({**info, "bos": {"add": True}}, "abc", None, {"role": "model"}),
        model_call_key(info, "abd", None, {"role": "model"}),
        model_call_key(info, "abc", "rev2", {"role": "model"}),
        model_call_key(info, "abc", None, {"role": "reference"}),
    ):
        assert other != key
    monkeypatch.setattr(_resume, "backend_code_digest", lambda: "edited backend")
    assert model_call_key(info, "abc", None, {"role": "model"}) != key


def test_a_stored_chunk_that_does_not_read_back_is_computed_again() -> None:
    store = Memory()
    first = ChunkedBackend(Counting(), store, chunk=4).loglikelihood(_requests(8))
    digests = list(store.chunks)
    store.chunks[digests[0]] = [{"logprob": -1.0}] * 4  # fields missing
    store.chunks[digests[1]] = store.chunks[digests[1]][:3]  # a result short
    backend = Counting()
    again = ChunkedBackend(backend, store, chunk=4)
    assert again.loglikelihood(_requests(8)) == first
    assert backend.calls == [4, 4] and again.counts.reused == 0


def test_requests_of_one_prompt_prefix_share_chunks_and_results_keep_their_order() -> None:
    """Where a data file interleaves subjects, chunks in the probe's order would each hold
    every subject and compute every few-shot block again; grouped, each is computed once."""
    calls: list[list[str]] = []

    class Contexts(Counting):
        def loglikelihood(self, requests: list[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
            calls.append([r.context for r in requests])
            return super().loglikelihood(requests)

    subjects = ["history", "physics", "law"]
    requests = [
        LoglikelihoodRequest(
            context=f"{subjects[i % 3]} shots. Q{i}",
            continuation="x" * (i + 1),
            shared_prefix=len(subjects[i % 3]) + 7,
        )
        for i in range(12)
    ]
    results = ChunkedBackend(Contexts(), NoStore(), chunk=4).loglikelihood(requests)
    # one subject per chunk (sorted by prefix), each in the order the probe gave them
    assert calls == [
        ["history shots. Q0", "history shots. Q3", "history shots. Q6", "history shots. Q9"],
        ["law shots. Q2", "law shots. Q5", "law shots. Q8", "law shots. Q11"],
        ["physics shots. Q1", "physics shots. Q4", "physics shots. Q7", "physics shots. Q10"],
    ]
    assert [r.logprob for r in results] == [-(i + 1) - 0.04 for i in range(12)]
    # without a hint the whole context is the prefix (the canonical-order test's questions)
    calls.clear()
    plain = [LoglikelihoodRequest(context=f"c{i % 2}", continuation="y") for i in range(8)]
    ChunkedBackend(Contexts(), NoStore(), chunk=4).loglikelihood(plain)
    assert calls == [["c0"] * 4, ["c1"] * 4]
