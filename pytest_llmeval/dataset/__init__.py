"""Datasets: loading benchmark items from local files or the hub."""

from pytest_llmeval.dataset._source import (
    Item,
    discover_subsets,
    first_n,
    load_fewshot,
    load_fewshot_text,
    load_items,
    load_rows,
    read_records,
    resolve_local,
    task_subsets,
)

__all__ = [
    "Item",
    "discover_subsets",
    "first_n",
    "load_fewshot",
    "load_fewshot_text",
    "load_items",
    "load_rows",
    "read_records",
    "resolve_local",
    "task_subsets",
]
