"""Datasets: loading benchmark items from local files or the hub."""

from pytest_llmeval.dataset._source import (
    DataNotInstalled,
    Item,
    discover_subsets,
    env_data_dirs,
    first_n,
    hub_allowed,
    load_fewshot,
    load_fewshot_text,
    load_items,
    load_rows,
    path_list,
    read_records,
    resolve_local,
    task_subsets,
)

__all__ = [
    "DataNotInstalled",
    "Item",
    "discover_subsets",
    "env_data_dirs",
    "first_n",
    "hub_allowed",
    "load_fewshot",
    "load_fewshot_text",
    "load_items",
    "load_rows",
    "path_list",
    "read_records",
    "resolve_local",
    "task_subsets",
]
