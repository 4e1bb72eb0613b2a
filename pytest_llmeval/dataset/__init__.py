"""Datasets: loading benchmark items from local files or the hub."""

from pytest_llmeval.dataset._source import (
    DataNotInstalled,
    Item,
    discover_subsets,
    first_n,
    hub_allowed,
    load_fewshot,
    load_fewshot_text,
    load_items,
    load_rows,
    read_records,
    resolve_local,
    task_subsets,
)

__all__ = [
    "DataNotInstalled",
    "Item",
    "discover_subsets",
    "first_n",
    "hub_allowed",
    "load_fewshot",
    "load_fewshot_text",
    "load_items",
    "load_rows",
    "read_records",
    "resolve_local",
    "task_subsets",
]
