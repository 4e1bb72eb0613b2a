"""lm-evaluation-harness's own task configs, reading our local copies of their data.

The harness's shipped tasks read their data from the Hugging Face hub, which this
machine (and CI) cannot reach. :func:`write_local_tasks` writes a small include
directory of task YAMLs that ``include:`` the harness's own YAML of each task unchanged
(prompts, few-shot settings, filters, metrics) and only point its dataset at the local
files in the data directory (``../shared/benchmarks``):

- ``gsm8k_cot_local``: the harness's ``gsm8k_cot`` (8-shot chain of thought,
  ``generate_until``, the ``strict-match`` and ``flexible-extract`` regex filters);
- ``ceval-valid-local_<subject>``: the harness's ``ceval-valid_<subject>`` for each of
  the 52 C-Eval subjects (log-likelihood multiple choice; zero-shot unless a few-shot
  count is given, as in the harness), and the group ``ceval-valid-local`` over them
  with the harness's ``ceval-valid`` aggregation (mean of ``acc`` and ``acc_norm``
  weighted by subject size).

Used by ``python -m tools.lmeval_items`` (the same items through ``pytest
--llm-lmeval-tasks`` and through the ``lm_eval`` CLI). lm-eval is imported only to find
where its task configs are installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tools.lmeval_tasks import _Dumper, _FunctionRef

CEVAL_COLUMNS = ("id", "question", "A", "B", "C", "D", "answer")
FAMILIES = ("gsm8k_cot_local", "ceval-valid-local")


def lmeval_tasks_dir() -> Path:
    import lm_eval

    return Path(lm_eval.__file__).parent / "tasks"


def _find(data_dirs: Sequence[Path], relative: str) -> Path:
    for base in data_dirs:
        path = Path(base) / relative
        if path.exists():
            return path.resolve()
    raise FileNotFoundError(f"{relative} is not in any of {[str(d) for d in data_dirs]}")


def _write(out_dir: Path, name: str, config: dict[str, Any]) -> None:
    text = yaml.dump(config, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=10**6)
    (out_dir / f"{name}.yaml").write_text(text, encoding="utf-8")


def ceval_subjects() -> list[str]:
    """The subjects of the harness's ``ceval-valid`` group, in its order."""
    group = yaml.safe_load((lmeval_tasks_dir() / "ceval" / "_ceval-valid.yaml").read_text())
    return [str(t).removeprefix("ceval-valid_") for t in group["task"]]


def write_local_tasks(out_dir: Path, data_dirs: Sequence[Path]) -> list[str]:
    """Write the local-data task YAMLs into ``out_dir``; returns the names of the tasks
    and groups written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    shipped = lmeval_tasks_dir()
    _write(
        out_dir,
        "gsm8k_cot_local",
        {
            "include": str(shipped / "gsm8k" / "gsm8k-cot.yaml"),
            "task": "gsm8k_cot_local",
            "tag": [],
            "dataset_path": "json",
            "dataset_name": None,
            "dataset_kwargs": {"data_files": {"test": str(_find(data_dirs, "gsm8k/test.jsonl"))}},
        },
    )
    leaves = []
    for subject in ceval_subjects():
        name = f"ceval-valid-local_{subject}"
        leaves.append(name)
        _write(
            out_dir,
            name,
            {
                "include": str(shipped / "ceval" / f"ceval-valid_{subject}.yaml"),
                "task": name,
                "dataset_path": "csv",
                "dataset_name": None,
                "dataset_kwargs": {
                    "data_files": {
                        "val": str(_find(data_dirs, f"ceval/val/{subject}_val.csv")),
                        "dev": str(_find(data_dirs, f"ceval/dev/{subject}_dev.csv")),
                    },
                    # The columns of both splits (the dev split's extra "explanation",
                    # which the harness's prompt does not use, would make the splits'
                    # schemas differ), every cell as the text in the file (pandas would
                    # read "1" as 1).
                    "usecols": list(CEVAL_COLUMNS),
                    "keep_default_na": False,
                    "na_filter": False,
                    "converters": {c: _FunctionRef("builtins.str") for c in CEVAL_COLUMNS},
                },
            },
        )
    _write(
        out_dir,
        "_ceval-valid-local",
        {
            "group": "ceval-valid-local",
            "task": leaves,
            "aggregate_metric_list": [
                {"metric": "acc", "aggregation": "mean", "weight_by_size": True},
                {"metric": "acc_norm", "aggregation": "mean", "weight_by_size": True},
            ],
            "metadata": {"version": 2.0},
        },
    )
    return ["gsm8k_cot_local", *leaves, "ceval-valid-local"]
