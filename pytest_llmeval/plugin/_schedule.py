"""pytest-xdist scheduling: one task is one unit of work.

A task's items must run on one worker: its model loads once there and its batches stay
full (the evaluator computes an item together with the task's next selected items, so a
task split over workers computes items that another worker runs again). xdist's
``loadgroup`` would keep them together through the ``xdist_group`` marks the items carry,
but it marks the groups by rewriting ``item._nodeid`` on the worker, which pytest 9 no
longer reads (a node's id is ``_id``): the groups are silently lost and every item is
scheduled on its own. So plain ``-n N`` (``--dist load``) gets this scheduler instead:
xdist's ``LoadScopeScheduling`` with the task file (``benchmarks/gsm8k.yaml``) as the
scope of a YAML task's items and every other test as its own scope, as ``load`` does.

Imported only from the ``pytest_xdist_make_scheduler`` hook, so only where xdist runs.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

TASK_FILE_SUFFIXES = (".yaml", ".yml")


def task_scope(nodeid: str) -> str:
    """The unit of work of a test: its task file for an item of a YAML task, else itself."""
    path, sep, _ = nodeid.partition("::")
    if sep and path.endswith(TASK_FILE_SUFFIXES):
        return path
    return nodeid


class TaskScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """``LoadScopeScheduling`` whose scopes are tasks (see the module)."""

    def _split_scope(self, nodeid: str) -> str:
        return task_scope(nodeid)
