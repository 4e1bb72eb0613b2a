"""lm-evaluation-harness tasks as pytest items (the optional ``lmeval`` extra).

:func:`expand` loads a harness task or group named by an ``lmeval:`` spec (or
``--llm-lmeval-tasks``) and returns one :class:`LmEvalRunner` per leaf task, each with its
items built by the harness; :func:`lmeval_results` aggregates recorded items into the
harness's task and group scores.
"""

from pytest_llmeval.lmeval._aggregate import group_metrics, lmeval_results, task_metrics
from pytest_llmeval.lmeval._expand import expand, lmeval_meta
from pytest_llmeval.lmeval._load import EXTRA, PREFIX, LoadedTask, import_lmeval, load_tasks
from pytest_llmeval.lmeval._runner import LmEvalRunner, leaf_spec, primary_metric

__all__ = [
    "EXTRA",
    "PREFIX",
    "LmEvalRunner",
    "LoadedTask",
    "expand",
    "group_metrics",
    "import_lmeval",
    "leaf_spec",
    "lmeval_meta",
    "lmeval_results",
    "load_tasks",
    "primary_metric",
    "task_metrics",
]
