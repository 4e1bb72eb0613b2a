"""Task and group scores of lm-evaluation-harness tasks, as the harness aggregates them.

Computed by the controller from the item records (under xdist the items ran elsewhere and
the harness's ``Task`` objects are not here): each leaf task's ``metric,filter`` values go
through the harness's registered aggregation of that metric; each group through its
``aggregate_metric_list`` (``lm_eval.api.metrics.aggregate_subtask_metrics``, weighted by
subtask size unless the group says otherwise), over the subtasks that ran.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def task_metrics(meta: Mapping[str, Any], results: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One leaf task's aggregated metrics from its scored item records."""
    from lm_eval.api.registry import get_aggregation

    values: dict[str, list[Any]] = {}
    n = 0
    for record in results:
        metrics = ((record.get("details") or {}).get("lmeval") or {}).get("metrics") or {}
        n += 1
        for key, value in metrics.items():
            values.setdefault(key, []).append(value)
    out: dict[str, Any] = {"sample_len": n}
    aggregations = meta.get("aggregation") or {}
    for key, vals in values.items():
        metric = key.partition(",")[0]
        fn = get_aggregation(str(aggregations.get(metric, "mean")))
        if fn is None:
            out[key] = None
            continue
        out[key] = float(fn(vals)) if len(vals) == n else None
    return out


def group_metrics(
    groups: Iterable[Mapping[str, Any]], tasks: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Each group's aggregate over its leaf tasks that ran (``tasks``: harness name to
    :func:`task_metrics`), with the leaves that did not run listed."""
    from lm_eval.api.metrics import aggregate_subtask_metrics

    out: dict[str, dict[str, Any]] = {}
    for group in groups:
        name = str(group["name"])
        if name in out:
            continue
        leaves = [str(t) for t in group["leaves"]]
        ran = [t for t in leaves if t in tasks]
        entry: dict[str, Any] = {
            "subtasks": len(leaves),
            "ran": len(ran),
            "missing": [t for t in leaves if t not in tasks],
            "sample_len": sum(int(tasks[t].get("sample_len", 0)) for t in ran),
        }
        for agg in group.get("aggregate") or ():
            metric = str(agg["metric"])
            filters = agg.get("filter_list")
            if filters is None:
                filters = sorted(
                    {
                        k.partition(",")[2]
                        for t in ran
                        for k in tasks[t]
                        if k.startswith(metric + ",")
                    }
                )
            for filter_key in filters:
                key = f"{metric},{filter_key}"
                have = [t for t in ran if tasks[t].get(key) is not None]
                if not have:
                    continue
                entry[key] = float(
                    aggregate_subtask_metrics(
                        [tasks[t][key] for t in have],
                        [int(tasks[t]["sample_len"]) for t in have],
                        bool(agg.get("weight_by_size", True)),
                    )
                )
        out[name] = entry
    return out


def lmeval_results(
    leaves: Mapping[str, tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]],
) -> dict[str, Any]:
    """``{"tasks": ..., "groups": ...}`` for the run record, from each leaf's meta
    (``lmeval`` block of the item meta) and its scored item records."""
    tasks = {str(meta["task"]): task_metrics(meta, records) for meta, records in leaves.values()}
    groups = [g for meta, _ in leaves.values() for g in meta.get("groups") or ()]
    return {"tasks": tasks, "groups": group_metrics(groups, tasks)}
