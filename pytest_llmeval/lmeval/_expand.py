"""An ``lmeval:`` spec (or a name given to ``--llm-lmeval-tasks``) into runners, one per
leaf task of the harness."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from pytest_llmeval.eval import ChatSettings
from pytest_llmeval.task import TaskSpec

from ._load import import_lmeval, load_tasks
from ._runner import LmEvalRunner, aggregation_names, leaf_spec


def expand(
    spec: TaskSpec,
    data_dirs: Sequence[Path],
    chat: ChatSettings,
    *,
    limit: int | None,
    allow_hub: bool,
) -> list[LmEvalRunner]:
    """The runners of the harness's leaf tasks for ``spec`` (a task: one; a group: one per
    leaf, in the harness's order), each with its requests built for the first ``limit``
    documents."""
    assert spec.lmeval is not None
    import_lmeval(spec.source)
    loaded = load_tasks(
        spec.lmeval.task,
        spec.lmeval.include_path,
        where=spec.source,
        allow_hub=allow_hub,
        num_fewshot=spec.lmeval.num_fewshot,
        fewshot_seed=spec.lmeval.fewshot_seed,
    )
    runners = []
    for leaf in loaded.tasks.values():
        own = leaf_spec(spec, leaf, spec.source)
        assert own.lmeval is not None
        own = replace(
            own,
            lmeval=replace(
                own.lmeval,
                aggregation=aggregation_names(leaf),
                groups=tuple(asdict(g) for g in leaf.groups),
            ),
        )
        runners.append(LmEvalRunner(own, leaf, data_dirs, chat, limit))
    return runners


def lmeval_meta(spec: TaskSpec) -> dict[str, Any] | None:
    """What the controller needs to aggregate a leaf's items as the harness does."""
    if spec.lmeval is None:
        return None
    return {
        "task": spec.lmeval.task,
        "metric": spec.lmeval.metric,
        "aggregation": dict(spec.lmeval.aggregation),
        "groups": [
            {**g, "leaves": list(g["leaves"]), "aggregate": [dict(a) for a in g["aggregate"]]}
            for g in spec.lmeval.groups
        ],
    }
