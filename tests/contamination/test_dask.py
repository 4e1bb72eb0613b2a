"""The per-shard scan as a map on Dask: a local cluster gives the local runner's report."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval.contamination._corpus import plan_shards, resolve_corpus
from pytest_llmeval.contamination._ngram import (
    BenchmarkIndex,
    merge,
    scan_local,
    scan_shard,
    scan_with_dask,
)

distributed = pytest.importorskip("distributed")


def _words(rng: random.Random, k: int) -> str:
    return " ".join(
        "".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 5))) for _ in range(k)
    )


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def test_dask_equals_the_local_runner(tmp_path: Path, client: Any) -> None:
    rng = random.Random(3)
    items = [(f"item-{i}", _words(rng, 40)) for i in range(6)]
    index = BenchmarkIndex.build(items, 13)
    docs = [_words(rng, rng.randint(30, 90)) for _ in range(400)]
    docs[17] = items[0][1]
    docs[250] = "x " + items[1][1] + " y"
    docs[399] = " ".join(items[2][1].split()[:20])
    for name, part in (("a.jsonl", docs[:200]), ("b.jsonl", docs[200:])):
        (tmp_path / name).write_text("".join(json.dumps({"text": d}) + "\n" for d in part))
    shards = plan_shards(resolve_corpus([str(tmp_path)]), shard_bytes=3000)
    assert len(shards) > 4

    local = scan_local(shards, index, workers=1)
    remote = scan_with_dask(shards, index, client)
    assert remote.items == local.items
    assert (remote.bytes_scanned, remote.documents, remote.shards) == (
        local.bytes_scanned,
        local.documents,
        local.shards,
    )
    assert remote.workers == 2
    assert {r.id for r in remote.with_overlap()} == {"item-0", "item-1", "item-2"}
    assert remote.item("item-2").fraction == pytest.approx(8 / 28)

    # The documented dask.bag recipe gives the same report.
    import dask.bag as db
    from dask import delayed

    bag = db.from_sequence(shards, npartitions=len(shards)).map(
        scan_shard, index=delayed(index, traverse=False)
    )
    assert merge(bag.compute(), index).items == local.items
