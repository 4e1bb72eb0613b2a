"""Datasets: loading benchmark items from local files or the hub."""

from pytest_llmeval.dataset._source import (
    DataNotInstalled,
    Item,
    describe_no_rows,
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
    task_data_files,
    task_subsets,
)

__all__ = [
    "DataNotInstalled",
    "Item",
    "describe_no_rows",
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
    "task_data_files",
    "task_subsets",
]
